//! The write path: batches, group commit into the logs, and the memtable.
//!
//! Owns: assigning LSNs, classifying each put (small / medium / large), appending large
//! values to the large log and every batch's commit record to the small log before
//! acknowledging, inserting into the memtable, publishing the snapshot LSN, switching a
//! full memtable to immutable, and slowing writers (never failing them) while flushes
//! catch up. Never: reads levels or writes level files.
//!
//! A batch commits atomically through its one small-log record. A large value is written
//! once, to the large log; the small-log record carries only its key and pointer
//! (`OP_PUT_LARGE`), so a crash between the two writes leaves an unreferenced large-log
//! record (garbage) and never half a batch.

pub(crate) mod batch;
pub(crate) mod commit;

use crate::engine::{Engine, LogState};
use crate::error::{Error, Result};
use crate::log::ptr::LogPtr;
use crate::log::small::SmallLogWriter;
use crate::memtable::{MemValue, Memtable};
use crate::placement::Category;
use crate::stats::Counters;
use batch::{decode_ops, encode_op, encode_put_large, BatchOp, WriteBatch};
use commit::Request;
use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// One operation ready for the memtable.
pub(crate) struct Staged<'a> {
    pub key: &'a [u8],
    pub lsn: u64,
    pub value: MemValue,
}

impl Engine {
    /// Commits `batch` (atomically) and returns once it is in the log and visible.
    pub(crate) fn write_batch(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        batch.validate()?;
        if batch.is_empty() {
            return Ok(());
        }
        self.check_poison()?;
        let req = Request::new(batch, sync);
        self.commit.submit(req, |group| self.commit_group(group))
    }

    /// Appends a large value to the large log, starting a new segment when the current one
    /// is full (the full one is synced first, keeping later segments from outliving it).
    pub(crate) fn append_large(
        &self,
        log: &mut LogState,
        key: &[u8],
        value: &[u8],
        lsn: u64,
    ) -> Result<LogPtr> {
        let full = log
            .large
            .as_ref()
            .is_none_or(|w| w.len() >= self.opts.large_segment_size as u64);
        if full {
            if let Some(old) = log.large.as_mut() {
                old.commit(true)?;
            }
            log.large = Some(self.new_large_segment()?);
        }
        match log.large.as_mut() {
            Some(w) => w.append(key, value, lsn),
            None => Err(Error::Closed),
        }
    }

