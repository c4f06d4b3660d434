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
use crate::log::large::SegmentKind;
use crate::log::large::{SegmentFile, SegmentSet};
pub(crate) use crate::manifest::edit::SegmentMeta;
use crate::manifest::edit::{Installed, SegmentTable, VersionEdit};
use crate::manifest::version::Version;
use crate::manifest::ManifestState;
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

/// The state the last stored manifest records, plus the segments registered since (the
/// next manifest names them), and the claims of running background jobs, guarded together
/// by the versions lock.
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
    /// Estimated bytes of older versions (in L1 and L2) that L1's runs shadow (sampled by
    /// each flush, reset when L1 is merged down). A scheduling hint kept in memory, never
    /// in the manifest.
    pub l1_dead_estimate: u64,
    /// Bytes a flush of a full memtable of distinct keys adds to L1, as the picker counts a
    /// level's bytes (a moving average of recent flushes, `picker::full_run_bytes`; 0
    /// before the first): L1 is due after `growth_factor` of them, so the levels below are
    /// sized from it (`compaction::picker::level_targets`). A scheduling hint kept in
    /// memory, never in the manifest.
    pub flushed_run_bytes: u64,
    /// Runs flushed into L1 since its last merge into L2 (at open: the runs it holds):
    /// what L1's run limit counts, so that merges within L1, which leave it fewer runs,
    /// never put off the merge into L2 that `growth_factor` flushes make due. A scheduling
    /// hint kept in memory, never in the manifest.
    pub l1_flushes: usize,
    /// Ids of level files that running flushes and compactions are writing: live, though no
    /// version names them yet (`check` must not call them orphans).
    pending_outputs: std::collections::BTreeSet<u64>,
}

impl VersionState {
    /// The manifest that records this state (what the last store wrote, plus the segments
    /// registered since); a checkpoint stores it in its own directory.
    pub(crate) fn as_manifest(&self, next_file_id: u64) -> ManifestState {
        Installed {
            version: Arc::clone(&self.version),
            segments: self.segments.clone(),
            log_min_id: self.log_min_id,
            flushed_lsn: self.flushed_lsn,
        }
        .manifest(next_file_id)
    }

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

    /// Level files being written by running jobs.
    pub(crate) fn pending_outputs(&self) -> &std::collections::BTreeSet<u64> {
        &self.pending_outputs
    }

