//! I/O errors: the failure point walks through a seeded workload (puts of all three size
//! classes, deletes, batches, some synced, reads, flush / compact / gc, with background
//! flushes and compactions): operation k of the file system fails, once or from k on.
//! For every k:
//!
//! - nothing panics (the workload runs inside `catch_unwind`, and a panic hook counts
//!   panics in background threads too);
//! - every call that fails returns `Error::Io` or, once the engine refused writes,
//!   `Error::Poisoned`; a failure is never reported as corruption, and no read returns
//!   a wrong value;
//! - after the first failed write, every later write is refused with `Error::Poisoned`
//!   (the engine never pretends a write is durable) while reads of the acknowledged data
//!   keep working;
//! - reopening on the same file system (a restart) restores a prefix that holds every
//!   acknowledged write, and reopening a power-loss image restores a prefix that holds
//!   every synced one; writes work again after the reopen.
//!
//! Also errors during recovery itself: operation k of `open` fails (once or from k on),
//! again on a second attempt, and a later open without faults recovers the same data.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    acked_state, count_panics, find_prefix, lower_bound, panics, read_state, run_workload,
    small_opts, states, universe, workload, Model, Op, Outcome, Rng, DIR,
};
use hybridkv::io::{CrashKind, FailMode, SimFs};
use hybridkv::{Db, Error};
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

const OPS: usize = 250;
/// Failure points tried per mode when the workload takes more I/O operations than this:
/// a seeded sample (every point up to it is tried otherwise; `IO_POINTS=all` forces it).
const MAX_POINTS: u64 = 2000;

fn open(fs: &SimFs) -> hybridkv::Result<Db> {
    Db::open_with_fs(DIR, small_opts(), Arc::new(fs.clone()))
}

/// Whether `e` is an injected I/O failure or the refusal that follows one.
fn expected_error(e: &Error) -> bool {
    matches!(e, Error::Io { .. } | Error::Poisoned(_))
}

#[derive(Default)]
struct Tally {
    points: u64,
    /// Runs in which the fault fired.
    fired: u64,
    /// Operations failed by injection (a fault from k on fails many).
    injected: u64,
    failed_calls: u64,
    io_errors: u64,
    poisoned: u64,
    violations: u64,
}

impl Tally {
    fn violation(&mut self, what: String) {
        self.violations += 1;
        if self.violations <= 20 {
            println!("VIOLATION: {what}");
        }
    }
}

struct Workload {
    ops: Vec<Op>,
    states: Vec<Model>,
    universe: BTreeSet<Vec<u8>>,
}

impl Workload {
    fn new(seed: u64) -> Workload {
        let ops = workload(seed, OPS);
        Workload {
            states: states(&ops),
            universe: universe(&ops),
            ops,
        }
    }

