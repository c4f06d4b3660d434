//! The pinned index of one level file (PinK's level pinning): the first key and the offset
//! of every leaf, held in memory, so that a point lookup or a seek finds its leaf with one
//! binary search over contiguous memory (over dense 8-byte key heads, see [`Fences`]),
//! without descending index nodes through the node cache, and reads at most one leaf per
//! run; a key below the file's first key is answered without any read.
//!
//! Owns: the fence arrays ([`Fences`]) and their charge to the database's pinning budget,
//! and the charge of the file's large pointer table (`super::large_pointers`) to its own
//! (`crate::cache::PinBudget`; a file that does not fit is simply not pinned and reads
//! through the node cache). Never: reads a file itself (the reader builds the fences from index nodes whose
//! checksums it checked) or holds anything that is not a copy of verified bytes.

use super::large_pointers::LargePointers;
use crate::cache::PinBudget;
use std::sync::Arc;

/// First key and offset of every leaf of one file, in key order.
///
/// Once sealed ([`Fences::seal`]) the fences also keep a *head* per key: the 8 bytes after
/// the prefix the fences share, as a big-endian number (see [`Heads`]), in one dense
/// array. A lookup's binary search runs over the heads, one cache line per probe instead of
/// two (the key's end, then its bytes) and a `memcmp` call, and compares whole keys only
/// among the few fences whose head ties with the key's.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    /// The keys, one after the other.
    keys: Vec<u8>,
    /// End of key `i` in `keys` (key `i` starts where key `i - 1` ends).
    ends: Vec<u32>,
    /// Offset of leaf `i`.
    leaves: Vec<u64>,
    /// Set by [`Fences::seal`]: the shared prefix and the head of every key.
    heads: Option<Heads>,
}

/// The heads of sealed fences. A key's head is 0 when the key sorts before every key with
/// the shared `prefix`, `u64::MAX` when after all of them, and otherwise the 8 bytes after
/// the prefix (zero-padded), big-endian. Heads never sort against their keys: `a <= b`
/// gives `head(a) <= head(b)`, so `head(a) < head(b)` gives `a < b`, and only keys with
/// equal heads need comparing.
///
/// A search first finds its block of [`HEAD_BLOCK`] heads through `tops` (every block's
/// first head: small enough to stay in the processor's caches between lookups, where a
/// binary search of all the heads of a large file would wait on memory at each of its
/// last dozen probes), then searches within that block (two cache lines).
#[derive(Debug, Default)]
struct Heads {
    prefix: Vec<u8>,
    heads: Vec<u64>,
    /// `heads[HEAD_BLOCK * j]` for every `j`.
    tops: Vec<u64>,
}

/// Heads per block of [`Heads::tops`].
const HEAD_BLOCK: usize = 16;

impl Heads {
    /// The range of fences whose heads equal `probe`'s: those before it sort below any key
    /// with that head, those after it above.
    fn ties(&self, probe: u64) -> (usize, usize) {
        // The first block whose first head is not below `probe`: the first such head lies
        // after the previous block's first fence and at or before this block's first.
        let t = self.tops.partition_point(|&x| x < probe);
        let start = t.checked_sub(1).map_or(0, |b| b * HEAD_BLOCK + 1);
        let end = (t * HEAD_BLOCK).min(self.heads.len());
        let block = self.heads.get(start..end).unwrap_or_default();
        let lo = start + block.partition_point(|&x| x < probe);
        // Keys tying on 8 bytes after the prefix are few: walk them.
        let hi = lo
            + self
                .heads
                .get(lo..)
                .unwrap_or_default()
                .iter()
                .take_while(|&&x| x == probe)
                .count();
        (lo, hi)
    }

    fn of(&self, key: &[u8]) -> u64 {
        let n = self.prefix.len();
        // A key shorter than the prefix is compared whole: equal to none of its prefixes
        // of the prefix's length, it sorts before (a proper prefix of it) or after.
        match key.get(..n).map_or(key, |k| k).cmp(&self.prefix[..]) {
            std::cmp::Ordering::Less => 0,
            std::cmp::Ordering::Greater => u64::MAX,
            std::cmp::Ordering::Equal => {
                let rest = key.get(n..).unwrap_or_default();
                let mut b = [0u8; 8];
                let take = rest.len().min(8);
                b[..take].copy_from_slice(&rest[..take]);
                u64::from_be_bytes(b)
            }
        }
    }
}

