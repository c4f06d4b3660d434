//! Snapshots: a view taken before overwrites, deletes, flushes, merges and GC still reads
//! the old values; the files it holds are reported as waiting for deletion and go when it
//! is dropped; a closed database refuses its reads.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::{Db, Error, Options};

fn key(i: u32) -> String {
    format!("key{i:05}")
}

fn value(i: u32, round: u32) -> Vec<u8> {
    // Every third pair large (large log), the others small or medium.
    let len = match i % 3 {
        0 => 3000,
        1 => 300,
        _ => 40,
    };
    vec![(i + round * 7) as u8; len]
}

fn waiting_bytes(db: &Db) -> u64 {
    db.space()
        .unwrap()
        .components
        .iter()
        .filter(|c| c.name == "files waiting for deletion")
        .map(|c| c.bytes)
        .sum()
}

#[test]
fn a_snapshot_reads_its_moment_through_overwrites_merges_and_gc() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            memtable_size: 256 << 10,
            large_segment_size: 128 << 10,
            ..Options::default()
        },
    )
    .unwrap();
    let n = 1500;
    for i in 0..n {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let snap = db.snapshot().unwrap();
    // Half of the writes after the snapshot are still in the memtable when it is taken
    // again below: the view must skip versions newer than it in memtables too.
    for i in 0..n {
        if i % 5 == 0 {
            db.delete(key(i)).unwrap();
        } else {
            db.put(key(i), value(i, 1)).unwrap();
        }
    }
    db.put("zzz-after", "new").unwrap();
    db.compact_all().unwrap();
    let gc = db.gc().unwrap();
    assert!(
        gc.segments_freed > 0,
        "GC must free segments the snapshot still reads"
    );
    assert!(waiting_bytes(&db) > 0, "the snapshot's files are held back");

    for i in 0..n {
        assert_eq!(snap.get(key(i)).unwrap(), Some(value(i, 0)), "pair {i}");
    }
    assert_eq!(snap.get("zzz-after").unwrap(), None);
    let pairs: Vec<_> = snap.iter().map(|r| r.unwrap()).collect();
    assert_eq!(pairs.len(), n as usize);
    for (i, (k, v)) in pairs.iter().enumerate() {
        assert_eq!(
            (k.as_slice(), v),
            (key(i as u32).as_bytes(), &value(i as u32, 0))
        );
    }
    assert_eq!(snap.prefix("key001").count(), 100);
    assert_eq!(snap.keys::<&[u8], _>(..).count(), n as usize);
    // The database itself reads the new state.
    assert_eq!(db.get(key(0)).unwrap(), None);
    assert_eq!(db.get(key(1)).unwrap(), Some(value(1, 1)));

    // A second snapshot sees the new state, the first still the old one.
    let later = db.snapshot().unwrap();
    assert!(later.sequence() > snap.sequence());
    assert_eq!(later.get(key(1)).unwrap(), Some(value(1, 1)));
    assert_eq!(snap.get(key(1)).unwrap(), Some(value(1, 0)));

    drop(snap);
    drop(later);
    assert_eq!(
        waiting_bytes(&db),
        0,
        "dropping the snapshots frees their files"
    );
}

#[test]
fn a_closed_database_refuses_a_snapshots_reads_and_reopens_while_it_lives() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put("a", "1").unwrap();
    let snap = db.snapshot().unwrap();
    assert_eq!(snap.get("a").unwrap(), Some(b"1".to_vec()));
    db.close().unwrap();
    assert!(matches!(snap.get("a"), Err(Error::Closed)));
    assert!(matches!(snap.iter().next(), Some(Err(Error::Closed))));
    // The snapshot holds no lock: the database opens again while it lives.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get("a").unwrap(), Some(b"1".to_vec()));
    drop(snap);
}
