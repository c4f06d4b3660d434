//! Delta separation (`Options::delta_separation`, KDSep): deltas a flush cannot fold go to
//! hashed delta buckets and the runs keep LSN-range stand-ins. What a user sees must not
//! change: gets, scans, snapshots and reopens give what a model applying the operator
//! gives, through flushes, compactions, puts, deletes, range deletions, large bases and
//! GC; and the deltas really live in the buckets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use common::hooked_fs::{injected, FsCall, FsHooks, HookedFs};
use hybridkv::io::IoComponent;
use hybridkv::{Append, CounterAdd, Db, MergeOperator, Options};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn opts(op: Arc<dyn MergeOperator>) -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 2,
        large_segment_size: 64 << 10,
        gc_interval: Duration::from_secs(3600),
        merge_operator: Some(op),
        fold_on_read: false,
        delta_separation: true,
        delta_bucket_size: 1 << 20,
        ..Options::default()
    }
}

fn check_model(db: &Db, model: &BTreeMap<String, Vec<u8>>, when: &str) {
    for (k, v) in model {
        assert_eq!(
            db.get(k).unwrap().as_deref(),
            Some(v.as_slice()),
            "{k} {when}"
        );
    }
    let scanned: BTreeMap<String, Vec<u8>> = db
        .iter()
        .map(|p| {
            let (k, v) = p.unwrap();
            (String::from_utf8(k.to_vec()).unwrap(), v.to_vec())
        })
        .collect();
    assert_eq!(scanned.len(), model.len(), "scan {when}");
    assert!(scanned == *model, "scan differs from the model {when}");
}

#[test]
fn appends_land_in_buckets_and_read_back_through_flushes_compactions_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(Arc::new(Append));
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // Bases of every category: small, medium-ish, large (a pointer into the large log).
    for i in 0..300u32 {
        let k = format!("k{i:04}");
        let v = match i % 3 {
            0 => format!("s{i}").into_bytes(),
            1 => vec![b'm'; 300 + i as usize],
            _ => vec![b'L'; 5000 + i as usize],
        };
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.flush().unwrap();
    for round in 0..6u32 {
        for i in (0..400u32).step_by(1 + round as usize % 3) {
            let k = format!("k{i:04}");
            let d = format!("|{round}.{i}");
            db.merge(&k, &d).unwrap();
            model.entry(k).or_default().extend_from_slice(d.as_bytes());
        }
        if round == 2 {
            // A put and a delete between deltas: the older deltas must not come back.
            for i in (0..400u32).step_by(7) {
                let k = format!("k{i:04}");
                if i % 2 == 0 {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else {
                    db.put(&k, b"P").unwrap();
                    model.insert(k, b"P".to_vec());
                }
            }
        }
        if round == 3 {
            db.delete_range("k0100", "k0150").unwrap();
            model.retain(|k, _| !(k.as_str() >= "k0100" && k.as_str() < "k0150"));
        }
        db.flush().unwrap();
        check_model(&db, &model, &format!("after round {round}"));
        if round % 2 == 1 {
            db.compact().unwrap();
            check_model(&db, &model, &format!("after compaction {round}"));
        }
    }
    let stats = db.stats().unwrap();
    assert!(stats.delta_bucket_records_written > 0, "{stats:?}");
    assert!(stats.delta_bucket_bytes > 0, "{stats:?}");
    assert!(stats.io.written_by(IoComponent::DeltaBuckets) > 0);
    db.compact_all().unwrap();
    check_model(&db, &model, "after compact_all");
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
    drop(db);
    let db = Db::open(dir.path(), o.clone()).unwrap();
    check_model(&db, &model, "after reopen");
    // More deltas after the reopen go to new segments (a reopened bucket is not appended
    // to), and still read back.
    for i in 0..300u32 {
        let k = format!("k{i:04}");
        db.merge(&k, "|after").unwrap();
        model.entry(k).or_default().extend_from_slice(b"|after");
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    check_model(&db, &model, "after merges past the reopen");
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    check_model(&db, &model, "after a second reopen");
}

#[test]
fn a_snapshot_keeps_its_deltas_while_newer_ones_are_flushed_to_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(Arc::new(CounterAdd))).unwrap();
    let key = |i: u32| format!("c{i:03}");
    for i in 0..100u32 {
        db.merge(key(i), 1u64.to_le_bytes()).unwrap();
    }
    db.flush().unwrap();
    let snap = db.snapshot().unwrap();
    for _ in 0..3 {
        for i in 0..100u32 {
            db.merge(key(i), 2u64.to_le_bytes()).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
    }
    for i in 0..100u32 {
        let now = db.get(key(i)).unwrap().unwrap();
        assert_eq!(u64::from_le_bytes(now[..].try_into().unwrap()), 7);
        let then = snap.get(key(i)).unwrap().unwrap();
        assert_eq!(u64::from_le_bytes(then[..].try_into().unwrap()), 1);
    }
}

#[test]
fn buckets_are_collected_and_split_as_they_grow_and_reads_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(Arc::new(Append));
    let o = Options {
        delta_bucket_size: 64 << 10,
        ..o
    };
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let delta = |round: u32, i: u32| format!("|{round:03}.{i:04}.{}", "d".repeat(200));
    for round in 0..40u32 {
        for i in 0..200u32 {
            let k = format!("k{i:04}");
            if round % 10 == 9 && i % 4 == 0 {
                // Puts make every older record of the key dead.
                db.put(&k, b"base").unwrap();
                model.insert(k, b"base".to_vec());
                continue;
            }
            let d = delta(round, i);
            db.merge(&k, &d).unwrap();
            model.entry(k).or_default().extend_from_slice(d.as_bytes());
        }
        db.flush().unwrap();
        if round % 8 == 7 {
            db.compact().unwrap();
        }
    }
    check_model(&db, &model, "after the rounds");
    let stats = db.stats().unwrap();
    assert!(stats.delta_bucket_gc_passes > 0, "{stats:?}");
    // A key's deltas (200 bytes each, combined by `Append`'s partial merge) grow past
    // the threshold and a collection folds them into its base (KDSep), with reads' own
    // fold-back off.
    assert!(stats.delta_bucket_keys_folded > 0, "{stats:?}");
    assert!(stats.delta_bucket_records_dropped > 0, "{stats:?}");
    assert!(stats.delta_buckets > 8, "no bucket split: {stats:?}");
    // Collection keeps the buckets near their live size: the live deltas are what the
    // model holds beyond the bases (at most every byte of every value).
    let live: u64 = model.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    assert!(
        stats.delta_bucket_bytes < 3 * live + 8 * (64 << 10),
        "{} bytes of buckets for {live} live bytes",
        stats.delta_bucket_bytes
    );
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    check_model(&db, &model, "after reopen");
    db.compact_all().unwrap();
    check_model(&db, &model, "after compact_all");
}

