//! Runs one merge: newer input + older input -> one new level file.

use crate::error::Result;
use crate::io::{Io, IoComponent};
use crate::level::reader::file_name;
use crate::level::{LevelBuilder, LevelFile, LevelMeta, LevelValue};
use crate::memtable::Memtable;
use std::path::Path;
use std::sync::Arc;

/// A sorted stream of (key, LSN, value) with at most one version per key.
pub(crate) trait MergeSource {
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, u64, LevelValue)>>;
    /// The bytes of a value this source produced (reads overflow blobs).
    fn resolve(&self, v: LevelValue) -> Result<Option<Vec<u8>>>;
}

/// The newest version of each key of an immutable memtable.
pub(crate) struct MemSource<I>(pub I);

impl<I: Iterator<Item = (Vec<u8>, u64, Option<Vec<u8>>)>> MergeSource for MemSource<I> {
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, u64, LevelValue)>> {
        Ok(self
            .0
            .next()
            .map(|(k, lsn, v)| (k, lsn, v.map_or(LevelValue::Tombstone, LevelValue::Inline))))
    }
    fn resolve(&self, v: LevelValue) -> Result<Option<Vec<u8>>> {
        Ok(match v {
            LevelValue::Inline(b) => Some(b),
            _ => None,
        })
    }
}

impl MergeSource for crate::level::reader::LevelScanner {
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, u64, LevelValue)>> {
        crate::level::reader::LevelScanner::next_entry(self)
    }
    fn resolve(&self, v: LevelValue) -> Result<Option<Vec<u8>>> {
        crate::level::reader::LevelScanner::resolve(self, v)
    }
}

/// An input that does not exist (merging into an empty level).
pub(crate) struct NoSource;
impl MergeSource for NoSource {
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, u64, LevelValue)>> {
        Ok(None)
    }
    fn resolve(&self, _: LevelValue) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }
}

/// What a merge did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MergeOutcome {
    pub meta: LevelMeta,
    pub entries_in: u64,
    pub dropped_shadowed: u64,
    pub dropped_tombstones: u64,
}

/// Parameters of one merge.
pub(crate) struct MergeJob<'a> {
    pub io: &'a Io,
    pub dir: &'a Path,
    pub file_id: u64,
    pub component: IoComponent,
    pub leaf_size: usize,
    pub index_size: usize,
    /// The output is the bottom of the tree: tombstones are dropped.
    pub drop_tombstones: bool,
}

impl MergeJob<'_> {
    /// Merges `newer` over `older` into file `file_id`. Returns `None` (and leaves no file)
    /// when nothing survives.
    pub(crate) fn run(
        &self,
        newer: &mut dyn MergeSource,
        older: &mut dyn MergeSource,
    ) -> Result<(Option<LevelMeta>, MergeOutcome)> {
        let path = self.dir.join(file_name(self.file_id));
        let file = self.io.create(&path, self.component)?;
        let mut builder = LevelBuilder::new(file, self.leaf_size, self.index_size);
        let mut out = MergeOutcome::default();
        let mut a = newer.next_entry()?;
        let mut b = older.next_entry()?;
        loop {
            // Take from the newer input on ties: it shadows the older version.
            let take_newer = match (&a, &b) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(x), Some(y)) => x.0 <= y.0,
            };
            let (entry, from_newer) = if take_newer {
                if let (Some(x), Some(y)) = (&a, &b) {
                    if x.0 == y.0 {
                        debug_assert!(x.1 > y.1, "newer input holds an older LSN");
                        out.dropped_shadowed += 1;
                        out.entries_in += 1;
                        b = older.next_entry()?;
                    }
                }
                (std::mem::replace(&mut a, newer.next_entry()?), true)
            } else {
                (std::mem::replace(&mut b, older.next_entry()?), false)
            };
            let Some((key, lsn, value)) = entry else {
                break;
            };
            out.entries_in += 1;
            if value == LevelValue::Tombstone {
                if self.drop_tombstones {
                    out.dropped_tombstones += 1;
                    continue;
                }
                builder.add(&key, lsn, None)?;
                continue;
            }
            let bytes = if from_newer {
                newer.resolve(value)?
            } else {
                older.resolve(value)?
            };
            builder.add(&key, lsn, bytes.as_deref())?;
        }
        if builder.entries() == 0 {
            drop(builder);
            self.io.fs().remove(&path)?;
            return Ok((None, out));
        }
        let meta = builder.finish()?;
        out.meta = meta;
        Ok((Some(meta), out))
    }
}

/// Convenience: a scanner over `file`, or an empty source.
pub(crate) fn level_source(
    file: Option<&Arc<LevelFile>>,
    component: IoComponent,
) -> Result<Box<dyn MergeSource>> {
    Ok(match file {
        Some(f) => Box::new(f.scanner(component)?),
        None => Box::new(NoSource),
    })
}

/// Convenience: the newest versions of an immutable memtable.
pub(crate) fn memtable_source(
    mem: &Memtable,
) -> MemSource<impl Iterator<Item = (Vec<u8>, u64, Option<Vec<u8>>)> + '_> {
    MemSource(mem.newest_versions())
}
