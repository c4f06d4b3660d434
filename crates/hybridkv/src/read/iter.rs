//! `DbIterator`: a double-ended iterator over a key range at one snapshot.
//!
//! Owns: walking the range from either end. Each end is a [`Walk`]: the merge of every
//! source (memtables, then the runs from L1 down) starting at its end of the range, with
//! the pairs it resolved ahead. The ends meet in the middle: neither yields a key at or
//! past the last one the other yielded. Never: writes anything, or reads a value the
//! caller will not get (past an `expect_pairs` hint, or a lazy pair not asked for).

use super::{Asker, SuperVersion};
use crate::error::{Error, Result};
use crate::level::{LevelCursor, LevelEntry, LevelValue};
use crate::log::large::SegmentFile;
use crate::log::ptr::LogPtr;
use crate::memtable::Memtable;
use crate::merge::{Merge, MergeEntry, Source, Tombstones};
use crate::value::Value;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

/// Entries copied from a memtable by a scan's first refill (one skip-list seek each): a
/// short scan (YCSB E reads 1..100 pairs) must not copy more than it returns from each of
/// the active and immutable memtables. Each later refill doubles, up to [`MEM_BATCH_MAX`].
const MEM_BATCH_FIRST: usize = 16;
const MEM_BATCH_MAX: usize = 256;

/// Pairs a scan resolves ahead of the caller, at first: their values in the logs (medium
/// and large) are read in one batch (`SegmentFile::read_many_through_cache`; a sorted
/// transient segment's records of one scan are read as one span). Each later batch doubles, up to
/// [`PREFETCH_MAX`], so a short scan reads few values it will not return and a long one
/// submits many reads at once.
const PREFETCH_FIRST: usize = 8;
const PREFETCH_MAX: usize = 64;
/// The largest batch of pairs the caller said it will take (`expect_pairs`): such a scan
/// reads no value it will not return, so its pairs are resolved in one batch up to this
/// many (bytes still bounded by [`PREFETCH_BYTES`], which counts every value a batch
/// holds). Each batch is one more wait for the device: with a batch of 64 pairs, YCSB E's
/// scans of 65..=100 pairs (a third of them) waited twice. A batch's reads go out in rounds
/// of the ring's 64 entries, each waited for, so the one wait holds for batches of up to 64
/// log values (SD and MD scans of 100 pairs hold about 40).
const PREFETCH_EXPECTED_MAX: usize = 256;
/// A batch also stops once the values it holds reach this many bytes (values run to 16 MiB).
const PREFETCH_BYTES: u64 = 4 << 20;

/// A pair resolved ahead: its key and value (`None`: nothing to return, e.g. a
/// tombstone; a value read from a log is a view of the record read, not a copy), or the
/// error met while reading it.
type Resolved = Result<(Vec<u8>, Option<Value>)>;

enum Cursor {
    Mem {
        mem: Arc<Memtable>,
        snapshot: u64,
        buf: VecDeque<LevelEntry>,
        next_from: Option<Vec<u8>>,
        /// Entries the next refill copies.
        batch_len: usize,
        done: bool,
        /// Walking backward: refills copy the keys before `next_from`.
        back: bool,
    },
    Level(Box<LevelCursor>),
}

impl Source for Cursor {
    fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
        match self {
            Cursor::Level(c) => c.next_entry(),
            Cursor::Mem {
                mem,
                snapshot,
                buf,
                next_from,
                batch_len,
                done,
                back,
            } => {
                if buf.is_empty() && !*done {
                    let from = next_from
                        .as_deref()
                        .map_or(Bound::Unbounded, Bound::Excluded);
                    let batch = if *back {
                        mem.collect_before(from, *snapshot, *batch_len)
                    } else {
                        mem.collect_from(from, *snapshot, *batch_len)
                    };
                    *done = batch.len() < *batch_len;
                    *batch_len = (*batch_len * 2).min(MEM_BATCH_MAX);
                    *next_from = batch.last().map(|e| e.0.clone());
                    buf.extend(batch);
                }
                Ok(buf.pop_front())
            }
        }
    }
}

impl Cursor {
    fn shared_file(&self) -> Option<&Arc<crate::level::LevelFile>> {
        match self {
            Cursor::Level(c) => Some(c.file()),
            Cursor::Mem { .. } => None,
        }
    }
}

