//! The I/O layer: the only code that touches the operating system's files.
//!
//! Owns: the [`FileSystem`] seam (open, read at, append, sync data, sync directory, rename,
//! hard link, delete, punch hole, list, lock), the real implementation ([`RealFs`], with optional
//! `O_DIRECT` or memory-mapped reads), a simulated one for tests (`SimFs`: crash images, injected faults, a
//! byte quota; compiled only for this crate's tests or with the `sim` cargo feature),
//! sealing a closed database's handle ([`Io::seal`]), and byte counting per component
//! ([`IoStats`]). Never: interprets bytes or decides what is live; it moves bytes and
//! reports errors as `Error::Io` with the path.
//!
//! Every other module receives an [`Io`] handle, so tests can substitute a simulated or
//! fault-injecting file system without touching the engine.

mod counting;
mod overlay;
mod real;
mod sealed;
// Test machinery: unit tests see it through `cfg(test)`, integration tests and the fuzz
// crate through the `sim` feature; a plain build of the library does not compile it.
#[cfg(any(test, feature = "sim"))]
mod sim;

pub(crate) use counting::thread_read_calls;
pub use counting::{IoComponent, IoStats, IoStatsSnapshot};
pub use real::RealFs;
#[cfg(any(test, feature = "sim"))]
pub use sim::{CrashKind, FailMode, SimFs, SimHistory, SimReplay, SECTOR_SIZE};

use crate::error::Result;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Alignment used for direct I/O and for level-file layout.
pub const IO_ALIGN: usize = 4096;

/// A file opened for appending (sequential writes from the start).
pub trait WritableFile: Send + Sync {
    /// Appends `data` (possibly buffered in user space).
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Hands every buffered byte to the operating system (survives a process crash).
    fn flush(&mut self) -> Result<()>;
    /// Flushes, then makes the file's data durable (survives power loss).
    fn sync_data(&mut self) -> Result<()>;
    /// Bytes appended so far (buffered or not).
    fn len(&self) -> u64;
    /// Whether nothing was appended yet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Flushes, then ends the file at [`WritableFile::len`]: a file appended through a
    /// memory map gives back the space it reserved ahead (its length ran past the bytes
    /// appended). Nothing may be appended after. Not durable by itself: the next
    /// [`WritableFile::sync_data`] makes the new length durable too. Required, with no
    /// default, so that a wrapper cannot forget to forward it.
    fn finish(&mut self) -> Result<()>;
}

/// A file opened for positional reads.
pub trait ReadableFile: Send + Sync {
    /// Fills `buf` from `offset`; reading past the end is an `UnexpectedEof` I/O error.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Current length of the file.
    fn len(&self) -> u64;
    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// What a batched submission ([`Io::read_batch`]) needs of this file; `None` (the
    /// default) reads it one call at a time.
    fn raw_read_target(&self) -> Option<RawReadTarget> {
        None
    }
    /// Counts a read of `bytes` that a batch made on this file's behalf.
    fn note_batched_read(&self, _bytes: u64) {}
    /// [`ReadableFile::read_exact_at`], the thread spinning on each device read's
    /// completion for up to `spin` before it sleeps, where the file can (an `O_DIRECT` file
    /// of the real file system: `Options::read_spin_us`); the default reads as
    /// `read_exact_at` does.
    fn read_exact_at_spinning(
        &self,
        offset: u64,
        buf: &mut [u8],
        _spin: std::time::Duration,
    ) -> Result<()> {
        self.read_exact_at(offset, buf)
    }
    /// Says that `len` bytes at `offset` will be read soon, so the system may start
    /// reading them (a memory-mapped file asks the kernel to fault the pages in ahead;
    /// the default does nothing). Never fails: it is a hint.
    fn will_need(&self, _offset: u64, _len: usize) {}
}

/// What a batched read needs of an operating-system file: its descriptor (valid while the
/// file it came from is open), whether it was opened with `O_DIRECT`, and the offset and
/// length alignment direct reads of it need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawReadTarget {
    /// The file descriptor.
    pub fd: i32,
    /// Opened with `O_DIRECT`.
    pub direct: bool,
    /// Alignment of direct reads (a power of two, at most [`IO_ALIGN`]).
    pub align: u64,
}