impl Fences {
    /// Appends the fence of the next leaf. `Err` if `key` does not sort after the previous
    /// fence's key (a damaged index) or the keys outgrow the 4 GiB the offsets address.
    pub(crate) fn push(&mut self, key: &[u8], leaf: u64) -> Result<(), &'static str> {
        if let Some(last) = self.len().checked_sub(1).and_then(|i| self.key(i)) {
            if last >= key {
                return Err("index pivots out of order");
            }
        }
        self.heads = None;
        self.keys.extend_from_slice(key);
        let end = u32::try_from(self.keys.len()).map_err(|_| "index keys exceed 4 GiB")?;
        self.ends.push(end);
        self.leaves.push(leaf);
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.leaves.len()
    }

    fn key(&self, i: usize) -> Option<&[u8]> {
        let start = match i.checked_sub(1) {
            Some(p) => *self.ends.get(p)? as usize,
            None => 0,
        };
        let end = *self.ends.get(i)? as usize;
        self.keys.get(start..end)
    }

    /// The position of the leaf whose range holds `key`: the last fence at or below it.
    /// `None` when `key` sorts before the first fence (the file holds no such key).
    pub(crate) fn leaf_for(&self, key: &[u8]) -> Option<usize> {
        // First fence greater than `key`; the leaf before it holds `key`.
        let (lo, hi) = match &self.heads {
            Some(h) => {
                // Fences with a smaller head sort below `key`, those with a larger one
                // above it: only the tie between them needs whole keys.
                h.ties(h.of(key))
            }
            None => (0, self.len()),
        };
        self.upper_bound_by_keys(key, lo, hi)?.checked_sub(1)
    }

    /// The first fence in `lo..hi` above `key` (`hi` when none is), comparing whole keys;
    /// the fences before `lo` must sort at or below `key` and those from `hi` on above it.
    fn upper_bound_by_keys(&self, key: &[u8], mut lo: usize, mut hi: usize) -> Option<usize> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid)? <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    /// Computes the heads of the fences pushed so far (a later push drops them): the
    /// prefix is the one the second and the last key share (the first key of a file's
    /// first leaf is often shorter, even empty), so that the heads tell apart the bytes
    /// in which the fences differ.
    pub(crate) fn seal(&mut self) {
        let Some(last) = self.len().checked_sub(1).and_then(|i| self.key(i)) else {
            return;
        };
        let second = self.key(1.min(self.len() - 1)).unwrap_or(last);
        let shared = super::node::common_prefix_len(second, last);
        let mut heads = Heads {
            prefix: last[..shared].to_vec(),
            heads: Vec::with_capacity(self.len()),
            tops: Vec::with_capacity(self.len().div_ceil(HEAD_BLOCK)),
        };
        for i in 0..self.len() {
            let head = self.key(i).map_or(0, |k| heads.of(k));
            heads.heads.push(head);
        }
        heads.tops = heads.heads.iter().step_by(HEAD_BLOCK).copied().collect();
        self.heads = Some(heads);
    }

    /// Offset of the leaf at position `i`.
    pub(crate) fn leaf_offset(&self, i: usize) -> Option<u64> {
        self.leaves.get(i).copied()
    }

    /// Bytes the arrays hold.
    pub(crate) fn memory_bytes(&self) -> u64 {
        let heads = self.heads.as_ref().map_or(0, |h| {
            h.prefix.capacity() + 8 * (h.heads.capacity() + h.tops.capacity())
        });
        (self.keys.capacity() + 4 * self.ends.capacity() + 8 * self.leaves.capacity() + heads)
            as u64
    }

    fn shrink(&mut self) {
        self.keys.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.leaves.shrink_to_fit();
    }
}

/// A file's fences, charged to the pinning budget, and its large pointer table when the
/// file has one and the table budget had room for it, charged to that one, for as long as
/// they live.
#[derive(Debug)]
pub(crate) struct PinnedIndex {
    fences: Fences,
    bytes: u64,
    budget: Arc<PinBudget>,
    large: Option<PinnedTable>,
}

/// A pinned large pointer table and its charge.
#[derive(Debug)]
struct PinnedTable {
    table: LargePointers,
    bytes: u64,
    budget: Arc<PinBudget>,
}

impl Drop for PinnedTable {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

impl PinnedIndex {
    /// Pins `fences` if `budget` has room for them, and with them `large` if
    /// `table_budget` has room for it. The budgets are apart, so a table never takes the
    /// room another file's fences would need.
    pub(crate) fn charge(
        mut fences: Fences,
        large: Option<LargePointers>,
        budget: &Arc<PinBudget>,
        table_budget: &Arc<PinBudget>,
    ) -> Option<Self> {
        fences.shrink();
        fences.seal();
        let bytes = fences.memory_bytes();
        if !budget.try_reserve(bytes) {
            return None;
        }
        let large = large.and_then(|table| {
            let bytes = table.memory_bytes();
            table_budget.try_reserve(bytes).then(|| PinnedTable {
                table,
                bytes,
                budget: Arc::clone(table_budget),
            })
        });
        Some(PinnedIndex {
            fences,
            bytes,
            budget: Arc::clone(budget),
            large,
        })
    }