/// What both ends of an iterator read: the captured sources and the range as given.
struct View {
    /// `None` for an iterator that only reports an error.
    sv: Option<SuperVersion>,
    /// Kept for dereferencing log pointers while the iterator lives.
    segments: Arc<super::SegmentSet>,
    snapshot: u64,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// Folds the deltas of a key into its value.
    operator: Option<Arc<dyn crate::delta::MergeOperator>>,
}

fn as_slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// One end of a [`DbIterator`]: forward from the range's start, or backward (`BACK`) from
/// its end.
struct Walk<const BACK: bool> {
    /// Where the merge starts: the range's start (forward) or end (backward), or the key
    /// of the last seek of this end.
    from: Bound<Vec<u8>>,
    /// One cursor per source, newest first; the newest version of each key at the
    /// snapshot wins, tombstones are skipped. `None` before the first step and once
    /// finished (the files stay held by the view).
    merge: Option<Merge<Cursor, BACK>>,
    /// Pairs resolved ahead of the caller, in this end's order.
    ahead: VecDeque<Resolved>,
    /// Pairs the next batch resolves.
    window: usize,
    /// Pairs the caller said it will take and has not taken yet (`expect_pairs`): no batch
    /// reads ahead past them.
    expected: Option<usize>,
    state: State,
    /// The last key this end handed out: the other end stops before it. (Its buffer is
    /// reused from pair to pair.)
    last: Option<Vec<u8>>,
    /// Per source of `merge`, whether it has yielded a pair: a run that yielded none when
    /// the merge ends was positioned in vain, which a client's scan counts against it
    /// ([`Walk::end_merge`]).
    yielded: Vec<bool>,
    /// Whether this end counts the runs it positioned in vain (a client's scan; not the
    /// engine's own walks, e.g. space accounting; turned off once both ends of one
    /// iterator have started, whose runs may give their pairs to the other end).
    count_waste: bool,
}

#[derive(PartialEq, Eq)]
enum State {
    Unstarted,
    Running,
    Done,
}

impl<const BACK: bool> Walk<BACK> {
    fn new(from: Bound<Vec<u8>>, state: State, asker: Asker) -> Self {
        Walk {
            from,
            merge: None,
            ahead: VecDeque::new(),
            window: PREFETCH_FIRST,
            expected: None,
            state,
            last: None,
            yielded: Vec::new(),
            count_waste: asker == Asker::Client,
        }
    }

    /// Drops the merge, first counting each run it positioned and took no pair from as
    /// a wasted search of that run's file (`LevelFile::note_wasted_seek`), when this end
    /// counts them: a merge of the run's level would have spared the seek
    /// (`Options::merge_bytes_per_wasted_search`).
    fn end_merge(&mut self) {
        let Some(merge) = self.merge.take() else {
            return;
        };
        if self.count_waste {
            for (i, yielded) in self.yielded.iter().enumerate() {
                if !yielded {
                    if let Some(file) = merge.source(i).and_then(Cursor::shared_file) {
                        file.note_wasted_seek();
                    }
                }
            }
        }
        self.yielded.clear();
    }

    /// Starts this end again from `from` (a seek). What the other end yielded still bounds it.
    fn restart(&mut self, from: Bound<Vec<u8>>) {
        self.from = from;
        self.end_merge();
        self.ahead.clear();
        self.window = PREFETCH_FIRST;
        // A length hint was about the old position.
        self.expected = None;
        self.state = State::Unstarted;
        self.last = None;
    }

    /// After the other end moved (a seek): starts again just past the last key this end
    /// yielded, so that it may go beyond the old meeting point (its merge dropped the key
    /// it met there, and the pairs read ahead are read again).
    fn resume(&mut self) {
        if self.state == State::Unstarted {
            return;
        }
        let from = match &self.last {
            Some(k) => Bound::Excluded(k.clone()),
            None => self.from.clone(),
        };
        let last = self.last.take();
        // Moved by the other end, not by its caller: nothing positioned in vain.
        self.merge = None;
        self.yielded.clear();
        self.restart(from);
        self.last = last;
    }

    /// Whether `key` is still this end's to yield: before the last key the other end
    /// yielded (in this end's direction).
    fn admits(key: &[u8], other_last: Option<&[u8]>) -> bool {
        other_last.is_none_or(|o| if BACK { key > o } else { key < o })
    }

