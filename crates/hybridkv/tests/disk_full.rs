//! A full disk (a byte quota on a `SimFs`): the write that runs out of space fails with an
//! `Error::Io` whose source has kind `StorageFull` (ENOSPC), distinct from other I/O
//! errors. What the engine does: like any failed log write, running out of space poisons
//! the database — later writes are refused with `Error::Poisoned` (whose message names
//! the no-space error) even after space is freed — while every acknowledged write stays
//! readable. Writes resume after a reopen once there is space again. Reopening while the
//! disk is still full either succeeds or fails with the same no-space error; it never
//! reports corruption or loses acknowledged data.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    acked_state, apply, count_panics, find_prefix, panics, read_state, run_workload, small_opts,
    states, universe, workload, Op, Rng, DIR,
};
use hybridkv::io::SimFs;
use hybridkv::{Db, Error};
use std::io::ErrorKind;
use std::sync::Arc;

fn open(fs: &SimFs) -> hybridkv::Result<Db> {
    Db::open_with_fs(DIR, small_opts(), Arc::new(fs.clone()))
}

fn is_no_space(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => source.kind() == ErrorKind::StorageFull,
        Error::Poisoned(msg) => msg.contains("no space left"),
        _ => false,
    }
}

/// Writes the first 150 operations of a workload, then caps the disk `headroom` bytes
/// above its use and keeps writing until a write fails. Returns the operations tried and
/// the database.
fn fill(fs: &SimFs, headroom: u64, seed: u64) -> (Vec<Op>, Vec<common::Outcome>, Db) {
    let db = open(fs).unwrap();
    let mut ops = workload(seed, 150);
    let mut outcomes = run_workload(&db, &ops, || 0);
    assert!(outcomes.iter().all(common::Outcome::ok));
    fs.set_quota(Some(fs.used_bytes() + headroom));
    let mut rng = Rng::new(seed);
    let mut acked = acked_state(&ops, &outcomes);
    for i in 0..5000 {
        let op = Op::Put {
            key: common::key(rng.below(common::KEYS)),
            value: common::value(&mut rng, 1000 + i),
            sync: rng.chance(10),
        };
        let result = common::run_op(&db, &op, &acked);
        let failed = result.is_err();
        if !failed {
            apply(&mut acked, &op);
        }
        ops.push(op);
        outcomes.push(common::Outcome {
            start: 0,
            end: 0,
            result,
        });
        if failed {
            break;
        }
    }
    (ops, outcomes, db)
}

#[test]
fn a_full_disk_fails_writes_with_no_space_keeps_data_and_writes_resume_after_reopen() {
    count_panics();
    let fs = SimFs::new();
    let (ops, outcomes, db) = fill(&fs, 400 << 10, 21);
    let failed = outcomes
        .iter()
        .position(|o| !o.ok())
        .expect("the disk never filled");
    let err = outcomes[failed].result.as_ref().unwrap_err();
    println!(
        "disk full after {} writes ({} bytes used, {} writes refused for space): {err}",
        failed,
        fs.used_bytes(),
        fs.quota_failures()
    );
    assert!(is_no_space(err), "not a no-space error: {err:?}");
    assert!(fs.quota_failures() > 0);

    // Acknowledged data stays readable; writes are refused, even once space is freed.
    let universe = universe(&ops);
    let acked = acked_state(&ops, &outcomes);
    assert_eq!(read_state(&db, &universe).unwrap(), acked);
    match db.put("more", "x") {
        Err(e @ Error::Poisoned(_)) => assert!(is_no_space(&e), "{e}"),
        other => panic!("expected Poisoned, got {other:?}"),
    }
    fs.set_quota(None);
    assert!(matches!(db.put("more", "x"), Err(Error::Poisoned(_))));
    assert_eq!(read_state(&db, &universe).unwrap(), acked);
    drop(db);

    // Reopen: every acknowledged write is there, and writes, flushes, merges and GC work.
    let db = open(&fs).unwrap();
    let got = read_state(&db, &universe).unwrap();
    let states = states(&ops);
    let p = find_prefix(&states, &got, failed, failed + 1).unwrap();
    println!("reopened with prefix {p} of {} operations", ops.len());
    db.put("more", "x").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    db.gc().unwrap();
    assert_eq!(db.get("more").unwrap().as_deref(), Some(&b"x"[..]));
    let mut want = states[p].clone();
    want.insert(b"more".to_vec(), b"x".to_vec());
    let mut u = universe.clone();
    u.insert(b"more".to_vec());
    assert_eq!(read_state(&db, &u).unwrap(), want);
    assert!(db.check().unwrap().is_ok());
    assert_eq!(panics(), 0);
}

#[test]
fn reopening_a_still_full_disk_fails_with_no_space_or_succeeds_and_loses_nothing() {
    count_panics();
    let mut opened_full = 0;
    let mut refused_full = 0;
    // Different headrooms fill the disk at different moments (log write, flush, merge).
    for (i, headroom) in [8u64 << 10, 64 << 10, 150 << 10, 300 << 10]
        .into_iter()
        .enumerate()
    {
        let fs = SimFs::new();
        let (ops, outcomes, db) = fill(&fs, headroom, 30 + i as u64);
        let failed = outcomes.iter().position(|o| !o.ok()).expect("never filled");
        assert!(is_no_space(outcomes[failed].result.as_ref().unwrap_err()));
        drop(db);
        let universe = universe(&ops);
        let states = states(&ops);
        // Still full: open succeeds (and holds every acknowledged write) or reports no space.
        for _ in 0..3 {
            match open(&fs) {
                Ok(db) => {
                    opened_full += 1;
                    let got = read_state(&db, &universe).unwrap();
                    find_prefix(&states, &got, failed, failed + 1).unwrap();
                }
                Err(e) => {
                    refused_full += 1;
                    assert!(is_no_space(&e), "reopen on a full disk: {e}");
                }
            }
        }
        fs.set_quota(None);
        let db = open(&fs).unwrap();
        let got = read_state(&db, &universe).unwrap();
        find_prefix(&states, &got, failed, failed + 1).unwrap();
        db.put("resumed", "yes").unwrap();
        assert!(db.check().unwrap().is_ok());
    }
    println!("opens of a full disk: {opened_full} succeeded, {refused_full} refused with no space");
    assert_eq!(panics(), 0);
}
