//! One garbage-collection pass over the large log.

use super::planner::{pick_victims, SegmentUsage};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::level::LevelValue;
use crate::log::large::SegmentKind;
use crate::log::large::{self, LargeRecord, SEGMENT_HEADER};
use crate::log::ptr::LogPtr;
use crate::manifest::edit::VersionEdit;
use crate::stats::Counters;
use crate::write::batch::BatchOp;
use crate::write::CommitRecord;

/// Records relocated per hold of the keyspace's slot (keeps writer pauses short).
const RELOCATE_CHUNK: usize = 512;
/// Segments collected per pass at most.
const MAX_SEGMENTS_PER_PASS: usize = 64;

/// What one pass did (`Db::gc`).
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Segments collected and freed.
    pub segments_freed: u64,
    /// Bytes of segment files freed.
    pub bytes_freed: u64,
    /// Records read and checked against the index.
    pub entries_checked: u64,
    /// Live records re-appended.
    pub entries_relocated: u64,
    /// Bytes of live records re-appended.
    pub bytes_relocated: u64,
    /// Victims left alone because reading them met damage (`Error::Corruption`); each
    /// is described in `damage`. The pass goes on with the other victims, so one damaged
    /// segment never stops space from being reclaimed elsewhere; `hybridkv check` names it.
    pub segments_damaged: u64,
    /// One message per damaged victim: the file and offset of the damage.
    pub damage: Vec<String>,
}

impl Engine {
    /// `space_amp_limit`: if disk use exceeds `limit` times the live data, merge every
    /// level down (so every dead version is counted) and collect every segment holding
    /// any garbage.
    pub(crate) fn enforce_space_limit(&self, limit: f64) -> Result<()> {
        let report = self.space_report()?;
        if report.live_bytes() == 0 || report.space_amplification() <= limit {
            return Ok(());
        }
        Counters::add(&self.counters.space_limit_runs, 1);
        self.compact_all()?;
        while self.gc_pass(f64::MIN_POSITIVE)?.segments_freed > 0 {}
        Ok(())
    }

