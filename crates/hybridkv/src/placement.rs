//! Size classes (Parallax §2-3): every pair is classified by its whole size (key + value)
//! when it is written, and each class is stored where it costs least.
//!
//! Owns: the classification rule and the placement modes. Never: moves data, or reads
//! `Options` (`Options::classify` passes the thresholds in).
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

/// Where values go (`Options::placement`; this module knows nothing of `Options`).
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

impl Placement {
    /// The category of a pair of `key_len + value_len` bytes: medium from
    /// `small_threshold` bytes on, large from `large_threshold` on (`Hybrid` only).
    pub(crate) fn classify(
        self,
        small_threshold: usize,
        large_threshold: usize,
        key_len: usize,
        value_len: usize,
    ) -> Category {
        let size = key_len + value_len;
        match self {
            Placement::InPlace => Category::Small,
            Placement::AllLog => Category::Large,
            Placement::Hybrid if size >= large_threshold => Category::Large,
            Placement::Hybrid if size >= small_threshold => Category::Medium,
            Placement::Hybrid => Category::Small,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_and_modes() {
        let hybrid = |k, v| Placement::Hybrid.classify(120, 1024, k, v);
        assert_eq!(hybrid(24, 9), Category::Small);
        assert_eq!(hybrid(24, 95), Category::Small);
        assert_eq!(hybrid(24, 96), Category::Medium);
        assert_eq!(hybrid(24, 104), Category::Medium);
        assert_eq!(hybrid(24, 999), Category::Medium);
        assert_eq!(hybrid(24, 1000), Category::Large);
        assert_eq!(
            Placement::InPlace.classify(120, 1024, 24, 1 << 20),
            Category::Small
        );
        assert_eq!(
            Placement::AllLog.classify(120, 1024, 24, 1),
            Category::Large
        );
        // Parallax-MS: medium folded into small.
        assert_eq!(
            Placement::Hybrid.classify(1024, 1024, 24, 104),
            Category::Small
        );
        // Parallax-ML: medium folded into large.
        assert_eq!(
            Placement::Hybrid.classify(120, 120, 24, 104),
            Category::Large
        );
    }
}
