//! Merges (deltas folded by a merge operator): what a user sees through gets, scans and
//! snapshots while the deltas sit in the memtable, in runs above their base, folded at a
//! flush or a compaction, and under a large value that garbage collection moves; refusals
//! that name what is wrong; recovery of deltas from the small log.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::{Append, CounterAdd, Db, Error, Max, MergeOperator, Options, WriteBatch};
use std::sync::Arc;
use std::time::Duration;

fn opts(op: Arc<dyn MergeOperator>) -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 2,
        large_segment_size: 64 << 10,
        gc_interval: Duration::from_secs(3600),
        merge_operator: Some(op),
        ..Options::default()
    }
}

fn n(x: u64) -> [u8; 8] {
    x.to_le_bytes()
}

fn count(db: &Db, key: &str) -> Option<u64> {
    db.get(key)
        .unwrap()
        .map(|v| u64::from_le_bytes(v.try_into().expect("a counter is 8 bytes")))
}

#[test]
fn without_an_operator_merge_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let e = db.merge("k", n(1)).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("merge_operator")),
        "{e}"
    );
    let mut b = WriteBatch::new();
    b.put("a", "1").merge("k", n(1));
    assert!(matches!(db.write(b), Err(Error::InvalidArgument(_))));
    assert_eq!(
        db.get("a").unwrap(),
        None,
        "a refused batch wrote part of itself"
    );
    assert_eq!(db.stats().unwrap().merges, 0);
}

#[test]
fn an_operand_the_operator_refuses_fails_its_batch_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
    let mut b = WriteBatch::new();
    b.put("a", "1").merge("c", [1u8, 2, 3]);
    let e = db.write(b).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::MergeFailed { .. }), "{e:?}");
    assert!(
        text.contains("counter_add") && text.contains("\"c\"") && text.contains("3 bytes"),
        "{text}"
    );
    assert_eq!(db.get("a").unwrap(), None);
    db.merge("c", n(2)).unwrap();
    assert_eq!(count(&db, "c"), Some(2));
}

#[test]
fn counters_add_up_through_flushes_compactions_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let keys = 3000u64;
    let mut want = vec![0u64; keys as usize];
    {
        let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
        // A base for every third key, then rounds of deltas with flushes between: the
        // deltas land in runs above their base and in the memtable.
        for k in (0..keys).step_by(3) {
            db.put(format!("c{k:05}"), n(1000)).unwrap();
            want[k as usize] = 1000;
        }
        for round in 1..=6u64 {
            for k in 0..keys {
                if (k + round) % 2 == 0 {
                    db.merge(format!("c{k:05}"), n(round)).unwrap();
                    want[k as usize] += round;
                }
            }
            if round % 2 == 0 {
                db.flush().unwrap();
            }
        }
        for k in (0..keys).step_by(97) {
            assert_eq!(
                count(&db, &format!("c{k:05}")),
                Some(want[k as usize]),
                "key {k}"
            );
        }
        db.compact_all().unwrap();
        let s = db.stats().unwrap();
        assert!(s.merges > 0 && s.deltas_folded > 0, "{s:?}");
        // A merge after a delete starts from nothing.
        db.delete("c00000").unwrap();
        db.merge("c00000", n(5)).unwrap();
        want[0] = 5;
    }
    let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
    let mut seen = 0;
    for pair in db.prefix("c") {
        let (k, v) = pair.unwrap();
        let i: usize = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
        assert_eq!(v, n(want[i]), "key {i} by scan");
        seen += 1;
    }
    let present = want.iter().filter(|&&w| w > 0).count();
    assert_eq!(seen, present);
    assert_eq!(count(&db, "c00000"), Some(5));
}

