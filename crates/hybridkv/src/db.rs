//! The public handle: `Db`.
//!
//! Owns: the public API and the lifecycle: open (recovery, the flush of what it replayed,
//! the background and GC threads) and close (refuse every entry point, stop the threads,
//! seal the I/O, release the directory lock). Never: holds logic of its own beyond
//! argument checks and lifecycle; every operation is the engine's.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::gc::GcReport;
use crate::io::{FileSystem, Io, RealFs};
use crate::log::large::SegmentKind;
use crate::options::{Options, WriteOptions};
use crate::read::iter::{DbIterator, KeyIterator};
use crate::snapshot::Snapshot;
use crate::space::SpaceReport;
use crate::stats::{LevelStats, Stats};
use crate::value::Value;
use crate::write::batch::WriteBatch;
use parking_lot::Mutex;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

/// An open database. Cheap to clone; every clone is usable from any thread through `&self`.
/// When the last clone is dropped (or [`Db::close`] is called), background work stops and
/// the directory lock is released; every acknowledged write is already in the log.
#[derive(Clone)]
pub struct Db {
    engine: Arc<Engine>,
    lifecycle: Arc<Lifecycle>,
    /// Opened by [`Db::open_read_only`]: every change is refused with `Error::ReadOnly`.
    read_only: bool,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("dir", &self.engine.dir).finish()
    }
}

