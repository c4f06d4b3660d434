//! [`VersionSet`]: the one owner of what is live.
//!
//! Owns: the current [`Version`] (the runs of every level), the segment table (every live
//! log segment, the run that owns a transient one, the garbage counted in a large one), the
//! replay start and the flushed LSN, the manifest that records them, file ids, and the
//! publication to readers (the current [`SuperVersion`] and the visible LSN). A change is
//! one [`VersionEdit`] given to [`VersionSet::log_and_apply`], the only code that stores the
//! manifest: the edit is applied to a copy, the copy is stored, and only then does it
//! replace the current state.
//!
//! Never: changes the durable state in memory before the manifest that records it is
//! durable; decides what to flush, merge or collect (the compaction worker and GC do);
//! deletes a file (files marked obsolete go when their last reader drops them).

use crate::error::Result;
use crate::io::Io;
use crate::level::LevelFile;
use crate::log::large::{SegmentFile, SegmentSet};
pub(crate) use crate::manifest::edit::SegmentMeta;
use crate::manifest::edit::{Installed, SegmentTable, VersionEdit};
use crate::manifest::version::Version;
use crate::manifest::{ManifestState, SEGMENT_LARGE};
use crate::memtable::Memtable;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Everything a reader needs, captured atomically with a snapshot LSN.
#[derive(Debug, Clone)]
pub(crate) struct SuperVersion {
    pub mem: Arc<Memtable>,
    /// Immutable memtables, newest first.
    pub imms: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
    /// Every live log segment (large and transient), by file id.
    pub segments: Arc<SegmentSet>,
}

/// What readers capture: the current `SuperVersion` and the highest visible LSN.
struct ReadState {
    sv: Arc<SuperVersion>,
    visible: u64,
}

/// The durable state (as the last stored manifest has it) and the claims of running
/// background jobs, guarded together by the versions lock.
pub(crate) struct VersionState {
    version: Arc<Version>,
    log_min_id: u64,
    flushed_lsn: u64,
    segments: SegmentTable,
    /// `busy[level]`: a compaction reads or writes that level (index 0 unused).
    pub busy: Vec<bool>,
    /// A flush is running (flushes go one at a time, oldest memtable first; they add a run
    /// to L1 and so never conflict with a compaction of L1).
    pub flushing: bool,
}

impl VersionState {
    /// The current version.
    pub(crate) fn version(&self) -> &Arc<Version> {
        &self.version
    }

    /// The first small-log file replay needs (older ones hold only flushed writes).
    pub(crate) fn log_min_id(&self) -> u64 {
        self.log_min_id
    }

    /// The live log segments.
    pub(crate) fn segments(&self) -> &SegmentTable {
        &self.segments
    }

    /// Ids of the transient segments owned by any of `runs`.
    pub(crate) fn transient_of(&self, runs: &[u64]) -> Vec<u64> {
        self.segments
            .iter()
            .filter(|(_, m)| m.kind != SEGMENT_LARGE && runs.contains(&m.owner))
            .map(|(&id, _)| id)
            .collect()
    }
}

/// What recovery hands over: the state it found and rebuilt.
pub(crate) struct Recovered {
    pub version: Arc<Version>,
    pub log_min_id: u64,
    pub flushed_lsn: u64,
    pub segments: SegmentTable,
    /// Slots of `VersionState::busy` (levels + 2).
    pub levels: usize,
    pub sv: SuperVersion,
    pub visible: u64,
    pub next_file_id: u64,
}

/// See the module documentation.
pub(crate) struct VersionSet {
    io: Io,
    dir: PathBuf,
    state: Mutex<VersionState>,
    read: RwLock<ReadState>,
    next_file_id: AtomicU64,
}

impl VersionSet {
    /// The set recovery rebuilt (nothing is stored).
    pub(crate) fn new(io: Io, dir: PathBuf, r: Recovered) -> VersionSet {
        let mut busy = vec![false; r.levels];
        if let Some(b) = busy.get_mut(0) {
            *b = true;
        }
        VersionSet {
            io,
            dir,
            state: Mutex::new(VersionState {
                version: r.version,
                log_min_id: r.log_min_id,
                flushed_lsn: r.flushed_lsn,
                segments: r.segments,
                busy,
                flushing: false,
            }),
            read: RwLock::new(ReadState {
                sv: Arc::new(r.sv),
                visible: r.visible,
            }),
            next_file_id: AtomicU64::new(r.next_file_id),
        }
    }