#[test]
fn deltas_apply_to_small_medium_and_large_bases_and_survive_gc() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(Append))).unwrap();
    // Bases of the three size classes (small < 120 B <= medium < 1024 B <= large).
    let bases: Vec<(String, Vec<u8>)> = (0..300u32)
        .map(|i| {
            let len = [9usize, 300, 3000][(i % 3) as usize];
            (format!("key{i:04}"), vec![b'a' + (i % 26) as u8; len])
        })
        .collect();
    for (k, v) in &bases {
        db.put(k, v).unwrap();
    }
    db.flush().unwrap();
    let mut want: Vec<Vec<u8>> = bases.iter().map(|(_, v)| v.clone()).collect();
    for (i, (k, _)) in bases.iter().enumerate() {
        let d = format!("|d{i}");
        db.merge(k, &d).unwrap();
        want[i].extend_from_slice(d.as_bytes());
    }
    // Fill the large log with values that die, so its segments are worth collecting:
    // the large bases under deltas share segments with them.
    for round in 0..4 {
        for i in 0..200u32 {
            db.put(format!("junk{i:04}"), vec![round as u8; 2000])
                .unwrap();
        }
    }
    db.flush().unwrap();
    db.compact().unwrap();
    let report = db.gc().unwrap();
    assert!(report.segments_freed > 0, "{report:?}");
    for (i, (k, _)) in bases.iter().enumerate() {
        assert_eq!(
            db.get(k).unwrap().as_ref(),
            Some(&want[i]),
            "key {k} after gc"
        );
    }
    db.compact_all().unwrap();
    while db.gc().unwrap().segments_freed > 0 {}
    for (i, (k, _)) in bases.iter().enumerate() {
        assert_eq!(
            db.get(k).unwrap().as_ref(),
            Some(&want[i]),
            "key {k} after compact_all"
        );
    }
    assert!(db.check().unwrap().is_ok());
    drop(db);
    let db = Db::open(dir.path(), opts(Arc::new(Append))).unwrap();
    let got: Vec<Vec<u8>> = db.prefix("key").map(|p| p.unwrap().1).collect();
    assert_eq!(got, want);
}

#[test]
fn a_snapshot_sees_the_deltas_of_its_moment_and_scans_fold_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(Max))).unwrap();
    db.merge("m", "b").unwrap();
    db.merge("m", "a").unwrap();
    let snap = db.snapshot().unwrap();
    db.merge("m", "c").unwrap();
    db.flush().unwrap();
    db.merge("m", "bb").unwrap();
    assert_eq!(snap.get("m").unwrap().as_deref(), Some(&b"b"[..]));
    assert_eq!(db.get("m").unwrap().as_deref(), Some(&b"c"[..]));
    let pairs: Vec<_> = snap.iter().map(|p| p.unwrap()).collect();
    assert_eq!(pairs, vec![(b"m".to_vec(), b"b".to_vec())]);
    let pairs: Vec<_> = db.iter().map(|p| p.unwrap()).collect();
    assert_eq!(pairs, vec![(b"m".to_vec(), b"c".to_vec())]);
    // Keys only: a key with deltas and no base exists.
    let keys: Vec<_> = db.keys::<&[u8], _>(..).map(|k| k.unwrap()).collect();
    assert_eq!(keys, vec![b"m".to_vec()]);
}

#[test]
fn many_deltas_without_a_base_outgrow_a_leaf_and_still_fold() {
    // `Append` has a partial merge, so an operator without one (`KeepAll`) keeps every
    // operand: the list outgrows a leaf and is stored as an overflow blob of the level file.
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        max_levels: 4,
        ..opts(Arc::new(KeepAll))
    };
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let mut want = Vec::new();
    for i in 0..400 {
        let d = format!("delta-{i:03}-{}", "x".repeat(20));
        db.merge("list", &d).unwrap();
        want.extend_from_slice(d.as_bytes());
        if i % 50 == 49 {
            db.flush().unwrap();
            // Another key keeps the runs from being only this one.
            db.put(format!("other{i}"), "v").unwrap();
        }
    }
    db.flush().unwrap();
    db.compact().unwrap();
    assert_eq!(db.get("list").unwrap(), Some(want.clone()));
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    assert_eq!(db.get("list").unwrap(), Some(want.clone()));
    db.compact_all().unwrap();
    assert_eq!(db.get("list").unwrap(), Some(want));
    assert!(db.check().unwrap().is_ok());
}

#[test]
fn a_database_written_with_an_operator_opens_only_with_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
        db.put("plain", "v").unwrap();
        db.merge("c", n(1)).unwrap();
    }
    // A writable open would flush the deltas: without their operator it is refused.
    for other in [None, Some(Arc::new(Append) as Arc<dyn MergeOperator>)] {
        let e = Db::open(
            dir.path(),
            Options {
                merge_operator: other,
                ..opts(Arc::new(CounterAdd))
            },
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e, Error::InvalidArgument(_)) && text.contains("hybridkv.counter_add"),
            "{text}"
        );
    }
    // Read-only, without the operator: plain keys read, a key with deltas is an error
    // (never a wrong value).
    let ro = Db::open_read_only(
        dir.path(),
        Options {
            merge_operator: None,
            ..opts(Arc::new(CounterAdd))
        },
    )
    .unwrap();
    assert_eq!(ro.get("plain").unwrap().as_deref(), Some(&b"v"[..]));
    assert!(matches!(ro.get("c"), Err(Error::InvalidArgument(_))));
    drop(ro);
    let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
    assert_eq!(count(&db, "c"), Some(1));
}

