//! One test per failure pattern that other key-value separation engines (WiscKey-style
//! value logs, blob files) have shipped: each test builds the situation that broke them
//! and checks that hybridkv gets it right. Some overlap with `large_log_gc.rs`,
//! `recovery.rs` and `crash_points.rs`; here each pattern has its own named test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use common::{
    find_prefix, lower_bound, read_state, run_workload, states, universe, upper_bound, Model, Op,
};
use hybridkv::io::{CrashKind, FileSystem, SimFs};
use hybridkv::{Db, Error, Options, Placement, WriteOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const DIR: &str = "/db";
const SEGMENT: usize = 64 << 10;

fn opts() -> Options {
    Options {
        memtable_size: 256 << 10,
        growth_factor: 4,
        large_segment_size: SEGMENT,
        cache_bytes: 4 << 20,
        // Passes run when a test asks.
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// A large value (>= 1024 bytes) of `len` bytes, distinct per key and version.
fn large(i: u32, version: u32, len: usize) -> Vec<u8> {
    let mut v = format!("{i}:{version}:").into_bytes();
    v.resize(len, (i as u8).wrapping_mul(7) ^ (version as u8));
    v
}

/// Small, medium or large by key and version.
fn mixed(i: u32, version: u32) -> Vec<u8> {
    let len = match (i + version) % 3 {
        0 => 9,
        1 => 300,
        _ => 2500,
    };
    large(i, version, len)
}

fn names(dir: &Path, ext: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(ext))
        .collect()
}

fn sim_names(fs: &SimFs, ext: &str) -> BTreeSet<String> {
    fs.list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(ext))
        .collect()
}

/// Bytes the file system allocates to the directory's files (what `du` counts).
fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

fn verify(db: &Db, model: &Model, what: &str) {
    for (k, v) in model {
        let got = db
            .get(k)
            .unwrap_or_else(|e| panic!("{what}: get failed: {e}"));
        assert!(
            got.as_ref() == Some(v),
            "{what}: {} is {:?} bytes, want {}",
            String::from_utf8_lossy(k),
            got.map(|g| g.len()),
            v.len()
        );
    }
    let scanned: Model = db
        .iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{what}: scan failed: {e}")))
        .collect();
    assert!(scanned == *model, "{what}: scan differs from the model");
}

fn assert_check_clean(db: &Db) {
    let r = db.check().unwrap();
    assert!(r.is_ok() && r.orphans.is_empty(), "{r}");
}

/// Mirrors value-log engines whose garbage collector deleted a value file while an open
/// iterator (or snapshot) still had to read from it, so the scan failed or returned
/// another value. Here a segment that GC frees stays on disk until the last iterator that
/// captured it is dropped, and that iterator still sees its snapshot's values.
#[test]
fn a_gc_freed_segment_stays_readable_by_an_open_iterator() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let n = 120;
    for i in 0..n {
        db.put(key(i), large(i, 0, 3000)).unwrap();
    }
    db.flush().unwrap();
    let old_segments = names(dir.path(), ".vlog");
    // Two readers of version 0: one that has already started, one not yet.
    let mut started = db.iter();
    let first = started.next().unwrap().unwrap();
    assert_eq!(first, (key(0), large(0, 0, 3000)));
    let unstarted = db.iter();
    // Every value is overwritten; compaction counts the old ones as garbage; GC frees
    // their segments.
    for i in 0..n {
        db.put(key(i), large(i, 1, 3000)).unwrap();
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    let report = db.gc().unwrap();
    assert!(report.segments_freed > 0, "{report:?}");
    // Freed, but held by the iterators: still on disk, named by no live state.
    let orphans = db.check().unwrap().orphans;
    let freed: Vec<String> = old_segments
        .into_iter()
        .filter(|s| orphans.contains(s))
        .collect();
    assert!(
        !freed.is_empty(),
        "freed segments should linger (held by the iterators) as orphans"
    );
    for (it, skip) in [(started, 1u32), (unstarted, 0)] {
        let rest: Vec<(Vec<u8>, Vec<u8>)> = it.map(|r| r.unwrap()).collect();
        assert_eq!(rest.len() as u32, n - skip);
        for (j, (k, v)) in rest.into_iter().enumerate() {
            let i = j as u32 + skip;
            assert_eq!(k, key(i));
            assert!(
                v == large(i, 0, 3000),
                "iterator read a wrong value for {i}"
            );
        }
    }
    // Both iterators are dropped: the freed files go.
    let left = names(dir.path(), ".vlog");
    for f in &freed {
        assert!(!left.contains(f), "{f} outlived its last reader");
    }
    let model: Model = (0..n).map(|i| (key(i), large(i, 1, 3000))).collect();
    verify(&db, &model, "after gc");
    assert_check_clean(&db);
}

/// Mirrors engines that persisted their replay position (a value-log "head" or a WAL
/// checkpoint) before the memtable data it covers reached durable index files, so a crash
/// in between skipped writes at replay. Here every crash point of a workload with
/// flushes (power loss, with none or some of the unsynced bytes kept) recovers a prefix of
/// the writes holding every synced one and every one acknowledged before a flush returned.
#[test]
fn replay_never_starts_after_data_that_is_not_yet_flushed() {
    let mut ops = Vec::new();
    for round in 0..4u32 {
        for i in 0..30u32 {
            ops.push(Op::Put {
                key: common::key(u64::from(i)),
                value: mixed(i, round),
                sync: i % 7 == 6,
            });
        }
        ops.push(Op::Delete {
            key: common::key(u64::from(round)),
            sync: false,
        });
        ops.push(Op::Flush);
    }
    let states = states(&ops);
    let universe = universe(&ops);
    let fs = SimFs::recording();
    let db = Db::open_with_fs(DIR, common::small_opts(), Arc::new(fs.clone())).unwrap();
    let outcomes = run_workload(&db, &ops, || fs.mutation_count());
    assert!(outcomes.iter().all(common::Outcome::ok));
    assert!(db.stats().unwrap().flushes >= 4);
    drop(db);
    let history = fs.history().unwrap();
    let mut replay = history.replay();
    let mut images = 0;
    for k in 0..=history.len() {
        replay.advance_to(k);
        for kind in [
            CrashKind::DropUnsynced,
            CrashKind::KeepPrefix { seed: k as u64 },
        ] {
            let acked = |i: usize| outcomes[i].ok() && outcomes[i].end <= k as u64;
            let lo = lower_bound(&ops, acked, true);
            let hi = upper_bound(&outcomes, k as u64);
            let db = Db::open_with_fs(
                DIR,
                common::small_opts(),
                Arc::new(replay.crash_image(kind)),
            )
            .unwrap_or_else(|e| panic!("crash point {k} {kind:?}: open failed: {e}"));
            let got = read_state(&db, &universe)
                .unwrap_or_else(|e| panic!("crash point {k} {kind:?}: {e}"));
            find_prefix(&states, &got, lo, hi)
                .unwrap_or_else(|e| panic!("crash point {k} {kind:?}: {e}"));
            let r = db.check().unwrap();
            assert!(r.is_ok(), "crash point {k} {kind:?}: {r}");
            images += 1;
        }
    }
    println!("replay-position crash images: {images}");
}

/// Mirrors value-log GCs that re-inserted a relocated value after checking liveness
/// without holding off writers, so a concurrent update or delete of the same key was
/// overwritten by the older value (a resurrection). Here relocation re-checks under the
/// commit lock: racing updates and deletes always win, also after compaction and reopen.
#[test]
fn gc_relocation_racing_updates_and_deletes_never_resurrects() {
    let dir = tempfile::tempdir().unwrap();
    let n = 200u32;
    let mut model = Model::new();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..n {
            db.put(key(i), large(i, 0, 1500)).unwrap();
        }
        // Garbage in every segment: half the keys overwritten.
        for i in (0..n).step_by(2) {
            db.put(key(i), large(i, 1, 1500)).unwrap();
        }
        db.flush().unwrap();
        db.compact_all().unwrap();
        // Deterministic: a key deleted after GC planned its segment stays deleted.
        db.delete(key(1)).unwrap();
        // Racing: GC passes while a writer updates and deletes the live keys.
        let stop = Arc::new(AtomicBool::new(false));
        let gc = {
            let (db, stop) = (db.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut freed = 0;
                while !stop.load(Ordering::Relaxed) {
                    freed += db.gc().unwrap().segments_freed;
                    db.compact().unwrap();
                }
                freed
            })
        };
        for version in 2..6u32 {
            for i in 0..n {
                if i == 1 {
                    continue;
                }
                if (i + version) % 5 == 0 {
                    db.delete(key(i)).unwrap();
                } else if (i + version) % 3 == 0 {
                    db.put(key(i), large(i, version, 1500)).unwrap();
                }
            }
            db.flush().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let freed = gc.join().unwrap();
        // The model: replay the same writes.
        for i in 0..n {
            model.insert(key(i), large(i, 0, 1500));
        }
        for i in (0..n).step_by(2) {
            model.insert(key(i), large(i, 1, 1500));
        }
        model.remove(&key(1));
        for version in 2..6u32 {
            for i in (0..n).filter(|&i| i != 1) {
                if (i + version) % 5 == 0 {
                    model.remove(&key(i));
                } else if (i + version) % 3 == 0 {
                    model.insert(key(i), large(i, version, 1500));
                }
            }
        }
        verify(&db, &model, "after racing gc");
        db.compact_all().unwrap();
        let r = db.gc().unwrap();
        println!(
            "racing gc freed {freed} segments; final pass freed {}",
            r.segments_freed
        );
        verify(&db, &model, "after compact_all and gc");
        assert_check_clean(&db);
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    verify(&db, &model, "after reopen");
    assert_eq!(db.get(key(1)).unwrap(), None, "a deleted key came back");
}

/// Mirrors engines that wrote a GC's relocated values (or the rewritten blob file) and
/// crashed before recording the change in their manifest, then lost the relocated values
/// or kept pointers to the freed file. Here a crash at every point of a GC pass (right
/// after the relocated data is written and synced, before and after the manifest that
/// drops the old segment, before its deletion), of every kind, recovers exactly the data.
#[test]
fn crash_between_gc_output_and_manifest_keeps_every_value() {
    let fs = SimFs::recording();
    let o = Options {
        memtable_size: 64 << 10,
        ..opts()
    };
    let mut model = Model::new();
    let db = Db::open_with_fs(DIR, o.clone(), Arc::new(fs.clone())).unwrap();
    for i in 0..60 {
        db.put(key(i), large(i, 0, 3000)).unwrap();
        model.insert(key(i), large(i, 0, 3000));
    }
    for i in 0..60 {
        if i % 3 != 0 {
            db.put(key(i), large(i, 1, 3000)).unwrap();
            model.insert(key(i), large(i, 1, 3000));
        }
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    let before = sim_names(&fs, ".vlog");
    let m0 = fs.mutation_count() as usize;
    let report = db.gc().unwrap();
    let m1 = fs.mutation_count() as usize;
    assert!(
        report.segments_freed > 0 && report.entries_relocated > 0,
        "{report:?}"
    );
    let freed: BTreeSet<String> = before
        .difference(&sim_names(&fs, ".vlog"))
        .cloned()
        .collect();
    assert!(!freed.is_empty());
    drop(db);
    let history = fs.history().unwrap();
    let mut replay = history.replay();
    let (mut old_kept, mut old_gone) = (0, 0);
    for k in m0..=m1 {
        replay.advance_to(k);
        for kind in [
            CrashKind::DropUnsynced,
            CrashKind::KeepPrefix { seed: k as u64 },
            CrashKind::TornSector { seed: k as u64 },
            CrashKind::ProcessCrash,
        ] {
            let img = replay.crash_image(kind);
            let db = Db::open_with_fs(DIR, o.clone(), Arc::new(img.clone()))
                .unwrap_or_else(|e| panic!("crash at {k} {kind:?}: open failed: {e}"));
            verify(&db, &model, &format!("crash at {k} {kind:?}"));
            assert_check_clean(&db);
            if sim_names(&img, ".vlog").is_superset(&freed) {
                old_kept += 1;
            } else {
                old_gone += 1;
            }
            // GC again from the recovered state: still exactly the data.
            db.gc().unwrap();
            verify(&db, &model, &format!("crash at {k} {kind:?}, gc again"));
            drop(db);
            let db = Db::open_with_fs(DIR, o.clone(), Arc::new(img)).unwrap();
            verify(&db, &model, &format!("crash at {k} {kind:?}, reopen"));
        }
    }
    println!(
        "gc crash points: {} (old segment kept at {old_kept} images, gone at {old_gone})",
        m1 - m0 + 1
    );
    // Both sides of the manifest write were hit: relocated data written, old segment still
    // named; and old segment dropped.
    assert!(old_kept > 0 && old_gone > 0);
}

/// Mirrors engines that leaked value files nobody referenced any more (freed by a GC or
/// left by an interrupted flush just before a crash), which then stayed on disk forever
/// or, worse, were read again. Here files no manifest names are swept at open, and their
/// stale values never come back.
#[test]
fn orphaned_files_are_swept_at_open_and_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let n = 100;
    let mut saved: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let model: Model = (0..n).map(|i| (key(i), large(i, 1, 3000))).collect();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..n {
            db.put(key(i), large(i, 0, 3000)).unwrap();
        }
        db.flush().unwrap();
        for name in names(dir.path(), ".vlog") {
            saved.insert(name.clone(), std::fs::read(dir.path().join(&name)).unwrap());
        }
        for i in 0..n {
            db.put(key(i), large(i, 1, 3000)).unwrap();
        }
        db.compact_all().unwrap();
        assert!(db.gc().unwrap().segments_freed > 0);
    }
    let live = names(dir.path(), ".vlog");
    let freed: Vec<&String> = saved.keys().filter(|s| !live.contains(*s)).collect();
    assert!(!freed.is_empty());
    // A crash after the manifest dropped them but before they were deleted, plus the
    // leftovers of interrupted work: a level file, a transient segment, a temp manifest
    // and a flushed small-log file.
    for f in &freed {
        std::fs::write(dir.path().join(f), &saved[*f]).unwrap();
    }
    let lvl = names(dir.path(), ".lvl").into_iter().next().unwrap();
    let stray: Vec<PathBuf> = [
        "00000001.lvl",
        "00000002.tlog",
        "MANIFEST.tmp",
        "00000001.wal",
    ]
    .iter()
    .map(|n| dir.path().join(n))
    .collect();
    for p in &stray {
        if !p.exists() {
            std::fs::copy(dir.path().join(&lvl), p).unwrap();
        }
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    for f in &freed {
        assert!(!dir.path().join(f).exists(), "orphan {f} not swept");
    }
    for p in &stray {
        assert!(!p.exists(), "orphan {} not swept", p.display());
    }
    verify(&db, &model, "after sweeping orphans");
    assert_check_clean(&db);
}

/// Mirrors value-log engines where deleting every key did not give the disk space back
/// (value files never became eligible for GC, or the index kept tombstones and dead
/// pointers forever). Here after delete-all, `compact_all` and `gc`, the directory's
/// allocated bytes are a fixed overhead (at most the active large segment, the small log
/// and the manifest); with data written back they stay within a small factor of it.
#[test]
fn space_comes_back_after_deleting_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let n = 3000u32;
    for round in 0..2 {
        for i in 0..n {
            db.put(key(i), mixed(i, round)).unwrap();
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let full = du(dir.path());
    for i in 0..n {
        db.delete(key(i)).unwrap();
    }
    db.compact_all().unwrap();
    db.gc().unwrap();
    let empty = du(dir.path());
    assert_eq!(db.iter().count(), 0);
    // The active large segment (never collected while written to), a small-log file
    // and the manifest.
    let overhead = 2 * SEGMENT as u64 + (64 << 10);
    println!("allocated: loaded {full} bytes, after delete-all + compact_all + gc {empty}");
    assert!(
        empty <= overhead,
        "{empty} bytes left after deleting everything"
    );
    // Live data again, overwritten twice: disk use stays within a small factor.
    let mut live = 0u64;
    for round in 2..5 {
        live = 0;
        for i in 0..300 {
            let v = mixed(i, round);
            live += (key(i).len() + v.len()) as u64;
            db.put(key(i), v).unwrap();
        }
        db.flush().unwrap();
    }
    db.compact_all().unwrap();
    db.gc().unwrap();
    let used = du(dir.path());
    println!("allocated with {live} live bytes: {used}");
    assert!(
        used <= 3 * live + overhead,
        "{used} bytes for {live} live bytes"
    );
}

/// Mirrors engines where a damaged record in the middle of a value log either returned
/// garbage, made every later value of the file unreadable, or was silently dropped by the
/// garbage collector together with the intact records after it. Here the damaged key
/// reads as `Error::Corruption` naming the segment and the record's offset, every other key
/// stays readable, `check` names the damage, and GC leaves that segment (reporting it) while
/// it still frees the other segments.
#[test]
fn corruption_in_the_middle_of_a_value_log_hits_only_the_affected_key() {
    let dir = tempfile::tempdir().unwrap();
    let n = 150u32;
    let mut model: Model = (0..n).map(|i| (key(i), large(i, 0, 3000))).collect();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for (k, v) in &model {
            db.put(k, v).unwrap();
        }
        db.flush().unwrap();
    }
    let segs: Vec<String> = names(dir.path(), ".vlog").into_iter().collect();
    assert!(segs.len() >= 4, "{segs:?}");
    let victim = segs[segs.len() / 2].clone();
    let path = dir.path().join(&victim);
    let mut data = std::fs::read(&path).unwrap();
    // The records are 20 + 9 + 3000 bytes after a 16-byte header: damage the value of the
    // third record.
    let rec = 20 + 9 + 3000;
    let start = 16 + 2 * rec;
    assert!(data.len() > 16 + 5 * rec);
    data[start + 20 + 9 + 1500] ^= 0x04;
    std::fs::write(&path, &data).unwrap();

    let db = Db::open(dir.path(), opts()).unwrap();
    let mut damaged = Vec::new();
    for (k, v) in &model {
        match db.get(k) {
            Ok(got) => assert!(got.as_ref() == Some(v), "wrong bytes for {k:?}"),
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, path);
                assert_eq!(offset, start as u64);
                damaged.push(k.clone());
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(damaged.len(), 1, "exactly the damaged record's key fails");
    let r = db.check().unwrap();
    assert!(
        !r.is_ok() && r.errors.iter().any(|e| e.contains(&victim)),
        "{r}"
    );
    // Garbage in that segment (every other key of it overwritten) makes it a GC victim.
    for (k, v) in model.iter_mut() {
        if *k != damaged[0] && k.last().unwrap() % 2 == 0 {
            *v = large(0, 9, 2000);
            db.put(k, &*v).unwrap();
        }
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    // GC leaves the damaged segment (reporting it) and still frees the other victims:
    // one damaged segment must not stop space from coming back elsewhere.
    let before: Vec<String> = names(dir.path(), ".vlog").into_iter().collect();
    let r = db.gc().unwrap();
    assert!(path.exists(), "gc freed the damaged segment: {r:?}");
    assert!(r.segments_damaged >= 1, "{r:?}");
    assert!(r.damage.iter().any(|m| m.contains(&victim)), "{r:?}");
    assert!(
        r.segments_freed >= 1,
        "the undamaged victims are still freed: {r:?}"
    );
    let after: Vec<String> = names(dir.path(), ".vlog").into_iter().collect();
    assert!(
        before
            .iter()
            .filter(|s| **s != victim)
            .any(|s| !after.contains(s)),
        "no other segment was freed: before {before:?}, after {after:?}"
    );
    for (k, v) in &model {
        match db.get(k) {
            Ok(got) => assert!(got.as_ref() == Some(v), "wrong bytes for {k:?} after gc"),
            Err(e) => {
                assert!(*k == damaged[0] && e.is_corruption(), "{k:?} after gc: {e}");
            }
        }
    }
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert!(db.get(&damaged[0]).unwrap_err().is_corruption());
}

/// Mirrors engines that stored a value's length (or a blob's size) in 16 bits somewhere
/// on its way through the value log, the index, compaction or GC, so values of 64 KiB or
/// more came back truncated. Here values of 65 535 .. 65 537 bytes, 70 000 bytes and 1 MiB
/// go through flush, compaction, GC and reopen, in the large log (hybrid placement) and
/// as overflow blobs of level files (in-place placement).
#[test]
fn values_longer_than_16_bits_survive_flush_compaction_gc_and_reopen() {
    let lens = [65_535usize, 65_536, 65_537, 70_000, 1 << 20];
    for placement in [Placement::Hybrid, Placement::InPlace] {
        let dir = tempfile::tempdir().unwrap();
        let o = Options {
            placement,
            ..opts()
        };
        let mut model = Model::new();
        {
            let db = Db::open(dir.path(), o.clone()).unwrap();
            for round in 0..3u32 {
                for (j, &len) in lens.iter().enumerate() {
                    let i = j as u32 + round % 2 * 10;
                    let v = large(i, round, len);
                    db.put_opt(key(i), &v, &WriteOptions { sync: round == 2 })
                        .unwrap();
                    model.insert(key(i), v);
                }
                db.put(key(100 + round), b"small").unwrap();
                model.insert(key(100 + round), b"small".to_vec());
                db.flush().unwrap();
                verify(&db, &model, &format!("{placement:?} after flush {round}"));
            }
            db.compact_all().unwrap();
            verify(&db, &model, &format!("{placement:?} after compact_all"));
            db.gc().unwrap();
            verify(&db, &model, &format!("{placement:?} after gc"));
            assert_check_clean(&db);
            // Some in the small log only, at reopen.
            let v = large(50, 0, 70_000);
            db.put(key(50), &v).unwrap();
            model.insert(key(50), v);
        }
        let db = Db::open(dir.path(), o).unwrap();
        verify(&db, &model, &format!("{placement:?} after reopen"));
        assert_check_clean(&db);
    }
}
