//! Background scheduling: the threads that run flushes, compactions and GC passes.
//!
//! Owns: when work runs: each background thread claims the next job (the oldest immutable
//! memtable first, then the level the picker scores highest whose levels are idle), runs
//! it, and poisons the engine if it fails; the GC thread runs a pass every `gc_interval`
//! (`Db::gc` runs its passes in the caller's thread); callers wait here for pending work.
//! Never: does the work itself (`compaction::worker`, `gc::job`) or installs anything.

use crate::compaction::picker::{level_targets, pick, LevelShape, MergePick};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::stats::Counters;
use crate::version_set::VersionState;
use std::sync::Arc;
use std::time::Duration;

/// A unit of background work.
enum Work {
    Flush(Arc<Memtable>),
    Compact(MergePick),
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
                Work::Compact(pick) => self.run_compaction(*pick),
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
        let chosen = pick(&self.level_shapes(&vs, false))?;
        let level = chosen.source();
        for l in [level, level + 1] {
            if let Some(b) = vs.busy.get_mut(l) {
                *b = true;
            }
        }
        Some(Work::Compact(chosen))
    }

    /// The target size of each level, L1 first (see `compaction::picker::level_targets`).
    pub(crate) fn level_targets(&self, vs: &VersionState) -> Vec<u64> {
        level_targets(
            self.opts.memtable_size as u64,
            self.opts.growth_factor,
            vs.flushed_run_bytes,
            self.opts.max_levels,
        )
    }

    /// What the picker sees. L1 is due when its runs reach the growth factor or its bytes
    /// its target; any level above the last when the searches its runs wasted, weighed
    /// in bytes (`Options::merge_bytes_per_wasted_search`), reach what its merge rewrites
    /// (its own bytes and what the merge rewrites of the next level); L1's runs are
    /// merged into one when that waste reaches what rewriting them alone costs.
    /// A level counts its medium pairs at pointer size, plus their full value
    /// size when the next level is the merge level: merging will write them in full
    /// (Parallax §3.3), and counting them keeps the growth factor between levels.
    fn level_shapes(&self, vs: &VersionState, ignore_busy: bool) -> Vec<LevelShape> {
        let v = &vs.version();
        let targets = self.level_targets(vs);
        (1..=self.opts.max_levels)
            .map(|l| {
                let mut bytes = v.level_bytes(l);
                if v.is_merge_level(l + 1, self.opts.medium_merge_level) {
                    bytes += v.level_medium_bytes(l);
                }
                // A merge into the merge level writes in full the medium values its runs
                // still hold by pointer (after the tree grew a level, or a deeper one emptied).
                let mut rewritten_bytes = v.level_bytes(l);
                if v.is_merge_level(l, self.opts.medium_merge_level) {
                    rewritten_bytes += v.level_medium_bytes(l);
                }
                LevelShape {
                    bytes,
                    rewritten_bytes,
                    target: targets.get(l - 1).copied().unwrap_or(u64::MAX),
                    busy: !ignore_busy && vs.busy.get(l).copied().unwrap_or(true),
                    runs: v.runs(l).len(),
                    run_limit: if l == 1 {
                        self.opts.growth_factor as usize
                    } else {
                        0
                    },
                    runs_since_merge: if l == 1 {
                        vs.l1_flushes
                    } else {
                        v.runs(l).len()
                    },
                    dead_bytes: if l == 1 { vs.l1_dead_estimate } else { 0 },
                    wasted_bytes: v
                        .runs(l)
                        .iter()
                        .map(|f| f.wasted_searches())
                        .fold(0, u64::saturating_add)
                        .saturating_mul(self.opts.merge_bytes_per_wasted_search),
                }
            })
            .collect()
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

    /// The garbage collector's thread: a pass every `gc_interval`, until shutdown.
    pub(crate) fn gc_loop(&self) {
        let mut ticks: u64 = 0;
        loop {
            ticks += 1;
            {
                let deadline = std::time::Instant::now() + self.opts.gc_interval;
                let mut g = self.bg.lock();
                // The condvar is shared with flushes and writers: wake for the deadline or
                // shutdown, not for every notification (`Db::gc` runs its passes in the
                // caller's thread).
                while !g.shutdown && std::time::Instant::now() < deadline {
                    self.bg_cv.wait_until(&mut g, deadline);
                }
                if g.shutdown {
                    return;
                }
            }
            if self.poison.lock().is_some() {
                continue;
            }
            if let (Some(limit), true) = (self.opts.space_amp_limit, ticks.is_multiple_of(10)) {
                if self.enforce_space_limit(limit).is_err() {
                    Counters::add(&self.counters.gc_errors, 1);
                }
            }
            match self.gc_pass(self.opts.gc_threshold) {
                // Closing (or the keyspace dropped) under the pass: not a failure.
                Ok(_) | Err(crate::error::Error::Closed) => {}
                Err(e) => {
                    // Failures that endanger writes poisoned the engine inside the pass; others
                    // (a damaged segment) are reported by reads and by `check`.
                    log::warn!(
                        "{}: garbage collection pass failed: {e}",
                        self.dir.display()
                    );
                    Counters::add(&self.counters.gc_errors, 1);
                }
            }
        }
    }
}