/// Appends, but refuses to fold onto a base that starts with `poison`.
struct Picky;

impl MergeOperator for Picky {
    fn name(&self) -> &str {
        "test.picky"
    }
    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        deltas: &[&[u8]],
    ) -> Result<Vec<u8>, hybridkv::MergeError> {
        if base.is_some_and(|b| b.starts_with(b"poison")) {
            return Err(hybridkv::MergeError("will not touch poison".into()));
        }
        Append.full_merge(b"", base, deltas)
    }
}

#[test]
fn an_operator_refusal_in_the_background_costs_only_that_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(Picky))).unwrap();
    db.put("bad", "poison").unwrap();
    db.merge("bad", "+1").unwrap();
    db.put("good", "a").unwrap();
    db.merge("good", "b").unwrap();
    // The flush meets the refused fold: it keeps the deltas with their base, poisons
    // nothing, and only that key's reads report the refusal.
    db.flush().unwrap();
    let refused = |db: &Db| {
        let e = db.get("bad").unwrap_err();
        assert!(
            matches!(&e, Error::MergeFailed { reason, .. } if reason.contains("poison")),
            "{e:?}"
        );
    };
    refused(&db);
    assert_eq!(db.get("good").unwrap().as_deref(), Some(&b"ab"[..]));
    for i in 0..3000 {
        db.put(format!("fill{i:05}"), [7u8; 40]).unwrap();
    }
    db.merge("bad", "+2").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    refused(&db);
    drop(db);
    let db = Db::open(dir.path(), opts(Arc::new(Picky))).unwrap();
    refused(&db);
    assert!(db.check().unwrap().is_ok());
    // A new value ends it.
    db.put("bad", "fine").unwrap();
    db.merge("bad", "!").unwrap();
    db.compact_all().unwrap();
    assert_eq!(db.get("bad").unwrap().as_deref(), Some(&b"fine!"[..]));
}

#[test]
fn a_counter_replaces_a_base_that_is_not_a_counter() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
    db.put("c", "not a number").unwrap();
    db.merge("c", n(4)).unwrap();
    assert_eq!(count(&db, "c"), Some(4));
    db.flush().unwrap();
    db.compact_all().unwrap();
    assert_eq!(count(&db, "c"), Some(4));
}

#[test]
fn a_damaged_options_file_does_not_stop_an_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
        db.merge("c", n(1)).unwrap();
    }
    let path = dir.path().join("OPTIONS");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
    assert_eq!(count(&db, "c"), Some(1));
}

#[test]
fn reads_fold_back_while_merges_go_on_and_lose_no_delta() {
    // Writers add to counters while readers read them (each read may write the value it
    // folded back as a put, racing the writers): every increment must survive.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
    const KEYS: u64 = 40;
    const ROUNDS: u64 = 400;
    for k in 0..KEYS {
        db.put(format!("c{k:02}"), n(0)).unwrap();
    }
    db.flush().unwrap();
    std::thread::scope(|s| {
        for w in 0..2u64 {
            let db = db.clone();
            s.spawn(move || {
                for r in 0..ROUNDS {
                    for k in 0..KEYS {
                        db.merge(format!("c{k:02}"), n(w + 1)).unwrap();
                    }
                    if r % 100 == 99 {
                        db.flush().unwrap();
                    }
                }
            });
        }
        let db = db.clone();
        s.spawn(move || {
            let mut last = vec![0u64; KEYS as usize];
            for i in 0..20_000u64 {
                let k = i % KEYS;
                let v = count(&db, &format!("c{k:02}")).unwrap();
                // A counter only grows: a read never goes back in time.
                assert!(
                    v >= last[k as usize],
                    "key {k}: {v} after {}",
                    last[k as usize]
                );
                last[k as usize] = v;
            }
        });
    });
    for k in 0..KEYS {
        assert_eq!(count(&db, &format!("c{k:02}")), Some(3 * ROUNDS), "key {k}");
    }
    db.compact_all().unwrap();
    drop(db);
    let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
    for k in 0..KEYS {
        assert_eq!(
            count(&db, &format!("c{k:02}")),
            Some(3 * ROUNDS),
            "key {k} reopened"
        );
    }
}