    /// Records `key` as the last one this end yielded.
    fn mark(&mut self, key: &[u8]) {
        let last = self.last.get_or_insert_with(Vec::new);
        last.clear();
        last.extend_from_slice(key);
    }

    fn start(&mut self, view: &View) -> Result<()> {
        let Some(sv) = view.sv.as_ref() else {
            return Ok(());
        };
        let from = as_slice_bound(&self.from);
        let mut cursors = Vec::with_capacity(1 + sv.imms.len() + sv.version.all_runs().count());
        for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
            // The first batch is read from `from`; later ones continue past the last key.
            let batch = if BACK {
                mem.collect_before(from, view.snapshot, MEM_BATCH_FIRST)
            } else {
                mem.collect_from(from, view.snapshot, MEM_BATCH_FIRST)
            };
            let done = batch.len() < MEM_BATCH_FIRST;
            let next_from = batch.last().map(|e| e.0.clone());
            cursors.push(Cursor::Mem {
                mem: Arc::clone(mem),
                snapshot: view.snapshot,
                buf: batch.into(),
                next_from,
                batch_len: MEM_BATCH_FIRST * 2,
                done,
                back: BACK,
            });
        }
        for file in sv.version.all_runs() {
            let mut c = file.cursor();
            if BACK {
                c.seek_back(from)?;
            } else {
                c.seek(from)?;
            }
            cursors.push(Cursor::Level(Box::new(c)));
        }
        // Memtable cursors apply the snapshot themselves (`collect_from` skips newer
        // versions without copying them), and the runs of a captured `SuperVersion` hold
        // only versions published before it: the merge needs no snapshot of its own.
        let end = if BACK { &view.lower } else { &view.upper };
        self.yielded.clear();
        self.yielded.resize(cursors.len(), false);
        self.merge = Some(
            Merge::directed(cursors, Tombstones::Drop)?
                .with_end(end.clone())
                .with_range_tombstones(super::range_tombstones(sv, view.snapshot)),
        );
        Ok(())
    }

    /// The level file of source `i` (to read an overflow value of a pair it yielded).
    fn file_of(&self, source: usize) -> Option<&Arc<crate::level::LevelFile>> {
        self.merge
            .as_ref()
            .and_then(|m| m.source(source))
            .and_then(Cursor::shared_file)
    }

    fn resolve_value(
        &self,
        view: &View,
        source: usize,
        key: &[u8],
        value: LevelValue,
    ) -> Result<Option<Value>> {
        match value {
            LevelValue::Tombstone => Ok(None),
            other => super::resolve_with(
                &view.segments,
                key,
                other,
                self.file_of(source).map(Arc::as_ref),
            ),
        }
    }

    fn step(&mut self, view: &View, other_last: Option<&[u8]>) -> Result<Option<(Vec<u8>, Value)>> {
        loop {
            if self.ahead.is_empty() && !self.resolve_ahead(view, other_last)? {
                return Ok(None);
            }
            match self.ahead.pop_front() {
                Some(Ok((key, Some(v)))) => {
                    if !Self::admits(&key, other_last) {
                        return Ok(None);
                    }
                    if let Some(left) = &mut self.expected {
                        *left = left.saturating_sub(1);
                    }
                    self.mark(&key);
                    return Ok(Some((key, v)));
                }
                Some(Ok((_, None))) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(None),
            }
        }
    }

    /// Takes the next `window` pairs from the merge and resolves them into `ahead`, the
    /// log values (medium and large) of all of them in one batch. False when the merge is exhausted.
    fn resolve_ahead(&mut self, view: &View, other_last: Option<&[u8]>) -> Result<bool> {
        let window = match self.expected {
            // Past the pairs the caller expected, a few at a time.
            Some(0) => 4,
            Some(left) => left.min(PREFETCH_EXPECTED_MAX),
            None => self.window,
        };
        let mut raw = Vec::with_capacity(window);
        let mut stopped = None;
        let mut held_bytes = 0u64;
        while raw.len() < window && held_bytes < PREFETCH_BYTES {
            match self.next_raw(view, other_last) {
                Ok(Some(entry)) => {
                    match &entry.2 {
                        LevelValue::Large(p) | LevelValue::Medium(p) => {
                            held_bytes += u64::from(p.len);
                        }
                        // Overflow values are read one by one, but ahead of the caller too.
                        LevelValue::Overflow { len, .. } => held_bytes += u64::from(*len),
                        // Held too (a value folded from its deltas can be as large as a
                        // log value).
                        LevelValue::Inline(v) => held_bytes += v.len() as u64,
                        _ => {}
                    }
                    raw.push(entry);
                }
                Ok(None) => break,
                Err(e) if raw.is_empty() => return Err(e),
                Err(e) => {
                    stopped = Some(e);
                    break;
                }
            }
        }
        if raw.is_empty() {
            return Ok(false);
        }
        self.window = (self.window * 2).min(PREFETCH_MAX);
        let segments = Arc::clone(&view.segments);
        let large: Vec<(usize, &SegmentFile, LogPtr)> = raw
            .iter()
            .enumerate()
            .filter_map(|(i, (_, _, v))| match v {
                LevelValue::Large(p) | LevelValue::Medium(p) => {
                    segments.get(&p.segment).map(|s| (i, s.as_ref(), *p))
                }
                _ => None,
            })
            .collect();
        let items: Vec<(&SegmentFile, LogPtr, &[u8])> = large
            .iter()
            .filter_map(|&(i, seg, p)| Some((seg, p, raw.get(i)?.0.as_slice())))
            .collect();
        let mut values = SegmentFile::read_many_through_cache(&items).into_iter();
        drop(items);
        let mut batched = large.iter().map(|&(i, _, _)| i).peekable();
        for (i, (key, source, value)) in raw.into_iter().enumerate() {
            let resolved = if batched.peek() == Some(&i) {
                batched.next();
                values
                    .next()
                    .unwrap_or_else(|| Err(Error::InvalidArgument("batch lost a value".into())))
                    .map(|v| Some(Value::from(v)))
            } else {
                self.resolve_value(view, source, &key, value)
            };
            self.ahead.push_back(resolved.map(|v| (key, v)));
        }
        if let Some(e) = stopped {
            self.ahead.push_back(Err(e));
        }
        Ok(true)
    }

    /// The next live pair as stored: key, source index, value (pointers not followed);
    /// `None` at the range's end or where the other end has been.
    fn next_raw(
        &mut self,
        view: &View,
        other_last: Option<&[u8]>,
    ) -> Result<Option<(Vec<u8>, usize, LevelValue)>> {
        if self.state == State::Unstarted {
            self.state = State::Running;
            self.start(view)?;
        }
        let Some(merge) = self.merge.as_mut() else {
            return Ok(None);
        };
        let Some(mut entry) = merge.next()? else {
            return Ok(None);
        };
        if !Self::admits(&entry.key, other_last) {
            return Ok(None);
        }
        for source in std::iter::once(entry.source).chain(entry.below.iter().map(|b| b.source)) {
            if let Some(y) = self.yielded.get_mut(source) {
                *y = true;
            }
        }
        if entry.value.is_deltas() {
            entry.value = LevelValue::Inline(self.fold_deltas(view, &mut entry)?);
        }
        Ok(Some((entry.key, entry.source, entry.value)))
    }

    /// The value of a key whose newest version holds deltas: its base (if the merge met
    /// one) with every delta above it folded in.
    fn fold_deltas(&self, view: &View, entry: &mut MergeEntry) -> Result<Vec<u8>> {
        let op = crate::delta::require(view.operator.as_ref())?;
        let file_of = |source: usize| self.file_of(source).map(Arc::as_ref);
        let no_buckets = crate::bucket::BucketTable::default();
        let buckets = view
            .sv
            .as_ref()
            .map_or(&no_buckets, |sv| &*sv.version.buckets);
        let key = entry.key.clone();
        let stacked = entry.take_stack(|source, v| {
            let v = match file_of(source) {
                Some(f) => f.load_overflow(v)?,
                None => v,
            };
            match v {
                LevelValue::Deltas(list) => buckets.resolve(&key, list).map(LevelValue::Deltas),
                v => Ok(v),
            }
        })?;
        let base = match stacked.base {
            Some(b) => super::resolve_with(&view.segments, &b.key, b.value, file_of(b.source))?,
            None => None,
        };
        let list = stacked.list;
        crate::delta::fold_full(op, &entry.key, base.as_deref(), &list)
    }

    /// Runs `f` as a step of this end: an error or the end finishes it.
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<Option<T>>) -> Option<Result<T>> {
        if self.state == State::Done {
            return None;
        }
        let r = f(self);
        if !matches!(r, Ok(Some(_))) {
            self.state = State::Done;
            self.end_merge();
        }
        r.transpose()
    }

    /// The next live key, its value's length and where the value lives, without reading
    /// any log or overflow blob.
    fn next_key_and_len(
        &mut self,
        view: &View,
        other_last: Option<&[u8]>,
    ) -> Option<Result<(Vec<u8>, u64, ValueHome)>> {
        self.guarded(|w| {
            let Some((key, _, value)) = w.next_raw(view, other_last)? else {
                return Ok(None);
            };
            w.mark(&key);
            let record = |p: &crate::log::ptr::LogPtr| {
                u64::from(p.len)
                    .saturating_sub((key.len() + crate::log::large::RECORD_HEADER) as u64)
            };
            let (len, home) = match &value {
                LevelValue::Inline(b) => (b.len() as u64, ValueHome::InPlace),
                LevelValue::Overflow { len, .. } => (u64::from(*len), ValueHome::InPlace),
                LevelValue::Medium(p) => (record(p), ValueHome::Transient(u64::from(p.len))),
                LevelValue::Large(p) => (record(p), ValueHome::Large(u64::from(p.len))),
                LevelValue::Tombstone => (0, ValueHome::InPlace),
                // Folded by `next_raw`: never met here.
                LevelValue::Deltas(b) => (b.len() as u64, ValueHome::InPlace),
                LevelValue::DeltasOverflow { len, .. } => (u64::from(*len), ValueHome::InPlace),
            };
            Ok(Some((key, len, home)))
        })
    }

    /// The next pair with its value unread.
    fn next_lazy(&mut self, view: &View, other_last: Option<&[u8]>) -> Option<Result<LazyPair>> {
        self.guarded(|w| {
            let Some((key, source, value)) = w.next_raw(view, other_last)? else {
                return Ok(None);
            };
            w.mark(&key);
            Ok(Some(LazyPair {
                file: w.file_of(source).cloned(),
                key,
                value,
                segments: Arc::clone(&view.segments),
            }))
        })
    }
}

