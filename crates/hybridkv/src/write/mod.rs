//! The write path: batches, group commit into the logs, and the memtable.
//!
//! Owns: the small log, the active memtable and the large-log segment being appended to
//! ([`LogState`], under the `log` mutex), assigning LSNs, classifying each put (small /
//! medium / large), appending large values to the large log and every batch's commit
//! record to the small log before acknowledging, inserting into the memtable, publishing
//! the snapshot LSN, switching a full memtable to immutable, slowing writers (never
//! failing them) while flushes catch up, and making every committed write durable on
//! request ([`WritePath::make_durable`]). There is
//! one commit function, [`WritePath::commit`]: user batches and GC's relocations both go
//! through it, and recovery's replay uses the same memtable step ([`replay_ops`]).
//! Never: reads levels or writes level files; knows the engine only through [`WriteEnv`].
//!
//! A batch commits atomically through its one small-log record. A large value is written
//! once, to the large log; the small-log record carries only its key and pointer
//! (`OP_PUT_LARGE`), so a crash between the two writes leaves an unreferenced large-log
//! record (garbage) and never half a batch.

pub(crate) mod batch;
pub(crate) mod commit;

use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::io::Io;
use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};
use crate::log::ptr::LogPtr;
use crate::log::small::SmallLogWriter;
use crate::memtable::{MemValue, Memtable};
use crate::options::Options;
use crate::placement::Category;
use crate::range_delete::RangeTombstone;
use crate::stats::Counters;
use crate::version_set::VersionSet;
use batch::{decode_ops, encode_op, encode_put_large, BatchOp, WriteBatch};
use commit::{CommitQueue, Request};
use parking_lot::{Mutex, MutexGuard};
use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the write path needs from the rest of the engine (implemented by `Engine`).
pub(crate) trait WriteEnv {
    fn opts(&self) -> &Options;
    fn io(&self) -> &Io;
    fn dir(&self) -> &Path;
    fn versions(&self) -> &VersionSet;
    fn counters(&self) -> &Counters;
    /// The block cache new log segments keep the records gets and scans read in.
    fn cache(&self) -> &Arc<BlockCache>;
    /// `Error::Poisoned` once a write or background job failed.
    fn check_poison(&self) -> Result<()>;
    /// Refuses every later write.
    fn set_poison(&self, why: &Error);
    /// Whether the database is shutting down.
    fn is_shutdown(&self) -> bool;
    /// Wakes the background threads (a memtable waits for its flush) and waits a little
    /// for one of them to finish something; `Error::Closed` once shutting down.
    fn wait_for_background(&self) -> Result<()>;
    /// Wakes the background threads.
    fn wake_background(&self);
}

/// Held by the commit leader: the small log and the active memtable.
pub(crate) struct LogState {
    pub writer: SmallLogWriter,
    /// Older small-log files whose memtables are not flushed yet and whose tails may not
    /// be durable: a memtable switch does not sync the log it leaves (a log deleted after
    /// its flush then often never reaches the device). A synced commit syncs these first,
    /// oldest first, so no synced record ever follows one a power loss can take.
    pub unsynced: Vec<SmallLogWriter>,
    /// The large-log segment being appended to (opened on the first large write).
    pub large: Option<SegmentWriter>,
    pub mem: Arc<Memtable>,
    pub next_lsn: u64,
}

impl LogState {
    /// Hands the pending small-log group to the OS; with `sync`, first makes every older
    /// unsynced log durable, then this one. Logs below `min_needed` (their memtables are
    /// flushed, their files deleted) are forgotten without a sync.
    fn commit_small(&mut self, sync: bool, min_needed: u64) -> Result<()> {
        self.unsynced.retain(|w| w.id() >= min_needed);
        if sync {
            for older in &mut self.unsynced {
                older.sync()?;
            }
            self.unsynced.clear();
        }
        self.writer.commit(sync)
    }
}

