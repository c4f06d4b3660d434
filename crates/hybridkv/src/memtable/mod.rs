//! The in-memory L0: a concurrent skip list of versioned entries.
//!
//! Owns: every version written since the last flush, ordered by (key ascending, LSN
//! descending), and its byte size. Never: touches files. Readers see only versions with
//! `lsn <= snapshot`; the commit path inserts and then publishes the snapshot LSN.

use crate::log::ptr::{LogPtr, LOG_PTR_SIZE};
use crate::value::LevelValue;
use crossbeam_skiplist::SkipMap;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};

/// Per-entry bookkeeping added to key and value bytes when sizing the memtable.
const ENTRY_OVERHEAD: usize = 48;

/// A versioned key: sorts by key ascending, then by LSN descending (newest first).
///
/// The first 16 key bytes are also held inline, big-endian in a `u128` (zero-padded), so
/// that most comparisons of a skip-list search are one integer compare on the node itself
/// instead of a pointer chase to the key's heap bytes (a cache miss per node). Equal
/// prefixes fall back to the full keys, so zero padding never decides an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemKey {
    prefix: u128,
    pub key: Box<[u8]>,
    pub lsn: u64,
}

impl MemKey {
    pub(crate) fn new(key: &[u8], lsn: u64) -> Self {
        let mut head = [0u8; 16];
        let n = key.len().min(16);
        if let (Some(dst), Some(src)) = (head.get_mut(..n), key.get(..n)) {
            dst.copy_from_slice(src);
        }
        MemKey {
            prefix: u128::from_be_bytes(head),
            key: key.into(),
            lsn,
        }
    }
}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.key.cmp(&other.key))
            .then(other.lsn.cmp(&self.lsn))
    }
}
impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A version's value as the memtable holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MemValue {
    /// Small and medium pairs are held in full.
    Value(Box<[u8]>),
    /// A large pair: its value is in the large log.
    Large(LogPtr),
    Tombstone,
}

impl MemValue {
    fn size(&self) -> usize {
        match self {
            MemValue::Value(v) => v.len(),
            MemValue::Large(_) => LOG_PTR_SIZE,
            MemValue::Tombstone => 0,
        }
    }

    fn to_level_value(&self) -> LevelValue {
        match self {
            MemValue::Value(v) => LevelValue::Inline(v.to_vec()),
            MemValue::Large(p) => LevelValue::Large(*p),
            MemValue::Tombstone => LevelValue::Tombstone,
        }
    }
}

/// One memtable generation.
#[derive(Debug)]
pub(crate) struct Memtable {
    map: SkipMap<MemKey, MemValue>,
    bytes: AtomicUsize,
    max_lsn: AtomicU64,
    /// First small-log file that holds none of this memtable's data (set when sealed):
    /// once this memtable is flushed, replay can start there.
    pub next_log_id: AtomicU64,
}

/// A version found for a key.
pub(crate) type Found = (u64, LevelValue);

/// One version in key order: key, LSN, value.
pub(crate) type MemEntry = (Vec<u8>, u64, LevelValue);

impl Memtable {
    pub(crate) fn new() -> Self {
        Memtable {
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            max_lsn: AtomicU64::new(0),
            next_log_id: AtomicU64::new(0),
        }
    }

    /// Inserts one version. Distinct LSNs make every insert a new entry.
    pub(crate) fn insert(&self, key: &[u8], lsn: u64, value: MemValue) {
        let size = key.len() + value.size() + ENTRY_OVERHEAD;
        self.map.insert(MemKey::new(key, lsn), value);
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
        self.max_lsn.fetch_max(lsn, AtomicOrdering::Relaxed);
    }

