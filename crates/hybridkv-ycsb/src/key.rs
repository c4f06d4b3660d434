//! Record numbers, the FNV hash YCSB applies to them, and the 24-byte keys
//! built from them.
//!
//! YCSB names record `n` with `CoreWorkload.buildKeyName(n, zeropadding,
//! orderedinserts)`: with the default `insertorder=hashed` the record number is
//! first replaced by `Utils.fnvhash64(n)` (FNV-1a over the eight little-endian
//! bytes of `n`, then Java's `Math.abs`), and the result is the string `"user"`
//! followed by the decimal digits, left-padded with `'0'` up to `zeropadding`
//! digits.
//!
//! This crate fixes the padding at [`KEY_DIGITS`] = 20 digits, so **every key is
//! exactly [`KEY_LEN`] = 24 ASCII bytes**: `"user"` + 20 decimal digits. This is
//! byte-for-byte the key YCSB produces with `zeropadding=20` (20 digits hold any
//! `u64`, so nothing is ever trimmed), and matches the 24-byte keys of the
//! Parallax paper's Table 1. With hashed order the hash is at most `2^63`
//! (19 digits), so the first digit after `"user"` is always `'0'`.

use std::cmp::Ordering;
use std::fmt;

/// FNV-1a 64-bit offset basis.
pub const FNV_OFFSET_BASIS_64: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV 64-bit prime.
pub const FNV_PRIME_64: u64 = 0x0000_0100_0000_01b3;

/// Length in bytes of every generated key: `"user"` + [`KEY_DIGITS`] digits.
pub const KEY_LEN: usize = 24;
/// Number of zero-padded decimal digits after the `"user"` prefix.
pub const KEY_DIGITS: usize = 20;
/// The prefix YCSB puts in front of every record key.
pub const KEY_PREFIX: &[u8; 4] = b"user";

/// Plain FNV-1a 64 over the eight little-endian bytes of `value`.
///
/// Each byte is XOR-ed into the state, which is then multiplied by
/// [`FNV_PRIME_64`] (wrapping). The byte order (low byte first) is the one
/// YCSB's `Utils.fnvhash64` uses when it repeatedly takes `val & 0xff` and
/// shifts right by 8.
#[must_use]
pub fn fnv1a_64(value: u64) -> u64 {
    value
        .to_le_bytes()
        .iter()
        .fold(FNV_OFFSET_BASIS_64, |state, &byte| {
            (state ^ u64::from(byte)).wrapping_mul(FNV_PRIME_64)
        })
}

/// YCSB's `Utils.fnvhash64`: [`fnv1a_64`] read as a signed 64-bit integer and
/// made non-negative with `Math.abs`.
///
/// The result is in `0..=2^63`. The single difference from Java is the one
/// hash value equal to `i64::MIN`, whose `Math.abs` stays negative in Java;
/// here it becomes `2^63` (its magnitude). That happens for at most one input
/// in `2^64` and never for the record numbers a benchmark uses in practice.
#[must_use]
pub fn ycsb_hash(value: u64) -> u64 {
    // Reinterpreting the bits as i64 is the point: Java's long is signed.
    #[allow(clippy::cast_possible_wrap)]
    let signed = fnv1a_64(value) as i64;
    signed.unsigned_abs()
}

/// How record numbers become keys (YCSB's `insertorder` property).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InsertOrder {
    /// `insertorder=hashed` (YCSB's default): the key holds [`ycsb_hash`] of the
    /// record number, so consecutive records are scattered over the key space.
    #[default]
    Hashed,
    /// `insertorder=ordered`: the key holds the record number itself, so key
    /// order equals record-number order.
    Ordered,
}

impl InsertOrder {
    /// The number printed into the key for `record` under this order.
    #[must_use]
    pub fn key_number(self, record: u64) -> u64 {
        match self {
            Self::Hashed => ycsb_hash(record),
            Self::Ordered => record,
        }
    }
}

