//! Power-loss model check.
//!
//! Many seeded random workloads, each recorded once on a `SimFs::recording()` file system
//! with small memtables and 64 KiB large-log segments. A workload is a shuffled sequence of
//! phases:
//!
//! - *mixed*: puts of small (pair < 120 B), medium (< 1024 B) and large values (some over
//!   64 KiB), overwrites, deletes, batches (some of them empty), about one write in ten
//!   synced, reads, and `flush` / `compact` / `gc` calls;
//! - *GC trap* (the pattern that used to lose acknowledged data): large values written and
//!   flushed, a fraction of them overwritten and flushed, the rest overwritten or deleted
//!   *without* sync, then `gc()`, so that a pass meets segments whose records are dead
//!   only because of writes that are not durable yet;
//! - *medium merge*: rounds of medium values with a flush after each, deep enough that
//!   flushes log medium values to transient segments and compactions merge them in place.
//!
//! For each recorded run, several crash points are drawn (uniformly over the mutations,
//! inside GC, flush and compaction calls, and in the window after a GC trap), and for each
//! a crash image of one of the four kinds (`DropUnsynced`, `KeepPrefix`, `TornSector`,
//! `ProcessCrash`; each kind gets a quarter of the images). The image is reopened and
//! checked:
//!
//! - every key the workload touched is read by `get`, and the whole database by a scan,
//!   without an error (an image where a read fails counts as a *read error*);
//! - the recovered state equals the model after some prefix of the operations that holds
//!   every acknowledged synced write and every write acknowledged before an acknowledged
//!   flush (after a process crash: every acknowledged write), and no operation that had
//!   not started (otherwise a *violation*);
//! - `Db::check` reports no damage (otherwise a violation);
//! - a synced write and a second power loss bring back the same state plus that write
//!   (otherwise a violation).
//!
//! It prints `power-loss images: N, violations: V, read errors: R`, the engine counters
//! summed over the workloads (transient segments created, medium values merged, GC
//! segments freed, ...), and fails unless `V` and `R` are zero and the workloads did
//! create transient segments, merge medium values and free segments by GC.
//!
//! The default runs a few hundred images (CI). The long version, tens of thousands:
//!
//! ```text
//! POWER_LOSS_IMAGES=20000 POWER_LOSS_SEED=1000 cargo test -p hybridkv --test power_loss -- --nocapture
//! ```
//!
//! Workload `w` of a run uses the seed `POWER_LOSS_SEED + w` (default base seed: 1), and
//! every workload takes 16 images, so a failing workload seed `s` is rerun alone with
//! `POWER_LOSS_SEED=s POWER_LOSS_IMAGES=16`. (Background flushes and compactions run on
//! their own threads, so the recorded mutation sequence may differ slightly from run to
//! run; the checks do not depend on it.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    apply, count_panics, find_prefix, key, lower_bound, panics, run_op, small_opts, states,
    universe, upper_bound, Model, Op, Outcome, Rng, DIR,
};
use hybridkv::io::{CrashKind, SimFs};
use hybridkv::{Db, MediumMergeLevel, Options, Stats, WriteOptions};
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

/// Images taken by default (a few hundred: CI).
const DEFAULT_IMAGES: u64 = 480;
/// Crash images taken from each recorded run.
const IMAGES_PER_WORKLOAD: u64 = 16;
/// Base seed when `POWER_LOSS_SEED` is not set.
const DEFAULT_SEED: u64 = 1;
/// Violations and read errors described in full (the rest are only counted).
const REPORTED: u64 = 20;
/// Written with sync after recovery, before a second power loss.
const MARKER: &[u8] = b"zz-power-loss-marker";

/// Key indices (for `common::key`) of the phases; each GC trap and each medium phase
/// gets its own block of `BLOCK` keys above its base.
const TRAP_BASE: u64 = 100_000;
const MEDIUM_BASE: u64 = 200_000;
const BLOCK: u64 = 1_000;

/// Keys are 24 bytes: a small pair has a value of at most 95 bytes, a medium pair at most
/// 999, a large pair at least 1000.
#[derive(Debug, Clone, Copy)]
enum Class {
    Small,
    Medium,
    Large,
}