/// One read of a batch: fill `buf` from `offset` of `file`.
pub struct BatchRead<'a> {
    /// The file to read.
    pub file: &'a dyn ReadableFile,
    /// Where in the file.
    pub offset: u64,
    /// Filled with the bytes at `offset`.
    pub buf: &'a mut [u8],
}

/// An exclusive lock on a database directory, released on drop.
pub trait DirLock: Send + Sync + Debug {}

/// Everything the engine needs from a file system.
pub trait FileSystem: Send + Sync + Debug {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// Creates (or truncates) a file for appending. `direct` asks for `O_DIRECT`, in which
    /// case every flush must leave a multiple of [`IO_ALIGN`] bytes written.
    fn create(&self, path: &Path, direct: bool) -> Result<Box<dyn WritableFile>>;
    /// Creates (or truncates) a file for appending through a memory map, where the file
    /// system has them: an append is a copy into the page cache, no system call. The file
    /// is reserved ahead (`fallocate`), so its length may run past the bytes appended,
    /// zeros, until [`WritableFile::finish`]; a crash leaves that tail. Only for files
    /// whose readers tell such a tail from data (the small log, large-log segments). The
    /// default creates it as [`FileSystem::create`] without `O_DIRECT`.
    fn create_mapped(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        self.create(path, false)
    }
    /// Opens an existing file for positional reads.
    fn open(&self, path: &Path, direct: bool) -> Result<Arc<dyn ReadableFile>>;
    /// Opens an existing file for positional reads through a memory map, where the file
    /// system has them (the default opens it as [`FileSystem::open`] without `O_DIRECT`).
    /// Only for files that are never cut shorter while open (level files, sealed log
    /// segments), or whose readers read only below every cut (the large-log segment being
    /// appended to: a cut only gives back the zeros reserved past its records, and a
    /// reader reads records; a whole-file read goes through [`Io::read_all`]).
    fn open_mapped(&self, path: &Path) -> Result<Arc<dyn ReadableFile>> {
        self.open(path, false)
    }
    /// Atomically renames `from` to `to` (durable once the directory is synced).
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Deletes a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// Deletes an empty directory (a dropped keyspace's, once its files are deleted).
    /// Required, with no default: a wrapper that forgot to forward it would leave every
    /// dropped keyspace's directory behind. A file system without directories of its own
    /// answers `Ok` once nothing is named under `path`.
    fn remove_dir(&self, path: &Path) -> Result<()>;
    /// Gives the file at `from` a second name `to` (a hard link: both name the same
    /// bytes; durable once `to`'s directory is synced). Only for files nothing changes
    /// any more: a checkpoint links the immutable files of a database.
    fn hard_link(&self, from: &Path, to: &Path) -> Result<()>;
    /// Names of the entries of a directory.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Makes creates, renames and deletes in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// What is at `path`: `None` if nothing, `Some(true)` for a directory.
    fn kind(&self, path: &Path) -> Result<Option<bool>>;
    /// Length of a file.
    fn file_len(&self, path: &Path) -> Result<u64>;
    /// Bytes the file occupies on disk (after holes are punched).
    fn allocated_len(&self, path: &Path) -> Result<u64>;
    /// Cuts a file to `len` bytes and makes the file (length and bytes) durable (used to
    /// drop a torn log tail, and with the current length to make a file durable).
    fn truncate(&self, path: &Path, len: u64) -> Result<()>;
    /// Frees `len` bytes at `offset` of a file, keeping its size (space returns to the OS).
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<()>;
    /// Takes an exclusive lock on `path` (created if missing); fails if another holder has it.
    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>>;
}

