//! Which files in a database directory the live state no longer names.
//!
//! Owns: the one rule for "is this file live", applied by open (which sweeps the files it
//! finds obsolete), small-log deletion after a flush, `check` (which lists them as
//! orphans) and `space` (which counts them as not yet reclaimed). Never: deletes a file or
//! decides when (open deletes before any reader exists; a run or segment that an install
//! made obsolete goes when its last reader drops it; small logs go after their flush).

use crate::filename::{DbFile, FileKind};
use crate::log::large::SegmentKind;
use crate::manifest::ManifestState;
use crate::version_set::VersionState;
use std::collections::HashSet;

/// What a state names: its runs, its segments, its replay start.
#[derive(Debug, Default)]
pub(crate) struct LiveFiles {
    runs: HashSet<u64>,
    segments: HashSet<u64>,
    /// Delta bucket segments (and, in a running engine, the files its jobs are writing,
    /// which a flush's new bucket segments are among).
    buckets: HashSet<u64>,
    log_min_id: u64,
    /// Large segments with an id at or above this were started after the state was
    /// recorded: they may hold values that the small log points at, so they are live.
    started_after: u64,
    /// Every numbered file at or above `started_after` is live, not only large segments:
    /// a running engine's state cannot judge a file it did not make (a read-only handle's
    /// state is as of its open, and the writer beside it goes on creating files).
    newer_are_live: bool,
}

/// A file's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Live,
    Obsolete,
}

impl LiveFiles {
    /// What a durable manifest names (at open). A transient segment counts only if the run
    /// that owns it is in the manifest too: a flush registers its segment before its run
    /// exists, so a manifest written meanwhile names a segment whose run may never come.
    pub(crate) fn from_manifest(m: &ManifestState) -> LiveFiles {
        let runs: HashSet<u64> = m.levels.iter().map(|&(_, id, _)| id).collect();
        let segments = m
            .segments
            .iter()
            .filter(|s| s.kind == SegmentKind::Large || runs.contains(&s.owner))
            .map(|s| s.id)
            .collect();
        let buckets = m
            .buckets
            .iter()
            .flat_map(|b| b.segments.iter().map(|&(id, _)| id))
            .collect();
        LiveFiles {
            runs,
            segments,
            buckets,
            log_min_id: m.log_min_id,
            started_after: m.next_file_id,
            newer_are_live: false,
        }
    }

    /// What a running engine's state names (every segment it registered is in it, and the
    /// level files its running jobs are writing).
    pub(crate) fn from_state(vs: &VersionState, next_file_id: u64) -> LiveFiles {
        LiveFiles {
            runs: vs
                .version()
                .all_runs()
                .map(|f| f.id())
                .chain(vs.pending_outputs().iter().copied())
                .collect(),
            segments: vs.segments().keys().copied().collect(),
            buckets: vs
                .version()
                .buckets
                .segments()
                .map(|s| s.id())
                .chain(vs.pending_outputs().iter().copied())
                .collect(),
            log_min_id: vs.log_min_id(),
            started_after: next_file_id,
            newer_are_live: true,
        }
    }

    /// Small-log files from `floor` on are live too (another keyspace still needs them).
    pub(crate) fn with_small_log_floor(mut self, floor: u64) -> LiveFiles {
        self.log_min_id = self.log_min_id.min(floor);
        self
    }

    /// The segments the state names (not those it judges live by their id alone).
    pub(crate) fn named_segments(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.iter().copied()
    }