/// What a committed operation puts into the memtable.
enum Staged<'a> {
    /// A version of its key.
    Version(MemValue<'a>),
    /// A range tombstone from its key (the start) to this end.
    Range(Option<&'a [u8]>),
}

/// One small-log record to commit: operations that become visible together.
pub(crate) struct CommitRecord<'a> {
    /// Puts and deletes (`BatchOp::PutLarge` is refused: pointers are made here).
    pub ops: Vec<BatchOp<'a>>,
    /// The caller's encoded payload of `ops`, reused when no value goes to the large log.
    pub payload: Option<&'a [u8]>,
    /// Every put goes to the large log whatever its size (GC's relocations).
    pub relocation: bool,
}

/// What a commit wrote.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Committed {
    pub puts: u64,
    pub deletes: u64,
    pub merges: u64,
    pub range_deletes: u64,
    /// Key + value bytes of the operations.
    pub bytes: u64,
    /// Values appended to the large log, and their record bytes.
    pub large_values: u64,
    pub large_bytes: u64,
}

/// The write path's state: the `log` mutex, the group-commit queue, and the oldest
/// small-log file still needed.
pub(crate) struct WritePath {
    log: Mutex<LogState>,
    queue: CommitQueue,
    /// The smallest small-log id still needed (the replay start after the last flush),
    /// published without a lock: a flush must never wait for `log`, which a stalled
    /// writer holds while it waits for that flush.
    small_log_min: AtomicU64,
}

impl WritePath {
    pub(crate) fn new(state: LogState, small_log_min: u64) -> WritePath {
        WritePath {
            log: Mutex::new(state),
            queue: CommitQueue::default(),
            small_log_min: AtomicU64::new(small_log_min),
        }
    }

