//! Range and prefix deletion: one write whatever the number of keys, seen at once by gets,
//! scans and reverse scans, not by snapshots taken before; kept across reopen (from the
//! small log and, once flushed, from the manifest); applied by flushes and compactions,
//! which drop what it deleted (so its space comes back, large values through GC) and then
//! forget it; writes after it survive it, merges after it start from nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::io::IoComponent;
use hybridkv::{Append, Db, Error, Options};
use std::sync::Arc;
use std::time::Duration;

fn opts() -> Options {
    Options {
        memtable_size: 256 << 10,
        growth_factor: 4,
        large_segment_size: 256 << 10,
        gc_interval: Duration::from_secs(3600),
        merge_operator: Some(Arc::new(Append)),
        ..Options::default()
    }
}

fn k(prefix: &str, i: u32) -> String {
    format!("{prefix}{i:06}")
}

fn keys(db: &Db) -> Vec<String> {
    db.keys::<&[u8], _>(..)
        .map(|k| String::from_utf8(k.unwrap()).unwrap())
        .collect()
}

#[test]
fn a_range_deletion_is_one_small_write_whatever_it_covers() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..20_000 {
        db.put(k("a", i), [7u8; 40]).unwrap();
    }
    db.put("b", "stays").unwrap();
    db.flush().unwrap();
    let before = db.stats().unwrap();
    db.delete_range("a", "b").unwrap();
    let after = db.stats().unwrap();
    let logged = after.io.written_by(IoComponent::Wal) - before.io.written_by(IoComponent::Wal);
    assert!(
        logged < 256,
        "the deletion wrote {logged} bytes to the small log"
    );
    assert_eq!(after.range_deletes, 1);
    assert_eq!(after.range_tombstones, 1);
    assert_eq!(db.get(k("a", 0)).unwrap(), None);
    assert_eq!(db.get(k("a", 19_999)).unwrap(), None);
    assert_eq!(keys(&db), vec!["b"]);
    assert_eq!(db.iter().rev().count(), 1);
    // start > end is refused and deletes nothing; start == end deletes nothing.
    match db.delete_range("b", "a") {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("after its end"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    db.delete_range("b", "b").unwrap();
    assert_eq!(keys(&db), vec!["b"]);
}

#[test]
fn compaction_drops_what_a_range_deleted_and_forgets_it_and_gc_frees_its_large_values() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..3_000 {
        // Small, medium and large values.
        let len = [9, 104, 2_000][(i % 3) as usize];
        db.put(k("user:", i), vec![i as u8; len]).unwrap();
    }
    db.put("zz", "stays").unwrap();
    db.compact_all().unwrap();
    let full = db.space().unwrap().total_on_disk;
    db.delete_prefix("user:").unwrap();
    assert_eq!(keys(&db), vec!["zz"]);
    db.compact_all().unwrap();
    let s = db.stats().unwrap();
    assert_eq!(s.range_tombstones, 0, "forgotten once no run needs it");
    assert!(s.dropped_by_range >= 3_000, "{}", s.dropped_by_range);
    let entries: u64 = s.levels.iter().map(|l| l.entries).sum();
    assert_eq!(entries, 1, "only zz is left in the levels");
    let gc = db.gc().unwrap();
    assert!(gc.segments_freed > 0, "{gc:?}");
    assert_eq!(gc.entries_relocated, 0, "every large value was deleted");
    let left = db.space().unwrap().total_on_disk;
    assert!(left < full / 4, "{left} bytes left of {full}");
    assert_eq!(keys(&db), vec!["zz"]);
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(keys(&db), vec!["zz"]);
    assert_eq!(db.stats().unwrap().range_tombstones, 0);
}

