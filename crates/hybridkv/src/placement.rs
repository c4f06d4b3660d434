//! Size classes (Parallax §2-3): every pair is classified by its whole size (key + value)
//! when it is written, and each class is stored where it costs least.
//!
//! Owns: the classification rule and the placement modes. Never: moves data.
//!
//! Why 120 and 1024 bytes: the paper's model compares the index entry a separated pair
//! leaves in the tree (a fixed prefix plus a log pointer, ~20-30 bytes) with the pair
//! itself. The ratio *prefix / pair size* says how much of each compaction rewrite a
//! separation saves: at >= 1 KiB pairs the pointer is under ~2-3 % of the pair, so
//! separation saves nearly the whole rewrite cost and the large log's GC is cheap per byte
//! (few pairs per segment to look up); below ~120 bytes the pointer is 20 % or more of
//! the pair, separation saves little, and GC must look up many pairs per segment, so small
//! pairs stay in place. In between (ratio 0.02-0.2) pairs are *medium*: logged while they
//! travel the small upper levels and merged in place at the last level.

use crate::options::Options;

/// Where values go (`Options::placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Small pairs in place, medium pairs in the transient log until the merge level,
    /// large pairs in the large log (the Parallax design). Default.
    #[default]
    Hybrid,
    /// Every pair in the tree's leaves (like RocksDB).
    InPlace,
    /// Every value in the large log, only keys and pointers in the tree (like BlobDB or
    /// WiscKey).
    AllLog,
}

/// The size class of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// Stored in place in the leaves.
    Small,
    /// Logged in the transient log until the merge level, then in place.
    Medium,
    /// Stored in the large log; the tree holds a pointer.
    Large,
}

/// The category of a pair of `key_len + value_len` bytes under `opts`.
pub(crate) fn classify(opts: &Options, key_len: usize, value_len: usize) -> Category {
    let size = key_len + value_len;
    match opts.placement {
        Placement::InPlace => Category::Small,
        Placement::AllLog => Category::Large,
        Placement::Hybrid if size >= opts.large_threshold => Category::Large,
        Placement::Hybrid if size >= opts.small_threshold => Category::Medium,
        Placement::Hybrid => Category::Small,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_and_modes() {
        let o = Options::default();
        assert_eq!(classify(&o, 24, 9), Category::Small);
        assert_eq!(classify(&o, 24, 95), Category::Small);
        assert_eq!(classify(&o, 24, 96), Category::Medium);
        assert_eq!(classify(&o, 24, 104), Category::Medium);
        assert_eq!(classify(&o, 24, 999), Category::Medium);
        assert_eq!(classify(&o, 24, 1000), Category::Large);
        let inplace = Options {
            placement: Placement::InPlace,
            ..Options::default()
        };
        assert_eq!(classify(&inplace, 24, 1 << 20), Category::Small);
        let all = Options {
            placement: Placement::AllLog,
            ..Options::default()
        };
        assert_eq!(classify(&all, 24, 1), Category::Large);
        // Parallax-MS: medium folded into small.
        let ms = Options {
            small_threshold: 1024,
            ..Options::default()
        };
        assert_eq!(classify(&ms, 24, 104), Category::Small);
        // Parallax-ML: medium folded into large.
        let ml = Options {
            large_threshold: 120,
            ..Options::default()
        };
        assert_eq!(classify(&ml, 24, 104), Category::Large);
    }
}