    /// Approximate bytes held.
    pub(crate) fn size(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Highest LSN inserted.
    pub(crate) fn max_lsn(&self) -> u64 {
        self.max_lsn.load(AtomicOrdering::Relaxed)
    }

    /// Newest version of `key` with `lsn <= snapshot`.
    pub(crate) fn get(&self, key: &[u8], snapshot: u64) -> Option<Found> {
        let probe = MemKey::new(key, snapshot);
        let entry = self.map.lower_bound(Bound::Included(&probe))?;
        (*entry.key().key == *key).then(|| (entry.key().lsn, entry.value().to_level_value()))
    }

    /// Up to `limit` entries in key order starting after (or at, if `inclusive`) `from`,
    /// one per key: its newest version with `lsn <= snapshot`. Keys whose versions are all
    /// newer than the snapshot are skipped.
    pub(crate) fn collect_from(
        &self,
        from: Bound<&[u8]>,
        snapshot: u64,
        limit: usize,
    ) -> Vec<MemEntry> {
        let start = match from {
            Bound::Unbounded => None,
            Bound::Included(k) => Some(MemKey::new(k, u64::MAX)),
            // Past every version of `k`: LSN 0 sorts last among them.
            Bound::Excluded(k) => Some(MemKey::new(k, 0)),
        };
        let lower = match (&start, from) {
            (None, _) => Bound::Unbounded,
            (Some(s), Bound::Excluded(_)) => Bound::Excluded(s),
            (Some(s), _) => Bound::Included(s),
        };
        let mut out: Vec<MemEntry> = Vec::new();
        for entry in self.map.range((lower, Bound::Unbounded)) {
            let k = entry.key();
            if k.lsn > snapshot {
                continue;
            }
            if out.last().is_some_and(|(last, _, _)| **last == *k.key) {
                continue; // an older version of a key already taken
            }
            if out.len() == limit {
                break;
            }
            out.push((k.key.to_vec(), k.lsn, entry.value().to_level_value()));
        }
        out
    }

    /// Every version in key order, newest first per key, with whether it is the newest
    /// (used by flush; the memtable is immutable then).
    pub(crate) fn versions(&self) -> impl Iterator<Item = (MemEntry, bool)> + '_ {
        let mut last: Option<Box<[u8]>> = None;
        self.map.iter().map(move |e| {
            let k = e.key();
            let newest = last.as_deref() != Some(&*k.key);
            if newest {
                last = Some(k.key.clone());
            }
            ((k.key.to_vec(), k.lsn, e.value().to_level_value()), newest)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_prefix_orders_exactly_like_the_keys() {
        // Keys of 0..40 bytes over a tiny alphabet with zeros, so that prefixes, padding
        // and equal first 16 bytes all occur.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let keys: Vec<Vec<u8>> = (0..3000)
            .map(|_| {
                let len = (next() % 41) as usize;
                (0..len)
                    .map(|_| [0u8, 1, 0xff][(next() % 3) as usize])
                    .collect()
            })
            .collect();
        for a in keys.iter().take(300) {
            for b in &keys {
                let (ka, kb) = (MemKey::new(a, 5), MemKey::new(b, 5));
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
        // Same key: the newer LSN sorts first.
        assert!(MemKey::new(b"k", 9) < MemKey::new(b"k", 3));
    }

    #[test]
    fn newest_visible_version_wins() {
        let m = Memtable::new();
        let v = |b: &[u8]| MemValue::Value(b.into());
        m.insert(b"a", 1, v(b"v1"));
        m.insert(b"a", 3, v(b"v3"));
        m.insert(b"a", 5, MemValue::Tombstone);
        m.insert(b"ab", 2, v(b"x"));
        assert_eq!(m.get(b"a", 10), Some((5, LevelValue::Tombstone)));
        assert_eq!(
            m.get(b"a", 4),
            Some((3, LevelValue::Inline(b"v3".to_vec())))
        );
        assert_eq!(m.get(b"a", 0), None);
        assert_eq!(m.get(b"b", 10), None);
        let all = m.collect_from(Bound::Unbounded, 4, 10);
        assert_eq!(all.len(), 2);
        assert_eq!(
            all[0],
            (b"a".to_vec(), 3, LevelValue::Inline(b"v3".to_vec()))
        );
        let after = m.collect_from(Bound::Excluded(b"a"), 10, 10);
        assert_eq!(
            after,
            vec![(b"ab".to_vec(), 2, LevelValue::Inline(b"x".to_vec()))]
        );
        let versions: Vec<_> = m.versions().collect();
        assert_eq!(versions.len(), 4);
        assert_eq!((versions[0].0 .1, versions[0].1), (5, true));
        assert_eq!((versions[1].0 .1, versions[1].1), (3, false));
        assert!(versions[3].1);
    }
}
