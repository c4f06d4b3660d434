//! Basic whole-engine behaviour: put/get/delete across flushes, compactions and reopen.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::{Db, Options, WriteBatch};

fn small_opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 4,
        cache_bytes: 1 << 20,
        ..Options::default()
    }
}

fn key(i: u32) -> String {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000)
}

#[test]
fn put_get_delete_survive_flush_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let n = 20_000u32;
    {
        let db = Db::open(dir.path(), small_opts()).unwrap();
        for i in 0..n {
            db.put(
                key(i),
                format!("value-{i}-{}", "x".repeat((i % 200) as usize)),
            )
            .unwrap();
        }
        for i in (0..n).step_by(3) {
            db.delete(key(i)).unwrap();
        }
        db.compact().unwrap();
        let s = db.stats().unwrap();
        assert!(s.flushes > 0, "{s}");
        assert!(s.compactions > 0, "{s}");
        for i in 0..n {
            let got = db.get(key(i)).unwrap();
            if i % 3 == 0 {
                assert_eq!(got, None, "key {i}");
            } else {
                assert_eq!(
                    got.unwrap(),
                    format!("value-{i}-{}", "x".repeat((i % 200) as usize)).into_bytes()
                );
            }
        }
    }
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let mut count = 0;
    let mut last: Option<Vec<u8>> = None;
    for kv in db.iter() {
        let (k, _) = kv.unwrap();
        assert!(last.as_ref().is_none_or(|l| *l < k));
        last = Some(k);
        count += 1;
    }
    assert_eq!(count, (0..n).filter(|i| i % 3 != 0).count());
    let mut b = WriteBatch::new();
    b.put("a1", "x").put("a2", "y").delete("a1");
    db.write(b).unwrap();
    let got: Vec<_> = db.prefix("a").map(|r| r.unwrap()).collect();
    assert_eq!(got, vec![(b"a2".to_vec(), b"y".to_vec())]);
}