    /// Takes the versions lock (lock order: `log` -> `versions` -> the readers' state;
    /// never `bg` while holding it).
    pub(crate) fn lock(&self) -> MutexGuard<'_, VersionState> {
        self.state.lock()
    }

    /// The current super version and snapshot LSN, captured together.
    pub(crate) fn snapshot(&self) -> (Arc<SuperVersion>, u64) {
        let r = self.read.read();
        (Arc::clone(&r.sv), r.visible)
    }

    /// A new file id (level files, log segments, small-log files).
    pub(crate) fn alloc_file_id(&self) -> u64 {
        self.next_file_id.fetch_add(1, Ordering::SeqCst)
    }

    /// Installs `edit`: builds the state it produces, stores it as the manifest, and only
    /// then makes it current (for the next install and, through a new super version, for
    /// readers, dropping `flushed` from the immutable memtables); last, marks what became
    /// obsolete (removed runs, freed segments), whose files go once no reader holds them.
    ///
    /// The caller holds the versions lock (`vs`), so installs and segment registrations
    /// are serialized. A failed store changes nothing in memory; the manifest on disk may
    /// then be the old one or the new one (only a reopen tells), so the caller must stop
    /// changing the database (the engine poisons itself).
    pub(crate) fn log_and_apply(
        &self,
        vs: &mut VersionState,
        edit: &VersionEdit,
        flushed: Option<&Arc<Memtable>>,
    ) -> Result<Obsolete> {
        let base = Installed {
            version: Arc::clone(&vs.version),
            segments: vs.segments.clone(),
            log_min_id: vs.log_min_id,
            flushed_lsn: vs.flushed_lsn,
        };
        let next = edit.apply(&base);
        self.store(&next.manifest(self.next_file_id.load(Ordering::SeqCst)))?;
        vs.version = Arc::clone(&next.version);
        vs.segments = next.segments;
        vs.log_min_id = next.log_min_id;
        vs.flushed_lsn = next.flushed_lsn;
        let mut obsolete = Obsolete::default();
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
                        obsolete.segments.push(seg);
                    }
                }
            }
            r.sv = Arc::new(sv);
        }
        obsolete.runs = base
            .version
            .all_runs()
            .filter(|f| edit.runs_removed.contains(&f.id()))
            .cloned()
            .collect();
        obsolete.mark();
        Ok(obsolete)
    }

    /// The one place the manifest is written.
    fn store(&self, manifest: &ManifestState) -> Result<()> {
        manifest.store(&self.io, &self.dir)
    }

    /// Allocates an id for a new log segment and registers it, before its file exists, so
    /// that no manifest written from now on can forget a segment that may hold data (a
    /// transient segment whose owning run never reaches a manifest is dropped at open).
    pub(crate) fn register_segment(&self, kind: u8, owner: u64) -> u64 {
        let mut vs = self.state.lock();
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

    /// Makes a created segment readable.
    pub(crate) fn publish_segment(&self, id: u64, file: Arc<SegmentFile>) {
        let mut r = self.read.write();
        let mut sv = (*r.sv).clone();
        Arc::make_mut(&mut sv.segments).insert(id, file);
        r.sv = Arc::new(sv);
    }

    /// Makes every write up to `lsn` visible to new snapshots.
    pub(crate) fn publish_visible(&self, lsn: u64) {
        self.read.write().visible = lsn;
    }

    /// A memtable switch: `sealed` becomes the newest immutable memtable, `fresh` the
    /// active one.
    pub(crate) fn publish_switch(&self, sealed: Arc<Memtable>, fresh: Arc<Memtable>) {
        let mut r = self.read.write();
        let mut sv = (*r.sv).clone();
        sv.imms.insert(0, sealed);
        sv.mem = fresh;
        r.sv = Arc::new(sv);
    }

    /// Immutable memtables waiting for their flush.
    pub(crate) fn imms_waiting(&self) -> usize {
        self.read.read().sv.imms.len()
    }

    /// The oldest immutable memtable (the next to flush).
    pub(crate) fn oldest_imm(&self) -> Option<Arc<Memtable>> {
        self.read.read().sv.imms.last().cloned()
    }
}

/// What an install made obsolete: already marked, so each file is deleted when its last
/// reader lets go of it.
#[derive(Default)]
pub(crate) struct Obsolete {
    pub runs: Vec<Arc<LevelFile>>,
    pub segments: Vec<Arc<SegmentFile>>,
}

impl Obsolete {
    fn mark(&self) {
        for f in &self.runs {
            f.mark_obsolete();
        }
        for s in &self.segments {
            s.mark_obsolete();
        }
    }
}
