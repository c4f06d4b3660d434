//! The one k-way merge of sorted (key, LSN, value) streams, used by scans and by
//! compaction (flushes included).
//!
//! Owns: the order in which versions from several sources come out, and which of them
//! survive. [`MergeHeap`] is a binary heap holding the head of every source; it yields all
//! versions ordered by key ascending (descending in a *backward* merge, which reverse
//! iterators use) and, for one key, newest first in both directions: by source (the caller
//! lists sources newest first, a lower index wins) and, within one source, in the order
//! the source gives them (LSN descending). [`Merge`] is the layer on top: it keeps the
//! newest version of each key and drops the older ones (*shadowing*, counted and handed to
//! an observer); when the newest holds deltas it keeps, beside it, the older versions the
//! deltas apply to (more deltas, down to the first *base* that is not), so that its caller
//! can fold them ([`MergeEntry::take_stack`]); drops the versions older than a range
//! tombstone covering their key (handed to the observer like shadowed ones); optionally
//! hides versions above a snapshot LSN, keeps or drops tombstones
//! as the caller asks, and optionally stops at a bound (the range's end in its direction).
//!
//! Never: reads a value behind a pointer or an overflow blob (callers resolve the winner),
//! clones a key, or stops silently when an invariant breaks. A source that goes backwards
//! (a key behind its previous one, or the same key again without a lower LSN) is reported
//! as [`Error::Internal`], because merging on would emit keys out of order or let an old
//! version win.

use crate::error::{Error, Result};
use crate::level::{LevelEntry, LevelValue};
use crate::range_delete::RangeTombstones;
use std::cmp::Ordering;
use std::collections::binary_heap::{BinaryHeap, PeekMut};
use std::ops::Bound;

/// A stream of versions sorted by key ascending (descending for a backward merge) and, for
/// one key, LSN descending.
pub(crate) trait Source {
    /// The next version, or `None` at the end.
    fn next_entry(&mut self) -> Result<Option<LevelEntry>>;

    /// The next version into `key` and `value`, reusing their buffers where the source
    /// can (a merge reads each version into its caller's entry or its own, so a long
    /// merge copies keys and values into the same few buffers); its LSN, or `None` at the
    /// end (`key` and `value` then hold anything).
    fn next_into(&mut self, key: &mut Vec<u8>, value: &mut LevelValue) -> Result<Option<u64>> {
        Ok(self.next_entry()?.map(|(k, lsn, v)| {
            *key = k;
            *value = v;
            lsn
        }))
    }
}

impl<S: Source + ?Sized> Source for &mut S {
    fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
        (**self).next_entry()
    }
    fn next_into(&mut self, key: &mut Vec<u8>, value: &mut LevelValue) -> Result<Option<u64>> {
        (**self).next_into(key, value)
    }
}

impl<S: Source + ?Sized> Source for Box<S> {
    fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
        (**self).next_entry()
    }
    fn next_into(&mut self, key: &mut Vec<u8>, value: &mut LevelValue) -> Result<Option<u64>> {
        (**self).next_into(key, value)
    }
}

/// One version coming out of a merge, with the index of the source it came from (the
/// caller may need that source to read an overflow value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MergeEntry {
    pub key: Vec<u8>,
    pub lsn: u64,
    pub value: LevelValue,
    pub source: usize,
    /// When `value` holds deltas: the older versions of the key they apply to, newest
    /// first: more deltas, then the base if the merge met one (a version that is not
    /// deltas, a tombstone included). Empty otherwise.
    pub below: Vec<MergeEntry>,
}

impl Default for MergeEntry {
    fn default() -> Self {
        MergeEntry::new(Vec::new(), 0, LevelValue::Tombstone, 0)
    }
}

impl MergeEntry {
    fn new(key: Vec<u8>, lsn: u64, value: LevelValue, source: usize) -> Self {
        MergeEntry {
            key,
            lsn,
            value,
            source,
            below: Vec::new(),
        }
    }

    /// Frees a value buffer above [`KEPT_BUFFER`] bytes: an entry kept for reuse must not
    /// pin a rare large value's memory for the rest of a merge.
    fn trim(&mut self) {
        if let LevelValue::Inline(v) | LevelValue::Deltas(v) = &self.value {
            if v.capacity() > KEPT_BUFFER {
                self.value = LevelValue::Tombstone;
            }
        }
    }

    fn is_tombstone(&self) -> bool {
        matches!(self.value, LevelValue::Tombstone)
    }

    /// Whether the fold of this entry's deltas still takes older versions (it holds
    /// deltas, has met no base yet, and the last list met is not closed; a closed list
    /// that is still an overflow blob is found closed by [`MergeEntry::take_stack`]).
    fn folds_more(&self) -> bool {
        let last = self.below.last().map_or(&self.value, |b| &b.value);
        match last {
            LevelValue::Deltas(list) => !crate::delta::is_closed(list),
            LevelValue::DeltasOverflow { .. } => true,
            _ => false,
        }
    }

