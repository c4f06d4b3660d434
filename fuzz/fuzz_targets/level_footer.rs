//! Level-file footers (`docs/FORMAT.md`, "Footer").
//!
//! Input: `[flags u8][footer bytes]`. Bit 0 rewrites the footer checksum first.
//! Properties: no panic; an accepted footer has node sizes and height in range and
//! re-encodes to the same bytes (the reserved tail, which the decoder ignores, aside), under
//! the version written now for what it holds (6 with a large pointer table, else 5): an
//! older footer (versions 2 to 5 end their fields at 84, version 1 at 72, version 6 at 96)
//! to the same fields;
//! decode(encode(f)) == f for footers derived from the input.
#![no_main]

use hybridkv::fuzzing::{decode_footer, encode_footer, Footer, FOOTER_SIZE};
use hybridkv_fuzz::fix_footer;
use libfuzzer_sys::fuzz_target;

/// Bytes the encoder writes (since version 6, with the large pointer table's offset and
/// length); the rest up to the checksum is reserved (zero). Versions 2 to 5 (still read)
/// end their fields at 84, version 1 at 72.
const FIELDS: usize = 96;
const FIELDS_V2: usize = 84;
const FIELDS_V1: usize = 72;
/// Where the version is.
const VERSION: std::ops::Range<usize> = 8..12;

fuzz_target!(|input: &[u8]| {
    let Some((&flags, rest)) = input.split_first() else {
        return;
    };
    let mut f = rest.to_vec();
    if flags & 1 != 0 {
        fix_footer(&mut f);
    }
    if let Ok(d) = decode_footer(&f) {
        let ok = |s: u32| (4096..=1 << 20).contains(&s) && s.is_multiple_of(4096);
        assert!(ok(d.leaf_size) && ok(d.index_size) && d.height <= 64);
        let again = encode_footer(&d);
        // An older footer re-encodes under the version written now: the version (and so
        // the checksum) differs, and a version-1 footer's bytes past its fields are not read.
        let version = |b: &[u8]| {
            b.get(VERSION)
                .map(|v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]))
        };
        let (old, now) = (version(&f), version(&again));
        // A version 6 footer that names no table is written as version 5.
        let no_table = old == Some(6) && d.pointers_offset == 0;
        assert!(
            old <= now || (no_table && now == Some(5)),
            "the version went back: {old:?} -> {now:?}"
        );
        assert_eq!(again[..8], f[..8], "magic changed");
        let fields = match old {
            Some(1) => FIELDS_V1,
            Some(6) => FIELDS,
            _ => FIELDS_V2,
        };
        assert_eq!(again[12..fields], f[12..fields], "encode(decode(x)) != x");
        if old != Some(1) && f[fields..FOOTER_SIZE - 4].iter().all(|&b| b == 0) {
            let whole = if old == now {
                FOOTER_SIZE
            } else {
                FOOTER_SIZE - 4
            };
            assert_eq!(again[12..whole], f[12..whole], "encode(decode(x)) != x");
        }
    }
    if rest.len() >= 64 {
        let u = |i: usize| u64::from_le_bytes(rest[i..i + 8].try_into().unwrap_or_default());
        let f = Footer {
            height: (u(0) % 65) as u32,
            root: u(8),
            entries: u(16),
            tombstones: u(24),
            kv_bytes: u(32),
            leaves: u(40),
            leaf_size: (1 + u(48) % 256) as u32 * 4096,
            index_size: (1 + u(56) % 256) as u32 * 4096,
            medium_bytes: u(0) ^ u(8),
            // No filter: a footer's filter fields are checked against the file it ends.
            filter_offset: 0,
            filter_len: 0,
            // A table or none (its range, too, is checked against the file it ends).
            pointers_offset: (u(16) % 1024) * 4096,
            pointers_len: 0,
        };
        let f = Footer {
            pointers_len: if f.pointers_offset == 0 {
                0
            } else {
                1 + (u(24) % 100_000) as u32
            },
            ..f
        };
        assert_eq!(
            decode_footer(&encode_footer(&f)).expect("encoded footer"),
            f
        );
    }
});
