//! Large pointer tables of level files (`docs/FORMAT.md`, "Large pointer table"), decoded
//! as opening a level file does.
//!
//! Input, first byte bit 7 set: raw mode, the rest is a table, decoded and asked about a
//! few keys (no panic, allocation bounded by the table). Otherwise structured: keys cut
//! from the input, each given a pointer made from its bytes, a table built from them, then
//! one byte of it changed (position and mask from the input). Properties: the built table
//! decodes and names each key's own pointer, except for keys whose fingerprint another
//! key of the table shares (named by none); a table with one byte changed is refused.
#![no_main]

use hybridkv::fuzzing::{decode_large_pointers, encode_large_pointers, LogPtr};
use hybridkv_fuzz::bounded;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 0x80 != 0 {
        let probes: [&[u8]; 3] = [b"", b"key", rest];
        let _ = bounded("decode_large_pointers", rest.len(), 4, 1024, || {
            decode_large_pointers(rest, &probes)
        });
        return;
    }
    let mut keys: Vec<&[u8]> = rest.chunks(usize::from(mode % 7) + 1).collect();
    keys.sort_unstable();
    keys.dedup();
    let pairs: Vec<(&[u8], LogPtr)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let p = LogPtr {
                segment: u64::from(k[0]) + 1,
                offset: 16 + 1000 * i as u64,
                len: 20 + k.len() as u32,
            };
            (*k, p)
        })
        .collect();
    let Some(unit) = encode_large_pointers(&pairs) else {
        return; // every fingerprint shared (or no key)
    };
    let named = decode_large_pointers(&unit, &keys).expect("a built table decodes");
    let mut shared = 0;
    for ((_, p), got) in pairs.iter().zip(&named) {
        match got {
            Some(q) => assert_eq!(q, p, "a key named another key's pointer"),
            None => shared += 1,
        }
    }
    // A fingerprint left out is shared by two keys at least.
    assert!(shared != 1, "one key alone lost its pointer");
    let (Some(&at), Some(&mask)) = (rest.first(), rest.last()) else {
        return;
    };
    if mask == 0 {
        return;
    }
    let mut changed = unit.clone();
    let at = usize::from(at) * 131 % changed.len();
    changed[at] ^= mask;
    // Bytes 0..8 and the entries are under the checksum, 8..12 is the checksum itself,
    // 12..16 must be zero: any one changed byte is refused.
    assert!(
        decode_large_pointers(&changed, &keys).is_err(),
        "byte {at} changed by {mask:#x} was accepted"
    );
});
