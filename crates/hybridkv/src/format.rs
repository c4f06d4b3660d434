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
    /// Reads an unsigned LEB128 varint (7 bits per byte, low bits first; see
    /// [`put_varint`]). `None` if the input ends inside it, it runs past 10 bytes, or its
    /// value does not fit 64 bits.
    #[inline]
    pub fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..VARINT_MAX {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            let bits = u64::from(b & 0x7f);
            // The tenth byte may only carry the top bit of a u64.
            if i == VARINT_MAX - 1 && bits > 1 {
                return None;
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
}

/// Longest varint: 10 bytes hold 64 bits at 7 bits per byte.
pub const VARINT_MAX: usize = 10;

/// Bytes [`put_varint`] writes for `v`.
#[inline]
pub fn varint_len(v: u64) -> usize {
    // 1 byte per started group of 7 significant bits (at least one byte).
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Writes `v` as an unsigned LEB128 varint at the start of `out`; returns the bytes
/// written ([`varint_len`]), or 0 (writing nothing) if `out` is too short.
#[inline]
pub fn put_varint(out: &mut [u8], mut v: u64) -> usize {
    let n = varint_len(v);
    let Some(dst) = out.get_mut(..n) else {
        return 0;
    };
    for (i, b) in dst.iter_mut().enumerate() {
        let more = if i + 1 < n { 0x80 } else { 0 };
        *b = (v & 0x7f) as u8 | more;
        v >>= 7;
    }
    n
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
    fn varints_round_trip_and_refuse_what_is_not_one() {
        let values = [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX >> 1,
            u64::MAX,
        ];
        for v in values {
            let mut buf = [0u8; VARINT_MAX];
            let n = put_varint(&mut buf, v);
            assert_eq!(n, varint_len(v), "{v}");
            let mut d = Decoder::new(&buf[..n]);
            assert_eq!(d.varint(), Some(v), "{v}");
            assert_eq!(d.remaining(), 0);
            // Cut short: refused.
            assert_eq!(Decoder::new(&buf[..n - 1]).varint(), None, "{v}");
        }
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(varint_len(u64::MAX), 10);
        // Too short an output: nothing written.
        assert_eq!(put_varint(&mut [0u8; 1], 300), 0);
        // Eleven continuation bytes, or a tenth byte above the 64th bit: refused.
        assert_eq!(Decoder::new(&[0x80; 11]).varint(), None);
        let mut over = [0xffu8; 10];
        over[9] = 0x02;
        assert_eq!(Decoder::new(&over).varint(), None);
    }

    #[test]
    fn crc_known_value() {
        // RFC 3720 test vector: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    }
}
