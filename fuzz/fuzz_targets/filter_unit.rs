//! Bloom filter units of level files (`docs/FORMAT.md`, "Filter unit"), decoded as opening
//! a level file does.
//!
//! Input, first byte bit 7 set: raw mode, the rest is a unit, decoded and asked about a few
//! keys (no panic, allocation bounded by the unit). Otherwise structured: keys cut from the
//! input, a unit built from them at 1..=30 bits per key, then one byte of it changed
//! (position and mask from the input). Properties: the built unit decodes and admits
//! every key it was built from; a unit with one byte changed is refused, never panics.
#![no_main]

use hybridkv::fuzzing::{decode_filter, encode_filter};
use hybridkv_fuzz::bounded;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 0x80 != 0 {
        let probes: [&[u8]; 3] = [b"", b"key", rest];
        let _ = bounded("decode_filter", rest.len(), 4, 1024, || {
            decode_filter(rest, &probes)
        });
        return;
    }
    let bits_per_key = u32::from(mode % 30) + 1;
    let keys: Vec<&[u8]> = rest.chunks(usize::from(mode % 7) + 1).collect();
    let unit = encode_filter(bits_per_key, &keys);
    let answers = decode_filter(&unit, &keys).expect("a built unit decodes");
    assert!(answers.iter().all(|&a| a), "a key the unit was built from is ruled out");
    let (Some(&at), Some(&mask)) = (rest.first(), rest.last()) else {
        return;
    };
    if mask == 0 {
        return;
    }
    let mut changed = unit.clone();
    let at = usize::from(at) * 131 % changed.len();
    changed[at] ^= mask;
    // Bytes 0..8 and the bit array are under the checksum, 8..12 is the checksum itself,
    // 12..16 must be zero: any one changed byte is refused.
    assert!(
        decode_filter(&changed, &keys).is_err(),
        "byte {at} changed by {mask:#x} was accepted"
    );
});
