//! The wasted-search count file (`docs/FORMAT.md`, "Search count file").
//!
//! Input: a flag byte, then the file's bytes (bit 0 of the flag: rewrite the checksum
//! first, so mutations reach the field checks). Properties: no panic; the decoder
//! allocates in proportion to the input; an accepted file's runs are in order with
//! nonzero counts and encode to the same bytes. Then the input read as counts (12 bytes
//! each) encodes to a file that decodes to them, sorted, zeros dropped, counts over 2^48
//! clamped, a run named twice keeping its first count.
#![no_main]

use hybridkv::fuzzing::{decode_search_counts, encode_search_counts};
use hybridkv_fuzz::{bounded, fix_trailing_crc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((flag, rest)) = input.split_first() else {
        return;
    };
    let mut file = rest.to_vec();
    if flag & 1 == 1 {
        fix_trailing_crc(&mut file);
    }
    let data = file.as_slice();
    let decoded = bounded("decode_search_counts", data.len(), 32, 1024, || {
        decode_search_counts(data)
    });
    if let Ok(counts) = &decoded {
        assert!(counts.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
        assert!(counts.iter().all(|c| c.2 > 0));
        assert_eq!(encode_search_counts(counts), data, "encode(decode(x)) != x");
    }

    let counts: Vec<(u32, u64, u64)> = data
        .chunks_exact(12)
        .map(|c| {
            let keyspace = u32::from(c[0] % 3);
            let file = u64::from(c[1] % 8);
            let searches = u64::from_le_bytes(c[2..10].try_into().unwrap_or_default()) >> (c[10] % 64);
            (keyspace, file, searches)
        })
        .collect();
    let mut want: Vec<(u32, u64, u64)> = Vec::new();
    for &c in &counts {
        if c.2 > 0 && !want.iter().any(|w| (w.0, w.1) == (c.0, c.1)) {
            want.push((c.0, c.1, c.2.min(1 << 48)));
        }
    }
    want.sort_unstable();
    assert_eq!(decode_search_counts(&encode_search_counts(&counts)), Ok(want));
});
