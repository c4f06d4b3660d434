//! Background threads: flush immutable memtables into L1 and merge levels down, then
//! install each result (manifest first, then the readers' version, then file deletion).

use super::job::{level_source, memtable_source, MediumPolicy, MergeJob, MergeOutcome};
use super::picker::{pick, LevelShape};
use super::transient::{TransientReader, TransientSink};
use crate::engine::Engine;
use crate::engine::{SegmentMeta, VersionState};
use crate::error::{Error, Result};
use crate::io::IoComponent;
use crate::level::{LevelFile, LevelMeta};
use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};
use crate::log::small;
use crate::manifest::version::Version;
use crate::manifest::SEGMENT_TRANSIENT;
use crate::memtable::Memtable;
use crate::stats::Counters;
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

    /// Picks the next job and marks its levels busy. Flushes come first.
    fn claim_work(&self) -> Option<Work> {
        // Read the oldest memtable under the versions lock: a flush removes its memtable
        // from the super version under this lock, before it clears L1's busy flag, so a
        // memtable seen here with L1 idle has not been flushed yet. (Reading it before the
        // lock let a just-flushed memtable be flushed a second time, over newer data.)
        let mut vs = self.versions.lock();
        let oldest = self.read.read().sv.imms.last().cloned();
        if let Some(mem) = oldest {
            if !vs.busy.get(1).copied().unwrap_or(true) {
                if let Some(b) = vs.busy.get_mut(1) {
                    *b = true;
                }
                return Some(Work::Flush(mem));
            }
        }
        let shapes = self.level_shapes(&vs, false);
        let level = pick(&shapes)?;
        for l in [level, level + 1] {
            if let Some(b) = vs.busy.get_mut(l) {
                *b = true;
            }
        }
        Some(Work::Compact(level))
    }

    /// What the picker sees. A level counts its medium pairs at pointer size, except when
    /// the next level is the merge level: merging will write them in full, so they count at
    /// full size (Parallax §3.3), keeping the growth factor between levels.
    fn level_shapes(&self, vs: &VersionState, ignore_busy: bool) -> Vec<LevelShape> {
        (1..=self.opts.max_levels)
            .map(|l| {
                let file = vs.version.level(l);
                let mut bytes = file.map_or(0, |f| f.file_len());
                if vs
                    .version
                    .is_merge_level(l + 1, self.opts.medium_merge_level)
                {
                    bytes += file.map_or(0, |f| f.medium_bytes());
                }
                LevelShape {
                    bytes,
                    target: self.opts.level_target_bytes(l),
                    busy: !ignore_busy && vs.busy.get(l).copied().unwrap_or(true),
                }
            })
            .collect()
    }

    fn release(&self, levels: &[usize]) {
        let mut vs = self.versions.lock();
        for &l in levels {
            if let Some(b) = vs.busy.get_mut(l) {
                *b = false;
            }
        }
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

    /// Adds a merge's garbage to the segment counters (under the versions lock, before the
    /// manifest is written, so the counts are as durable as the merge itself).
    fn add_garbage(vs: &mut VersionState, out: &MergeOutcome) {
        for (seg, bytes) in &out.garbage {
            // A segment freed by GC may still be named by shadowed pointers: ignore it.
            if let Some(m) = vs.segments.get_mut(seg) {
                m.garbage += bytes;
            }
        }
    }

    fn count_merge(&self, out: &MergeOutcome) {
        let c = &self.counters;
        Counters::add(&c.compaction_entries_in, out.entries_in);
        Counters::add(&c.dropped_shadowed, out.dropped_shadowed);
        Counters::add(&c.dropped_tombstones, out.dropped_tombstones);
    }

    /// Merges the oldest immutable memtable into L1.
    fn run_flush(&self, mem: &Arc<Memtable>) -> Result<()> {
        let result = contain_panic(|| self.flush_inner(mem));
        self.release(&[1]);
        result
    }

    /// Registers a new transient segment owned by `level` (before its file exists, so no
    /// manifest written meanwhile can forget it) and creates it.
    fn new_transient_segment(&self, level: u32) -> Result<SegmentWriter> {
        let id = {
            let mut vs = self.versions.lock();
            let id = self.alloc_file_id();
            vs.segments.insert(
                id,
                SegmentMeta {
                    kind: SEGMENT_TRANSIENT,
                    level,
                    garbage: 0,
                },
            );
            id
        };
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
        self.publish_segments(|set| {
            set.insert(id, reader);
        });
        Ok(())
    }

    /// Transient segments owned by any of `levels`.
    fn transient_of(vs: &VersionState, levels: &[u32]) -> Vec<u64> {
        vs.segments
            .iter()
            .filter(|(_, m)| m.kind == SEGMENT_TRANSIENT && levels.contains(&m.level))
            .map(|(&id, _)| id)
            .collect()
    }

    /// Drops freed transient segments from the readers' set; files go when unreferenced.
    fn release_transient(&self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        self.publish_segments(|set| {
            for id in ids {
                if let Some(seg) = set.remove(id) {
                    seg.mark_obsolete();
                }
            }
        });
        Counters::add(&self.counters.transient_segments_freed, ids.len() as u64);
    }

    fn count_medium(&self, reader: &TransientReader<'_>, sink_values: u64) {
        let c = &self.counters;
        Counters::add(&c.medium_values_merged, reader.values);
        Counters::add(&c.medium_bytes_merged, reader.bytes_read);
        Counters::add(&c.medium_values_logged, sink_values);
    }

    fn flush_inner(&self, mem: &Arc<Memtable>) -> Result<()> {
        let version = Arc::clone(&self.versions.lock().version);
        let old = version.level(1).cloned();
        let merge_here = version.is_merge_level(1, self.opts.medium_merge_level);
        let id = self.alloc_file_id();
        let job = self.merge_job(id, IoComponent::Flush, version.is_bottom(1));
        let segments = Arc::clone(&self.snapshot().0.segments);
        let create = || self.new_transient_segment(1);
        let mut sink = TransientSink::new(&create);
        let mut reader = TransientReader::new(&segments);
        let policy = if merge_here {
            MediumPolicy::Inline(&mut reader)
        } else {
            MediumPolicy::ToLog(&mut sink)
        };
        let mut newer = memtable_source(mem);
        let mut older = level_source(old.as_ref(), IoComponent::Flush)?;
        let (meta, out) = job.run(&mut newer, older.as_mut(), policy)?;
        self.count_merge(&out);
        self.count_medium(&reader, sink.values);
        self.finish_transient(sink)?;
        let new_file = self.open_output(id, meta)?;

        let next_log = mem.next_log_id.load(Ordering::SeqCst);
        let freed = {
            let mut vs = self.versions.lock();
            let freed = if merge_here {
                Self::transient_of(&vs, &[1])
            } else {
                Vec::new()
            };
            for f in &freed {
                vs.segments.remove(f);
            }
            let v = Arc::new(vs.version.with_level(1, new_file));
            Self::add_garbage(&mut vs, &out);
            let mut state = self.manifest_state(&vs, &v);
            state.log_min_id = next_log.max(vs.log_min_id);
            state.flushed_lsn = mem.max_lsn().max(vs.flushed_lsn);
            state.store(&self.io, &self.dir)?;
            vs.log_min_id = state.log_min_id;
            vs.flushed_lsn = state.flushed_lsn;
            vs.version = Arc::clone(&v);
            self.publish_version(&v, Some(mem));
            freed
        };
        self.release_transient(&freed);
        if let Some(f) = old {
            f.mark_obsolete();
        }
        Counters::add(&self.counters.flushes, 1);
        self.delete_old_logs()
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

    /// Deletes small-log files that hold only flushed data.
    fn delete_old_logs(&self) -> Result<()> {
        let min = self.versions.lock().log_min_id;
        for (id, path) in small::list(&self.io, &self.dir, 0)? {
            if id < min {
                self.io.fs().remove(&path)?;
            }
        }
        Ok(())
    }

    /// Merges level `level` into `level + 1`.
    fn run_compaction(&self, level: usize) -> Result<()> {
        let result = contain_panic(|| self.compact_inner(level));
        self.release(&[level, level + 1]);
        result
    }

    fn compact_inner(&self, level: usize) -> Result<()> {
        let version: Arc<Version> = Arc::clone(&self.versions.lock().version);
        let (Some(src), dst) = (
            version.level(level).cloned(),
            version.level(level + 1).cloned(),
        ) else {
            return Ok(());
        };
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
        let mut newer = src.scanner(IoComponent::Compaction)?;
        let mut older = level_source(dst.as_ref(), IoComponent::Compaction)?;
        let (meta, out) = job.run(&mut newer, older.as_mut(), policy)?;
        self.count_merge(&out);
        self.count_medium(&reader, 0);
        let new_file = self.open_output(id, meta)?;
        let (src_level, dst_level) = (level as u32, level as u32 + 1);
        let freed = {
            let mut vs = self.versions.lock();
            let freed = if merge_here {
                Self::transient_of(&vs, &[src_level, dst_level])
            } else {
                // Transient segments travel down with their level.
                for m in vs.segments.values_mut() {
                    if m.kind == SEGMENT_TRANSIENT && m.level == src_level {
                        m.level = dst_level;
                    }
                }
                Vec::new()
            };
            for f in &freed {
                vs.segments.remove(f);
            }
            let v = Arc::new(
                vs.version
                    .with_level(level, None)
                    .with_level(level + 1, new_file),
            );
            Self::add_garbage(&mut vs, &out);
            let state = self.manifest_state(&vs, &v);
            state.store(&self.io, &self.dir)?;
            vs.version = Arc::clone(&v);
            self.publish_version(&v, None);
            freed
        };
        self.release_transient(&freed);
        src.mark_obsolete();
        if let Some(d) = dst {
            d.mark_obsolete();
        }
        Counters::add(&self.counters.compactions, 1);
        Ok(())
    }

    /// Whether background work is pending or running.
    pub(crate) fn has_pending_work(&self) -> bool {
        if !self.read.read().sv.imms.is_empty() {
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