    /// Runs the workload with operation `k` (counted from after `open`) failing in `mode`.
    /// Returns whether the fault fired.
    fn run(&self, k: u64, mode: FailMode, t: &mut Tally) -> bool {
        let at = format!("fault at op {k} ({mode:?})");
        let fs = SimFs::new();
        let db = open(&fs).unwrap();
        fs.fail_at(fs.op_count() + k, mode);
        let run = catch_unwind(AssertUnwindSafe(|| {
            run_workload(&db, &self.ops, || fs.op_count())
        }));
        let outcomes: Vec<Outcome> = match run {
            Ok(o) => o,
            Err(_) => {
                t.violation(format!("{at}: the workload panicked"));
                return true;
            }
        };
        let fired = fs.faults_injected() > 0;
        t.points += 1;
        t.injected += fs.faults_injected();
        if !fired {
            if let Some((i, o)) = outcomes.iter().enumerate().find(|(_, o)| !o.ok()) {
                t.violation(format!("{at}: no fault, yet op {i} failed: {:?}", o.result));
            }
            return false;
        }
        t.fired += 1;

        // Every failure is an I/O error or the refusal after one; reads were right.
        let mut first_failed_write = None;
        for (i, (op, o)) in self.ops.iter().zip(&outcomes).enumerate() {
            let Err(e) = &o.result else { continue };
            t.failed_calls += 1;
            match e {
                Error::Io { .. } => t.io_errors += 1,
                Error::Poisoned(_) => t.poisoned += 1,
                _ => {}
            }
            if !expected_error(e) {
                t.violation(format!("{at}: op {i} {op:?} failed with {e}"));
            }
            if op.is_write() {
                match first_failed_write {
                    None => first_failed_write = Some(i),
                    Some(_) if !matches!(e, Error::Poisoned(_)) => t.violation(format!(
                        "{at}: write {i} after a failed write was not refused: {e}"
                    )),
                    Some(_) => {}
                }
            }
        }
        if let Some(first) = first_failed_write {
            for (i, o) in outcomes.iter().enumerate().skip(first + 1) {
                if self.ops[i].is_write() && o.ok() {
                    t.violation(format!(
                        "{at}: write {i} acknowledged after failed write {first}"
                    ));
                }
            }
        }

        // Reads of what was acknowledged keep working once the device answers again.
        fs.clear_faults();
        let acked = acked_state(&self.ops, &outcomes);
        match read_state(&db, &self.universe) {
            Ok(live) if live == acked => {}
            Ok(_) => t.violation(format!(
                "{at}: live reads differ from the acknowledged state"
            )),
            Err(e) => t.violation(format!("{at}: live reads failed: {e}")),
        }
        if first_failed_write.is_some() {
            match db.put("after-failure", "x") {
                Err(Error::Poisoned(_)) => {}
                other => t.violation(format!("{at}: write after a failure: {other:?}")),
            }
        }

        // Restart on the same disk, and power loss.
        let power_loss = fs.crash_image(CrashKind::DropUnsynced);
        drop(db);
        let hi = first_failed_write.map_or(self.ops.len(), |i| i + 1);
        let acked_at = |i: usize| outcomes[i].ok();
        for (disk, lo, what) in [
            (&fs, lower_bound(&self.ops, acked_at, false), "restart"),
            (
                &power_loss,
                lower_bound(&self.ops, acked_at, true),
                "power loss",
            ),
        ] {
            let db = match open(disk) {
                Ok(db) => db,
                Err(e) => {
                    t.violation(format!("{at}: reopen after {what} failed: {e}"));
                    continue;
                }
            };
            match read_state(&db, &self.universe) {
                Ok(got) => {
                    if let Err(e) = find_prefix(&self.states, &got, lo, hi) {
                        t.violation(format!("{at}: after {what}: {e}"));
                    }
                }
                Err(e) => t.violation(format!("{at}: reads after {what}: {e}")),
            }
            let write = db
                .put("after-reopen", "y")
                .and_then(|()| db.get("after-reopen"));
            if !matches!(&write, Ok(Some(v)) if v == b"y") {
                t.violation(format!("{at}: write after {what} + reopen: {write:?}"));
            }
        }
        true
    }
}

/// The failure points to try: every k below the workload's length `n` (or a seeded
/// sample of `MAX_POINTS` when it is longer), then k = n, where the fault no longer fires.
fn points(n: u64, seed: u64) -> Vec<u64> {
    let all = std::env::var("IO_POINTS").is_ok_and(|v| v == "all");
    if all || n <= MAX_POINTS {
        return (0..=n).collect();
    }
    let mut set: BTreeSet<u64> = [0, n].into();
    let mut rng = Rng::new(seed);
    while (set.len() as u64) < MAX_POINTS {
        set.insert(rng.below(n));
    }
    set.into_iter().collect()
}

fn walk(mode: FailMode) {
    count_panics();
    let w = Workload::new(11);
    // Operations the workload takes without faults (background work varies a little).
    let fs = SimFs::new();
    let db = open(&fs).unwrap();
    let base = fs.op_count();
    let outcomes = run_workload(&db, &w.ops, || fs.op_count());
    assert!(outcomes.iter().all(Outcome::ok));
    let n = fs.op_count() - base;
    drop(db);

    let mut t = Tally::default();
    let mut finished = false;
    for k in points(n, 5) {
        if !w.run(k, mode, &mut t) {
            finished = true;
            break;
        }
    }
    // Raise k until the workload completes without meeting the fault.
    let mut k = n;
    while !finished {
        k += n / 4 + 1;
        finished = !w.run(k, mode, &mut t);
    }
    println!(
        "{mode:?}: workload of {n} I/O operations, failure points: {} (fault fired in {}), \
         faults injected: {}, failed calls: {} (Io {}, Poisoned {}), violations: {}, panics: {}",
        t.points,
        t.fired,
        t.injected,
        t.failed_calls,
        t.io_errors,
        t.poisoned,
        t.violations,
        panics()
    );
    assert!(t.fired > 100, "faults must hit the workload");
    assert_eq!(t.violations, 0);
    assert_eq!(panics(), 0);
}

