//! Background threads: flush immutable memtables into L1 (each flush adds a sorted run)
//! and merge levels down, then install each result (manifest first, then the readers'
//! version, then file deletion).

use super::job::{memtable_source, MediumPolicy, MergeJob, MergeOutcome, MergeSource};
use super::picker::{pick, LevelShape};
use super::transient::{TransientReader, TransientSink};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::io::IoComponent;
use crate::level::reader::LevelScanner;
use crate::level::{LevelFile, LevelMeta};
use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};
use crate::log::small;
use crate::manifest::edit::VersionEdit;
use crate::manifest::version::Version;
use crate::manifest::SEGMENT_TRANSIENT;
use crate::memtable::Memtable;
use crate::stats::Counters;
use crate::version_set::VersionState;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Runs a job, turning a panic into an error: a background job that dies must poison the
/// engine (refusing writes with a message), never leave its levels busy and writers hung.
fn contain_panic(job: impl FnOnce() -> Result<()>) -> Result<()> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::Poisoned(format!("background job panicked: {msg}")))
        }
    }
}

/// A unit of background work.
enum Work {
    Flush(Arc<Memtable>),
    Compact(usize),
}

impl Engine {
    /// The loop each background thread runs until shutdown.
    pub(crate) fn background_loop(self: &Arc<Self>) {
        loop {
            let work = {
                let mut g = self.bg.lock();
                loop {
                    if g.shutdown {
                        return;
                    }
                    if self.poison.lock().is_none() {
                        if let Some(w) = self.claim_work() {
                            g.running += 1;
                            break w;
                        }
                    }
                    self.bg_cv.wait_for(&mut g, Duration::from_millis(500));
                }
            };
            let result = match &work {
                Work::Flush(mem) => self.run_flush(mem),
                Work::Compact(level) => self.run_compaction(*level),
            };
            if let Err(e) = result {
                // A failed job leaves the old state installed; refusing writes keeps
                // memory bounded and makes the failure visible.
                self.set_poison(&e);
            }
            self.bg.lock().running -= 1;
            self.wake_all();
        }
    }

    /// Picks the next job and marks it. Flushes come first.
    fn claim_work(&self) -> Option<Work> {
        // Read the oldest memtable under the versions lock: a flush removes its memtable
        // from the super version under this lock before it clears `flushing`, so a
        // memtable seen here while no flush runs has not been flushed. (Reading it before
        // the lock let a just-flushed memtable be flushed a second time, over newer data.)
        let mut vs = self.versions.lock();
        if !vs.flushing {
            if let Some(mem) = self.versions.oldest_imm() {
                vs.flushing = true;
                return Some(Work::Flush(mem));
            }
        }
        let level = pick(&self.level_shapes(&vs, false))?;
        for l in [level, level + 1] {
            if let Some(b) = vs.busy.get_mut(l) {
                *b = true;
            }
        }
        Some(Work::Compact(level))
    }

    /// What the picker sees. L1 is due when its runs reach the growth factor or its bytes
    /// its target. A level counts its medium pairs at pointer size, plus their full value
    /// size when the next level is the merge level: merging will write them in full
    /// (Parallax §3.3), and counting them keeps the growth factor between levels.
    fn level_shapes(&self, vs: &VersionState, ignore_busy: bool) -> Vec<LevelShape> {
        let v = &vs.version();
        (1..=self.opts.max_levels)
            .map(|l| {
                let mut bytes = v.level_bytes(l);
                if v.is_merge_level(l + 1, self.opts.medium_merge_level) {
                    bytes += v.level_medium_bytes(l);
                }
                LevelShape {
                    bytes,
                    target: self.opts.level_target_bytes(l),
                    busy: !ignore_busy && vs.busy.get(l).copied().unwrap_or(true),
                    runs: v.runs(l).len(),
                    run_limit: if l == 1 {
                        self.opts.growth_factor as usize
                    } else {
                        0
                    },
                }
            })
            .collect()
    }

    fn open_output(&self, id: u64, meta: Option<LevelMeta>) -> Result<Option<Arc<LevelFile>>> {
        match meta {
            Some(_) => Ok(Some(Arc::new(LevelFile::open(
                &self.io,
                &self.dir,
                id,
                Arc::clone(&self.cache),
            )?))),
            None => Ok(None),
        }
    }

    fn count_merge(&self, out: &MergeOutcome, reader: &TransientReader<'_>, logged: u64) {
        let c = &self.counters;
        Counters::add(&c.compaction_entries_in, out.entries_in);
        Counters::add(&c.dropped_shadowed, out.dropped_shadowed);
        Counters::add(&c.dropped_tombstones, out.dropped_tombstones);
        Counters::add(&c.medium_values_merged, reader.values());
        Counters::add(&c.medium_bytes_merged, reader.bytes_read());
        Counters::add(&c.medium_values_logged, logged);
    }