/// Reads `key` (each read must return `want`) until reads have written back `folds`
/// values in all. A fold-back is skipped while the keyspace's slot is busy (a background
/// thread holds it for a moment after a flush), so the first read may not write; a read
/// that finds the slot free does. Bounded, and assumes nothing about scheduling but that
/// the background thread lets the slot go.
fn read_until_folded(db: &Db, key: &str, want: &[u8], folds: u64) {
    for _ in 0..100_000 {
        assert_eq!(db.get(key).unwrap().as_deref(), Some(want));
        if db.stats().unwrap().reads_folded_back >= folds {
            break;
        }
        std::thread::yield_now();
    }
    assert_eq!(db.stats().unwrap().reads_folded_back, folds);
}

#[test]
fn a_read_of_deltas_on_disk_writes_the_value_back_once() {
    let dir = tempfile::tempdir().unwrap();
    // L1 must keep its runs unmerged while the reads below wait for the slot: a merge
    // that folded the deltas first would leave nothing to write back. So room for every
    // run (growth factor 8), and filler keys, so that the runs' dead share stays far
    // below the third that merges L1 down.
    let opts = |op| Options {
        growth_factor: 8,
        ..opts(op)
    };
    let db = Db::open(dir.path(), opts(Arc::new(Append))).unwrap();
    for i in 0..1000 {
        db.put(format!("filler{i:04}"), "x").unwrap();
    }
    db.put("k", "base").unwrap();
    db.flush().unwrap();
    db.merge("k", "+1").unwrap();
    db.flush().unwrap();
    let snap = db.snapshot().unwrap();
    read_until_folded(&db, "k", b"base+1", 1);
    // The value is in the memtable now: the next read folds nothing.
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"base+1"[..]));
    assert_eq!(db.stats().unwrap().reads_folded_back, 1);
    // The flush folds the next delta into the value written back (both in the memtable).
    db.merge("k", "+2").unwrap();
    db.flush().unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"base+1+2"[..]));
    assert_eq!(db.stats().unwrap().reads_folded_back, 1);
    // A snapshot read never writes.
    db.merge("k", "+3").unwrap();
    db.flush().unwrap();
    assert_eq!(snap.get("k").unwrap().as_deref(), Some(&b"base+1"[..]));
    assert_eq!(db.stats().unwrap().reads_folded_back, 1);
    read_until_folded(&db, "k", b"base+1+2+3", 2);
    assert_eq!(db.stats().unwrap().compactions, 0, "L1 was merged down");
    // Off: reads fold but write nothing.
    drop((snap, db));
    let db = Db::open(
        dir.path(),
        Options {
            fold_on_read: false,
            ..opts(Arc::new(Append))
        },
    )
    .unwrap();
    db.merge("k", "+4").unwrap();
    db.flush().unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"base+1+2+3+4"[..]));
    assert_eq!(db.stats().unwrap().reads_folded_back, 0);
}

#[test]
fn a_read_that_writes_nothing_back_keeps_the_large_base_it_folds_in_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (db, want) = large_base_under_a_delta_in_another_run(dir.path());
    let large_reads = || {
        db.stats()
            .unwrap()
            .io
            .read_ops_by(hybridkv::io::IoComponent::LargeLog)
    };
    // A snapshot's read folds the delta and writes nothing: the base it read stays
    // cached for the next read, which takes no read call.
    let snap = db.snapshot().unwrap();
    let before = large_reads();
    assert_eq!(snap.get("k").unwrap(), Some(want.clone()));
    assert_eq!(large_reads(), before + 1);
    assert_eq!(snap.get("k").unwrap(), Some(want.clone()));
    assert_eq!(large_reads(), before + 1, "the snapshot's second read");
    assert_eq!(db.stats().unwrap().reads_folded_back, 0);
    // A read that writes the value back: the value it wrote is what the next read finds,
    // from memory.
    read_until_folded(&db, "k", &want, 1);
    let after = large_reads();
    assert_eq!(db.get("k").unwrap(), Some(want.clone()));
    assert_eq!(large_reads(), after);
    // The snapshot still sees the base under the delta, still cached.
    assert_eq!(snap.get("k").unwrap(), Some(want));
    assert_eq!(large_reads(), after);
}

/// Options under which L1 takes two flushes without merging them: a merge finishing in
/// the background would read the new run's index (and the large base) during the reads
/// the tests below count.
fn two_runs_in_l1(op: Arc<dyn MergeOperator>) -> Options {
    Options {
        growth_factor: 8,
        ..opts(op)
    }
}

