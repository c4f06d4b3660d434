//! A level file's table of large-value pointers, keyed by a 32-bit fingerprint of the key
//! (`FORMAT.md`, "Large pointer table"): with it pinned, a get of a large pair whose leaf
//! is not cached reads the value's log record at once, instead of the leaf for the
//! pointer and then the record (PinK keeps what a lookup needs in memory; WiscKey's get of
//! a separated value costs the index read plus the value read, and this saves the first).
//!
//! Owns: the fingerprint, the table's byte layout (written by [`LargePointersBuilder`],
//! checked and decoded by [`LargePointers::decode`]) and its in-memory lookup. Never: reads
//! a file or a log record, or decides whether a guess is right: the table only names a
//! record that may be the key's; the read path reads it and takes it only if the record
//! holds the key (a fingerprint shared with another key, or a key the run holds otherwise,
//! falls back to the leaf).

use crate::format::{crc32c, crc32c_append, Decoder};
use crate::log::ptr::LogPtr;

/// Kind byte of the unit (leaves are 1, index nodes 2, overflow blobs 3).
pub(crate) const UNIT_KIND: u8 = 4;
/// Format version of the unit.
pub(crate) const UNIT_VERSION: u8 = 1;
/// Header bytes before the entries.
const HEADER: usize = 16;
/// Bytes per entry: fingerprint, segment, offset, length, each a `u32`.
const ENTRY: usize = 16;
/// Seed of the fingerprint's hash (xxh3), so that it is independent of the Bloom filter's
/// (unseeded) hash of the same key. Part of the format.
const FINGERPRINT_SEED: u64 = 0x6c61_7267_6570_7472;

/// The fingerprint of `key` stored in the table: the high 32 bits of its seeded xxh3.
pub(crate) fn fingerprint(key: &[u8]) -> u32 {
    (xxhash_rust::xxh3::xxh3_64_with_seed(key, FINGERPRINT_SEED) >> 32) as u32
}

/// A pointer in the table's 32-bit fields, if it fits them.
fn narrow(p: LogPtr) -> Option<[u32; 3]> {
    Some([
        u32::try_from(p.segment).ok()?,
        u32::try_from(p.offset).ok()?,
        p.len,
    ])
}

/// Collects a file's large pointers as the builder adds them, and encodes the unit.
#[derive(Debug, Default)]
pub(crate) struct LargePointersBuilder {
    entries: Vec<(u32, [u32; 3])>,
}

impl LargePointersBuilder {
    /// Notes the large pair `key` -> `p` (a pointer whose segment id or offset does not fit
    /// 32 bits is left out: its key's gets read the leaf, as without a table).
    pub(crate) fn add(&mut self, key: &[u8], p: LogPtr) {
        if let Some(fields) = narrow(p) {
            self.entries.push((fingerprint(key), fields));
        }
    }

