//! Flush and compaction jobs: write an immutable memtable as a new run of L1, merge a
//! level into the next, and install each result through the version set (manifest first,
//! then the readers' version, then file deletion). `background` decides when they run.

use super::job::{memtable_source, CacheFill, MediumPolicy, MergeJob, MergeOutcome, MergeSource};
use super::picker::MergePick;
use super::transient::{TransientReader, TransientSink};
use crate::bucket::BucketTable;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::io::IoComponent;
use crate::level::reader::LevelScanner;
use crate::level::{LevelFile, LevelMeta};
use crate::log::large::{SegmentFile, SegmentKind, SegmentSet, SegmentWriter};
use crate::log::ptr::LOG_PTR_SIZE;
use crate::manifest::edit::{RunPlace, VersionEdit};
use crate::manifest::version::Version;
use crate::memtable::Memtable;
use crate::range_delete::RangeTombstones;
use crate::stats::Counters;
use crate::value::LevelValue;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

/// A flush puts at most this share of the cache's budget into it: 1/8 for its leaves, 1/8
/// for its medium records (`Options::prepopulate_cache`).
const FLUSH_FILL_SHARE: u64 = 8;

/// Keys of a flush looked up in L1 and L2 to estimate what the new run shadows.
const SHADOW_SAMPLE: usize = 32;

