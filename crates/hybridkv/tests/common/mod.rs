//! Shared by the crash and fault tests: a seeded single-threaded workload, the model it
//! must leave, and the prefix check.
//!
//! The prefix property: after a crash the database holds exactly the state the model
//! reaches after some prefix of the workload's operations. Control operations (`flush`,
//! `compact`, `gc`) change nothing in the model, so the states form one sequence
//! `states[0..=ops.len()]`; a recovered database must equal `states[p]` for a `p` between
//! a lower bound (every acknowledged operation that must survive) and an upper bound
//! (no operation that had not started, or that came after a refused write).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod hooked_fs;

use hybridkv::{Db, Error, Options, WriteBatch, WriteOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::Duration;

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The database directory inside a `SimFs`.
pub const DIR: &str = "/db";

/// Small options: memtables of 64 KiB, growth factor 2 and 64 KiB large-log segments, so
/// that a few hundred operations flush, compact, merge the transient log and collect
/// garbage. GC runs only when the workload asks.
pub fn small_opts() -> Options {
    Options {
        // Merges append: an operator whose result depends on the order of the deltas.
        merge_operator: Some(std::sync::Arc::new(hybridkv::Append)),
        memtable_size: 64 << 10,
        growth_factor: 2,
        large_segment_size: 64 << 10,
        cache_bytes: 1 << 20,
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

/// One workload step.
#[derive(Debug, Clone)]
pub enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        sync: bool,
    },
    Delete {
        key: Vec<u8>,
        sync: bool,
    },
    /// A delta: the `Append` operator appends `operand` to the value.
    Merge {
        key: Vec<u8>,
        operand: Vec<u8>,
        sync: bool,
    },
    /// `delete_range(start, end)`: every key in `start..end`.
    DeleteRange {
        start: Vec<u8>,
        end: Vec<u8>,
        sync: bool,
    },
    /// `None` deletes.
    Batch {
        ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        sync: bool,
    },
    /// Reads a key and checks it against the acknowledged state.
    Get {
        key: Vec<u8>,
    },
    Flush,
    Compact,
    Gc,
}

impl Op {
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Op::Put { .. }
                | Op::Delete { .. }
                | Op::Merge { .. }
                | Op::Batch { .. }
                | Op::DeleteRange { .. }
        )
    }
    pub fn is_sync_write(&self) -> bool {
        match self {
            Op::Put { sync, .. }
            | Op::Delete { sync, .. }
            | Op::Merge { sync, .. }
            | Op::DeleteRange { sync, .. }
            | Op::Batch { sync, .. } => *sync,
            _ => false,
        }
    }
    /// Once acknowledged, every earlier acknowledged write survives a power loss: a synced
    /// write, or a flush (it returns once the memtable is in a level file a durable
    /// manifest names).
    pub fn is_durability_point(&self) -> bool {
        self.is_sync_write() || matches!(self, Op::Flush)
    }
}

/// xorshift64*.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub const KEYS: u64 = 80;

/// Keys are 24 bytes.
pub fn key(i: u64) -> Vec<u8> {
    let k = format!("key-{i:020}").into_bytes();
    assert_eq!(k.len(), 24);
    k
}

/// A value for version `version` of a key: 9 bytes (small pair), 104 (medium) or 1004+
/// (large), occasionally over 64 KiB (a length that needs more than 16 bits).
pub fn value(rng: &mut Rng, version: usize) -> Vec<u8> {
    let len = match rng.below(100) {
        0..=34 => 9,
        35..=69 => 104,
        70..=97 => 1004 + rng.below(3000) as usize,
        _ => 70_000,
    };
    let mut v = format!("{version:08}|").into_bytes();
    v.truncate(len);
    let fill = (version as u8).wrapping_mul(31) | 1;
    v.resize(len, fill);
    v
}

