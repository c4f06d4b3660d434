//! `DbIterator`: a forward iterator over a key range at one snapshot.

use super::SuperVersion;
use crate::error::{Error, Result};
use crate::level::{LevelCursor, LevelEntry, LevelValue};
use crate::log::large::SegmentFile;
use crate::log::ptr::LogPtr;
use crate::memtable::Memtable;
use crate::merge::{Merge, MergeEntry, Source, Tombstones};
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
/// A batch also stops once its log values reach this many bytes (values run to 16 MiB).
const PREFETCH_BYTES: u64 = 4 << 20;

/// A pair resolved ahead: its key and value (`None`: nothing to return, e.g. a
/// tombstone), or the error met while reading it.
type Resolved = Result<(Vec<u8>, Option<Vec<u8>>)>;

enum Cursor {
    Mem {
        mem: Arc<Memtable>,
        snapshot: u64,
        buf: VecDeque<LevelEntry>,
        next_from: Option<Vec<u8>>,
        /// Entries the next refill copies.
        batch_len: usize,
        done: bool,
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
            } => {
                if buf.is_empty() && !*done {
                    let from = next_from
                        .as_deref()
                        .map_or(Bound::Unbounded, Bound::Excluded);
                    let batch = mem.collect_from(from, *snapshot, *batch_len);
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
    fn file(&self) -> Option<&crate::level::LevelFile> {
        self.shared_file().map(Arc::as_ref)
    }

    fn shared_file(&self) -> Option<&Arc<crate::level::LevelFile>> {
        match self {
            Cursor::Level(c) => Some(c.file()),
            Cursor::Mem { .. } => None,
        }
    }
}

/// Iterates `(key, value)` pairs of a key range in key order, as of the moment it was
/// created. Holding it never blocks writers, flushes or compactions; the files it reads
/// stay on disk until it is dropped.
pub struct DbIterator {
    /// What the iterator reads (kept for `seek`, so its files stay until it is dropped);
    /// `None` for an iterator that only reports an error.
    sv: Option<SuperVersion>,
    /// Kept for dereferencing log pointers while the iterator lives.
    segments: Arc<super::SegmentSet>,
    snapshot: u64,
    /// Where the merge starts: the range's start, or the key of the last `seek`.
    start: Bound<Vec<u8>>,
    /// The range as given.
    lower: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    /// One cursor per source, newest first (memtables, then the runs from L1 down); the
    /// newest version of each key at the snapshot wins, tombstones are skipped. `None`
    /// before the first step and once finished (the files stay held by `sv`).
    merge: Option<Merge<Cursor>>,
    /// Pairs resolved ahead of the caller, in key order.
    ahead: VecDeque<Resolved>,
    /// Pairs the next batch resolves.
    window: usize,
    /// Pairs the caller said it will take and has not taken yet (`expect_pairs`): no batch
    /// reads ahead past them.
    expected: Option<usize>,
    state: State,
    /// An argument error reported as the first and only item.
    error: Option<Error>,
    /// Folds the deltas of a key into its value.
    operator: Option<Arc<dyn crate::delta::MergeOperator>>,
}

#[derive(PartialEq, Eq)]
enum State {
    Unstarted,
    Running,
    Done,
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator")
            .field("snapshot", &self.snapshot)
            .finish()
    }
}

impl DbIterator {
    pub(crate) fn new(
        sv: SuperVersion,
        snapshot: u64,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Self {
        DbIterator {
            segments: Arc::clone(&sv.segments),
            sv: Some(sv),
            snapshot,
            lower: start.clone(),
            start,
            end,
            merge: None,
            ahead: VecDeque::new(),
            window: PREFETCH_FIRST,
            expected: None,
            state: State::Unstarted,
            error: None,
            operator: None,
        }
    }

    /// The merge operator that folds deltas into values (the database's).
    pub(crate) fn with_operator(
        mut self,
        operator: Option<Arc<dyn crate::delta::MergeOperator>>,
    ) -> Self {
        self.operator = operator;
        self
    }

    /// An iterator that yields `err` once.
    pub(crate) fn failed(err: Error) -> Self {
        DbIterator {
            segments: Arc::default(),
            sv: None,
            snapshot: 0,
            start: Bound::Unbounded,
            lower: Bound::Unbounded,
            end: Bound::Unbounded,
            merge: None,
            ahead: VecDeque::new(),
            window: PREFETCH_FIRST,
            expected: None,
            state: State::Done,
            error: Some(err),
            operator: None,
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

    /// Tells the iterator that the caller will take about `pairs` pairs (e.g. a scan of
    /// a given length): it resolves them in batches of up to 64 pairs (4 MiB of values),
    /// reading each batch's log values together, and reads nothing ahead past them; pairs
    /// taken beyond them are read a few at a time. Without it, batches start at 8 pairs
    /// and double up to 64.
    pub fn expect_pairs(mut self, pairs: usize) -> Self {
        self.expected = Some(pairs);
        self.window = pairs.clamp(1, PREFETCH_MAX);
        self
    }

    /// Moves to the first pair at or after `key`, as of the same moment: the next item is
    /// that pair. The range stays as it was: a key before its start moves to the start,
    /// one past its end ends the iteration. Pairs read ahead are dropped and read again
    /// from the new position. After the end (or an error), a seek starts the iterator
    /// again. An iterator made from an invalid range keeps its error.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        if self.sv.is_none() {
            return;
        }
        let key = key.as_ref();
        let past_start = match &self.lower {
            Bound::Included(s) => key >= s.as_slice(),
            Bound::Excluded(s) => key > s.as_slice(),
            Bound::Unbounded => true,
        };
        self.start = if past_start {
            Bound::Included(key.to_vec())
        } else {
            self.lower.clone()
        };
        self.merge = None;
        self.ahead.clear();
        self.window = PREFETCH_FIRST;
        // A length hint was about the old position.
        self.expected = None;
        self.state = State::Unstarted;
    }

    fn start(&mut self) -> Result<()> {
        // Kept (not taken) for a later `seek`.
        let Some(sv) = self.sv.clone() else {
            return Ok(());
        };
        let from: Bound<&[u8]> = match &self.start {
            Bound::Included(k) => Bound::Included(k),
            Bound::Excluded(k) => Bound::Excluded(k),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut cursors = Vec::with_capacity(1 + sv.imms.len() + sv.version.all_runs().count());
        for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
            // The first batch is read from `from`; later ones continue after the last key.
            let batch = mem.collect_from(from, self.snapshot, MEM_BATCH_FIRST);
            let done = batch.len() < MEM_BATCH_FIRST;
            let next_from = batch.last().map(|e| e.0.clone());
            cursors.push(Cursor::Mem {
                mem: Arc::clone(mem),
                snapshot: self.snapshot,
                buf: batch.into(),
                next_from,
                batch_len: MEM_BATCH_FIRST * 2,
                done,
            });
        }
        for file in sv.version.all_runs() {
            let mut c = file.cursor();
            c.seek(from)?;
            cursors.push(Cursor::Level(Box::new(c)));
        }
        // Memtable cursors apply the snapshot themselves (`collect_from` skips newer
        // versions without copying them), and the runs of a captured `SuperVersion` hold
        // only versions published before it: the merge needs no snapshot of its own.
        self.merge = Some(Merge::new(cursors, Tombstones::Drop)?.with_upper(self.end.clone()));
        Ok(())
    }

    fn resolve_value(
        &mut self,
        source: usize,
        key: &[u8],
        value: LevelValue,
    ) -> Result<Option<Vec<u8>>> {
        match value {
            LevelValue::Tombstone => Ok(None),
            other => {
                let file = self
                    .merge
                    .as_ref()
                    .and_then(|m| m.source(source))
                    .and_then(Cursor::file);
                super::resolve_with(&self.segments, key, other, file)
            }
        }
    }

    fn step(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        loop {
            if self.ahead.is_empty() && !self.resolve_ahead()? {
                return Ok(None);
            }
            match self.ahead.pop_front() {
                Some(Ok((key, Some(v)))) => {
                    if let Some(left) = &mut self.expected {
                        *left = left.saturating_sub(1);
                    }
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
    fn resolve_ahead(&mut self) -> Result<bool> {
        let window = match self.expected {
            // Past the pairs the caller expected, a few at a time.
            Some(0) => 4,
            Some(left) => left.min(PREFETCH_MAX),
            None => self.window,
        };
        let mut raw = Vec::with_capacity(window);
        let mut stopped = None;
        let mut log_bytes = 0u64;
        while raw.len() < window && log_bytes < PREFETCH_BYTES {
            match self.next_raw() {
                Ok(Some(entry)) => {
                    match &entry.2 {
                        LevelValue::Large(p) | LevelValue::Medium(p) => {
                            log_bytes += u64::from(p.len);
                        }
                        // Overflow values are read one by one, but ahead of the caller too.
                        LevelValue::Overflow { len, .. } => log_bytes += u64::from(*len),
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
        let segments = Arc::clone(&self.segments);
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
                    .map(Some)
            } else {
                self.resolve_value(source, &key, value)
            };
            self.ahead.push_back(resolved.map(|v| (key, v)));
        }
        if let Some(e) = stopped {
            self.ahead.push_back(Err(e));
        }
        Ok(true)
    }

    /// The next live pair as stored: key, source index, value (pointers not followed).
    fn next_raw(&mut self) -> Result<Option<(Vec<u8>, usize, LevelValue)>> {
        if self.state == State::Unstarted {
            self.state = State::Running;
            self.start()?;
        }
        let Some(merge) = self.merge.as_mut() else {
            return Ok(None);
        };
        let Some(mut entry) = merge.next()? else {
            return Ok(None);
        };
        if entry.value.is_deltas() {
            entry.value = LevelValue::Inline(self.fold_deltas(&mut entry)?);
        }
        Ok(Some((entry.key, entry.source, entry.value)))
    }

    /// The value of a key whose newest version holds deltas: its base (if the merge met
    /// one) with every delta above it folded in.
    fn fold_deltas(&self, entry: &mut MergeEntry) -> Result<Vec<u8>> {
        let op = crate::delta::require(self.operator.as_ref())?;
        let file_of = |source: usize| {
            self.merge
                .as_ref()
                .and_then(|m| m.source(source))
                .and_then(Cursor::file)
        };
        let stacked = entry.take_stack(|source, v| match file_of(source) {
            Some(f) => f.load_overflow(v),
            None => Ok(v),
        })?;
        let base = match stacked.base {
            Some(b) => super::resolve_with(&self.segments, &b.key, b.value, file_of(b.source))?,
            None => None,
        };
        let list = stacked.list;
        crate::delta::fold_full(op, &entry.key, base.as_deref(), &list)
    }

    /// Runs `f` as a step of this iterator: an error or the end finishes it.
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<Option<T>>) -> Option<Result<T>> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        if self.state == State::Done {
            return None;
        }
        let r = f(self);
        if !matches!(r, Ok(Some(_))) {
            self.state = State::Done;
            self.merge = None;
        }
        r.transpose()
    }

    /// The next live key, its value's length and where the value lives, without reading
    /// any log or overflow blob.
    pub(crate) fn next_key_and_len(&mut self) -> Option<Result<(Vec<u8>, u64, ValueHome)>> {
        self.guarded(|it| {
            Ok(it.next_raw()?.map(|(key, _, value)| {
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
                (key, len, home)
            }))
        })
    }
}

/// Where a live value is stored (with its log record's length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueHome {
    InPlace,
    Transient(u64),
    Large(u64),
}

/// Iterates keys only (`Db::keys`): values are never read, so no log is touched.
#[derive(Debug)]
pub struct KeyIterator(pub(crate) DbIterator);

impl Iterator for KeyIterator {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_key_and_len().map(|r| r.map(|(k, _, _)| k))
    }
}

/// Iterates pairs without reading their values ([`DbIterator::lazy`]).
#[derive(Debug)]
pub struct LazyIterator(DbIterator);

impl Iterator for LazyIterator {
    type Item = Result<LazyPair>;

    fn next(&mut self) -> Option<Self::Item> {
        let it = &mut self.0;
        it.guarded(|it| {
            let Some((key, source, value)) = it.next_raw()? else {
                return Ok(None);
            };
            let file = it
                .merge
                .as_ref()
                .and_then(|m| m.source(source))
                .and_then(Cursor::shared_file)
                .cloned();
            Ok(Some(LazyPair {
                key,
                value,
                file,
                segments: Arc::clone(&it.segments),
            }))
        })
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
        .ok_or_else(|| Error::Internal("a lazy pair without a value (a tombstone)".into()))
    }
}

impl Iterator for DbIterator {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.guarded(Self::step)
    }
}
