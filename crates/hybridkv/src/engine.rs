//! The shared state of one open database, and the locks that guard it.
//!
//! Owns: the wiring between components (logs, memtables, versions, background work).
//! The write path (`write`), background flush/compaction (`compaction::worker`), recovery
//! (`recovery`) and the read path (`read`) each add their own `impl Engine` block.
//!
//! Lock order (never taken in the other direction): `log` -> `versions` (the version
//! set's lock) -> the readers' state inside the version set; `bg` -> `versions` (a
//! background thread claims work holding `bg`), so `bg` is never taken under `versions`.

use crate::cache::NodeCache;
use crate::error::{Error, Result};
use crate::io::{DirLock, Io};
use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};
use crate::log::small::SmallLogWriter;
use crate::manifest::edit::VersionEdit;
use crate::manifest::SEGMENT_LARGE;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::stats::Counters;
use crate::version_set::{Obsolete, SuperVersion, VersionSet, VersionState};
use crate::write::commit::CommitQueue;
use parking_lot::{Condvar, Mutex};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

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
    pub(crate) fn commit_small(&mut self, sync: bool, min_needed: u64) -> Result<()> {
        self.forget_flushed_logs(min_needed);
        if sync {
            for older in &mut self.unsynced {
                older.sync()?;
            }
            self.unsynced.clear();
        }
        self.writer.commit(sync)
    }

    /// Forgets older logs below `min_id`: their memtables are flushed and the files gone.
    fn forget_flushed_logs(&mut self, min_id: u64) {
        self.unsynced.retain(|w| w.id() >= min_id);
    }
}

/// Background coordination.
#[derive(Default)]
pub(crate) struct BgState {
    pub shutdown: bool,
    pub running: usize,
    /// Ask the garbage collector to run a pass now.
    pub gc_requested: bool,
}

pub(crate) struct Engine {
    pub dir: PathBuf,
    pub opts: Options,
    pub io: Io,
    pub cache: Arc<NodeCache>,
    pub commit: CommitQueue,
    pub log: Mutex<LogState>,
    /// What is live, the manifest, and what readers see.
    pub versions: VersionSet,
    /// The smallest small-log id still needed (`VersionState::log_min_id` after the last
    /// flush), published without a lock: a flush must never wait for `log`, which a
    /// stalled writer holds while it waits for that flush.
    pub small_log_min: AtomicU64,
    pub bg: Mutex<BgState>,
    pub bg_cv: Condvar,
    /// Set by a failed log write, fsync or background job: writes are refused.
    pub poison: Mutex<Option<String>>,
    pub counters: Counters,
    pub dir_lock: Mutex<Option<Box<dyn DirLock>>>,
    /// Serializes garbage-collection passes.
    pub gc_lock: Mutex<()>,
    /// Set first thing by `Db::close`: every entry point fails with `Error::Closed`.
    pub closed: AtomicBool,
}

impl Engine {
    /// The current super version and snapshot LSN, captured together.
    pub(crate) fn snapshot(&self) -> (Arc<SuperVersion>, u64) {
        self.versions.snapshot()
    }

    pub(crate) fn alloc_file_id(&self) -> u64 {
        self.versions.alloc_file_id()
    }

    /// Refuses writes from now on, and wakes everyone waiting for background work.
    pub(crate) fn set_poison(&self, why: &Error) {
        self.record_poison(why);
        self.wake_all();
    }

    /// Refuses writes from now on, without waking anyone (safe under any lock; waiters
    /// notice within their wait timeout).
    pub(crate) fn record_poison(&self, why: &Error) {
        let mut p = self.poison.lock();
        if p.is_none() {
            *p = Some(why.to_string());
        }
    }

    pub(crate) fn check_poison(&self) -> Result<()> {
        match &*self.poison.lock() {
            Some(msg) => Err(Error::Poisoned(msg.clone())),
            None => Ok(()),
        }
    }

    /// `Error::Closed` once the database was closed.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        self.bg.lock().shutdown
    }

    /// Wakes background workers and anyone waiting for them.
    pub(crate) fn wake_all(&self) {
        let _g = self.bg.lock();
        self.bg_cv.notify_all();
    }

    /// Installs `edit` through the version set (stored, then applied); a failed store
    /// changes nothing in memory and poisons the engine, so no later install can build on
    /// a change whose fate on disk is unknown.
    pub(crate) fn install(
        &self,
        vs: &mut VersionState,
        edit: &VersionEdit,
        flushed: Option<&Arc<Memtable>>,
    ) -> Result<Obsolete> {
        self.versions
            .log_and_apply(vs, edit, flushed)
            .inspect_err(|e| {
                // Not `set_poison`: it takes the `bg` lock, which is never taken under
                // `versions` (a background thread claims work holding `bg`, then
                // `versions`).
                self.record_poison(e);
            })
    }

    /// Makes every write committed so far durable: the large log's unsynced tail, then
    /// every small-log file (older ones first). Called before an install that frees
    /// something on the strength of those writes (GC: a record is dead because a newer
    /// write shadows it; if that write could still be lost, so must the record not be).
    pub(crate) fn make_committed_durable(&self) -> Result<()> {
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
            self.set_poison(e);
        }
        result
    }

    /// Starts a new large-log segment: registered, created, then made readable.
    pub(crate) fn new_large_segment(&self) -> Result<SegmentWriter> {
        let id = self.versions.register_segment(SEGMENT_LARGE, 0);
        let writer = SegmentWriter::create(&self.io, &self.dir, SegmentKind::Large, id)?;
        let reader = Arc::new(SegmentFile::open(
            &self.io,
            &self.dir,
            SegmentKind::Large,
            id,
        )?);
        self.versions.publish_segment(id, reader);
        Ok(writer)
    }
}
