//! Byte-level primitives shared by every on-disk format: a checked little-endian decoder,
//! encoding helpers, the CRC32C checksum, the key hash of every Bloom filter, and the frame
//! of the advisory side files ([`SideFileFrame`]: magic, version, body, CRC32C).
//!
//! Owns: bounds-checked reading of untrusted bytes. Never: knows what a file's body holds;
//! each format module (`log`, `level`, `manifest`, the write batch, the cache hints, the
//! search counts) builds on these. A short or malformed input is a `None`/error, never a
//! panic.

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

/// Why an advisory side file (the cache hint file, the search count file) was not used;
/// the engine ignores such a file, counts it, and goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SideFileError {
    /// Shorter than its header and checksum, or a count or length runs past its end.
    #[error("truncated")]
    Truncated,
    /// Its first eight bytes are not the magic of the kind of file named.
    #[error("not a {0} file")]
    BadMagic(&'static str),
    /// Written by a version this code does not read.
    #[error("unsupported version {0}")]
    Version(u32),
    /// The checksum does not match the bytes.
    #[error("checksum mismatch")]
    Checksum,
    /// A field holds an impossible value (what, in the words of the file's module).
    #[error("{0}")]
    Invalid(&'static str),
}

/// The frame of an advisory side file: eight bytes of magic, the format version (u32), the
/// body, and the CRC32C of everything before it. `docs/FORMAT.md`, "Cache hint file" and
/// "Search count file".
#[derive(Debug, Clone, Copy)]
pub(crate) struct SideFileFrame {
    pub magic: &'static [u8; 8],
    pub version: u32,
    /// What the file is, for [`SideFileError::BadMagic`] ("cache hint").
    pub kind: &'static str,
}

impl SideFileFrame {
    /// A new file up to its body (magic and version), with room for `body` more bytes.
    pub(crate) fn start(&self, body: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + body + 4);
        out.extend_from_slice(self.magic);
        out.extend_from_slice(&self.version.to_le_bytes());
        out
    }

    /// Ends a file begun with [`SideFileFrame::start`]: appends the checksum.
    pub(crate) fn seal(&self, mut out: Vec<u8>) -> Vec<u8> {
        let crc = crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The body of `buf`, after checking, in this order, that it holds the header, the
    /// checksum and at least `min_body` bytes between them, then its magic, its version
    /// and its checksum.
    pub(crate) fn open<'a>(
        &self,
        buf: &'a [u8],
        min_body: usize,
    ) -> Result<&'a [u8], SideFileError> {
        if buf.len() < 12usize.saturating_add(min_body).saturating_add(4) {
            return Err(SideFileError::Truncated);
        }
        let (magic, rest) = buf.split_at(8);
        if magic != self.magic {
            return Err(SideFileError::BadMagic(self.kind));
        }
        let (covered, crc) = buf.split_at(buf.len() - 4);
        let version = Decoder::new(rest).u32().ok_or(SideFileError::Truncated)?;
        if version != self.version {
            return Err(SideFileError::Version(version));
        }
        let stored = Decoder::new(crc).u32().ok_or(SideFileError::Truncated)?;
        if crc32c(covered) != stored {
            return Err(SideFileError::Checksum);
        }
        covered.get(12..).ok_or(SideFileError::Truncated)
    }
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
    fn a_side_file_frame_opens_what_it_sealed_and_names_what_is_wrong_with_the_rest() {
        let frame = SideFileFrame {
            magic: b"HKVTEST\0",
            version: 3,
            kind: "test",
        };
        let mut f = frame.start(5);
        f.extend_from_slice(b"hello");
        let f = frame.seal(f);
        assert_eq!(f.len(), 8 + 4 + 5 + 4);
        assert_eq!(frame.open(&f, 5), Ok(&b"hello"[..]));
        assert_eq!(frame.open(&f, 6), Err(SideFileError::Truncated));
        assert_eq!(frame.open(&f[..15], 0), Err(SideFileError::Truncated));
        let mut bad = f.clone();
        bad[0] ^= 1;
        assert_eq!(frame.open(&bad, 0), Err(SideFileError::BadMagic("test")));
        assert_eq!(
            SideFileError::BadMagic("test").to_string(),
            "not a test file"
        );
        let other = SideFileFrame {
            version: 4,
            ..frame
        };
        assert_eq!(other.open(&f, 0), Err(SideFileError::Version(3)));
        for i in 12..f.len() {
            let mut bad = f.clone();
            bad[i] ^= 0x10;
            assert_eq!(
                frame.open(&bad, 0),
                Err(SideFileError::Checksum),
                "byte {i}"
            );
        }
        // An empty body is a file too.
        let empty = frame.seal(frame.start(0));
        assert_eq!(frame.open(&empty, 0), Ok(&b""[..]));
    }

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