/// A delta operand for step `version`: 1 to 24 bytes that name the step.
pub fn operand(rng: &mut Rng, version: usize) -> Vec<u8> {
    let mut d = format!("+{version}").into_bytes();
    d.resize(1 + rng.below(24) as usize, b'.');
    d
}

/// `n` seeded steps: puts (small, medium, large), deletes, merges, batches, some synced; reads;
/// and flush / compact / gc calls.
pub fn workload(seed: u64, n: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::with_capacity(n);
    for i in 0..n {
        let sync = rng.chance(12);
        let op = if i % 50 == 49 {
            Op::Flush
        } else if i % 120 == 119 {
            Op::Compact
        } else if i % 80 == 79 {
            Op::Gc
        } else {
            match rng.below(100) {
                0..=49 => Op::Put {
                    key: key(rng.below(KEYS)),
                    value: value(&mut rng, i),
                    sync,
                },
                50..=57 => Op::Merge {
                    key: key(rng.below(KEYS)),
                    operand: operand(&mut rng, i),
                    sync,
                },
                58..=71 => Op::Delete {
                    key: key(rng.below(KEYS)),
                    sync,
                },
                72..=85 => {
                    // Now and then an empty batch: synced, it still makes every write
                    // before it durable.
                    let m = if rng.chance(10) { 0 } else { 2 + rng.below(5) };
                    let ops = (0..m)
                        .map(|_| {
                            let k = key(rng.below(KEYS));
                            let v = (!rng.chance(25)).then(|| value(&mut rng, i));
                            (k, v)
                        })
                        .collect();
                    Op::Batch { ops, sync }
                }
                86..=95 => Op::Get {
                    key: key(rng.below(KEYS)),
                },
                96 => range_delete(&mut rng, KEYS, sync),
                97 => Op::Flush,
                98 => Op::Compact,
                _ => Op::Gc,
            }
        };
        ops.push(op);
    }
    ops
}

/// A range deletion of a few consecutive keys of `0..keys`.
pub fn range_delete(rng: &mut Rng, keys: u64, sync: bool) -> Op {
    let first = rng.below(keys);
    Op::DeleteRange {
        start: key(first),
        end: key(first + 1 + rng.below(6)),
        sync,
    }
}

pub fn apply(model: &mut Model, op: &Op) {
    match op {
        Op::Put { key, value, .. } => {
            model.insert(key.clone(), value.clone());
        }
        Op::Delete { key, .. } => {
            model.remove(key);
        }
        Op::Merge { key, operand, .. } => {
            model
                .entry(key.clone())
                .or_default()
                .extend_from_slice(operand);
        }
        Op::Batch { ops, .. } => {
            for (k, v) in ops {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
        }
        Op::DeleteRange { start, end, .. } => model.retain(|k, _| k < start || k >= end),
        _ => {}
    }
}

/// `states[i]`: the model after the first `i` operations.
pub fn states(ops: &[Op]) -> Vec<Model> {
    let mut m = Model::new();
    let mut out = vec![m.clone()];
    for op in ops {
        apply(&mut m, op);
        out.push(m.clone());
    }
    out
}

/// Every key the workload touches.
pub fn universe(ops: &[Op]) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    for op in ops {
        match op {
            Op::Put { key, .. }
            | Op::Delete { key, .. }
            | Op::Merge { key, .. }
            | Op::Get { key } => {
                keys.insert(key.clone());
            }
            Op::Batch { ops, .. } => keys.extend(ops.iter().map(|(k, _)| k.clone())),
            _ => {}
        }
    }
    keys
}

/// What became of one operation.
#[derive(Debug)]
pub struct Outcome {
    /// The counter (e.g. `SimFs::mutation_count`) before the call.
    pub start: u64,
    /// The counter after the call returned.
    pub end: u64,
    pub result: Result<(), Error>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.result.is_ok()
    }
}