    /// Takes the `log` mutex (first in the lock order): no commit runs while it is held.
    pub(crate) fn lock(&self) -> MutexGuard<'_, LogState> {
        self.log.lock()
    }

    /// The `log` mutex if no one holds it.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, LogState>> {
        self.log.try_lock()
    }

    /// Seals the active memtable (unless empty) so a flush can take it; returns the last
    /// LSN committed before it.
    pub(crate) fn seal_memtable(&self, env: &dyn WriteEnv) -> Result<u64> {
        let mut log = self.log.lock();
        self.rotate(env, &mut log)?;
        Ok(log.next_lsn.saturating_sub(1))
    }

    /// The id of the small-log file being appended to.
    pub(crate) fn current_log_id(&self) -> u64 {
        self.log.lock().writer.id()
    }

    /// Small-log files below `min` hold only flushed writes: commits stop syncing them.
    pub(crate) fn set_small_log_min(&self, min: u64) {
        self.small_log_min.store(min, Ordering::SeqCst);
    }

    /// Commits `batch` (atomically) and returns once it is in the log and visible.
    pub(crate) fn write_batch(
        &self,
        env: &dyn WriteEnv,
        batch: WriteBatch,
        sync: bool,
    ) -> Result<()> {
        batch.validate()?;
        if batch.is_empty() {
            return Ok(());
        }
        if batch.has_merges() {
            // Refused here, alone: a bad operand must not fail the rest of a commit group.
            let op = crate::delta::require(env.opts().merge_operator.as_ref())?;
            let ops = decode_ops(batch.payload(), batch.count())
                .ok_or_else(|| Error::InvalidArgument("malformed write batch".into()))?;
            for o in ops {
                if let BatchOp::Merge(k, d) = o {
                    crate::delta::check_operand(op, k, d)?;
                }
            }
        }
        env.check_poison()?;
        let req = Request::new(batch, sync);
        self.queue
            .submit(req, |group| self.commit_group(env, group))
    }

    /// The group-commit leader's step: every queued batch, one record each.
    fn commit_group(&self, env: &dyn WriteEnv, group: &[Arc<Request>]) -> Result<()> {
        env.check_poison()?;
        if env.is_shutdown() {
            return Err(Error::Closed);
        }
        let mut records = Vec::with_capacity(group.len());
        let mut sync = false;
        for r in group {
            sync |= r.sync;
            let Some(ops) = decode_ops(r.batch.payload(), r.batch.count()) else {
                return Err(Error::InvalidArgument("malformed write batch".into()));
            };
            records.push(CommitRecord {
                ops,
                payload: Some(r.batch.payload()),
                relocation: false,
            });
        }
        let mut log = self.log.lock();
        self.make_room(env, &mut log)?;
        let done = self.commit(env, &mut log, &records, sync)?;
        drop(log);
        let c = env.counters();
        Counters::add(&c.puts, done.puts);
        Counters::add(&c.deletes, done.deletes);
        Counters::add(&c.merges, done.merges);
        Counters::add(&c.range_deletes, done.range_deletes);
        Counters::add(&c.user_bytes_written, done.bytes);
        Counters::add(&c.large_bytes_written, done.large_bytes);
        Counters::add(&c.commit_groups, 1);
        if sync {
            Counters::add(&c.synced_commits, 1);
        }
        Ok(())
    }

    /// The one commit function. Assigns consecutive LSNs, appends large values to the
    /// large log, then one small-log record per `records` entry (the commit point; with
    /// `sync`, every older unsynced log and the large log are made durable first), then
    /// inserts into the memtable and publishes the new visible LSN. A failed log write or
    /// sync poisons: the logs may hold part of the group. The caller holds `log`.
    pub(crate) fn commit(
        &self,
        env: &dyn WriteEnv,
        log: &mut LogState,
        records: &[CommitRecord<'_>],
        sync: bool,
    ) -> Result<Committed> {
        let opts = env.opts();
        let goes_large = |relocation: bool, op: &BatchOp<'_>| match op {
            BatchOp::Put(k, v) => relocation || opts.classify(k.len(), v.len()) == Category::Large,
            _ => false,
        };
        // Everything that can refuse the records is checked before anything is appended:
        // an error after a large value reached the log would leave half a group behind.
        for rec in records {
            if u32::try_from(rec.ops.len()).is_err() {
                return Err(Error::InvalidArgument(
                    "too many operations in a batch".into(),
                ));
            }
            if rec.ops.iter().any(|op| matches!(op, BatchOp::PutLarge(..))) {
                return Err(Error::Internal(
                    "a log pointer handed to the commit path (pointers are made there)".into(),
                ));
            }
        }
        let mut lsn = log.next_lsn;
        let mut done = Committed::default();
        let mut large_written = false;
        let mut staged: Vec<(&[u8], u64, Staged<'_>)> = Vec::new();
        let mut encoded: Vec<(u64, u32, Cow<'_, [u8]>)> = Vec::with_capacity(records.len());
        for rec in records {
            let first = lsn;
            let reencode =
                rec.payload.is_none() || rec.ops.iter().any(|op| goes_large(rec.relocation, op));
            let mut payload: Option<Vec<u8>> =
                reencode.then(|| Vec::with_capacity(64 * rec.ops.len()));
            for op in &rec.ops {
                let (key, value) = match *op {
                    BatchOp::Put(k, v) if goes_large(rec.relocation, op) => {
                        let ptr = match self.append_large(env, log, k, v, lsn) {
                            Ok(p) => p,
                            Err(e) => {
                                env.set_poison(&e);
                                return Err(e);
                            }
                        };
                        large_written = true;
                        done.large_values += 1;
                        done.large_bytes += u64::from(ptr.len);
                        if let Some(p) = payload.as_mut() {
                            encode_put_large(p, k, ptr);
                        }
                        (k, Staged::Version(MemValue::Large(ptr)))
                    }
                    BatchOp::Put(k, v) => {
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, *op);
                        }
                        (k, Staged::Version(MemValue::Value(v)))
                    }
                    BatchOp::Delete(k) => {
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, *op);
                        }
                        (k, Staged::Version(MemValue::Tombstone))
                    }
                    BatchOp::Merge(k, d) => {
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, *op);
                        }
                        (k, Staged::Version(MemValue::Delta(d)))
                    }
                    BatchOp::DeleteRange(start, end) => {
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, *op);
                        }
                        (start, Staged::Range(end))
                    }
                    // Refused above, before any append.
                    BatchOp::PutLarge(..) => continue,
                };
                match op {
                    BatchOp::Delete(k) => {
                        done.deletes += 1;
                        done.bytes += k.len() as u64;
                    }
                    BatchOp::Put(k, v) => {
                        done.puts += 1;
                        done.bytes += (k.len() + v.len()) as u64;
                    }
                    BatchOp::Merge(k, d) => {
                        done.merges += 1;
                        done.bytes += (k.len() + d.len()) as u64;
                    }
                    BatchOp::DeleteRange(start, end) => {
                        done.range_deletes += 1;
                        done.bytes += (start.len() + end.map_or(0, <[u8]>::len)) as u64;
                    }
                    BatchOp::PutLarge(..) => {}
                }
                staged.push((key, lsn, value));
                lsn += 1;
            }
            // Checked above.
            let count = u32::try_from(rec.ops.len()).unwrap_or(u32::MAX);
            let body = match (payload, rec.payload) {
                (Some(p), _) => Cow::Owned(p),
                (None, Some(p)) => Cow::Borrowed(p),
                (None, None) => Cow::Borrowed(&[][..]),
            };
            encoded.push((first, count, body));
        }
        if staged.is_empty() {
            return Ok(done);
        }
        // The large log first: the small-log record is the commit point. A synced group
        // also syncs the large values of earlier unsynced groups: its fdatasync of the
        // small log makes their records durable, so their values must be too.
        let mut result = Ok(());
        let large_unsynced = sync && log.large.as_ref().is_some_and(|w| w.has_unsynced());
        if large_written || large_unsynced {
            if let Some(w) = log.large.as_mut() {
                result = w.commit(sync);
            }
        }
        if result.is_ok() {
            for (first_lsn, count, body) in &encoded {
                log.writer.add(*first_lsn, *count, body);
            }
            result = log.commit_small(sync, self.small_log_min.load(Ordering::SeqCst));
        }
        if let Err(e) = result {
            env.set_poison(&e);
            return Err(e);
        }
        log.next_lsn = lsn;
        let op = opts.merge_operator.as_deref();
        for (key, lsn, value) in staged {
            match value {
                Staged::Version(MemValue::Delta(d)) => log.mem.insert_delta(key, lsn, d, op),
                Staged::Version(v) => log.mem.insert(key, lsn, v),
                Staged::Range(end) => log.mem.insert_range_tombstone(RangeTombstone {
                    start: key.to_vec(),
                    end: end.map(<[u8]>::to_vec),
                    lsn,
                }),
            }
        }
        env.versions().publish_visible(lsn - 1);
        Ok(done)
    }

    /// Appends a large value to the large log, starting a new segment when the current one
    /// is full (the full one is synced first, keeping later segments from outliving it).
    fn append_large(
        &self,
        env: &dyn WriteEnv,
        log: &mut LogState,
        key: &[u8],
        value: &[u8],
        lsn: u64,
    ) -> Result<LogPtr> {
        let full = log
            .large
            .as_ref()
            .is_none_or(|w| w.len() >= env.opts().large_segment_size as u64);
        if full {
            if let Some(old) = log.large.as_mut() {
                old.commit(true)?;
            }
            log.large = Some(new_large_segment(env)?);
        }
        match log.large.as_mut() {
            Some(w) => w.append(key, value, lsn),
            None => Err(Error::Closed),
        }
    }

    /// Makes every write committed so far durable: the large log's unsynced tail, then
    /// every small-log file (older ones first). GC calls it before an install that frees
    /// something on the strength of those writes (a record is dead because a newer write
    /// shadows it; if that write could still be lost, so must the record not be).
    pub(crate) fn make_durable(&self, env: &dyn WriteEnv) -> Result<()> {
        let mut log = self.log.lock();
        let min = self.small_log_min.load(Ordering::SeqCst);
        let large_unsynced = log.large.as_ref().is_some_and(|w| w.has_unsynced());
        let small_unsynced = log.writer.has_unsynced() || !log.unsynced.is_empty();
        let result = if large_unsynced {
            log.large.as_mut().map_or(Ok(()), |w| w.commit(true))
        } else {
            Ok(())
        }
        .and_then(|()| {
            if small_unsynced {
                log.commit_small(true, min)
            } else {
                Ok(())
            }
        });
        drop(log);
        if let Err(e) = &result {
            env.set_poison(e);
        }
        result
    }

    /// Switches a full memtable to immutable, first waiting while too many wait for flush.
    pub(crate) fn make_room(&self, env: &dyn WriteEnv, log: &mut LogState) -> Result<()> {
        if log.mem.size() < env.opts().memtable_size {
            return Ok(());
        }
        let mut stalled = false;
        while env.versions().imms_waiting() >= env.opts().max_immutable_memtables {
            env.check_poison()?;
            if !stalled {
                stalled = true;
                Counters::add(&env.counters().write_stalls, 1);
                log::debug!(
                    "{}: writes wait for a flush ({} memtables waiting)",
                    env.dir().display(),
                    env.versions().imms_waiting()
                );
            }
            env.wait_for_background()?;
        }
        self.rotate(env, log)
    }

    /// Seals the active memtable and starts a new small-log file for its successor.
    pub(crate) fn rotate(&self, env: &dyn WriteEnv, log: &mut LogState) -> Result<()> {
        if log.mem.is_empty() {
            return Ok(());
        }
        // The large log is made durable (it is the only copy of its values, so its bytes
        // reach the device anyway): every large record a sealed log points to survives a
        // power loss. The small log is not synced here: it is deleted once its memtable is
        // flushed, often before the OS writes it back, so it then costs no device writes
        // (as RocksDB's write-ahead log). It stays in `unsynced` until then, so that a
        // synced commit makes it durable first, and recovery treats a torn tail in any
        // log as the end of the durable prefix (FORMAT.md, "Small log").
        let id = env.versions().alloc_file_id();
        let next = log
            .large
            .as_mut()
            .map_or(Ok(()), |w| w.commit(true))
            .and_then(|()| SmallLogWriter::create(env.io(), env.dir(), id));
        let writer = match next {
            Ok(w) => w,
            Err(e) => {
                env.set_poison(&e);
                return Err(e);
            }
        };
        let sealed_log = std::mem::replace(&mut log.writer, writer);
        log.unsynced.push(sealed_log);
        log.mem.next_log_id.store(id, Ordering::SeqCst);
        let sealed = std::mem::replace(&mut log.mem, Arc::new(Memtable::new()));
        env.versions().publish_switch(sealed, Arc::clone(&log.mem));
        env.wake_background();
        Ok(())
    }
}

