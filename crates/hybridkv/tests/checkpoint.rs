//! Checkpoints: a copy made under load opens and equals the source at its point; it is
//! durable when `checkpoint` returns (power loss right after); the source and the copy
//! go their own ways afterwards (hard-linked files are never changed by either); a fault
//! at any step of a checkpoint is an error, leaves no database behind and leaves the
//! source working.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{key, sized_value, small_opts, Model};
use hybridkv::io::{CrashKind, FailMode, FileSystem, SimFs};
use hybridkv::{Db, Error, Options};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Small, medium and large values (and one over 64 KiB), so that the small log, the
/// transient log and the large log all hold data of the checkpoint.
fn value_for(i: u64, round: u64) -> Vec<u8> {
    let len = match i % 7 {
        0..=2 => 9,
        3..=4 => 104,
        5 => 1004 + (i % 1500) as usize,
        _ if i % 70 == 6 => 70_000,
        _ => 3000,
    };
    sized_value(len, (i * 10 + round) as usize)
}

fn all_pairs(db: &Db) -> Model {
    db.iter().map(|p| p.unwrap()).collect()
}

/// Writes `count` keys from `start` (round `round`), some deletes, and returns the model.
fn write_round(db: &Db, model: &mut Model, start: u64, count: u64, round: u64) {
    for i in start..start + count {
        let (k, v) = (key(i), value_for(i, round));
        db.put(&k, &v).unwrap();
        model.insert(k, v);
        if i % 11 == 0 {
            let d = key(i / 2);
            db.delete(&d).unwrap();
            model.remove(&d);
        }
    }
}

fn reopen_opts() -> Options {
    Options {
        create_if_missing: false,
        ..small_opts()
    }
}

#[test]
fn a_checkpoint_equals_the_source_at_its_point_and_then_goes_its_own_way() {
    let dir = tempfile::tempdir().unwrap();
    let (src, ckpt) = (dir.path().join("src"), dir.path().join("backups/ckpt"));
    let db = Db::open(&src, small_opts()).unwrap();
    let mut model = Model::new();
    write_round(&db, &mut model, 0, 600, 0);
    db.flush().unwrap();
    db.compact().unwrap();
    write_round(&db, &mut model, 300, 400, 1); // part in levels, part in the memtable
    let report = db.checkpoint(&ckpt).unwrap();
    assert!(report.files_linked > 0, "{report:?}");
    assert!(
        report.files_copied >= 2,
        "a small log and the options: {report:?}"
    );
    let at_point = model.clone();

    // The source moves on: overwrites everything, merges every level down, collects.
    write_round(&db, &mut model, 0, 700, 2);
    db.compact_all().unwrap();
    db.gc().unwrap();
    assert_eq!(all_pairs(&db), model);

    let copy = Db::open(&ckpt, reopen_opts()).unwrap();
    assert_eq!(all_pairs(&copy), at_point, "the checkpoint changed");
    for (k, v) in at_point.iter().take(50) {
        assert_eq!(copy.get(k).unwrap().as_ref(), Some(v));
    }
    // The copy is a database of its own: writes and merges there leave the source alone.
    let mut copy_model = at_point.clone();
    write_round(&copy, &mut copy_model, 100, 300, 3);
    copy.compact_all().unwrap();
    copy.gc().unwrap();
    assert_eq!(all_pairs(&copy), copy_model);
    assert!(copy.check().unwrap().is_ok());
    copy.close().unwrap();
    assert_eq!(
        all_pairs(&db),
        model,
        "writing the checkpoint changed the source"
    );
    assert!(db.check().unwrap().is_ok());
    db.close().unwrap();
    let copy = Db::open(&ckpt, reopen_opts()).unwrap();
    assert_eq!(all_pairs(&copy), copy_model);
}