    fn merge_job(
        &self,
        file_id: u64,
        component: IoComponent,
        drop_tombstones: bool,
    ) -> MergeJob<'_> {
        MergeJob {
            opts: &self.opts,
            io: &self.io,
            dir: &self.dir,
            file_id,
            component,
            leaf_size: self.opts.leaf_size,
            index_size: self.opts.index_node_size,
            drop_tombstones,
        }
    }

    /// Registers a new transient segment used by run `owner` (before its file exists, so
    /// no manifest written meanwhile can forget it) and creates it.
    fn new_transient_segment(&self, owner: u64) -> Result<SegmentWriter> {
        let id = self.versions.register_segment(SEGMENT_TRANSIENT, owner);
        Counters::add(&self.counters.transient_segments_created, 1);
        SegmentWriter::create(&self.io, &self.dir, SegmentKind::Transient, id)
    }

    /// Makes a finished transient segment durable and readable.
    fn finish_transient(&self, sink: TransientSink<'_>) -> Result<()> {
        let Some(mut w) = sink.writer else {
            return Ok(());
        };
        w.commit(true)?;
        let id = w.id();
        let reader = Arc::new(SegmentFile::open(
            &self.io,
            &self.dir,
            SegmentKind::Transient,
            id,
        )?);
        self.versions.publish_segment(id, reader);
        Ok(())
    }

    /// Counts transient segments an install freed.
    fn count_transient_freed(&self, ids: &[u64]) {
        Counters::add(&self.counters.transient_segments_freed, ids.len() as u64);
    }

    /// Writes the oldest immutable memtable as a new run of L1.
    fn run_flush(&self, mem: &Arc<Memtable>) -> Result<()> {
        let result = contain_panic(|| self.flush_inner(mem));
        self.versions.lock().flushing = false;
        result
    }

    fn flush_inner(&self, mem: &Arc<Memtable>) -> Result<()> {
        let version = Arc::clone(self.versions.lock().version());
        // With no deeper level L1 is the merge level: medium pairs stay in place.
        let in_place = version.is_merge_level(1, self.opts.medium_merge_level);
        let id = self.alloc_file_id();
        // Older runs of L1 may hold the key: a flush never drops tombstones.
        let job = self.merge_job(id, IoComponent::Flush, false);
        let segments = Arc::clone(&self.snapshot().0.segments);
        let create = || self.new_transient_segment(id);
        let mut sink = TransientSink::new(&create);
        let reader = TransientReader::new(&segments);
        let policy = if in_place {
            MediumPolicy::Keep
        } else {
            MediumPolicy::ToLog(&mut sink)
        };
        let mut source = memtable_source(mem);
        let (meta, out) = job.run(&mut [&mut source as &mut dyn MergeSource], policy)?;
        self.count_merge(&out, &reader, sink.values);
        self.finish_transient(sink)?;
        let new_file = self.open_output(id, meta)?;

        let next_log = mem.next_log_id.load(Ordering::SeqCst);
        let freed = {
            let mut vs = self.versions.lock();
            let freed = match &new_file {
                Some(_) => Vec::new(),
                // Nothing survived (all tombstones dropped? never in a flush) or empty.
                None => vs.transient_of(&[id]),
            };
            let edit = VersionEdit {
                runs_added: new_file.into_iter().map(|f| (1, f)).collect(),
                segments_freed: freed.clone(),
                garbage: out.garbage.iter().map(|(&s, &b)| (s, b)).collect(),
                log_min_id: Some(next_log),
                flushed_lsn: Some(mem.max_lsn()),
                ..VersionEdit::default()
            };
            self.install(&mut vs, &edit, Some(mem))?;
            freed
        };
        self.count_transient_freed(&freed);
        Counters::add(&self.counters.flushes, 1);
        self.delete_old_logs()
    }

    /// Right after recovery: writes what the small log replayed into L1, so the files it
    /// came from can go. Without it every open would start one more log file and keep the
    /// older ones (their memtable was never flushed), and replay them all at every open.
    /// With nothing replayed, the older files hold only flushed records: the manifest
    /// moves replay past them and they are deleted. Either way an opened database keeps
    /// one small-log file, whatever the number of openings. Runs before the background
    /// threads start.
    pub(crate) fn flush_replayed(&self) -> Result<()> {
        self.writes.seal_memtable(self)?;
        let replayed = self.versions.oldest_imm();
        if let Some(mem) = replayed {
            self.versions.lock().flushing = true;
            return self.run_flush(&mem);
        }
        let current = self.writes.current_log_id();
        let older = small::list(&self.io, &self.dir, 0)?
            .iter()
            .any(|(id, _)| *id < current);
        if older {
            let mut vs = self.versions.lock();
            let edit = VersionEdit {
                log_min_id: Some(current),
                ..VersionEdit::default()
            };
            self.install(&mut vs, &edit, None)?;
        }
        self.delete_old_logs()
    }

    /// Deletes small-log files that hold only flushed data.
    fn delete_old_logs(&self) -> Result<()> {
        let min = self.versions.lock().log_min_id();
        // Their writers need no sync any more; the commit leader drops them (never take
        // `log` here: a writer stalled on this flush holds it).
        self.writes.set_small_log_min(min);
        for (id, path) in small::list(&self.io, &self.dir, 0)? {
            if id < min {
                self.io.fs().remove(&path)?;
            }
        }
        Ok(())
    }

    /// Merges every run of level `level` and level `level + 1` into one run of `level + 1`.
    fn run_compaction(&self, level: usize) -> Result<()> {
        let result = contain_panic(|| self.compact_inner(level));
        let mut vs = self.versions.lock();
        for l in [level, level + 1] {
            if let Some(b) = vs.busy.get_mut(l) {
                *b = false;
            }
        }
        result
    }

    fn compact_inner(&self, level: usize) -> Result<()> {
        let version: Arc<Version> = Arc::clone(self.versions.lock().version());
        let inputs: Vec<Arc<LevelFile>> = version
            .runs(level)
            .iter()
            .chain(version.runs(level + 1))
            .cloned()
            .collect();
        if version.runs(level).is_empty() {
            return Ok(());
        }
        let merge_here = version.is_merge_level(level + 1, self.opts.medium_merge_level);
        let id = self.alloc_file_id();
        let job = self.merge_job(id, IoComponent::Compaction, version.is_bottom(level + 1));
        let segments = Arc::clone(&self.snapshot().0.segments);
        let mut reader = TransientReader::new(&segments);
        let policy = if merge_here {
            MediumPolicy::Inline(&mut reader)
        } else {
            MediumPolicy::Keep
        };
        let mut scanners: Vec<LevelScanner> = inputs
            .iter()
            .map(|f| f.scanner(IoComponent::Compaction))
            .collect::<Result<_>>()?;
        let mut sources: Vec<&mut dyn MergeSource> = scanners
            .iter_mut()
            .map(|s| s as &mut dyn MergeSource)
            .collect();
        let (meta, out) = job.run(&mut sources, policy)?;
        drop(sources);
        self.count_merge(&out, &reader, 0);
        let new_file = self.open_output(id, meta)?;
        let input_ids: Vec<u64> = inputs.iter().map(|f| f.id()).collect();
        let freed = {
            let mut vs = self.versions.lock();
            // The inputs' transient segments go with their pairs: to the output when the
            // merge kept the pairs by pointer, nowhere when it wrote them in place (or
            // nothing survived). Runs flushed into L1 while this merge ran stay in place.
            let transient = vs.transient_of(&input_ids);
            let output = new_file.as_ref().map(|f| f.id());
            let (freed, reassigned) = match output {
                Some(out) if !merge_here => {
                    (Vec::new(), transient.iter().map(|&t| (t, out)).collect())
                }
                _ => (transient, Vec::new()),
            };
            let edit = VersionEdit {
                runs_removed: input_ids,
                runs_added: new_file.into_iter().map(|f| (level + 1, f)).collect(),
                segments_freed: freed.clone(),
                segments_reassigned: reassigned,
                garbage: out.garbage.iter().map(|(&s, &b)| (s, b)).collect(),
                ..VersionEdit::default()
            };
            self.install(&mut vs, &edit, None)?;
            freed
        };
        self.count_transient_freed(&freed);
        Counters::add(&self.counters.compactions, 1);
        Ok(())
    }

    /// Merges level after level down until all data is one run at the bottom, so every
    /// shadowed version and tombstone is dropped (and their log space becomes garbage GC
    /// can reclaim). Runs in the caller's thread, waiting for busy levels.
    pub(crate) fn compact_all(&self) -> Result<()> {
        loop {
            // The shallowest level that is not already the single bottom run.
            let next = {
                let vs = self.versions.lock();
                let v = &vs.version();
                (1..self.opts.max_levels).find(|&l| {
                    let runs = v.runs(l).len();
                    runs > 1 || (runs == 1 && !v.is_bottom(l))
                })
            };
            let Some(level) = next else { return Ok(()) };
            self.wait_background(|| {
                let mut vs = self.versions.lock();
                let idle = [level, level + 1]
                    .iter()
                    .all(|&l| !vs.busy.get(l).copied().unwrap_or(true));
                if idle {
                    for l in [level, level + 1] {
                        if let Some(b) = vs.busy.get_mut(l) {
                            *b = true;
                        }
                    }
                }
                idle
            })?;
            self.run_compaction(level)?;
            self.wake_all();
        }
    }

    /// Whether background work is pending or running.
    pub(crate) fn has_pending_work(&self) -> bool {
        if self.versions.imms_waiting() != 0 {
            return true;
        }
        if self.bg.lock().running > 0 {
            return true;
        }
        let vs = self.versions.lock();
        pick(&self.level_shapes(&vs, true)).is_some()
    }

    /// Waits until `done()` holds, or fails if the engine is poisoned or closed.
    pub(crate) fn wait_background(&self, done: impl Fn() -> bool) -> Result<()> {
        loop {
            if done() {
                return Ok(());
            }
            self.check_poison()?;
            let mut g = self.bg.lock();
            if g.shutdown {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            self.bg_cv.wait_for(&mut g, Duration::from_millis(20));
        }
    }
}
