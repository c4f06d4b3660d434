//! Remembered spots: a table from a key's hash to the nodes its last write was linked
//! after at the skip list's four bottom levels (before that version, which may be a newer
//! version of the key than others it has), so that a new version of a key the memtable
//! already holds is linked, and the key's newest version found, without a search from the
//! top (a cache miss per level once the memtable outgrows the processor's caches). A
//! zipfian update or merge run writes the same hot keys again and again: about six writes
//! in ten find their key already in a memtable of 170,000 versions.
//!
//! Owns: the slots. A slot is claimed once, by the first key that asks for it; from then on
//! every write of that key (or of a key with the same tag) overwrites its pointers, the
//! last writer winning, so a refresh may also move them back; a key whose slot another key
//! holds is not remembered (a memtable lives for one flush: no eviction).
//! Never: vouches for what it hands out. A slot's pointers may be stale (nodes inserted
//! since lie between them and the key), mixed from two writes, or, for the rare tag match
//! of another key, not before the key at all: the skip list checks each pointer against
//! its probe before it starts there, and searches from the top when one fails. It stores
//! only what the list hands it: at index `i`, the head or a node linked at level `i` (so
//! its tower is taller than `i`), never freed while the list lives.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Bottom levels a slot remembers. A version whose tower is taller searches from the top
/// (one in sixteen: a node gets each level more with probability 1/2). With two levels one
/// write in four of a remembered key searched anyway (L update-heavy, 4M pairs: 454,000
/// of 1.36 million searches).
pub(super) const LEVELS: usize = 4;

/// A slot nobody claimed.
const EMPTY: u64 = 0;
/// A slot being claimed: its pointers are not written yet.
const CLAIMING: u64 = 1;

/// A claimed slot's tag: never `EMPTY` or `CLAIMING`.
fn tag_of(hash: u64) -> u64 {
    hash | 2
}

struct Slot<T> {
    tag: AtomicU64,
    prev: [AtomicPtr<T>; LEVELS],
}

/// See the module comment. `T` is the list's node type.
pub(super) struct SpotTable<T> {
    slots: Box<[Slot<T>]>,
    mask: usize,
}

impl<T> SpotTable<T> {
    /// A table of about one slot per 256 to 512 bytes of `budget` (the memtable's size:
    /// room for the keys it holds more than once), at least 64 slots.
    pub(super) fn for_budget(budget: usize) -> Self {
        let n = ((budget / 256).next_power_of_two() / 2).max(64);
        SpotTable {
            slots: (0..n)
                .map(|_| Slot {
                    tag: AtomicU64::new(EMPTY),
                    prev: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
                })
                .collect(),
            mask: n - 1,
        }
    }

    /// Bytes the table takes.
    pub(super) fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<T>>()
    }

    fn slot(&self, hash: u64) -> Option<&Slot<T>> {
        // Bits the memtable's key filter does not pick its word with.
        self.slots.get((hash.rotate_left(24) as usize) & self.mask)
    }

    /// The remembered predecessors of the key of `hash`, bottom level first, or `None`.
    pub(super) fn get(&self, hash: u64) -> Option<[*mut T; LEVELS]> {
        let s = self.slot(hash)?;
        if s.tag.load(Ordering::Acquire) != tag_of(hash) {
            return None;
        }
        // Acquire: the node a pointer names was fully written before whoever stored the
        // pointer reached it (through the list's Acquire loads).
        Some(std::array::from_fn(|i| s.prev[i].load(Ordering::Acquire)))
    }

    /// Remembers `prev` in the key's slot: claims it if nobody did, refreshes it if the key
    /// holds it, leaves it alone if another key does (or is claiming it). `prev[i]` must be
    /// the head or a node linked at level `i`, before the key of `hash` when linked there:
    /// readers dereference it at that level after checking it against their probe.
    pub(super) fn remember(&self, hash: u64, prev: [*mut T; LEVELS]) {
        let Some(s) = self.slot(hash) else { return };
        let tag = tag_of(hash);
        let current = s.tag.load(Ordering::Acquire);
        if current != tag {
            if current != EMPTY
                || s.tag
                    .compare_exchange(EMPTY, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                return;
            }
            for (p, &v) in s.prev.iter().zip(&prev) {
                p.store(v, Ordering::Release);
            }
            s.tag.store(tag, Ordering::Release);
            return;
        }
        // A hot key's writers and readers share the slot's line: a refresh that changes
        // nothing does not write it.
        for (p, &v) in s.prev.iter().zip(&prev) {
            if p.load(Ordering::Relaxed) != v {
                p.store(v, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_holds_its_first_key_and_its_refreshes_and_no_other_key() {
        let t: SpotTable<u64> = SpotTable::for_budget(0);
        assert_eq!(t.slots.len(), 64);
        let mut nodes = [0u64; 3 * LEVELS];
        let ptrs: Vec<*mut u64> = nodes.iter_mut().map(|n| n as *mut u64).collect();
        let spot =
            |i: usize| -> [*mut u64; LEVELS] { std::array::from_fn(|l| ptrs[i * LEVELS + l]) };
        let (a, c, e) = (spot(0), spot(1), spot(2));
        let h = 0x1234_5678_9abc_def0u64;
        assert_eq!(t.get(h), None);
        t.remember(h, a);
        assert_eq!(t.get(h), Some(a));
        // The same key refreshes its slot.
        t.remember(h, c);
        assert_eq!(t.get(h), Some(c));
        // Another hash landing on the same slot is neither remembered nor handed this one.
        let other = h ^ (1 << 63);
        assert_eq!(
            (other.rotate_left(24) as usize) & t.mask,
            (h.rotate_left(24) as usize) & t.mask
        );
        t.remember(other, e);
        assert_eq!(t.get(other), None);
        assert_eq!(t.get(h), Some(c));
        // A slot of its own is claimed.
        let third = h.rotate_left(24).wrapping_add(1).rotate_right(24);
        t.remember(third, e);
        assert_eq!(t.get(third), Some(e));
    }

    #[test]
    fn the_table_is_sized_from_the_budget() {
        let t: SpotTable<u64> = SpotTable::for_budget(16 << 20);
        // 16 MiB / 256 = 65,536, halved: 32,768 slots of 40 bytes.
        assert_eq!(t.slots.len(), 32 << 10);
        assert_eq!(t.bytes(), (32 << 10) * std::mem::size_of::<Slot<u64>>());
    }
}
