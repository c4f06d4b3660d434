//! The read path: point lookups and merged iterators over the memtables and levels.
//!
//! Owns: finding the newest visible version of a key (memtable, immutable memtables, then
//! L1..Ln; the first match wins) and merging one cursor per source in key order. Never:
//! writes anything; reads from a captured `SuperVersion`, so files it reads stay alive.

pub(crate) mod iter;

use crate::error::Result;
use crate::level::LevelFile;
use crate::manifest::version::Version;
use crate::memtable::Memtable;
use std::sync::Arc;

/// Everything a reader needs, captured atomically with a snapshot LSN.
#[derive(Debug, Clone)]
pub(crate) struct SuperVersion {
    pub mem: Arc<Memtable>,
    /// Immutable memtables, newest first.
    pub imms: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
}

/// The newest value of `key` visible at `snapshot` (`None` if absent or deleted).
pub(crate) fn get(sv: &SuperVersion, snapshot: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
    for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
        if let Some((_, v)) = mem.get(key, snapshot) {
            return Ok(v);
        }
    }
    for file in sv.version.levels.iter().flatten() {
        if let Some(found) = lookup(file, key)? {
            return Ok(found);
        }
    }
    Ok(None)
}

fn lookup(file: &LevelFile, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
    match file.get(key)? {
        Some((_, v)) => Ok(Some(file.resolve(v)?)),
        None => Ok(None),
    }
}