    /// For an entry holding deltas: one operand list of its own deltas and those below
    /// (oldest first), the base the merge met (if any, and if no closed list came first),
    /// and the versions below a closed list (shadowed by it). `load(source, value)` reads
    /// an operand list that is an overflow blob of that source into `LevelValue::Deltas`.
    pub(crate) fn take_stack(
        &mut self,
        mut load: impl FnMut(usize, LevelValue) -> Result<LevelValue>,
    ) -> Result<Stacked> {
        let mut stack = crate::delta::Stack::default();
        let mut out = Stacked::default();
        let below = std::mem::take(&mut self.below);
        let own = std::mem::replace(&mut self.value, LevelValue::Tombstone);
        let mut rest = below.into_iter();
        let mut next: Option<(usize, u64, LevelValue, Option<MergeEntry>)> =
            Some((self.source, self.lsn, own, None));
        while let Some((source, lsn, value, entry)) = next.take() {
            if !value.is_deltas() {
                if let Some(mut e) = entry {
                    e.value = value;
                    out.base = Some(e);
                }
                break;
            }
            let LevelValue::Deltas(list) = load(source, value)? else {
                return Err(Error::Internal(format!(
                    "an operand list of key {} did not load as deltas",
                    show_key(&self.key)
                )));
            };
            let closed = crate::delta::is_closed(&list);
            let ptr = crate::log::ptr::LogPtr::closed_base_of(&list);
            stack.push_older(list);
            if closed {
                if let Some(p) = ptr {
                    // Closed over a value in the large log: that value is the base.
                    out.base = Some(MergeEntry::new(
                        self.key.clone(),
                        lsn,
                        LevelValue::Large(p),
                        source,
                    ));
                }
                break;
            }
            next = rest.next().map(|mut e| {
                let v = std::mem::replace(&mut e.value, LevelValue::Tombstone);
                (e.source, e.lsn, v, Some(e))
            });
        }
        out.shadowed = rest.collect();
        out.list = stack.into_list(&self.key)?;
        Ok(out)
    }
}

/// What [`MergeEntry::take_stack`] made of an entry holding deltas.
#[derive(Debug, Default)]
pub(crate) struct Stacked {
    /// Every delta, oldest first (closed, with its base, if the oldest list met was).
    pub list: Vec<u8>,
    /// The version the deltas apply to, if the merge met one before a closed list.
    pub base: Option<MergeEntry>,
    /// Older versions below a closed list: dead.
    pub shadowed: Vec<MergeEntry>,
}

/// Orders heads so that the max-heap's top is the smallest key (the largest when `BACK`)
/// and, among equal keys, the lowest (newest) source. Each source has at most one head in
/// the heap, so (key, source) is a total order on the heap's contents. (Comparing the
/// keys' first 8 bytes as a number first was tried: YCSB keys next to each other in a
/// merge share them, and the larger head made each sift cost more.)
struct Head<const BACK: bool>(MergeEntry);

/// The byte order of two keys (as `<[u8]>::cmp`), deciding on their first 16 bytes
/// without a call when both have that many: a merge compares keys several times per
/// version it moves, and `memcmp`'s call and length checks cost more than the two loads
/// that decide nearly every comparison (keys next to each other in a merge often share
/// their first 8 bytes, rarely 16).
#[inline]
fn key_order(a: &[u8], b: &[u8]) -> Ordering {
    if let (Some(pa), Some(pb)) = (a.first_chunk::<16>(), b.first_chunk::<16>()) {
        let (x, y) = (u128::from_be_bytes(*pa), u128::from_be_bytes(*pb));
        if x != y {
            return x.cmp(&y);
        }
    }
    a.cmp(b)
}

impl<const BACK: bool> Ord for Head<BACK> {
    fn cmp(&self, other: &Self) -> Ordering {
        let keys = if BACK {
            key_order(&self.0.key, &other.0.key)
        } else {
            key_order(&other.0.key, &self.0.key)
        };
        keys.then_with(|| other.0.source.cmp(&self.0.source))
    }
}

impl<const BACK: bool> PartialOrd for Head<BACK> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<const BACK: bool> PartialEq for Head<BACK> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<const BACK: bool> Eq for Head<BACK> {}

/// A key for error messages: at most 32 bytes, escaped.
fn show_key(key: &[u8]) -> String {
    let shown = key.get(..32).unwrap_or(key);
    let more = if shown.len() < key.len() { "..." } else { "" };
    format!("\"{}\"{more}", shown.escape_ascii())
}

/// The largest value buffer a merge keeps for reuse: a rare large value in place must not
/// pin its memory for the rest of the merge.
const KEPT_BUFFER: usize = 64 << 10;

/// Every version of N sorted sources in merged order (see the module doc); keys descend
/// when `BACK`. A step reads the top source's next version into the caller's entry (its
/// buffers reused), swaps that entry with the heap's top and sifts the new head down
/// once: no version is moved through the heap more than that.
pub(crate) struct MergeHeap<S, const BACK: bool = false> {
    sources: Vec<S>,
    heap: BinaryHeap<Head<BACK>>,
}

impl<S: Source, const BACK: bool> MergeHeap<S, BACK> {
    /// Reads the first entry of every source. `sources` are newest first.
    pub(crate) fn new(mut sources: Vec<S>) -> Result<Self> {
        let mut heap = BinaryHeap::with_capacity(sources.len());
        for (source, s) in sources.iter_mut().enumerate() {
            if let Some((key, lsn, value)) = s.next_entry()? {
                heap.push(Head(MergeEntry::new(key, lsn, value, source)));
            }
        }
        Ok(MergeHeap { sources, heap })
    }

    /// The key of the next version, without taking it.
    pub(crate) fn peek_key(&self) -> Option<&[u8]> {
        self.heap.peek().map(|h| h.0.key.as_slice())
    }