/// A database whose key `k` has a 3000-byte (large) base in one L1 run and a delta `+1`
/// in the next, and the value a read returns.
fn large_base_under_a_delta_in_another_run(dir: &std::path::Path) -> (Db, Vec<u8>) {
    let db = Db::open(dir, two_runs_in_l1(Arc::new(Append))).unwrap();
    let base = vec![b'b'; 3000];
    db.put("k", &base).unwrap();
    db.flush().unwrap();
    db.merge("k", "+1").unwrap();
    db.flush().unwrap();
    let mut want = base;
    want.extend_from_slice(b"+1");
    (db, want)
}

#[test]
fn a_large_value_written_back_by_a_read_is_read_again_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (db, want) = large_base_under_a_delta_in_another_run(dir.path());
    // A read folds the delta read from a run and writes the large value back.
    read_until_folded(&db, "k", &want, 1);
    // The value written back sits at a new place in the large log: reading it takes no
    // read call, its record having gone to the block cache as it was appended.
    let before = db.stats().unwrap().lookup_reads();
    assert_eq!(db.get("k").unwrap(), Some(want.clone()));
    assert_eq!(db.stats().unwrap().lookup_reads(), before);
    // Still what the log holds: after a reopen (empty cache) the same bytes are read.
    drop(db);
    let cold = Options {
        reload_cache: false,
        ..two_runs_in_l1(Arc::new(Append))
    };
    let db = Db::open(dir.path(), cold).unwrap();
    assert_eq!(db.get("k").unwrap(), Some(want));
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn deltas_over_large_values_stay_apart_from_them_through_merges_and_gc() {
    // With reads not writing back, only merges and GC move the deltas: a merge that meets
    // a large base keeps the deltas closed over its pointer (the value is not read or
    // rewritten); reads fold them; GC moves the value folded.
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        fold_on_read: false,
        ..opts(Arc::new(Append))
    };
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let big = |i: u32| vec![b'a' + (i % 26) as u8; 2000 + i as usize];
    let mut want = Vec::new();
    for i in 0..200u32 {
        db.put(format!("big{i:03}"), big(i)).unwrap();
        want.push(big(i));
    }
    db.flush().unwrap();
    for round in 0..3 {
        for i in (0..200u32).step_by(2) {
            let d = format!("|{round}.{i}");
            db.merge(format!("big{i:03}"), &d).unwrap();
            want[i as usize].extend_from_slice(d.as_bytes());
        }
        db.flush().unwrap();
    }
    db.compact_all().unwrap();
    let check = |db: &Db, want: &[Vec<u8>], when: &str| {
        for (i, w) in want.iter().enumerate() {
            let got = db.get(format!("big{i:03}")).unwrap();
            assert_eq!(got.as_ref(), Some(w), "big{i:03} {when}");
        }
        let scanned: Vec<Vec<u8>> = db.prefix("big").map(|p| p.unwrap().1).collect();
        assert_eq!(scanned, want, "scan {when}");
    };
    check(&db, &want, "after compact_all");
    // `check` follows the pointer of every list closed over a large value, as it follows
    // plain pointers: 100 keys of each kind.
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.pointers_checked, 200, "{report:?}");
    // The level files hold keys, pointers and deltas, not the large values.
    let level_bytes: u64 = db
        .stats()
        .unwrap()
        .levels
        .iter()
        .map(|l| l.file_bytes)
        .sum();
    assert!(
        level_bytes < 200 * 2000,
        "{level_bytes} bytes of level files"
    );
    // Make the large log worth collecting, then collect it: the values under deltas are
    // live and move folded.
    for i in (1..200u32).step_by(2) {
        db.put(format!("big{i:03}"), big(i + 1)).unwrap();
        want[i as usize] = big(i + 1);
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    let mut freed = 0;
    loop {
        let r = db.gc().unwrap();
        assert!(r.damage.is_empty(), "{r:?}");
        if r.segments_freed == 0 {
            break;
        }
        freed += r.segments_freed;
    }
    assert!(freed > 0);
    check(&db, &want, "after gc");
    assert!(db.check().unwrap().is_ok());
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    check(&db, &want, "after reopen");
}

