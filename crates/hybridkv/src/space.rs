//! Space accounting users can trust: live logical bytes against bytes on disk, per
//! component, with the reason each kind of unreclaimed space is still there.
//!
//! Owns: `Db::space` (the `SpaceReport`). Live bytes come from a scan of keys and value
//! lengths that never reads a log; bytes on disk come from the file system's allocated
//! blocks (what `du` reports), file by file. Never: changes anything.

use crate::engine::Engine;
use crate::error::Result;
use crate::filename::{self, DbFile, FileKind};
use crate::log::large::SegmentKind;
use crate::obsolete::{LiveFiles, Verdict};
use crate::read::iter::{DbIterator, ValueHome};
use std::fmt;
use std::ops::Bound;

/// One kind of space on disk.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceComponent {
    /// What the bytes are.
    pub name: &'static str,
    /// Bytes on disk (allocated blocks).
    pub bytes: u64,
    /// Why these bytes are not reclaimed yet (`None` for live data).
    pub reason: Option<&'static str>,
}

/// The breakdown returned by `Db::space`.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpaceReport {
    /// Live pairs.
    pub live_pairs: u64,
    /// Key bytes of live pairs.
    pub live_key_bytes: u64,
    /// Value bytes of live pairs.
    pub live_value_bytes: u64,
    /// Bytes on disk by component; they add up to `total_on_disk`.
    pub components: Vec<SpaceComponent>,
    /// Every file of the database directory (allocated blocks).
    pub total_on_disk: u64,
}

impl SpaceReport {
    /// Live logical bytes: keys plus values of every live pair.
    pub fn live_bytes(&self) -> u64 {
        self.live_key_bytes + self.live_value_bytes
    }

    /// Bytes on disk per live logical byte (0 for an empty database).
    pub fn space_amplification(&self) -> f64 {
        if self.live_bytes() == 0 {
            return 0.0;
        }
        self.total_on_disk as f64 / self.live_bytes() as f64
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

impl fmt::Display for SpaceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "live data: {} pairs, {:.2} MiB ({:.2} MiB keys + {:.2} MiB values)",
            self.live_pairs,
            mib(self.live_bytes()),
            mib(self.live_key_bytes),
            mib(self.live_value_bytes)
        )?;
        writeln!(
            f,
            "on disk:   {:.2} MiB, space amplification {:.2}",
            mib(self.total_on_disk),
            self.space_amplification()
        )?;
        for c in &self.components {
            write!(f, "  {:<34} {:>10.2} MiB", c.name, mib(c.bytes))?;
            if let Some(r) = c.reason {
                write!(f, "  <- {r}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl Engine {
    pub(crate) fn space_report(&self) -> Result<SpaceReport> {
        let mut report = SpaceReport::default();
        // Live bytes, from keys and value lengths only.
        let (sv, snapshot) = self.snapshot();
        // A key holding deltas is folded (its base read) and counted in place.
        let mut it = DbIterator::new(
            (*sv).clone(),
            snapshot,
            Bound::Unbounded,
            Bound::Unbounded,
            crate::read::Asker::Engine,
        )
        .with_operator(self.opts.merge_operator.clone());
        let (mut live_large, mut live_transient) = (0u64, 0u64);
        while let Some(r) = it.next_key_and_len() {
            let (key, len, home) = r?;
            report.live_pairs += 1;
            report.live_key_bytes += key.len() as u64;
            report.live_value_bytes += len;
            match home {
                ValueHome::InPlace => {}
                ValueHome::Large(rec) => live_large += rec,
                ValueHome::Transient(rec) => live_transient += rec,
            }
        }
        drop(it);

        let (live, known_garbage) = {
            let vs = self.versions.lock();
            let garbage = vs
                .segments()
                .values()
                .filter(|m| m.kind == SegmentKind::Large)
                .map(|m| m.garbage)
                .sum::<u64>();
            (
                LiveFiles::from_state(&vs, self.versions.peek_next_file_id())
                    .with_small_log_floor(self.writes.small_log_min()),
                garbage,
            )
        };
        let (mut levels, mut wal, mut large, mut transient, mut pending, mut meta) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        let mut buckets = 0u64;
        for name in self.io.fs().list(&self.dir)? {
            let path = self.dir.join(&name);
            let bytes = match self.io.fs().allocated_len(&path) {
                Ok(b) => b,
                Err(_) => continue, // deleted while listing
            };
            report.total_on_disk += bytes;
            let Some(file) = filename::parse(&name) else {
                meta += bytes;
                continue;
            };
            match (file, live.verdict(file)) {
                (DbFile::Numbered(FileKind::SmallLog, _), _) => wal += bytes,
                // Runs and segments no longer live, still held by a reader.
                (DbFile::Numbered(..), Verdict::Obsolete) => pending += bytes,
                (DbFile::Numbered(FileKind::Level, _), _) => levels += bytes,
                (DbFile::Numbered(FileKind::LargeSegment, _), _) => large += bytes,
                (DbFile::Numbered(FileKind::TransientSegment, _), _) => transient += bytes,
                (DbFile::Numbered(FileKind::DeltaBucket, _), _) => buckets += bytes,
                _ => meta += bytes,
            }
        }
        let large_live = live_large.min(large);
        let large_known = known_garbage.min(large - large_live);
        let large_unknown = large - large_live - large_known;
        let transient_live = live_transient.min(transient);
        report.components = vec![
            SpaceComponent { name: "levels (B+-tree runs)", bytes: levels, reason: None },
            SpaceComponent { name: "large log: live values", bytes: large_live, reason: None },
            SpaceComponent {
                name: "large log: known garbage",
                bytes: large_known,
                reason: Some("dead values counted by compaction; GC frees a segment once gc_threshold of it is dead"),
            },
            SpaceComponent {
                name: "large log: not yet known dead",
                bytes: large_unknown,
                reason: Some("old versions not yet met by a merge (or segment headers, and the space the active segment reserved ahead: mmap_log_writes, up to 1 MiB); compaction will count them"),
            },
            SpaceComponent { name: "transient log: live values", bytes: transient_live, reason: None },
            SpaceComponent {
                name: "transient log: dead values",
                bytes: transient - transient_live,
                reason: Some("medium segments are freed whole when their pairs reach the merge level; no GC runs on them"),
            },
            SpaceComponent {
                name: "delta buckets",
                bytes: buckets,
                reason: Some("deltas kept apart from their base (delta_separation); a bucket is collected once it outgrows delta_bucket_size, dropping records no run still stands for"),
            },
            SpaceComponent {
                name: "small log (WAL)",
                bytes: wal,
                reason: Some("writes still in a memtable, and the space the log being appended to reserved ahead (mmap_log_writes: up to 1 MiB); deleted after the memtable's flush"),
            },
            SpaceComponent {
                name: "files waiting for deletion",
                bytes: pending,
                reason: Some("replaced files still read by an open iterator or snapshot (deleted when it is dropped) or being written"),
            },
            SpaceComponent { name: "manifest and lock", bytes: meta, reason: None },
        ];
        Ok(report)
    }
}
