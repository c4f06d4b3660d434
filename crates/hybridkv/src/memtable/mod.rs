//! The in-memory L0: a concurrent skip list of versioned entries.
//!
//! Owns: every version written since the last flush, ordered by (key ascending, LSN
//! descending), the range tombstones written since (few: a list), and its byte size.
//! Never: touches files. Readers see only versions with `lsn <= snapshot`; the commit path
//! inserts and then publishes the snapshot LSN.

mod filter;

use crate::format::key_hash;
use crate::log::ptr::{LogPtr, LOG_PTR_SIZE};
use crate::range_delete::{RangeTombstone, RangeTombstones};
use crate::value::LevelValue;
use crossbeam_skiplist::SkipMap;
use filter::KeyFilter;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};

/// Per-entry bookkeeping added to key and value bytes when sizing the memtable.
const ENTRY_OVERHEAD: usize = 48;

/// Key and value bytes of this many bytes or fewer are held inside the skip-list node
/// (a small pair of the paper's mixes: a 24-byte key and a 9-byte value): no allocation
/// of their own, and a full-key comparison reads the node it already has.
const INLINE_BYTES: usize = 46;
// The inline length is stored in a `u8`.
const _: () = assert!(INLINE_BYTES <= u8::MAX as usize);

/// The bytes of a version: the key, then (for `Slot::Inline`) the value.
#[derive(Debug, Clone)]
enum KeyBytes {
    Inline { len: u8, buf: [u8; INLINE_BYTES] },
    Heap(Box<[u8]>),
}

impl KeyBytes {
    fn new(key: &[u8], value: &[u8]) -> Self {
        let len = key.len() + value.len();
        if len <= INLINE_BYTES {
            let mut buf = [0u8; INLINE_BYTES];
            if let Some(k) = buf.get_mut(..key.len()) {
                k.copy_from_slice(key);
            }
            if let Some(v) = buf.get_mut(key.len()..len) {
                v.copy_from_slice(value);
            }
            return KeyBytes::Inline {
                len: len as u8,
                buf,
            };
        }
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
        KeyBytes::Heap(bytes.into_boxed_slice())
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            KeyBytes::Inline { len, buf } => buf.get(..usize::from(*len)).unwrap_or_default(),
            KeyBytes::Heap(b) => b,
        }
    }
}

/// A versioned key: sorts by key ascending, then by LSN descending (newest first).
///
/// The first 16 key bytes are also held inline, big-endian in a `u128` (zero-padded), so
/// that most comparisons of a skip-list search are one integer compare on the node itself
/// instead of a pointer chase to the key's heap bytes (a cache miss per node). Equal
/// prefixes fall back to the full keys, so zero padding never decides an order.
///
/// The key's bytes are followed by the value's (for a small or medium value): in the node
/// itself up to [`INLINE_BYTES`], else one allocation per version.
#[derive(Debug, Clone)]
pub(crate) struct MemKey {
    prefix: u128,
    pub lsn: u64,
    /// The key, then (for `Slot::Inline`) the value.
    bytes: KeyBytes,
    key_len: usize,
}

impl MemKey {
    /// A key to search with (no value bytes).
    pub(crate) fn new(key: &[u8], lsn: u64) -> Self {
        Self::with_value(key, lsn, &[])
    }

    fn with_value(key: &[u8], lsn: u64, value: &[u8]) -> Self {
        let mut head = [0u8; 16];
        let n = key.len().min(16);
        if let (Some(dst), Some(src)) = (head.get_mut(..n), key.get(..n)) {
            dst.copy_from_slice(src);
        }
        MemKey {
            prefix: u128::from_be_bytes(head),
            lsn,
            bytes: KeyBytes::new(key, value),
            key_len: key.len(),
        }
    }

    /// The user key.
    pub(crate) fn key(&self) -> &[u8] {
        self.bytes
            .as_slice()
            .get(..self.key_len)
            .unwrap_or_default()
    }

