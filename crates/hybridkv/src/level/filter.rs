//! The Bloom filter of a level file: one bit array over every key the file holds
//! (tombstones included), stored as one unit before the footer and kept in memory while the
//! file is open, so that a point lookup skips a run that cannot hold its key without
//! reading any node of it.
//!
//! Owns: the filter's bits, its byte layout (`FORMAT.md`, "Filter unit") and its hashing.
//! Never: answers "present" (only "absent" is certain), or trusts a unit it has not
//! checked (lengths, probe count and checksum are validated before any bit is used).

use crate::format::{crc32c, crc32c_append, key_hash};

/// Header of a filter unit: `[kind u8 = 4][version u8 = 1][probes u8][reserved u8]
/// [bits_len u32][crc u32][reserved u32]`, then `bits_len` bytes of bits.
pub(crate) const FILTER_HEADER: usize = 16;
/// Node-kind byte of a filter unit (leaves are 1, index nodes 2, blobs 3).
pub(crate) const NODE_FILTER: u8 = 4;
const FILTER_VERSION: u8 = 1;
const MAX_PROBES: u32 = 30;

/// Bit positions of one key: double hashing over the 64-bit hash (Kirsch-Mitzenmacher).
fn positions(hash: u64, probes: u32, nbits: u64) -> impl Iterator<Item = u64> {
    let delta = hash.rotate_left(31) | 1;
    (0..u64::from(probes)).map(move |i| hash.wrapping_add(i.wrapping_mul(delta)) % nbits)
}

/// Builds a filter for up to `expected` keys (more still work, with more false positives).
pub(crate) struct BloomBuilder {
    bits: Vec<u8>,
    probes: u32,
    keys: u64,
}

impl BloomBuilder {
    /// A filter of `bits_per_key` bits for each of `expected` keys (at least 64 bits).
    pub(crate) fn new(bits_per_key: u32, expected: u64) -> Self {
        let nbits = expected
            .saturating_mul(u64::from(bits_per_key))
            .clamp(64, u64::from(u32::MAX) * 8 - 64);
        let bytes = usize::try_from(nbits.div_ceil(64) * 8).unwrap_or(usize::MAX / 2);
        // k = ln 2 * bits per key minimises false positives.
        let probes = ((f64::from(bits_per_key) * 0.69).round() as u32).clamp(1, MAX_PROBES);
        BloomBuilder {
            bits: vec![0u8; bytes],
            probes,
            keys: 0,
        }
    }

    /// Adds `key`.
    pub(crate) fn add(&mut self, key: &[u8]) {
        let nbits = self.bits.len() as u64 * 8;
        for bit in positions(key_hash(key), self.probes, nbits) {
            if let Some(b) = self.bits.get_mut((bit / 8) as usize) {
                *b |= 1 << (bit % 8);
            }
        }
        self.keys += 1;
    }

    /// Keys added.
    pub(crate) fn keys(&self) -> u64 {
        self.keys
    }

    /// The unit's bytes (header and bits; the caller pads it to the block size).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FILTER_HEADER + self.bits.len());
        out.push(NODE_FILTER);
        out.push(FILTER_VERSION);
        out.push(self.probes as u8);
        out.push(0);
        out.extend_from_slice(&(self.bits.len() as u32).to_le_bytes());
        let crc = crc32c_append(crc32c(&out), &self.bits);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(&self.bits);
        out
    }
}

/// A checked filter, in memory.
#[derive(Debug)]
pub(crate) struct Bloom {
    bits: Box<[u8]>,
    probes: u32,
}

impl Bloom {
    /// Decodes a unit of exactly `header + bits` bytes; the message says what is wrong.
    pub(crate) fn decode(unit: &[u8]) -> Result<Bloom, &'static str> {
        let header = unit
            .get(..FILTER_HEADER)
            .ok_or("filter unit shorter than its header")?;
        if header.first() != Some(&NODE_FILTER) {
            return Err("filter unit has the wrong kind byte");
        }
        if header.get(1) != Some(&FILTER_VERSION) {
            return Err("filter unit version unsupported");
        }
        let probes = u32::from(header.get(2).copied().unwrap_or(0));
        if !(1..=MAX_PROBES).contains(&probes) {
            return Err("filter probe count out of range");
        }
        let word = |at: usize| {
            header
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes)
        };
        if header.get(3) != Some(&0) || word(12) != 0 {
            return Err("filter unit reserved bytes are not zero");
        }
        let bits_len = word(4) as usize;
        let bits = unit
            .get(FILTER_HEADER..)
            .ok_or("filter unit shorter than its header")?;
        if bits_len == 0 || !bits_len.is_multiple_of(8) || bits.len() != bits_len {
            return Err("filter bit array length does not match its header");
        }
        let crc = crc32c_append(crc32c(header.get(..8).unwrap_or_default()), bits);
        if crc != word(8) {
            return Err("filter checksum mismatch");
        }
        Ok(Bloom {
            bits: bits.into(),
            probes,
        })
    }

    /// `false` only if `key` is certainly not in the file.
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        let nbits = self.bits.len() as u64 * 8;
        positions(key_hash(key), self.probes, nbits).all(|bit| {
            self.bits
                .get((bit / 8) as usize)
                .is_some_and(|b| b & (1 << (bit % 8)) != 0)
        })
    }

    /// Bytes held in memory.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.bits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Vec<u8> {
        format!("user{i:010}").into_bytes()
    }

    #[test]
    fn every_added_key_is_found_and_few_others_are() {
        let mut b = BloomBuilder::new(10, 10_000);
        for i in 0..10_000 {
            b.add(&key(i));
        }
        assert_eq!(b.keys(), 10_000);
        let f = Bloom::decode(&b.encode()).unwrap();
        assert!((0..10_000).all(|i| f.may_contain(&key(i))));
        let false_positives = (10_000..110_000)
            .filter(|&i| f.may_contain(&key(i)))
            .count();
        // 10 bits per key: about 1%; allow twice that.
        assert!(false_positives < 2_000, "{false_positives} of 100000");
        assert!(
            false_positives > 0,
            "a filter that never says yes is broken"
        );
    }

    #[test]
    fn more_keys_than_expected_still_never_lose_one() {
        let mut b = BloomBuilder::new(10, 10);
        for i in 0..5_000 {
            b.add(&key(i));
        }
        let f = Bloom::decode(&b.encode()).unwrap();
        assert!((0..5_000).all(|i| f.may_contain(&key(i))));
    }

    #[test]
    fn damaged_units_are_refused_with_a_reason() {
        let mut b = BloomBuilder::new(10, 100);
        b.add(b"a");
        let good = b.encode();
        assert!(Bloom::decode(&good).is_ok());
        for (at, why) in [
            (0, "wrong kind byte"),
            (1, "version"),
            (4, "length"),
            (3, "reserved"),
            (8, "checksum"),
            (13, "reserved"),
            (FILTER_HEADER + 3, "checksum"),
        ] {
            let mut bad = good.clone();
            bad[at] ^= 0x41;
            let err = Bloom::decode(&bad).unwrap_err();
            assert!(err.contains(why), "byte {at}: {err}");
        }
        let mut zero_probes = good.clone();
        zero_probes[2] = 0;
        assert!(Bloom::decode(&zero_probes).unwrap_err().contains("probe"));
        assert!(Bloom::decode(&good[..10]).is_err());
        assert!(Bloom::decode(&good[..good.len() - 8]).is_err());
        // Every truncation and every single-byte change is refused or still decodes to a
        // filter; none panics.
        for cut in 0..good.len() {
            let _ = Bloom::decode(&good[..cut]);
        }
    }
}
