//! `Db::check`: verifies a database end to end without changing it.
//!
//! Owns: reading every level run (every node and overflow blob checksum), following every
//! log pointer to a valid record that holds its key, reading every log segment and small-log
//! file, and listing files no live state names (orphans). Never: repairs or deletes.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::filename;
use crate::io::IoComponent;
use crate::level::LevelValue;
use crate::log::large::{self, SegmentKind};
use crate::log::ptr::LogPtr;
use crate::log::small;
use crate::obsolete::{LiveFiles, Verdict};
use std::fmt;

/// Problems reported beyond this many are counted but not listed.
const MAX_LISTED: usize = 100;

/// What `Db::check` found.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Level runs read.
    pub runs_checked: u64,
    /// Entries read from level runs.
    pub entries_checked: u64,
    /// Log pointers followed to their record.
    pub pointers_checked: u64,
    /// Log segments (and delta bucket segments) read record by record.
    pub segments_checked: u64,
    /// Bucket lists (`Options::delta_separation`) whose records were found in their
    /// delta bucket.
    pub bucket_lists_checked: u64,
    /// Small-log files replayed.
    pub wal_files_checked: u64,
    /// Damage found (file, offset and what), at most 100 listed.
    pub errors: Vec<String>,
    /// Total damage found.
    pub error_count: u64,
    /// Files in the directory that no live state names.
    pub orphans: Vec<String>,
}

impl CheckReport {
    /// Whether no damage was found.
    pub fn is_ok(&self) -> bool {
        self.error_count == 0
    }

    fn problem(&mut self, e: &Error) {
        self.error_count += 1;
        if self.errors.len() < MAX_LISTED {
            self.errors.push(e.to_string());
        }
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checked {} runs ({} entries), {} log pointers, {} log segments, {} small-log files",
            self.runs_checked,
            self.entries_checked,
            self.pointers_checked,
            self.segments_checked,
            self.wal_files_checked
        )?;
        writeln!(f, "errors: {}", self.error_count)?;
        for e in &self.errors {
            writeln!(f, "  {e}")?;
        }
        writeln!(f, "orphans: {}", self.orphans.len())?;
        for o in &self.orphans {
            writeln!(f, "  {o} (no live state names it; swept at the next open)")?;
        }
        Ok(())
    }
}