/// Starts a new large-log segment: registered (so every manifest from now on names it),
/// created, then made readable.
fn new_large_segment(env: &dyn WriteEnv) -> Result<SegmentWriter> {
    let versions = env.versions();
    let id = versions.register_segment(SegmentKind::Large, 0);
    let writer = SegmentWriter::create(env.io(), env.dir(), SegmentKind::Large, id)?;
    let reader = Arc::new(
        SegmentFile::open(env.io(), env.dir(), SegmentKind::Large, id)?
            .with_cache(Arc::clone(env.cache())),
    );
    versions.publish_segment(id, reader);
    Ok(writer)
}

/// Recovery's memtable step for a small-log record already in the log: the same
/// insertion a commit does after its log write, with pointers as logged.
pub(crate) fn replay_ops(
    mem: &Memtable,
    first_lsn: u64,
    ops: Vec<BatchOp<'_>>,
    operator: Option<&dyn crate::delta::MergeOperator>,
) -> u64 {
    let mut lsn = first_lsn;
    for op in ops {
        match op {
            BatchOp::Put(k, v) => mem.insert(k, lsn, MemValue::Value(v)),
            BatchOp::Delete(k) => mem.insert(k, lsn, MemValue::Tombstone),
            BatchOp::PutLarge(k, p) => mem.insert(k, lsn, MemValue::Large(p)),
            BatchOp::Merge(k, d) => mem.insert_delta(k, lsn, d, operator),
            BatchOp::DeleteRange(start, end) => mem.insert_range_tombstone(RangeTombstone {
                start: start.to_vec(),
                end: end.map(<[u8]>::to_vec),
                lsn,
            }),
        }
        lsn = lsn.saturating_add(1);
    }
    lsn.saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{FailMode, SimFs};
    use crate::log::small;
    use crate::version_set::Recovered;
    use std::path::PathBuf;

    const DIR: &str = "/db";

    /// The engine as the write path sees it, without the engine.
    struct TestEnv {
        opts: Options,
        io: Io,
        dir: PathBuf,
        versions: VersionSet,
        counters: Counters,
        cache: Arc<BlockCache>,
        poison: Mutex<Option<String>>,
    }

    impl WriteEnv for TestEnv {
        fn opts(&self) -> &Options {
            &self.opts
        }
        fn io(&self) -> &Io {
            &self.io
        }
        fn dir(&self) -> &Path {
            &self.dir
        }
        fn versions(&self) -> &VersionSet {
            &self.versions
        }
        fn cache(&self) -> &Arc<BlockCache> {
            &self.cache
        }
        fn counters(&self) -> &Counters {
            &self.counters
        }
        fn check_poison(&self) -> Result<()> {
            match &*self.poison.lock() {
                Some(why) => Err(Error::Poisoned(why.clone())),
                None => Ok(()),
            }
        }
        fn set_poison(&self, why: &Error) {
            self.poison.lock().get_or_insert_with(|| why.to_string());
        }
        fn is_shutdown(&self) -> bool {
            false
        }
        fn wait_for_background(&self) -> Result<()> {
            Ok(())
        }
        fn wake_background(&self) {}
    }

    fn setup(fs: &SimFs) -> (TestEnv, WritePath) {
        let io = Io::new(Arc::new(fs.clone()), false);
        let dir = PathBuf::from(DIR);
        io.fs().create_dir_all(&dir).unwrap();
        let mem = Arc::new(Memtable::new());
        let versions = VersionSet::new(
            io.clone(),
            dir.clone(),
            Recovered::empty(Arc::clone(&mem), 1),
        );
        let writer = SmallLogWriter::create(&io, &dir, versions.alloc_file_id()).unwrap();
        let env = TestEnv {
            opts: Options::default(),
            io,
            dir,
            versions,
            counters: Counters::default(),
            cache: Arc::new(BlockCache::new(1 << 20)),
            poison: Mutex::new(None),
        };
        let log = LogState {
            writer,
            unsynced: Vec::new(),
            large: None,
            mem,
            next_lsn: 1,
        };
        (env, WritePath::new(log, 0))
    }

    /// One logged record: its first LSN and its ops as (key, kind).
    type Logged = (u64, Vec<(Vec<u8>, &'static str)>);

    /// Every record of the small log, decoded.
    fn logged(env: &TestEnv) -> Vec<Logged> {
        let files = small::list(&env.io, &env.dir, 0).unwrap();
        let mut out = Vec::new();
        for (_, path) in files {
            for rec in small::replay_file(&env.io, &path, true).unwrap().records {
                let ops = decode_ops(&rec.payload, rec.count).unwrap();
                let ops = ops
                    .into_iter()
                    .map(|op| match op {
                        BatchOp::Put(k, _) => (k.to_vec(), "put"),
                        BatchOp::Delete(k) => (k.to_vec(), "delete"),
                        BatchOp::PutLarge(k, _) => (k.to_vec(), "put-large"),
                        BatchOp::Merge(k, _) => (k.to_vec(), "merge"),
                        BatchOp::DeleteRange(k, _) => (k.to_vec(), "delete-range"),
                    })
                    .collect();
                out.push((rec.first_lsn, ops));
            }
        }
        out
    }

    #[test]
    fn one_commit_assigns_lsns_logs_each_record_and_inserts() {
        let fs = SimFs::new();
        let (env, writes) = setup(&fs);
        let big = vec![7u8; 3000];
        let records = [
            CommitRecord {
                ops: vec![BatchOp::Put(b"a", b"small"), BatchOp::Put(b"b", &big)],
                payload: None,
                relocation: false,
            },
            CommitRecord {
                ops: vec![BatchOp::Delete(b"a")],
                payload: None,
                relocation: false,
            },
        ];
        let mut log = writes.lock();
        let done = writes.commit(&env, &mut log, &records, false).unwrap();
        assert_eq!((done.puts, done.deletes, done.large_values), (2, 1, 1));
        assert_eq!(log.next_lsn, 4);
        let mem = Arc::clone(&log.mem);
        drop(log);
        assert_eq!(env.versions.snapshot().1, 3, "visible LSN");
        assert_eq!(
            logged(&env),
            vec![
                (
                    1,
                    vec![(b"a".to_vec(), "put"), (b"b".to_vec(), "put-large")]
                ),
                (3, vec![(b"a".to_vec(), "delete")]),
            ]
        );
        assert_eq!(mem.get(b"a", 3).map(|f| f.0), Some(3));
        assert_eq!(mem.get(b"a", 2).map(|f| f.0), Some(1));
        assert!(matches!(
            mem.get(b"b", 3).map(|f| f.1),
            Some(crate::level::LevelValue::Large(_))
        ));
    }

    #[test]
    fn a_relocation_sends_every_value_to_the_large_log() {
        let fs = SimFs::new();
        let (env, writes) = setup(&fs);
        let record = CommitRecord {
            ops: vec![BatchOp::Put(b"k", b"tiny")],
            payload: None,
            relocation: true,
        };
        let mut log = writes.lock();
        let done = writes.commit(&env, &mut log, &[record], true).unwrap();
        drop(log);
        assert_eq!(done.large_values, 1);
        assert_eq!(logged(&env), vec![(1, vec![(b"k".to_vec(), "put-large")])]);
        // Synced: the record survives a power loss.
        let img = fs.crash_image(crate::io::CrashKind::DropUnsynced);
        let io = Io::new(Arc::new(img), false);
        let (_, path) = small::list(&io, Path::new(DIR), 0).unwrap().pop().unwrap();
        assert_eq!(
            small::replay_file(&io, &path, true).unwrap().records.len(),
            1
        );
    }

    #[test]
    fn a_record_holding_a_log_pointer_is_refused_before_anything_is_appended() {
        let fs = SimFs::new();
        let (env, writes) = setup(&fs);
        let big = vec![1u8; 3000];
        let ptr = crate::log::ptr::LogPtr {
            segment: 1,
            offset: 16,
            len: 40,
        };
        // A large put first: refused as a whole, its value must not reach the large log.
        let record = CommitRecord {
            ops: vec![BatchOp::Put(b"a", &big), BatchOp::PutLarge(b"b", ptr)],
            payload: None,
            relocation: false,
        };
        let mut log = writes.lock();
        let r = writes.commit(&env, &mut log, &[record], false);
        assert!(matches!(r, Err(Error::Internal(_))), "{r:?}");
        assert_eq!(log.next_lsn, 1);
        assert!(log.mem.is_empty());
        assert!(log.large.is_none(), "a large-log segment was started");
        drop(log);
        assert!(logged(&env).is_empty());
        assert!(
            env.check_poison().is_ok(),
            "nothing was written: no need to poison"
        );
    }

    #[test]
    fn a_failed_log_write_poisons_and_applies_nothing() {
        let fs = SimFs::new();
        let (env, writes) = setup(&fs);
        fs.fail_at(fs.op_count(), FailMode::FromThenOn);
        let record = CommitRecord {
            ops: vec![BatchOp::Put(b"k", b"v")],
            payload: None,
            relocation: false,
        };
        let mut log = writes.lock();
        assert!(writes.commit(&env, &mut log, &[record], true).is_err());
        assert_eq!(log.next_lsn, 1, "LSNs handed out");
        assert!(log.mem.is_empty(), "inserted into the memtable");
        drop(log);
        assert_eq!(env.versions.snapshot().1, 0, "made visible");
        assert!(matches!(env.check_poison(), Err(Error::Poisoned(_))));
    }
}
