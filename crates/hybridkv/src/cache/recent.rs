//! Which keys gets have read lately, so that an update's large value is cached as it is
//! appended only when a read of its key is likely to follow (`Options::prepopulate_cache`).
//!
//! Owns: a direct-mapped table of 16-bit key fingerprints ([`RecentReads::SLOTS`] of them,
//! 128 KiB, allocated by the first get that notes its key: a keyspace no get reads, or a
//! cache that never asks, costs nothing), written by every get and asked by every large
//! append. Never: decides what a
//! read returns. It is a hint: a fingerprint that collides caches one value too many, one
//! that a later get overwrote caches one too few; neither is ever wrong data.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::OnceLock;

/// The fingerprints of the keys gets read lately, one slot per key hash.
pub(crate) struct RecentReads {
    /// Empty until the first [`RecentReads::note`].
    slots: OnceLock<Box<[AtomicU16]>>,
}

impl RecentReads {
    /// Slots in the table: a key stays in it until a get of another key with the same
    /// low 16 hash bits replaces it, so about the last 65,536 distinct keys read.
    pub(crate) const SLOTS: usize = 1 << 16;

    pub(crate) fn new() -> Self {
        RecentReads {
            slots: OnceLock::new(),
        }
    }

    /// Whether the table was allocated (a get noted a key).
    #[cfg(test)]
    fn allocated(&self) -> bool {
        self.slots.get().is_some()
    }

    /// The slot of `hash` and the fingerprint it holds there (never 0, which an empty slot
    /// holds).
    fn place(hash: u64) -> (usize, u16) {
        let slot = (hash as usize) & (Self::SLOTS - 1);
        let tag = ((hash >> 48) as u16) | 1;
        (slot, tag)
    }

    /// A get read the key whose hash (`format::key_hash`) is `hash`.
    pub(crate) fn note(&self, hash: u64) {
        let (slot, tag) = Self::place(hash);
        let slots = self
            .slots
            .get_or_init(|| (0..Self::SLOTS).map(|_| AtomicU16::new(0)).collect());
        if let Some(s) = slots.get(slot) {
            // Only a changed slot is written: a hot key's gets leave its cache line shared.
            if s.load(Ordering::Relaxed) != tag {
                s.store(tag, Ordering::Relaxed);
            }
        }
    }

    /// Whether a get read the key whose hash is `hash` lately.
    pub(crate) fn holds(&self, hash: u64) -> bool {
        let (slot, tag) = Self::place(hash);
        self.slots
            .get()
            .and_then(|slots| slots.get(slot))
            .is_some_and(|s| s.load(Ordering::Relaxed) == tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::key_hash;

    #[test]
    fn a_key_read_is_held_until_a_key_in_its_slot_is_read() {
        let r = RecentReads::new();
        assert!(!r.holds(key_hash(b"a")), "an empty table holds nothing");
        assert!(!r.allocated(), "asking allocates nothing");
        r.note(key_hash(b"a"));
        assert!(r.allocated(), "the first note allocates the table");
        assert!(r.holds(key_hash(b"a")));
        assert!(!r.holds(key_hash(b"b")));
        // Another key whose hash lands in the same slot with another fingerprint.
        let a = key_hash(b"a");
        let other = (a & (RecentReads::SLOTS as u64 - 1)) | ((!a >> 48) << 48);
        r.note(other);
        assert!(r.holds(other));
        assert!(!r.holds(a), "the slot's newer key replaced the older");
    }

    #[test]
    fn a_hash_whose_fingerprint_bits_are_zero_is_not_taken_for_an_empty_slot() {
        let r = RecentReads::new();
        let hash = 5; // top 16 bits zero: its fingerprint is 1, not the empty 0
        assert!(!r.holds(hash));
        r.note(hash);
        assert!(r.holds(hash));
    }
}