/// A generated key: exactly [`KEY_LEN`] ASCII bytes, plus the record number it
/// was built from (kept so callers and tests can tell which record an operation
/// targets without reversing the hash).
///
/// Keys compare, order and hash by their bytes (then by record number, which
/// only matters if two orders are mixed).
#[derive(Clone, Copy, Eq)]
pub struct Key {
    bytes: [u8; KEY_LEN],
    record: u64,
}

impl Key {
    /// Builds the key of `record` under `order` (see the module docs for the
    /// exact format).
    #[must_use]
    pub fn new(record: u64, order: InsertOrder) -> Self {
        let mut bytes = [b'0'; KEY_LEN];
        bytes[..KEY_PREFIX.len()].copy_from_slice(KEY_PREFIX);
        let mut number = order.key_number(record);
        // Write the decimal digits right to left; the untouched positions stay
        // '0', which is the zero padding.
        let mut pos = KEY_LEN;
        while number > 0 && pos > KEY_PREFIX.len() {
            pos -= 1;
            // `number % 10` is below 10, so the narrowing is exact.
            #[allow(clippy::cast_possible_truncation)]
            let digit = (number % 10) as u8;
            bytes[pos] = b'0' + digit;
            number /= 10;
        }
        Self { bytes, record }
    }

    /// YCSB's default key for `record` (`insertorder=hashed`).
    #[must_use]
    pub fn hashed(record: u64) -> Self {
        Self::new(record, InsertOrder::Hashed)
    }

    /// The key for `record` with `insertorder=ordered`.
    #[must_use]
    pub fn ordered(record: u64) -> Self {
        Self::new(record, InsertOrder::Ordered)
    }

    /// The key bytes (always [`KEY_LEN`] long).
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }

    /// The key as text (it is always ASCII).
    #[must_use]
    pub fn as_str(&self) -> &str {
        // The bytes are the ASCII prefix and ASCII digits, so this never fails;
        // the fallback only exists to avoid a panic path.
        std::str::from_utf8(&self.bytes).unwrap_or("")
    }

    /// The record number this key was built from.
    #[must_use]
    pub fn record(&self) -> u64 {
        self.record
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes && self.record == other.record
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes.hash(state);
        self.record.hash(state);
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.bytes
            .cmp(&other.bytes)
            .then(self.record.cmp(&other.record))
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({} #{})", self.as_str(), self.record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Textbook FNV-1a over a byte slice, written independently of `fnv1a_64`.
    fn fnv1a_bytes(data: &[u8]) -> u64 {
        let mut h: u64 = 0xcbf29ce484222325;
        for &b in data {
            h ^= b as u64;
            h = h.wrapping_mul(1099511628211);
        }
        h
    }

    #[test]
    fn fnv1a_reference_vectors() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a_bytes(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a_bytes(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a_bytes(b"foobar"), 0x85944171f73967e8);
        for v in [0u64, 1, 2, 255, 256, 123_456_789, u64::MAX, 1 << 63] {
            assert_eq!(fnv1a_64(v), fnv1a_bytes(&v.to_le_bytes()), "value {v}");
        }
    }

    #[test]
    fn ycsb_hash_is_java_abs_of_signed_fnv() {
        for v in 0..10_000u64 {
            let raw = fnv1a_64(v) as i64;
            let expected = if raw < 0 {
                (-(raw as i128)) as u64
            } else {
                raw as u64
            };
            assert_eq!(ycsb_hash(v), expected);
            assert!(ycsb_hash(v) <= 1 << 63);
        }
    }

    #[test]
    fn key_format_is_user_plus_20_digits() {
        for r in [0u64, 1, 7, 999, 1_000_000, u64::MAX] {
            let k = Key::hashed(r);
            assert_eq!(k.as_bytes().len(), KEY_LEN);
            assert_eq!(k.as_str(), format!("user{:020}", ycsb_hash(r)));
            assert_eq!(k.record(), r);
            let o = Key::ordered(r);
            assert_eq!(o.as_str(), format!("user{r:020}"));
        }
        // Ordered keys sort like record numbers.
        assert!(Key::ordered(9) < Key::ordered(10));
        assert_eq!(Key::ordered(u64::MAX).as_str(), "user18446744073709551615");
    }
}
