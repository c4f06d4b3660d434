//! A `Version`: the immutable set of level files readers see at one moment.
//! Readers and compactions hold an `Arc<Version>`; files stay on disk while any holds them.

use crate::level::LevelFile;
use std::sync::Arc;

/// Level files by level: `levels[0]` is L1.
#[derive(Debug, Clone, Default)]
pub(crate) struct Version {
    pub levels: Vec<Option<Arc<LevelFile>>>,
}

impl Version {
    pub(crate) fn empty(max_levels: usize) -> Self {
        Version {
            levels: vec![None; max_levels],
        }
    }

    /// The file of level `level` (1-based).
    pub(crate) fn level(&self, level: usize) -> Option<&Arc<LevelFile>> {
        self.levels.get(level.checked_sub(1)?)?.as_ref()
    }

    /// Whether every level deeper than `level` is empty (tombstones can then be dropped).
    pub(crate) fn is_bottom(&self, level: usize) -> bool {
        self.levels.iter().skip(level).all(Option::is_none)
    }

    /// Whether a merge whose output is `level` writes medium pairs in place.
    pub(crate) fn is_merge_level(
        &self,
        level: usize,
        at: crate::options::MediumMergeLevel,
    ) -> bool {
        match at {
            crate::options::MediumMergeLevel::Last => self.is_bottom(level),
            crate::options::MediumMergeLevel::SecondToLast => self.is_bottom(level + 1),
        }
    }

    /// A copy with level `level` replaced.
    pub(crate) fn with_level(&self, level: usize, file: Option<Arc<LevelFile>>) -> Self {
        let mut v = self.clone();
        if let Some(slot) = level.checked_sub(1).and_then(|i| v.levels.get_mut(i)) {
            *slot = file;
        }
        v
    }

    /// (level, id, file length) of each non-empty level, for the manifest.
    pub(crate) fn manifest_levels(&self) -> Vec<(u32, u64, u64)> {
        self.levels
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|f| (i as u32 + 1, f.id(), f.file_len())))
            .collect()
    }
}