    /// Source `i` (in the order given to [`MergeHeap::new`]).
    pub(crate) fn source(&self, i: usize) -> Option<&S> {
        self.sources.get(i)
    }

    /// Takes the next version into `out` and refills its source's head; false at the
    /// end (`out` unchanged). Whatever `out` held is discarded: its buffers are read into
    /// (a value buffer above [`KEPT_BUFFER`] bytes is freed, not kept).
    pub(crate) fn pop_into(&mut self, out: &mut MergeEntry) -> Result<bool> {
        let Some(mut top) = self.heap.peek_mut() else {
            return Ok(false);
        };
        let index = top.0.source;
        let Some(source) = self.sources.get_mut(index) else {
            return Err(Error::Internal(format!(
                "merge heap holds an entry of source {index}, but there are only {} sources",
                self.sources.len()
            )));
        };
        out.below.clear();
        out.trim();
        let Some(lsn) = source.next_into(&mut out.key, &mut out.value)? else {
            *out = PeekMut::pop(top).0;
            return Ok(true);
        };
        let prev = &top.0;
        let step = key_order(&out.key, &prev.key);
        let in_order = match if BACK { step.reverse() } else { step } {
            Ordering::Greater => true,
            Ordering::Equal => lsn < prev.lsn,
            Ordering::Less => false,
        };
        if !in_order {
            return Err(Error::Internal(format!(
                "merge source {index} is out of order: key {} (LSN {lsn}) came after key {} \
                 (LSN {}); sources must be sorted by key {}, then LSN descending",
                show_key(&out.key),
                show_key(&prev.key),
                prev.lsn,
                if BACK { "descending" } else { "ascending" }
            )));
        }
        out.lsn = lsn;
        out.source = index;
        // Writing through `top` makes the heap sift the new head down when `top` drops.
        std::mem::swap(&mut top.0, out);
        Ok(true)
    }
}

/// What a merge does with a tombstone that is the newest version of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tombstones {
    /// Yield it (a flush, or a compaction above the bottom level: older data below may
    /// still hold the key).
    Keep,
    /// Drop it after it has shadowed the older versions (reads; compaction into the bottom
    /// level).
    Drop,
}

/// What a [`Merge`] dropped so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergeCounts {
    /// Older versions of a key whose newest visible version was taken.
    pub shadowed: u64,
    /// Newest versions that were tombstones, dropped under [`Tombstones::Drop`].
    pub tombstones_dropped: u64,
    /// Versions above the snapshot LSN.
    pub hidden: u64,
    /// Versions older than a range tombstone covering their key.
    pub range_deleted: u64,
}

/// The newest visible version of each key, in key order (descending when `BACK`; see the
/// module doc).
pub(crate) struct Merge<S, const BACK: bool = false> {
    heap: MergeHeap<S, BACK>,
    tombstones: Tombstones,
    snapshot: Option<u64>,
    /// Where the merge ends: the upper bound going forward, the lower one going back.
    end: Bound<Vec<u8>>,
    /// Range tombstones applied to every key.
    ranges: RangeTombstones,
    counts: MergeCounts,
    /// Where an older version of the winner's key is read to be dropped.
    older: MergeEntry,
}

impl<S: Source> Merge<S> {
    /// A merge of `sources` (newest first) in ascending key order that sees every version
    /// and never stops early.
    pub(crate) fn new(sources: Vec<S>, tombstones: Tombstones) -> Result<Self> {
        Self::directed(sources, tombstones)
    }
}

impl<S: Source, const BACK: bool> Merge<S, BACK> {
    /// Like [`Merge::new`], in descending key order when `BACK` (each source then walks
    /// backward: keys descending, the versions of one key still newest first).
    pub(crate) fn directed(sources: Vec<S>, tombstones: Tombstones) -> Result<Self> {
        Ok(Merge {
            heap: MergeHeap::new(sources)?,
            tombstones,
            snapshot: None,
            end: Bound::Unbounded,
            ranges: RangeTombstones::default(),
            counts: MergeCounts::default(),
            older: MergeEntry::default(),
        })
    }

    /// Drops every version older than a range tombstone of `ranges` that covers its key.
    pub(crate) fn with_range_tombstones(mut self, ranges: RangeTombstones) -> Self {
        self.ranges = ranges;
        self
    }