#[test]
fn concurrent_counters_add_up_while_buckets_are_flushed_collected_and_compacted() {
    // Real file system, background threads on, writers and readers in parallel: every
    // increment acknowledged is counted once, whatever flushes, compactions and bucket
    // collections run meanwhile, and after a reopen.
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        delta_bucket_size: 64 << 10,
        background_threads: 2,
        fold_on_read: true,
        ..opts(Arc::new(CounterAdd))
    };
    let db = Arc::new(Db::open(dir.path(), o.clone()).unwrap());
    const KEYS: u64 = 500;
    const PER_WRITER: u64 = 6000;
    let key = |i: u64| format!("ctr{i:04}");
    std::thread::scope(|s| {
        for w in 0..3u64 {
            let db = Arc::clone(&db);
            s.spawn(move || {
                for n in 0..PER_WRITER {
                    let k = (n * 7 + w * 131) % KEYS;
                    db.merge(key(k), 1u64.to_le_bytes()).unwrap();
                }
            });
        }
        let db = Arc::clone(&db);
        s.spawn(move || {
            // Reads while the writers run: a counter never goes down.
            let mut seen = vec![0u64; KEYS as usize];
            for round in 0..20u64 {
                for i in (round % 5..KEYS).step_by(5) {
                    let got = db
                        .get(key(i))
                        .unwrap()
                        .map_or(0, |v| u64::from_le_bytes(v[..].try_into().unwrap()));
                    assert!(got >= seen[i as usize], "counter {i} went down");
                    seen[i as usize] = got;
                }
            }
        });
    });
    let total = |db: &Db| -> u64 {
        (0..KEYS)
            .map(|i| {
                db.get(key(i))
                    .unwrap()
                    .map_or(0, |v| u64::from_le_bytes(v[..].try_into().unwrap()))
            })
            .sum()
    };
    assert_eq!(total(&db), 3 * PER_WRITER);
    db.flush().unwrap();
    db.compact_all().unwrap();
    assert_eq!(total(&db), 3 * PER_WRITER);
    let stats = db.stats().unwrap();
    assert!(stats.delta_bucket_records_written > 0, "{stats:?}");
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    assert_eq!(total(&db), 3 * PER_WRITER);
}