/// A value of `class` written by step `step`: distinct for every step, with a readable
/// head.
fn make_value(rng: &mut Rng, class: Class, step: usize) -> Vec<u8> {
    let len = match class {
        Class::Small => 1 + rng.below(90) as usize,
        Class::Medium => 100 + rng.below(890) as usize,
        Class::Large if rng.chance(10) => 65_600 + rng.below(35_000) as usize,
        Class::Large => 1_000 + rng.below(5_000) as usize,
    };
    let mut v = format!("s{step}|").into_bytes();
    let salt = rng.next();
    let mut i = v.len();
    while v.len() < len {
        v.push((salt >> (i % 8 * 8)) as u8 ^ (i as u8));
        i += 1;
    }
    v.truncate(len);
    v
}

/// One seeded workload and the options it runs with.
struct Workload {
    opts: Options,
    ops: Vec<Op>,
    /// Indices of the `Gc` operations that end a GC trap.
    trap_gcs: Vec<usize>,
}

/// Builds a workload step by step.
struct Gen {
    rng: Rng,
    ops: Vec<Op>,
    /// Keys of earlier trap and medium phases, which mixed phases also write.
    others: Vec<u64>,
    trap_gcs: Vec<usize>,
    traps: u64,
    mediums: u64,
    /// Medium phases write more live data than two levels hold (with
    /// `MediumMergeLevel::SecondToLast`, flushes log medium values only once a third
    /// level exists).
    deep_medium: bool,
}

impl Gen {
    fn pick_class(&mut self) -> Class {
        match self.rng.below(100) {
            0..=34 => Class::Small,
            35..=69 => Class::Medium,
            _ => Class::Large,
        }
    }

    fn pick_key(&mut self, keys: u64) -> Vec<u8> {
        if !self.others.is_empty() && self.rng.chance(15) {
            let i = self.rng.below(self.others.len() as u64) as usize;
            key(self.others[i])
        } else {
            key(self.rng.below(keys))
        }
    }

    fn value(&mut self, class: Class) -> Vec<u8> {
        let step = self.ops.len();
        make_value(&mut self.rng, class, step)
    }

    /// `n` random steps over `keys` keys (and some of the other phases' keys).
    /// Merges of every key, round after round with flushes and compactions between:
    /// with delta separation on, enough bucket records for collections and splits.
    fn deltas(&mut self, rounds: usize, keys: u64) {
        for round in 0..rounds {
            for k in 0..keys {
                let key = key(k);
                let step = self.ops.len();
                let operand = common::operand(&mut self.rng, step);
                let sync = self.rng.chance(5);
                self.ops.push(Op::Merge { key, operand, sync });
            }
            self.ops.push(if round % 3 == 2 {
                Op::Compact
            } else {
                Op::Flush
            });
        }
    }

    fn mixed(&mut self, n: usize, keys: u64) {
        for _ in 0..n {
            let sync = self.rng.chance(10);
            let op = match self.rng.below(100) {
                0..=39 => {
                    let key = self.pick_key(keys);
                    let class = self.pick_class();
                    let value = self.value(class);
                    Op::Put { key, value, sync }
                }
                40..=47 => {
                    let key = self.pick_key(keys);
                    let step = self.ops.len();
                    let operand = common::operand(&mut self.rng, step);
                    Op::Merge { key, operand, sync }
                }
                48..=59 => Op::Delete {
                    key: self.pick_key(keys),
                    sync,
                },
                60..=73 => {
                    // Now and then an empty batch: synced, it still makes every write
                    // before it durable.
                    let m = if self.rng.chance(12) {
                        0
                    } else {
                        2 + self.rng.below(7)
                    };
                    let mut ops = Vec::new();
                    for _ in 0..m {
                        let k = self.pick_key(keys);
                        let v = if self.rng.chance(20) {
                            None
                        } else {
                            let class = self.pick_class();
                            Some(self.value(class))
                        };
                        ops.push((k, v));
                    }
                    Op::Batch { ops, sync }
                }
                74..=83 => Op::Get {
                    key: self.pick_key(keys),
                },
                84 => common::range_delete(&mut self.rng, keys, sync),
                85..=89 => Op::Flush,
                90..=94 => Op::Compact,
                _ => Op::Gc,
            };
            self.ops.push(op);
        }
    }

