//! Writes the seed corpus `fuzz/corpus/<target>/` from the engine's real encoders.
//! Run once from `fuzz/`: `cargo run --example gen_corpus` (it replaces the seed files it
//! owns, named `seed-*`; files libFuzzer added are left alone).

use hybridkv::fuzzing::*;
use std::path::Path;

struct Out {
    dir: std::path::PathBuf,
    n: usize,
}

impl Out {
    fn new(target: &str) -> Out {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(target);
        std::fs::create_dir_all(&dir).expect("mkdir");
        for e in std::fs::read_dir(&dir).expect("list").flatten() {
            if e.file_name().to_string_lossy().starts_with("seed-") {
                std::fs::remove_file(e.path()).expect("rm");
            }
        }
        Out { dir, n: 0 }
    }
    fn add(&mut self, flags: Option<u8>, bytes: &[u8]) {
        let mut v = Vec::with_capacity(bytes.len() + 1);
        v.extend(flags);
        v.extend_from_slice(bytes);
        std::fs::write(self.dir.join(format!("seed-{:02}", self.n)), v).expect("write");
        self.n += 1;
    }
}

/// Deterministic pseudo-random bytes (xorshift).
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn p(segment: u64, offset: u64, len: u32) -> LogPtr {
    LogPtr {
        segment,
        offset,
        len,
    }
}

fn batches() -> Vec<Vec<Op>> {
    vec![
        vec![],
        vec![Op::Put(b"a".to_vec(), b"1".to_vec())],
        vec![
            Op::Put(b"key1".to_vec(), vec![7; 40]),
            Op::Delete(b"key2".to_vec()),
        ],
        vec![Op::PutLarge(b"big".to_vec(), p(3, 16, 1044))],
        vec![
            Op::Delete(b"x".to_vec()),
            Op::Put(b"user0001".to_vec(), vec![1; 200]),
            Op::PutLarge(b"user0002".to_vec(), p(9, 4096, 2000)),
            Op::Put(b"user0003".to_vec(), vec![]),
            Op::Delete(b"user0004".to_vec()),
            Op::Merge(b"user0005".to_vec(), 1u64.to_le_bytes().to_vec()),
        ],
        vec![
            Op::DeleteRange(b"user0001".to_vec(), Some(b"user0003".to_vec())),
            Op::Put(b"user0002".to_vec(), vec![2; 9]),
            Op::DeleteRange(b"z".to_vec(), None),
        ],
    ]
}

