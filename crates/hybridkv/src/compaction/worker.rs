//! Background threads: flush immutable memtables into L1 and merge levels down, then
//! install each result (manifest first, then the readers' version, then file deletion).

use super::job::{level_source, memtable_source, MergeJob, MergeOutcome};
use super::picker::{pick, LevelShape};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::io::IoComponent;
use crate::level::{LevelFile, LevelMeta};
use crate::log::small;
use crate::manifest::version::Version;
use crate::memtable::Memtable;
use crate::stats::Counters;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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
        let oldest = self.read.read().sv.imms.last().cloned();
        let mut vs = self.versions.lock();
        if let Some(mem) = oldest {
            if !vs.busy.get(1).copied().unwrap_or(true) {
                if let Some(b) = vs.busy.get_mut(1) {
                    *b = true;
                }
                return Some(Work::Flush(mem));
            }
        }
        let shapes: Vec<LevelShape> = (1..=self.opts.max_levels)
            .map(|l| LevelShape {
                bytes: vs.version.level(l).map_or(0, |f| f.file_len()),
                target: self.opts.level_target_bytes(l),
                busy: vs.busy.get(l).copied().unwrap_or(true),
            })
            .collect();
        let level = pick(&shapes)?;
        for l in [level, level + 1] {
            if let Some(b) = vs.busy.get_mut(l) {
                *b = true;
            }
        }
        Some(Work::Compact(level))
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

    fn count_merge(&self, out: &MergeOutcome) {
        let c = &self.counters;
        Counters::add(&c.compaction_entries_in, out.entries_in);
        Counters::add(&c.dropped_shadowed, out.dropped_shadowed);
        Counters::add(&c.dropped_tombstones, out.dropped_tombstones);
    }

    /// Merges the oldest immutable memtable into L1.
    fn run_flush(&self, mem: &Arc<Memtable>) -> Result<()> {
        let result = self.flush_inner(mem);
        self.release(&[1]);
        result
    }

    fn flush_inner(&self, mem: &Arc<Memtable>) -> Result<()> {
        let version = Arc::clone(&self.versions.lock().version);
        let old = version.level(1).cloned();
        let id = self.alloc_file_id();
        let job = MergeJob {
            io: &self.io,
            dir: &self.dir,
            file_id: id,
            component: IoComponent::Flush,
            leaf_size: self.opts.leaf_size,
            index_size: self.opts.index_node_size,
            drop_tombstones: version.is_bottom(1),
        };
        let mut newer = memtable_source(mem);
        let mut older = level_source(old.as_ref(), IoComponent::Flush)?;
        let (meta, out) = job.run(&mut newer, older.as_mut())?;
        self.count_merge(&out);
        let new_file = self.open_output(id, meta)?;

        let next_log = mem.next_log_id.load(Ordering::SeqCst);
        let new_version = {
            let mut vs = self.versions.lock();
            let v = Arc::new(vs.version.with_level(1, new_file));
            let mut state = self.manifest_state(&vs, &v);
            state.log_min_id = next_log.max(vs.log_min_id);
            state.flushed_lsn = mem.max_lsn().max(vs.flushed_lsn);
            state.store(&self.io, &self.dir)?;
            vs.log_min_id = state.log_min_id;
            vs.flushed_lsn = state.flushed_lsn;
            vs.version = Arc::clone(&v);
            self.publish_version(&v, Some(mem));
            v
        };
        if let Some(f) = old {
            f.mark_obsolete();
        }
        drop(new_version);
        Counters::add(&self.counters.flushes, 1);
        self.delete_old_logs()
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
        let result = self.compact_inner(level);
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
        let id = self.alloc_file_id();
        let job = MergeJob {
            io: &self.io,
            dir: &self.dir,
            file_id: id,
            component: IoComponent::Compaction,
            leaf_size: self.opts.leaf_size,
            index_size: self.opts.index_node_size,
            drop_tombstones: version.is_bottom(level + 1),
        };
        let mut newer = src.scanner(IoComponent::Compaction)?;
        let mut older = level_source(dst.as_ref(), IoComponent::Compaction)?;
        let (meta, out) = job.run(&mut newer, older.as_mut())?;
        self.count_merge(&out);
        let new_file = self.open_output(id, meta)?;
        {
            let mut vs = self.versions.lock();
            let v = Arc::new(
                vs.version
                    .with_level(level, None)
                    .with_level(level + 1, new_file),
            );
            let state = self.manifest_state(&vs, &v);
            state.store(&self.io, &self.dir)?;
            vs.version = Arc::clone(&v);
            self.publish_version(&v, None);
        }
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
        let shapes: Vec<LevelShape> = (1..=self.opts.max_levels)
            .map(|l| LevelShape {
                bytes: vs.version.level(l).map_or(0, |f| f.file_len()),
                target: self.opts.level_target_bytes(l),
                busy: false,
            })
            .collect();
        pick(&shapes).is_some()
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
