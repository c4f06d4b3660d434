//! Byte, call and read-time counters per component, fed by wrappers around every opened file.

use super::{RawReadTarget, ReadableFile, WritableFile};
use crate::error::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The parts of the engine whose I/O is counted separately.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoComponent {
    /// The small log (write-ahead log): appends and recovery reads.
    Wal,
    /// Flush output (memtable merged into L1) and its reads of L1.
    Flush,
    /// Compaction output and its reads of the input levels.
    Compaction,
    /// Point lookups and scans reading level nodes.
    LevelRead,
    /// The manifest.
    Manifest,
    /// The large (value) log: appends, value reads by gets and scans.
    LargeLog,
    /// The transient log of medium pairs.
    TransientLog,
    /// Garbage collection: reading segments to check which entries are live.
    Gc,
    /// Checkpoints: the copies of the small log and of the large-log segment being
    /// appended to (every other file of a checkpoint is a hard link and moves no byte).
    Checkpoint,
    /// Delta buckets (`Options::delta_separation`): the records a flush appends, the
    /// reads of a key's deltas, and bucket garbage collection.
    DeltaBuckets,
    /// The cache hint file (`Options::reload_cache`), written at close and read at open
    /// (the entries it names are read back through their files' own components).
    CacheHints,
    /// The wasted-search count file, written at close and read at open.
    SearchCounts,
}

impl IoComponent {
    /// Every component, in report order.
    pub const ALL: [IoComponent; 12] = [
        IoComponent::Wal,
        IoComponent::Flush,
        IoComponent::Compaction,
        IoComponent::LevelRead,
        IoComponent::Manifest,
        IoComponent::LargeLog,
        IoComponent::TransientLog,
        IoComponent::Gc,
        IoComponent::Checkpoint,
        IoComponent::DeltaBuckets,
        IoComponent::CacheHints,
        IoComponent::SearchCounts,
    ];

    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            IoComponent::Wal => "wal",
            IoComponent::Flush => "flush",
            IoComponent::Compaction => "compaction",
            IoComponent::LevelRead => "level_read",
            IoComponent::Manifest => "manifest",
            IoComponent::LargeLog => "large_log",
            IoComponent::TransientLog => "transient_log",
            IoComponent::Gc => "gc",
            IoComponent::Checkpoint => "checkpoint",
            IoComponent::DeltaBuckets => "delta_buckets",
            IoComponent::CacheHints => "cache_hints",
            IoComponent::SearchCounts => "search_counts",
        }
    }

    fn index(self) -> usize {
        match self {
            IoComponent::Wal => 0,
            IoComponent::Flush => 1,
            IoComponent::Compaction => 2,
            IoComponent::LevelRead => 3,
            IoComponent::Manifest => 4,
            IoComponent::LargeLog => 5,
            IoComponent::TransientLog => 6,
            IoComponent::Gc => 7,
            IoComponent::Checkpoint => 8,
            IoComponent::DeltaBuckets => 9,
            IoComponent::CacheHints => 10,
            IoComponent::SearchCounts => 11,
        }
    }

    /// Level files are the ones written with direct I/O when it is on (logs are appended
    /// in small records through the page cache and made durable by fsync).
    pub(crate) fn is_level_file(self) -> bool {
        matches!(
            self,
            IoComponent::Flush | IoComponent::Compaction | IoComponent::LevelRead
        )
    }
}

impl IoComponent {
    /// Files opened for reading under these components bypass the page cache when direct
    /// I/O is on: level files, and log segments read by gets, scans, transient merges and
    /// GC, so that every read of the engine is device traffic. The small log (read only at
    /// recovery) and the manifest are read through the page cache.
    pub(crate) fn reads_direct(self) -> bool {
        self.is_level_file()
            || matches!(
                self,
                IoComponent::LargeLog | IoComponent::TransientLog | IoComponent::Gc
            )
    }
}

/// How many components there are.
const N: usize = IoComponent::ALL.len();

