//! `LogPtr`: where a record lives in a log segment.

use crate::format::Decoder;

/// Encoded size of a [`LogPtr`].
pub const LOG_PTR_SIZE: usize = 20;

/// The location of one record: segment file id, byte offset, record length.
// `pub`, not `pub(crate)`: `hybridkv::fuzzing` re-exports it (the module stays private).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogPtr {
    /// Id of the segment file.
    pub segment: u64,
    /// Offset of the record in the segment.
    pub offset: u64,
    /// Length of the whole record (header, key and value).
    pub len: u32,
}

impl LogPtr {
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// The encoding (`segment`, `offset`, `len`, little-endian), on the stack.
    pub(crate) fn to_bytes(self) -> [u8; LOG_PTR_SIZE] {
        // Field by field (a byte-wise iterator chain cost ~200 instructions per pointer in
        // a merge's leaf writes).
        let mut out = [0u8; LOG_PTR_SIZE];
        out[..8].copy_from_slice(&self.segment.to_le_bytes());
        out[8..16].copy_from_slice(&self.offset.to_le_bytes());
        out[16..].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    /// The pointer encoded in exactly `bytes` (`None` if they are not one).
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let mut d = Decoder::new(bytes);
        let p = Self::decode(&mut d)?;
        (d.remaining() == 0).then_some(p)
    }

    /// The base a closed operand list points at (a list closed over a large value), if
    /// `list` is one.
    pub(crate) fn closed_base_of(list: &[u8]) -> Option<Self> {
        if !crate::delta::is_closed(list) {
            return None;
        }
        crate::delta::base_ptr(list).and_then(Self::from_bytes)
    }

    pub(crate) fn decode(d: &mut Decoder<'_>) -> Option<Self> {
        Some(LogPtr {
            segment: d.u64()?,
            offset: d.u64()?,
            len: d.u32()?,
        })
    }
}