#[test]
fn deltas_hidden_by_newer_puts_survive_collections_and_compactions() {
    // Deltas over small bases deep in the tree, then newer puts that hide them, then bucket
    // collections and compactions of every level. (The ordering that once lost records, a
    // collection between the puts' flush and a compaction of the lower levels that runs
    // before L1's, is pinned by `read::tests::bucket_ranges_keep_lists_a_newer_version_
    // hides_but_not_those_a_range_deletes`; the picker decides it here.)
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        delta_bucket_size: 64 << 10,
        max_levels: 4,
        ..opts(Arc::new(Append))
    };
    let db = Db::open(dir.path(), o.clone()).unwrap();
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for i in 0..300u32 {
        let k = format!("k{i:04}");
        db.put(&k, b"base").unwrap();
        model.insert(k, b"base".to_vec());
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    for round in 0..3u32 {
        for i in 0..300u32 {
            let k = format!("k{i:04}");
            let d = format!("|{round}");
            db.merge(&k, &d).unwrap();
            model.entry(k).or_default().extend_from_slice(d.as_bytes());
        }
        db.flush().unwrap();
        db.compact().unwrap();
    }
    // Newer puts of half the keys, flushed above the lists.
    for i in (0..300u32).step_by(2) {
        let k = format!("k{i:04}");
        db.put(&k, b"new").unwrap();
        model.insert(k, b"new".to_vec());
    }
    db.flush().unwrap();
    // Deltas of other keys grow the buckets until they are collected.
    for round in 0..30u32 {
        for i in 0..100u32 {
            let k = format!("z{i:04}");
            let d = format!("|{round}.{}", "x".repeat(150));
            db.merge(&k, &d).unwrap();
            model.entry(k).or_default().extend_from_slice(d.as_bytes());
        }
        db.flush().unwrap();
    }
    let stats = db.stats().unwrap();
    assert!(stats.delta_bucket_gc_passes > 0, "{stats:?}");
    db.compact_all().unwrap();
    check_model(&db, &model, "after the lower levels were compacted");
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
}

#[test]
fn a_fault_at_any_io_point_of_a_flush_that_writes_and_collects_buckets_loses_no_delta() {
    use hybridkv::io::{FailMode, SimFs};
    let o = Options {
        delta_bucket_size: 4 << 10,
        background_threads: 1,
        ..opts(Arc::new(Append))
    };
    // The deltas written before the flush under test: a few flushes already, so that the
    // flush under test both appends to buckets and collects some.
    let prepare = |db: &Db| {
        let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for round in 0..6u32 {
            for i in 0..200u32 {
                let k = format!("k{i:03}");
                let d = format!("|{round}.{i}.{}", "p".repeat(60));
                db.merge(&k, &d).unwrap();
                model.entry(k).or_default().extend_from_slice(d.as_bytes());
            }
            if round < 5 {
                db.flush().unwrap();
            }
        }
        model
    };
    // A run without a fault: the flush under test collects buckets.
    let fs = SimFs::new();
    let db = Db::open_with_fs("/db", o.clone(), Arc::new(fs.clone())).unwrap();
    prepare(&db);
    let before = db.stats().unwrap().delta_bucket_gc_passes;
    let start = fs.op_count();
    db.flush().unwrap();
    // The collection runs after the flush's install, in the same background job, which
    // `flush` does not wait for; `compact` does.
    db.compact().unwrap();
    let ops = fs.op_count() - start;
    assert!(
        db.stats().unwrap().delta_bucket_gc_passes > before,
        "no collection in the flush"
    );
    drop(db);
    let mut failed = 0;
    for k in 0..ops {
        let fs = SimFs::new();
        let db = Db::open_with_fs("/db", o.clone(), Arc::new(fs.clone())).unwrap();
        let model = prepare(&db);
        fs.fail_at(fs.op_count() + k, FailMode::Once);
        failed += u64::from(db.flush().is_err() || db.compact().is_err());
        drop(db);
        // (Background work after the flush may have run into the fault instead, or none.)
        fs.clear_faults();
        // Every acknowledged delta is there after a reopen, whatever step failed.
        let db = Db::open_with_fs("/db", o.clone(), Arc::new(fs.clone())).unwrap();
        check_model(
            &db,
            &model,
            &format!("after a fault at step {k} of the flush"),
        );
        let report = db.check().unwrap();
        assert!(report.is_ok(), "fault at {k}: {report:?}");
    }
    assert!(failed > 0, "no fault made the flush fail");
}