#[test]
fn gc_leaves_a_value_its_operator_will_not_fold_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        fold_on_read: false,
        ..opts(Arc::new(Picky))
    };
    let db = Db::open(dir.path(), o).unwrap();
    let mut poison = b"poison".to_vec();
    poison.resize(3000, b'!');
    db.put("p", &poison).unwrap();
    for i in 0..40 {
        db.put(format!("junk{i:02}"), vec![1u8; 3000]).unwrap();
    }
    db.merge("p", "+").unwrap();
    // The junk dies: the segment holding `p`'s value is worth collecting.
    for i in 0..40 {
        db.delete(format!("junk{i:02}")).unwrap();
    }
    db.flush().unwrap();
    let r = db.gc().unwrap();
    assert!(r.segments_damaged > 0, "{r:?}");
    assert!(
        r.damage
            .iter()
            .any(|d| d.contains("test.picky") && d.contains("poison")),
        "{r:?}"
    );
    // Left in place: the key still reports the refusal, and nothing else is harmed.
    assert!(matches!(db.get("p"), Err(Error::MergeFailed { .. })));
    db.put("q", "fine").unwrap();
    // Written again, the key frees the segment at the next pass.
    db.put("p", "fresh").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    let mut freed = 0;
    loop {
        let r = db.gc().unwrap();
        assert!(r.damage.is_empty(), "{r:?}");
        if r.segments_freed == 0 {
            break;
        }
        freed += r.segments_freed;
    }
    assert!(freed > 0);
    assert_eq!(db.get("p").unwrap().as_deref(), Some(&b"fresh"[..]));
}

/// An operator without a partial merge: every operand is kept, so lists grow.
struct KeepAll;

impl MergeOperator for KeepAll {
    fn name(&self) -> &str {
        "test.keep-all"
    }
    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        deltas: &[&[u8]],
    ) -> Result<Vec<u8>, hybridkv::MergeError> {
        Append.full_merge(b"", base, deltas)
    }
}

/// Deltas over a large value, too many to fit a leaf (an operator without a partial merge
/// keeps them all), are stored as an overflow blob closed over the value's pointer. When
/// a newer put shadows them, the compaction that drops them must count the large value as
/// garbage, as it does for a list in a leaf: otherwise GC never learns that its segment
/// lost it.
#[test]
fn a_dropped_overflow_list_closed_over_a_large_value_counts_it_as_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        fold_on_read: false,
        ..opts(Arc::new(KeepAll))
    };
    let db = Db::open(dir.path(), o).unwrap();
    let base = vec![b'b'; 3000];
    db.put("big", &base).unwrap();
    db.flush().unwrap();
    let mut want = base.clone();
    for i in 0..200 {
        let d = format!("<{i:03}-delta-operand>");
        db.merge("big", &d).unwrap();
        want.extend_from_slice(d.as_bytes());
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    assert_eq!(db.get("big").unwrap(), Some(want));
    let before = db.stats().unwrap().large_log_garbage_bytes;
    db.put("big", "small now").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    assert_eq!(db.get("big").unwrap().as_deref(), Some(&b"small now"[..]));
    let after = db.stats().unwrap().large_log_garbage_bytes;
    assert!(
        after >= before + base.len() as u64,
        "the shadowed value was not counted as garbage: {before} -> {after} bytes"
    );
    assert!(db.check().unwrap().is_ok());
}

/// Appends, but panics on the operand `boom` (a bug in a user's operator).
struct PanicsOnBoom;

impl MergeOperator for PanicsOnBoom {
    fn name(&self) -> &str {
        "panics-on-boom"
    }

    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        deltas: &[&[u8]],
    ) -> Result<Vec<u8>, hybridkv::MergeError> {
        let mut v = base.unwrap_or_default().to_vec();
        for d in deltas {
            assert!(*d != b"boom", "the operator's bug");
            v.extend_from_slice(d);
        }
        Ok(v)
    }
}

#[test]
fn an_operator_that_panics_in_a_commit_poisons_the_keyspace_and_blocks_no_writer() {
    // The merge folds onto the value in the memtable as its group inserts, after the
    // group gave its slot and lead on: the panic must leave the keyspace refusing writes
    // (its record is in the log, not in the memtable) and no later writer waiting.
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), opts(Arc::new(PanicsOnBoom))).unwrap());
    db.put("k", "v").unwrap();
    db.merge("k", "+1").unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v+1"[..]));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = db.merge("k", "boom");
    }));
    assert!(
        panicked.is_err(),
        "the operator panicked in the writer's thread"
    );
    // Writers from this thread and another get an error, not a wait without end.
    let e = db.put("a", "1").unwrap_err();
    assert!(e.to_string().contains("panicked"), "{e}");
    let other = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.put("b", "2"))
    };
    assert!(other.join().unwrap().is_err());
    // Reads go on and see what was acknowledged.
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v+1"[..]));
}
