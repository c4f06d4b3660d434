//! The whole engine with `direct_io` on: level files written with `O_DIRECT`, level files
//! and log segments (large and transient) read with `O_DIRECT` through aligned bounce
//! buffers, including reads of log records appended moments earlier through the page
//! cache. Values of every size class, updates that change class, deletes, flushes,
//! compactions, transient merges, GC passes and a reopen, checked against a model.
//!
//! Needs a file system that supports `O_DIRECT` (ext4, xfs, ...; not tmpfs) for the temp dir.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{key, small_opts, value, Model, Rng};
use hybridkv::{Db, Options};

fn opts() -> Options {
    Options {
        direct_io: true,
        ..small_opts()
    }
}

fn verify(db: &Db, model: &Model, what: &str) {
    for (k, v) in model {
        let got = db.get(k).unwrap_or_else(|e| panic!("{what}: get: {e}"));
        assert_eq!(got.as_deref(), Some(v.as_slice()), "{what}: key {k:?}");
    }
    let scanned: Vec<(Vec<u8>, Vec<u8>)> = db
        .range::<&[u8], _>(..)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{what}: scan: {e}"));
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scanned.len(), expected.len(), "{what}: scan length");
    assert!(scanned == expected, "{what}: scan differs from the model");
}

#[test]
fn every_path_works_with_direct_io() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let mut rng = Rng::new(0xD1EC7);
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for round in 0..6usize {
            for i in 0..300u64 {
                let k = key(rng.below(200) + 1000 * (i % 2));
                if rng.chance(10) {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else {
                    let v = value(&mut rng, round * 1000 + i as usize);
                    db.put(&k, &v).unwrap();
                    // Read back at once: a large value still in the page cache (not yet
                    // written back) must come back through O_DIRECT unchanged.
                    assert_eq!(db.get(&k).unwrap().as_deref(), Some(v.as_slice()));
                    model.insert(k, v);
                }
            }
            match round % 3 {
                0 => db.flush().unwrap(),
                1 => db.compact().unwrap(),
                _ => {
                    db.compact_all().unwrap();
                    db.gc().unwrap();
                }
            }
            verify(&db, &model, &format!("round {round}"));
        }
        let stats = db.stats().unwrap();
        assert!(stats.flushes > 0, "the workload must flush");
        assert!(stats.compactions > 0, "the workload must compact");
        let report = db.check().unwrap();
        assert!(
            report.is_ok() && report.orphans.is_empty(),
            "check: {report:?}"
        );
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    verify(&db, &model, "after reopen");
}
