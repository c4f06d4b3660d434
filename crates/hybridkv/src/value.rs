//! The value of one version, as the memtable, the levels, the merge and the read path
//! pass it around: bytes in place, an overflow blob of a level file, a pointer into the
//! transient or the large log, or a tombstone.
//!
//! Owns: that one type, low in the module graph, so that the memtable does not depend on
//! the level format; and the per-thread spare buffers that keys and in-place values are
//! copied into ([`buffer_from`]) and handed back to ([`recycle`]) once written, so that a
//! merge moving millions of entries does not allocate and free two buffers per entry.
//! Never: reads or decodes anything (the level and log modules do).

use crate::log::ptr::LogPtr;
use std::cell::RefCell;

/// Spare buffers kept per thread, and the largest capacity kept (a bigger buffer is
/// freed: a rare large value must not pin its memory).
const SPARE_BUFFERS: usize = 1024;
const SPARE_CAPACITY: usize = 1024;

thread_local! {
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer holding a copy of `bytes`: a spare one of this thread if there is one.
pub(crate) fn buffer_from(bytes: &[u8]) -> Vec<u8> {
    let spare = if bytes.len() <= SPARE_CAPACITY {
        SPARE
            .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()))
            .ok()
            .flatten()
    } else {
        None
    };
    match spare {
        Some(mut v) => {
            v.clear();
            v.extend_from_slice(bytes);
            v
        }
        None => bytes.to_vec(),
    }
}

/// Keeps `buffer` for a later [`buffer_from`] of this thread (or frees it).
pub(crate) fn recycle(buffer: Vec<u8>) {
    if buffer.capacity() == 0 || buffer.capacity() > SPARE_CAPACITY {
        return;
    }
    let _ = SPARE.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if s.len() < SPARE_BUFFERS {
                s.push(buffer);
            }
        }
    });
}

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
    /// Deltas for the merge operator: an operand list (`crate::delta`), oldest first. The
    /// key's value is these applied to the version below (its *base*), or to nothing.
    Deltas(Vec<u8>),
    /// An operand list that is an overflow blob of the same level file.
    DeltasOverflow {
        /// Offset of the blob.
        offset: u64,
        /// Length of the list.
        len: u32,
        /// CRC32C of the list.
        crc: u32,
    },
}

impl LevelValue {
    /// Whether this version holds deltas (its value needs the versions below it).
    pub(crate) fn is_deltas(&self) -> bool {
        matches!(
            self,
            LevelValue::Deltas(_) | LevelValue::DeltasOverflow { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_buffer_is_reused_with_exactly_the_new_bytes() {
        let a = buffer_from(b"first value, long enough");
        let ptr = a.as_ptr();
        recycle(a);
        let b = buffer_from(b"short");
        assert_eq!(b, b"short");
        assert_eq!(b.as_ptr(), ptr, "the spare buffer was not reused");
        // Too big to keep, and too big to take from the spares.
        let big = vec![7u8; SPARE_CAPACITY + 1];
        recycle(big.clone());
        assert_eq!(buffer_from(&big), big);
    }
}
