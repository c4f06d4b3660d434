//! The value of one version, as the memtable, the levels, the merge and the read path
//! pass it around: bytes in place, an overflow blob of a level file, a pointer into the
//! transient or the large log, or a tombstone.
//!
//! Owns: that one type, low in the module graph, so that the memtable does not depend on
//! the level format. Never: reads or decodes anything (the level and log modules do).

use crate::log::ptr::LogPtr;

/// A stored value, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LevelValue {
    Inline(Vec<u8>),
    Overflow {
        offset: u64,
        len: u32,
        crc: u32,
    },
    /// A medium pair's value in the transient log.
    Medium(LogPtr),
    /// A large pair's value in the large log.
    Large(LogPtr),
    Tombstone,
}
