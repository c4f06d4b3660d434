//! Level-file nodes (`docs/FORMAT.md`, "Node header", "Leaf entries", "Index entries").
//!
//! Input: `[flags u8][node bytes]`. Bit 0: decode as an index node (else a leaf); bit 1:
//! rewrite the node checksum first; bit 2: verify the checksum (as a node read from disk
//! is) rather than only the structure (as a cached node is). Properties: no panic, no
//! allocation beyond the node's size; an accepted node's entries, written again with the
//! real node writer into a node of the same size, decode to the same entries; and
//! entries derived from the input, written with the node writer, decode to themselves.
#![no_main]

use hybridkv::fuzzing::{
    decode_index, decode_leaf, encode_index, encode_leaf, seal_node, LevelEntry, LevelValue, LogPtr,
};
use hybridkv_fuzz::bounded;
use libfuzzer_sys::fuzz_target;

fn entries_from(bytes: &[u8]) -> Vec<LevelEntry> {
    let mut out = Vec::new();
    let mut key = Vec::new();
    for (i, c) in bytes.chunks(6).enumerate() {
        key.push(c[0]);
        let b = |j: usize| u64::from(c.get(j).copied().unwrap_or(0));
        let p = LogPtr {
            segment: b(1),
            offset: b(2) << 8,
            len: b(3) as u32 * 40,
        };
        let value = match c[0] % 5 {
            0 => LevelValue::Inline(vec![c[0]; b(1) as usize * 2]),
            1 => LevelValue::Overflow {
                offset: b(2) << 12,
                len: b(3) as u32 * 1000,
                crc: b(4) as u32,
            },
            2 => LevelValue::Medium(p),
            3 => LevelValue::Large(p),
            _ => LevelValue::Tombstone,
        };
        out.push((key.clone(), i as u64 * 7 + b(5), value));
    }
    out
}

fuzz_target!(|input: &[u8]| {
    let Some((&flags, rest)) = input.split_first() else {
        return;
    };
    let mut node = rest.to_vec();
    if flags & 2 != 0 {
        seal_node(&mut node);
    }
    let verify = flags & 4 != 0;
    let size = node.len();
    if flags & 1 != 0 {
        let decoded = bounded("decode_index", size, 64, 1024, || {
            decode_index(&node, verify)
        });
        if let Ok(entries) = decoded {
            if let Some(again) = encode_index(size, &entries) {
                assert_eq!(
                    decode_index(&again, true).expect("re-encoded index"),
                    entries
                );
            }
        }
        let pivots: Vec<(Vec<u8>, u64)> = rest
            .chunks(3)
            .map(|c| (c.to_vec(), u64::from(c[0]) << 12))
            .collect();
        if let Some(enc) = encode_index(12288, &pivots) {
            assert_eq!(decode_index(&enc, true).expect("encoded index"), pivots);
        }
    } else {
        let decoded = bounded("decode_leaf", size, 64, 1024, || decode_leaf(&node, verify));
        if let Ok(entries) = decoded {
            if let Some(again) = encode_leaf(size, &entries) {
                assert_eq!(decode_leaf(&again, true).expect("re-encoded leaf"), entries);
            }
        }
        let want = entries_from(rest);
        if let Some(enc) = encode_leaf(8192, &want) {
            assert_eq!(decode_leaf(&enc, true).expect("encoded leaf"), want);
        }
    }
});