#[test]
fn each_operation_failing_once_returns_an_error_and_loses_nothing_acknowledged() {
    walk(FailMode::Once);
}

#[test]
fn a_device_failing_from_each_operation_on_loses_nothing_acknowledged() {
    walk(FailMode::FromThenOn);
}

/// Opens `fs` with operation `k` of the open failing in `mode`; the open must succeed or
/// fail with an I/O error (never a panic, never corruption).
fn faulty_open(fs: &SimFs, k: u64, mode: FailMode, t: &mut Tally, at: &str) {
    fs.fail_at(fs.op_count() + k, mode);
    match catch_unwind(AssertUnwindSafe(|| open(fs))) {
        Err(_) => t.violation(format!("{at}: open panicked")),
        Ok(Ok(db)) => drop(db),
        Ok(Err(e)) => {
            t.failed_calls += 1;
            if !matches!(e, Error::Io { .. }) {
                t.violation(format!("{at}: open failed with {e}"));
            }
        }
    }
    fs.clear_faults();
}

#[test]
fn errors_during_recovery_fail_the_open_and_a_later_open_recovers_the_data() {
    count_panics();
    let w = Workload::new(12);
    let fs = SimFs::new();
    let db = open(&fs).unwrap();
    let outcomes = run_workload(&db, &w.ops, || fs.op_count());
    assert!(outcomes.iter().all(Outcome::ok));
    // Disks that give recovery work: unflushed logs to replay, a large-log tail to cut,
    // files to sweep.
    let images = [
        ("process crash", fs.crash_image(CrashKind::ProcessCrash)),
        (
            "power loss",
            fs.crash_image(CrashKind::KeepPrefix { seed: 3 }),
        ),
    ];
    drop(db);
    let lo_synced = lower_bound(&w.ops, |_| true, true);
    let mut t = Tally::default();
    for (name, image) in &images {
        // A clean open: what recovery must find, and how many operations it takes.
        let copy = image.crash_image(CrashKind::ProcessCrash);
        let db = open(&copy).unwrap();
        let n_open = copy.op_count();
        let expected = read_state(&db, &w.universe).unwrap();
        let p = find_prefix(&w.states, &expected, lo_synced, w.ops.len()).unwrap();
        drop(db);
        for k in 0..n_open {
            for mode in [FailMode::Once, FailMode::FromThenOn] {
                let at = format!("{name}: open failing at op {k} ({mode:?})");
                let disk = image.crash_image(CrashKind::ProcessCrash);
                t.points += 1;
                faulty_open(&disk, k, mode, &mut t, &at);
                // Again, failing elsewhere.
                faulty_open(&disk, (k * 7 + 3) % n_open, mode, &mut t, &at);
                t.injected += disk.faults_injected();
                // A power loss after the failed opens still finds a prefix...
                let lost = disk.crash_image(CrashKind::DropUnsynced);
                match open(&lost).map(|db| read_state(&db, &w.universe)) {
                    Ok(Ok(got)) => {
                        if let Err(e) = find_prefix(&w.states, &got, lo_synced, p) {
                            t.violation(format!("{at}, then power loss: {e}"));
                        }
                    }
                    Ok(Err(e)) => t.violation(format!("{at}, then power loss: {e}")),
                    Err(e) => t.violation(format!("{at}, then power loss: open: {e}")),
                }
                // ... and an open without faults recovers exactly what a clean one did.
                match open(&disk) {
                    Ok(db) => {
                        match read_state(&db, &w.universe) {
                            Ok(got) if got == expected => {}
                            Ok(_) => t.violation(format!("{at}: data differs afterwards")),
                            Err(e) => t.violation(format!("{at}: reads afterwards: {e}")),
                        }
                        match db.check() {
                            Ok(r) if r.is_ok() => {}
                            other => t.violation(format!("{at}: check afterwards: {other:?}")),
                        }
                    }
                    Err(e) => t.violation(format!("{at}: clean open afterwards failed: {e}")),
                }
            }
        }
        println!("{name}: a clean open takes {n_open} I/O operations");
    }
    println!(
        "recovery: failure points: {}, faults injected: {}, failed opens: {}, violations: {}, \
         panics: {}",
        t.points,
        t.injected,
        t.failed_calls,
        t.violations,
        panics()
    );
    assert!(t.failed_calls > 0);
    assert_eq!(t.violations, 0);
    assert_eq!(panics(), 0);
}