#[test]
fn a_checkpoint_taken_under_load_holds_a_prefix_of_the_writes() {
    // Real file system, a writer thread: the checkpoint holds exactly writes 0..m for an
    // m between the writes acknowledged before `checkpoint` was called and those started
    // before it returned.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let db = Db::open(&src, small_opts()).unwrap();
    let started = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicU64::new(0));
    const TOTAL: u64 = 20_000;
    let writer = {
        let (db, started, acked, stop) = (
            db.clone(),
            Arc::clone(&started),
            Arc::clone(&acked),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            for i in 0..TOTAL {
                if stop.load(Ordering::SeqCst) == 1 {
                    break;
                }
                started.store(i + 1, Ordering::SeqCst);
                db.put(key(i), value_for(i, 0)).unwrap();
                acked.store(i + 1, Ordering::SeqCst);
            }
        })
    };
    let mut bounds = Vec::new();
    for n in 0..3u64 {
        // Wait for progress (not for time): each checkpoint sees more writes.
        while acked.load(Ordering::SeqCst) < (n + 1) * 1500
            && started.load(Ordering::SeqCst) < TOTAL
        {
            std::thread::yield_now();
        }
        let path = dir.path().join(format!("ckpt-{n}"));
        let lo = acked.load(Ordering::SeqCst);
        db.checkpoint(&path).unwrap();
        let hi = started.load(Ordering::SeqCst);
        bounds.push((path, lo, hi));
    }
    stop.store(1, Ordering::SeqCst);
    writer.join().unwrap();
    let source_pairs = all_pairs(&db).len() as u64;
    db.close().unwrap();
    for (path, lo, hi) in bounds {
        let copy = Db::open(&path, reopen_opts()).unwrap();
        let got = all_pairs(&copy);
        let m = got.len() as u64;
        assert!(lo <= m && m <= hi, "{m} pairs, expected {lo}..={hi}");
        let want: Model = (0..m).map(|i| (key(i), value_for(i, 0))).collect();
        assert!(got == want, "not the first {m} writes");
        assert!(copy.check().unwrap().is_ok());
        assert!(m <= source_pairs);
    }
}

#[test]
fn a_checkpoint_survives_a_power_loss_right_after_it_returns() {
    for kind in [
        CrashKind::DropUnsynced,
        CrashKind::KeepPrefix { seed: 7 },
        CrashKind::TornSector { seed: 9 },
    ] {
        let fs = SimFs::new();
        let db = Db::open_with_fs("/db", small_opts(), Arc::new(fs.clone())).unwrap();
        let mut model = Model::new();
        write_round(&db, &mut model, 0, 500, 0);
        db.flush().unwrap();
        write_round(&db, &mut model, 200, 200, 1); // unsynced, in the memtable
        db.checkpoint("/backup/ckpt").unwrap();
        let image = fs.crash_image(kind);
        drop(db);
        let copy = Db::open_with_fs("/backup/ckpt", reopen_opts(), Arc::new(image)).unwrap();
        assert_eq!(all_pairs(&copy), model, "{kind:?}");
    }
}

#[test]
fn a_fault_at_any_step_is_an_error_and_leaves_no_database_behind() {
    let fs = SimFs::new();
    let db = Db::open_with_fs("/db", small_opts(), Arc::new(fs.clone())).unwrap();
    let mut model = Model::new();
    write_round(&db, &mut model, 0, 400, 0);
    db.flush().unwrap();
    write_round(&db, &mut model, 100, 100, 1);
    // Count the checkpoint's operations on a throwaway run.
    let before = fs.op_count();
    db.checkpoint("/probe").unwrap();
    let steps = fs.op_count() - before;
    assert!(steps > 5, "{steps}");
    let mut failed = 0;
    for step in 0..steps {
        let path = format!("/ckpt-{step}");
        fs.fail_at(fs.op_count() + step, FailMode::Once);
        let r = db.checkpoint(&path);
        fs.clear_faults();
        match r {
            Err(Error::Io { .. }) => {
                failed += 1;
                // What the call made is gone (a temporary file of an atomic write may
                // stay: open sweeps those), so nothing opens as a database.
                let left: Vec<String> = fs
                    .list(Path::new(&path))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|n| !n.ends_with(".tmp"))
                    .collect();
                assert!(left.is_empty(), "step {step}: left {left:?}");
                let opened = Db::open_with_fs(&path, reopen_opts(), Arc::new(fs.clone()));
                assert!(opened.is_err(), "step {step}: a partial checkpoint opened");
            }
            Err(e) => panic!("step {step}: {e}"),
            Ok(_) => {
                // The fault hit a background step of the source instead (a flush of
                // its own); the checkpoint must then be whole.
                let copy = Db::open_with_fs(&path, reopen_opts(), Arc::new(fs.clone())).unwrap();
                assert_eq!(all_pairs(&copy), model, "step {step}");
            }
        }
        // The source works on.
        db.put(key(10_000 + step), b"after").unwrap();
        model.insert(key(10_000 + step), b"after".to_vec());
    }
    assert!(
        failed > steps / 2,
        "{failed} of {steps} faults reached the checkpoint"
    );
    assert_eq!(all_pairs(&db), model);
}

