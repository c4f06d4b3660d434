//! The in-memory L0: a skip list of versioned entries (`skiplist`: nodes in an arena,
//! concurrent inserters beside lock-free readers).
//!
//! Owns: every version written since the last flush, ordered by (key ascending, LSN
//! descending), the range tombstones written since (few: a list), and its byte size.
//! Never: touches files. Readers see only versions with `lsn <= snapshot`; the commit path
//! inserts and then publishes the snapshot LSN.

mod filter;
mod skiplist;

use crate::format::key_hash;
use crate::log::ptr::{LogPtr, LOG_PTR_SIZE};
use crate::range_delete::{RangeTombstone, RangeTombstones};
use crate::value::LevelValue;
use filter::KeyFilter;
use skiplist::{Entry, Probe, Spot, Tag, VersionList};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

/// Per-entry bookkeeping added to key and value bytes when sizing the memtable. A version's
/// skip-list node really takes 48 bytes of header, 8 per tower level (2 on average) and
/// the key's padding to 8 bytes, about 68 beside its bytes: the estimate runs under, and
/// `Stats::memtable_arena_bytes` reports the real figure. Kept at 48 because the shapes the
/// merge policy was tuned on (L1's runs, space within 1.5x of live data) assume it.
const ENTRY_OVERHEAD: usize = 48;

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

/// What a version is (its node's tag); the node's tail holds the value, the operand, or
/// the encoded large-log pointer.
const TAG_VALUE: Tag = 0;
const TAG_LARGE: Tag = 1;
const TAG_TOMBSTONE: Tag = 2;
const TAG_DELTA: Tag = 3;

/// The stored value of a version.
fn level_value(e: &Entry<'_>) -> LevelValue {
    match e.tag() {
        TAG_VALUE => LevelValue::Inline(e.tail().to_vec()),
        TAG_DELTA => LevelValue::Deltas(crate::delta::single(e.tail())),
        TAG_LARGE => large_ptr(e).map_or(LevelValue::Tombstone, LevelValue::Large),
        _ => LevelValue::Tombstone,
    }
}

/// The large-log pointer of a `TAG_LARGE` version.
fn large_ptr(e: &Entry<'_>) -> Option<LogPtr> {
    (e.tag() == TAG_LARGE)
        .then(|| LogPtr::from_bytes(e.tail()))
        .flatten()
}

/// One memtable generation.
#[derive(Debug)]
pub(crate) struct Memtable {
    /// Every version, in (key ascending, LSN descending) order.
    list: VersionList,
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
    /// Range tombstones, in LSN order (a commit inserts them only once every older
    /// commit into the keyspace is in).
    ranges: parking_lot::RwLock<Vec<RangeTombstone>>,
    /// Whether `ranges` is not empty (lookups skip its lock while it is).
    has_ranges: AtomicBool,
    /// The keys of every version inserted (point reads skip a memtable without theirs).
    keys: KeyFilter,
}

/// Where a key's versions start in one memtable, found before the insert that uses it
/// ([`Memtable::locate`]): a writer searches while it waits for its turn to commit, and
/// its insert then only links. It keeps its memtable alive, so the nodes it names stay
/// valid.
pub(crate) struct InsertHint {
    mem: Arc<Memtable>,
    spot: skiplist::Spot,
    /// The key's hash: a hint handed to another key's insert is ignored, not followed.
    key_hash: u64,
}

