//! The Bloom filter of a level file: one bit array over every key the file holds
//! (tombstones included), stored as one unit before the footer and kept in memory while the
//! file is open, so that a point lookup skips a run that cannot hold its key without
//! reading any node of it.
//!
//! Owns: the filter's bits, its byte layout (`FORMAT.md`, "Filter unit") and its hashing.
//! Written filters are *blocked* (unit version 2): every probe of one key falls in one
//! 64-byte block, so adding or testing a key touches one cache line and divides nothing
//! (a merge adds every key it writes; with 7 probes spread over a filter of tens of MiB,
//! version 1 cost seven cache misses and seven 64-bit divisions per key). Version 1 units
//! (bits spread over the whole array) are still read.
//! Never: answers "present" (only "absent" is certain), or trusts a unit it has not
//! checked (lengths, probe count and checksum are validated before any bit is used).

use crate::format::{crc32c, crc32c_append, key_hash};

/// Header of a filter unit: `[kind u8 = 4][version u8][probes u8][reserved u8]
/// [bits_len u32][crc u32][reserved u32]`, then `bits_len` bytes of bits.
pub(crate) const FILTER_HEADER: usize = 16;
/// Node-kind byte of a filter unit (leaves are 1, index nodes 2, blobs 3).
pub(crate) const NODE_FILTER: u8 = 4;
/// Unit version 1: probes spread over the whole bit array (read, no longer written).
const FLAT_VERSION: u8 = 1;
/// Unit version 2: blocked, every probe of a key in one [`BLOCK_BYTES`] block.
pub(crate) const BLOCKED_VERSION: u8 = 2;
const MAX_PROBES: u32 = 30;
/// Bytes of one block of a blocked filter: a cache line.
const BLOCK_BYTES: usize = 64;
/// Multiplier stepping a blocked filter's 32-bit probe hash from one probe to the next
/// (odd, so every step is a bijection; the golden ratio spreads the top bits).
const PROBE_STEP: u32 = 0x9E37_79B9;

/// One block of a blocked filter, aligned so that it is exactly one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; BLOCK_BYTES]);

/// The block of `hash` among `blocks` (from its high 32 bits, by multiply and shift) and
/// the bit of each probe inside it (the top 9 bits of the low 32, multiplied on).
fn blocked_probe(hash: u64, blocks: usize) -> (usize, impl Iterator<Item = usize>) {
    let block = (((hash >> 32) * blocks as u64) >> 32) as usize;
    let mut h = hash as u32;
    let bits = std::iter::repeat_with(move || {
        let bit = (h >> 23) as usize;
        h = h.wrapping_mul(PROBE_STEP);
        bit
    });
    (block, bits)
}

/// Bit positions of one key in a version 1 filter: double hashing over the 64-bit hash
/// (Kirsch-Mitzenmacher) over the whole array.
fn flat_positions(hash: u64, probes: u32, nbits: u64) -> impl Iterator<Item = u64> {
    let delta = hash.rotate_left(31) | 1;
    (0..u64::from(probes)).map(move |i| hash.wrapping_add(i.wrapping_mul(delta)) % nbits)
}

/// Keys a [`BloomBuilder`] holds back before setting their bits: each key's block is
/// prefetched as the key arrives and written this many keys later, so that a merge adding
/// every key it writes to a filter of tens of MiB does not wait on each block's cache miss
/// (in a profile of a 10M MD load, before this, 60% of the merge loop's own time sat on
/// the one instruction setting a key's bits).
const PENDING: usize = 16;

/// Builds a blocked filter for up to `expected` keys (more still work, with more false
/// positives).
pub(crate) struct BloomBuilder {
    blocks: Vec<Block>,
    probes: u32,
    keys: u64,
    /// The hashes of the last `min(keys, PENDING)` keys added, whose bits are not set yet
    /// (the key added as number `i` sits at `i % PENDING`).
    pending: [u64; PENDING],
}

