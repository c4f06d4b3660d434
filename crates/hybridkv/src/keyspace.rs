//! The public handle of one keyspace: `Keyspace` (the default keyspace's is what `Db`
//! dereferences to).
//!
//! Owns: the data API of a keyspace (writes, reads, snapshots, iterators, flush,
//! compaction, GC, statistics, space and check), with its argument checks. Never: holds
//! logic of its own beyond argument checks; opens, creates or drops keyspaces (`Db` does);
//! every operation is the keyspace's engine's.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::gc::GcReport;
use crate::lifecycle::Shared;
use crate::log::large::SegmentKind;
use crate::options::WriteOptions;
use crate::read::iter::{DbIterator, KeyIterator};
use crate::snapshot::Snapshot;
use crate::space::SpaceReport;
use crate::stats::{Counters, LevelStats, Stats};
use crate::value::Value;
use crate::write::batch::WriteBatch;
use std::ops::RangeBounds;
use std::sync::Arc;

/// One keyspace of an open database: an independent key space with its own levels, value
/// logs, memtables and options (placement thresholds, sizes), sharing the database's small
/// log with the others, so that one [`WriteBatch`] can write several keyspaces atomically
/// (`WriteBatch::put_in`). Flushes, compactions and GC of different keyspaces run in
/// parallel, each keyspace with its own background threads. Cheap to clone; usable from
/// any thread. Made by [`crate::Db::create_keyspace`] and [`crate::Db::keyspace`]; a
/// [`crate::Db`] is its default keyspace (every method here is a method of `Db`).
///
/// Once the keyspace is dropped ([`crate::Db::drop_keyspace`]) or the database closed,
/// every method fails with `Error::Closed`.
#[derive(Clone)]
pub struct Keyspace {
    pub(crate) engine: Arc<Engine>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) name: Arc<str>,
    /// Opened by [`crate::Db::open_read_only`]: every change is refused with
    /// `Error::ReadOnly`.
    pub(crate) read_only: bool,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace")
            .field("name", &self.name)
            .field("dir", &self.engine.dir)
            .finish()
    }
}

impl Keyspace {
    /// The keyspace's name (`"default"` for the database's own).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The keyspace's id in this database (what a batch's operations name).
    pub(crate) fn id(&self) -> u32 {
        self.engine.keyspace
    }

    /// Which open database this keyspace belongs to (a batch naming keyspaces is written
    /// to that database only).
    pub(crate) fn db_token(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    /// `Error::ReadOnly` for a handle from [`crate::Db::open_read_only`], `Error::Closed` once
    /// closed (or, for a keyspace, dropped).
    pub(crate) fn check_writable(&self) -> Result<()> {
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
    /// one write whatever the number of keys (see [`Keyspace::delete_range`]).
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

    /// Applies `batch` atomically with explicit write options. Its operations that name
    /// no keyspace go to this one; those added with `put_in` and the like go to theirs,
    /// in the same atomic commit. An empty batch writes nothing; with `sync` it still
    /// returns only once every write acknowledged before it is durable (a way to make
    /// unsynced writes durable without writing).
    pub fn write_opt(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.check_writable()?;
        if batch.db_token().is_some_and(|db| db != self.db_token()) {
            return Err(Error::InvalidArgument(
                "write batch names keyspaces of another database".into(),
            ));
        }
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

    /// [`Keyspace::get`] as a [`Value`]: a reference-counted view of the bytes the engine read,
    /// so a value from the large or the transient log comes without a copy (see
    /// [`Value`]).
    pub fn get_value(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let key = key.as_ref();
        let (sv, lsn) = self.engine.snapshot();
        let folds_back = self.engine.opts.fold_on_read && self.check_writable().is_ok();
        let (value, folded) =
            crate::snapshot::get_noting_folds(&self.engine, &sv, lsn, key, folds_back)?;
        if folded && folds_back {
            if let Some(v) = &value {
                drop(sv); // the write-back captures the state anew
                if self.engine.fold_back(key, v, lsn) {
                    Counters::add(&self.engine.counters.reads_folded_back, 1);
                }
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
        s.memtable_arena_bytes = std::iter::once(&sv.mem)
            .chain(sv.imms.iter())
            .map(|m| m.arena_bytes() as u64)
            .sum();
        s.immutable_memtables = sv.imms.len();
        s.memtable_filter_bytes = std::iter::once(&sv.mem)
            .chain(sv.imms.iter())
            .map(|m| m.filter_bytes() as u64)
            .sum();
        s.memtable_spot_bytes = std::iter::once(&sv.mem)
            .chain(sv.imms.iter())
            .map(|m| m.spot_bytes() as u64)
            .sum();
        s.range_tombstones = crate::read::range_tombstones(&sv, u64::MAX).len() as u64;
        s.cache_bytes = e.cache.used_bytes();
        (s.cache_hits, s.cache_misses) = e.cache.hits_and_misses();
        (s.warm_reads, s.warm_neighbours) = e.cache.warm_reads_and_neighbours();
        (s.large_pointer_reads, s.large_pointer_misses) = e.cache.large_guesses();
        (s.cache_reloaded, s.cache_reload_bytes) = e.cache.reloaded();
        s.cache_hints_rejected = e.cache.hints_rejected();
        s.pinned_index_bytes = e.cache.pins().used();
        s.large_pointer_table_bytes = e.cache.table_pins().used();
        s.delta_buckets = sv.version.buckets.slots.len();
        s.delta_bucket_bytes = sv.version.buckets.bytes();
        s.delta_bucket_index_entries = e.buckets.indexed() as u64;
        let targets = e.level_targets(&e.versions.lock());
        s.levels = sv
            .version
            .levels
            .iter()
            .enumerate()
            .map(|(i, runs)| LevelStats {
                level: i + 1,
                files: runs.len(),
                file_bytes: runs.iter().map(|f| f.file_len()).sum(),
                target_bytes: targets.get(i).copied().unwrap_or(u64::MAX),
                entries: runs.iter().map(|f| f.entries()).sum(),
                tombstones: runs.iter().map(|f| f.tombstones()).sum(),
                kv_bytes: runs.iter().map(|f| f.kv_bytes()).sum(),
                filter_bytes: runs.iter().map(|f| f.filter_bytes()).sum(),
                pinned_bytes: runs.iter().map(|f| f.pinned_bytes()).sum(),
                large_pointer_bytes: runs.iter().map(|f| f.large_pointer_bytes()).sum(),
                wasted_searches: runs
                    .iter()
                    .map(|f| f.wasted_searches())
                    .fold(0, u64::saturating_add),
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
}