fn main() {
    let mut o = Out::new("batch");
    for ops in batches() {
        let mut v = (ops.len() as u32).to_le_bytes().to_vec();
        v.extend(encode_batch(&ops));
        o.add(None, &v);
    }
    let n_batch = o.n;

    let mut o = Out::new("log_ptr");
    for ptr in [p(0, 0, 0), p(1, 16, 1044), p(u64::MAX, 1 << 40, u32::MAX)] {
        o.add(None, &encode_log_ptr(ptr));
    }
    let n_ptr = o.n;

    let mut o = Out::new("wal_chunk");
    let recs: Vec<(u64, u32, Vec<u8>)> = batches()
        .iter()
        .enumerate()
        .map(|(i, ops)| (1 + 10 * i as u64, ops.len() as u32, encode_batch(ops)))
        .collect();
    for k in [0, 1, 3, recs.len()] {
        let f = encode_wal(&recs[..k]).expect("wal");
        o.add(Some(0), &f);
        o.add(Some(1), &f);
        if k > 0 {
            o.add(Some(0), &f[..f.len() - 3]); // torn tail
        }
    }
    let n_wal = o.n;

    let mut o = Out::new("log_segment");
    let recs: Vec<(Vec<u8>, Vec<u8>, u64)> = (0..4u8)
        .map(|i| {
            (
                vec![b'k', i],
                vec![i; 30 * usize::from(i)],
                u64::from(i) + 1,
            )
        })
        .collect();
    for k in 0..=recs.len() {
        let (f, _) = encode_segment(&recs[..k]).expect("segment");
        o.add(Some(0), &f);
        if k > 1 {
            o.add(Some(1), &f[..f.len() - 5]);
        }
    }
    let n_seg = o.n;

    let mut o = Out::new("level_node");
    let leaf = [
        (b"apple".to_vec(), 7, LevelValue::Inline(b"red".to_vec())),
        (b"banana".to_vec(), 8, LevelValue::Tombstone),
        (
            b"cherry".to_vec(),
            9,
            LevelValue::Overflow {
                offset: 4096,
                len: 100_000,
                crc: 0xdead_beef,
            },
        ),
        (b"date".to_vec(), 10, LevelValue::Large(p(3, 16, 1044))),
        (b"elder".to_vec(), 11, LevelValue::Medium(p(4, 16, 300))),
        (b"fig".to_vec(), 1 << 40, LevelValue::Deltas(b"+1+2".to_vec())),
    ];
    for size in [256, 512] {
        for k in [1, 3, leaf.len()] {
            let node = encode_leaf(size, &leaf[..k]).expect("leaf fits");
            o.add(Some(4), &node);
            o.add(Some(2), &node);
        }
    }
    let pivots: Vec<(Vec<u8>, u64)> = (0..6u64)
        .map(|i| (format!("key{i:03}").into_bytes(), i * 8192))
        .collect();
    for size in [256, 512] {
        let node = encode_index(size, &pivots).expect("index fits");
        o.add(Some(5), &node);
        o.add(Some(3), &node);
    }
    let n_node = o.n;

    let mut o = Out::new("level_footer");
    for (h, leaf, index) in [(0, 8192, 12288), (1, 8192, 12288), (3, 65536, 1 << 20)] {
        let f = Footer {
            height: h,
            root: 4096 * u64::from(h),
            entries: 100,
            tombstones: 3,
            kv_bytes: 12345,
            leaves: 2,
            leaf_size: leaf,
            index_size: index,
            medium_bytes: 77,
            filter_offset: 0,
            filter_len: 0,
            pointers_offset: 0,
            pointers_len: 0,
        };
        let bytes = encode_footer(&f);
        o.add(Some(0), &bytes);
        o.add(Some(1), &bytes);
        // Footers of the versions still read (2 and 3 share today's layout; 1 has no
        // filter fields), their checksums rewritten by the target (flag bit 0).
        for version in [1u32, 2, 3] {
            let mut old = bytes.clone();
            old[8..12].copy_from_slice(&version.to_le_bytes());
            o.add(Some(1), &old);
        }
    }
    let n_footer = o.n;

    let mut o = Out::new("level_file");
    let file = |n: usize, big: bool| {
        let rows: Vec<LevelEntry> = (0..n)
            .map(|i| {
                let v = match i % 5 {
                    0 if big => LevelValue::Inline(vec![i as u8; 5000]),
                    1 => LevelValue::Tombstone,
                    2 => LevelValue::Medium(p(5, 16 * i as u64, 300)),
                    3 => LevelValue::Large(p(6, 16 * i as u64, 2000)),
                    _ => LevelValue::Inline(vec![i as u8; 20]),
                };
                (format!("key{i:05}").into_bytes(), i as u64 + 1, v)
            })
            .collect();
        encode_level_file(&rows, 8192, 12288).expect("level file")
    };
    o.add(Some(0x80), &file(0, false));
    o.add(Some(0x80), &file(10, false));
    o.add(Some(0x81), &file(10, true));
    o.add(Some(0x80), &file(300, false));
    for s in 0..6 {
        o.add(Some(s as u8 & 1), &noise(100 + s, 64 + 150 * s as usize));
    }
    let n_file = o.n;

    let mut o = Out::new("manifest");
    let seg = |id, kind, owner, garbage| ManifestSegment {
        id,
        kind,
        owner,
        garbage,
    };
    let ms = [
        Manifest {
            next_file_id: 1,
            ..Manifest::default()
        },
        Manifest {
            next_file_id: 10,
            log_min_id: 7,
            flushed_lsn: 12345,
            levels: vec![(1, 8, 4096), (1, 6, 4096), (3, 5, 8192)],
            segments: vec![seg(2, 1, 0, 777), seg(9, 2, 5, 0)],
            ..Manifest::default()
        },
        Manifest {
            next_file_id: 20,
            log_min_id: 7,
            flushed_lsn: 500,
            levels: vec![(1, 18, 4096), (2, 12, 8192)],
            range_tombstones: vec![
                ManifestRangeTombstone {
                    lsn: 400,
                    start: b"user:".to_vec(),
                    end: Some(b"user;".to_vec()),
                    pending: vec![12],
                },
                ManifestRangeTombstone {
                    lsn: 450,
                    start: Vec::new(),
                    end: None,
                    pending: vec![12, 18],
                },
            ],
            ..Manifest::default()
        },
        Manifest {
            next_file_id: 1000,
            log_min_id: 990,
            flushed_lsn: 1 << 30,
            levels: (1..8)
                .map(|l| (l, 100 + u64::from(l), 4096 * u64::from(l)))
                .collect(),
            segments: (0..5).map(|i| seg(200 + i, 1, 0, i * 1000)).collect(),
            ..Manifest::default()
        },
    ];
    for m in &ms {
        let b = encode_manifest(m);
        o.add(Some(0), &b);
        o.add(Some(1), &b);
    }
    let n_man = o.n;

    let mut o = Out::new("options_file");
    let variants = [
        hybridkv::Options::default(),
        hybridkv::Options {
            placement: hybridkv::Placement::AllLog,
            space_amp_limit: Some(1.5),
            gc_interval: std::time::Duration::from_micros(1500),
            ..hybridkv::Options::default()
        },
    ];
    for v in &variants {
        let b = encode_options(v);
        o.add(Some(0), &b);
        o.add(Some(1), &b);
    }
    let n_opts = o.n;

    let mut o = Out::new("cache_hints");
    let hinted = [
        vec![],
        vec![(0, 7, 4096, 4096), (0, 7, 8192, 4096), (0, 9, 700, 1030)],
        vec![(0, 3, (1 << 63) | 4096, 4096), (2, 11, 0, 8192), (2, 12, 123_456, 1500)],
    ];
    for h in &hinted {
        let b = encode_cache_hints(h);
        o.add(Some(0), &b);
        o.add(Some(1), &b);
    }
    let n_hints = o.n;

    let mut o = Out::new("search_counts");
    let counted = [
        vec![],
        vec![(0, 7, 1), (0, 9, 2_681_971), (0, 12, 80_034)],
        vec![(0, 3, 1 << 48), (2, 3, 17), (2, 11, 350_000)],
    ];
    for c in &counted {
        let b = encode_search_counts(c);
        o.add(Some(0), &b);
        o.add(Some(1), &b);
    }
    let n_counts = o.n;

    let mut o = Out::new("ops_vs_model");
    for s in 0..12 {
        o.add(None, &noise(s, 48 + 40 * s as usize));
    }
    let n_ops = o.n;

    println!(
        "seeds: batch {n_batch}, log_ptr {n_ptr}, wal_chunk {n_wal}, log_segment {n_seg}, \
         level_node {n_node}, level_footer {n_footer}, level_file {n_file}, manifest {n_man}, \
         options_file {n_opts}, cache_hints {n_hints}, search_counts {n_counts}, \
         ops_vs_model {n_ops}"
    );
}