struct Lifecycle {
    engine: Arc<Engine>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Lifecycle {
    /// Closes: entry points refuse from now on, background threads stop, then the disk
    /// is sealed (changes in flight finish, later ones fail with `Error::Closed`), and only
    /// then is the directory lock released, so nothing of this instance can touch a
    /// directory another instance may open next. Idempotent.
    fn shutdown(&self) {
        self.engine
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        {
            let mut g = self.engine.bg.lock();
            g.shutdown = true;
            self.engine.bg_cv.notify_all();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        {
            // Hand the acknowledged-but-buffered tail to the OS before letting go (a
            // write acknowledged has been handed over already; this is belt and braces).
            let mut log = self.engine.writes.lock();
            let _ = log.writer.commit(false);
            self.engine.io.seal();
        }
        self.engine.dir_lock.lock().take();
    }
}

impl Drop for Lifecycle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Db {
    /// Opens (or creates, with `create_if_missing`) the database in `path`.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        Self::open_with_fs(path, options, Arc::new(RealFs))
    }

    /// Opens the database through a caller-supplied file system (for tests that simulate
    /// crashes or inject faults).
    pub fn open_with_fs(
        path: impl AsRef<Path>,
        options: Options,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Db> {
        let io = Io::new(fs, options.direct_io).with_mapped_reads(options.mmap_reads);
        let threads = options.background_threads;
        let engine = Engine::open(path.as_ref(), options, io, false)?;
        engine.flush_replayed()?;
        let lifecycle = Arc::new(Lifecycle {
            engine: Arc::clone(&engine),
            threads: Mutex::new(Vec::new()),
        });
        for i in 0..threads {
            let e = Arc::clone(&engine);
            let handle = std::thread::Builder::new()
                .name(format!("hybridkv-bg-{i}"))
                .spawn(move || e.background_loop())
                .map_err(|err| Error::io("spawn background thread", path.as_ref(), err))?;
            lifecycle.threads.lock().push(handle);
        }
        let e = Arc::clone(&engine);
        let handle = std::thread::Builder::new()
            .name("hybridkv-gc".into())
            .spawn(move || e.gc_loop())
            .map_err(|err| Error::io("spawn gc thread", path.as_ref(), err))?;
        lifecycle.threads.lock().push(handle);
        Ok(Db {
            engine,
            lifecycle,
            read_only: false,
        })
    }

    /// Opens an existing database for reading only, beside a process that may be writing
    /// it: no lock is taken and nothing on disk changes. Recovery runs as usual (what the
    /// small log holds is replayed, a torn tail is cut), but every change it makes stays
    /// in memory. The handle reads the database as it was when it opened; files that the
    /// writer deletes later may make a read fail with `Error::Io`, so a long-lived
    /// reader should reopen. Writes, `flush`, `compact`, `compact_all` and `gc` fail with
    /// `Error::ReadOnly`; no background thread runs.
    pub fn open_read_only(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        Self::open_read_only_with_fs(path, options, Arc::new(RealFs))
    }

    /// [`Db::open_read_only`] through a caller-supplied file system.
    pub fn open_read_only_with_fs(
        path: impl AsRef<Path>,
        options: Options,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Db> {
        let options = Options {
            create_if_missing: false,
            ..options
        };
        let dir = path.as_ref();
        // A writer may install a flush, compaction or GC pass while this open reads, and
        // delete a file the manifest it loaded names before the open reached it: the open
        // then fails (the file is missing), and is tried again if the manifest changed
        // meanwhile. An open that succeeds holds every file it needs open, and what it
        // replays ends at anything it could not see (a gap in LSNs, a segment started
        // after it listed the directory), so it sees a prefix of the writer's commits.
        // A view is taken as of the open only if the manifest did not change while it
        // read; else it is tried again, and after `ATTEMPTS` tries of a writer installing
        // faster than the open reads, the last successful one is kept (a prefix of the
        // writer's commits, possibly without its newest).
        const ATTEMPTS: usize = 20;
        let mut attempt = 0;
        let mut last: Option<Arc<Engine>> = None;
        let engine = loop {
            attempt += 1;
            let before = manifest_bytes(fs.as_ref(), dir);
            let io = Io::read_only(Arc::clone(&fs), options.direct_io);
            let opened = Engine::open(dir, options.clone(), io, true);
            let changed = manifest_bytes(fs.as_ref(), dir) != before;
            match opened {
                Ok(engine) if !changed || attempt >= ATTEMPTS => break engine,
                Ok(engine) => last = Some(engine),
                Err(e) if !changed || attempt >= ATTEMPTS => match last.take() {
                    Some(engine) => break engine,
                    None => return Err(e),
                },
                Err(_) => {}
            }
        };
        let lifecycle = Arc::new(Lifecycle {
            engine: Arc::clone(&engine),
            threads: Mutex::new(Vec::new()),
        });
        Ok(Db {
            engine,
            lifecycle,
            read_only: true,
        })
    }

    /// `Error::ReadOnly` for a handle from [`Db::open_read_only`], `Error::Closed` once
    /// closed.
    fn check_writable(&self) -> Result<()> {
        self.engine.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    /// Stores `value` under `key`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(key, value, &self.default_write_options())
    }

    /// Stores `value` under `key` with explicit write options.
    pub fn put_opt(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write_opt(b, opts)
    }

    /// Deletes `key` (not an error if absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(b)
    }

    /// Deletes every key in `start..end` (`end` excluded) written before the call, as one
    /// write whatever the number of keys: a range tombstone that reads apply at once
    /// (gets, scans, snapshots taken after it) and that flushes and compactions apply
    /// later, dropping the deleted versions (their space comes back as the merges reach
    /// them; `compact_all` reaches all of them). Keys written after it are not affected.
    /// `Error::InvalidArgument` if `start > end` or a bound is longer than a key may be;
    /// `start == end` deletes nothing. Lookups test each live range tombstone, so a
    /// workload that deletes many small ranges is better served by `delete`.
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(start, end);
        self.write(b)
    }

    /// Deletes every key that starts with `prefix` (every key, for an empty prefix), as
    /// one write whatever the number of keys (see [`Db::delete_range`]).
    pub fn delete_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_prefix(prefix);
        self.write(b)
    }

    /// Adds a delta for `key`: a blind write that the merge operator
    /// (`Options::merge_operator`) folds into the key's value, so a read-modify-write costs
    /// no read. Gets, scans and snapshots see the folded value. `Error::InvalidArgument`
    /// if no operator is set; `Error::MergeFailed` if the operator refuses `operand`.
    pub fn merge(&self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.merge(key, operand);
        self.write(b)
    }