impl Engine {
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
        Counters::add(&c.dropped_by_range, out.dropped_by_range);
        Counters::add(&c.deltas_folded, out.deltas_folded);
        Counters::add(&c.medium_values_merged, reader.values());
        Counters::add(&c.medium_bytes_merged, reader.bytes_read());
        Counters::add(&c.medium_values_logged, logged);
    }

    fn merge_job<'a>(
        &'a self,
        file_id: u64,
        component: IoComponent,
        drop_tombstones: bool,
        segments: &'a SegmentSet,
        ranges: RangeTombstones,
        buckets: &'a BucketTable,
    ) -> MergeJob<'a> {
        MergeJob {
            buckets,
            bucket_flush: None,
            opts: &self.opts,
            io: &self.io,
            dir: &self.dir,
            file_id,
            component,
            leaf_size: self.opts.leaf_size,
            index_size: self.opts.index_node_size,
            drop_tombstones,
            segments,
            ranges,
            // A flush adds new leaves: an eighth of the cache at most, so that one flush
            // of a memtable large against the cache does not push out all it holds.
            cache_fill: match (self.opts.prepopulate_cache, component) {
                (false, _) => CacheFill::Off,
                (true, IoComponent::Flush) => CacheFill::All {
                    limit: self.cache.capacity() / FLUSH_FILL_SHARE,
                },
                (true, _) => CacheFill::Inherit,
            },
            cache: &self.cache,
        }
    }

    /// Registers a new transient segment used by run `owner` (before its file exists, so
    /// no manifest written meanwhile can forget it) and creates it.
    fn new_transient_segment(&self, owner: u64) -> Result<SegmentWriter> {
        let id = self
            .versions
            .register_segment(SegmentKind::Transient, owner);
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
        let reader = Arc::new(
            SegmentFile::open(&self.io, &self.dir, SegmentKind::Transient, id)?
                .with_cache(Arc::clone(&self.cache)),
        );
        self.versions.publish_segment(id, reader);
        Ok(())
    }

    /// Counts transient segments an install freed.
    fn count_transient_freed(&self, ids: &[u64]) {
        Counters::add(&self.counters.transient_segments_freed, ids.len() as u64);
    }

    /// Writes the oldest immutable memtable as a new run of L1.
    pub(crate) fn run_flush(&self, mem: &Arc<Memtable>) -> Result<()> {
        let result = contain_panic(|| self.flush_inner(mem));
        self.versions.lock().flushing = false;
        result
    }

    fn flush_inner(&self, mem: &Arc<Memtable>) -> Result<()> {
        let version = Arc::clone(self.versions.lock().version());
        // With no deeper level L1 is the merge level: medium pairs stay in place.
        let in_place = version.is_merge_level(1, self.opts.medium_merge_level);
        let output = self.versions.begin_output();
        let id = output.id;
        // Older runs of L1 may hold the key: a flush never drops tombstones.
        let segments = Arc::clone(&self.snapshot().0.segments);
        // The memtable's own range tombstones delete its older versions here; those of
        // the levels are older than everything in it.
        let tombstones = mem.range_tombstones();
        let mut ranges = RangeTombstones::default();
        ranges.extend_visible(&tombstones, u64::MAX);
        let applied = ranges.max_lsn();
        let mut job = self.merge_job(
            id,
            IoComponent::Flush,
            false,
            &segments,
            ranges,
            &version.buckets,
        );
        // Delta separation: the deltas the flush cannot fold go to their buckets. Its new
        // bucket segments count as live (for `check` and `space`) from their creation
        // until the install names them, like the run.
        let bucket_ids = RefCell::new(Vec::new());
        let new_bucket_id = || {
            let id = self.versions.begin_bucket_output();
            bucket_ids.borrow_mut().push(id);
            id
        };
        let bucket_flush = RefCell::new(self.buckets.begin_flush(&version.buckets, &new_bucket_id));
        if self.opts.delta_separation {
            job.bucket_flush = Some(&bucket_flush);
        }
        let result = (|| {
            let create = || self.new_transient_segment(id);
            let mut sink = TransientSink::new(&create);
            // The medium records as much again as the leaves.
            if let CacheFill::All { limit } = job.cache_fill {
                sink = sink.with_cache(&self.cache, limit);
            }
            let reader = TransientReader::new(&segments);
            let policy = if in_place {
                MediumPolicy::Keep
            } else {
                MediumPolicy::ToLog(&mut sink)
            };
            let mut source = memtable_source(mem, SHADOW_SAMPLE);
            let (meta, out) = job.run(&mut [&mut source as &mut dyn MergeSource], policy)?;
            drop(job);
            self.count_merge(&out, &reader, sink.values);
            self.finish_transient(sink)?;
            let appended = bucket_flush.borrow().records();
            let buckets = bucket_flush.borrow_mut().finish()?;
            Counters::add(&self.counters.bucket_records_written, appended);
            let new_file = self.open_output(id, meta)?;
            let shadowed = new_file.as_ref().map_or(0, |f| {
                let below: Vec<Arc<LevelFile>> = version
                    .runs(1)
                    .iter()
                    .chain(version.runs(2))
                    .cloned()
                    .collect();
                Self::estimate_shadowed(source.samples(), &below, f.entries())
            });

            // What a flush of a full memtable of distinct keys adds to L1, as the picker
            // counts it (its medium values in full while L2 is the merge level: merging
            // into it will write them): this run's bytes per entry times the versions a
            // full memtable holds (this memtable's versions per byte times the budget). So
            // a memtable whose versions overwrite one another (an update-heavy workload
            // keeps one entry of many) does not shrink the targets: the levels below still
            // hold every key. Only a memtable at least half full counts (a small one,
            // replayed at open or flushed on request, says little).
            let full = mem.size() >= self.opts.memtable_size / 2;
            let run_bytes = new_file
                .as_ref()
                .filter(|f| full && f.entries() > 0)
                .map_or(0, |f| {
                    let medium_counted = self
                        .versions
                        .lock()
                        .version()
                        .is_merge_level(2, self.opts.medium_merge_level);
                    // Node bytes, as the picker counts a level's (`level_bytes`): a
                    // small run's footer block and filter unit, near-fixed costs, would
                    // inflate the bytes per entry the scaling multiplies. So would its
                    // root index node (12 KiB beside the 17 KiB of leaves of a run of 700
                    // YCSB pairs), which a full run has once too.
                    let root = f.root_index_bytes();
                    let bytes = f.node_bytes().saturating_sub(root)
                        + if medium_counted { f.medium_bytes() } else { 0 };
                    crate::compaction::picker::full_run_bytes(
                        bytes,
                        f.entries(),
                        mem.len() as u64,
                        mem.size() as u64,
                        self.opts.memtable_size as u64,
                    )
                    .saturating_add(root)
                });
            let next_log = mem.next_log_id.load(Ordering::SeqCst);
            if self.writes.keyspace_count() > 1 {
                // Another keyspace may hold the rest of a batch this memtable holds part
                // of: the logs holding it must not lose their tails once this part is in L1.
                self.writes
                    .sync_sealed_below(next_log)
                    .inspect_err(|e| self.set_poison(e))?;
            }
            let freed = {
                let mut vs = self.versions.lock();
                let freed = match &new_file {
                    Some(_) => Vec::new(),
                    // Nothing survived (all tombstones dropped? never in a flush) or empty.
                    None => vs.transient_of(&[id]),
                };
                let edit = VersionEdit {
                    runs_added: new_file
                        .into_iter()
                        .map(|f| (1, f, RunPlace::Newest))
                        .collect(),
                    segments_freed: freed.clone(),
                    garbage: out.garbage.iter().map(|(&s, &b)| (s, b)).collect(),
                    log_min_id: Some(next_log),
                    flushed_lsn: Some(mem.sealed_lsn.load(Ordering::SeqCst)),
                    range_tombstones_added: tombstones,
                    range_applied_through: applied,
                    buckets: buckets.map(Arc::new),
                    ..VersionEdit::default()
                };
                let stored = self.install(&mut vs, &edit, Some(mem));
                if let Some(t) = &edit.buckets {
                    // Kept even if the store failed: the new manifest may be in effect all
                    // the same (a failed directory sync after its rename; only a reopen
                    // tells), so every segment it names stays; the next open deletes those
                    // the manifest it reads does not name.
                    t.installed();
                }
                stored?;
                // A flush that wrote no run (nothing survived) adds none.
                vs.l1_flushes += edit.runs_added.len();
                vs.l1_dead_estimate = vs.l1_dead_estimate.saturating_add(shadowed);
                vs.flushed_run_bytes =
                    crate::compaction::picker::average_run_bytes(vs.flushed_run_bytes, run_bytes);
                freed
            };
            self.count_transient_freed(&freed);
            Counters::add(&self.counters.flushes, 1);
            log::info!(
                "{}: flushed a memtable ({} entries) into L1 ({} bytes of level file)",
                self.dir.display(),
                mem.len(),
                meta.map_or(0, |m| m.file_len)
            );
            Ok(())
        })();
        for &b in bucket_ids.borrow().iter() {
            self.versions.end_output(b);
        }
        result?;
        if let Err(e) = self.collect_buckets() {
            // A failed collection leaves the bucket as it was (its new segments are
            // deleted); only a failed install, which poisons, fails the flush.
            Counters::add(&self.counters.gc_errors, 1);
            log::warn!(
                "{}: delta bucket collection failed: {e}",
                self.dir.display()
            );
            self.check_poison()?;
        }
        self.delete_old_logs()
    }

    /// After a flush: collects the delta buckets that grew past their size or their
    /// segment count, at most 2 + (buckets / 32) per flush, so collection keeps pace with
    /// a flush that touched every bucket (the flush thread is the only one that changes
    /// bucket tables, so nothing appends to a bucket while it is rewritten).
    fn collect_buckets(&self) -> Result<()> {
        let budget = 2 + self.versions.lock().version().buckets.slots.len() / 32;
        for _ in 0..budget {
            let version = Arc::clone(self.versions.lock().version());
            let size = self.opts.delta_bucket_size;
            let Some(slot) = self.buckets.due_for_collection(&version.buckets, size) else {
                return Ok(());
            };
            let ids = RefCell::new(Vec::new());
            let new_id = || {
                let id = self.versions.begin_bucket_output();
                ids.borrow_mut().push(id);
                id
            };
            let mut live = |keys: &[&[u8]]| crate::read::bucket_ranges_many(&version, keys);
            let op = self.opts.merge_operator.as_deref();
            let result = (|| {
                let (table, done, grown) = crate::bucket::gc::collect(
                    &self.buckets,
                    &version.buckets,
                    slot,
                    size,
                    op,
                    &mut live,
                    &new_id,
                )?;
                let written = if done.split { 2 } else { 1 };
                let new_slots: Vec<_> = table
                    .slots
                    .iter()
                    .skip(slot)
                    .take(written)
                    .cloned()
                    .collect();
                let mut vs = self.versions.lock();
                let table = Arc::new(table);
                let edit = VersionEdit {
                    buckets: Some(Arc::clone(&table)),
                    ..VersionEdit::default()
                };
                let stored = self.install(&mut vs, &edit, None);
                // Kept even if the store failed (see the flush's install above).
                table.installed();
                stored?;
                drop(vs);
                self.buckets.note_collected(&new_slots);
                Counters::add(&self.counters.bucket_gc_passes, 1);
                // KDSep: a key whose deltas grew past the threshold is folded into its base
                // (a put through the one commit path; skipped if the keyspace is busy).
                for key in &grown {
                    if self.fold_grown_deltas(key) {
                        Counters::add(&self.counters.bucket_keys_folded, 1);
                    }
                }
                Counters::add(&self.counters.bucket_splits, u64::from(done.split));
                Counters::add(
                    &self.counters.bucket_records_dropped,
                    done.records_in.saturating_sub(done.records_out),
                );
                log::info!(
                    "{}: collected a delta bucket: {} records ({} bytes) -> {} ({} bytes){}",
                    self.dir.display(),
                    done.records_in,
                    done.bytes_in,
                    done.records_out,
                    done.bytes_out,
                    if done.split { ", split in two" } else { "" }
                );
                Ok(())
            })();
            for &id in ids.borrow().iter() {
                self.versions.end_output(id);
            }
            result?;
        }
        Ok(())
    }

    /// Bytes of older versions (in L1's runs and L2) that a flushed memtable shadows,
    /// estimated from a sample of its keys (`SHADOW_SAMPLE`, kept while the flush read
    /// them) looked up there: the mean size of the version
    /// each sampled key shadows (0 if none), times the new run's entries. The picker merges
    /// L1 into L2 once a third of what that merge would rewrite is dead this way, so a
    /// database that is overwritten but never fills L1 does not keep every old version (a
    /// failed lookup counts as a miss: the estimate only schedules work).
    fn estimate_shadowed(keys: &[Vec<u8>], older: &[Arc<LevelFile>], new_entries: u64) -> u64 {
        if older.is_empty() || keys.is_empty() {
            return 0;
        }
        let shadowed: u64 = keys
            .iter()
            .map(|k| {
                older
                    .iter()
                    .find_map(|run| run.get(k).ok().flatten())
                    .map_or(0, |(_, v)| {
                        let value = match v {
                            LevelValue::Inline(b) => b.len() as u64,
                            LevelValue::Overflow { len, .. } => u64::from(len),
                            LevelValue::Medium(_) | LevelValue::Large(_) => LOG_PTR_SIZE as u64,
                            LevelValue::Tombstone => 0,
                            LevelValue::Deltas(b) => b.len() as u64,
                            LevelValue::DeltasOverflow { len, .. } => u64::from(len),
                        };
                        k.len() as u64 + value
                    })
            })
            .sum();
        shadowed.saturating_mul(new_entries) / keys.len() as u64
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
        self.delete_old_logs()
    }

    /// Deletes small-log files that hold only flushed data (of every keyspace), first
    /// moving the replay start of each keyspace with nothing unflushed to the current
    /// file (an idle keyspace must not keep every file since its last flush).
    fn delete_old_logs(&self) -> Result<()> {
        self.advance_idle_keyspaces()?;
        let own = self.versions.lock().log_min_id();
        self.writes.set_log_min(self.keyspace, own);
        self.writes.delete_obsolete_logs()
    }

    /// Moves the replay start of every keyspace whose memtables are empty to the current
    /// small-log file. Safe because such a keyspace's every write is in its levels: a
    /// write that arrives meanwhile has a later LSN than the one recorded, so replay keeps
    /// it (and a flush of it installs a later start, which the edit's maximum keeps).
    fn advance_idle_keyspaces(&self) -> Result<()> {
        let start = self.writes.current_log();
        for env in self.writes.envs() {
            if env.is_shutdown() {
                continue; // closing or being dropped
            }
            // Its slot, so that no commit into it is half done (one busy is not idle).
            let Some(_quiet) = self.writes.try_hold(env.keyspace()) else {
                continue;
            };
            let versions = env.versions();
            {
                let (sv, _) = versions.snapshot();
                if !sv.mem.is_empty() || !sv.imms.is_empty() {
                    continue;
                }
            }
            let mut vs = versions.lock();
            // Only one that holds the small log back (the oldest replay start) is moved:
            // each move stores a manifest. The others' turn comes at a later flush, once
            // theirs is the oldest.
            if vs.log_min_id() >= start.id || vs.log_min_id() > self.writes.small_log_min() {
                continue;
            }
            let edit = VersionEdit {
                log_min_id: Some(start.id),
                flushed_lsn: Some(start.first_lsn.saturating_sub(1)),
                ..VersionEdit::default()
            };
            let stored = versions.log_and_apply(&mut vs, &edit, None);
            let log_min = vs.log_min_id();
            drop(vs);
            match stored {
                Ok(_) => {
                    self.writes.set_log_min(env.keyspace(), log_min);
                }
                // That keyspace's manifest is in doubt: it refuses writes from now on.
                // This keyspace's own flush succeeded, so its error is not this one's.
                Err(e) if env.keyspace() != self.keyspace => {
                    log::warn!(
                        "{}: moving the replay start of an idle keyspace failed: {e}",
                        env.dir().display()
                    );
                    env.set_poison(&e);
                }
                Err(e) => {
                    env.set_poison(&e);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Runs the merge `pick` names. [`MergePick::Down`]: every run of level `level` and
    /// level `level + 1` into one run of `level + 1`; at the deepest level (`max_levels`),
    /// its run rewritten in place (to drop what range tombstones delete).
    /// [`MergePick::Within`]: every run of L1 into one run of L1, below the runs flushed
    /// meanwhile. Levels `level` and `level + 1` are busy until it ends, whatever it did.
    pub(crate) fn run_compaction(&self, pick: MergePick) -> Result<()> {
        let level = pick.source();
        let result = contain_panic(|| self.compact_inner(pick));
        let mut vs = self.versions.lock();
        for l in [level, level + 1] {
            if let Some(b) = vs.busy.get_mut(l) {
                *b = false;
            }
        }
        result
    }

    fn compact_inner(&self, pick: MergePick) -> Result<()> {
        let version: Arc<Version> = Arc::clone(self.versions.lock().version());
        let level = pick.source();
        // The output level: the next one, or this one at the deepest level or for a merge
        // within the level.
        let into = match pick {
            MergePick::Down(l) => (l + 1).min(self.opts.max_levels),
            MergePick::Within(l) => l,
        };
        let below: &[Arc<LevelFile>] = if into == level {
            &[]
        } else {
            version.runs(into)
        };
        let inputs: Vec<Arc<LevelFile>> =
            version.runs(level).iter().chain(below).cloned().collect();
        if version.runs(level).is_empty() {
            return Ok(());
        }
        let merge_here = version.is_merge_level(into, self.opts.medium_merge_level);
        let output = self.versions.begin_output();
        let id = output.id;
        let segments = Arc::clone(&self.snapshot().0.segments);
        // The range tombstones of the version the inputs come from (any flushed later
        // is newer than all of them, and is applied by a later merge).
        let mut ranges = RangeTombstones::default();
        version.range_tombstones_into(&mut ranges);
        let applied = ranges.max_lsn();
        let job = self.merge_job(
            id,
            IoComponent::Compaction,
            version.is_bottom(into),
            &segments,
            ranges,
            &version.buckets,
        );
        let mut reader = TransientReader::new(&segments);
        let policy = if merge_here {
            MediumPolicy::Inline(&mut reader)
        } else {
            MediumPolicy::Keep
        };
        // Which leaves were read, for the output's cache fill: those cached in L1's runs
        // are there because their flush cached them, so a merge into L2 ignores them; a
        // merge within L1 keeps cached what was (gets search its output as they searched
        // its inputs, and its inputs' leaves leave the cache as they age).
        let l1_runs = match pick {
            MergePick::Down(1) => version.runs(1).len(),
            _ => 0,
        };
        let mut scanners: Vec<LevelScanner> = inputs
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let s = f.scanner(IoComponent::Compaction)?;
                Ok(if i >= l1_runs && job.cache_fill == CacheFill::Inherit {
                    s.noting_cached_leaves()
                } else {
                    s
                })
            })
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
                // The inputs were the output level's oldest runs: every run it held when
                // the merge began (only flushes add runs meanwhile, as newest).
                runs_added: new_file
                    .into_iter()
                    .map(|f| (into, f, RunPlace::Oldest))
                    .collect(),
                segments_freed: freed.clone(),
                segments_reassigned: reassigned,
                garbage: out.garbage.iter().map(|(&s, &b)| (s, b)).collect(),
                range_applied_through: applied,
                ..VersionEdit::default()
            };
            self.install(&mut vs, &edit, None)?;
            match pick {
                MergePick::Down(1) => {
                    // The shadowed versions went with the merge (runs flushed meanwhile
                    // start a new estimate; what they shadow is counted low, never high).
                    vs.l1_dead_estimate = 0;
                    vs.l1_flushes = vs.version().runs(1).len();
                }
                MergePick::Within(_) => {
                    // The versions L1's runs shadowed in L1 went with the merge (what its
                    // nodes shrank by: the estimate counts a medium or large version at
                    // its pointer's size, as nodes hold it); those in L2 wait for the
                    // merge into L2.
                    let before: u64 = inputs.iter().map(|f| f.node_bytes()).sum();
                    let after = edit
                        .runs_added
                        .first()
                        .map_or(0, |(_, f, _)| f.node_bytes());
                    vs.l1_dead_estimate = vs
                        .l1_dead_estimate
                        .saturating_sub(before.saturating_sub(after));
                }
                MergePick::Down(_) => {}
            }
            freed
        };
        self.count_transient_freed(&freed);
        Counters::add(&self.counters.compactions, 1);
        if let MergePick::Within(_) = pick {
            Counters::add(&self.counters.merges_within_l1, 1);
        }
        let what = match pick {
            MergePick::Down(_) => format!("L{level} into L{into}"),
            MergePick::Within(_) => format!("L{level}'s {} runs into one", inputs.len()),
        };
        log::info!(
            "{}: merged {what} ({} entries in, {} shadowed, {} tombstones and {} \
             range-deleted versions dropped)",
            self.dir.display(),
            out.entries_in,
            out.dropped_shadowed,
            out.dropped_tombstones,
            out.dropped_by_range
        );
        Ok(())
    }

    /// Merges level after level down until all data is one run at the bottom, so every
    /// shadowed version and tombstone is dropped (and their log space becomes garbage GC
    /// can reclaim). Runs in the caller's thread, waiting for busy levels.
    pub(crate) fn compact_all(&self) -> Result<()> {
        // Rewrites of a last run for range tombstones: each applies every tombstone it
        // sees, so one per level is all it can take. Only the tombstones flushed when the
        // call began count: ones deleted meanwhile wait for later merges.
        let mut rewrites = 0;
        let horizon = {
            let vs = self.versions.lock();
            let v = vs.version();
            v.range_tombstones
                .iter()
                .map(|t| t.tombstone.lsn)
                .max()
                .unwrap_or(0)
        };
        loop {
            // Closed, or its keyspace dropped, since the last step: stop here.
            self.check_open()?;
            // The shallowest level that is not already the single bottom run.
            let next = {
                let vs = self.versions.lock();
                let v = &vs.version();
                (1..self.opts.max_levels)
                    .find(|&l| {
                        let runs = v.runs(l).len();
                        runs > 1 || (runs == 1 && !v.is_bottom(l))
                    })
                    .or_else(|| {
                        // One run left: rewritten while a range tombstone still needs it
                        // (so what the tombstone deletes is dropped and it is forgotten).
                        (1..=self.opts.max_levels).find(|&l| {
                            v.runs(l).iter().any(|f| {
                                v.range_tombstones.iter().any(|t| {
                                    t.tombstone.lsn <= horizon && t.pending.contains(&f.id())
                                })
                            })
                        })
                    })
            };
            if next.is_some_and(|l| {
                let vs = self.versions.lock();
                vs.version().runs(l).len() == 1 && vs.version().is_bottom(l)
            }) {
                rewrites += 1;
                if rewrites > self.opts.max_levels {
                    return Err(Error::Internal(
                        "range tombstones still wait on the last run after it was rewritten \
                         at every level"
                            .into(),
                    ));
                }
            }
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
            self.run_compaction(MergePick::Down(level))?;
            self.wake_all();
        }
    }
}