/// Iterates `(key, value)` pairs of a key range in key order, as of the moment it was
/// created, from the front ([`Iterator`]) and from the back ([`DoubleEndedIterator`]; the
/// two ends meet without repeating a pair). Holding it never blocks writers, flushes or
/// compactions; the files it reads stay on disk until it is dropped.
pub struct DbIterator {
    view: View,
    front: Walk<false>,
    back: Walk<true>,
    /// An argument error reported as the first and only item.
    error: Option<Error>,
    /// Whether the front and the back have stepped ([`DbIterator::use_end`]).
    used_front: bool,
    used_back: bool,
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator")
            .field("snapshot", &self.view.snapshot)
            .finish()
    }
}

impl DbIterator {
    /// An iterator over `start..end` at `snapshot`; a client's (`asker`) counts the runs
    /// its scans position in vain ([`Walk::end_merge`]).
    pub(crate) fn new(
        sv: SuperVersion,
        snapshot: u64,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        asker: Asker,
    ) -> Self {
        DbIterator {
            front: Walk::new(start.clone(), State::Unstarted, asker),
            back: Walk::new(end.clone(), State::Unstarted, asker),
            view: View {
                segments: Arc::clone(&sv.segments),
                sv: Some(sv),
                snapshot,
                lower: start,
                upper: end,
                operator: None,
            },
            error: None,
            used_front: false,
            used_back: false,
        }
    }