// SAFETY: the spot's pointers name nodes of `mem`'s list, which are never freed or changed
// while `mem` lives (the hint keeps it alive) and are only used to start an insert into
// that same list (`insert_at` checks), which may run on any thread.
unsafe impl Send for InsertHint {}
// SAFETY: as above; a hint is only read.
unsafe impl Sync for InsertHint {}

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
            // Arena chunks of a sixteenth of the budget (16 KiB ..= 1 MiB).
            list: VersionList::for_budget(budget),
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
    #[cfg(test)]
    fn may_hold(&self, key: &[u8]) -> bool {
        self.keys.may_hold(key_hash(key))
    }

    /// Bytes of the key filter (beside the budgeted versions).
    pub(crate) fn filter_bytes(&self) -> usize {
        self.keys.bytes()
    }

    /// Bytes of the skip list's spot table (beside the budgeted versions).
    pub(crate) fn spot_bytes(&self) -> usize {
        self.list.spot_bytes()
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

    /// Inserts one version; threads may insert at once. Distinct LSNs make every insert a
    /// new entry.
    pub(crate) fn insert(&self, key: &[u8], lsn: u64, value: MemValue<'_>) {
        self.insert_at(key, lsn, value, None);
    }

    /// Where `key` goes in this memtable, searched now for an insert later
    /// ([`Memtable::insert_at`]).
    pub(crate) fn locate(self: &Arc<Self>, key: &[u8]) -> InsertHint {
        InsertHint {
            spot: self.list.locate(key),
            mem: Arc::clone(self),
            key_hash: key_hash(key),
        }
    }

    /// [`Memtable::insert`], starting from `hint` when it was located in this memtable
    /// for this key (a hint of another memtable is ignored).
    pub(crate) fn insert_at(
        &self,
        key: &[u8],
        lsn: u64,
        value: MemValue<'_>,
        hint: Option<&InsertHint>,
    ) {
        let hash = key_hash(key);
        let spot = hint
            .filter(|h| std::ptr::eq(Arc::as_ptr(&h.mem), self) && h.key_hash == hash)
            .map(|h| &h.spot);
        self.insert_spotted(key, hash, lsn, value, spot);
    }

    /// [`Memtable::insert_at`] from `spot` (searched in this list for this key at `lsn`
    /// or before it), or from the top.
    fn insert_spotted(
        &self,
        key: &[u8],
        hash: u64,
        lsn: u64,
        value: MemValue<'_>,
        spot: Option<&Spot>,
    ) {
        // A key the filter holds already (or a rare false positive) was written here
        // before: its spot is looked up and remembered. A key written once (a load's) is
        // not, and costs the spot table nothing.
        let again = self.keys.may_hold(hash).then_some(hash);
        // The filter first: a reader that finds the version finds its key in the filter.
        self.keys.add(hash);
        let mut size = key.len() + ENTRY_OVERHEAD;
        match value {
            MemValue::Value(v) => {
                size += v.len();
                self.list.insert(key, again, lsn, TAG_VALUE, v, spot);
            }
            MemValue::Delta(d) => {
                size += d.len();
                self.list.insert(key, again, lsn, TAG_DELTA, d, spot);
            }
            MemValue::Tombstone => self.list.insert(key, again, lsn, TAG_TOMBSTONE, &[], spot),
            MemValue::Large(p) => {
                // `LogPtr::from_bytes` reads it back.
                size += LOG_PTR_SIZE;
                self.list
                    .insert(key, again, lsn, TAG_LARGE, &p.to_bytes(), spot);
            }
        }
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
        self.max_lsn.fetch_max(lsn, AtomicOrdering::Relaxed);
    }

    /// Inserts a delta; when the key's newest version here is a value in the node (or a
    /// tombstone) and `op` folds the delta onto it, inserts the folded value instead (the
    /// same value a read would compute, without the chain of deltas a hot key would grow).
    /// The base is the key's newest version *below* `lsn` (a newer one inserted meanwhile
    /// by a later commit is not it); every older version must be in already (the commit
    /// path inserts a group holding merges only once the groups before it are published).
    pub(crate) fn insert_delta(
        &self,
        key: &[u8],
        lsn: u64,
        operand: &[u8],
        op: Option<&dyn crate::delta::MergeOperator>,
    ) {
        let hash = key_hash(key);
        // The search for the newest version also finds where the delta goes.
        let mut spot = None;
        if let Some(op) = op {
            let newest = if self.keys.may_hold(hash) {
                let (at, here) = self.list.seek_spot(&Probe::new(key, lsn), Some(hash));
                spot = Some(here);
                at.filter(|e| e.key() == key)
            } else {
                None
            };
            // A range tombstone newer than every version here deletes what is below it:
            // the delta then applies to nothing.
            let cut = self.range_cut(key, lsn);
            let newest = newest.filter(|e| e.lsn() > cut);
            if newest.is_none() && cut > 0 {
                if let Ok(v) = op.full_merge(key, None, &[operand]) {
                    if v.len() <= crate::delta::MAX_FOLDED_VALUE {
                        self.insert_spotted(key, hash, lsn, MemValue::Value(&v), spot.as_ref());
                        return;
                    }
                }
            }
            if let Some(e) = newest {
                let base = match e.tag() {
                    TAG_VALUE => Some(Some(e.tail())),
                    TAG_TOMBSTONE => Some(None),
                    _ => None,
                };
                if let Some(base) = base {
                    if let Ok(v) = op.full_merge(key, base, &[operand]) {
                        if v.len() <= crate::delta::MAX_FOLDED_VALUE {
                            self.insert_spotted(key, hash, lsn, MemValue::Value(&v), spot.as_ref());
                            return;
                        }
                    }
                }
            }
        }
        self.insert_spotted(key, hash, lsn, MemValue::Delta(operand), spot.as_ref());
    }

    /// Approximate bytes held.
    pub(crate) fn size(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Whether it holds nothing to flush: no version and no range tombstone.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty() && !self.has_ranges.load(AtomicOrdering::Acquire)
    }

    /// Versions held (every version of every key).
    pub(crate) fn len(&self) -> usize {
        self.list.len()
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
        let e = self.list.seek(&Probe::new(key, snapshot))?;
        (e.key() == key).then(|| (e.lsn(), level_value(&e)))
    }

    /// The versions of `key` with `lsn <= snapshot`, newest first, as long as `more` says
    /// the caller wants the next one (a read collecting deltas stops at a base).
    pub(crate) fn versions_of(
        &self,
        key: &[u8],
        snapshot: u64,
        mut more: impl FnMut(Found) -> bool,
    ) {
        let hash = key_hash(key);
        if !self.keys.may_hold(hash) {
            return;
        }
        let mut e = self.list.seek_remembered(&Probe::new(key, snapshot), hash);
        while let Some(x) = e {
            if x.key() != key || !more((x.lsn(), level_value(&x))) {
                return;
            }
            e = x.next();
        }
    }

    /// The LSN of the newest version of `key` (nothing copied).
    pub(crate) fn newest_lsn(&self, key: &[u8]) -> Option<u64> {
        let hash = key_hash(key);
        if !self.keys.may_hold(hash) {
            return None;
        }
        self.list
            .seek_remembered(&Probe::new(key, u64::MAX), hash)
            .filter(|e| e.key() == key)
            .map(|e| e.lsn())
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
        let mut entry = match from {
            Bound::Unbounded => self.list.first(),
            Bound::Included(k) => self.list.seek(&Probe::new(k, u64::MAX)),
            // Past every version of `k` (LSN 0 sorts last among them).
            Bound::Excluded(k) => {
                let mut e = self.list.seek(&Probe::new(k, 0));
                while let Some(x) = e.filter(|x| x.key() == k) {
                    e = x.next();
                }
                e
            }
        };
        let mut out: Vec<MemEntry> = Vec::new();
        let mut keys = 0;
        while let Some(e) = entry {
            entry = e.next();
            if e.lsn() > snapshot {
                continue;
            }
            if let Some((last, _, v)) = out.last() {
                if last.as_slice() == e.key() {
                    if matches!(v, LevelValue::Deltas(_)) {
                        // The chain of deltas goes on (never cut between batches).
                        out.push((e.key().to_vec(), e.lsn(), level_value(&e)));
                    }
                    continue; // else an older version of a key already taken
                }
            }
            if keys == limit {
                break;
            }
            keys += 1;
            out.push((e.key().to_vec(), e.lsn(), level_value(&e)));
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
        // the highest LSN, its last LSN 0 or more. The walk starts at the last version at
        // or before the bound and steps back (each step a search: O(log n)).
        let mut entry = match to {
            Bound::Unbounded => self.list.last(),
            Bound::Included(k) => {
                let probe = Probe::new(k, 0);
                self.list
                    .seek(&probe)
                    .filter(|e| e.key() == k && e.lsn() == 0)
                    .or_else(|| self.list.seek_before(&probe))
            }
            Bound::Excluded(k) => self.list.seek_before(&Probe::new(k, u64::MAX)),
        };
        let mut out: Vec<MemEntry> = Vec::new();
        let mut keys = 0;
        // The visible versions of the key being walked, oldest first (as met going back).
        let mut group: Vec<Entry<'_>> = Vec::new();
        while let Some(e) = entry {
            entry = self.list.before(&e);
            if e.lsn() > snapshot {
                continue;
            }
            if group.last().is_some_and(|g| g.key() != e.key()) {
                if take_newest(&mut group, &mut out) {
                    keys += 1;
                }
                if keys == limit {
                    return out;
                }
            }
            group.push(e);
        }
        take_newest(&mut group, &mut out);
        out
    }

    /// Every version in key order, newest first per key (used by flush; the memtable is
    /// immutable then). The newest version of a key is copied out, and so are the older
    /// ones below a chain of deltas, down to the first that is not a delta (the merge
    /// folds them); any other older version yields just its large-log pointer, if it has
    /// one (its record becomes garbage).
    pub(crate) fn versions(&self) -> impl Iterator<Item = MemVersion<'_>> + '_ {
        let mut prev: Option<Entry<'_>> = None;
        // The version copied out before this one was a delta of the same key.
        let mut chain = false;
        std::iter::successors(self.list.first(), |e| e.next()).map(move |e| {
            // The flush works on this version (a merge step, a leaf entry) before it
            // asks for the next: long enough for the next node to arrive.
            e.prefetch_next();
            let newest = prev.as_ref().is_none_or(|p| p.key() != e.key()) || chain;
            chain = newest && e.tag() == TAG_DELTA;
            let out = if newest {
                // (Older versions below a delta are `Newest` too: copied for the fold.)
                MemVersion::Newest(NewestVersion(e))
            } else {
                MemVersion::Shadowed(large_ptr(&e))
            };
            prev = Some(e);
            out
        })
    }

    /// Bytes of the skip list's arena (what the versions really take, with the unused
    /// ends of its current node and tail chunks).
    pub(crate) fn arena_bytes(&self) -> usize {
        self.list.arena_bytes()
    }
}

/// Moves out of `group` (the visible versions of one key, oldest first) what a read of the
/// key needs, newest first: the newest version and, below a delta, the older ones down to
/// the first that is not. False if the group was empty.
fn take_newest(group: &mut Vec<Entry<'_>>, out: &mut Vec<MemEntry>) -> bool {
    let mut taken = false;
    for e in group.drain(..).rev() {
        let below_delta = matches!(out.last(), Some((_, _, LevelValue::Deltas(_))));
        if taken && !below_delta {
            break;
        }
        out.push((e.key().to_vec(), e.lsn(), level_value(&e)));
        taken = true;
    }
    taken
}

/// One version as a flush sees it.
#[derive(Debug)]
pub(crate) enum MemVersion<'a> {
    /// The newest version of its key, in the memtable (the flush copies it out).
    Newest(NewestVersion<'a>),
    /// An older version, with its large-log pointer if it has one.
    Shadowed(Option<LogPtr>),
}

/// A version a flush writes, as the memtable holds it.
#[derive(Debug)]
pub(crate) struct NewestVersion<'a>(Entry<'a>);