/// Runs `op`; a `Get` is checked against `acked` (the state of the acknowledged writes):
/// a wrong value is reported as an `Error::InvalidArgument` naming the key.
pub fn run_op(db: &Db, op: &Op, acked: &Model) -> Result<(), Error> {
    let w = |sync| WriteOptions { sync };
    match op {
        Op::Put { key, value, sync } => db.put_opt(key, value, &w(*sync)),
        Op::Delete { key, sync: false } => db.delete(key),
        Op::Delete { key, sync: true } => {
            let mut b = WriteBatch::new();
            b.delete(key);
            db.write_opt(b, &w(true))
        }
        Op::Merge { key, operand, sync } => {
            let mut b = WriteBatch::new();
            b.merge(key, operand);
            db.write_opt(b, &w(*sync))
        }
        Op::Batch { ops, sync } => {
            let mut b = WriteBatch::new();
            for (k, v) in ops {
                match v {
                    Some(v) => b.put(k, v),
                    None => b.delete(k),
                };
            }
            db.write_opt(b, &w(*sync))
        }
        Op::DeleteRange { start, end, sync } => {
            let mut b = WriteBatch::new();
            b.delete_range(start, end);
            db.write_opt(b, &w(*sync))
        }
        Op::Get { key } => {
            let got = db.get(key)?;
            if got.as_ref() != acked.get(key) {
                return Err(Error::InvalidArgument(format!(
                    "WRONG READ of {}: got {:?}, acknowledged {:?}",
                    String::from_utf8_lossy(key),
                    got.map(|v| v.len()),
                    acked.get(key).map(Vec::len)
                )));
            }
            Ok(())
        }
        Op::Flush => db.flush(),
        Op::Compact => db.compact(),
        Op::Gc => db.gc().map(|_| ()),
    }
}

/// Runs every operation in order (continuing after failures), recording `counter()`
/// around each.
pub fn run_workload(db: &Db, ops: &[Op], counter: impl Fn() -> u64) -> Vec<Outcome> {
    let mut acked = Model::new();
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let start = counter();
        let result = run_op(db, op, &acked);
        let end = counter();
        if result.is_ok() {
            apply(&mut acked, op);
        }
        out.push(Outcome { start, end, result });
    }
    out
}

/// The state of the acknowledged writes (the model of a live database after failures).
pub fn acked_state(ops: &[Op], outcomes: &[Outcome]) -> Model {
    let mut m = Model::new();
    for (op, o) in ops.iter().zip(outcomes) {
        if o.ok() {
            apply(&mut m, op);
        }
    }
    m
}

/// Reads the whole database by iteration, and every key of `universe` by `get`; the two
/// must agree.
pub fn read_state(db: &hybridkv::Keyspace, universe: &BTreeSet<Vec<u8>>) -> Result<Model, String> {
    let mut m = Model::new();
    for pair in db.iter() {
        let (k, v) = pair.map_err(|e| format!("scan failed: {e}"))?;
        m.insert(k, v);
    }
    for k in universe {
        let got = db
            .get(k)
            .map_err(|e| format!("get {} failed: {e}", String::from_utf8_lossy(k)))?;
        if got.as_ref() != m.get(k) {
            return Err(format!(
                "get and scan disagree on {}",
                String::from_utf8_lossy(k)
            ));
        }
    }
    Ok(m)
}

/// The `p` in `lo..=hi` with `states[p] == got`, or a description of the mismatch.
pub fn find_prefix(states: &[Model], got: &Model, lo: usize, hi: usize) -> Result<usize, String> {
    let hi = hi.min(states.len() - 1);
    if let Some(p) = (lo..=hi).rev().find(|&p| states[p] == *got) {
        return Ok(p);
    }
    let anywhere = (0..states.len()).find(|&p| states[p] == *got);
    // The closest allowed state, to show what differs.
    let near = (lo.min(hi)..=hi)
        .min_by_key(|&p| diff(&states[p], got).len())
        .unwrap_or(lo);
    let d = diff(&states[near], got);
    Err(format!(
        "recovered state is no allowed prefix (allowed {lo}..={hi}; equals prefix {anywhere:?}); \
         closest {near} differs in {} keys, e.g. {:?}",
        d.len(),
        d.iter().take(4).collect::<Vec<_>>()
    ))
}

