//! The read path's costs as `Stats` reports them: pinned level indexes (PinK) make a
//! point lookup read at most one leaf per run; the node cache's hits and misses, the
//! lookup reads and the scans are counted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::{Db, Options, Placement};

fn key(i: u32) -> Vec<u8> {
    format!("key{:010}", i.wrapping_mul(2_654_435_761)).into_bytes()
}

/// A database of `n` small pairs spread over several runs, with no node cache and no
/// Bloom filter, so every lookup reads its nodes from the files.
fn build(dir: &std::path::Path, n: u32, pinned: usize) -> Db {
    let opts = Options {
        memtable_size: 256 << 10,
        cache_bytes: 0,
        bloom_bits_per_key: 0,
        placement: Placement::InPlace,
        pinned_index_bytes: pinned,
        ..Options::default()
    };
    let db = Db::open(dir, opts.clone()).unwrap();
    for i in 0..n {
        db.put(key(i), vec![(i % 251) as u8; 60]).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    drop(db);
    // Reopen, so that recovery's open of every level file is what pins the indexes.
    Db::open(dir, opts).unwrap()
}

fn runs(db: &Db) -> u64 {
    db.stats()
        .unwrap()
        .levels
        .iter()
        .map(|l| l.files as u64)
        .sum()
}

#[test]
fn a_lookup_reads_at_most_one_leaf_per_run_with_pinned_indexes() {
    let n = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let db = build(dir.path(), n, 256 << 20);
    let s = db.stats().unwrap();
    let runs = runs(&db);
    assert!(runs >= 2, "{s}");
    assert!(s.pinned_index_bytes > 0, "{s}");
    assert_eq!(
        s.pinned_index_bytes,
        s.levels.iter().map(|l| l.pinned_bytes).sum::<u64>()
    );
    let before = db.stats().unwrap().lookup_reads();
    let probes: Vec<u32> = (0..n).step_by(97).collect();
    for &i in &probes {
        assert_eq!(db.get(key(i)).unwrap(), Some(vec![(i % 251) as u8; 60]));
    }
    let reads = db.stats().unwrap().lookup_reads() - before;
    assert!(
        reads <= probes.len() as u64 * runs,
        "{reads} reads for {} gets over {runs} runs",
        probes.len()
    );

    // The same database without pinning descends each tree from its root.
    drop(db);
    let dir2 = tempfile::tempdir().unwrap();
    let unpinned = build(dir2.path(), n, 0);
    assert_eq!(unpinned.stats().unwrap().pinned_index_bytes, 0);
    let before = unpinned.stats().unwrap().lookup_reads();
    for &i in &probes {
        assert!(unpinned.get(key(i)).unwrap().is_some());
    }
    let unpinned_reads = unpinned.stats().unwrap().lookup_reads() - before;
    assert!(
        unpinned_reads > reads,
        "unpinned {unpinned_reads} reads, pinned {reads}"
    );
}

#[test]
fn cache_hits_misses_and_scans_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            memtable_size: 256 << 10,
            bloom_bits_per_key: 0,
            pinned_index_bytes: 0,
            ..Options::default()
        },
    )
    .unwrap();
    for i in 0..5_000 {
        db.put(key(i), b"value").unwrap();
    }
    db.flush().unwrap();
    let s0 = db.stats().unwrap();
    for _ in 0..3 {
        assert!(db.get(key(7)).unwrap().is_some());
    }
    let s1 = db.stats().unwrap();
    let (hits, misses) = (
        s1.cache_hits - s0.cache_hits,
        s1.cache_misses - s0.cache_misses,
    );
    // The first get misses on each node of its path, the next two find them all.
    assert!(misses >= 1, "{misses} misses");
    assert!(hits >= 2 * misses, "{hits} hits, {misses} misses");
    assert!(s1.cache_hit_ratio() > 0.0 && s1.cache_hit_ratio() < 1.0);
    assert_eq!(s1.gets - s0.gets, 3);

    let pairs = db.range(key(0)..).take(10).count();
    assert_eq!(pairs, 10);
    let _ = db.prefix(b"key").next();
    assert_eq!(db.stats().unwrap().scans - s1.scans, 2);
}