    /// Large values in 64 KiB segments; a fraction overwritten and flushed (and compacted,
    /// so the garbage is accounted); the rest overwritten or deleted without sync; `gc`.
    fn gc_trap(&mut self) {
        let base = TRAP_BASE + self.traps * BLOCK;
        self.traps += 1;
        let n = 40 + self.rng.below(80);
        let len = 1_500 + self.rng.below(2_500) as usize;
        for j in 0..n {
            let step = self.ops.len();
            let mut value = make_value(&mut self.rng, Class::Large, step);
            value.truncate(len);
            self.ops.push(Op::Put {
                key: key(base + j),
                value,
                sync: false,
            });
        }
        self.ops.push(Op::Flush);
        let mut order: Vec<u64> = (0..n).collect();
        shuffle(&mut self.rng, &mut order);
        let first = (n * (10 + self.rng.below(16)) / 100).max(1) as usize;
        for (i, &j) in order.iter().enumerate() {
            if i == first {
                self.ops.push(Op::Flush);
                self.ops.push(Op::Compact);
            }
            let unsynced_delete = i >= first && self.rng.chance(15);
            // A delta keeps its large base live: GC must move the base (folded), not drop it.
            let delta = !unsynced_delete && self.rng.chance(15);
            let op = if unsynced_delete {
                Op::Delete {
                    key: key(base + j),
                    sync: false,
                }
            } else if delta {
                let step = self.ops.len();
                Op::Merge {
                    key: key(base + j),
                    operand: common::operand(&mut self.rng, step),
                    sync: false,
                }
            } else {
                Op::Put {
                    key: key(base + j),
                    value: self.value(Class::Large),
                    sync: false,
                }
            };
            self.ops.push(op);
        }
        self.trap_gcs.push(self.ops.len());
        self.ops.push(Op::Gc);
        for _ in 0..2 + self.rng.below(4) {
            let j = self.rng.below(n);
            self.ops.push(Op::Get { key: key(base + j) });
        }
        self.others.extend((0..n).map(|j| base + j));
    }

    /// Rounds of medium values (batches, a few deletes, some synced) with a flush after
    /// each round, then a wait for the compactions.
    fn medium_merge(&mut self) {
        let base = MEDIUM_BASE + self.mediums * BLOCK;
        self.mediums += 1;
        let m = if self.deep_medium {
            500 + self.rng.below(300)
        } else {
            80 + self.rng.below(120)
        };
        let rounds = 3 + self.rng.below(3);
        for _ in 0..rounds {
            let mut j = 0;
            while j < m {
                let size = (4 + self.rng.below(9)).min(m - j);
                let mut ops = Vec::new();
                for i in j..j + size {
                    let v = if self.rng.chance(10) {
                        None
                    } else {
                        Some(self.value(Class::Medium))
                    };
                    ops.push((key(base + i), v));
                }
                let sync = self.rng.chance(8);
                self.ops.push(Op::Batch { ops, sync });
                j += size;
            }
            self.ops.push(Op::Flush);
        }
        self.ops.push(Op::Compact);
        self.others.extend((0..m).map(|j| base + j));
    }
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Mixed,
    Trap,
    Medium,
    /// Rounds of merges of every key (with delta separation on).
    Deltas,
}