    /// The bytes after the key (an inline value).
    fn tail(&self) -> &[u8] {
        self.bytes
            .as_slice()
            .get(self.key_len..)
            .unwrap_or_default()
    }
}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.key().cmp(other.key()))
            .then(other.lsn.cmp(&self.lsn))
    }
}
// Equality as the order sees it (key and LSN; the value bytes do not take part).
impl PartialEq for MemKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for MemKey {}
impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A version's value as a writer hands it to the memtable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemValue<'a> {
    /// Small and medium pairs are held in full.
    Value(&'a [u8]),
    /// A large pair: its value is in the large log.
    Large(LogPtr),
    Tombstone,
    /// A delta (one operand) for the merge operator.
    Delta(&'a [u8]),
}

impl MemValue<'_> {
    fn size(&self) -> usize {
        match self {
            MemValue::Value(v) | MemValue::Delta(v) => v.len(),
            MemValue::Large(_) => LOG_PTR_SIZE,
            MemValue::Tombstone => 0,
        }
    }
}

/// What the memtable keeps beside a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The value's bytes follow the key's in `MemKey`.
    Inline,
    Large(LogPtr),
    Tombstone,
    /// A delta: its operand's bytes follow the key's in `MemKey`.
    Delta,
}

/// The stored value of a version.
fn level_value(k: &MemKey, slot: &Slot) -> LevelValue {
    match slot {
        Slot::Inline => LevelValue::Inline(k.tail().to_vec()),
        Slot::Delta => LevelValue::Deltas(crate::delta::single(k.tail())),
        Slot::Large(p) => LevelValue::Large(*p),
        Slot::Tombstone => LevelValue::Tombstone,
    }
}

/// One memtable generation.
#[derive(Debug)]
pub(crate) struct Memtable {
    map: SkipMap<MemKey, Slot>,
    bytes: AtomicUsize,
    max_lsn: AtomicU64,
    /// First small-log file that holds none of this memtable's data (set when sealed):
    /// once this memtable is flushed, replay can start there.
    pub next_log_id: AtomicU64,
    /// The last LSN committed (in any keyspace) before this memtable was sealed: the
    /// first record of `next_log_id` follows it. Once this memtable is flushed, every
    /// operation of its keyspace up to this LSN is in the levels (the manifest's flushed
    /// LSN; replay skips them).
    pub sealed_lsn: AtomicU64,
    /// Range tombstones, in LSN order (inserted by the commit path, one writer at a time).
    ranges: parking_lot::RwLock<Vec<RangeTombstone>>,
    /// Whether `ranges` is not empty (lookups skip its lock while it is).
    has_ranges: AtomicBool,
    /// The keys of every version inserted (point reads skip a memtable without theirs).
    keys: KeyFilter,
}

/// A version found for a key.
pub(crate) type Found = (u64, LevelValue);

/// One version in key order: key, LSN, value.
pub(crate) type MemEntry = (Vec<u8>, u64, LevelValue);

