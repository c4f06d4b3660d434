//! The pinned index of one level file (PinK's level pinning): the first key and the offset
//! of every leaf, held in memory, so that a point lookup or a seek finds its leaf with one
//! binary search over contiguous memory, without descending index nodes through the node
//! cache, and reads at most one leaf per run; a key below the file's first key is answered
//! without any read.
//!
//! Owns: the fence arrays ([`Fences`]) and their charge to the database's pinning budget
//! (`crate::cache::PinBudget`; a file that does not fit is simply not pinned and reads
//! through the node cache). Never: reads a file itself (the reader builds the fences from index nodes whose
//! checksums it checked) or holds anything that is not a copy of verified bytes.

use crate::cache::PinBudget;
use std::sync::Arc;

/// First key and offset of every leaf of one file, in key order.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    /// The keys, one after the other.
    keys: Vec<u8>,
    /// End of key `i` in `keys` (key `i` starts where key `i - 1` ends).
    ends: Vec<u32>,
    /// Offset of leaf `i`.
    leaves: Vec<u64>,
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
        let (mut lo, mut hi) = (0usize, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid)? <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    /// Offset of the leaf at position `i`.
    pub(crate) fn leaf_offset(&self, i: usize) -> Option<u64> {
        self.leaves.get(i).copied()
    }

    /// Bytes the arrays hold.
    pub(crate) fn memory_bytes(&self) -> u64 {
        (self.keys.capacity() + 4 * self.ends.capacity() + 8 * self.leaves.capacity()) as u64
    }

    fn shrink(&mut self) {
        self.keys.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.leaves.shrink_to_fit();
    }
}

/// A file's fences, charged to the budget for as long as they live.
#[derive(Debug)]
pub(crate) struct PinnedIndex {
    fences: Fences,
    bytes: u64,
    budget: Arc<PinBudget>,
}

impl PinnedIndex {
    /// Pins `fences` if the budget has room for them.
    pub(crate) fn charge(mut fences: Fences, budget: &Arc<PinBudget>) -> Option<Self> {
        fences.shrink();
        let bytes = fences.memory_bytes();
        budget.try_reserve(bytes).then(|| PinnedIndex {
            fences,
            bytes,
            budget: Arc::clone(budget),
        })
    }

    pub(crate) fn fences(&self) -> &Fences {
        &self.fences
    }

    /// Bytes charged to the budget.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
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
        let a = PinnedIndex::charge(fences(&["a", "b", "c"]), &budget).unwrap();
        assert_eq!(budget.used(), a.bytes());
        assert!(a.bytes() >= 3 + 3 * 4 + 3 * 8);
        let big: Vec<String> = (0..100).map(|i| format!("key{i:04}")).collect();
        let big: Vec<&str> = big.iter().map(String::as_str).collect();
        assert!(PinnedIndex::charge(fences(&big), &budget).is_none());
        assert_eq!(budget.used(), a.bytes(), "a refused index charges nothing");
        drop(a);
        assert_eq!(budget.used(), 0);
        assert!(budget.has_room());
        let off = Arc::new(PinBudget::new(0));
        assert!(!off.has_room());
        assert!(PinnedIndex::charge(fences(&["a"]), &off).is_none());
    }
}