fn workload(seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let mut opts = small_opts();
    opts.max_levels = [3, 4, 7][rng.below(3) as usize];
    if rng.chance(30) {
        opts.medium_merge_level = MediumMergeLevel::SecondToLast;
    }
    if rng.chance(50) {
        // KDSep's delta separation, its buckets collected at the smallest size (4 KiB).
        opts.delta_separation = true;
        opts.delta_bucket_size = 4 << 10;
    }
    let keys = 24 + rng.below(100);
    let mut plan = vec![Phase::Trap, Phase::Medium, Phase::Mixed, Phase::Mixed];
    if rng.chance(50) {
        plan.push(Phase::Mixed);
    }
    if rng.chance(30) {
        plan.push(Phase::Trap);
    }
    if opts.delta_separation {
        plan.push(Phase::Deltas);
    }
    shuffle(&mut rng, &mut plan);
    let mut g = Gen {
        rng,
        ops: Vec::new(),
        others: Vec::new(),
        trap_gcs: Vec::new(),
        traps: 0,
        mediums: 0,
        deep_medium: opts.medium_merge_level == MediumMergeLevel::SecondToLast,
    };
    for phase in plan {
        match phase {
            Phase::Mixed => {
                let n = 40 + g.rng.below(80) as usize;
                g.mixed(n, keys);
            }
            Phase::Trap => g.gc_trap(),
            Phase::Medium => g.medium_merge(),
            Phase::Deltas => g.deltas(6, keys),
        }
    }
    Workload {
        opts,
        ops: g.ops,
        trap_gcs: g.trap_gcs,
    }
}

/// A short description of an operation (values by length only).
fn describe(op: &Op) -> String {
    let k = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    match op {
        Op::Put { key, value, sync } => {
            format!("put {} ({} B, sync {sync})", k(key), value.len())
        }
        Op::Delete { key, sync } => format!("delete {} (sync {sync})", k(key)),
        Op::Merge { key, operand, sync } => {
            format!("merge {} ({} B, sync {sync})", k(key), operand.len())
        }
        Op::Batch { ops, sync } => format!("batch of {} (sync {sync})", ops.len()),
        Op::Get { key } => format!("get {}", k(key)),
        other => format!("{other:?}"),
    }
}

/// What the recorded run left.
struct Recorded {
    fs: SimFs,
    outcomes: Vec<Outcome>,
    stats: Stats,
    /// Segments freed by the GC passes that end a trap.
    trap_freed: u64,
}

/// Runs the workload on a recording `SimFs`; every operation must succeed (a `Get` also
/// checks the value against the acknowledged writes).
fn record(w: &Workload) -> Result<Recorded, String> {
    let fs = SimFs::recording();
    let db = Db::open_with_fs(DIR, w.opts.clone(), Arc::new(fs.clone()))
        .map_err(|e| format!("open of an empty directory failed: {e}"))?;
    let mut acked = Model::new();
    let mut outcomes = Vec::with_capacity(w.ops.len());
    let mut trap_freed = 0;
    for (i, op) in w.ops.iter().enumerate() {
        let start = fs.mutation_count();
        let result = if w.trap_gcs.contains(&i) {
            db.gc().map(|r| trap_freed += r.segments_freed)
        } else {
            run_op(&db, op, &acked)
        };
        let end = fs.mutation_count();
        if let Err(e) = &result {
            return Err(format!("op {i} ({}) failed: {e}", describe(op)));
        }
        apply(&mut acked, op);
        outcomes.push(Outcome { start, end, result });
    }
    let stats = db.stats().map_err(|e| format!("stats failed: {e}"))?;
    drop(db);
    Ok(Recorded {
        fs,
        outcomes,
        stats,
        trap_freed,
    })
}

fn entry_print(k: &[u8], v: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    k.hash(&mut h);
    v.hash(&mut h);
    h.finish()
}

/// `prints[p]` identifies the model after the first `p` operations (a sum of per-pair
/// hashes, kept up to date as the operations apply), so that the states need not all be
/// kept in memory.
fn fingerprints(ops: &[Op]) -> Vec<u64> {
    let mut m = Model::new();
    let mut sum = 0u64;
    let mut out = Vec::with_capacity(ops.len() + 1);
    out.push(sum);
    for op in ops {
        let mut touched = Vec::new();
        match op {
            Op::Put { key, .. } | Op::Delete { key, .. } | Op::Merge { key, .. } => {
                touched.push(key.clone())
            }
            Op::Batch { ops, .. } => touched.extend(ops.iter().map(|(k, _)| k.clone())),
            Op::DeleteRange { start, end, .. } => {
                touched.extend(m.range(start.clone()..end.clone()).map(|(k, _)| k.clone()))
            }
            _ => {}
        }
        touched.sort();
        touched.dedup();
        for k in &touched {
            if let Some(v) = m.get(k) {
                sum = sum.wrapping_sub(entry_print(k, v));
            }
        }
        apply(&mut m, op);
        for k in &touched {
            if let Some(v) = m.get(k) {
                sum = sum.wrapping_add(entry_print(k, v));
            }
        }
        out.push(sum);
    }
    out
}