    /// The unit's bytes, or `None` if it would have no entry. Entries are sorted by
    /// fingerprint; a fingerprint two keys of the file share is left out altogether, so
    /// that the table names at most one record per fingerprint (those keys' gets read
    /// their leaf).
    pub(crate) fn encode(&mut self) -> Option<Vec<u8>> {
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort_unstable_by_key(|e| e.0);
        let mut out = Vec::with_capacity(HEADER + ENTRY * entries.len());
        // The count and the crc are set once the entries are in.
        out.extend_from_slice(&[UNIT_KIND, UNIT_VERSION, 0, 0]);
        out.extend_from_slice(&[0u8; 12]);
        for run in entries.chunk_by(|a, b| a.0 == b.0) {
            if let [(fp, [segment, offset, len])] = run {
                for v in [*fp, *segment, *offset, *len] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        let count = u32::try_from((out.len() - HEADER) / ENTRY).ok()?;
        if count == 0 {
            return None;
        }
        out[4..8].copy_from_slice(&count.to_le_bytes());
        let crc = crc32c_append(crc32c(&out[..8]), &out[HEADER..]);
        out[8..12].copy_from_slice(&crc.to_le_bytes());
        Some(out)
    }
}

/// Why a unit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LargePointersError {
    /// Damaged: what is wrong with it.
    Corrupt(&'static str),
    /// Written by a unit version this code does not read.
    Version(u8),
}

/// A decoded table, in memory: fingerprints sorted and unique, each with its pointer, and
/// a directory over the fingerprints' high bits so that a lookup scans a few entries.
#[derive(Debug)]
pub(crate) struct LargePointers {
    fingerprints: Vec<u32>,
    pointers: Vec<[u32; 3]>,
    /// `directory[b]`: the first entry whose fingerprint's top `bits` bits are `b` or more
    /// (one more slot at the end: the count).
    directory: Vec<u32>,
    bits: u32,
}

/// About this many entries share one directory slot.
const PER_SLOT: usize = 8;

impl LargePointers {
    /// Checks and decodes a unit (exactly its bytes, without padding).
    pub(crate) fn decode(unit: &[u8]) -> Result<Self, LargePointersError> {
        let mut d = Decoder::new(unit);
        let (Some(kind), Some(version), Some(reserved), Some(count), Some(crc), Some(rest)) =
            (d.u8(), d.u8(), d.u16(), d.u32(), d.u32(), d.u32())
        else {
            return Err(LargePointersError::Corrupt(
                "large pointer table shorter than its header",
            ));
        };
        if kind != UNIT_KIND {
            return Err(LargePointersError::Corrupt(
                "not a large pointer table (bad kind)",
            ));
        }
        if version != UNIT_VERSION {
            return Err(LargePointersError::Version(version));
        }
        if reserved != 0 || rest != 0 {
            return Err(LargePointersError::Corrupt(
                "large pointer table's reserved bytes are not zero",
            ));
        }
        let body = d.remaining();
        if (count as usize).checked_mul(ENTRY) != Some(body) || count == 0 {
            return Err(LargePointersError::Corrupt(
                "large pointer table's count does not match its length",
            ));
        }
        let head = unit.get(..8).unwrap_or_default();
        let entries = unit.get(HEADER..).unwrap_or_default();
        if crc32c_append(crc32c(head), entries) != crc {
            return Err(LargePointersError::Corrupt(
                "large pointer table checksum mismatch",
            ));
        }
        let n = count as usize;
        let mut fingerprints = Vec::with_capacity(n);
        let mut pointers = Vec::with_capacity(n);
        for e in entries.chunks_exact(ENTRY) {
            let mut d = Decoder::new(e);
            let (Some(fp), Some(segment), Some(offset), Some(len)) =
                (d.u32(), d.u32(), d.u32(), d.u32())
            else {
                return Err(LargePointersError::Corrupt("truncated large pointer entry"));
            };
            if fingerprints.last().is_some_and(|&last| last >= fp) {
                return Err(LargePointersError::Corrupt(
                    "large pointer table's fingerprints are not strictly increasing",
                ));
            }
            fingerprints.push(fp);
            pointers.push([segment, offset, len]);
        }
        // A directory of about one slot per `PER_SLOT` entries, a power of two.
        let bits = (n / PER_SLOT).max(1).ilog2().min(24);
        let slots = 1usize << bits;
        let mut directory = Vec::with_capacity(slots + 1);
        let mut at = 0usize;
        for b in 0..slots {
            while fingerprints
                .get(at)
                .is_some_and(|&fp| (u64::from(fp) >> (32 - bits)) < b as u64)
            {
                at += 1;
            }
            directory.push(at as u32);
        }
        directory.push(n as u32);
        Ok(LargePointers {
            fingerprints,
            pointers,
            directory,
            bits,
        })
    }

    /// The pointer the table holds for `key`'s fingerprint, if any: the large record of
    /// `key` when the file holds `key` as a large pair, else possibly another key's.
    pub(crate) fn guess(&self, key: &[u8]) -> Option<LogPtr> {
        let fp = fingerprint(key);
        let slot = (u64::from(fp) >> (32 - self.bits)) as usize;
        let lo = *self.directory.get(slot)? as usize;
        let hi = *self.directory.get(slot + 1)? as usize;
        let at = lo
            + self
                .fingerprints
                .get(lo..hi)?
                .iter()
                .position(|&x| x == fp)?;
        let [segment, offset, len] = *self.pointers.get(at)?;
        Some(LogPtr {
            segment: u64::from(segment),
            offset: u64::from(offset),
            len,
        })
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.fingerprints.len()
    }

    /// Bytes of memory the table takes.
    pub(crate) fn memory_bytes(&self) -> u64 {
        (4 * self.fingerprints.capacity()
            + 12 * self.pointers.capacity()
            + 4 * self.directory.capacity()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(i: u64) -> LogPtr {
        LogPtr {
            segment: 7 + i % 3,
            offset: 16 + 1100 * i,
            len: 1028,
        }
    }

    fn key(i: u64) -> Vec<u8> {
        format!("user{i:020}").into_bytes()
    }

    #[test]
    fn every_key_added_gets_its_pointer_back() {
        let mut b = LargePointersBuilder::default();
        for i in 0..5000 {
            b.add(&key(i), ptr(i));
        }
        let t = LargePointers::decode(&b.encode().unwrap()).unwrap();
        assert_eq!(t.len(), 5000, "5,000 keys share no 32-bit fingerprint here");
        for i in 0..5000 {
            assert_eq!(t.guess(&key(i)), Some(ptr(i)), "key {i}");
        }
        // Keys never added: at 5,000 entries a 32-bit fingerprint matches about once in
        // 860,000 lookups, so none of these does.
        let strays = (5000..25000)
            .filter(|&i| t.guess(&key(i)).is_some())
            .count();
        assert_eq!(strays, 0);
    }

    #[test]
    fn a_table_of_one_entry_and_an_empty_one() {
        let mut b = LargePointersBuilder::default();
        assert_eq!(b.encode(), None, "no entry: no unit");
        b.add(b"k", ptr(1));
        let t = LargePointers::decode(&b.encode().unwrap()).unwrap();
        assert_eq!(t.guess(b"k"), Some(ptr(1)));
        assert_eq!(t.guess(b"j"), None);
    }

    /// Two keys with one fingerprint, found by brute force among generated keys.
    fn colliding_pair() -> (Vec<u8>, Vec<u8>) {
        let mut seen = std::collections::HashMap::new();
        for i in 0u64.. {
            let k = key(i);
            if let Some(j) = seen.insert(fingerprint(&k), i) {
                return (key(j), k);
            }
        }
        unreachable!("the loop returns")
    }

    #[test]
    fn a_fingerprint_two_keys_share_is_left_out() {
        let (a, b) = colliding_pair();
        assert_ne!(a, b);
        let mut builder = LargePointersBuilder::default();
        builder.add(&a, ptr(1));
        builder.add(b"other", ptr(2));
        builder.add(&b, ptr(3));
        let t = LargePointers::decode(&builder.encode().unwrap()).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.guess(&a), None, "neither key of the pair is guessed");
        assert_eq!(t.guess(&b), None);
        assert_eq!(t.guess(b"other"), Some(ptr(2)));
    }

    #[test]
    fn a_pointer_past_32_bits_is_left_out() {
        let mut b = LargePointersBuilder::default();
        b.add(
            b"far",
            LogPtr {
                segment: 1,
                offset: 1 << 32,
                len: 40,
            },
        );
        b.add(
            b"late",
            LogPtr {
                segment: 1 << 32,
                offset: 0,
                len: 40,
            },
        );
        assert_eq!(b.encode(), None);
    }

    #[test]
    fn damage_is_refused_with_what_is_wrong() {
        let mut b = LargePointersBuilder::default();
        for i in 0..10 {
            b.add(&key(i), ptr(i));
        }
        let unit = b.encode().unwrap();
        let refused = |u: &[u8]| LargePointers::decode(u).err();
        assert_eq!(
            refused(&unit[..10]),
            Some(LargePointersError::Corrupt(
                "large pointer table shorter than its header"
            ))
        );
        assert!(matches!(
            refused(&unit[..unit.len() - 1]),
            Some(LargePointersError::Corrupt(_))
        ));
        let mut v = unit.clone();
        v[1] = 9;
        assert_eq!(refused(&v), Some(LargePointersError::Version(9)));
        let mut flipped = unit.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            refused(&flipped),
            Some(LargePointersError::Corrupt(
                "large pointer table checksum mismatch"
            ))
        );
        // Two entries swapped, the checksum made to match: the order is checked.
        let mut swapped = unit.clone();
        let (first, second) = (HEADER..HEADER + ENTRY, HEADER + ENTRY..HEADER + 2 * ENTRY);
        let a = swapped[first.clone()].to_vec();
        let b2 = swapped[second.clone()].to_vec();
        swapped[first].copy_from_slice(&b2);
        swapped[second].copy_from_slice(&a);
        let crc = crc32c_append(crc32c(&swapped[..8]), &swapped[HEADER..]);
        swapped[8..12].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            refused(&swapped),
            Some(LargePointersError::Corrupt(
                "large pointer table's fingerprints are not strictly increasing"
            ))
        );
    }

    proptest::proptest! {
        /// Whatever the bytes, decoding returns (never panics), and a table it accepts
        /// answers lookups without panicking.
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(0u8..=255, 0..200)) {
            if let Ok(t) = LargePointers::decode(&bytes) {
                let _ = t.guess(b"anything");
            }
        }
    }
}
