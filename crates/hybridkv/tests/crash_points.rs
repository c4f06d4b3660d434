//! Crash-point enumeration: a seeded workload runs once on a recording `SimFs`. Every
//! mutation of the file system is a crash point: for each, the disk is rebuilt as it was
//! right after that mutation, every kind of crash image is taken, the database is
//! reopened, and the prefix property is checked against the model: the recovered state is
//! the model after some prefix of the operations, and that prefix holds every write
//! acknowledged with `sync` (and every write acknowledged before an acknowledged `flush`),
//! or, after a process crash, every acknowledged write. Then one synced write and a second
//! power loss: the same state must come back, with that write (recovery must make what it
//! recovered durable before accepting writes).
//!
//! Two workloads are enumerated:
//!
//! - the mixed one (`common::workload`, a few hundred operations: puts of small, medium
//!   and large pairs, deletes, batches (some empty), some synced; reads; flush, compact and
//!   gc calls, so flushes, compactions, transient-log merges and GC passes all happen);
//! - the GC one (`common::gc_workload`): rounds of large values in 64 KiB segments, a
//!   fifth of them overwritten and flushed (so their segments reach the GC threshold),
//!   most of the rest overwritten or deleted without sync, then a GC pass. Its victims'
//!   records are dead only through writes a power loss can still take: a crash point
//!   inside the pass finds out whether GC freed a segment before those writes were
//!   durable (their loss would bring back versions pointing into the freed segment).
//!
//! Two seeds of the mixed workload and one of the GC workload run by default;
//! `CRASH_SEED=n` runs seed n of both instead. Every crash point is tried when a run has
//! fewer than 1500 mutations, otherwise a seeded sample of 1500 (`CRASH_POINTS=all` tries
//! them all): `CRASH_POINTS=all CRASH_SEED=n cargo test -p hybridkv --test crash_points
//! -- --nocapture` is the long version, for any n.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    count_panics, find_prefix, gc_workload, lower_bound, panics, read_state, run_workload,
    small_opts, states, universe, upper_bound, workload, Model, Op, Outcome, Rng, DIR,
};
use hybridkv::io::{CrashKind, SimFs};
use hybridkv::{Db, Stats, WriteOptions};
use std::collections::BTreeSet;
use std::sync::Arc;

const OPS: usize = 400;
/// Rounds of the GC workload.
const GC_ROUNDS: usize = 3;
/// Crash points tried by default (all of them with `CRASH_POINTS=all`).
const SAMPLE: usize = 1500;
const MARKER: &[u8] = b"zz-marker-after-recovery";

struct Case<'a> {
    ops: &'a [Op],
    outcomes: &'a [Outcome],
    states: &'a [Model],
    universe: &'a BTreeSet<Vec<u8>>,
}

impl Case<'_> {
    /// Reopens `img` (a crash of `kind` after `k` mutations) and checks the prefix
    /// property, then a synced write and a power loss on top. Returns the prefix found.
    fn check(&self, img: &SimFs, kind: CrashKind, k: u64) -> Result<usize, String> {
        let acked = |i: usize| self.outcomes[i].ok() && self.outcomes[i].end <= k;
        let lo = lower_bound(self.ops, acked, kind.is_power_loss());
        let hi = upper_bound(self.outcomes, k);
        let db = Db::open_with_fs(DIR, small_opts(), Arc::new(img.clone()))
            .map_err(|e| format!("open failed: {e}"))?;
        let got = read_state(&db, self.universe)?;
        let p = find_prefix(self.states, &got, lo, hi)?;
        let report = db.check().map_err(|e| format!("check failed: {e}"))?;
        if !report.is_ok() {
            return Err(format!("check after recovery: {:?}", report.errors));
        }

        db.put_opt(MARKER, b"m", &WriteOptions { sync: true })
            .map_err(|e| format!("write after recovery failed: {e}"))?;
        let again = img.crash_image(CrashKind::DropUnsynced);
        drop(db);
        let db = Db::open_with_fs(DIR, small_opts(), Arc::new(again))
            .map_err(|e| format!("second open failed: {e}"))?;
        let mut universe = self.universe.clone();
        universe.insert(MARKER.to_vec());
        let got = read_state(&db, &universe).map_err(|e| format!("after a second crash: {e}"))?;
        let report = db.check().map_err(|e| format!("check failed: {e}"))?;
        if !report.is_ok() {
            return Err(format!("check after a second crash: {:?}", report.errors));
        }
        let mut want = self.states[p].clone();
        want.insert(MARKER.to_vec(), b"m".to_vec());
        if got != want {
            let lost: Vec<String> = want
                .keys()
                .filter(|k| got.get(*k) != want.get(*k))
                .take(4)
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            return Err(format!(
                "recovered prefix {p}, then a synced write and a power loss: state changed \
                 (marker kept: {}, e.g. keys {lost:?})",
                got.contains_key(MARKER)
            ));
        }
        Ok(p)
    }
}

