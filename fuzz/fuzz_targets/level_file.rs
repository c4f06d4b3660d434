//! Whole level files (`docs/FORMAT.md`, "Level file"): opened and read every way the
//! engine reads them (footer check, cursor walk through the index, seeks, point lookups,
//! overflow blobs, the compaction scanner).
//!
//! Input, first byte bit 7 set: raw mode, the rest is the file (zero-padded to whole 4 KiB
//! blocks; bit 0 rewrites every checksum first). Otherwise structured: entries, node
//! sizes, byte mutations and a truncation derived from the input; the file is written
//! with the real builder, then mutated (bit 0: checksums rewritten after the mutations).
//! Properties: no panic, allocation bounded by the file size; an unmutated file reads
//! back exactly the entries it was built from, through the cursor and the scanner alike.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use hybridkv::fuzzing::{decode_level_file, encode_level_file, LevelEntry, LevelValue, LogPtr};
use hybridkv_fuzz::{bounded, fix_level_file};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Spec {
    entries: Vec<(u16, u8, u16, u8)>,
    leaf_pages: u8,
    index_pages: u8,
    mutations: Vec<(u32, u8)>,
    truncate_blocks: Option<u8>,
}

fn read(data: &[u8]) -> hybridkv::Result<hybridkv::fuzzing::LevelScan> {
    bounded("level file read", data.len(), 4, 1 << 20, || {
        decode_level_file(data)
    })
}

fuzz_target!(|input: &[u8]| {
    let Some((&flags, rest)) = input.split_first() else {
        return;
    };
    if flags & 0x80 != 0 {
        let mut data = rest.to_vec();
        data.resize(data.len().next_multiple_of(4096).max(4096), 0);
        if flags & 1 != 0 {
            fix_level_file(&mut data);
        }
        let _ = read(&data);
        return;
    }
    let Ok(spec) = Spec::arbitrary_take_rest(Unstructured::new(rest)) else {
        return;
    };
    let mut rows: Vec<LevelEntry> = spec
        .entries
        .iter()
        .enumerate()
        .map(|(i, &(k, kind, vlen, fill))| {
            let p = LogPtr {
                segment: u64::from(fill),
                offset: u64::from(vlen) * 16,
                len: u32::from(vlen) + 40,
            };
            let v = match kind % 6 {
                0 | 1 => LevelValue::Inline(vec![fill; usize::from(vlen % 300)]),
                2 => LevelValue::Inline(vec![fill; usize::from(vlen % 12_000)]),
                3 => LevelValue::Medium(p),
                4 => LevelValue::Large(p),
                _ => LevelValue::Tombstone,
            };
            (format!("key{k:05}").into_bytes(), i as u64 + 1, v)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.dedup_by(|a, b| a.0 == b.0);
    let leaf = 4096 + usize::from(spec.leaf_pages % 5) * 4096;
    let index = 12288 + usize::from(spec.index_pages % 4) * 4096;
    let mut data = encode_level_file(&rows, leaf, index).expect("build");
    if spec.mutations.is_empty() && spec.truncate_blocks.is_none() {
        // Values the builder put in overflow blobs come back loaded, so the entries read
        // back are exactly the ones built.
        let got = read(&data).expect("an unmutated level file reads");
        assert_eq!(got.cursor, rows, "cursor walk != built entries");
        assert_eq!(got.scanner, rows, "scanner walk != built entries");
        return;
    }
    let n = data.len();
    for &(at, x) in &spec.mutations {
        data[at as usize % n] ^= x;
    }
    if let Some(t) = spec.truncate_blocks {
        let blocks = n / 4096;
        data.truncate((usize::from(t) % blocks + 1) * 4096);
    }
    if flags & 1 != 0 {
        fix_level_file(&mut data);
    }
    let _ = read(&data);
});