    /// The merge operator that folds deltas into values (the database's).
    pub(crate) fn with_operator(
        mut self,
        operator: Option<Arc<dyn crate::delta::MergeOperator>>,
    ) -> Self {
        self.view.operator = operator;
        self
    }

    /// An iterator that yields `err` once.
    pub(crate) fn failed(err: Error) -> Self {
        DbIterator {
            view: View {
                segments: Arc::default(),
                sv: None,
                snapshot: 0,
                lower: Bound::Unbounded,
                upper: Bound::Unbounded,
                operator: None,
            },
            front: Walk::new(Bound::Unbounded, State::Done, Asker::Engine),
            back: Walk::new(Bound::Unbounded, State::Done, Asker::Engine),
            error: Some(err),
            used_front: false,
            used_back: false,
        }
    }

    /// The keys only, from here on: values are never read (no log is touched).
    pub fn keys(self) -> KeyIterator {
        KeyIterator(self)
    }

    /// Pairs whose values are read only when asked for ([`LazyPair::value`]), from here
    /// on: a scan that filters on keys (or on value lengths) reads no value it skips.
    pub fn lazy(self) -> LazyIterator {
        LazyIterator(self)
    }

    /// Pairs whose values are handed out as [`Value`]s, from here on: a value read from
    /// the large or the transient log is a view of the record the read filled (the one
    /// the cache keeps, when it keeps it), so the scan makes no copy of its own; a value
    /// stored in place is the copy made out of its leaf, as always. The plain iterator
    /// turns each into a `Vec`, one more copy of a record's value.
    pub fn values(self) -> ValueIterator {
        ValueIterator(self)
    }