fn print_of(m: &Model) -> u64 {
    m.iter()
        .fold(0u64, |s, (k, v)| s.wrapping_add(entry_print(k, v)))
}

/// The model after the first `p` operations.
fn state_at(ops: &[Op], p: usize) -> Model {
    let mut m = Model::new();
    for op in &ops[..p] {
        apply(&mut m, op);
    }
    m
}

/// Why the recovered database could not be read.
enum ReadFail {
    /// A `get` or the scan returned an error.
    Error(String),
    /// They returned different things.
    Disagree(String),
}

/// The whole database by a scan; every key of `keys` by `get`, which must agree.
fn read_all(db: &Db, keys: &BTreeSet<Vec<u8>>) -> Result<Model, ReadFail> {
    let mut scanned = Model::new();
    let mut scan_error = None;
    for pair in db.iter() {
        match pair {
            Ok((k, v)) => {
                scanned.insert(k, v);
            }
            Err(e) => {
                scan_error = Some(e.to_string());
                break;
            }
        }
    }
    let mut failed = Vec::new();
    let mut disagree = Vec::new();
    for k in keys {
        match db.get(k) {
            Ok(v) if v.as_ref() == scanned.get(k) => {}
            Ok(v) => disagree.push(format!(
                "{}: get {:?}, scan {:?}",
                String::from_utf8_lossy(k),
                v.map(|v| v.len()),
                scanned.get(k).map(Vec::len)
            )),
            Err(e) => failed.push(format!("{}: {e}", String::from_utf8_lossy(k))),
        }
    }
    if !failed.is_empty() || scan_error.is_some() {
        return Err(ReadFail::Error(format!(
            "{} of {} keys unreadable{}{}",
            failed.len(),
            keys.len(),
            failed
                .first()
                .map(|f| format!(", first {f}"))
                .unwrap_or_default(),
            scan_error
                .map(|e| format!("; scan failed: {e}"))
                .unwrap_or_default()
        )));
    }
    if !disagree.is_empty() {
        return Err(ReadFail::Disagree(format!(
            "get and scan disagree on {} keys, e.g. {:?}",
            disagree.len(),
            &disagree[..disagree.len().min(3)]
        )));
    }
    Ok(scanned)
}

/// The verdict on one crash image.
enum Verdict {
    /// Recovered the state after this many operations.
    Prefix(usize),
    ReadError(String),
    Violation(String),
}

/// One recorded run and what the checks need of it.
struct Case<'a> {
    w: &'a Workload,
    outcomes: &'a [Outcome],
    prints: &'a [u64],
    keys: &'a BTreeSet<Vec<u8>>,
}