    /// Hides versions with an LSN above `lsn`: the newest version at or below it wins.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn with_snapshot(mut self, lsn: u64) -> Self {
        self.snapshot = Some(lsn);
        self
    }

    /// Ends the merge at the first key beyond `end` in its direction (above it going
    /// forward, below it going back); nothing past it is read further.
    pub(crate) fn with_end(mut self, end: Bound<Vec<u8>>) -> Self {
        self.end = end;
        self
    }

    /// What was dropped so far.
    pub(crate) fn counts(&self) -> MergeCounts {
        self.counts
    }

    /// Source `i` (to read an overflow value of an entry it yielded).
    pub(crate) fn source(&self, i: usize) -> Option<&S> {
        self.heap.source(i)
    }

    fn beyond_end(&self, key: &[u8]) -> bool {
        match (&self.end, BACK) {
            (Bound::Included(u), false) => key > u.as_slice(),
            (Bound::Excluded(u), false) => key >= u.as_slice(),
            (Bound::Included(l), true) => key < l.as_slice(),
            (Bound::Excluded(l), true) => key <= l.as_slice(),
            (Bound::Unbounded, _) => false,
        }
    }

    /// The next surviving version.
    pub(crate) fn next(&mut self) -> Result<Option<MergeEntry>> {
        self.next_observed(|_, _| Ok(()))
    }

    /// [`Merge::next_into`] as a new entry.
    pub(crate) fn next_observed(
        &mut self,
        on_dropped: impl FnMut(Option<&MergeEntry>, &MergeEntry) -> Result<()>,
    ) -> Result<Option<MergeEntry>> {
        let mut out = MergeEntry::default();
        Ok(self.next_into(&mut out, on_dropped)?.then_some(out))
    }

    /// The next surviving version into `out` (whatever it held is discarded, its buffers
    /// read into); false at the end. `on_dropped(Some(winner), older)` sees every version
    /// the winner shadows (not those kept in its `below`) (in merged order) before the
    /// winner is returned, and may refuse it; `on_dropped(None, version)` sees every
    /// version a range tombstone deletes.
    /// A tombstone dropped under [`Tombstones::Drop`] still shadows, so its older versions
    /// are reported too.
    pub(crate) fn next_into(
        &mut self,
        out: &mut MergeEntry,
        mut on_dropped: impl FnMut(Option<&MergeEntry>, &MergeEntry) -> Result<()>,
    ) -> Result<bool> {
        let winner = out;
        loop {
            match self.heap.peek_key() {
                None => return Ok(false),
                Some(k) if self.beyond_end(k) => return Ok(false),
                Some(_) => {}
            }
            if !self.heap.pop_into(winner)? {
                return Err(Error::Internal(
                    "merge heap lost its head between peek and pop".into(),
                ));
            }
            if self.snapshot.is_some_and(|s| winner.lsn > s) {
                // Invisible at this snapshot: it neither wins nor shadows.
                self.counts.hidden += 1;
                continue;
            }
            let cut = if self.ranges.is_empty() {
                0
            } else {
                self.ranges.cut(&winner.key)
            };
            let deleted = winner.lsn < cut;
            while self.heap.peek_key() == Some(winner.key.as_slice()) {
                if !self.heap.pop_into(&mut self.older)? {
                    return Err(Error::Internal(
                        "merge heap lost a shadowed entry between peek and pop".into(),
                    ));
                }
                if self.older.lsn < cut {
                    // Versions of one key come newest first: every later one is older too.
                    self.counts.range_deleted += 1;
                    on_dropped(None, &self.older)?;
                    continue;
                }
                if winner.folds_more() {
                    winner.below.push(std::mem::take(&mut self.older));
                    continue;
                }
                self.counts.shadowed += 1;
                on_dropped(Some(winner), &self.older)?;
            }
            // Kept until the next shadowed version (a read iterator keeps it as long as
            // it lives).
            self.older.trim();
            if deleted {
                self.counts.range_deleted += 1;
                on_dropped(None, winner)?;
                continue;
            }
            if self.tombstones == Tombstones::Drop && winner.is_tombstone() {
                self.counts.tombstones_dropped += 1;
                continue;
            }
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A source over a fixed list of entries.
    struct VecSource(std::vec::IntoIter<LevelEntry>);

    impl Source for VecSource {
        fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
            Ok(self.0.next())
        }
    }

    fn src(entries: &[(&str, u64, Option<&str>)]) -> VecSource {
        VecSource(
            entries
                .iter()
                .map(|&(k, lsn, v)| (k.as_bytes().to_vec(), lsn, value(v)))
                .collect::<Vec<_>>()
                .into_iter(),
        )
    }

    fn value(v: Option<&str>) -> LevelValue {
        match v {
            Some(s) => LevelValue::Inline(s.as_bytes().to_vec()),
            None => LevelValue::Tombstone,
        }
    }

    /// Drains a merge into (key, LSN, value) with values as text (`None` = tombstone).
    fn drain<S: Source>(m: &mut Merge<S>) -> Vec<(String, u64, Option<String>)> {
        let mut out = Vec::new();
        while let Some(e) = m.next().unwrap() {
            let v = match e.value {
                LevelValue::Inline(b) => Some(String::from_utf8(b).unwrap()),
                LevelValue::Tombstone => None,
                other => panic!("unexpected value {other:?}"),
            };
            out.push((String::from_utf8(e.key).unwrap(), e.lsn, v));
        }
        out
    }

    fn row(k: &str, lsn: u64, v: Option<&str>) -> (String, u64, Option<String>) {
        (k.to_string(), lsn, v.map(str::to_string))
    }

    /// A source that copies each entry into the buffers it is given.
    struct CopyingSource(std::vec::IntoIter<LevelEntry>);

    impl Source for CopyingSource {
        fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
            Ok(self.0.next())
        }
        fn next_into(&mut self, key: &mut Vec<u8>, value: &mut LevelValue) -> Result<Option<u64>> {
            Ok(self.0.next().map(|(k, lsn, v)| {
                key.clear();
                key.extend_from_slice(&k);
                *value = v;
                lsn
            }))
        }
    }

    #[test]
    fn next_into_reads_into_the_buffers_it_is_given() {
        let entries = ["a", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_bytes().to_vec(), 10 - i as u64, value(Some(k))))
            .collect::<Vec<_>>();
        let mut m = Merge::new(vec![CopyingSource(entries.into_iter())], Tombstones::Keep).unwrap();
        let mut e = MergeEntry::default();
        let step = |m: &mut Merge<CopyingSource>, e: &mut MergeEntry| {
            m.next_into(e, |_, _| Ok(())).unwrap()
        };
        assert!(step(&mut m, &mut e));
        assert_eq!(e.key, b"a");
        // The heap holds "b" (read when "a" was taken); "c" is read into `a`'s buffers
        // and comes out a step later.
        e.key.reserve(4000);
        e.below.push(e.clone());
        let a_capacity = e.key.capacity();
        assert!(step(&mut m, &mut e));
        assert_eq!((e.key.as_slice(), e.lsn), (&b"b"[..], 9));
        assert!(step(&mut m, &mut e));
        assert_eq!((e.key.as_slice(), e.lsn), (&b"c"[..], 8));
        assert_eq!(
            e.key.capacity(),
            a_capacity,
            "the given key buffer was not reused"
        );
        assert!(
            e.below.is_empty(),
            "older versions of `a` came back with it"
        );
        assert_eq!(e.value, value(Some("c")));
        assert!(step(&mut m, &mut e));
        assert_eq!(e.key, b"d");
        // At the end nothing is read (no hidden, dropped or deleted version came first
        // here, which the merge would have read into the entry on its way).
        assert!(!step(&mut m, &mut e));
        assert_eq!(e.key, b"d", "the end leaves the entry as it was");
    }

    #[test]
    fn heap_yields_every_version_in_key_then_source_order() {
        let mut h = MergeHeap::<_, false>::new(vec![
            src(&[("b", 9, Some("b9")), ("d", 8, Some("d8"))]),
            src(&[("a", 5, Some("a5")), ("b", 4, Some("b4"))]),
            src(&[("b", 2, Some("b2")), ("c", 1, Some("c1"))]),
        ])
        .unwrap();
        let mut got = Vec::new();
        let mut e = MergeEntry::default();
        while h.pop_into(&mut e).unwrap() {
            got.push((String::from_utf8(e.key.clone()).unwrap(), e.lsn, e.source));
        }
        let want = [
            ("a", 5, 1),
            ("b", 9, 0),
            ("b", 4, 1),
            ("b", 2, 2),
            ("c", 1, 2),
        ];
        let want: Vec<_> = want
            .iter()
            .chain([("d", 8, 0)].iter())
            .map(|&(k, l, s)| (k.to_string(), l, s))
            .collect();
        assert_eq!(got, want);
        assert!(!h.pop_into(&mut e).unwrap());
    }

    #[test]
    fn newest_source_shadows_older_ones() {
        let mut m = Merge::new(
            vec![
                src(&[("b", 30, Some("new"))]),
                src(&[("a", 20, Some("a")), ("b", 20, Some("mid"))]),
                src(&[("b", 10, Some("old")), ("c", 10, Some("c"))]),
            ],
            Tombstones::Keep,
        )
        .unwrap();
        let mut seen = Vec::new();
        let mut got = Vec::new();
        while let Some(e) = m
            .next_observed(|w, old| {
                seen.push((w.map(|w| w.lsn), old.lsn, old.source));
                Ok(())
            })
            .unwrap()
        {
            got.push((e.key, e.lsn, e.source));
        }
        assert_eq!(
            got,
            vec![
                (b"a".to_vec(), 20, 1),
                (b"b".to_vec(), 30, 0),
                (b"c".to_vec(), 10, 2)
            ]
        );
        assert_eq!(seen, vec![(Some(30), 20, 1), (Some(30), 10, 2)]);
        assert_eq!(
            m.counts(),
            MergeCounts {
                shadowed: 2,
                ..MergeCounts::default()
            }
        );
    }

    #[test]
    fn an_observer_error_stops_the_merge() {
        let mut m = Merge::new(
            vec![src(&[("k", 1, Some("x"))]), src(&[("k", 2, Some("y"))])],
            Tombstones::Keep,
        )
        .unwrap();
        let r = m.next_observed(|w, old| {
            if w.is_some_and(|w| old.lsn >= w.lsn) {
                Err(Error::Internal("older source has a newer LSN".into()))
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(Error::Internal(_))), "{r:?}");
    }

    #[test]
    fn tombstones_kept_or_dropped() {
        let sources = || {
            vec![
                src(&[("a", 9, None), ("c", 9, None)]),
                src(&[("a", 5, Some("a")), ("b", 5, Some("b"))]),
            ]
        };
        let mut keep = Merge::new(sources(), Tombstones::Keep).unwrap();
        assert_eq!(
            drain(&mut keep),
            vec![row("a", 9, None), row("b", 5, Some("b")), row("c", 9, None)]
        );
        assert_eq!(keep.counts().shadowed, 1);
        assert_eq!(keep.counts().tombstones_dropped, 0);

        let mut drop = Merge::new(sources(), Tombstones::Drop).unwrap();
        assert_eq!(drain(&mut drop), vec![row("b", 5, Some("b"))]);
        // The tombstone of `a` still shadowed the value below it.
        assert_eq!(
            drop.counts(),
            MergeCounts {
                shadowed: 1,
                tombstones_dropped: 2,
                ..MergeCounts::default()
            }
        );
    }

    #[test]
    fn snapshot_hides_newer_versions() {
        // Source 0 holds several versions per key (like a memtable), newest first.
        let sources = || {
            vec![
                src(&[
                    ("a", 12, Some("a12")),
                    ("a", 7, Some("a7")),
                    ("b", 11, None),
                    ("d", 15, Some("d15")),
                ]),
                src(&[
                    ("a", 3, Some("a3")),
                    ("b", 4, Some("b4")),
                    ("c", 2, Some("c2")),
                ]),
            ]
        };
        let mut at10 = Merge::new(sources(), Tombstones::Drop)
            .unwrap()
            .with_snapshot(10);
        assert_eq!(
            drain(&mut at10),
            vec![
                row("a", 7, Some("a7")),
                row("b", 4, Some("b4")),
                row("c", 2, Some("c2"))
            ]
        );
        assert_eq!(
            at10.counts(),
            MergeCounts {
                shadowed: 1,
                tombstones_dropped: 0,
                hidden: 3,
                ..MergeCounts::default()
            }
        );

        let mut at11 = Merge::new(sources(), Tombstones::Drop)
            .unwrap()
            .with_snapshot(11);
        assert_eq!(
            drain(&mut at11),
            vec![row("a", 7, Some("a7")), row("c", 2, Some("c2"))]
        );

        let mut all = Merge::new(sources(), Tombstones::Keep).unwrap();
        assert_eq!(
            drain(&mut all),
            vec![
                row("a", 12, Some("a12")),
                row("b", 11, None),
                row("c", 2, Some("c2")),
                row("d", 15, Some("d15"))
            ]
        );
    }

    #[test]
    fn upper_bound_ends_the_merge() {
        let sources = || {
            vec![
                src(&[("a", 2, Some("a")), ("c", 2, None), ("d", 2, Some("d"))]),
                src(&[("b", 1, Some("b")), ("c", 1, Some("c"))]),
            ]
        };
        let mut incl = Merge::new(sources(), Tombstones::Drop)
            .unwrap()
            .with_end(Bound::Included(b"c".to_vec()));
        assert_eq!(
            drain(&mut incl),
            vec![row("a", 2, Some("a")), row("b", 1, Some("b"))]
        );
        assert_eq!(incl.next().unwrap(), None);
        let mut excl = Merge::new(sources(), Tombstones::Keep)
            .unwrap()
            .with_end(Bound::Excluded(b"c".to_vec()));
        assert_eq!(
            drain(&mut excl),
            vec![row("a", 2, Some("a")), row("b", 1, Some("b"))]
        );
    }

    #[test]
    fn empty_sources() {
        let mut none = Merge::new(Vec::<VecSource>::new(), Tombstones::Drop).unwrap();
        assert_eq!(none.next().unwrap(), None);
        let mut all_empty = Merge::new(vec![src(&[]), src(&[])], Tombstones::Keep).unwrap();
        assert_eq!(all_empty.next().unwrap(), None);
        assert_eq!(all_empty.next().unwrap(), None);
        let mut some_empty = Merge::new(
            vec![src(&[]), src(&[("x", 1, Some("x"))]), src(&[])],
            Tombstones::Keep,
        )
        .unwrap();
        assert_eq!(drain(&mut some_empty), vec![row("x", 1, Some("x"))]);
        assert_eq!(some_empty.counts(), MergeCounts::default());
    }

    #[test]
    fn a_source_out_of_order_is_an_internal_error() {
        let backwards = || {
            src(&[
                ("a", 1, Some("a")),
                ("c", 1, Some("c")),
                ("b", 1, Some("b")),
            ])
        };
        let mut m = Merge::new(
            vec![backwards(), src(&[("z", 1, Some("z"))])],
            Tombstones::Keep,
        )
        .unwrap();
        // "a" comes out; taking "c" reads "b" from the same source.
        assert!(m.next().unwrap().is_some());
        let err = m.next().unwrap_err();
        match &err {
            Error::Internal(msg) => {
                assert!(msg.contains("source 0"), "{msg}");
                assert!(msg.contains("\"b\""), "{msg}");
            }
            other => panic!("expected Internal, got {other:?}"),
        }

        // The same key again must come with a lower LSN.
        for second_lsn in [5, 6] {
            let mut dup = Merge::new(
                vec![src(&[("k", 5, Some("x")), ("k", second_lsn, Some("y"))])],
                Tombstones::Keep,
            )
            .unwrap();
            assert!(matches!(dup.next(), Err(Error::Internal(_))));
        }
        let mut ok = Merge::new(
            vec![src(&[("k", 5, Some("x")), ("k", 4, Some("y"))])],
            Tombstones::Keep,
        )
        .unwrap();
        assert_eq!(drain(&mut ok), vec![row("k", 5, Some("x"))]);
        assert_eq!(ok.counts().shadowed, 1);
    }

    #[test]
    fn source_errors_are_passed_on() {
        struct Failing(u32);
        impl Source for Failing {
            fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
                self.0 += 1;
                if self.0 > 1 {
                    Err(Error::Closed)
                } else {
                    Ok(Some((b"a".to_vec(), 1, LevelValue::Tombstone)))
                }
            }
        }
        let mut m = Merge::new(vec![Failing(0)], Tombstones::Keep).unwrap();
        assert!(matches!(m.next(), Err(Error::Closed)));
        assert!(matches!(
            MergeHeap::<_, false>::new(vec![Failing(1)]),
            Err(Error::Closed)
        ));
    }

    /// A small deterministic generator (xorshift64).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn key_order_is_the_byte_order() {
        // Keys of a few bytes from a small alphabet, so that equal prefixes of every
        // length (below, at and past 16 bytes), equal keys and prefixes of other keys
        // all come up.
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let key = |rng: &mut Rng| -> Vec<u8> {
            let len = rng.below(40) as usize;
            let shared = rng.below(24) as usize;
            (0..len)
                .map(|i| {
                    if i < shared {
                        b'k'
                    } else {
                        b"\x00ak\xff"[rng.below(4) as usize]
                    }
                })
                .collect()
        };
        let mut seen = [0usize; 3];
        for _ in 0..200_000 {
            let (a, b) = (key(&mut rng), key(&mut rng));
            let want = a.as_slice().cmp(b.as_slice());
            assert_eq!(key_order(&a, &b), want, "{a:?} vs {b:?}");
            assert_eq!(key_order(&b, &a), want.reverse(), "{b:?} vs {a:?}");
            seen[(want as i8 + 1) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 100), "every outcome met: {seen:?}");
    }

    /// One version of the model: LSN, value (`None` = tombstone).
    type Version = (u64, Option<Vec<u8>>);

    #[test]
    fn many_random_sources_match_a_model() {
        const SOURCES: usize = 50;
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for round in 0..20 {
            // Source i is newer than source i + 1: its LSNs are all higher. Some sources
            // hold several versions of a key (like memtables).
            let mut sources: Vec<Vec<LevelEntry>> = Vec::new();
            let mut model: BTreeMap<Vec<u8>, Vec<Version>> = BTreeMap::new();
            for i in 0..SOURCES {
                let base = ((SOURCES - i) as u64) * 1_000;
                let len = match rng.below(10) {
                    0 => 0,
                    1 => 200 + rng.below(300) as usize,
                    _ => rng.below(40) as usize,
                };
                let multi = rng.below(4) == 0;
                let mut keyed: BTreeMap<Vec<u8>, Vec<Version>> = BTreeMap::new();
                for _ in 0..len {
                    // Keys of 0..=3 bytes over a small alphabet: many collisions.
                    let klen = rng.below(4) as usize;
                    let key: Vec<u8> = (0..klen).map(|_| b"abc\0"[rng.below(4) as usize]).collect();
                    let v = if rng.below(5) == 0 {
                        None
                    } else {
                        Some(format!("{round}.{i}.{}", rng.below(1000)).into_bytes())
                    };
                    let versions = keyed.entry(key).or_default();
                    if versions.is_empty() || multi {
                        let lsn = base - 1 - versions.len() as u64;
                        versions.push((lsn, v));
                    }
                }
                let mut entries = Vec::new();
                for (key, versions) in keyed {
                    for (lsn, v) in &versions {
                        let value = v.clone().map_or(LevelValue::Tombstone, LevelValue::Inline);
                        entries.push((key.clone(), *lsn, value));
                    }
                    model.entry(key).or_default().extend(versions);
                }
                sources.push(entries);
            }
            let total: u64 = model.values().map(|v| v.len() as u64).sum();
            let snapshot = match round % 3 {
                0 => None,
                _ => Some(rng.below((SOURCES as u64 + 1) * 1_000)),
            };
            for tombstones in [Tombstones::Keep, Tombstones::Drop] {
                let mut want = Vec::new();
                let (mut hidden, mut shadowed, mut dropped) = (0u64, 0u64, 0u64);
                for (key, versions) in &model {
                    // The model: the highest LSN at or below the snapshot wins.
                    let visible: Vec<&Version> = versions
                        .iter()
                        .filter(|(lsn, _)| snapshot.is_none_or(|s| *lsn <= s))
                        .collect();
                    hidden += (versions.len() - visible.len()) as u64;
                    let Some(newest) = visible.iter().max_by_key(|(lsn, _)| *lsn) else {
                        continue;
                    };
                    shadowed += visible.len() as u64 - 1;
                    if newest.1.is_none() && tombstones == Tombstones::Drop {
                        dropped += 1;
                        continue;
                    }
                    want.push((key.clone(), newest.0, newest.1.clone()));
                }
                let vecs = sources
                    .iter()
                    .map(|s| VecSource(s.clone().into_iter()))
                    .collect();
                let mut m = Merge::new(vecs, tombstones).unwrap();
                if let Some(s) = snapshot {
                    m = m.with_snapshot(s);
                }
                let mut got = Vec::new();
                while let Some(e) = m
                    .next_observed(|w, old| {
                        let w = w.expect("no range tombstones here");
                        assert!(old.lsn < w.lsn && old.key == w.key);
                        Ok(())
                    })
                    .unwrap()
                {
                    let v = match e.value {
                        LevelValue::Inline(b) => Some(b),
                        _ => None,
                    };
                    got.push((e.key, e.lsn, v));
                }
                assert_eq!(got, want, "round {round}, {tombstones:?}");
                let c = m.counts();
                assert_eq!(
                    (c.hidden, c.shadowed, c.tombstones_dropped),
                    (hidden, shadowed, dropped),
                    "round {round}, {tombstones:?}"
                );
                assert_eq!(
                    c.hidden + c.shadowed + c.tombstones_dropped + got.len() as u64,
                    total
                );
                // The same sources walked backward (keys descending, one key's versions
                // still newest first): the same winners in reverse order, the same counts.
                let backward = sources
                    .iter()
                    .map(|s| VecSource(keys_reversed(s).into_iter()))
                    .collect();
                let mut b = Merge::<_, true>::directed(backward, tombstones).unwrap();
                if let Some(s) = snapshot {
                    b = b.with_snapshot(s);
                }
                let mut got_back = Vec::new();
                while let Some(e) = b.next().unwrap() {
                    let v = match e.value {
                        LevelValue::Inline(b) => Some(b),
                        _ => None,
                    };
                    got_back.push((e.key, e.lsn, v));
                }
                got_back.reverse();
                assert_eq!(got_back, want, "backward, round {round}, {tombstones:?}");
                assert_eq!(b.counts(), c, "backward, round {round}, {tombstones:?}");
            }
        }
    }

    #[test]
    fn range_tombstones_drop_older_versions_and_keep_newer_ones() {
        use crate::range_delete::RangeTombstone;
        let mut ranges = RangeTombstones::default();
        let t = [
            // Deletes "b".."d" below LSN 20, and everything from "x" below LSN 5.
            RangeTombstone {
                start: b"b".to_vec(),
                end: Some(b"d".to_vec()),
                lsn: 20,
            },
            RangeTombstone {
                start: b"x".to_vec(),
                end: None,
                lsn: 5,
            },
        ];
        ranges.extend_visible(&t, u64::MAX);
        let sources = || {
            vec![
                src(&[
                    ("b", 25, Some("b25")),
                    ("c", 15, Some("c15")),
                    ("y", 6, Some("y6")),
                ]),
                src(&[
                    ("a", 3, Some("a3")),
                    ("b", 10, Some("b10")),
                    ("c", 12, Some("c12")),
                ]),
                src(&[("d", 1, Some("d1")), ("z", 4, Some("z4"))]),
            ]
        };
        /// Every (key, LSN) the merge yields and every version it drops (range-deleted,
        /// key, LSN), and the merge's counts.
        #[allow(clippy::type_complexity)]
        fn drain<const BACK: bool>(
            mut m: Merge<VecSource, BACK>,
        ) -> (Vec<(Vec<u8>, u64)>, Vec<(bool, Vec<u8>, u64)>, MergeCounts) {
            let (mut got, mut dropped) = (Vec::new(), Vec::new());
            while let Some(e) = m
                .next_observed(|w, old| {
                    dropped.push((w.is_none(), old.key.clone(), old.lsn));
                    Ok(())
                })
                .unwrap()
            {
                got.push((e.key, e.lsn));
            }
            (got, dropped, m.counts())
        }
        for back in [false, true] {
            let (got, mut dropped, counts) = if back {
                let rev = sources()
                    .into_iter()
                    .map(|s| VecSource(keys_reversed(&s.0.collect::<Vec<_>>()).into_iter()))
                    .collect();
                let m = Merge::<_, true>::directed(rev, Tombstones::Keep)
                    .unwrap()
                    .with_range_tombstones(ranges.clone());
                let (mut got, dropped, counts) = drain(m);
                got.reverse();
                (got, dropped, counts)
            } else {
                let m = Merge::new(sources(), Tombstones::Keep)
                    .unwrap()
                    .with_range_tombstones(ranges.clone());
                drain(m)
            };
            assert_eq!(counts.range_deleted, 4);
            assert_eq!(counts.shadowed, 0);
            let keys: Vec<(&[u8], u64)> = got.iter().map(|(k, l)| (k.as_slice(), *l)).collect();
            assert_eq!(
                keys,
                vec![(&b"a"[..], 3), (b"b", 25), (b"d", 1), (b"y", 6)],
                "back: {back}"
            );
            dropped.sort();
            assert_eq!(
                dropped,
                vec![
                    (true, b"b".to_vec(), 10),
                    (true, b"c".to_vec(), 12),
                    (true, b"c".to_vec(), 15),
                    (true, b"z".to_vec(), 4),
                ],
                "back: {back}"
            );
        }
    }

    /// A source's entries as a backward walk gives them: keys descending, the versions of
    /// one key in their order (newest first).
    fn keys_reversed(entries: &[LevelEntry]) -> Vec<LevelEntry> {
        let mut groups: Vec<Vec<LevelEntry>> = Vec::new();
        for e in entries {
            match groups.last_mut() {
                Some(g) if g.last().is_some_and(|l| l.0 == e.0) => g.push(e.clone()),
                _ => groups.push(vec![e.clone()]),
            }
        }
        groups.into_iter().rev().flatten().collect()
    }

    #[test]
    fn a_backward_merge_ends_at_its_lower_bound_and_rejects_a_source_going_up() {
        let sources = || {
            vec![
                src(&[("d", 2, Some("d")), ("c", 2, None), ("a", 2, Some("a"))]),
                src(&[("c", 1, Some("c")), ("b", 1, Some("b"))]),
            ]
        };
        let mut m = Merge::<_, true>::directed(sources(), Tombstones::Drop)
            .unwrap()
            .with_end(Bound::Included(b"b".to_vec()));
        let mut got = Vec::new();
        while let Some(e) = m.next().unwrap() {
            got.push((e.key, e.lsn));
        }
        // "c" at LSN 2 is a tombstone that shadows LSN 1; "a" is past the end.
        assert_eq!(got, vec![(b"d".to_vec(), 2), (b"b".to_vec(), 1)]);
        let mut up = Merge::<_, true>::directed(
            vec![src(&[("b", 1, Some("b")), ("c", 1, Some("c"))])],
            Tombstones::Drop,
        )
        .unwrap();
        match up.next() {
            Err(Error::Internal(msg)) => assert!(msg.contains("descending"), "{msg}"),
            other => panic!("expected an internal error, got {other:?}"),
        }
    }
}
