//! Byte-level primitives shared by every on-disk format: a checked little-endian decoder,
//! encoding helpers, the CRC32C checksum and the key hash of every Bloom filter.
//!
//! Owns: bounds-checked reading of untrusted bytes. Never: knows a file layout; each format
//! module (`log`, `level`, `manifest`, the write batch) builds on these. A short or malformed input is a
//! `None`/error, never a panic.

/// CRC32C (Castagnoli), the checksum of every on-disk record and node.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Extends a CRC32C over more bytes.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// The 64-bit hash keys are filtered by, on disk (level files' Bloom filters) and in
/// memory (memtables' key filters): xxh3, fast on short keys and well distributed. Part
/// of the level-file format: changing it changes what a stored filter answers.
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// A cursor over untrusted bytes whose every read is checked.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// Starts at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, pos: 0 }
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    /// Takes the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }
    /// Reads a byte.
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }
    /// Reads a little-endian u16.
    pub fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }
    /// Reads a little-endian u32.
    pub fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    /// Reads a little-endian u64.
    pub fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Reads a little-endian u32 at `offset` of `buf`, if in bounds.
pub fn u32_at(buf: &[u8], offset: usize) -> Option<u32> {
    let b = buf.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// Writes a little-endian u32 at `offset` of `buf`, if in bounds.
pub fn put_u32_at(buf: &mut [u8], offset: usize, v: u32) -> bool {
    match offset
        .checked_add(4)
        .and_then(|end| buf.get_mut(offset..end))
    {
        Some(dst) => {
            dst.copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoder_stops_at_end() {
        let mut d = Decoder::new(&[1, 0, 2, 0, 0, 0]);
        assert_eq!(d.u16(), Some(1));
        assert_eq!(d.u32(), Some(2));
        assert_eq!(d.u8(), None);
        assert_eq!(d.bytes(usize::MAX), None);
        assert_eq!(d.remaining(), 0);
    }

    #[test]
    fn crc_known_value() {
        // RFC 3720 test vector: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    }
}