impl Case<'_> {
    /// The allowed prefixes `lo..=hi` for a crash of `kind` after `k` mutations.
    fn bounds(&self, kind: CrashKind, k: u64) -> (usize, usize) {
        let acked = |i: usize| self.outcomes[i].ok() && self.outcomes[i].end <= k;
        let lo = lower_bound(&self.w.ops, acked, kind.is_power_loss());
        let hi = upper_bound(self.outcomes, k);
        (lo, hi)
    }

    /// The prefix in `lo..=hi` whose state `got` is, or why there is none.
    fn find(&self, got: &Model, lo: usize, hi: usize, detail: bool) -> Result<usize, String> {
        let print = print_of(got);
        let hit = (lo..=hi)
            .rev()
            .filter(|&p| self.prints[p] == print)
            .find(|&p| state_at(&self.w.ops, p) == *got);
        if let Some(p) = hit {
            return Ok(p);
        }
        if detail {
            // The shared helper says what differs (it needs every state: only on failure).
            let all = states(&self.w.ops);
            find_prefix(&all, got, lo, hi)
        } else {
            Err(format!(
                "recovered state is no allowed prefix ({lo}..={hi})"
            ))
        }
    }

    fn check(&self, img: &SimFs, kind: CrashKind, k: u64, detail: bool) -> Verdict {
        let (lo, hi) = self.bounds(kind, k);
        let db = match Db::open_with_fs(DIR, self.w.opts.clone(), Arc::new(img.clone())) {
            Ok(db) => db,
            Err(e) => return Verdict::Violation(format!("open failed: {e}")),
        };
        let got = match read_all(&db, self.keys) {
            Ok(m) => m,
            Err(ReadFail::Error(e)) => return Verdict::ReadError(e),
            Err(ReadFail::Disagree(e)) => return Verdict::Violation(e),
        };
        let p = match self.find(&got, lo, hi, detail) {
            Ok(p) => p,
            Err(e) => return Verdict::Violation(e),
        };
        match db.check() {
            Ok(r) if r.is_ok() => {}
            Ok(r) => {
                return Verdict::Violation(format!(
                    "check after recovery: {} problems, e.g. {:?}",
                    r.error_count,
                    &r.errors[..r.errors.len().min(3)]
                ))
            }
            Err(e) => return Verdict::Violation(format!("check failed: {e}")),
        }

        // What recovery brought back must itself be durable once a synced write follows.
        if let Err(e) = db.put_opt(MARKER, b"m", &WriteOptions { sync: true }) {
            return Verdict::Violation(format!("synced write after recovery failed: {e}"));
        }
        let again = img.crash_image(CrashKind::DropUnsynced);
        drop(db);
        let db = match Db::open_with_fs(DIR, self.w.opts.clone(), Arc::new(again)) {
            Ok(db) => db,
            Err(e) => return Verdict::Violation(format!("open after a second crash failed: {e}")),
        };
        let mut keys = self.keys.clone();
        keys.insert(MARKER.to_vec());
        let got = match read_all(&db, &keys) {
            Ok(m) => m,
            Err(ReadFail::Error(e)) => {
                return Verdict::ReadError(format!("after a second crash: {e}"))
            }
            Err(ReadFail::Disagree(e)) => {
                return Verdict::Violation(format!("after a second crash: {e}"))
            }
        };
        let mut want = state_at(&self.w.ops, p);
        want.insert(MARKER.to_vec(), b"m".to_vec());
        if got != want {
            let changed: Vec<String> = want
                .keys()
                .chain(got.keys())
                .filter(|k| got.get(*k) != want.get(*k))
                .take(4)
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            return Verdict::Violation(format!(
                "recovered prefix {p}; after a synced write and a second power loss the state \
                 changed (marker kept: {}, e.g. keys {changed:?})",
                got.contains_key(MARKER)
            ));
        }
        match db.check() {
            Ok(r) if r.is_ok() => Verdict::Prefix(p),
            Ok(r) => Verdict::Violation(format!(
                "check after a second crash: {} problems, e.g. {:?}",
                r.error_count,
                &r.errors[..r.errors.len().min(3)]
            )),
            Err(e) => Verdict::Violation(format!("check after a second crash failed: {e}")),
        }
    }
}

/// Where crashes are taken: a mutation count and a kind, in increasing count (the replay
/// only moves forward). Each kind gets a quarter of the images.
fn crash_plan(
    rng: &mut Rng,
    w: &Workload,
    outcomes: &[Outcome],
    mutations: u64,
) -> Vec<(u64, CrashKind)> {
    let control: Vec<usize> = (0..w.ops.len())
        .filter(|&i| {
            matches!(w.ops[i], Op::Flush | Op::Compact | Op::Gc) || w.ops[i].is_sync_write()
        })
        .collect();
    let last_end = outcomes.last().map_or(0, |o| o.end);
    let mut plan = Vec::new();
    for j in 0..IMAGES_PER_WORKLOAD {
        let seed = rng.next();
        let kind = match j % 4 {
            0 => CrashKind::DropUnsynced,
            1 => CrashKind::KeepPrefix { seed },
            2 => CrashKind::TornSector { seed },
            _ => CrashKind::ProcessCrash,
        };
        let within = |rng: &mut Rng, a: u64, b: u64| a + rng.below(b.saturating_sub(a) + 1);
        let k = match rng.below(100) {
            // Anywhere.
            0..=34 => rng.below(mutations + 1),
            // After a trap's GC pass started, before the next durability point ends (the
            // window in which the overwrites it relied on could be lost).
            35..=64 if !w.trap_gcs.is_empty() => {
                let t = w.trap_gcs[rng.below(w.trap_gcs.len() as u64) as usize];
                let until = (t + 1..w.ops.len())
                    .find(|&i| w.ops[i].is_durability_point())
                    .map_or(last_end, |i| outcomes[i].end);
                within(rng, outcomes[t].start, until)
            }
            // Inside a flush, compaction, GC pass or synced write.
            35..=89 if !control.is_empty() => {
                let o = &outcomes[control[rng.below(control.len() as u64) as usize]];
                within(rng, o.start, o.end)
            }
            // After the last operation returned, before the close.
            _ => last_end,
        };
        plan.push((k, kind));
    }
    plan.sort_by_key(|&(k, _)| k);
    plan
}

