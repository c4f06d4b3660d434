//! A `Version`: the immutable set of level files readers see at one moment.
//! Readers and compactions hold an `Arc<Version>`; files stay on disk while any holds them.
//!
//! L1 is tiered: each flush adds a sorted run (newest first) without rewriting the others,
//! and all of L1's runs are merged into L2 together. Deeper levels hold one run each.
//! Beside the runs: the flushed range tombstones that some run may still need.

use crate::bucket::BucketTable;
use crate::level::LevelFile;
use crate::options::MediumMergeLevel;
use crate::range_delete::{PendingTombstone, RangeTombstones};
use std::sync::Arc;

/// Level files by level: `levels[0]` is L1; each level's runs are newest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Version {
    pub levels: Vec<Vec<Arc<LevelFile>>>,
    /// Flushed range tombstones, oldest first, each with the runs that may still hold a
    /// version it deletes.
    pub range_tombstones: Vec<PendingTombstone>,
    /// The delta buckets the runs' bucket lists read (`crate::bucket`).
    pub buckets: Arc<BucketTable>,
}

impl Version {
    pub(crate) fn empty(max_levels: usize) -> Self {
        Version {
            levels: vec![Vec::new(); max_levels],
            range_tombstones: Vec::new(),
            buckets: Arc::default(),
        }
    }

    /// The highest LSN of a flushed range tombstone covering `key` (0 if none).
    pub(crate) fn range_cut(&self, key: &[u8]) -> u64 {
        crate::range_delete::cut_of(
            self.range_tombstones.iter().map(|p| &p.tombstone),
            key,
            u64::MAX,
        )
    }

    /// Adds the flushed range tombstones to `into` (all are below any snapshot that can
    /// see this version).
    pub(crate) fn range_tombstones_into(&self, into: &mut RangeTombstones) {
        into.extend_visible(self.range_tombstones.iter().map(|p| &p.tombstone), u64::MAX);
    }

    /// The runs of level `level` (1-based), newest first.
    pub(crate) fn runs(&self, level: usize) -> &[Arc<LevelFile>] {
        level
            .checked_sub(1)
            .and_then(|i| self.levels.get(i))
            .map_or(&[], Vec::as_slice)
    }

    /// Every run in lookup order: L1's runs newest first, then L2, L3, ...
    pub(crate) fn all_runs(&self) -> impl Iterator<Item = &Arc<LevelFile>> {
        self.levels.iter().flatten()
    }

    /// Bytes of level `level`'s nodes and blobs (its files less their filters and footer
    /// blocks): what the picker compares with the level's target, counted as the run
    /// estimates the targets come from count a flush's run.
    pub(crate) fn level_bytes(&self, level: usize) -> u64 {
        self.runs(level).iter().map(|f| f.node_bytes()).sum()
    }

    /// Value bytes of the medium pairs level `level` holds by pointer.
    pub(crate) fn level_medium_bytes(&self, level: usize) -> u64 {
        self.runs(level).iter().map(|f| f.medium_bytes()).sum()
    }

    /// Whether every level deeper than `level` is empty (tombstones can then be dropped).
    pub(crate) fn is_bottom(&self, level: usize) -> bool {
        self.levels.iter().skip(level).all(Vec::is_empty)
    }

    /// Whether a merge whose output is `level` writes medium pairs in place.
    pub(crate) fn is_merge_level(&self, level: usize, at: MediumMergeLevel) -> bool {
        match at {
            MediumMergeLevel::Last => self.is_bottom(level),
            MediumMergeLevel::SecondToLast => self.is_bottom(level + 1),
        }
    }

    /// (level, id, file length) of each run, levels in order, runs newest first.
    pub(crate) fn manifest_levels(&self) -> Vec<(u32, u64, u64)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(i, runs)| {
                runs.iter()
                    .map(move |f| (i as u32 + 1, f.id(), f.file_len()))
            })
            .collect()
    }
}