/// Reads a whole file that another process may cut shorter at any moment (a log whose
/// reserved tail its writer cuts): `open` opens it (never through a memory map), and a
/// read that meets the end early because `len_now` says the file got shorter since the
/// open is tried again, up to 3 times. Shared by [`Io::read_all`] and the read-only
/// overlay's first copy of a file.
fn read_whole(
    path: &Path,
    open: impl Fn() -> Result<Arc<dyn ReadableFile>>,
    len_now: impl Fn() -> Result<u64>,
) -> Result<Vec<u8>> {
    let mut attempts = 0;
    loop {
        let file = open()?;
        let len = usize::try_from(file.len())
            .map_err(|_| crate::Error::corruption(path, 0, "file too large to read into memory"))?;
        let mut buf = vec![0u8; len];
        match file.read_exact_at(0, &mut buf) {
            Ok(()) => return Ok(buf),
            Err(crate::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::UnexpectedEof
                    && attempts < 3
                    && len_now().is_ok_and(|now| now < len as u64) =>
            {
                attempts += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Fills `buf` from the bytes at `offset` of `data` (an in-memory file or a bounce
/// buffer); past the end is an `UnexpectedEof` I/O error naming `path`.
/// How many reads [`Io::read_spans`] hands the device at once.
pub(crate) const SPAN_READS_PER_BATCH: usize = 16;
/// The widest gap between two spans that one read of them crosses: on this project's
/// machine a device read costs about the same up to tens of KiB, so reading 4 KiB that
/// no one asked for is cheaper than a second read.
pub(crate) const SPAN_MAX_GAP: u64 = 4096;
/// The longest read that joins several spans.
pub(crate) const SPAN_MAX_READ: u64 = 256 << 10;

/// One read of [`Io::read_spans`]: `len` bytes from `start`, holding `spans`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpanRead {
    pub start: u64,
    pub len: usize,
    /// Indexes of the spans it holds, ascending.
    pub spans: Vec<usize>,
}

/// The reads [`Io::read_spans`] makes of `spans` in a file of `file_len` bytes.
pub(crate) fn coalesce_spans(
    spans: &[(u64, u32)],
    file_len: u64,
    max_gap: u64,
    max_read: u64,
) -> Vec<SpanRead> {
    let mut reads: Vec<SpanRead> = Vec::new();
    // The end of the last span taken (a later one must start at or after it).
    let mut last_end = 0u64;
    for (i, &(offset, len)) in spans.iter().enumerate() {
        let Some(end) = offset.checked_add(u64::from(len)) else {
            continue;
        };
        if len == 0 || end > file_len || offset < last_end {
            continue;
        }
        last_end = end;
        let joined = reads.last_mut().is_some_and(|r| {
            let r_end = r.start + r.len as u64;
            let fits = offset - r_end <= max_gap && end - r.start <= max_read;
            if fits {
                r.len = (end - r.start) as usize;
                r.spans.push(i);
            }
            fits
        });
        if !joined {
            reads.push(SpanRead {
                start: offset,
                len: len as usize,
                spans: vec![i],
            });
        }
    }
    reads
}

/// A buffer of `len` zero bytes for a read to fill: allocated without asking for zeroed
/// memory and zeroed by a `memset`. `vec![0u8; len]` asks the allocator for zeroed
/// memory, and jemalloc (the CLI's and the benchmark's allocator) may hand out recycled
/// memory that way by purging its pages and faulting them in again: in a profile of a
/// cold 40M MD Run C, `calloc` took 8% of the samples (6.3% the leaf reads'), and page
/// faults 14%. A memset of memory just freed costs a few tens of nanoseconds.
///
/// The empty buffer passes through `black_box` so that the optimiser cannot fold the
/// allocation and the memset back into a zeroed allocation (LLVM does so for a length
/// known at compile time since the allocator's zeroed variant became known to it).
// Clippy's advice (`vec![0; len]`) is the zeroed allocation this function exists to avoid.
#[allow(clippy::slow_vector_initialization)]
pub(crate) fn read_buf(len: usize) -> Vec<u8> {
    let mut buf = std::hint::black_box(Vec::with_capacity(len));
    buf.resize(len, 0);
    buf
}

pub(crate) fn read_from(data: &[u8], offset: u64, buf: &mut [u8], path: &Path) -> Result<()> {
    let src = usize::try_from(offset)
        .ok()
        .and_then(|s| data.get(s..s.checked_add(buf.len())?));
    match src {
        Some(src) => {
            buf.copy_from_slice(src);
            Ok(())
        }
        None => Err(crate::error::Error::io(
            "read",
            path,
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            ),
        )),
    }
}

/// The handle every component uses: a file system, its byte counters, and the I/O mode.
#[derive(Debug, Clone)]
pub struct Io {
    fs: Arc<dyn FileSystem>,
    stats: Arc<IoStats>,
    direct: bool,
    /// Level files and log segments are read through memory maps (`Options::mmap_reads`).
    mapped: bool,
    /// The small log is appended to through memory maps (`Options::mmap_log_writes`).
    mapped_log: bool,
    /// How long a thread spins on a direct read's completion before it sleeps
    /// (`Options::read_spin_us`; `None`: it sleeps at once).
    read_spin: Option<std::time::Duration>,
    /// Set by [`Io::seal`]: every change through this handle (and its clones, and files
    /// opened through them) fails with `Error::Closed`.
    sealed: sealed::Seal,
}

impl Io {
    /// Wraps a file system; `direct` selects `O_DIRECT` for level-file writes and for
    /// reads of level files and log segments.
    pub fn new(fs: Arc<dyn FileSystem>, direct: bool) -> Self {
        let sealed: sealed::Seal = Arc::new(parking_lot::RwLock::new(false));
        Io {
            fs: Arc::new(sealed::SealableFs::new(fs, Arc::clone(&sealed))),
            stats: Arc::new(IoStats::default()),
            direct,
            mapped: false,
            mapped_log: false,
            read_spin: None,
            sealed,
        }
    }

    /// The same handle, reading level files and log segments through memory maps
    /// (`mapped`) or as [`Io::new`] chose (direct or buffered).
    pub fn with_mapped_reads(mut self, mapped: bool) -> Self {
        self.mapped = mapped;
        self
    }

    /// The same handle, appending to the small log and the large log through memory maps
    /// (`mapped`: see [`FileSystem::create_mapped`]) or with buffered writes.
    pub fn with_mapped_log_writes(mut self, mapped: bool) -> Self {
        self.mapped_log = mapped;
        self
    }

    /// The same handle, its direct reads of level files and log segments waited for by
    /// spinning on their completion for up to `micros` microseconds before sleeping
    /// (`Options::read_spin_us`; 0: sleeping at once, as a plain `pread` does).
    pub fn with_read_spin_us(mut self, micros: u32) -> Self {
        self.read_spin = (micros > 0).then(|| std::time::Duration::from_micros(u64::from(micros)));
        self
    }

    /// Whether the small log is appended to through memory maps.
    pub fn mapped_log_writes(&self) -> bool {
        self.mapped_log
    }

    /// Whether level files and log segments are read through memory maps.
    pub fn mapped_reads(&self) -> bool {
        self.mapped
    }

    /// A handle for a read-only open: reads go to `fs`, every change stays in memory (see
    /// `io::overlay`), and no lock is taken.
    pub(crate) fn read_only(fs: Arc<dyn FileSystem>, direct: bool) -> Self {
        Io::new(Arc::new(overlay::ReadOnlyOverlay::new(fs)), direct)
    }

    /// Refuses every later change to the disk through this handle, its clones and the
    /// files they opened (`Error::Closed`); reads still work. A closing database seals
    /// its `Io` before it releases the directory lock.
    /// Waits for changes in flight to finish.
    pub fn seal(&self) {
        *self.sealed.write() = true;
    }

    /// The underlying file system.
    pub fn fs(&self) -> &dyn FileSystem {
        self.fs.as_ref()
    }

    /// The byte counters.
    pub fn stats(&self) -> &Arc<IoStats> {
        &self.stats
    }

    /// Whether level files use direct I/O.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Creates a file whose writes are counted under `component`. Level files (flush and
    /// compaction output) use direct I/O when it is on; logs never do; the small log and
    /// the large log (`IoComponent::Wal`, `IoComponent::LargeLog`: the logs a commit
    /// appends to) are appended to through memory maps when that is on.
    pub fn create(&self, path: &Path, component: IoComponent) -> Result<Box<dyn WritableFile>> {
        let direct = self.direct && component.is_level_file();
        let inner =
            if self.mapped_log && matches!(component, IoComponent::Wal | IoComponent::LargeLog) {
                self.fs.create_mapped(path)?
            } else {
                self.fs.create(path, direct)?
            };
        Ok(Box::new(counting::CountingWriter::new(
            inner,
            Arc::clone(&self.stats),
            component,
        )))
    }

    /// Opens a file whose reads are counted under `component`. Level files and log
    /// segments (see [`IoComponent::reads_direct`]) are read through a memory map with
    /// mapped reads on, else with `O_DIRECT` when direct I/O is on.
    pub fn open(&self, path: &Path, component: IoComponent) -> Result<Arc<dyn ReadableFile>> {
        self.open_with(path, component, self.mapped)
    }

    /// [`Io::open`], through a memory map only if `mapped` (and the component's reads go
    /// direct or mapped at all).
    fn open_with(
        &self,
        path: &Path,
        component: IoComponent,
        mapped: bool,
    ) -> Result<Arc<dyn ReadableFile>> {
        let inner = if mapped && component.reads_direct() {
            self.fs.open_mapped(path)?
        } else {
            self.fs
                .open(path, self.direct && component.reads_direct())?
        };
        let direct = !mapped && self.direct && component.reads_direct();
        Ok(Arc::new(counting::CountingReader::new(
            inner,
            Arc::clone(&self.stats),
            component,
            self.read_spin.filter(|_| direct),
        )))
    }

    /// Fills every request's buffer. Where every file can be (files of the real file
    /// system), the reads are submitted together through `io_uring`: one system call and
    /// one notification of the device for the whole batch instead of one per read, which
    /// on a virtual machine is most of a direct read's CPU. A request the batch did not
    /// fill completely (an error, a short read at the end of a file), and every request
    /// where batching is unavailable, is read on its own with `read_exact_at`, so each
    /// result is what `read_exact_at` gives: one per request, in order.
    pub fn read_batch(&self, reqs: &mut [BatchRead<'_>]) -> Vec<Result<()>> {
        self.read_batch_spinning(reqs, self.read_spin.filter(|_| self.direct))
    }

    /// [`Io::read_batch`], spinning on the completions for up to `spin`; with `None`,
    /// the thread sleeps at once, and a batch of one read goes through the ring too
    /// (`read_exact_at` would spin where the file was opened to).
    fn read_batch_spinning(
        &self,
        reqs: &mut [BatchRead<'_>],
        spin: Option<std::time::Duration>,
    ) -> Vec<Result<()>> {
        let ring = reqs.len() > 1 || (spin.is_none() && self.read_spin.is_some() && self.direct);
        let filled = if ring {
            real::submit_batch(reqs, spin)
        } else {
            vec![false; reqs.len()]
        };
        if reqs.len() > 1 {
            // What is read one by one: let the system start on all of it first (a mapped
            // file faults its pages in ahead, in parallel).
            for (r, filled) in reqs.iter().zip(&filled) {
                if !filled {
                    r.file.will_need(r.offset, r.buf.len());
                }
            }
        }
        reqs.iter_mut()
            .zip(filled)
            .map(|(r, filled)| {
                if filled {
                    r.file.note_batched_read(r.buf.len() as u64);
                    Ok(())
                } else {
                    r.file.read_exact_at(r.offset, r.buf)
                }
            })
            .collect()
    }

    /// Reads many spans of one file in few device reads: `spans` ((offset, length), in
    /// ascending order) that lie at most `max_gap` bytes apart are read together, up to
    /// `max_read` bytes a read (a span longer than that alone), and up to
    /// [`SPAN_READS_PER_BATCH`] reads go to the device at once ([`Io::read_batch`], the
    /// thread sleeping on the completions rather than spinning). A
    /// span that overlaps the one before it, or runs past the file's end, is left out.
    /// `each(i, bytes)` gets every span `i` read whole; a span whose read failed is left
    /// out. `go_on()` is asked before each batch: `false` stops. Returns the bytes read.
    pub(crate) fn read_spans(
        &self,
        file: &dyn ReadableFile,
        spans: &[(u64, u32)],
        max_gap: u64,
        max_read: u64,
        go_on: &mut dyn FnMut() -> bool,
        each: &mut dyn FnMut(usize, &[u8]),
    ) -> u64 {
        let reads = coalesce_spans(spans, file.len(), max_gap, max_read);
        let mut read_bytes = 0;
        for batch in reads.chunks(SPAN_READS_PER_BATCH) {
            if !go_on() {
                break;
            }
            let mut bufs: Vec<Vec<u8>> = batch.iter().map(|r| vec![0u8; r.len]).collect();
            let mut reqs: Vec<BatchRead<'_>> = batch
                .iter()
                .zip(bufs.iter_mut())
                .map(|(r, buf)| BatchRead {
                    file,
                    offset: r.start,
                    buf: buf.as_mut_slice(),
                })
                .collect();
            // Never spinning: the places to spin are the foreground reads' (a reload
            // runs beside them).
            let results = self.read_batch_spinning(&mut reqs, None);
            drop(reqs);
            for ((r, buf), result) in batch.iter().zip(&bufs).zip(results) {
                if result.is_err() {
                    continue;
                }
                read_bytes += buf.len() as u64;
                for &i in &r.spans {
                    let (offset, len) = spans[i];
                    let at = (offset - r.start) as usize;
                    if let Some(bytes) = buf.get(at..at + len as usize) {
                        each(i, bytes);
                    }
                }
            }
        }
        read_bytes
    }

    /// Reads a whole (small) file, counted under `component`, with `pread`s (direct with
    /// direct I/O), never through a memory map: the file may be a log being appended to
    /// through one, whose reserved tail its writer cuts at any moment (a copy out of a
    /// mapping past the new end would stop the process). A file that got shorter between
    /// the open and the read is read again, up to 3 times.
    pub fn read_all(&self, path: &Path, component: IoComponent) -> Result<Vec<u8>> {
        read_whole(
            path,
            || self.open_with(path, component, false),
            || self.fs.file_len(path),
        )
    }

    /// Writes `data` to `path` durably and atomically: temp file, fsync, rename, fsync dir.
    pub fn write_atomic(
        &self,
        dir: &Path,
        name: &str,
        data: &[u8],
        component: IoComponent,
    ) -> Result<()> {
        let tmp: PathBuf = dir.join(format!("{name}.tmp"));
        let dst = dir.join(name);
        {
            let mut f = self.create(&tmp, component)?;
            f.append(data)?;
            f.sync_data()?;
        }
        self.fs.rename(&tmp, &dst)?;
        self.fs.sync_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A reader that reports a length past the file's end once: a file that another
    /// process cut between the open and the read.
    struct Stale {
        inner: Arc<dyn ReadableFile>,
        extra: u64,
    }

    impl ReadableFile for Stale {
        fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
            self.inner.read_exact_at(offset, buf)
        }
        fn len(&self) -> u64 {
            self.inner.len() + self.extra
        }
    }

    /// `SimFs` whose first `open` hands out a [`Stale`] reader.
    #[derive(Debug)]
    struct CutOnce {
        fs: SimFs,
        done: AtomicBool,
    }

    impl FileSystem for CutOnce {
        fn create_dir_all(&self, path: &Path) -> Result<()> {
            self.fs.create_dir_all(path)
        }
        fn create(&self, path: &Path, direct: bool) -> Result<Box<dyn WritableFile>> {
            self.fs.create(path, direct)
        }
        fn open(&self, path: &Path, direct: bool) -> Result<Arc<dyn ReadableFile>> {
            let inner = self.fs.open(path, direct)?;
            if self.done.swap(true, Ordering::SeqCst) {
                return Ok(inner);
            }
            Ok(Arc::new(Stale { inner, extra: 4096 }))
        }
        fn rename(&self, from: &Path, to: &Path) -> Result<()> {
            self.fs.rename(from, to)
        }
        fn remove(&self, path: &Path) -> Result<()> {
            self.fs.remove(path)
        }
        fn remove_dir(&self, path: &Path) -> Result<()> {
            self.fs.remove_dir(path)
        }
        fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
            self.fs.hard_link(from, to)
        }
        fn list(&self, dir: &Path) -> Result<Vec<String>> {
            self.fs.list(dir)
        }
        fn sync_dir(&self, dir: &Path) -> Result<()> {
            self.fs.sync_dir(dir)
        }
        fn kind(&self, path: &Path) -> Result<Option<bool>> {
            self.fs.kind(path)
        }
        fn file_len(&self, path: &Path) -> Result<u64> {
            self.fs.file_len(path)
        }
        fn allocated_len(&self, path: &Path) -> Result<u64> {
            self.fs.allocated_len(path)
        }
        fn truncate(&self, path: &Path, len: u64) -> Result<()> {
            self.fs.truncate(path, len)
        }
        fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<()> {
            self.fs.punch_hole(path, offset, len)
        }
        fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>> {
            self.fs.lock(path)
        }
    }

    /// A simulated file system holding `data` at `path` (in `/d`), and a view of it whose
    /// first open of a file reports that file 4096 bytes longer than it is (a writer cut
    /// it between the reader's open and its read).
    fn cut_once_over(path: &str, data: &[u8]) -> (SimFs, CutOnce) {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let mut w = fs.create(Path::new(path), false).unwrap();
        w.append(data).unwrap();
        w.flush().unwrap();
        let cut = CutOnce {
            fs: fs.clone(),
            done: AtomicBool::new(false),
        };
        (fs, cut)
    }

    #[test]
    fn read_all_reads_again_a_file_cut_between_its_open_and_its_read() {
        // A reader in another process (a read-only open, `check`) may open the small log
        // just before the writer cuts its reserved tail at a memtable switch.
        let (_fs, cut) = cut_once_over("/d/1.wal", b"records");
        let io = Io::new(Arc::new(cut), false);
        let got = io
            .read_all(Path::new("/d/1.wal"), IoComponent::Wal)
            .unwrap();
        assert_eq!(got, b"records");
    }

    #[test]
    fn read_only_overlay_copies_a_file_cut_between_its_open_and_its_read() {
        // A read-only open cuts the newest large segment's torn tail in its overlay, which
        // first copies the file; the writer may cut its reserved tail during that copy
        // (found by CI: "failed to fill whole buffer" on a read-only open).
        let (fs, cut) = cut_once_over("/d/1.vlog", b"large records");
        let overlay = overlay::ReadOnlyOverlay::new(Arc::new(cut));
        overlay.truncate(Path::new("/d/1.vlog"), 5).unwrap();
        let r = overlay.open(Path::new("/d/1.vlog"), false).unwrap();
        let mut got = vec![0u8; 5];
        r.read_exact_at(0, &mut got).unwrap();
        assert_eq!((r.len(), &got[..]), (5, &b"large"[..]));
        // The file below was not touched by the overlay.
        assert_eq!(fs.file_len(Path::new("/d/1.vlog")).unwrap(), 13);
    }
    #[test]
    fn spans_close_together_are_read_together_and_impossible_ones_left_out() {
        let spans = [
            (0, 4096),
            (4096, 4096),
            // A gap of 4 KiB: joined.
            (12288, 4096),
            // Overlaps the one before: left out.
            (14000, 100),
            // A gap of 4 KiB and one byte: a read of its own.
            (20481, 100),
            (20581, 50),
            // Runs past the end of the file: left out.
            (99_000, 2000),
        ];
        let reads = coalesce_spans(&spans, 100_000, 4096, 1 << 20);
        let got: Vec<(u64, usize, Vec<usize>)> = reads
            .into_iter()
            .map(|r| (r.start, r.len, r.spans))
            .collect();
        assert_eq!(
            got,
            vec![(0, 16384, vec![0, 1, 2]), (20481, 150, vec![4, 5])]
        );
        // The longest read: a span that would make it longer starts a read of its own.
        let reads = coalesce_spans(&[(0, 4096), (4096, 4096), (8192, 4096)], 1 << 20, 0, 8192);
        let got: Vec<(u64, usize)> = reads.iter().map(|r| (r.start, r.len)).collect();
        assert_eq!(got, vec![(0, 8192), (8192, 4096)]);
    }

    #[test]
    fn read_spans_hands_out_each_span_read_and_stops_when_told() {
        let fs = SimFs::new();
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        let mut f = fs.create(Path::new("/f"), false).unwrap();
        f.append(&data).unwrap();
        f.sync_data().unwrap();
        drop(f);
        let io = Io::new(Arc::new(fs), false);
        let file = io.open(Path::new("/f"), IoComponent::LevelRead).unwrap();
        let spans: Vec<(u64, u32)> = (0..40).map(|i| (i * 1200, 1000)).collect();
        let mut seen = Vec::new();
        let read = io.read_spans(
            file.as_ref(),
            &spans,
            4096,
            8192,
            &mut || true,
            &mut |i, b| {
                let (at, len) = spans[i];
                assert_eq!(b, &data[at as usize..(at + u64::from(len)) as usize]);
                seen.push(i);
            },
        );
        assert_eq!(seen, (0..40).collect::<Vec<_>>());
        // Reads of at most 8192 bytes: six of six spans and the gaps between them (7000
        // bytes), then one of the last four (4600); the gaps after each read's last span
        // are not read.
        assert_eq!(read, 6 * 7000 + 4600);
        // Told to stop before the first batch: nothing read.
        let mut none = 0;
        let read = io.read_spans(
            file.as_ref(),
            &spans,
            4096,
            8192,
            &mut || false,
            &mut |_, _| none += 1,
        );
        assert_eq!((read, none), (0, 0));
    }
}