/// Sums over every workload of a run.
#[derive(Default)]
struct Totals {
    workloads: u64,
    ops: u64,
    synced: u64,
    mutations: u64,
    images: u64,
    by_kind: [u64; 4],
    violations: u64,
    read_errors: u64,
    prefixes_short: u64,
    flushes: u64,
    compactions: u64,
    transient_created: u64,
    transient_freed: u64,
    medium_merged: u64,
    gc_passes: u64,
    gc_freed: u64,
    gc_relocated: u64,
    merges: u64,
    deltas_folded: u64,
    trap_freed: u64,
    /// Records flushes wrote into delta buckets, and bucket collections.
    bucket_records: u64,
    bucket_collections: u64,
}

impl Totals {
    fn fail(&mut self, read_error: bool, what: String) {
        let n = if read_error {
            self.read_errors += 1;
            self.read_errors
        } else {
            self.violations += 1;
            self.violations
        };
        if n <= REPORTED {
            let label = if read_error {
                "READ ERROR"
            } else {
                "VIOLATION"
            };
            println!("{label}: {what}");
        }
    }
}

fn kind_index(kind: CrashKind) -> usize {
    match kind {
        CrashKind::DropUnsynced => 0,
        CrashKind::KeepPrefix { .. } => 1,
        CrashKind::TornSector { .. } => 2,
        CrashKind::ProcessCrash => 3,
    }
}