    /// Tells the iterator that the caller will take about `pairs` pairs (e.g. a scan of
    /// a given length) from each end it uses: it resolves them in batches of up to 256
    /// pairs (4 MiB of values), reading each batch's log values together, and reads
    /// nothing ahead past them; pairs taken beyond them are read a few at a time. Without
    /// it, batches start at 8 pairs and double up to 64.
    pub fn expect_pairs(mut self, pairs: usize) -> Self {
        for (expected, window) in [
            (&mut self.front.expected, &mut self.front.window),
            (&mut self.back.expected, &mut self.back.window),
        ] {
            *expected = Some(pairs);
            *window = pairs.clamp(1, PREFETCH_EXPECTED_MAX);
        }
        self
    }

    /// Moves the front to the first pair at or after `key`, as of the same moment: the
    /// next item is that pair. The range stays as it was: a key before its start moves to
    /// the start, one past its end ends the iteration (as does one at or past a pair the
    /// back already yielded). Pairs read ahead are dropped and read again from the new
    /// position. After the end (or an error), a seek starts the front again. An iterator
    /// made from an invalid range keeps its error.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        if self.view.sv.is_none() {
            return;
        }
        let key = key.as_ref();
        let past_start = match &self.view.lower {
            Bound::Included(s) => key >= s.as_slice(),
            Bound::Excluded(s) => key > s.as_slice(),
            Bound::Unbounded => true,
        };
        let from = if past_start {
            Bound::Included(key.to_vec())
        } else {
            self.view.lower.clone()
        };
        self.front.restart(from);
        self.back.resume();
    }

    /// Moves the back to the last pair at or before `key`: the next item from the back
    /// ([`DoubleEndedIterator::next_back`]) is that pair. Like [`DbIterator::seek`]
    /// mirrored: a key past the range's end moves to the end, one before its start ends
    /// the back's iteration.
    pub fn seek_back(&mut self, key: impl AsRef<[u8]>) {
        if self.view.sv.is_none() {
            return;
        }
        let key = key.as_ref();
        let before_end = match &self.view.upper {
            Bound::Included(e) => key <= e.as_slice(),
            Bound::Excluded(e) => key < e.as_slice(),
            Bound::Unbounded => true,
        };
        let from = if before_end {
            Bound::Included(key.to_vec())
        } else {
            self.view.upper.clone()
        };
        self.back.restart(from);
        self.front.resume();
    }

    /// The next live key from the front, its value's length and where the value lives,
    /// without reading any log or overflow blob.
    pub(crate) fn next_key_and_len(&mut self) -> Option<Result<(Vec<u8>, u64, ValueHome)>> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        self.use_end(false);
        self.front
            .next_key_and_len(&self.view, self.back.last.as_deref())
    }

    fn next_back_key_and_len(&mut self) -> Option<Result<(Vec<u8>, u64, ValueHome)>> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        self.use_end(true);
        self.back
            .next_key_and_len(&self.view, self.front.last.as_deref())
    }
}

impl Drop for DbIterator {
    fn drop(&mut self) {
        self.front.end_merge();
        self.back.end_merge();
    }
}

impl DbIterator {
    /// Before an end (`back` or the front) steps: once the other end has been used too,
    /// neither counts runs positioned in vain (a run may have given its pairs to the other
    /// end).
    fn use_end(&mut self, back: bool) {
        if back {
            self.used_back = true;
        } else {
            self.used_front = true;
        }
        if self.used_front && self.used_back {
            self.front.count_waste = false;
            self.back.count_waste = false;
        }
    }

