//! Medium pairs travel the upper levels in the transient log and are merged in place at
//! the last level, where their segments are freed whole (no GC on the transient log).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::{Db, MediumMergeLevel, Options};
use std::collections::BTreeMap;

fn opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 2,
        max_levels: 3,
        cache_bytes: 4 << 20,
        gc_interval: std::time::Duration::from_secs(3600),
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{:07}", i.wrapping_mul(7919) % 1_000_003).into_bytes()
}

fn medium(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{i}/{round}/").into_bytes();
    v.resize(150 + (i % 200) as usize, b'm');
    v
}

fn tlog_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "tlog")
        })
        .count()
}

#[test]
fn medium_pairs_go_through_the_transient_log_and_merge_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..8 {
        for i in 0..3000 {
            db.put(key(i), medium(i, round)).unwrap();
            model.insert(key(i), medium(i, round));
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let s = db.stats().unwrap();
    assert!(
        s.medium_values_logged > 0,
        "no medium pair reached the transient log: {s}"
    );
    assert!(s.transient_segments_created > 0, "{s}");
    assert!(
        s.medium_values_merged > 0,
        "no medium pair was merged in place: {s}"
    );
    assert!(s.transient_segments_freed > 0, "{s}");
    // Segments on disk are exactly those the engine still tracks.
    assert_eq!(tlog_files(dir.path()) as u64, s.transient_segments, "{s}");
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    let scanned: BTreeMap<_, _> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(scanned, model);
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "after reopen");
    }
}

#[test]
fn the_bottom_level_holds_medium_pairs_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..4000 {
        db.put(key(i), medium(i, 0)).unwrap();
    }
    db.compact().unwrap();
    let s = db.stats().unwrap();
    let bottom = s.levels.iter().rev().find(|l| l.files > 0).unwrap();
    // Bottom level file holds the values themselves: at least the medium payload.
    assert!(bottom.file_bytes >= 4000 * 150, "{s}");
    assert!(s.levels.len() >= 2);
}

#[test]
fn second_to_last_merge_level_also_frees_segments() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        medium_merge_level: MediumMergeLevel::SecondToLast,
        ..opts()
    };
    let db = Db::open(dir.path(), o).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..4 {
        for i in 0..2500 {
            if (i + round) % 9 == 0 {
                db.delete(key(i)).unwrap();
                model.remove(&key(i));
            } else {
                db.put(key(i), medium(i, round)).unwrap();
                model.insert(key(i), medium(i, round));
            }
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let scanned: BTreeMap<_, _> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(scanned, model);
    let s = db.stats().unwrap();
    assert_eq!(tlog_files(dir.path()) as u64, s.transient_segments, "{s}");
}