fn diff(want: &Model, got: &Model) -> Vec<String> {
    let keys: BTreeSet<&Vec<u8>> = want.keys().chain(got.keys()).collect();
    keys.into_iter()
        .filter(|k| want.get(*k) != got.get(*k))
        .map(|k| {
            format!(
                "{}: want {:?} got {:?}",
                String::from_utf8_lossy(k),
                want.get(k).map(|v| (
                    v.len(),
                    String::from_utf8_lossy(&v[..v.len().min(9)]).into_owned()
                )),
                got.get(k).map(|v| (
                    v.len(),
                    String::from_utf8_lossy(&v[..v.len().min(9)]).into_owned()
                ))
            )
        })
        .collect()
}

/// Highest allowed prefix for a crash after `k` counted mutations: every operation that had
/// started before the crash, or had finished by it (one that records no mutation, such as
/// an empty batch, may start and end at `k`).
pub fn upper_bound(outcomes: &[Outcome], k: u64) -> usize {
    outcomes
        .iter()
        .take_while(|o| o.start < k || o.end <= k)
        .count()
}

/// Lowest allowed prefix: every acknowledged operation that must survive. For a power
/// loss, those up to the last acknowledged durability point; for a process crash, all.
/// `acked(i)` says whether operation `i` was acknowledged before the crash.
/// Reads and control operations change no state, so the bound is just past the last
/// write at or before that operation.
pub fn lower_bound(ops: &[Op], acked: impl Fn(usize) -> bool, power_loss: bool) -> usize {
    let Some(last) = (0..ops.len()).rev().find(|&i| {
        acked(i)
            && if power_loss {
                ops[i].is_durability_point()
            } else {
                ops[i].is_write()
            }
    }) else {
        return 0;
    };
    (0..=last)
        .rev()
        .find(|&i| ops[i].is_write())
        .map_or(0, |i| i + 1)
}

static PANICS: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();

/// Counts every panic in any thread (background threads included) from now on, still
/// printing it.
pub fn count_panics() {
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            prev(info);
        }));
    });
}

/// Panics seen since [`count_panics`].
pub fn panics() -> u64 {
    PANICS.load(Ordering::SeqCst)
}

/// A value of exactly `len` bytes for version `version` of a key (the same shape as
/// [`value`]'s).
pub fn sized_value(len: usize, version: usize) -> Vec<u8> {
    let mut v = format!("{version:08}|").into_bytes();
    v.truncate(len);
    let fill = (version as u8).wrapping_mul(31) | 1;
    v.resize(len, fill);
    v
}

/// A large value (1004 to 2503 bytes: 26 to 65 of them fill a 64 KiB segment).
pub fn large_value(rng: &mut Rng, version: usize) -> Vec<u8> {
    sized_value(1004 + rng.below(1500) as usize, version)
}

/// A value of any class for an overwrite: mostly large, sometimes medium or small.
fn any_value(rng: &mut Rng, version: usize) -> Vec<u8> {
    match rng.below(10) {
        0 => sized_value(9, version),
        1 | 2 => sized_value(104, version),
        _ => large_value(rng, version),
    }
}