    fn next_value(&mut self) -> Option<Result<(Vec<u8>, Value)>> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        self.use_end(false);
        let (view, other) = (&self.view, self.back.last.as_deref());
        self.front.guarded(|w| w.step(view, other))
    }

    fn next_back_value(&mut self) -> Option<Result<(Vec<u8>, Value)>> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        self.use_end(true);
        let (view, other) = (&self.view, self.front.last.as_deref());
        self.back.guarded(|w| w.step(view, other))
    }
}

impl Iterator for DbIterator {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_value().map(|r| r.map(|(k, v)| (k, v.into_vec())))
    }
}

impl DoubleEndedIterator for DbIterator {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.next_back_value()
            .map(|r| r.map(|(k, v)| (k, v.into_vec())))
    }
}

/// Iterates pairs with their values as [`Value`]s ([`DbIterator::values`]), from either
/// end: a value read from a log is not copied.
#[derive(Debug)]
pub struct ValueIterator(DbIterator);

impl ValueIterator {
    /// Moves the front to the first pair at or after `key` ([`DbIterator::seek`]).
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        self.0.seek(key);
    }

    /// Moves the back to the last pair at or before `key` ([`DbIterator::seek_back`]).
    pub fn seek_back(&mut self, key: impl AsRef<[u8]>) {
        self.0.seek_back(key);
    }
}

impl Iterator for ValueIterator {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_value()
    }
}

impl DoubleEndedIterator for ValueIterator {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back_value()
    }
}

/// Where a live value is stored (with its log record's length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueHome {
    InPlace,
    Transient(u64),
    Large(u64),
}

/// Iterates keys only (`Db::keys`), from either end: values are never read, so no log
/// is touched.
#[derive(Debug)]
pub struct KeyIterator(pub(crate) DbIterator);

impl KeyIterator {
    /// Moves the front to the first key at or after `key` ([`DbIterator::seek`]).
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        self.0.seek(key);
    }

    /// Moves the back to the last key at or before `key` ([`DbIterator::seek_back`]).
    pub fn seek_back(&mut self, key: impl AsRef<[u8]>) {
        self.0.seek_back(key);
    }
}

impl Iterator for KeyIterator {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_key_and_len().map(|r| r.map(|(k, _, _)| k))
    }
}

impl DoubleEndedIterator for KeyIterator {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back_key_and_len().map(|r| r.map(|(k, _, _)| k))
    }
}

/// Iterates pairs without reading their values ([`DbIterator::lazy`]), from either end.
#[derive(Debug)]
pub struct LazyIterator(DbIterator);

impl LazyIterator {
    /// Moves the front to the first pair at or after `key` ([`DbIterator::seek`]).
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        self.0.seek(key);
    }

    /// Moves the back to the last pair at or before `key` ([`DbIterator::seek_back`]).
    pub fn seek_back(&mut self, key: impl AsRef<[u8]>) {
        self.0.seek_back(key);
    }
}

impl Iterator for LazyIterator {
    type Item = Result<LazyPair>;

    fn next(&mut self) -> Option<Self::Item> {
        let it = &mut self.0;
        if let Some(e) = it.error.take() {
            return Some(Err(e));
        }
        it.use_end(false);
        it.front.next_lazy(&it.view, it.back.last.as_deref())
    }
}

impl DoubleEndedIterator for LazyIterator {
    fn next_back(&mut self) -> Option<Self::Item> {
        let it = &mut self.0;
        if let Some(e) = it.error.take() {
            return Some(Err(e));
        }
        it.use_end(true);
        it.back.next_lazy(&it.view, it.front.last.as_deref())
    }
}

/// A pair from a [`LazyIterator`]: the key, and where the value is, read on request.
/// It keeps the file holding the value readable as long as it lives.
pub struct LazyPair {
    key: Vec<u8>,
    value: LevelValue,
    file: Option<Arc<crate::level::LevelFile>>,
    segments: Arc<super::SegmentSet>,
}

impl std::fmt::Debug for LazyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyPair")
            .field("key", &self.key)
            .field("value_len", &self.value_len())
            .finish()
    }
}

