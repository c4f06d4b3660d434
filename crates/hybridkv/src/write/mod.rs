//! The write path: batches, group commit into the small log, and the memtable.
//!
//! Owns: assigning LSNs, appending to the small log before acknowledging, inserting into
//! the memtable, publishing the snapshot LSN, switching a full memtable to immutable, and
//! slowing writers (never failing them) while flushes catch up. Never: reads levels or
//! writes level files.

pub(crate) mod batch;
pub(crate) mod commit;

use crate::engine::{Engine, LogState};
use crate::error::{Error, Result};
use crate::log::small::SmallLogWriter;
use crate::memtable::Memtable;
use crate::stats::Counters;
use batch::{decode_ops, BatchOp, WriteBatch};
use commit::Request;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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
        for r in group {
            log.writer.add(lsn, r.batch.count(), r.batch.payload());
            lsn += u64::from(r.batch.count());
            sync |= r.sync;
        }
        if let Err(e) = log.writer.commit(sync) {
            // The log may hold part of the group: nothing after it can be trusted.
            self.set_poison(&e);
            return Err(e);
        }
        log.next_lsn = lsn;
        let mem = Arc::clone(&log.mem);
        let mut lsn = first;
        let (mut puts, mut deletes, mut bytes) = (0u64, 0u64, 0u64);
        for r in group {
            let Some(ops) = decode_ops(r.batch.payload(), r.batch.count()) else {
                let e = Error::InvalidArgument("malformed write batch".into());
                self.set_poison(&e);
                return Err(e);
            };
            for op in ops {
                match op {
                    BatchOp::Put(k, v) => {
                        mem.insert(k, lsn, Some(v));
                        puts += 1;
                        bytes += (k.len() + v.len()) as u64;
                    }
                    BatchOp::Delete(k) => {
                        mem.insert(k, lsn, None);
                        deletes += 1;
                        bytes += k.len() as u64;
                    }
                }
                lsn += 1;
            }
        }
        self.read.write().visible = lsn - 1;
        drop(log);
        let c = &self.counters;
        Counters::add(&c.puts, puts);
        Counters::add(&c.deletes, deletes);
        Counters::add(&c.user_bytes_written, bytes);
        Counters::add(&c.commit_groups, 1);
        if sync {
            Counters::add(&c.synced_commits, 1);
        }
        Ok(())
    }

    /// Switches a full memtable to immutable, first waiting while too many wait for flush.
    fn make_room(&self, log: &mut LogState) -> Result<()> {
        if log.mem.size() < self.opts.memtable_size {
            return Ok(());
        }
        let mut stalled = false;
        loop {
            let waiting = self.read.read().sv.imms.len();
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
        // Old log durable first: after a power loss no later file may hold data while an
        // earlier one lost some (that would be a hole).
        let id = self.alloc_file_id();
        let next = log
            .writer
            .sync()
            .and_then(|()| SmallLogWriter::create(&self.io, &self.dir, id));
        let writer = match next {
            Ok(w) => w,
            Err(e) => {
                self.set_poison(&e);
                return Err(e);
            }
        };
        log.writer = writer;
        log.mem.next_log_id.store(id, Ordering::SeqCst);
        let sealed = std::mem::replace(&mut log.mem, Arc::new(Memtable::new()));
        {
            let mut r = self.read.write();
            let mut sv = (*r.sv).clone();
            sv.imms.insert(0, sealed);
            sv.mem = Arc::clone(&log.mem);
            r.sv = Arc::new(sv);
        }
        self.wake_all();
        Ok(())
    }
}