#[test]
fn a_snapshot_taken_before_still_sees_the_deleted_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..2_000 {
        db.put(k("a", i), [1u8; 30]).unwrap();
    }
    db.flush().unwrap();
    let snap = db.snapshot().unwrap();
    db.delete_range(k("a", 500), k("a", 1_500)).unwrap();
    let after = db.snapshot().unwrap();
    for stage in ["memtable", "flushed", "compacted"] {
        assert_eq!(snap.keys::<&[u8], _>(..).count(), 2_000, "{stage}");
        assert_eq!(snap.get(k("a", 700)).unwrap().map(|v| v.len()), Some(30));
        assert_eq!(after.keys::<&[u8], _>(..).count(), 1_000, "{stage}");
        assert_eq!(after.get(k("a", 700)).unwrap(), None, "{stage}");
        assert_eq!(db.get(k("a", 1_500)).unwrap().map(|v| v.len()), Some(30));
        match stage {
            "memtable" => db.flush().unwrap(),
            "flushed" => db.compact_all().unwrap(),
            _ => {}
        }
    }
}

#[test]
fn range_tombstones_survive_reopen_from_the_log_and_from_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..1_000 {
            db.put(k("a", i), [2u8; 20]).unwrap();
        }
        db.flush().unwrap();
        // Only in the small log when the handle goes.
        db.delete_range(k("a", 0), k("a", 100)).unwrap();
    }
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        assert_eq!(db.keys::<&[u8], _>(..).count(), 900);
        // Written after the deletion: it survives, there and after a flush.
        db.put(k("a", 50), "new").unwrap();
        db.delete_range(k("a", 100), k("a", 200)).unwrap();
        db.flush().unwrap();
        // In the manifest now, waiting on the older run.
        assert!(db.stats().unwrap().range_tombstones >= 1);
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(k("a", 50)).unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(db.get(k("a", 150)).unwrap(), None);
    assert_eq!(db.keys::<&[u8], _>(..).count(), 801);
    db.compact_all().unwrap();
    assert_eq!(db.stats().unwrap().range_tombstones, 0);
    assert_eq!(db.keys::<&[u8], _>(..).count(), 801);
    assert_eq!(db.get(k("a", 50)).unwrap().as_deref(), Some(&b"new"[..]));
}

#[test]
fn a_merge_after_a_range_deletion_starts_from_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put("k1", "old").unwrap();
    db.put("k2", "old").unwrap();
    db.flush().unwrap();
    db.merge("k2", "+a").unwrap();
    db.delete_prefix("k").unwrap();
    db.merge("k1", "+x").unwrap(); // folded at the write, over the range tombstone
    db.merge("k2", "+y").unwrap();
    for stage in ["memtable", "flushed", "compacted"] {
        assert_eq!(
            db.get("k1").unwrap().as_deref(),
            Some(&b"+x"[..]),
            "{stage}"
        );
        assert_eq!(
            db.get("k2").unwrap().as_deref(),
            Some(&b"+y"[..]),
            "{stage}"
        );
        let all: Vec<_> = db.iter().map(|p| p.unwrap()).collect();
        assert_eq!(
            all,
            vec![
                (b"k1".to_vec(), b"+x".to_vec()),
                (b"k2".to_vec(), b"+y".to_vec())
            ],
            "{stage}"
        );
        match stage {
            "memtable" => db.flush().unwrap(),
            "flushed" => db.compact_all().unwrap(),
            _ => {}
        }
    }
}

/// Two threads on the real file system: one writes keys under "w:" while the other
/// deletes, range by range, keys under "d:" written before it started, with flushes and
/// compactions running under both. Neither disturbs the other's keys.
#[test]
fn range_deletions_beside_concurrent_writes_delete_only_their_range() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..4_000 {
        db.put(k("d:", i), [3u8; 60]).unwrap();
    }
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            for i in 0..4_000 {
                db.put(k("w:", i), [4u8; 60]).unwrap();
            }
        })
    };
    let deleter = {
        let db = db.clone();
        std::thread::spawn(move || {
            for r in 0..40 {
                db.delete_range(k("d:", r * 100), k("d:", r * 100 + 100))
                    .unwrap();
                if r % 10 == 9 {
                    db.flush().unwrap();
                }
            }
        })
    };
    writer.join().unwrap();
    deleter.join().unwrap();
    for stage in ["live", "compacted"] {
        assert_eq!(db.prefix("d:").count(), 0, "{stage}");
        assert_eq!(db.prefix("w:").keys().count(), 4_000, "{stage}");
        assert_eq!(db.get(k("d:", 1234)).unwrap(), None, "{stage}");
        db.compact_all().unwrap();
    }
    assert_eq!(db.stats().unwrap().range_tombstones, 0);
}