impl LazyPair {
    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The value's length in bytes, known without reading it.
    pub fn value_len(&self) -> u64 {
        match &self.value {
            LevelValue::Inline(b) => b.len() as u64,
            LevelValue::Overflow { len, .. } => u64::from(*len),
            LevelValue::Medium(p) | LevelValue::Large(p) => u64::from(p.len)
                .saturating_sub((self.key.len() + crate::log::large::RECORD_HEADER) as u64),
            LevelValue::Tombstone => 0,
            // Folded by the iterator: never held by a pair.
            LevelValue::Deltas(b) => b.len() as u64,
            LevelValue::DeltasOverflow { len, .. } => u64::from(*len),
        }
    }

    /// Reads the value: from the leaf it came with (in place), or from its overflow blob
    /// or log record (one read, through the block cache).
    pub fn value(&self) -> Result<Vec<u8>> {
        super::resolve_with(
            &self.segments,
            &self.key,
            self.value.clone(),
            self.file.as_deref(),
        )?
        .map(Vec::from)
        .ok_or_else(|| Error::Internal("a lazy pair without a value (a tombstone)".into()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test fails by panicking

    use crate::{Db, Options};

    fn db_of(dir: &std::path::Path, n: u32) -> Db {
        let db = Db::open(dir, Options::default()).unwrap();
        for i in 0..n {
            // Every fourth value large, in the large log.
            let len = if i % 4 == 0 { 2000 } else { 20 };
            db.put(format!("k{i:06}"), vec![i as u8; len]).unwrap();
        }
        db.flush().unwrap();
        db
    }

    /// A scan told its length resolves all of it in the first batch (one wait for the
    /// device for all its log values), up to 256 pairs; past them, a few at a time.
    #[test]
    fn a_scan_told_its_length_resolves_it_in_one_batch() {
        let dir = tempfile::tempdir().unwrap();
        let db = db_of(dir.path(), 1_000);
        for (told, first_batch) in [(100, 100), (37, 37), (256, 256), (600, 256)] {
            let mut it = db.range("k000010"..).expect_pairs(told);
            let (k, _) = it.next().unwrap().unwrap();
            assert_eq!(k, b"k000010");
            assert_eq!(
                it.front.ahead.len(),
                first_batch - 1,
                "told {told}: the first batch resolved {} pairs",
                it.front.ahead.len() + 1
            );
            // The pairs resolved ahead are the ones that follow, in order.
            let rest: Vec<Vec<u8>> = it.take(told - 1).map(|r| r.unwrap().0).collect();
            assert_eq!(rest.len(), told - 1);
            for (j, k) in rest.iter().enumerate() {
                assert_eq!(k, format!("k{:06}", 11 + j).as_bytes(), "told {told}");
            }
        }
        // Not told: batches start small.
        let mut it = db.range("k000010"..);
        it.next().unwrap().unwrap();
        assert_eq!(it.front.ahead.len(), super::PREFETCH_FIRST - 1);
    }

    /// A batch stops once the values it holds reach `PREFETCH_BYTES`, values stored in the
    /// leaves counted too: 64 KiB values in place in 1 MiB leaves fill 4 MiB at 64 pairs,
    /// well short of the 200 the scan was told.
    #[test]
    fn a_batch_of_values_in_place_stops_at_its_byte_bound() {
        const LEN: usize = 64 << 10;
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(
            dir.path(),
            Options {
                placement: crate::Placement::InPlace,
                leaf_size: 1 << 20,
                ..Options::default()
            },
        )
        .unwrap();
        let value = |i: usize| vec![(i % 251) as u8; LEN];
        for i in 0..300 {
            db.put(format!("k{i:06}"), value(i)).unwrap();
        }
        db.flush().unwrap();
        assert_eq!(
            db.stats().unwrap().large_bytes_written,
            0,
            "values stay in place"
        );
        let mut it = db.range("k000000"..).expect_pairs(200);
        let (k, v) = it.next().unwrap().unwrap();
        assert_eq!(k, b"k000000");
        assert!(v == value(0), "value 0");
        let batch = it.front.ahead.len() + 1;
        assert_eq!(
            batch as u64,
            super::PREFETCH_BYTES / LEN as u64,
            "the first batch resolved {batch} pairs"
        );
        for (i, pair) in (1..200).zip(it) {
            let (k, v) = pair.unwrap();
            assert_eq!(k, format!("k{i:06}").as_bytes());
            assert!(v == value(i), "value {i}");
        }
    }
}
