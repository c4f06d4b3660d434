//! The shared state of one open database, and the locks that guard it.
//!
//! Owns: the wiring between components (logs, memtables, versions, background work).
//! The write path (`write`), background flush/compaction (`compaction::worker`), recovery
//! (`manifest::recovery`) and the read path (`read`) each add their own `impl Engine` block.
//!
//! Lock order (never taken in the other direction): `log` -> `versions` -> `read`;
//! `bg` is taken alone or after `read` was released.

use crate::cache::NodeCache;
use crate::error::{Error, Result};
use crate::io::{DirLock, Io};
use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};
use crate::log::small::SmallLogWriter;
use crate::manifest::version::Version;
use crate::manifest::{ManifestState, SegmentRecord, SEGMENT_LARGE};
use crate::memtable::Memtable;
use crate::options::Options;
use crate::read::{SegmentSet, SuperVersion};
use crate::stats::Counters;
use crate::write::commit::CommitQueue;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// What the engine tracks of one log segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentMeta {
    /// `SEGMENT_LARGE` or `SEGMENT_TRANSIENT`.
    pub kind: u8,
    /// Transient segments: the level file (run) whose pointers use it.
    pub owner: u64,
    /// Bytes of records known to be garbage (large segments).
    pub garbage: u64,
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

    /// Refuses writes from now on.
    pub(crate) fn set_poison(&self, why: &Error) {
        let mut p = self.poison.lock();
        if p.is_none() {
            *p = Some(why.to_string());
        }
        drop(p);
        self.wake_all();
    }

    pub(crate) fn check_poison(&self) -> Result<()> {
        match &*self.poison.lock() {
            Some(msg) => Err(Error::Poisoned(msg.clone())),
            None => Ok(()),
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

    /// The manifest contents for `vs`.
    pub(crate) fn manifest_state(&self, vs: &VersionState, version: &Version) -> ManifestState {
        ManifestState {
            next_file_id: self.next_file_id.load(Ordering::SeqCst),
            log_min_id: vs.log_min_id,
            flushed_lsn: vs.flushed_lsn,
            levels: version.manifest_levels(),
            segments: vs
                .segments
                .iter()
                .map(|(&id, m)| SegmentRecord {
                    id,
                    kind: m.kind,
                    owner: m.owner,
                    garbage: m.garbage,
                })
                .collect(),
        }
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

    /// Replaces the version seen by readers (and optionally drops the oldest immutable
    /// memtable, which the new version now holds).
    pub(crate) fn publish_version(&self, version: &Arc<Version>, flushed: Option<&Arc<Memtable>>) {
        let mut r = self.read.write();
        let mut sv = (*r.sv).clone();
        sv.version = Arc::clone(version);
        if let Some(m) = flushed {
            sv.imms.retain(|x| !Arc::ptr_eq(x, m));
        }
        r.sv = Arc::new(sv);
    }
}