/// Records workload `seed` and checks its crash images.
fn run_one(seed: u64, t: &mut Totals, verbose: bool) {
    let w = workload(seed);
    t.workloads += 1;
    t.ops += w.ops.len() as u64;
    let rec = match record(&w) {
        Ok(r) => r,
        Err(e) => {
            t.fail(false, format!("seed {seed}, live run: {e}"));
            return;
        }
    };
    let s = &rec.stats;
    t.synced += w.ops.iter().filter(|o| o.is_sync_write()).count() as u64;
    t.flushes += s.flushes;
    t.compactions += s.compactions;
    t.transient_created += s.transient_segments_created;
    t.transient_freed += s.transient_segments_freed;
    t.medium_merged += s.medium_values_merged;
    t.gc_passes += s.gc_passes;
    t.bucket_records += s.delta_bucket_records_written;
    t.bucket_collections += s.delta_bucket_gc_passes;
    t.gc_freed += s.gc_segments_freed;
    t.gc_relocated += s.gc_entries_relocated;
    t.merges += s.merges;
    t.deltas_folded += s.deltas_folded;
    t.trap_freed += rec.trap_freed;

    let history = rec.fs.history().expect("a recording file system");
    let mutations = history.len() as u64;
    t.mutations += mutations;
    let prints = fingerprints(&w.ops);
    let keys = universe(&w.ops);
    let case = Case {
        w: &w,
        outcomes: &rec.outcomes,
        prints: &prints,
        keys: &keys,
    };
    let mut rng = Rng::new(seed ^ 0x00c0_ffee_d00d);
    let plan = crash_plan(&mut rng, &w, &rec.outcomes, mutations);
    let mut replay = history.replay();
    let (v0, r0) = (t.violations, t.read_errors);
    for (k, kind) in plan {
        replay.advance_to(k as usize);
        let img = replay.crash_image(kind);
        t.images += 1;
        t.by_kind[kind_index(kind)] += 1;
        let detail = t.violations < REPORTED;
        let at = format!("seed {seed}, crash after {k} of {mutations} mutations ({kind:?})");
        match case.check(&img, kind, k, detail) {
            Verdict::Prefix(p) => {
                let (_, hi) = case.bounds(kind, k);
                if p < hi {
                    t.prefixes_short += 1;
                }
            }
            Verdict::ReadError(e) => t.fail(true, format!("{at}: {e}")),
            Verdict::Violation(e) => t.fail(false, format!("{at}: {e}")),
        }
    }
    if verbose || t.violations > v0 || t.read_errors > r0 {
        println!(
            "seed {seed}: {} ops, {} mutations, max_levels {}, merge at {:?}, delta \
             separation {} ({} bucket records); {} flushes, \
             {} compactions, {} transient segments created, {} medium values merged, \
             {} GC segments freed ({} by trap passes); violations {}, read errors {}",
            w.ops.len(),
            mutations,
            w.opts.max_levels,
            w.opts.medium_merge_level,
            w.opts.delta_separation,
            s.delta_bucket_records_written,
            s.flushes,
            s.compactions,
            s.transient_segments_created,
            s.medium_values_merged,
            s.gc_segments_freed,
            rec.trap_freed,
            t.violations - v0,
            t.read_errors - r0,
        );
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is a number")))
}

#[test]
fn power_loss_recovers_a_prefix_holding_every_synced_write() {
    count_panics();
    let started = Instant::now();
    let images = env_number("POWER_LOSS_IMAGES").unwrap_or(DEFAULT_IMAGES);
    let base = env_number("POWER_LOSS_SEED").unwrap_or(DEFAULT_SEED);
    let workloads = images.div_ceil(IMAGES_PER_WORKLOAD).max(1);
    let mut t = Totals::default();
    for w in 0..workloads {
        let verbose = workloads <= 40 || w % 100 == 0;
        run_one(base + w, &mut t, verbose);
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "workloads: {} (seeds {base}..={}), operations: {} ({} synced writes), \
         mutations recorded: {}",
        t.workloads,
        base + workloads - 1,
        t.ops,
        t.synced,
        t.mutations
    );
    println!(
        "images by kind: drop-unsynced {}, keep-prefix {}, torn-sector {}, process-crash {}; \
         recovered short of every started operation: {}",
        t.by_kind[0], t.by_kind[1], t.by_kind[2], t.by_kind[3], t.prefixes_short
    );
    println!(
        "engine counters (sum): flushes {}, compactions {}, transient segments created {} / \
         freed {}, medium values merged {}, GC passes {}, GC segments freed {} ({} by passes \
         after unsynced overwrites), GC records relocated {}, merges {} (deltas folded by \
         merges and GC: {})",
        t.flushes,
        t.compactions,
        t.transient_created,
        t.transient_freed,
        t.medium_merged,
        t.gc_passes,
        t.gc_freed,
        t.trap_freed,
        t.gc_relocated,
        t.merges,
        t.deltas_folded
    );
    println!(
        "delta buckets: {} records written by flushes, {} collections",
        t.bucket_records, t.bucket_collections
    );
    println!("panics: {}, time: {secs:.1} s", panics());
    println!(
        "power-loss images: {}, violations: {}, read errors: {}",
        t.images, t.violations, t.read_errors
    );
    assert!(t.transient_created > 0, "no transient segment was created");
    assert!(t.medium_merged > 0, "no medium value was merged in place");
    assert!(t.gc_freed > 0, "no GC pass freed a segment");
    assert!(
        t.merges > 0 && t.deltas_folded > 0,
        "no delta was written and folded"
    );
    assert!(t.bucket_records > 0, "no delta went to a bucket");
    assert!(t.bucket_collections > 0, "no delta bucket was collected");
    assert!(
        t.trap_freed > 0,
        "no GC pass freed a segment whose records died by unsynced writes"
    );
    assert_eq!(t.violations, 0, "violations");
    assert_eq!(t.read_errors, 0, "read errors");
    assert_eq!(panics(), 0, "panics");
}