    /// Ids of the transient segments owned by any of `runs`.
    pub(crate) fn transient_of(&self, runs: &[u64]) -> Vec<u64> {
        self.segments
            .iter()
            .filter(|(_, m)| m.kind != SegmentKind::Large && runs.contains(&m.owner))
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

#[cfg(test)]
impl Recovered {
    /// An empty database (three levels) whose active memtable is `mem` (tests).
    pub(crate) fn empty(mem: Arc<Memtable>, next_file_id: u64) -> Recovered {
        let version = Arc::new(Version::empty(3));
        Recovered {
            version: Arc::clone(&version),
            log_min_id: 0,
            flushed_lsn: 0,
            segments: SegmentTable::new(),
            levels: 5,
            sv: SuperVersion {
                mem,
                imms: Vec::new(),
                version,
                segments: Arc::new(SegmentSet::new()),
            },
            visible: 0,
            next_file_id,
        }
    }
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
        let l1_flushes = r.version.runs(1).len();
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
                l1_dead_estimate: 0,
                flushed_run_bytes: 0,
                l1_flushes,
                pending_outputs: Default::default(),
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

    /// The id the next allocation will return (every file id below it is allocated).
    pub(crate) fn peek_next_file_id(&self) -> u64 {
        self.next_file_id.load(Ordering::SeqCst)
    }

    /// A new file id for the level file a flush or compaction is about to write: live until
    /// the guard drops (after the install that names it, or after the job failed).
    pub(crate) fn begin_output(&self) -> PendingOutput<'_> {
        let id = self.alloc_file_id();
        self.state.lock().pending_outputs.insert(id);
        PendingOutput { set: self, id }
    }

    /// A new file id for a delta bucket segment a flush creates: live (see
    /// `obsolete::LiveFiles::from_state`) until [`VersionSet::end_output`].
    pub(crate) fn begin_bucket_output(&self) -> u64 {
        let id = self.alloc_file_id();
        self.state.lock().pending_outputs.insert(id);
        id
    }

    /// Ends what [`VersionSet::begin_bucket_output`] began (the install named the file,
    /// or the flush failed and the file went).
    pub(crate) fn end_output(&self, id: u64) {
        self.state.lock().pending_outputs.remove(&id);
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
        if edit.buckets.is_some() {
            let kept: std::collections::HashSet<u64> =
                next.version.buckets.segments().map(|s| s.id()).collect();
            obsolete.buckets = base
                .version
                .buckets
                .segments()
                .filter(|s| !kept.contains(&s.id()))
                .cloned()
                .collect();
        }
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
    pub(crate) fn register_segment(&self, kind: SegmentKind, owner: u64) -> u64 {
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

    /// Makes every write up to `lsn` visible to new snapshots (never lowers what is
    /// visible).
    pub(crate) fn publish_visible(&self, lsn: u64) {
        let mut r = self.read.write();
        r.visible = r.visible.max(lsn);
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

/// A level file a running job is writing (see [`VersionSet::begin_output`]).
pub(crate) struct PendingOutput<'a> {
    set: &'a VersionSet,
    pub id: u64,
}

impl Drop for PendingOutput<'_> {
    fn drop(&mut self) {
        self.set.state.lock().pending_outputs.remove(&self.id);
    }
}

/// What an install made obsolete: already marked, so each file is deleted when its last
/// reader lets go of it.
#[derive(Default)]
pub(crate) struct Obsolete {
    pub runs: Vec<Arc<LevelFile>>,
    pub segments: Vec<Arc<SegmentFile>>,
    /// Delta bucket segments a bucket GC replaced.
    pub buckets: Vec<Arc<crate::bucket::BucketSegment>>,
}

impl Obsolete {
    fn mark(&self) {
        for f in &self.runs {
            f.mark_obsolete();
        }
        for s in &self.segments {
            s.mark_obsolete();
        }
        for b in &self.buckets {
            b.mark_obsolete();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::BlockCache;
    use crate::io::{FailMode, IoComponent, SimFs};
    use crate::level::builder::{EntryValue, LevelBuilder};
    use crate::log::large::{SegmentKind, SegmentWriter};
    use crate::manifest::edit::RunPlace;
    use std::path::Path;

    const DIR: &str = "/db";

    fn io(fs: &SimFs) -> Io {
        let io = Io::new(Arc::new(fs.clone()), false);
        io.fs().create_dir_all(Path::new(DIR)).unwrap();
        io
    }

    fn run(io: &Io, id: u64, key: &[u8]) -> Arc<LevelFile> {
        let dir = Path::new(DIR);
        let f = io
            .create(
                &dir.join(crate::level::reader::file_name(id)),
                IoComponent::Flush,
            )
            .unwrap();
        let mut b = LevelBuilder::new(f, 8192, 12288);
        b.add(key, 1, EntryValue::Bytes(b"v")).unwrap();
        b.finish().unwrap();
        Arc::new(LevelFile::open(io, dir, id, Arc::new(BlockCache::new(1 << 20))).unwrap())
    }

    fn segment(io: &Io, kind: SegmentKind, id: u64) -> Arc<SegmentFile> {
        let mut w = SegmentWriter::create(io, Path::new(DIR), kind, id).unwrap();
        w.commit(true).unwrap();
        Arc::new(SegmentFile::open(io, Path::new(DIR), kind, id).unwrap())
    }

    /// Runs 1 (L1) and 2 (L2); a large segment 10 and a transient one 11 owned by run 1.
    fn set(io: &Io) -> VersionSet {
        let mut version = Version::empty(3);
        version.levels[0].push(run(io, 1, b"a"));
        version.levels[1].push(run(io, 2, b"b"));
        let version = Arc::new(version);
        let mut segments = SegmentTable::new();
        let meta = |kind, owner| SegmentMeta {
            kind,
            owner,
            garbage: 0,
        };
        segments.insert(10, meta(SegmentKind::Large, 0));
        segments.insert(11, meta(SegmentKind::Transient, 1));
        let mut files = SegmentSet::new();
        files.insert(10, segment(io, SegmentKind::Large, 10));
        files.insert(11, segment(io, SegmentKind::Transient, 11));
        VersionSet::new(
            io.clone(),
            PathBuf::from(DIR),
            Recovered {
                version: Arc::clone(&version),
                log_min_id: 5,
                flushed_lsn: 40,
                segments,
                levels: 5,
                sv: SuperVersion {
                    mem: Arc::new(Memtable::new()),
                    imms: Vec::new(),
                    version,
                    segments: Arc::new(files),
                },
                visible: 40,
                next_file_id: 20,
            },
        )
    }

    /// Run 1 and its transient segment merged into run 3 of L2, garbage found in 10.
    fn merge_edit(io: &Io) -> VersionEdit {
        VersionEdit {
            runs_removed: vec![1, 2],
            runs_added: vec![(2, run(io, 3, b"c"), RunPlace::Oldest)],
            segments_freed: vec![11],
            garbage: vec![(10, 100)],
            ..VersionEdit::default()
        }
    }

    #[test]
    fn an_install_is_stored_then_applied_and_reports_what_became_obsolete() {
        let fs = SimFs::new();
        let io = io(&fs);
        let vset = set(&io);
        let edit = merge_edit(&io);
        let obsolete = {
            let mut vs = vset.lock();
            vset.log_and_apply(&mut vs, &edit, None).unwrap()
        };
        let mut gone: Vec<u64> = obsolete.runs.iter().map(|f| f.id()).collect();
        gone.sort_unstable();
        assert_eq!(gone, vec![1, 2]);
        assert_eq!(obsolete.segments.len(), 1);

        // In memory: the version set's state and what readers see.
        let vs = vset.lock();
        assert!(vs.version().runs(1).is_empty());
        let l2: Vec<u64> = vs.version().runs(2).iter().map(|f| f.id()).collect();
        assert_eq!(l2, vec![3]);
        assert!(!vs.segments().contains_key(&11));
        assert_eq!(vs.segments()[&10].garbage, 100);
        let (sv, visible) = vset.snapshot();
        assert_eq!(visible, 40);
        assert!(Arc::ptr_eq(&sv.version, vs.version()));
        assert!(!sv.segments.contains_key(&11) && sv.segments.contains_key(&10));

        // On disk: the manifest says the same.
        let m = ManifestState::load(&io, Path::new(DIR)).unwrap().unwrap();
        assert_eq!(
            m.levels.iter().map(|l| (l.0, l.1)).collect::<Vec<_>>(),
            vec![(2, 3)]
        );
        assert_eq!(m.segments.len(), 1);
        assert_eq!((m.segments[0].id, m.segments[0].garbage), (10, 100));
        assert_eq!((m.log_min_id, m.flushed_lsn, m.next_file_id), (5, 40, 20));
        drop(vs);

        // Obsolete files go once their last holder lets go.
        let run1 = Path::new(DIR).join(crate::level::reader::file_name(1));
        assert!(fs.read_file(&run1).is_some(), "held by `obsolete`");
        drop(obsolete);
        drop(sv);
        drop(edit);
        assert!(
            fs.read_file(&run1).is_none(),
            "an obsolete run stayed on disk"
        );
    }

    #[test]
    fn a_failed_store_changes_nothing_in_memory() {
        let fs = SimFs::new();
        let io = io(&fs);
        let vset = set(&io);
        let edit = merge_edit(&io);
        let (before, _) = vset.snapshot();
        fs.fail_at(fs.op_count(), FailMode::FromThenOn);
        let mut vs = vset.lock();
        assert!(vset.log_and_apply(&mut vs, &edit, None).is_err());
        assert!(
            Arc::ptr_eq(vs.version(), &before.version),
            "version changed"
        );
        assert!(vs.segments().contains_key(&11), "segment table changed");
        assert_eq!(vs.segments()[&10].garbage, 0, "garbage applied");
        drop(vs);
        let (after, _) = vset.snapshot();
        assert!(Arc::ptr_eq(&after, &before), "readers saw the change");
        fs.clear_faults();
        drop((after, before, edit));
        // Nothing was marked obsolete: run 1 is still on disk with its last holder gone.
        let run1 = Path::new(DIR).join(crate::level::reader::file_name(1));
        assert!(fs.read_file(&run1).is_some());
    }

    /// A merge of L1's runs into one puts its output below the runs flushed while it ran,
    /// in memory and in the manifest, so a lookup finds their newer versions first.
    #[test]
    fn a_merge_within_l1_goes_below_the_runs_flushed_meanwhile() {
        let fs = SimFs::new();
        let io = io(&fs);
        let vset = set(&io);
        let l1 = |vset: &VersionSet| -> Vec<u64> {
            let vs = vset.lock();
            vs.version().runs(1).iter().map(|f| f.id()).collect()
        };
        let install = |edit: VersionEdit| {
            let mut vs = vset.lock();
            vset.log_and_apply(&mut vs, &edit, None).unwrap();
        };
        // Two flushes: L1 is 5, 4, 1 (newest first).
        for id in [4, 5] {
            install(VersionEdit {
                runs_added: vec![(1, run(&io, id, b"k"), RunPlace::Newest)],
                ..VersionEdit::default()
            });
        }
        assert_eq!(l1(&vset), vec![5, 4, 1]);
        // A merge took every run L1 held (5, 4 and 1); run 6 was flushed while it ran.
        install(VersionEdit {
            runs_added: vec![(1, run(&io, 6, b"k"), RunPlace::Newest)],
            ..VersionEdit::default()
        });
        install(VersionEdit {
            runs_removed: vec![5, 4, 1],
            runs_added: vec![(1, run(&io, 7, b"k"), RunPlace::Oldest)],
            segments_reassigned: vec![(11, 7)],
            ..VersionEdit::default()
        });
        assert_eq!(l1(&vset), vec![6, 7]);
        let m = ManifestState::load(&io, Path::new(DIR)).unwrap().unwrap();
        assert_eq!(
            m.levels.iter().map(|l| (l.0, l.1)).collect::<Vec<_>>(),
            vec![(1, 6), (1, 7), (2, 2)]
        );
        assert_eq!(vset.lock().segments()[&11].owner, 7);
    }

    #[test]
    fn registered_segments_are_in_the_next_manifest() {
        let fs = SimFs::new();
        let io = io(&fs);
        let vset = set(&io);
        let id = vset.register_segment(SegmentKind::Large, 0);
        assert_eq!(id, 20);
        let mut vs = vset.lock();
        vset.log_and_apply(&mut vs, &VersionEdit::default(), None)
            .unwrap();
        let m = ManifestState::load(&io, Path::new(DIR)).unwrap().unwrap();
        assert!(m.segments.iter().any(|s| s.id == 20));
        assert_eq!(m.next_file_id, 21);
    }
}