thread_local! {
    /// Read calls this thread made through counted files since it started, each read of a
    /// batch one (what [`thread_read_calls`] reports).
    static THREAD_READ_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Read calls the calling thread has made through counted files, each read of a batch
/// one: a get takes the difference across itself to learn how many device reads it made
/// (with direct I/O; through the page cache some are served from memory).
pub(crate) fn thread_read_calls() -> u64 {
    THREAD_READ_CALLS.with(std::cell::Cell::get)
}

/// Live counters (shared by all files of one database).
#[derive(Debug, Default)]
pub struct IoStats {
    written: [AtomicU64; N],
    read: [AtomicU64; N],
    read_ops: [AtomicU64; N],
    read_nanos: [AtomicU64; N],
    timed_reads: [AtomicU64; N],
    syncs: [AtomicU64; N],
}

/// A copy of the counters at one moment.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStatsSnapshot {
    /// Bytes written per component, in [`IoComponent::ALL`] order.
    pub written: Vec<(IoComponent, u64)>,
    /// Bytes read per component, in [`IoComponent::ALL`] order.
    pub read: Vec<(IoComponent, u64)>,
    /// Read calls per component, in [`IoComponent::ALL`] order.
    pub read_ops: Vec<(IoComponent, u64)>,
    /// Nanoseconds the calling threads waited in read calls, per component, in
    /// [`IoComponent::ALL`] order (the wall time of each `read_exact_at`, so with direct
    /// I/O, over `timed_reads`, a device read's latency as the engine sees it; the reads
    /// of a batch the ring filled are not timed, their waits overlap).
    pub read_nanos: Vec<(IoComponent, u64)>,
    /// The read calls `read_nanos` timed, per component, in [`IoComponent::ALL`] order
    /// (`read_ops` less the reads of batches the ring filled; a batch's read the ring did
    /// not fill is read alone, and timed).
    pub timed_reads: Vec<(IoComponent, u64)>,
    /// `sync_data` calls (fdatasync) per component, in [`IoComponent::ALL`] order.
    pub syncs: Vec<(IoComponent, u64)>,
}

impl IoStatsSnapshot {
    /// Bytes written by one component.
    pub fn written_by(&self, c: IoComponent) -> u64 {
        of(&self.written, c)
    }
    /// Bytes read by one component.
    pub fn read_by(&self, c: IoComponent) -> u64 {
        of(&self.read, c)
    }
    /// Read calls made by one component.
    pub fn read_ops_by(&self, c: IoComponent) -> u64 {
        of(&self.read_ops, c)
    }
    /// Nanoseconds spent in read calls by one component.
    pub fn read_nanos_by(&self, c: IoComponent) -> u64 {
        of(&self.read_nanos, c)
    }
    /// Read calls timed in `read_nanos` for one component.
    pub fn timed_reads_by(&self, c: IoComponent) -> u64 {
        of(&self.timed_reads, c)
    }
    /// `sync_data` calls made by one component.
    pub fn syncs_by(&self, c: IoComponent) -> u64 {
        of(&self.syncs, c)
    }
    /// Bytes written by all components.
    pub fn total_written(&self) -> u64 {
        self.written.iter().map(|(_, v)| v).sum()
    }
    /// Bytes read by all components.
    pub fn total_read(&self) -> u64 {
        self.read.iter().map(|(_, v)| v).sum()
    }
}

/// Component `c`'s figure in a snapshot's list (0 if it is not there).
fn of(list: &[(IoComponent, u64)], c: IoComponent) -> u64 {
    list.iter().find(|(k, _)| *k == c).map_or(0, |(_, v)| *v)
}

/// Adds `n` to component `c`'s counter in `counters`.
fn add(counters: &[AtomicU64; N], c: IoComponent, n: u64) {
    if let Some(a) = counters.get(c.index()) {
        a.fetch_add(n, Ordering::Relaxed);
    }
}