    /// Collects every large-log segment whose garbage ratio reached the threshold.
    pub(crate) fn gc_pass(&self, threshold: f64) -> Result<GcReport> {
        // One pass at a time; the sizes of complete segments earlier passes learned.
        let mut sizes = self.gc_lock.lock();
        // Closed (or its keyspace dropped) while this waited: nothing more is written.
        self.check_open()?;
        // The active segment and the segment list are read together under the `log` mutex:
        // segments are only started (registered, then created) under it, so every segment
        // listed here other than `active` is complete and never appended to again. (Reading
        // `active` first and the list later let a segment started in between, i.e. the new
        // active one, become a victim: freed while writers still appended to it, or failing
        // the pass with NotFound before its file existed.)
        let log = self.writes.lock();
        let active = log
            .space(self.keyspace)?
            .large
            .as_ref()
            .map(large::SegmentWriter::id);
        let listed: Vec<(u64, u64)> = {
            let vs = self.versions.lock();
            vs.segments()
                .iter()
                .filter(|(_, m)| m.kind == SegmentKind::Large)
                .map(|(&id, m)| (id, m.garbage))
                .collect()
        };
        drop(log);
        // Their sizes are asked of the file system after the locks are let go (a `stat`
        // under the `log` lock held every write), and only once for a complete segment
        // (`log::large::SegmentSizes`). Only GC frees a large-log segment, and it runs one pass at a
        // time, so every segment listed is still there.
        sizes.keep_only(&listed);
        let usage: Vec<SegmentUsage> = listed
            .into_iter()
            .map(|(id, garbage)| SegmentUsage {
                id,
                bytes: sizes
                    .size_of(id, active, || {
                        self.io.fs().file_len(&self.dir.join(large::file_name(id)))
                    })
                    .unwrap_or(SEGMENT_HEADER)
                    .saturating_sub(SEGMENT_HEADER),
                garbage,
            })
            .collect();
        let mut report = GcReport::default();
        // Segments whose live records are relocated (committed, not yet durable), with
        // their file sizes: freed together at the end of the pass.
        let mut emptied: Vec<(u64, u64)> = Vec::new();
        // An error that ends the pass early: the victims emptied before it are still
        // freed (their relocations are as good as any committed write), unless the engine
        // failed or closed, when nothing more may be synced or installed.
        let mut stopped: Option<Error> = None;
        for id in pick_victims(&usage, active, threshold, MAX_SEGMENTS_PER_PASS) {
            match self.relocate_segment(id, &mut report) {
                Ok(file_len) => emptied.push((id, file_len)),
                // A value under deltas its operator refuses to fold stays where it is
                // (the segment with it) until the key is written again.
                Err(e @ Error::MergeFailed { .. }) => {
                    report.segments_damaged += 1;
                    report.damage.push(format!("{}: {e}", large::file_name(id)));
                    Counters::add(&self.counters.gc_errors, 1);
                }
                // Damage in the victim itself: nothing was relocated or freed (the segment
                // is read whole, strictly, before anything moves): leave it, keep its live
                // records readable where they are intact, and collect the others. Damage
                // met elsewhere (a level file read to check a record's liveness) fails the
                // pass and names that file.
                Err(e @ Error::Corruption { .. }) if corruption_in(&e, &large::file_name(id)) => {
                    report.segments_damaged += 1;
                    report.damage.push(e.to_string());
                    Counters::add(&self.counters.gc_errors, 1);
                }
                Err(e) => {
                    stopped = Some(e);
                    break;
                }
            }
        }
        let outcome = match stopped {
            None => self.free_segments(&emptied, &mut report),
            Some(e) => {
                // A closed or failed engine frees nothing (`make_durable` would refuse the
                // latter anyway; asking first spares the warning).
                if !matches!(e, Error::Closed) && self.check_poison().is_ok() {
                    // Freeing what was emptied first; the pass's own error is what it
                    // reports.
                    if let Err(free_error) = self.free_segments(&emptied, &mut report) {
                        log::warn!(
                            "{}: garbage collection could not free the segments it emptied before {e}: {free_error}",
                            self.dir.display()
                        );
                    }
                }
                Err(e)
            }
        };
        // What the pass did, cut short or not: `stats()` counts every pass and every
        // segment freed.
        let c = &self.counters;
        Counters::add(&c.gc_passes, 1);
        Counters::add(&c.gc_segments_freed, report.segments_freed);
        Counters::add(&c.gc_bytes_freed, report.bytes_freed);
        Counters::add(&c.gc_entries_checked, report.entries_checked);
        Counters::add(&c.gc_entries_relocated, report.entries_relocated);
        Counters::add(&c.gc_bytes_relocated, report.bytes_relocated);
        if report.segments_freed > 0 || report.segments_damaged > 0 {
            log::info!(
                "{}: garbage collection freed {} segments ({} bytes), relocated {} records, left {} damaged",
                self.dir.display(),
                report.segments_freed,
                report.bytes_freed,
                report.entries_relocated,
                report.segments_damaged
            );
        }
        outcome.map(|()| report)
    }

    /// When the value of `key` is the record at `ptr`: the deltas above it (none, or
    /// their operand list); `None` when the record is dead.
    fn deltas_over(&self, key: &[u8], ptr: LogPtr) -> Result<Option<Option<Vec<u8>>>> {
        let (sv, _) = self.snapshot();
        let found = crate::read::lookup(&sv, u64::MAX, key, crate::read::Asker::Engine)?;
        Ok(match found.base {
            Some((LevelValue::Large(p), _)) if p == ptr => {
                if found.deltas.is_empty() {
                    Some(None)
                } else {
                    Some(Some(found.into_list(key)?))
                }
            }
            _ => None,
        })
    }

    /// Relocates the live records of segment `id` (committed, not yet durable) and
    /// returns the segment's file length; [`Self::free_segments`] frees it.
    fn relocate_segment(&self, id: u64, report: &mut GcReport) -> Result<u64> {
        let path = self.dir.join(large::file_name(id));
        let file_len = self.io.fs().file_len(&path)?;
        // Strict: open cut the torn tail of the newest segment and a victim is never the
        // segment being appended to, so a damaged record here is corruption. Freeing the
        // segment anyway would drop the live records after it (or the damaged one).
        let records = large::scan_segment(&self.io, &path, id, false)?;
        report.entries_checked += records.len() as u64;
        // First pass without the slot: most dead records are filtered here (the level
        // reads of many records' lookups batched, `read::lookup_many`).
        let answers = {
            let asked: Vec<(&[u8], LogPtr)> = records
                .iter()
                .map(|(ptr, rec)| (rec.key.as_slice(), *ptr))
                .collect();
            let (sv, _) = self.snapshot();
            crate::read::values_are_at(&sv, &asked)
        };
        let mut live: Vec<(LogPtr, LargeRecord)> = Vec::new();
        for ((ptr, rec), is_live) in records.into_iter().zip(answers) {
            if is_live? {
                live.push((ptr, rec));
            }
        }
        for chunk in live.chunks(RELOCATE_CHUNK) {
            self.relocate(chunk, report)?;
        }
        Ok(file_len)
    }

