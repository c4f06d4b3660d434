//! The shared state of one open database, and the locks that guard it.
//!
//! Owns: the wiring between components (logs, memtables, versions, background work).
//! The write path (`write`), background flush/compaction (`compaction::worker`), recovery
//! (`recovery`) and the read path (`read`) each add their own `impl Engine` block.
//!
//! Lock order (never taken in the other direction): `log` -> `versions` -> `read`;
//! `bg` is taken alone or after `read` was released.

use crate::cache::NodeCache;
use crate::error::{Error, Result};
use crate::io::{DirLock, Io};
use crate::log::large::SegmentSet;
use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};
use crate::log::small::SmallLogWriter;
pub(crate) use crate::manifest::edit::SegmentMeta;
use crate::manifest::edit::{Installed, VersionEdit};
use crate::manifest::version::Version;
use crate::manifest::SEGMENT_LARGE;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::read::SuperVersion;
use crate::stats::Counters;
use crate::write::commit::CommitQueue;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::BTreeMap;
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

/// What readers capture: the current `SuperVersion` and the highest visible LSN.
pub(crate) struct ReadState {
    pub sv: Arc<SuperVersion>,
    pub visible: u64,
}

/// The current version and what the manifest must record with it.
pub(crate) struct VersionState {
    pub version: Arc<Version>,
    /// `busy[level]`: a compaction reads or writes that level (index 0 unused).
    pub busy: Vec<bool>,
    /// A flush is running (flushes go one at a time, oldest memtable first; they add a run
    /// to L1 and so never conflict with a compaction of L1).
    pub flushing: bool,
    pub log_min_id: u64,
    pub flushed_lsn: u64,
    /// Every live log segment and its bookkeeping.
    pub segments: BTreeMap<u64, SegmentMeta>,
}

impl VersionState {
    /// Ids of the transient segments owned by any of `runs`.
    pub(crate) fn transient_of(&self, runs: &[u64]) -> Vec<u64> {
        self.segments
            .iter()
            .filter(|(_, m)| m.kind != SEGMENT_LARGE && runs.contains(&m.owner))
            .map(|(&id, _)| id)
            .collect()
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
    pub read: RwLock<ReadState>,
    pub versions: Mutex<VersionState>,
    pub next_file_id: AtomicU64,
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
        let r = self.read.read();
        (Arc::clone(&r.sv), r.visible)
    }

    pub(crate) fn alloc_file_id(&self) -> u64 {
        self.next_file_id.fetch_add(1, Ordering::SeqCst)
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

    /// Installs `edit`, the one way the durable state changes: builds the state the edit
    /// produces, stores it as the manifest, and only then makes it current (for the next
    /// install and, through a new super version, for readers); last, marks what became
    /// obsolete (removed runs, freed segments), whose files go once no reader holds them.
    ///
    /// The caller holds the versions lock (`vs`), so installs and segment registrations
    /// are serialized. A failed store changes nothing in memory and poisons the engine:
    /// the manifest on disk may be the old one or the new one, and only a reopen tells.
    pub(crate) fn log_and_apply(
        &self,
        vs: &mut VersionState,
        edit: &VersionEdit,
        flushed: Option<&Arc<Memtable>>,
    ) -> Result<()> {
        let base = Installed {
            version: Arc::clone(&vs.version),
            segments: vs.segments.clone(),
            log_min_id: vs.log_min_id,
            flushed_lsn: vs.flushed_lsn,
        };
        let next = edit.apply(&base);
        let manifest = next.manifest(self.next_file_id.load(Ordering::SeqCst));
        if let Err(e) = manifest.store(&self.io, &self.dir) {
            // Not `set_poison`: it takes the `bg` lock, which is never taken under
            // `versions` (a background thread claims work holding `bg`, then `versions`).
            self.record_poison(&e);
            return Err(e);
        }
        vs.version = Arc::clone(&next.version);
        vs.segments = next.segments;
        vs.log_min_id = next.log_min_id;
        vs.flushed_lsn = next.flushed_lsn;
        {
            let mut r = self.read.write();
            let mut sv = (*r.sv).clone();
            sv.version = Arc::clone(&next.version);
            if let Some(m) = flushed {
                sv.imms.retain(|x| !Arc::ptr_eq(x, m));
            }
            if !edit.segments_freed.is_empty() {
                let set = Arc::make_mut(&mut sv.segments);
                for id in &edit.segments_freed {
                    if let Some(seg) = set.remove(id) {
                        seg.mark_obsolete();
                    }
                }
            }
            r.sv = Arc::new(sv);
        }
        for f in base.version.all_runs() {
            if edit.runs_removed.contains(&f.id()) {
                f.mark_obsolete();
            }
        }
        Ok(())
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

    /// Changes the segment set readers see.
    pub(crate) fn publish_segments(&self, change: impl FnOnce(&mut SegmentSet)) {
        let mut r = self.read.write();
        let mut sv = (*r.sv).clone();
        change(Arc::make_mut(&mut sv.segments));
        r.sv = Arc::new(sv);
    }

    /// Allocates an id for a new log segment and registers it, before its file exists, so
    /// that no manifest written from now on can forget a segment that may hold data.
    pub(crate) fn register_segment(&self, kind: u8, owner: u64) -> u64 {
        let mut vs = self.versions.lock();
        let id = self.alloc_file_id();
        vs.segments.insert(
            id,
            SegmentMeta {
                kind,
                owner,
                garbage: 0,
            },
        );
        id
    }

    /// Starts a new large-log segment: registered, created, then made readable.
    pub(crate) fn new_large_segment(&self) -> Result<SegmentWriter> {
        let id = self.register_segment(SEGMENT_LARGE, 0);
        let writer = SegmentWriter::create(&self.io, &self.dir, SegmentKind::Large, id)?;
        let reader = Arc::new(SegmentFile::open(
            &self.io,
            &self.dir,
            SegmentKind::Large,
            id,
        )?);
        self.publish_segments(|set| {
            set.insert(id, reader);
        });
        Ok(writer)
    }
}