/// `rounds` seeded rounds that make the garbage collector free large-log segments whose
/// records are dead only through writes that are not durable yet. Each round uses its
/// own keys:
///
/// 1. loads 60 to 75 large values (several 64 KiB segments) and a dozen medium and small
///    pairs, a few synced, some in batches; `Flush`, `Compact`;
/// 2. overwrites about a fifth of the large keys (and some medium ones) and flushes: the
///    compaction this flush triggers counts their old records as garbage, which brings
///    the segments over the GC threshold; `Flush`, `Compact`;
/// 3. overwrites or deletes, never synced, every other large key (in even rounds) or all
///    but a few (in odd rounds: the records left are live, and GC must relocate them);
/// 4. `Gc`: the victims' records are now dead mostly through the writes of step 3, which
///    a power loss can still take (in even rounds nothing is relocated, so no sync of
///    the relocation makes them durable by the way); then a few reads.
///
/// Every memtable stays well under `small_opts().memtable_size`, so flushes and
/// compactions happen only through the `Flush` and `Compact` calls (never while writes
/// run), and every `Flush` is followed by a `Compact`.
pub fn gc_workload(seed: u64, rounds: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops: Vec<Op> = Vec::new();
    for round in 0..rounds as u64 {
        let first = 1000 + round * 100;
        let large: Vec<Vec<u8>> = (0..60 + rng.below(16)).map(|j| key(first + j)).collect();
        let medium: Vec<Vec<u8>> = (0..12).map(|j| key(first + 80 + j)).collect();

        // 1. Load.
        let mut pending: Vec<Vec<u8>> = medium.clone();
        for k in &large {
            let v = large_value(&mut rng, ops.len());
            if rng.chance(8) {
                // A batch: this large pair with a medium or small one.
                let m = pending.pop().unwrap_or_else(|| key(first + 99));
                let len = if rng.chance(50) { 104 } else { 9 };
                ops.push(Op::Batch {
                    ops: vec![(k.clone(), Some(v)), (m, Some(sized_value(len, ops.len())))],
                    sync: rng.chance(20),
                });
            } else {
                ops.push(Op::Put {
                    key: k.clone(),
                    value: v,
                    sync: rng.chance(5),
                });
            }
            if rng.chance(15) {
                if let Some(m) = pending.pop() {
                    let len = if rng.chance(70) { 104 } else { 9 };
                    ops.push(Op::Put {
                        key: m,
                        value: sized_value(len, ops.len()),
                        sync: false,
                    });
                }
            }
        }
        for m in pending {
            ops.push(Op::Put {
                key: m,
                value: sized_value(104, ops.len()),
                sync: false,
            });
        }
        ops.push(Op::Flush);
        ops.push(Op::Compact);

        // 2. Overwrite about a fifth, flush: their old records become counted garbage.
        let mut rest = Vec::new();
        for k in &large {
            if rng.chance(20) {
                let v = any_value(&mut rng, ops.len());
                ops.push(Op::Put {
                    key: k.clone(),
                    value: v,
                    sync: rng.chance(10),
                });
            } else {
                rest.push(k.clone());
            }
        }
        for m in &medium {
            if rng.chance(40) {
                ops.push(Op::Put {
                    key: m.clone(),
                    value: sized_value(104, ops.len()),
                    sync: false,
                });
            }
        }
        ops.push(Op::Flush);
        ops.push(Op::Compact);

        // 3. Kill the rest, or most of it, without sync.
        let keep = if round % 2 == 1 { 8 } else { 0 };
        for k in &rest {
            match rng.below(100) {
                r if r < keep => {} // stays live: relocated by GC
                8..=27 => ops.push(Op::Delete {
                    key: k.clone(),
                    sync: false,
                }),
                28..=37 => {
                    let v = sized_value(104, ops.len());
                    ops.push(Op::Batch {
                        ops: vec![(k.clone(), Some(v)), (key(first + 99), None)],
                        sync: false,
                    });
                }
                _ => {
                    let v = any_value(&mut rng, ops.len());
                    ops.push(Op::Put {
                        key: k.clone(),
                        value: v,
                        sync: false,
                    });
                }
            }
        }

        // 4. Collect, then read.
        ops.push(Op::Gc);
        for _ in 0..4 {
            let k = large[rng.below(large.len() as u64) as usize].clone();
            ops.push(Op::Get { key: k });
        }
    }
    ops
}