    pub(crate) fn fences(&self) -> &Fences {
        &self.fences
    }

    /// The file's large pointer table, if pinned.
    pub(crate) fn large(&self) -> Option<&LargePointers> {
        self.large.as_ref().map(|t| &t.table)
    }

    /// Bytes of the fences, charged to the pinning budget.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes of the large pointer table, charged to the table budget (0: none pinned).
    pub(crate) fn table_bytes(&self) -> u64 {
        self.large.as_ref().map_or(0, |t| t.bytes)
    }
}

impl Drop for PinnedIndex {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Just;

    fn fences(keys: &[&str]) -> Fences {
        let mut f = Fences::default();
        for (i, k) in keys.iter().enumerate() {
            f.push(k.as_bytes(), 4096 * i as u64).unwrap();
        }
        f
    }

    #[test]
    fn finds_the_leaf_whose_range_holds_a_key() {
        let f = fences(&["b", "d", "f"]);
        assert_eq!(
            f.leaf_for(b"a"),
            None,
            "below the first key: not in the file"
        );
        assert_eq!(f.leaf_for(b"b"), Some(0));
        assert_eq!(f.leaf_for(b"c"), Some(0));
        assert_eq!(f.leaf_for(b"d"), Some(1));
        assert_eq!(f.leaf_for(b"e"), Some(1));
        assert_eq!(f.leaf_for(b"zzz"), Some(2));
        assert_eq!(f.leaf_offset(2), Some(8192));
        assert_eq!(f.leaf_offset(3), None);
        assert_eq!(Fences::default().leaf_for(b"x"), None);
    }

    #[test]
    fn an_empty_first_fence_admits_every_key() {
        let f = fences(&[""]);
        assert_eq!(f.leaf_for(b""), Some(0));
        assert_eq!(f.leaf_for(b"anything"), Some(0));
    }

    /// The leaf each probe falls in, found by sealed fences (through heads) and by the
    /// same fences unsealed (whole keys only), must agree, and agree with a linear scan.
    fn heads_agree_with_whole_keys(keys: &[Vec<u8>], probes: &[Vec<u8>]) {
        let mut keys = keys.to_vec();
        keys.sort();
        keys.dedup();
        let mut plain = Fences::default();
        for (i, k) in keys.iter().enumerate() {
            plain.push(k, i as u64).unwrap();
        }
        let mut sealed = Fences::default();
        for (i, k) in keys.iter().enumerate() {
            sealed.push(k, i as u64).unwrap();
        }
        sealed.seal();
        assert!(sealed.heads.is_some() || keys.is_empty());
        for p in probes.iter().chain(keys.iter()) {
            let linear = keys.iter().rposition(|k| k <= p);
            assert_eq!(plain.leaf_for(p), linear, "whole keys, probe {p:?}");
            assert_eq!(sealed.leaf_for(p), linear, "heads, probe {p:?} in {keys:?}");
        }
    }

    #[test]
    fn heads_find_the_leaf_whole_keys_find() {
        let k = |s: &str| s.as_bytes().to_vec();
        // An empty first fence, keys sharing "user" and more than 8 bytes after it (heads
        // tie), a key that is a prefix of another, probes outside the prefix on both sides
        // and shorter than it.
        let keys = [
            k(""),
            k("user0000000001"),
            k("user00000000010"),
            k("user0000000002"),
            k("user12345678a"),
            k("user12345678b"),
            k("user9"),
        ];
        let probes = [
            k(""),
            k("a"),
            k("use"),
            k("user"),
            k("user0"),
            k("user00000000015"),
            k("user12345678"),
            k("user12345678a\0"),
            k("user12345678c"),
            k("userz"),
            k("v"),
            k("user0000000001\0"),
        ];
        heads_agree_with_whole_keys(&keys, &probes);
        // A single fence: its whole key is the prefix.
        heads_agree_with_whole_keys(&[k("m")], &probes);
        // Many blocks of heads, and a run of 40 keys whose heads tie across blocks.
        let mut many: Vec<Vec<u8>> = (0..300).map(|i| k(&format!("user{i:05}"))).collect();
        many.extend((0..40).map(|i| k(&format!("user00150xyz{i:03}"))));
        let probes: Vec<Vec<u8>> = (0..700)
            .map(|i| k(&format!("user{:05}", i / 2)))
            .chain((0..45).map(|i| k(&format!("user00150xyz{i:03}0"))))
            .chain([
                k("user00150xyz"),
                k("user00150xy"),
                k("user00150xz"),
                k("user"),
            ])
            .collect();
        heads_agree_with_whole_keys(&many, &probes);
    }