/// What the mixed workload must have done: flushes, compactions, transient-log merges, GC.
fn mixed_expectations(s: &Stats) {
    assert!(s.flushes >= 5, "the workload must flush");
    assert!(s.compactions >= 2, "the workload must compact");
    assert!(s.transient_segments_created > 0 && s.medium_values_merged > 0);
    assert!(s.gc_segments_freed > 0, "the workload must collect garbage");
}

/// What the GC workload must have done: GC passes that freed segments.
fn gc_expectations(s: &Stats) {
    assert!(s.flushes >= 2 * GC_ROUNDS as u64, "the workload must flush");
    assert!(
        s.gc_passes >= GC_ROUNDS as u64,
        "the workload must run GC passes"
    );
    assert!(
        s.gc_segments_freed >= GC_ROUNDS as u64,
        "GC must free segments whose records died by unsynced writes"
    );
}

/// Runs the enumeration for one workload (`label`, made from `seed`); returns (crash
/// points, images, violations).
fn crash_points(label: &str, seed: u64, ops: &[Op], expect: fn(&Stats)) -> (usize, u64, u64) {
    let states = states(ops);
    let universe = universe(ops);

    // The recorded run.
    let fs = SimFs::recording();
    let db = Db::open_with_fs(DIR, small_opts(), Arc::new(fs.clone())).unwrap();
    let outcomes = run_workload(&db, ops, || fs.mutation_count());
    for (i, o) in outcomes.iter().enumerate() {
        assert!(o.ok(), "op {i} {:?} failed: {:?}", ops[i], o.result);
    }
    let s = db.stats().unwrap();
    drop(db);
    let synced = ops.iter().filter(|o| o.is_sync_write()).count();
    println!(
        "{label} workload, seed {seed}: {} ops ({synced} synced writes), {} flushes, {} compactions, \
         {} transient segments created / {} freed ({} medium values merged), \
         {} GC passes freed {} segments ({} records relocated)",
        ops.len(),
        s.flushes,
        s.compactions,
        s.transient_segments_created,
        s.transient_segments_freed,
        s.medium_values_merged,
        s.gc_passes,
        s.gc_segments_freed,
        s.gc_entries_relocated
    );
    expect(&s);

    let history = fs.history().unwrap();
    let n = history.len();
    let all = std::env::var("CRASH_POINTS").is_ok_and(|v| v == "all");
    let points: Vec<usize> = if all || n < SAMPLE {
        (0..=n).collect()
    } else {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut set: BTreeSet<usize> = [0, n].into();
        while set.len() < SAMPLE {
            set.insert(rng.below(n as u64 + 1) as usize);
        }
        set.into_iter().collect()
    };

    let case = Case {
        ops,
        outcomes: &outcomes,
        states: &states,
        universe: &universe,
    };
    let mut replay = history.replay();
    let (mut images, mut violations) = (0u64, 0u64);
    let mut prefixes = BTreeSet::new();
    for &k in &points {
        replay.advance_to(k);
        let kinds = [
            CrashKind::DropUnsynced,
            CrashKind::KeepPrefix { seed: k as u64 },
            CrashKind::TornSector { seed: k as u64 },
            CrashKind::ProcessCrash,
        ];
        for kind in kinds {
            let img = replay.crash_image(kind);
            images += 1;
            match case.check(&img, kind, k as u64) {
                Ok(p) => {
                    prefixes.insert(p);
                }
                Err(why) => {
                    violations += 1;
                    if violations <= 20 {
                        println!("VIOLATION at crash point {k} ({kind:?}): {why}");
                    }
                }
            }
        }
    }
    println!(
        "{label} seed {seed}: crash points: {} (after 0..={n} mutations), images: {images}, \
         violations: {violations}, distinct prefixes recovered: {}",
        points.len(),
        prefixes.len(),
    );
    (points.len(), images, violations)
}

#[test]
fn every_crash_point_recovers_a_prefix_holding_every_synced_write() {
    count_panics();
    let (mixed_seeds, gc_seeds): (Vec<u64>, Vec<u64>) = match std::env::var("CRASH_SEED") {
        Ok(s) => {
            let seed = s.parse().expect("CRASH_SEED is a number");
            (vec![seed], vec![seed])
        }
        Err(_) => (vec![7, 8], vec![9]),
    };
    let (mut points, mut images, mut violations) = (0, 0, 0);
    let mut add = |(p, i, v): (usize, u64, u64)| {
        points += p;
        images += i;
        violations += v;
    };
    for seed in mixed_seeds {
        let ops = workload(seed, OPS);
        add(crash_points("mixed", seed, &ops, mixed_expectations));
    }
    for seed in gc_seeds {
        let ops = gc_workload(seed, GC_ROUNDS);
        add(crash_points("GC", seed, &ops, gc_expectations));
    }
    println!(
        "crash points: {points}, images: {images}, violations: {violations}, panics: {}",
        panics()
    );
    assert_eq!(violations, 0);
    assert_eq!(panics(), 0);
}
