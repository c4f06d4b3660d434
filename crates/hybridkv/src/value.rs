//! The value of one version, as the memtable, the levels, the merge and the read path
//! pass it around: bytes in place, an overflow blob of a level file, a pointer into the
//! transient or the large log, or a tombstone.
//!
//! Owns: that one type, low in the module graph, so that the memtable does not depend on
//! the level format. Never: reads or decodes anything (the level and log modules do).

use crate::log::ptr::LogPtr;

/// A stored value, owned.
// `pub`, not `pub(crate)`: `hybridkv::fuzzing` re-exports it (the module stays private).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelValue {
    /// The value bytes (in a leaf or the memtable, or loaded from an overflow blob).
    Inline(Vec<u8>),
    /// The value is an overflow blob of the same level file.
    Overflow {
        /// Offset of the blob.
        offset: u64,
        /// Length of the value.
        len: u32,
        /// CRC32C of the value.
        crc: u32,
    },
    /// A medium pair's value in the transient log.
    Medium(LogPtr),
    /// A large pair's value in the large log.
    Large(LogPtr),
    /// The key was deleted.
    Tombstone,
}