impl Memtable {
    /// An empty memtable whose key filter is sized for 64 KiB (tests).
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with_budget(64 << 10)
    }

    /// An empty memtable expected to grow to about `budget` bytes (`memtable_size`): its
    /// key filter is sized for that many (1/48th of it).
    pub(crate) fn with_budget(budget: usize) -> Self {
        Memtable {
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            max_lsn: AtomicU64::new(0),
            next_log_id: AtomicU64::new(0),
            sealed_lsn: AtomicU64::new(0),
            ranges: parking_lot::RwLock::new(Vec::new()),
            has_ranges: AtomicBool::new(false),
            keys: KeyFilter::for_budget(budget),
        }
    }

    /// Whether a version of `key` may be here (false: none is; no skip-list search).
    fn may_hold(&self, key: &[u8]) -> bool {
        self.keys.may_hold(key_hash(key))
    }

    /// Bytes of the key filter (beside the budgeted versions).
    pub(crate) fn filter_bytes(&self) -> usize {
        self.keys.bytes()
    }

    /// Inserts a range tombstone: every version of a key it covers with a lower LSN (here
    /// or in older data) is deleted.
    pub(crate) fn insert_range_tombstone(&self, t: RangeTombstone) {
        let (size, lsn) = (t.size() + ENTRY_OVERHEAD, t.lsn);
        self.ranges.write().push(t);
        self.has_ranges.store(true, AtomicOrdering::Release);
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
        self.max_lsn.fetch_max(lsn, AtomicOrdering::Relaxed);
    }

    /// The highest LSN at or below `snapshot` of a range tombstone here covering `key` (0
    /// if none).
    pub(crate) fn range_cut(&self, key: &[u8], snapshot: u64) -> u64 {
        if !self.has_ranges.load(AtomicOrdering::Acquire) {
            return 0;
        }
        crate::range_delete::cut_of(self.ranges.read().iter(), key, snapshot)
    }

    /// Adds the range tombstones here written at or below `snapshot` to `into`.
    pub(crate) fn range_tombstones_into(&self, into: &mut RangeTombstones, snapshot: u64) {
        if self.has_ranges.load(AtomicOrdering::Acquire) {
            into.extend_visible(self.ranges.read().iter(), snapshot);
        }
    }

    /// Every range tombstone here (a flush moves them into the levels).
    pub(crate) fn range_tombstones(&self) -> Vec<RangeTombstone> {
        if self.has_ranges.load(AtomicOrdering::Acquire) {
            self.ranges.read().clone()
        } else {
            Vec::new()
        }
    }

    /// Inserts one version. Distinct LSNs make every insert a new entry.
    pub(crate) fn insert(&self, key: &[u8], lsn: u64, value: MemValue<'_>) {
        let size = key.len() + value.size() + ENTRY_OVERHEAD;
        let (k, slot) = match value {
            MemValue::Value(v) => (MemKey::with_value(key, lsn, v), Slot::Inline),
            MemValue::Large(p) => (MemKey::new(key, lsn), Slot::Large(p)),
            MemValue::Tombstone => (MemKey::new(key, lsn), Slot::Tombstone),
            MemValue::Delta(d) => (MemKey::with_value(key, lsn, d), Slot::Delta),
        };
        // The filter first: a reader that finds the version finds its key in the filter.
        self.keys.add(key_hash(key));
        self.map.insert(k, slot);
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
        self.max_lsn.fetch_max(lsn, AtomicOrdering::Relaxed);
    }

    /// Inserts a delta; when the key's newest version here is a value in the node (or a
    /// tombstone) and `op` folds the delta onto it, inserts the folded value instead (the
    /// same value a read would compute, without the chain of deltas a hot key would grow).
    pub(crate) fn insert_delta(
        &self,
        key: &[u8],
        lsn: u64,
        operand: &[u8],
        op: Option<&dyn crate::delta::MergeOperator>,
    ) {
        if let Some(op) = op {
            let newest = self
                .may_hold(key)
                .then(|| self.map.range(MemKey::new(key, u64::MAX)..).next())
                .flatten()
                .filter(|e| e.key().key() == key);
            // A range tombstone newer than every version here deletes what is below it:
            // the delta then applies to nothing.
            let cut = self.range_cut(key, u64::MAX);
            let newest = newest.filter(|e| e.key().lsn > cut);
            if newest.is_none() && cut > 0 {
                if let Ok(v) = op.full_merge(key, None, &[operand]) {
                    if v.len() <= crate::delta::MAX_FOLDED_VALUE {
                        self.insert(key, lsn, MemValue::Value(&v));
                        return;
                    }
                }
            }
            if let Some(e) = newest {
                let base = match e.value() {
                    Slot::Inline => Some(Some(e.key().tail())),
                    Slot::Tombstone => Some(None),
                    Slot::Large(_) | Slot::Delta => None,
                };
                if let Some(base) = base {
                    if let Ok(v) = op.full_merge(key, base, &[operand]) {
                        if v.len() <= crate::delta::MAX_FOLDED_VALUE {
                            self.insert(key, lsn, MemValue::Value(&v));
                            return;
                        }
                    }
                }
            }
        }
        self.insert(key, lsn, MemValue::Delta(operand));
    }

    /// Approximate bytes held.
    pub(crate) fn size(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Whether it holds nothing to flush: no version and no range tombstone.
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty() && !self.has_ranges.load(AtomicOrdering::Acquire)
    }

    /// Versions held (every version of every key).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Highest LSN inserted.
    pub(crate) fn max_lsn(&self) -> u64 {
        self.max_lsn.load(AtomicOrdering::Relaxed)
    }

    /// Newest version of `key` with `lsn <= snapshot`.
    #[cfg(test)]
    pub(crate) fn get(&self, key: &[u8], snapshot: u64) -> Option<Found> {
        if !self.may_hold(key) {
            return None;
        }
        let probe = MemKey::new(key, snapshot);
        let entry = self.map.lower_bound(Bound::Included(&probe))?;
        let k = entry.key();
        (k.key() == key).then(|| (k.lsn, level_value(k, entry.value())))
    }

    /// The versions of `key` with `lsn <= snapshot`, newest first, as long as `more` says
    /// the caller wants the next one (a read collecting deltas stops at a base).
    pub(crate) fn versions_of(
        &self,
        key: &[u8],
        snapshot: u64,
        mut more: impl FnMut(Found) -> bool,
    ) {
        if !self.may_hold(key) {
            return;
        }
        let probe = MemKey::new(key, snapshot);
        for entry in self.map.range(probe..) {
            let k = entry.key();
            if k.key() != key || !more((k.lsn, level_value(k, entry.value()))) {
                return;
            }
        }
    }

    /// The LSN of the newest version of `key` (nothing copied).
    pub(crate) fn newest_lsn(&self, key: &[u8]) -> Option<u64> {
        if !self.may_hold(key) {
            return None;
        }
        self.map
            .range(MemKey::new(key, u64::MAX)..)
            .next()
            .filter(|e| e.key().key() == key)
            .map(|e| e.key().lsn)
    }

    /// Up to `limit` keys in key order starting after (or at, if `inclusive`) `from`: for
    /// each, its newest version with `lsn <= snapshot`, and when that is a delta the older
    /// versions down to the first that is not (the merge folds them). Keys whose versions
    /// are all newer than the snapshot are skipped.
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
        let mut keys = 0;
        for entry in self.map.range((lower, Bound::Unbounded)) {
            let k = entry.key();
            if k.lsn > snapshot {
                continue;
            }
            if let Some((last, _, v)) = out.last() {
                if last.as_slice() == k.key() {
                    if matches!(v, LevelValue::Deltas(_)) {
                        // The chain of deltas goes on (never cut between batches).
                        out.push((k.key().to_vec(), k.lsn, level_value(k, entry.value())));
                    }
                    continue; // else an older version of a key already taken
                }
            }
            if keys == limit {
                break;
            }
            keys += 1;
            out.push((k.key().to_vec(), k.lsn, level_value(k, entry.value())));
        }
        out
    }

    /// Like [`Memtable::collect_from`] walking backward: up to `limit` keys in descending
    /// key order before (or at, if `inclusive`) `to`, each with the versions the merge
    /// needs, newest first (its newest visible version, and below a delta the older ones
    /// down to the first that is not).
    pub(crate) fn collect_before(
        &self,
        to: Bound<&[u8]>,
        snapshot: u64,
        limit: usize,
    ) -> Vec<MemEntry> {
        // Versions sort by (key ascending, LSN descending): a key's first version holds
        // the highest LSN, its last LSN 0 or more.
        let (end_key, upper) = match to {
            Bound::Unbounded => (None, Bound::Unbounded),
            Bound::Included(k) => (Some(MemKey::new(k, 0)), Bound::Included(())),
            Bound::Excluded(k) => (Some(MemKey::new(k, u64::MAX)), Bound::Excluded(())),
        };
        let upper = match (&end_key, upper) {
            (Some(e), Bound::Included(())) => Bound::Included(e),
            (Some(e), Bound::Excluded(())) => Bound::Excluded(e),
            _ => Bound::Unbounded,
        };
        let mut out: Vec<MemEntry> = Vec::new();
        let mut keys = 0;
        // The visible versions of the key being walked, oldest first (as met going back).
        let mut group: Vec<SkipEntry<'_>> = Vec::new();
        for entry in self.map.range((Bound::Unbounded, upper)).rev() {
            if entry.key().lsn > snapshot {
                continue;
            }
            if group
                .last()
                .is_some_and(|g| g.key().key() != entry.key().key())
            {
                if take_newest(&mut group, &mut out) {
                    keys += 1;
                }
                if keys == limit {
                    return out;
                }
            }
            group.push(entry);
        }
        take_newest(&mut group, &mut out);
        out
    }

    /// Every version in key order, newest first per key (used by flush; the memtable is
    /// immutable then). The newest version of a key is copied out, and so are the older
    /// ones below a chain of deltas, down to the first that is not a delta (the merge
    /// folds them); any other older version yields just its large-log pointer, if it has
    /// one (its record becomes garbage).
    pub(crate) fn versions(&self) -> impl Iterator<Item = MemVersion> + '_ {
        let mut prev: Option<crossbeam_skiplist::map::Entry<'_, MemKey, Slot>> = None;
        // The version copied out before this one was a delta of the same key.
        let mut chain = false;
        self.map.iter().map(move |e| {
            let k = e.key();
            let newest = prev.as_ref().is_none_or(|p| p.key().key() != k.key()) || chain;
            chain = newest && matches!(e.value(), Slot::Delta);
            let out = if newest {
                // The flush's input: its buffers come back through `value::recycle`.
                let value = match e.value() {
                    Slot::Inline => LevelValue::Inline(crate::value::buffer_from(k.tail())),
                    slot => level_value(k, slot),
                };
                // (Older versions below a delta are `Newest` too: copied for the fold.)
                MemVersion::Newest((crate::value::buffer_from(k.key()), k.lsn, value))
            } else {
                MemVersion::Shadowed(match e.value() {
                    Slot::Large(p) => Some(*p),
                    _ => None,
                })
            };
            prev = Some(e);
            out
        })
    }
}