impl BloomBuilder {
    /// A filter of `bits_per_key` bits for each of `expected` keys (at least one block).
    pub(crate) fn new(bits_per_key: u32, expected: u64) -> Self {
        let nbits = expected
            .saturating_mul(u64::from(bits_per_key))
            .clamp(64, u64::from(u32::MAX) * 8 - 512);
        let blocks = usize::try_from(nbits.div_ceil(BLOCK_BYTES as u64 * 8))
            .unwrap_or(usize::MAX / BLOCK_BYTES);
        // k = ln 2 * bits per key minimises false positives.
        let probes = ((f64::from(bits_per_key) * 0.69).round() as u32).clamp(1, MAX_PROBES);
        BloomBuilder {
            blocks: vec![Block([0; BLOCK_BYTES]); blocks.max(1)],
            probes,
            keys: 0,
            pending: [0; PENDING],
        }
    }

    /// Adds `key`: its block is prefetched now, its bits are set [`PENDING`] keys later
    /// (or by [`Self::encode`]).
    pub(crate) fn add(&mut self, key: &[u8]) {
        let hash = key_hash(key);
        let at = (self.keys % PENDING as u64) as usize;
        if let Some(slot) = self.pending.get_mut(at) {
            let older = std::mem::replace(slot, hash);
            if self.keys >= PENDING as u64 {
                self.set_bits(older);
            }
        }
        let (block, _) = blocked_probe(hash, self.blocks.len());
        if let Some(b) = self.blocks.get(block) {
            crate::prefetch::prefetch(std::ptr::from_ref(b));
        }
        self.keys += 1;
    }

    /// Sets the bits of the key whose hash is `hash`.
    fn set_bits(&mut self, hash: u64) {
        let (block, bits) = blocked_probe(hash, self.blocks.len());
        if let Some(Block(b)) = self.blocks.get_mut(block) {
            for bit in bits.take(self.probes as usize) {
                if let Some(byte) = b.get_mut(bit / 8) {
                    *byte |= 1 << (bit % 8);
                }
            }
        }
    }

    /// Sets the bits of the keys still held back (setting a bit twice changes nothing, so
    /// this may run more than once).
    fn set_pending(&mut self) {
        let held = self.keys.min(PENDING as u64) as usize;
        let pending = self.pending;
        for hash in pending.iter().take(held) {
            self.set_bits(*hash);
        }
    }

    /// Keys added.
    pub(crate) fn keys(&self) -> u64 {
        self.keys
    }

    /// The unit's bytes (header and bits; the caller pads it to the block size), every
    /// key added included.
    pub(crate) fn encode(&mut self) -> Vec<u8> {
        self.set_pending();
        let bits_len = self.blocks.len() * BLOCK_BYTES;
        let mut out = Vec::with_capacity(FILTER_HEADER + bits_len);
        out.push(NODE_FILTER);
        out.push(BLOCKED_VERSION);
        out.push(self.probes as u8);
        out.push(0);
        out.extend_from_slice(&(bits_len as u32).to_le_bytes());
        let head = crc32c(&out);
        let crc = self
            .blocks
            .iter()
            .fold(head, |crc, Block(b)| crc32c_append(crc, b));
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        for Block(b) in &self.blocks {
            out.extend_from_slice(b);
        }
        out
    }
}

/// Why a filter unit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FilterError {
    /// The unit is damaged: what is wrong.
    Corrupt(&'static str),
    /// A unit version this build does not read (a newer build wrote it).
    Version(u8),
}

/// A filter's bits as held in memory, by unit version.
#[derive(Debug)]
enum Bits {
    Flat(Box<[u8]>),
    Blocked(Box<[Block]>),
}

/// A checked filter, in memory.
#[derive(Debug)]
pub(crate) struct Bloom {
    bits: Bits,
    probes: u32,
}

impl Bloom {
    /// Decodes a unit of exactly `header + bits` bytes; the error says what is wrong.
    pub(crate) fn decode(unit: &[u8]) -> Result<Bloom, FilterError> {
        Self::decode_unit(unit)
    }