    proptest::proptest! {
        #[test]
        fn heads_agree_with_whole_keys_on_random_fences(
            keys in proptest::collection::vec(
                proptest::collection::vec(proptest::prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(255u8)], 0..14),
                1..120,
            ),
            probes in proptest::collection::vec(
                proptest::collection::vec(proptest::prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(255u8)], 0..14),
                0..40,
            ),
            prefix in proptest::collection::vec(proptest::prop_oneof![Just(b'a'), Just(b'z')], 0..6),
        ) {
            // Most fences share `prefix`, as a file's do; a few probes do not.
            let with = |v: &Vec<u8>| [prefix.clone(), v.clone()].concat();
            let keys: Vec<Vec<u8>> = keys.iter().map(with).collect();
            let mut probes: Vec<Vec<u8>> = probes.iter().map(with).collect();
            probes.push(prefix[..prefix.len() / 2].to_vec());
            probes.push(vec![255u8; 3]);
            heads_agree_with_whole_keys(&keys, &probes);
        }
    }

    #[test]
    fn pivots_out_of_order_are_refused() {
        let mut f = fences(&["b", "d"]);
        assert!(f.push(b"c", 0).is_err());
        assert!(f.push(b"d", 0).is_err());
        assert!(f.push(b"e", 0).is_ok());
    }

    #[test]
    fn the_budget_is_charged_while_an_index_lives_and_refuses_what_does_not_fit() {
        let budget = Arc::new(PinBudget::new(1000));
        let a = PinnedIndex::charge(fences(&["a", "b", "c"]), None, &budget, &budget).unwrap();
        assert_eq!(budget.used(), a.bytes());
        assert!(a.bytes() >= 3 + 3 * 4 + 3 * 8);
        let big: Vec<String> = (0..100).map(|i| format!("key{i:04}")).collect();
        let big: Vec<&str> = big.iter().map(String::as_str).collect();
        assert!(PinnedIndex::charge(fences(&big), None, &budget, &budget).is_none());
        assert_eq!(budget.used(), a.bytes(), "a refused index charges nothing");
        drop(a);
        assert_eq!(budget.used(), 0);
        assert!(budget.has_room());
        let off = Arc::new(PinBudget::new(0));
        assert!(!off.has_room());
        assert!(PinnedIndex::charge(fences(&["a"]), None, &off, &off).is_none());
    }

    fn table(keys: u64) -> LargePointers {
        let mut b = super::super::large_pointers::LargePointersBuilder::default();
        for i in 0..keys {
            let p = crate::log::ptr::LogPtr {
                segment: 1,
                offset: 100 * i,
                len: 60,
            };
            b.add(format!("k{i}").as_bytes(), p);
        }
        LargePointers::decode(&b.encode().unwrap()).unwrap()
    }

    #[test]
    fn a_large_pointer_table_is_charged_to_its_own_budget_and_pinned_when_it_fits() {
        let t = table(4).memory_bytes();
        let fence_bytes = {
            let mut f = fences(&["a", "b"]);
            f.shrink();
            f.seal();
            f.memory_bytes()
        };
        let (pins, tables) = (
            Arc::new(PinBudget::new(fence_bytes)),
            Arc::new(PinBudget::new(t)),
        );
        let both = PinnedIndex::charge(fences(&["a", "b"]), Some(table(4)), &pins, &tables);
        let both = both.unwrap();
        assert!(both.large().is_some());
        assert_eq!((both.bytes(), both.table_bytes()), (fence_bytes, t));
        assert_eq!((pins.used(), tables.used()), (fence_bytes, t));
        drop(both);
        assert_eq!((pins.used(), tables.used()), (0, 0));
        // No room for the table: the fences alone are pinned.
        let tight = Arc::new(PinBudget::new(t - 1));
        let alone = PinnedIndex::charge(fences(&["a", "b"]), Some(table(4)), &pins, &tight);
        let alone = alone.unwrap();
        assert!(alone.large().is_none());
        assert_eq!((pins.used(), tight.used()), (fence_bytes, 0));
        drop(alone);
        // No room for the fences: nothing is pinned, the table neither.
        let none = Arc::new(PinBudget::new(fence_bytes - 1));
        assert!(PinnedIndex::charge(fences(&["a", "b"]), Some(table(4)), &none, &tables).is_none());
        assert_eq!(tables.used(), 0);
    }
}