impl NewestVersion<'_> {
    pub(crate) fn key(&self) -> &[u8] {
        self.0.key()
    }

    #[cfg(test)]
    pub(crate) fn lsn(&self) -> u64 {
        self.0.lsn()
    }

    /// The version copied out.
    pub(crate) fn to_entry(&self) -> MemEntry {
        (self.0.key().to_vec(), self.0.lsn(), level_value(&self.0))
    }

    /// The version copied into `key` and `value`, reusing their buffers (a value in
    /// place goes into `value`'s buffer, or `spare`, where one of them is kept while
    /// `value` holds a pointer); its LSN.
    pub(crate) fn copy_into(
        &self,
        key: &mut Vec<u8>,
        value: &mut LevelValue,
        spare: &mut Vec<u8>,
    ) -> u64 {
        key.clear();
        key.extend_from_slice(self.0.key());
        match self.0.tag() {
            TAG_VALUE => value.set_inline(self.0.tail(), spare),
            _ => value.set_other(level_value(&self.0), spare),
        }
        self.0.lsn()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_remembered_from_its_second_write_on_and_a_key_written_once_is_not() {
        // The key filter decides: a key's first write in a memtable leaves the spot table
        // alone (a load's keys cost it nothing), the second claims the key's slot, and a
        // get and a third write then start from it.
        let m = Memtable::with_budget(1 << 20);
        for i in 0..500u64 {
            m.insert(&(i * 2).to_be_bytes(), i + 1, MemValue::Value(b"v"));
        }
        let key = 301u64.to_be_bytes();
        let hash = key_hash(&key);
        m.insert(&key, 1_000, MemValue::Value(b"a"));
        assert!(
            !m.list.remembers(hash),
            "a key written once is not remembered"
        );
        m.insert(&key, 1_001, MemValue::Value(b"b"));
        assert!(m.list.remembers(hash), "a key written again is remembered");
        m.insert(&key, 1_002, MemValue::Delta(b"c"));
        assert_eq!(m.newest_lsn(&key), Some(1_002));
        assert_eq!(
            m.get(&key, 1_001),
            Some((1_001, LevelValue::Inline(b"b".to_vec())))
        );
    }

    #[test]
    fn keys_and_values_of_every_size_read_back() {
        // Keys on both sides of the 16-byte prefix held in the node's header, values from
        // nothing to more than an arena chunk (a node of its own), large pointers.
        let m = Memtable::new();
        let mut lsn = 0;
        for key_len in [0usize, 1, 15, 16, 17, 40, 300] {
            for value_len in [0usize, 1, 9, 46, 1000, 70_000] {
                lsn += 1;
                let key: Vec<u8> = (0..key_len).map(|i| (i * 7 + value_len) as u8).collect();
                let value: Vec<u8> = (0..value_len).map(|i| i as u8).collect();
                m.insert(&key, lsn, MemValue::Value(&value));
                assert_eq!(
                    m.get(&key, u64::MAX),
                    Some((lsn, LevelValue::Inline(value))),
                    "key {key_len} bytes, value {value_len} bytes"
                );
            }
            lsn += 1;
            let key = vec![b'p'; key_len];
            let p = LogPtr {
                segment: 7,
                offset: lsn,
                len: 4096,
            };
            m.insert(&key, lsn, MemValue::Large(p));
            assert_eq!(m.get(&key, u64::MAX), Some((lsn, LevelValue::Large(p))));
        }
        assert!(m.arena_bytes() > 70_000 * 6);
    }

    #[test]
    fn an_insert_hint_is_followed_only_in_its_memtable_for_its_key() {
        let a = Arc::new(Memtable::new());
        let b = Arc::new(Memtable::new());
        let v = |x: &'static [u8]| MemValue::Value(x);
        for (i, k) in [&b"c"[..], b"e", b"g", b"i"].iter().enumerate() {
            a.insert(k, i as u64 + 1, v(b"a"));
            b.insert(k, i as u64 + 1, v(b"b"));
        }
        // `a`'s spot for "d", handed to `b`, and to another key of `a`: ignored (either
        // would link the version where it does not belong).
        let hint = a.locate(b"d");
        b.insert_at(b"d", 10, v(b"bd"), Some(&hint));
        a.insert_at(b"h", 11, v(b"ah"), Some(&hint));
        a.insert_at(b"d", 12, v(b"ad"), Some(&hint));
        let keys = |m: &Memtable| -> Vec<Vec<u8>> {
            m.versions()
                .map(|e| match e {
                    MemVersion::Newest(n) => n.key().to_vec(),
                    MemVersion::Shadowed(_) => b"(older)".to_vec(),
                })
                .collect()
        };
        let want: Vec<Vec<u8>> = ["c", "d", "e", "g", "h", "i"]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        assert_eq!(keys(&a), want);
        assert_eq!(
            keys(&b),
            ["c", "d", "e", "g", "i"]
                .iter()
                .map(|k| k.as_bytes().to_vec())
                .collect::<Vec<_>>()
        );
        for (m, k, lsn, val) in [
            (&a, &b"d"[..], 12, &b"ad"[..]),
            (&a, b"h", 11, b"ah"),
            (&b, b"d", 10, b"bd"),
        ] {
            assert_eq!(
                m.get(k, u64::MAX),
                Some((lsn, LevelValue::Inline(val.to_vec())))
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
        let MemVersion::Newest(first) = &versions[0] else {
            panic!("{:?}", versions[0]);
        };
        assert_eq!(first.to_entry(), (b"a".to_vec(), 5, LevelValue::Tombstone));
        assert!(matches!(versions[1], MemVersion::Shadowed(None)));
        assert!(matches!(versions[2], MemVersion::Shadowed(None)));
        let MemVersion::Newest(last) = &versions[3] else {
            panic!("{:?}", versions[3]);
        };
        assert_eq!((last.key(), last.lsn()), (&b"ab"[..], 2));
        // Copied into buffers held from an earlier version: the same bytes.
        let (mut key, mut value) = (
            b"a much longer key".to_vec(),
            LevelValue::Inline(vec![9; 40]),
        );
        assert_eq!(last.copy_into(&mut key, &mut value, &mut Vec::new()), 2);
        assert_eq!(
            (key, value),
            (b"ab".to_vec(), LevelValue::Inline(b"x".to_vec()))
        );
        let (mut key, mut value, mut spare) = (Vec::new(), LevelValue::Inline(vec![1]), Vec::new());
        assert_eq!(first.copy_into(&mut key, &mut value, &mut spare), 5);
        assert_eq!((key, value), (b"a".to_vec(), LevelValue::Tombstone));
        // The value buffer it held is kept, and the next value in place goes into it.
        assert_eq!(spare, vec![1]);
        let mut key = Vec::new();
        let mut value = LevelValue::Tombstone;
        assert_eq!(last.copy_into(&mut key, &mut value, &mut spare), 2);
        assert_eq!(value, LevelValue::Inline(b"x".to_vec()));
        assert!(
            spare.is_empty() && spare.capacity() == 0,
            "the spare buffer was not used"
        );
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