    fn commit_group(&self, group: &[Arc<Request>]) -> Result<()> {
        self.check_poison()?;
        if self.is_shutdown() {
            return Err(Error::Closed);
        }
        let mut log = self.log.lock();
        self.make_room(&mut log)?;
        let first = log.next_lsn;
        let mut lsn = first;
        let mut sync = false;
        let mut large_written = false;
        let mut staged: Vec<Staged<'_>> = Vec::new();
        let mut records: Vec<(u64, u32, Cow<'_, [u8]>)> = Vec::with_capacity(group.len());
        let (mut puts, mut deletes, mut bytes) = (0u64, 0u64, 0u64);
        let mut large_bytes = 0u64;
        for r in group {
            sync |= r.sync;
            let Some(ops) = decode_ops(r.batch.payload(), r.batch.count()) else {
                return Err(Error::InvalidArgument("malformed write batch".into()));
            };
            let has_large = ops.iter().any(|op| {
                matches!(op, BatchOp::Put(k, v) if self.opts.classify(k.len(), v.len()) == Category::Large)
            });
            let batch_first = lsn;
            let mut payload: Option<Vec<u8>> =
                has_large.then(|| Vec::with_capacity(64 * ops.len()));
            for op in ops {
                let value = match op {
                    BatchOp::Put(k, v) => {
                        puts += 1;
                        bytes += (k.len() + v.len()) as u64;
                        if self.opts.classify(k.len(), v.len()) == Category::Large {
                            let ptr = match self.append_large(&mut log, k, v, lsn) {
                                Ok(p) => p,
                                Err(e) => {
                                    self.set_poison(&e);
                                    return Err(e);
                                }
                            };
                            large_written = true;
                            large_bytes += u64::from(ptr.len);
                            if let Some(p) = payload.as_mut() {
                                encode_put_large(p, k, ptr);
                            }
                            MemValue::Large(ptr)
                        } else {
                            if let Some(p) = payload.as_mut() {
                                encode_op(p, op);
                            }
                            MemValue::Value(v.into())
                        }
                    }
                    BatchOp::Delete(k) => {
                        deletes += 1;
                        bytes += k.len() as u64;
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, op);
                        }
                        MemValue::Tombstone
                    }
                    BatchOp::PutLarge(..) => {
                        return Err(Error::InvalidArgument("internal op in a user batch".into()));
                    }
                };
                let key = match op {
                    BatchOp::Put(k, _) | BatchOp::Delete(k) | BatchOp::PutLarge(k, _) => k,
                };
                staged.push(Staged { key, lsn, value });
                lsn += 1;
            }
            let body = match payload {
                Some(p) => Cow::Owned(p),
                None => Cow::Borrowed(r.batch.payload()),
            };
            records.push((batch_first, r.batch.count(), body));
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
            for (first_lsn, count, body) in &records {
                log.writer.add(*first_lsn, *count, body);
            }
            result = log.commit_small(sync, self.small_log_min.load(Ordering::SeqCst));
        }
        if let Err(e) = result {
            // The logs may hold part of the group: nothing after it can be trusted.
            self.set_poison(&e);
            return Err(e);
        }
        log.next_lsn = lsn;
        self.apply(&log.mem, staged, lsn - 1);
        drop(log);
        let c = &self.counters;
        Counters::add(&c.puts, puts);
        Counters::add(&c.deletes, deletes);
        Counters::add(&c.user_bytes_written, bytes);
        Counters::add(&c.large_bytes_written, large_bytes);
        Counters::add(&c.commit_groups, 1);
        if sync {
            Counters::add(&c.synced_commits, 1);
        }
        Ok(())
    }

    /// Inserts committed operations and makes them visible up to `last_lsn`.
    /// # Preconditions
    /// The caller holds the `log` mutex and the operations are durable in the logs.
    pub(crate) fn apply(&self, mem: &Memtable, staged: Vec<Staged<'_>>, last_lsn: u64) {
        for s in staged {
            mem.insert(s.key, s.lsn, s.value);
        }
        self.versions.publish_visible(last_lsn);
    }

    /// Switches a full memtable to immutable, first waiting while too many wait for flush.
    pub(crate) fn make_room(&self, log: &mut LogState) -> Result<()> {
        if log.mem.size() < self.opts.memtable_size {
            return Ok(());
        }
        let mut stalled = false;
        loop {
            let waiting = self.versions.imms_waiting();
            if waiting < self.opts.max_immutable_memtables {
                break;
            }
            self.check_poison()?;
            if !stalled {
                stalled = true;
                Counters::add(&self.counters.write_stalls, 1);
            }
            let mut g = self.bg.lock();
            if g.shutdown {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            self.bg_cv.wait_for(&mut g, Duration::from_millis(50));
        }
        self.rotate(log)
    }

    /// Seals the active memtable and starts a new small-log file for its successor.
    pub(crate) fn rotate(&self, log: &mut LogState) -> Result<()> {
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
        let id = self.alloc_file_id();
        let next = log
            .large
            .as_mut()
            .map_or(Ok(()), |w| w.commit(true))
            .and_then(|()| SmallLogWriter::create(&self.io, &self.dir, id));
        let writer = match next {
            Ok(w) => w,
            Err(e) => {
                self.set_poison(&e);
                return Err(e);
            }
        };
        let sealed_log = std::mem::replace(&mut log.writer, writer);
        log.unsynced.push(sealed_log);
        log.mem.next_log_id.store(id, Ordering::SeqCst);
        let sealed = std::mem::replace(&mut log.mem, Arc::new(Memtable::new()));
        self.versions.publish_switch(sealed, Arc::clone(&log.mem));
        self.wake_all();
        Ok(())
    }
}
