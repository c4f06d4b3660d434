//! `VersionEdit`: one change to the durable description of the database (runs added and
//! removed, log segments freed and reassigned, garbage counted, replay start moved, range
//! tombstones flushed and forgotten).
//!
//! Owns: applying a change to a copy of the current state, so that an install builds its
//! whole result, stores it, and only then replaces what readers and the next install see
//! (`VersionSet::log_and_apply`). Never: touches the disk or the engine's live state itself;
//! `apply` is a pure function of its inputs.

use super::version::Version;
use super::{ManifestState, SegmentRecord};
use crate::level::LevelFile;
use crate::log::large::SegmentKind;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the engine tracks of one log segment (the manifest's [`SegmentRecord`] in memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentMeta {
    /// Large-log or transient segment.
    pub kind: SegmentKind,
    /// Transient segments: the level file (run) whose pointers use it.
    pub owner: u64,
    /// Bytes of records known to be garbage (large segments).
    pub garbage: u64,
}

/// The live log segments and their bookkeeping, by file id.
pub(crate) type SegmentTable = BTreeMap<u64, SegmentMeta>;

/// Where an added run goes among its level's runs (newest first): the place decides which
/// version of a key a lookup finds first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunPlace {
    /// Before every run the level holds: a flush's run, newer than all of them.
    Newest,
    /// After every run the level keeps: a merge's output, which replaces runs that were
    /// the level's oldest (every run it held when the merge began; only flushes add runs
    /// meanwhile, and they add them as newest).
    Oldest,
}

/// One change, described before anything is changed.
#[derive(Debug, Default)]
pub(crate) struct VersionEdit {
    /// Runs removed from whatever level holds them, by file id.
    pub runs_removed: Vec<u64>,
    /// Runs added to their level (1-based), in the order given, each where its
    /// [`RunPlace`] says.
    pub runs_added: Vec<(usize, Arc<LevelFile>, RunPlace)>,
    /// Segments that leave the table (their files go once no reader holds them).
    pub segments_freed: Vec<u64>,
    /// Transient segments handed to another run: (segment id, new owner run).
    pub segments_reassigned: Vec<(u64, u64)>,
    /// Garbage bytes to add per segment; segments no longer in the table are skipped (a
    /// segment freed by GC may still be named by shadowed pointers).
    pub garbage: Vec<(u64, u64)>,
    /// New start of small-log replay (only ever raised).
    pub log_min_id: Option<u64>,
    /// New highest LSN held by the levels (only ever raised).
    pub flushed_lsn: Option<u64>,
    /// Range tombstones a flush moves from its memtable into the levels.
    pub range_tombstones_added: Vec<crate::range_delete::RangeTombstone>,
    /// The newest range tombstone the flush or merge behind this edit applied (0: none);
    /// see `range_delete::carry_pending`.
    pub range_applied_through: u64,
    /// The delta bucket table that replaces the current one (a flush that appended to
    /// buckets, a bucket GC); only the flush thread builds them, so none is lost.
    pub buckets: Option<Arc<crate::bucket::BucketTable>>,
}

/// The state an edit applies to and produces.
#[derive(Debug, Clone)]
pub(crate) struct Installed {
    pub version: Arc<Version>,
    pub segments: SegmentTable,
    pub log_min_id: u64,
    pub flushed_lsn: u64,
}

impl VersionEdit {
    /// The state after this edit, leaving `base` unchanged.
    pub(crate) fn apply(&self, base: &Installed) -> Installed {
        let mut version = (*base.version).clone();
        for runs in &mut version.levels {
            runs.retain(|f| !self.runs_removed.contains(&f.id()));
        }
        for (level, file, place) in &self.runs_added {
            if let Some(runs) = level.checked_sub(1).and_then(|i| version.levels.get_mut(i)) {
                match place {
                    RunPlace::Newest => runs.insert(0, Arc::clone(file)),
                    RunPlace::Oldest => runs.push(Arc::clone(file)),
                }
            }
        }
        let added: Vec<u64> = self.runs_added.iter().map(|(_, f, _)| f.id()).collect();
        let live: Vec<u64> = version.all_runs().map(|f| f.id()).collect();
        crate::range_delete::carry_pending(
            &mut version.range_tombstones,
            &self.runs_removed,
            &added,
            self.range_applied_through,
            &self.range_tombstones_added,
            &live,
        );
        if let Some(t) = &self.buckets {
            version.buckets = Arc::clone(t);
        }
        let mut segments = base.segments.clone();
        for id in &self.segments_freed {
            segments.remove(id);
        }
        for (id, owner) in &self.segments_reassigned {
            if let Some(m) = segments.get_mut(id) {
                m.owner = *owner;
            }
        }
        for (id, bytes) in &self.garbage {
            if let Some(m) = segments.get_mut(id) {
                m.garbage = m.garbage.saturating_add(*bytes);
            }
        }
        Installed {
            version: Arc::new(version),
            segments,
            log_min_id: self
                .log_min_id
                .map_or(base.log_min_id, |v| v.max(base.log_min_id)),
            flushed_lsn: self
                .flushed_lsn
                .map_or(base.flushed_lsn, |v| v.max(base.flushed_lsn)),
        }
    }
}