impl IoStats {
    fn add_written(&self, c: IoComponent, n: u64) {
        add(&self.written, c, n);
    }
    fn add_read(&self, c: IoComponent, n: u64) {
        add(&self.read, c, n);
        add(&self.read_ops, c, 1);
        THREAD_READ_CALLS.with(|calls| calls.set(calls.get().wrapping_add(1)));
    }
    fn add_read_time(&self, c: IoComponent, elapsed: std::time::Duration) {
        add(
            &self.read_nanos,
            c,
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        );
        add(&self.timed_reads, c, 1);
    }
    fn add_sync(&self, c: IoComponent) {
        add(&self.syncs, c, 1);
    }

    /// Copies the counters.
    pub fn snapshot(&self) -> IoStatsSnapshot {
        let per = |counters: &[AtomicU64; N]| -> Vec<(IoComponent, u64)> {
            IoComponent::ALL
                .iter()
                .map(|&c| {
                    let v = counters
                        .get(c.index())
                        .map_or(0, |a| a.load(Ordering::Relaxed));
                    (c, v)
                })
                .collect()
        };
        IoStatsSnapshot {
            written: per(&self.written),
            read: per(&self.read),
            read_ops: per(&self.read_ops),
            read_nanos: per(&self.read_nanos),
            timed_reads: per(&self.timed_reads),
            syncs: per(&self.syncs),
        }
    }
}

pub(super) struct CountingWriter {
    inner: Box<dyn WritableFile>,
    stats: Arc<IoStats>,
    component: IoComponent,
}

impl CountingWriter {
    pub(super) fn new(
        inner: Box<dyn WritableFile>,
        stats: Arc<IoStats>,
        component: IoComponent,
    ) -> Self {
        CountingWriter {
            inner,
            stats,
            component,
        }
    }
}

impl WritableFile for CountingWriter {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.inner.append(data)?;
        self.stats.add_written(self.component, data.len() as u64);
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    fn sync_data(&mut self) -> Result<()> {
        self.inner.sync_data()?;
        self.stats.add_sync(self.component);
        Ok(())
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn finish(&mut self) -> Result<()> {
        self.inner.finish()
    }
}

pub(super) struct CountingReader {
    inner: Arc<dyn ReadableFile>,
    stats: Arc<IoStats>,
    component: IoComponent,
    /// Spin on each read's completion for this long before sleeping (`Io`'s setting, for
    /// files read with `O_DIRECT`).
    spin: Option<std::time::Duration>,
}

impl CountingReader {
    pub(super) fn new(
        inner: Arc<dyn ReadableFile>,
        stats: Arc<IoStats>,
        component: IoComponent,
        spin: Option<std::time::Duration>,
    ) -> Self {
        CountingReader {
            inner,
            stats,
            component,
            spin,
        }
    }
}

impl ReadableFile for CountingReader {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let start = std::time::Instant::now();
        match self.spin {
            Some(spin) => self.inner.read_exact_at_spinning(offset, buf, spin)?,
            None => self.inner.read_exact_at(offset, buf)?,
        }
        self.stats.add_read_time(self.component, start.elapsed());
        self.stats.add_read(self.component, buf.len() as u64);
        Ok(())
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn raw_read_target(&self) -> Option<RawReadTarget> {
        self.inner.raw_read_target()
    }
    fn note_batched_read(&self, bytes: u64) {
        self.stats.add_read(self.component, bytes);
        self.inner.note_batched_read(bytes);
    }
    fn will_need(&self, offset: u64, len: usize) {
        self.inner.will_need(offset, len);
    }
    fn read_exact_at_spinning(
        &self,
        offset: u64,
        buf: &mut [u8],
        spin: std::time::Duration,
    ) -> Result<()> {
        let start = std::time::Instant::now();
        self.inner.read_exact_at_spinning(offset, buf, spin)?;
        self.stats.add_read_time(self.component, start.elapsed());
        self.stats.add_read(self.component, buf.len() as u64);
        Ok(())
    }
}