    /// Applies every operation of `batch` atomically.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_opt(batch, &self.default_write_options())
    }

    /// Applies `batch` atomically with explicit write options.
    pub fn write_opt(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.check_writable()?;
        self.engine.write_batch(batch, opts.sync)
    }

    fn default_write_options(&self) -> WriteOptions {
        WriteOptions {
            sync: self.engine.opts.sync,
        }
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        Ok(self.get_value(key)?.map(Value::into_vec))
    }

    /// [`Db::get`] as a [`Value`]: a reference-counted view of the bytes the engine read,
    /// so a value from the large or the transient log comes without a copy (see
    /// [`Value`]).
    pub fn get_value(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let key = key.as_ref();
        let (sv, lsn) = self.engine.snapshot();
        let (value, folded) = crate::snapshot::get_noting_folds(&self.engine, &sv, lsn, key)?;
        if folded && self.engine.opts.fold_on_read && self.check_writable().is_ok() {
            if let Some(v) = &value {
                drop(sv); // the write-back captures the state anew
                self.engine.fold_back(key, v, lsn);
            }
        }
        Ok(value)
    }

    /// Pairs whose keys fall in `range`, in key order, as of now. An invalid range (start
    /// after end) yields one `Error::InvalidArgument`.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> DbIterator {
        let (sv, lsn) = self.engine.snapshot();
        crate::snapshot::range_at(&self.engine, &sv, lsn, range)
    }

    /// A consistent view of the database as of now, for reads (get, range, prefix, keys)
    /// that see every write acknowledged before this call and none after, for as long as
    /// the handle lives. The files it reads stay on disk until it is dropped (`space()`
    /// lists them as waiting for deletion). Its reads fail with `Error::Closed` once the
    /// database is closed.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.engine.check_open()?;
        Ok(Snapshot::capture(&self.engine))
    }

    /// Keys in `range`, in key order, as of now. Values are never read, so no log or
    /// overflow blob is touched.
    pub fn keys<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> KeyIterator {
        KeyIterator(self.range(range))
    }

    /// Live bytes against bytes on disk, per component, with the reason each kind of
    /// space not yet reclaimed is there. Scans every key (never a log): O(keys).
    pub fn space(&self) -> Result<SpaceReport> {
        self.engine.check_open()?;
        self.engine.space_report()
    }

    /// Verifies the database without changing it: every node and overflow-blob checksum
    /// of every level run, every log pointer (it must land on a valid record holding its
    /// key), every log segment and small-log file; lists orphaned files. Reads everything.
    pub fn check(&self) -> Result<crate::check::CheckReport> {
        self.engine.check_open()?;
        self.engine.check()
    }

    /// Pairs whose keys start with `prefix`, in key order.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> DbIterator {
        let (start, end) = crate::snapshot::prefix_bounds(prefix.as_ref());
        self.range::<Vec<u8>, _>((start, end))
    }

    /// Every pair, in key order.
    pub fn iter(&self) -> DbIterator {
        self.range::<&[u8], _>(..)
    }

    /// Writes the memtable to L1 and waits until it is there.
    pub fn flush(&self) -> Result<()> {
        self.check_writable()?;
        self.engine.check_poison()?;
        let target = self.engine.writes.seal_memtable(&*self.engine)?;
        self.engine.wake_all();
        let e = &self.engine;
        e.wait_background(|| {
            let (sv, _) = e.snapshot();
            sv.imms.iter().all(|m| m.max_lsn() > target)
        })
    }

    /// Waits until no flush or compaction is pending.
    pub fn compact(&self) -> Result<()> {
        self.check_writable()?;
        self.engine.wake_all();
        let e = &self.engine;
        e.wait_background(|| !e.has_pending_work())
    }

    /// Runs garbage collection now, until every large-log segment whose garbage ratio
    /// reached `Options::gc_threshold` is collected. (A background thread also runs passes
    /// every `Options::gc_interval`.)
    pub fn gc(&self) -> Result<GcReport> {
        self.check_writable()?;
        self.engine.check_poison()?;
        // A pass takes a bounded number of segments; keep going until one finds none.
        let mut total = GcReport::default();
        loop {
            let r = self.engine.gc_pass(self.engine.opts.gc_threshold)?;
            // A damaged victim is met again by every pass: report it once.
            for m in r.damage {
                if !total.damage.contains(&m) {
                    total.damage.push(m);
                }
            }
            total.segments_damaged = total.damage.len() as u64;
            if r.segments_freed == 0 {
                return Ok(total);
            }
            total.segments_freed += r.segments_freed;
            total.bytes_freed += r.bytes_freed;
            total.entries_checked += r.entries_checked;
            total.entries_relocated += r.entries_relocated;
            total.bytes_relocated += r.bytes_relocated;
        }
    }

    /// Flushes, then merges every level down into one run at the bottom of the tree, so
    /// that every overwritten version and every tombstone is dropped now (not when the
    /// levels happen to fill up). Afterwards `gc` can reclaim the large-log space they held.
    /// Rewrites the whole database: meant for after bulk deletes or before measuring space.
    pub fn compact_all(&self) -> Result<()> {
        self.check_writable()?;
        self.flush()?;
        self.compact()?;
        self.engine.compact_all()
    }

    /// A snapshot of the engine's statistics.
    pub fn stats(&self) -> Result<Stats> {
        self.engine.check_open()?;
        let e = &self.engine;
        let mut s = Stats::default();
        s.fill_counters(&e.counters);
        let (sv, _) = e.snapshot();
        s.memtable_bytes = std::iter::once(&sv.mem)
            .chain(sv.imms.iter())
            .map(|m| m.size() as u64)
            .sum();
        s.immutable_memtables = sv.imms.len();
        s.range_tombstones = crate::read::range_tombstones(&sv, u64::MAX).len() as u64;
        s.cache_bytes = e.cache.used_bytes();
        (s.cache_hits, s.cache_misses) = e.cache.hits_and_misses();
        s.pinned_index_bytes = e.cache.pins().used();
        s.levels = sv
            .version
            .levels
            .iter()
            .enumerate()
            .map(|(i, runs)| LevelStats {
                level: i + 1,
                files: runs.len(),
                file_bytes: runs.iter().map(|f| f.file_len()).sum(),
                target_bytes: e.opts.level_target_bytes(i + 1),
                entries: runs.iter().map(|f| f.entries()).sum(),
                tombstones: runs.iter().map(|f| f.tombstones()).sum(),
                kv_bytes: runs.iter().map(|f| f.kv_bytes()).sum(),
                filter_bytes: runs.iter().map(|f| f.filter_bytes()).sum(),
                pinned_bytes: runs.iter().map(|f| f.pinned_bytes()).sum(),
            })
            .collect();
        s.wal_file_bytes = crate::log::small::list(&e.io, &e.dir, 0)?
            .iter()
            .map(|(_, p)| e.io.fs().file_len(p).unwrap_or(0))
            .sum();
        {
            let vs = e.versions.lock();
            for (&id, m) in vs.segments() {
                if m.kind == SegmentKind::Large {
                    s.large_log_segments += 1;
                    s.large_log_garbage_bytes += m.garbage;
                    let path = e.dir.join(SegmentKind::Large.file_name(id));
                    s.large_log_file_bytes += e.io.fs().file_len(&path).unwrap_or(0);
                } else {
                    s.transient_segments += 1;
                    let path = e.dir.join(SegmentKind::Transient.file_name(id));
                    s.transient_log_file_bytes += e.io.fs().file_len(&path).unwrap_or(0);
                }
            }
        }
        s.io = e.io.stats().snapshot();
        Ok(s)
    }

    /// Makes a consistent copy of the database in `dir` (a new directory; its parents are
    /// created), usable as a backup and opened like any database. It holds every write
    /// acknowledged before this call and none that started after it returned; writes
    /// may go on meanwhile. Immutable files (level runs, sealed log segments) are hard
    /// links, so `dir` must be on the same file system and costs little space until the
    /// source moves on; the small log and the log segment being appended to are copied.
    /// Durable when this returns; a checkpoint cut short (a crash, an error) has no
    /// `MANIFEST` and does not open as a database.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<crate::CheckpointReport> {
        self.check_writable()?;
        self.engine.check_poison()?;
        crate::checkpoint::checkpoint(&self.engine, dir.as_ref())
    }

    /// The options the database in `path` was last opened with for writing (stored in its
    /// `OPTIONS` file at every open whose options changed), with `create_if_missing`
    /// false; `None` if the directory has no options file (a database made before this
    /// file existed, or no database). Reads only: takes no lock, changes nothing.
    pub fn stored_options(path: impl AsRef<Path>) -> Result<Option<Options>> {
        let io = Io::new(Arc::new(RealFs), false);
        Ok(
            crate::options_file::load(&io, path.as_ref())?.map(|o| Options {
                create_if_missing: false,
                ..o
            }),
        )
    }

    /// Stops background work and releases the directory. Every entry point of the other
    /// clones of this handle fails with `Error::Closed` afterwards (an iterator created
    /// before may still read), and nothing of this instance changes the directory again.
    pub fn close(self) -> Result<()> {
        self.lifecycle.shutdown();
        Ok(())
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.engine.dir
    }
}

/// The manifest's bytes, if it can be read (a read-only open compares them before and
/// after it reads the rest).
fn manifest_bytes(fs: &dyn FileSystem, dir: &Path) -> Option<Vec<u8>> {
    let file = fs.open(&dir.join(crate::filename::MANIFEST), false).ok()?;
    let mut buf = vec![0u8; usize::try_from(file.len()).ok()?];
    file.read_exact_at(0, &mut buf).ok()?;
    Some(buf)
}