impl Installed {
    /// The manifest that describes this state.
    pub(crate) fn manifest(&self, next_file_id: u64) -> ManifestState {
        ManifestState {
            next_file_id,
            log_min_id: self.log_min_id,
            flushed_lsn: self.flushed_lsn,
            levels: self.version.manifest_levels(),
            range_tombstones: self.version.range_tombstones.clone(),
            buckets: self.version.buckets.meta(),
            segments: self
                .segments
                .iter()
                .map(|(&id, m)| SegmentRecord {
                    id,
                    kind: m.kind,
                    owner: m.owner,
                    garbage: m.garbage,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Installed {
        let mut segments = SegmentTable::new();
        segments.insert(
            3,
            SegmentMeta {
                kind: SegmentKind::Large,
                owner: 0,
                garbage: 10,
            },
        );
        segments.insert(
            4,
            SegmentMeta {
                kind: SegmentKind::Transient,
                owner: 7,
                garbage: 0,
            },
        );
        segments.insert(
            5,
            SegmentMeta {
                kind: SegmentKind::Transient,
                owner: 8,
                garbage: 0,
            },
        );
        Installed {
            version: Arc::new(Version::empty(3)),
            segments,
            log_min_id: 20,
            flushed_lsn: 100,
        }
    }

    #[test]
    fn apply_changes_a_copy_and_leaves_the_base_alone() {
        let b = base();
        let edit = VersionEdit {
            segments_freed: vec![5],
            segments_reassigned: vec![(4, 9)],
            garbage: vec![(3, 5), (99, 1)],
            log_min_id: Some(25),
            flushed_lsn: Some(90),
            ..VersionEdit::default()
        };
        let after = edit.apply(&b);
        assert_eq!(b.segments.len(), 3, "base unchanged");
        assert_eq!(b.segments[&4].owner, 7, "base unchanged");
        assert_eq!(after.segments.len(), 2);
        assert_eq!(after.segments[&4].owner, 9);
        assert_eq!(after.segments[&3].garbage, 15);
        assert!(
            !after.segments.contains_key(&99),
            "garbage never adds a segment"
        );
        assert_eq!(after.log_min_id, 25);
        assert_eq!(after.flushed_lsn, 100, "flushed LSN never goes back");
        let m = after.manifest(30);
        assert_eq!(m.segments.len(), 2);
        assert_eq!(m.log_min_id, 25);
        assert_eq!(m.next_file_id, 30);
    }

    /// What an edit produces is stored as a manifest: encoding it and decoding the bytes
    /// gives back the same state, and decoding it again as recovery does yields the
    /// segments with their kinds, owners and garbage.
    #[test]
    fn the_state_an_edit_produces_survives_encode_and_decode() {
        let edit = VersionEdit {
            segments_freed: vec![5],
            segments_reassigned: vec![(4, 9)],
            garbage: vec![(3, 5)],
            log_min_id: Some(25),
            flushed_lsn: Some(140),
            ..VersionEdit::default()
        };
        let stored = edit.apply(&base()).manifest(30);
        let bytes = stored.encode();
        let back = ManifestState::decode(&bytes, std::path::Path::new("MANIFEST")).unwrap();
        assert_eq!(back, stored);
        assert_eq!(back.log_min_id, 25);
        assert_eq!(back.flushed_lsn, 140);
        let seg = |id| back.segments.iter().find(|s| s.id == id).copied();
        assert_eq!(seg(5), None, "a freed segment is not stored");
        let t = seg(4).unwrap();
        assert_eq!((t.kind, t.owner), (SegmentKind::Transient, 9));
        assert_eq!(seg(3).unwrap().garbage, 15);
        // A damaged byte is refused, never decoded into another state.
        let mut bad = bytes.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(ManifestState::decode(&bad, std::path::Path::new("MANIFEST")).is_err());
    }

    #[test]
    fn an_empty_edit_changes_nothing() {
        let b = base();
        let after = VersionEdit::default().apply(&b);
        assert_eq!(after.segments, b.segments);
        assert_eq!((after.log_min_id, after.flushed_lsn), (20, 100));
    }
}