    /// Whether `file` is live.
    pub(crate) fn verdict(&self, file: DbFile) -> Verdict {
        if let DbFile::Numbered(_, id) = file {
            if self.newer_are_live && id >= self.started_after {
                return Verdict::Live;
            }
        }
        let live = match file {
            DbFile::Manifest
            | DbFile::Options
            | DbFile::CacheHints
            | DbFile::SearchCounts
            | DbFile::Lock
            | DbFile::Keyspaces => true,
            DbFile::Temp => false,
            DbFile::Numbered(FileKind::Level, id) => self.runs.contains(&id),
            DbFile::Numbered(FileKind::SmallLog, id) => id >= self.log_min_id,
            DbFile::Numbered(FileKind::LargeSegment, id) => {
                self.segments.contains(&id) || id >= self.started_after
            }
            DbFile::Numbered(FileKind::TransientSegment, id) => self.segments.contains(&id),
            DbFile::Numbered(FileKind::DeltaBucket, id) => self.buckets.contains(&id),
        };
        if live {
            Verdict::Live
        } else {
            Verdict::Obsolete
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::SegmentRecord;

    fn manifest() -> ManifestState {
        let seg = |id, kind, owner| SegmentRecord {
            id,
            kind,
            owner,
            garbage: 0,
        };
        ManifestState {
            next_file_id: 50,
            log_min_id: 20,
            flushed_lsn: 0,
            levels: vec![(1, 10, 100), (2, 11, 100)],
            segments: vec![
                seg(30, SegmentKind::Large, 0),
                seg(31, SegmentKind::Transient, 10),
                seg(32, SegmentKind::Transient, 12), // its run never reached the manifest
            ],
            range_tombstones: Vec::new(),
            buckets: vec![crate::bucket::BucketMeta {
                depth: 0,
                prefix: 0,
                segments: vec![(33, 4096)],
            }],
        }
    }

    #[test]
    fn a_running_job_s_output_is_live_until_its_guard_drops() {
        use crate::io::{Io, SimFs};
        use crate::memtable::Memtable;
        use crate::version_set::{Recovered, VersionSet};
        use std::sync::Arc;
        let io = Io::new(Arc::new(SimFs::new()), false);
        let vset = VersionSet::new(
            io,
            "/db".into(),
            Recovered::empty(Arc::new(Memtable::new()), 7),
        );
        let verdict = |id| {
            let vs = vset.lock();
            LiveFiles::from_state(&vs, vset.peek_next_file_id())
                .verdict(DbFile::Numbered(FileKind::Level, id))
        };
        let output = vset.begin_output();
        let id = output.id;
        assert_eq!(
            verdict(id),
            Verdict::Live,
            "an output being written is no orphan"
        );
        drop(output);
        assert_eq!(verdict(id), Verdict::Obsolete, "never installed: an orphan");
        // A file newer than the state (a writer's, beside a read-only handle) is not
        // judged; at open, from a manifest, the same id would be an unfinished output.
        let newer = DbFile::Numbered(FileKind::Level, vset.peek_next_file_id() + 3);
        let vs = vset.lock();
        assert_eq!(
            LiveFiles::from_state(&vs, vset.peek_next_file_id()).verdict(newer),
            Verdict::Live
        );
    }

    #[test]
    fn the_manifest_decides_what_is_live() {
        let live = LiveFiles::from_manifest(&manifest());
        let v = |kind, id| live.verdict(DbFile::Numbered(kind, id));
        assert_eq!(v(FileKind::Level, 10), Verdict::Live);
        assert_eq!(v(FileKind::DeltaBucket, 33), Verdict::Live);
        assert_eq!(v(FileKind::DeltaBucket, 34), Verdict::Obsolete);
        assert_eq!(
            v(FileKind::Level, 12),
            Verdict::Obsolete,
            "unfinished output"
        );
        assert_eq!(v(FileKind::SmallLog, 19), Verdict::Obsolete, "flushed");
        assert_eq!(v(FileKind::SmallLog, 20), Verdict::Live);
        assert_eq!(v(FileKind::LargeSegment, 30), Verdict::Live);
        assert_eq!(
            v(FileKind::LargeSegment, 29),
            Verdict::Obsolete,
            "freed by GC"
        );
        assert_eq!(
            v(FileKind::LargeSegment, 55),
            Verdict::Live,
            "started later"
        );
        assert_eq!(v(FileKind::TransientSegment, 31), Verdict::Live);
        assert_eq!(v(FileKind::TransientSegment, 32), Verdict::Obsolete);
        assert_eq!(v(FileKind::TransientSegment, 55), Verdict::Obsolete);
        assert_eq!(live.verdict(DbFile::Temp), Verdict::Obsolete);
        assert_eq!(live.verdict(DbFile::Manifest), Verdict::Live);
        assert_eq!(live.verdict(DbFile::Lock), Verdict::Live);
    }
}