impl Engine {
    pub(crate) fn check(&self) -> Result<CheckReport> {
        let mut report = CheckReport::default();
        let (sv, _) = self.snapshot();
        for run in sv.version.all_runs() {
            report.runs_checked += 1;
            let mut scanner = run.scanner(IoComponent::LevelRead)?.checking_search_keys();
            // The large pointer table the file's large pairs make, when it has one: the
            // stored table must be exactly that (a reader trusts the record a table names
            // only once it holds the key, but a table that lost entries or names other
            // records would go unnoticed otherwise).
            let mut expected_table = (run.large_pointers_offset() > 0)
                .then(crate::level::large_pointers::LargePointersBuilder::default);
            loop {
                let entry = match scanner.next_entry() {
                    Ok(Some(e)) => e,
                    Ok(None) => break,
                    Err(e) => {
                        report.problem(&e);
                        expected_table = None; // the entries are not all known
                        break; // the rest of this run cannot be walked
                    }
                };
                report.entries_checked += 1;
                let (key, _, value) = entry;
                if !run.filter_admits(&key) {
                    // A lookup would answer "absent" for a key the file holds.
                    report.problem(&Error::corruption(
                        run.path(),
                        run.filter_offset(),
                        "the file's Bloom filter rules out a key the file holds",
                    ));
                }
                // The large pairs, for the table the file should carry (kind 3 entries
                // only: a list of deltas closed over a large value is not one).
                if let (Some(t), LevelValue::Large(p)) = (&mut expected_table, &value) {
                    t.add(&key, *p);
                }
                let value = match value {
                    LevelValue::Deltas(_) | LevelValue::DeltasOverflow { .. } => {
                        match scanner.load_overflow(value) {
                            Ok(LevelValue::Deltas(list))
                                if crate::delta::decode(&list).is_some() =>
                            {
                                // A bucket list stands for at least one record of the
                                // key in its bucket (a flush writes one, a collection
                                // keeps what a list stands for).
                                if let Some((lo, hi)) = crate::delta::bucket_range(&list) {
                                    report.bucket_lists_checked += 1;
                                    // Every list a collection keeps (all but those
                                    // below a covering range tombstone) must find them.
                                    let live = crate::read::bucket_ranges(&sv.version, &key)
                                        .map(|r| r.contains(&(lo, hi)));
                                    match sv.version.buckets.read_operands(&key, lo, hi) {
                                        Ok(found)
                                            if found.is_empty()
                                                && live.as_ref().is_ok_and(|l| *l) =>
                                        {
                                            report.problem(&Error::corruption(
                                                run.path(),
                                                0,
                                                format!(
                                                    "a bucket list (LSNs {lo}..={hi}) whose \
                                                     delta bucket holds none of its records"
                                                ),
                                            ));
                                        }
                                        Ok(_) => {}
                                        Err(e) => report.problem(&e),
                                    }
                                }
                                // A list closed over a large value holds it live: its
                                // pointer is checked like any other (a plain list: nothing
                                // more to check, as for a tombstone).
                                match LogPtr::closed_base_of(&list) {
                                    Some(p) => LevelValue::Large(p),
                                    None => LevelValue::Tombstone,
                                }
                            }
                            Ok(_) => {
                                report.problem(&Error::corruption(
                                    run.path(),
                                    0,
                                    "an operand list (deltas) that does not decode",
                                ));
                                continue;
                            }
                            Err(e) => {
                                report.problem(&e);
                                continue;
                            }
                        }
                    }
                    v => v,
                };
                let result = match value {
                    LevelValue::Overflow { .. } => scanner.load_overflow(value).map(drop),
                    LevelValue::Large(p) | LevelValue::Medium(p) => {
                        report.pointers_checked += 1;
                        match sv.segments.get(&p.segment) {
                            Some(seg) => seg.read(p, &key).map(drop),
                            // Garbage collection frees a segment once every live record is
                            // relocated; older, shadowed pointers into it stay in the levels
                            // until a merge drops them. Only a live pointer must resolve.
                            None if !crate::read::value_is_at(&sv, &key, p)? => Ok(()),
                            None => Err(Error::corruption(
                                run.path(),
                                0,
                                format!(
                                    "a pointer names log segment {} which does not exist",
                                    match value {
                                        LevelValue::Medium(_) => SegmentKind::Transient,
                                        _ => SegmentKind::Large,
                                    }
                                    .file_name(p.segment)
                                ),
                            )),
                        }
                    }
                    _ => Ok(()),
                };
                if let Err(e) = result {
                    report.problem(&e);
                }
            }
            if let Some(mut t) = expected_table {
                match run.large_pointers_unit() {
                    Ok(stored) if stored == t.encode() => {}
                    Ok(_) => report.problem(&Error::corruption(
                        run.path(),
                        run.large_pointers_offset(),
                        "the file's large pointer table is not the one its large pairs make",
                    )),
                    Err(e) => report.problem(&e),
                }
            }
        }
        let (segments, log_min, live) = {
            let vs = self.versions.lock();
            // Small-log files another keyspace still needs are live too.
            let floor = self.writes.small_log_min();
            let live = LiveFiles::from_state(&vs, self.versions.peek_next_file_id())
                .with_small_log_floor(floor);
            let segs: Vec<(u64, bool)> = vs
                .segments()
                .iter()
                .map(|(&id, m)| (id, m.kind == SegmentKind::Large))
                .collect();
            (segs, vs.log_min_id().min(floor), live)
        };
        // Only the newest large segment (being appended to, or the one that was when a
        // crash happened: a full segment is synced before the next starts) may end in a
        // torn record that no commit names.
        let newest_large = segments.iter().filter(|(_, l)| *l).map(|(id, _)| *id).max();
        for &(id, is_large) in &segments {
            let kind = if is_large {
                SegmentKind::Large
            } else {
                SegmentKind::Transient
            };
            let path = self.dir.join(kind.file_name(id));
            report.segments_checked += 1;
            if let Err(e) = large::scan_segment(&self.io, &path, id, Some(id) == newest_large) {
                report.problem(&e);
            }
        }
        // Delta buckets: every record below its committed length decodes, and sits in
        // the bucket its key hashes to (anywhere else no read would find it).
        for slot in &sv.version.buckets.slots {
            for (seg, committed) in &slot.segments {
                report.segments_checked += 1;
                let scanned = seg.scan(*committed, |offset, rec| {
                    if slot.covers(crate::format::key_hash(rec.key)) {
                        Ok(())
                    } else {
                        Err(Error::corruption(
                            seg.path(),
                            offset,
                            "a delta bucket record whose key hashes to another bucket",
                        ))
                    }
                });
                if let Err(e) = scanned {
                    report.problem(&e);
                }
            }
        }
        let wal = small::list(&self.io, &self.dir, log_min)?;
        let newest = wal.last().map(|(id, _)| *id);
        for (id, path) in &wal {
            report.wal_files_checked += 1;
            if let Err(e) = small::replay_file(&self.io, path, Some(*id) == newest) {
                report.problem(&e);
            }
        }
        for name in self.io.fs().list(&self.dir)? {
            let orphan =
                filename::parse(&name).is_some_and(|f| live.verdict(f) == Verdict::Obsolete);
            if orphan {
                report.orphans.push(name);
            }
        }
        Ok(report)
    }
}