    fn decode_unit(unit: &[u8]) -> Result<Bloom, FilterError> {
        use FilterError::Corrupt;
        let header = unit
            .get(..FILTER_HEADER)
            .ok_or(Corrupt("filter unit shorter than its header"))?;
        if header.first() != Some(&NODE_FILTER) {
            return Err(Corrupt("filter unit has the wrong kind byte"));
        }
        let version = header.get(1).copied().unwrap_or(0);
        let granule = match version {
            FLAT_VERSION => 8,
            BLOCKED_VERSION => BLOCK_BYTES,
            v => return Err(FilterError::Version(v)),
        };
        let probes = u32::from(header.get(2).copied().unwrap_or(0));
        if !(1..=MAX_PROBES).contains(&probes) {
            return Err(Corrupt("filter probe count out of range"));
        }
        let word = |at: usize| {
            header
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes)
        };
        if header.get(3) != Some(&0) || word(12) != 0 {
            return Err(Corrupt("filter unit reserved bytes are not zero"));
        }
        let bits_len = word(4) as usize;
        let bits = unit
            .get(FILTER_HEADER..)
            .ok_or(Corrupt("filter unit shorter than its header"))?;
        if bits_len == 0 || !bits_len.is_multiple_of(granule) || bits.len() != bits_len {
            return Err(Corrupt("filter bit array length does not match its header"));
        }
        let crc = crc32c_append(crc32c(header.get(..8).unwrap_or_default()), bits);
        if crc != word(8) {
            return Err(Corrupt("filter checksum mismatch"));
        }
        let bits = if version == FLAT_VERSION {
            Bits::Flat(bits.into())
        } else {
            Bits::Blocked(
                bits.chunks_exact(BLOCK_BYTES)
                    .map(|c| {
                        let mut b = [0u8; BLOCK_BYTES];
                        b.copy_from_slice(c);
                        Block(b)
                    })
                    .collect(),
            )
        };
        Ok(Bloom { bits, probes })
    }

    /// `false` only if `key` is certainly not in the file.
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        let hash = key_hash(key);
        match &self.bits {
            Bits::Blocked(blocks) => {
                let (block, mut bits) = blocked_probe(hash, blocks.len());
                blocks.get(block).is_some_and(|Block(b)| {
                    bits.by_ref()
                        .take(self.probes as usize)
                        .all(|bit| b.get(bit / 8).is_some_and(|x| x & (1 << (bit % 8)) != 0))
                })
            }
            Bits::Flat(bytes) => {
                let nbits = bytes.len() as u64 * 8;
                flat_positions(hash, self.probes, nbits).all(|bit| {
                    bytes
                        .get((bit / 8) as usize)
                        .is_some_and(|b| b & (1 << (bit % 8)) != 0)
                })
            }
        }
    }

    /// Bytes held in memory.
    pub(crate) fn memory_bytes(&self) -> usize {
        match &self.bits {
            Bits::Flat(b) => b.len(),
            Bits::Blocked(b) => b.len() * BLOCK_BYTES,
        }
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
    fn keys_held_back_get_the_bits_they_would_have_got_at_once() {
        for n in [
            0,
            1,
            PENDING as u32 - 1,
            PENDING as u32,
            PENDING as u32 + 1,
            1_000,
        ] {
            let mut held = BloomBuilder::new(10, 200);
            let mut at_once = BloomBuilder::new(10, 200);
            for i in 0..n {
                held.add(&key(i));
                // Straight into the bits: nothing held back for `encode` to set.
                at_once.set_bits(key_hash(&key(i)));
            }
            let unit = held.encode();
            assert_eq!(unit, at_once.encode(), "{n} keys");
            assert_eq!(
                held.encode(),
                unit,
                "{n} keys: a second encode changes nothing"
            );
            let f = Bloom::decode(&unit).unwrap();
            assert!((0..n).all(|i| f.may_contain(&key(i))), "{n} keys");
        }
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

    /// The probe rules of both versions, pinned to numbers worked out by hand from
    /// FORMAT.md ("Filter unit"), so that a change to either rule (which would make stored
    /// filters answer wrongly) fails here.
    #[test]
    fn probe_rules_match_the_format_description() {
        // Version 2: block ((h >> 32) x blocks) >> 32; bits g >> 23, g x 0x9E3779B9 on.
        let h = 0x8000_0000_0000_0001u64;
        let (block, bits) = blocked_probe(h, 4);
        assert_eq!(block, 2);
        assert_eq!(bits.take(3).collect::<Vec<_>>(), vec![0, 316, 454]);
        let (block, _) = blocked_probe(u64::MAX, 1000);
        assert_eq!(block, 999);
        // Version 1: (h + i x (rotl(h, 31) | 1)) mod nbits.
        let got: Vec<u64> = flat_positions(h, 3, 1000).collect();
        assert_eq!(got, vec![809, 282, 755]);
    }

    /// A version 1 unit of `keys`, laid out as earlier releases wrote it (probes over the
    /// whole array), to show such files are still read.
    fn flat_unit(bits_per_key: u32, keys: &[Vec<u8>]) -> Vec<u8> {
        let bytes = (keys.len() as u64 * u64::from(bits_per_key)).div_ceil(64) as usize * 8;
        let mut bits = vec![0u8; bytes];
        let probes = (f64::from(bits_per_key) * 0.69).round() as u32;
        for k in keys {
            for bit in flat_positions(key_hash(k), probes, bytes as u64 * 8) {
                bits[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        let mut out = vec![NODE_FILTER, FLAT_VERSION, probes as u8, 0];
        out.extend_from_slice(&(bytes as u32).to_le_bytes());
        let crc = crc32c_append(crc32c(&out), &bits);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(&bits);
        out
    }

    #[test]
    fn a_version_1_unit_is_still_read() {
        let keys: Vec<_> = (0..10_000).map(key).collect();
        let f = Bloom::decode(&flat_unit(10, &keys)).unwrap();
        assert!(matches!(f.bits, Bits::Flat(_)));
        assert!(keys.iter().all(|k| f.may_contain(k)));
        let false_positives = (10_000..110_000)
            .filter(|&i| f.may_contain(&key(i)))
            .count();
        assert!(
            (1..2_000).contains(&false_positives),
            "{false_positives} of 100000"
        );
    }

    #[test]
    fn every_probe_of_a_key_sets_a_bit_of_one_block() {
        let mut b = BloomBuilder::new(10, 100_000);
        assert_eq!(b.blocks.len(), 1_000_000usize.div_ceil(512));
        b.add(b"one key");
        let unit = b.encode();
        let touched: Vec<usize> = b
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, Block(x))| x.iter().any(|&y| y != 0))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(touched.len(), 1, "blocks with bits set: {touched:?}");
        let set: u32 = b.blocks[touched[0]].0.iter().map(|x| x.count_ones()).sum();
        // Seven probes; two may land on the same bit.
        assert!((5..=7).contains(&set), "{set} bits set");
        assert_eq!(unit[1], BLOCKED_VERSION);
        assert_eq!(unit.len(), FILTER_HEADER + b.blocks.len() * BLOCK_BYTES);
    }

    #[test]
    fn a_blocked_unit_whose_length_is_not_whole_blocks_is_refused() {
        let mut b = BloomBuilder::new(10, 1_000);
        b.add(b"k");
        let good = b.encode();
        // Cut one 8-byte word off the end and fix the header to match: whole words, not
        // whole blocks.
        let mut bad = good[..good.len() - 8].to_vec();
        let len = (bad.len() - FILTER_HEADER) as u32;
        bad[4..8].copy_from_slice(&len.to_le_bytes());
        let crc = crc32c_append(crc32c(&bad[..8]), &bad[FILTER_HEADER..]);
        bad[8..12].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Bloom::decode(&bad),
            Err(FilterError::Corrupt(why)) if why.contains("length")
        ));
    }

    #[test]
    fn damaged_units_are_refused_with_a_reason() {
        let mut b = BloomBuilder::new(10, 100);
        b.add(b"a");
        let good = b.encode();
        assert!(Bloom::decode(&good).is_ok());
        let reason = |unit: &[u8]| match Bloom::decode(unit) {
            Err(FilterError::Corrupt(why)) => why.to_string(),
            Err(FilterError::Version(v)) => format!("version {v}"),
            Ok(_) => "decoded".to_string(),
        };
        for (at, why) in [
            (0, "wrong kind byte"),
            (1, "version 67"),
            (4, "length"),
            (3, "reserved"),
            (8, "checksum"),
            (13, "reserved"),
            (FILTER_HEADER + 3, "checksum"),
        ] {
            let mut bad = good.clone();
            bad[at] ^= 0x41;
            let err = reason(&bad);
            assert!(err.contains(why), "byte {at}: {err}");
        }
        let mut zero_probes = good.clone();
        zero_probes[2] = 0;
        assert!(reason(&zero_probes).contains("probe"));
        assert!(Bloom::decode(&good[..10]).is_err());
        assert!(Bloom::decode(&good[..good.len() - 8]).is_err());
        // Every truncation and every single-byte change is refused or still decodes to a
        // filter; none panics.
        for cut in 0..good.len() {
            let _ = Bloom::decode(&good[..cut]);
        }
    }
}
