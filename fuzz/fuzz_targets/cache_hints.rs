//! The cache hint file (`docs/FORMAT.md`, "Cache hint file").
//!
//! Input: a flag byte, then the file's bytes (bit 0 of the flag: rewrite the checksum
//! first, so mutations reach the field checks). Properties: no panic; the decoder allocates in proportion to
//! the input; an accepted file's entries are in order and encode to a file that decodes
//! to the same entries. Then the input read as entries (22 bytes each) encodes to a file
//! that decodes to them, sorted, without repeats and with lengths out of range refused.
#![no_main]

use hybridkv::fuzzing::{decode_cache_hints, encode_cache_hints};
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
    let decoded = bounded("decode_cache_hints", data.len(), 32, 1024, || {
        decode_cache_hints(data)
    });
    if let Ok(entries) = &decoded {
        assert!(entries.windows(2).all(|w| (w[0].0, w[0].1, w[0].2) < (w[1].0, w[1].1, w[1].2)));
        assert_eq!(
            decode_cache_hints(&encode_cache_hints(entries)).as_ref(),
            Ok(entries),
            "decode(encode(decode(x))) != decode(x)"
        );
    }

    let mut entries: Vec<(u32, u64, u64, u32)> = data
        .chunks_exact(22)
        .map(|c| {
            let keyspace = u32::from(c[0] % 4);
            let file = u64::from(c[1] % 8);
            let tag = u64::from_le_bytes(c[2..10].try_into().unwrap_or_default());
            let len = u32::from_le_bytes(c[10..14].try_into().unwrap_or_default()) % (1 << 20) + 1;
            (keyspace, file, tag, len)
        })
        .collect();
    let file = encode_cache_hints(&entries);
    entries.sort_unstable();
    entries.dedup_by_key(|e| (e.0, e.1, e.2));
    assert_eq!(decode_cache_hints(&file), Ok(entries));
});
