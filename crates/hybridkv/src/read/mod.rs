//! The read path: point lookups and merged iterators over the memtables and levels.
//!
//! Owns: finding the newest visible version of a key (memtable, immutable memtables, then
//! L1..Ln; the first match wins), dereferencing log pointers through the captured segment
//! set, and the iterators (one cursor per source, merged in key order by `crate::merge`).
//! Never: writes anything; it reads from a captured `SuperVersion`, so every file and
//! segment it reads stays alive.

pub(crate) mod iter;

use crate::error::{Error, Result};
use crate::level::{LevelFile, LevelValue};
use crate::log::large::SegmentKind;
use std::sync::Arc;

pub(crate) use crate::log::large::SegmentSet;
pub(crate) use crate::version_set::SuperVersion;

/// The newest version of `key` visible at `snapshot`, as stored (pointers not followed),
/// with the level file it came from (to read overflow blobs).
pub(crate) fn lookup(
    sv: &SuperVersion,
    snapshot: u64,
    key: &[u8],
) -> Result<Option<(LevelValue, Option<Arc<LevelFile>>)>> {
    for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
        if let Some((_, v)) = mem.get(key, snapshot) {
            return Ok(Some((v, None)));
        }
    }
    for file in sv.version.all_runs() {
        if let Some((_, v)) = file.get(key)? {
            return Ok(Some((v, Some(Arc::clone(file)))));
        }
    }
    Ok(None)
}

/// The bytes of a stored value: reads overflow blobs and follows log pointers.
/// `None` for a tombstone.
pub(crate) fn resolve(
    sv: &SuperVersion,
    key: &[u8],
    value: LevelValue,
    file: Option<&LevelFile>,
) -> Result<Option<Vec<u8>>> {
    resolve_with(&sv.segments, key, value, file)
}

/// [`resolve`] with just the segment set.
pub(crate) fn resolve_with(
    segments: &SegmentSet,
    key: &[u8],
    value: LevelValue,
    file: Option<&LevelFile>,
) -> Result<Option<Vec<u8>>> {
    match value {
        LevelValue::Inline(b) => Ok(Some(b)),
        LevelValue::Tombstone => Ok(None),
        LevelValue::Overflow { .. } => match file {
            Some(f) => match f.load_overflow(value)? {
                LevelValue::Inline(b) => Ok(Some(b)),
                _ => Ok(None),
            },
            None => Err(Error::InvalidArgument(
                "overflow value outside a level file".into(),
            )),
        },
        LevelValue::Large(p) | LevelValue::Medium(p) => match segments.get(&p.segment) {
            Some(seg) => seg.read_through_cache(p, key).map(Some),
            None => Err(Error::corruption(
                match value {
                    LevelValue::Medium(_) => SegmentKind::Transient,
                    _ => SegmentKind::Large,
                }
                .file_name(p.segment),
                p.offset,
                "pointer to a log segment that does not exist",
            )),
        },
    }
}

/// The newest value of `key` visible at `snapshot` (`None` if absent or deleted).
pub(crate) fn get(sv: &SuperVersion, snapshot: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
    match lookup(sv, snapshot, key)? {
        Some((v, file)) => resolve(sv, key, v, file.as_deref()),
        None => Ok(None),
    }
}