type SkipEntry<'a> = crossbeam_skiplist::map::Entry<'a, MemKey, Slot>;

/// Moves out of `group` (the visible versions of one key, oldest first) what a read of the
/// key needs, newest first: the newest version and, below a delta, the older ones down to
/// the first that is not. False if the group was empty.
fn take_newest(group: &mut Vec<SkipEntry<'_>>, out: &mut Vec<MemEntry>) -> bool {
    let mut taken = false;
    for e in group.drain(..).rev() {
        let below_delta = matches!(out.last(), Some((_, _, LevelValue::Deltas(_))));
        if taken && !below_delta {
            break;
        }
        let k = e.key();
        out.push((k.key().to_vec(), k.lsn, level_value(k, e.value())));
        taken = true;
    }
    taken
}

/// One version as a flush sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MemVersion {
    /// The newest version of its key.
    Newest(MemEntry),
    /// An older version, with its large-log pointer if it has one.
    Shadowed(Option<LogPtr>),
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
    fn keys_and_values_read_back_on_both_sides_of_the_inline_size() {
        let m = Memtable::new();
        for (total, key_len) in [
            (1, 1),
            (INLINE_BYTES - 1, 30),
            (INLINE_BYTES, 30),
            (INLINE_BYTES + 1, 30),
            (INLINE_BYTES, INLINE_BYTES),
            (60, 60),
            (300, 30),
        ] {
            let key = vec![b'k'; key_len];
            let value: Vec<u8> = (0..total.saturating_sub(key.len()))
                .map(|i| i as u8)
                .collect();
            m.insert(&key, total as u64 + 1, MemValue::Value(&value));
            assert_eq!(
                m.get(&key, u64::MAX),
                Some((total as u64 + 1, LevelValue::Inline(value.clone()))),
                "{total} bytes"
            );
        }
    }

    #[test]
    fn newest_visible_version_wins() {
        let m = Memtable::new();
        let v = |b: &'static [u8]| MemValue::Value(b);
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
        assert_eq!(
            versions[0],
            MemVersion::Newest((b"a".to_vec(), 5, LevelValue::Tombstone))
        );
        assert_eq!(versions[1], MemVersion::Shadowed(None));
        assert_eq!(versions[2], MemVersion::Shadowed(None));
        assert!(matches!(versions[3], MemVersion::Newest((ref k, 2, _)) if k == b"ab"));
    }

    /// Groups entries by key (one key's versions stay together, in their order).
    fn by_key(entries: Vec<MemEntry>) -> Vec<Vec<MemEntry>> {
        let mut groups: Vec<Vec<MemEntry>> = Vec::new();
        for e in entries {
            match groups.last_mut() {
                Some(g) if g.last().is_some_and(|l| l.0 == e.0) => g.push(e),
                _ => groups.push(vec![e]),
            }
        }
        groups
    }

    #[test]
    fn collect_before_is_collect_from_walked_backward() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..200 {
            let m = Memtable::new();
            let mut lsn = 0;
            for _ in 0..rand(60) {
                lsn += 1;
                let key: Vec<u8> = (0..rand(3)).map(|_| b"ab\0"[rand(3) as usize]).collect();
                let bytes = format!("v{lsn}").into_bytes();
                let value = match rand(4) {
                    0 => MemValue::Tombstone,
                    1 => MemValue::Delta(&bytes),
                    _ => MemValue::Value(&bytes),
                };
                m.insert(&key, lsn, value);
            }
            let snapshot = rand(lsn + 2);
            let all = by_key(m.collect_from(Bound::Unbounded, snapshot, usize::MAX));
            let probe: Vec<u8> = (0..rand(3)).map(|_| b"ab\0"[rand(3) as usize]).collect();
            let to = match rand(3) {
                0 => Bound::Unbounded,
                1 => Bound::Included(probe.as_slice()),
                _ => Bound::Excluded(probe.as_slice()),
            };
            let limit = 1 + rand(5) as usize;
            let want: Vec<MemEntry> = all
                .into_iter()
                .rev()
                .filter(|g| match to {
                    Bound::Unbounded => true,
                    Bound::Included(k) => g[0].0.as_slice() <= k,
                    Bound::Excluded(k) => g[0].0.as_slice() < k,
                })
                .take(limit)
                .flatten()
                .collect();
            assert_eq!(
                m.collect_before(to, snapshot, limit),
                want,
                "round {round}, to {to:?}, snapshot {snapshot}, limit {limit}"
            );
        }
    }
}