/// Hooks that fail the directory sync after the second manifest rename once armed: the
/// new manifest is then in effect (renamed) although its store reported an error.
#[derive(Debug, Default)]
struct FailManifestDirSync {
    /// 0: off; 3: armed (the next manifest rename sets 1); 1: the next one sets 2; 2: the
    /// next directory sync fails (and sets 0).
    state: AtomicU8,
}

impl FsHooks for FailManifestDirSync {
    fn around<T>(
        &self,
        what: FsCall<'_>,
        path: &std::path::Path,
        call: impl FnOnce() -> hybridkv::Result<T>,
    ) -> hybridkv::Result<T> {
        match what {
            FsCall::SyncDir
                if self
                    .state
                    .compare_exchange(2, 0, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok() =>
            {
                Err(injected("fsync directory", path))
            }
            FsCall::Rename { to } => {
                let r = call()?;
                if to.file_name().is_some_and(|n| n == "MANIFEST") {
                    let _ =
                        self.state
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| match s {
                                3 => Some(1),
                                1 => Some(2),
                                _ => None,
                            });
                }
                Ok(r)
            }
            _ => call(),
        }
    }
}

/// Regression: a bucket collection (after a flush) wrote a bucket's records to new
/// segments and stored the manifest naming them, and the directory sync after the
/// manifest's rename failed. The install reported the failure, so the collection deleted
/// its new segments as it does for a failed job, but the new manifest was in effect: the
/// reopen failed (`stat ... .dbkt: NotFound`). A failed store must keep every file the new
/// manifest names (the next open deletes those the manifest it reads does not). Found by
/// the fault-at-every-step test above once the small log's switch added a step and moved
/// its faults.
#[test]
fn a_failed_manifest_directory_sync_keeps_the_bucket_segments_the_new_manifest_names() {
    let o = Options {
        // Every bucket is due for collection after the flush under test.
        delta_bucket_size: 4096,
        ..opts(Arc::new(Append))
    };
    let sim = hybridkv::io::SimFs::new();
    let fs = HookedFs::new(Arc::new(sim.clone()), FailManifestDirSync::default());
    let db = Db::open_with_fs("/db", o.clone(), Arc::new(fs.clone())).unwrap();
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for i in 0..400u32 {
        let k = format!("k{i:03}");
        db.put(&k, "base").unwrap();
        model.insert(k, b"base".to_vec());
    }
    db.flush().unwrap();
    // Deltas over bases in an older run: the flush cannot fold them, so they go to buckets.
    for i in 0..400u32 {
        let k = format!("k{i:03}");
        let d = format!("+delta-{i:05}-{}", "x".repeat(20));
        db.merge(&k, &d).unwrap();
        model.get_mut(&k).unwrap().extend_from_slice(d.as_bytes());
    }
    // Nothing in the background from here on: the flush's install stores the first
    // manifest after the arming, its collection the second.
    db.compact().unwrap();
    fs.hooks().state.store(3, Ordering::SeqCst);
    // The flush returns at its install; its collection runs after, in the same job, which
    // `compact` waits for (it fails once the engine is poisoned, or finds nothing left).
    let _ = db.flush();
    let _ = db.compact();
    assert_eq!(fs.hooks().state.load(Ordering::SeqCst), 0, "not injected");
    assert!(
        db.put("after", "x").is_err(),
        "the collection's failed install must poison"
    );
    drop(db);
    let db = Db::open_with_fs("/db", o, Arc::new(sim)).unwrap();
    check_model(&db, &model, "after a reopen");
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report:?}");
}