#[test]
fn refused_into_an_existing_directory_and_from_a_read_only_handle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let db = Db::open(&src, small_opts()).unwrap();
    db.put("k", "v").unwrap();
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    match db.checkpoint(&taken) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("already exists"), "{m}"),
        other => panic!("{other:?}"),
    }
    let reader = Db::open_read_only(&src, small_opts()).unwrap();
    assert!(matches!(
        reader.checkpoint(dir.path().join("ro")),
        Err(Error::ReadOnly)
    ));
    assert!(!Path::new(&dir.path().join("ro")).exists());
    let ckpt = dir.path().join("ok");
    db.checkpoint(&ckpt).unwrap();
    // The checkpoint carries the source's options.
    let stored = Db::stored_options(&ckpt).unwrap().unwrap();
    assert_eq!(stored.memtable_size, small_opts().memtable_size);
    assert_eq!(stored.large_segment_size, small_opts().large_segment_size);
}

#[test]
fn options_are_stored_with_the_database_and_read_only_opens_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    assert!(Db::stored_options(&path).unwrap().is_none());
    let custom = Options {
        growth_factor: 5,
        bloom_bits_per_key: 0,
        ..small_opts()
    };
    Db::open(&path, custom).unwrap().close().unwrap();
    let stored = Db::stored_options(&path).unwrap().unwrap();
    assert_eq!((stored.growth_factor, stored.bloom_bits_per_key), (5, 0));
    assert!(!stored.create_if_missing);
    let reader = Db::open_read_only(
        &path,
        Options {
            growth_factor: 9,
            ..small_opts()
        },
    )
    .unwrap();
    drop(reader);
    assert_eq!(Db::stored_options(&path).unwrap().unwrap().growth_factor, 5);
    Db::open(&path, small_opts()).unwrap().close().unwrap();
    assert_eq!(
        Db::stored_options(&path).unwrap().unwrap().growth_factor,
        small_opts().growth_factor
    );
    // Options the database refuses (fewer levels than it has) are not recorded.
    let db = Db::open(&path, small_opts()).unwrap();
    for i in 0..20_000u64 {
        db.put(key(i), value_for(i, 0)).unwrap();
    }
    db.compact_all().unwrap(); // over a megabyte of leaves: level 3 or deeper
    let deepest = db.stats().unwrap().levels.iter().rposition(|l| l.files > 0);
    assert!(deepest.is_some_and(|i| i >= 2), "{deepest:?}");
    db.close().unwrap();
    let refused = Db::open(
        &path,
        Options {
            max_levels: 2,
            ..small_opts()
        },
    );
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    assert_eq!(Db::stored_options(&path).unwrap().unwrap().max_levels, 7);
    // A damaged options file is a typed error naming it.
    let file = path.join("OPTIONS");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x01;
    std::fs::write(&file, bytes).unwrap();
    match Db::stored_options(&path) {
        Err(Error::Corruption { file: f, .. }) => assert_eq!(f, file),
        other => panic!("{other:?}"),
    }
}
