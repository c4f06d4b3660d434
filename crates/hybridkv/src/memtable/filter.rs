//! A memtable's key filter: a blocked Bloom filter of the keys it holds, so that a point
//! read skips the skip-list search of every memtable that cannot hold its key (most of
//! them: a get searches the active memtable and each immutable one, and a skip-list
//! search is a cache miss per level).
//!
//! Owns: the bits (one 64-bit word per key, four bits in it), set as versions are inserted
//! and never cleared. Never: answers "absent" for a key inserted before (a reader sees
//! every bit an insert set before the LSN it reads at was published: the commit path
//! inserts, then publishes the visible LSN with release ordering).

use std::sync::atomic::{AtomicU64, Ordering};

/// Memtable budget bytes per filter bit: about 12 bits per version for a version
/// of 72 bytes or more (a 24-byte key and the 48 bytes of bookkeeping counted per entry),
/// so about one read in a hundred searches a memtable that does not hold its key. The
/// filter takes 1/48th of the memtable budget.
const BUDGET_BYTES_PER_BIT: usize = 6;

#[derive(Debug)]
pub(crate) struct KeyFilter {
    words: Box<[AtomicU64]>,
    /// `words.len() - 1` (a power of two).
    mask: u64,
}

impl KeyFilter {
    /// A filter for a memtable of `budget` bytes.
    pub(crate) fn for_budget(budget: usize) -> Self {
        let words = (budget / BUDGET_BYTES_PER_BIT / 64)
            .max(64)
            .next_power_of_two();
        KeyFilter {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            mask: words as u64 - 1,
        }
    }

    /// The word and the four bits of `hash`: the word from the low bits, each bit from
    /// six of the high ones.
    fn probe(&self, hash: u64) -> (usize, u64) {
        let word = (hash & self.mask) as usize;
        let bits = (1u64 << ((hash >> 40) & 63))
            | (1u64 << ((hash >> 46) & 63))
            | (1u64 << ((hash >> 52) & 63))
            | (1u64 << ((hash >> 58) & 63));
        (word, bits)
    }

    pub(crate) fn add(&self, hash: u64) {
        let (word, bits) = self.probe(hash);
        if let Some(w) = self.words.get(word) {
            w.fetch_or(bits, Ordering::Relaxed);
        }
    }

    /// Whether a key of this hash may have been added (false: it never was).
    pub(crate) fn may_hold(&self, hash: u64) -> bool {
        let (word, bits) = self.probe(hash);
        self.words
            .get(word)
            .is_none_or(|w| w.load(Ordering::Relaxed) & bits == bits)
    }

    /// Bytes the filter takes.
    pub(crate) fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::key_hash;

    #[test]
    fn every_added_key_is_held_and_most_others_are_not() {
        let f = KeyFilter::for_budget(4 << 20);
        // About the versions a 4 MiB memtable holds: 4 MiB / 72 bytes.
        let n = (4 << 20) / 72;
        for i in 0..n {
            f.add(key_hash(format!("user{i:016}").as_bytes()));
        }
        for i in 0..n {
            assert!(
                f.may_hold(key_hash(format!("user{i:016}").as_bytes())),
                "{i}"
            );
        }
        let false_positives = (0..100_000)
            .filter(|i| f.may_hold(key_hash(format!("miss{i:016}").as_bytes())))
            .count();
        // About 1% expected with 12 bits per key in 64-bit blocks; 3% allows for the
        // blocks' uneven fill.
        assert!(false_positives < 3_000, "{false_positives} in 100000");
        // Rounded up to a power of two words: at most twice the bits asked for.
        let asked = (4 << 20) / BUDGET_BYTES_PER_BIT / 8;
        assert!(f.bytes().is_power_of_two() && f.bytes() >= asked && f.bytes() < 2 * asked);
    }

    #[test]
    fn a_tiny_budget_still_gets_a_filter_that_holds_its_keys() {
        let f = KeyFilter::for_budget(0);
        assert_eq!(f.bytes(), 64 * 8);
        for i in 0..10_000u32 {
            f.add(key_hash(&i.to_le_bytes()));
        }
        assert!((0..10_000u32).all(|i| f.may_hold(key_hash(&i.to_le_bytes()))));
    }
}