    /// Frees the segments a pass emptied, in one edit, once every write committed so far
    /// is durable: the relocations (committed unsynced, like user writes; a crash before
    /// this point loses at most them, and the old copies are still where the index
    /// points), and the newer writes that made the other records dead (a power loss that
    /// took them would bring the shadowed versions back, pointing into a freed segment).
    /// One sync of the logs per pass, not one per relocated chunk: each sync is a device
    /// flush that the reads of the moment wait behind, and a synced commit held the
    /// keyspace's slot, so user writes waited for it too.
    fn free_segments(&self, emptied: &[(u64, u64)], report: &mut GcReport) -> Result<()> {
        if emptied.is_empty() {
            return Ok(());
        }
        // Refused once this keyspace has failed (`WritePath::make_durable`).
        self.make_committed_durable()?;
        {
            let mut vs = self.versions.lock();
            let edit = VersionEdit {
                segments_freed: emptied.iter().map(|&(id, _)| id).collect(),
                ..VersionEdit::default()
            };
            self.install(&mut vs, &edit, None)?;
        }
        report.segments_freed += emptied.len() as u64;
        report.bytes_freed += emptied.iter().map(|&(_, len)| len).sum::<u64>();
        Ok(())
    }

    /// Re-appends the records of `chunk` that the index still points at, as new versions,
    /// through the one commit path (unsynced, every value to the large log), under the
    /// keyspace's slot so no user write can slip in between check and insert.
    fn relocate(&self, chunk: &[(LogPtr, LargeRecord)], report: &mut GcReport) -> Result<()> {
        // The keyspace's slot: no user write into it runs between the check and the
        // relocation's commit.
        let mut held = self.writes.hold(&[self.keyspace])?;
        // A write failure since the pass began poisoned the engine: append nothing more.
        self.check_poison()?;
        self.writes.make_room(&mut held)?;
        // A value under deltas is relocated folded with them (it becomes the newest
        // version; the deltas it folds are then shadowed).
        // `None`: dead; `Some(None)`: moved as it is; `Some(Some(v))`: folded into `v`.
        let mut folded: Vec<Option<Option<Vec<u8>>>> = Vec::with_capacity(chunk.len());
        for (old, rec) in chunk {
            folded.push(match self.deltas_over(&rec.key, *old)? {
                None => None, // updated or deleted since the first check
                Some(None) => Some(None),
                Some(Some(deltas)) => {
                    let op = crate::delta::require(self.opts.merge_operator.as_ref())?;
                    Counters::add(&self.counters.deltas_folded, 1);
                    Some(Some(crate::delta::fold_full(
                        op,
                        &rec.key,
                        Some(&rec.value),
                        &deltas,
                    )?))
                }
            });
        }
        // A record the block cache holds is one reads use: its new copy is cached in its
        // place (else the next get of a hot key reads it from the device again), the
        // others are not cached.
        let (mut cached, mut plain) = (Vec::new(), Vec::with_capacity(chunk.len()));
        let mut cached_at = Vec::new();
        for ((old, rec), f) in chunk.iter().zip(&folded) {
            let op = match f {
                None => continue,
                Some(None) => BatchOp::Put(&rec.key, &rec.value),
                Some(Some(v)) => BatchOp::Put(&rec.key, v),
            };
            if self.cache.contains(old.segment, old.offset) {
                cached.push(op);
                cached_at.push(*old);
            } else {
                plain.push(op);
            }
        }
        let records: Vec<CommitRecord<'_>> = [(cached, true), (plain, false)]
            .into_iter()
            .filter(|(ops, _)| !ops.is_empty())
            .map(|(ops, cache_large)| CommitRecord {
                ops: ops.into(),
                payload: None,
                relocation: true,
                cache_large,
                keyspace: self.keyspace,
                hint: None,
            })
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        // Unsynced: `free_segments` makes it durable before the old segment is freed.
        let done = self.writes.commit(&mut held, &records, false)?;
        for old in cached_at {
            self.cache.forget(old.segment, old.offset);
        }
        report.entries_relocated += done.large_values;
        report.bytes_relocated += done.large_bytes;
        Ok(())
    }
}

/// Whether `e` is corruption found in the file named `name`.
fn corruption_in(e: &Error, name: &str) -> bool {
    matches!(e, Error::Corruption { file, .. }
        if file.file_name().is_some_and(|f| f == std::ffi::OsStr::new(name)))
}
