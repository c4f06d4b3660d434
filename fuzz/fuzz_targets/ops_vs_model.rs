//! Differential target: random operation sequences against the engine on a simulated file
//! system (`hybridkv::io::SimFs`) and against a `BTreeMap` model.
//!
//! Operations: puts of all three size classes (pair < 120 bytes, 120..1024, >= 1024),
//! deletes, batches (each optionally synced), point reads, range scans, flush, compact
//! (or compact_all), gc, a clean reopen, and a crash (power loss dropping unsynced bytes,
//! keeping a random prefix of them, tearing a sector, or a process crash), followed by a
//! reopen on the crash image. After a process crash every acknowledged write must be
//! there; after a power loss the state must be the model after some prefix of the writes
//! that includes every write up to the last durability point (a synced write, a flush, or
//! a reopen, which makes what it recovered durable), and the engine's own `check` must
//! pass. Reads are compared with the model throughout.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use hybridkv::io::{CrashKind, SimFs};
use hybridkv::{Db, Options, WriteBatch, WriteOptions};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const DIR: &str = "/db";
const KEY_LEN: usize = 6;
const MAX_OPS: usize = 48;

/// Values are regenerated from (seed, length), so model states are cheap to copy.
type Model = BTreeMap<Vec<u8>, (u8, u32)>;

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Val {
    class: u8,
    len: u16,
    seed: u8,
}

#[derive(Arbitrary, Debug)]
enum FOp {
    Put {
        key: u8,
        val: Val,
        sync: bool,
    },
    Delete {
        key: u8,
        sync: bool,
    },
    Batch {
        ops: Vec<(u8, Option<Val>)>,
        sync: bool,
    },
    Get {
        key: u8,
    },
    Scan {
        from: u8,
        limit: u8,
    },
    Flush,
    Compact {
        all: bool,
    },
    Gc,
    Reopen,
    Crash {
        kind: u8,
        seed: u64,
    },
}

fn key(k: u8) -> Vec<u8> {
    format!("key{:03}", k % 48).into_bytes()
}

/// (seed, value length): the pair (6-byte key + value) is small, medium or large.
fn shape(v: Val) -> (u8, u32) {
    let n = u32::from(v.len);
    let len = match v.class % 3 {
        0 => n % (120 - KEY_LEN as u32),
        1 => (120 - KEY_LEN as u32) + n % (1024 - 120),
        _ => (1024 - KEY_LEN as u32) + n % 6000,
    };
    (v.seed, len)
}

fn bytes((seed, len): (u8, u32)) -> Vec<u8> {
    (0..len)
        .map(|i| seed ^ (i.wrapping_mul(31) as u8))
        .collect()
}

fn opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 2,
        large_segment_size: 64 << 10,
        cache_bytes: 1 << 20,
        background_threads: 1,
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn open(fs: &SimFs) -> Db {
    Db::open_with_fs(DIR, opts(), Arc::new(fs.clone())).expect("open")
}

fn expand(m: &Model) -> BTreeMap<Vec<u8>, Vec<u8>> {
    m.iter().map(|(k, v)| (k.clone(), bytes(*v))).collect()
}

fn read_all(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.iter().map(|r| r.expect("scan")).collect()
}

struct Run {
    fs: SimFs,
    db: Option<Db>,
    model: Model,
    /// States the database may come back in after a power loss: the state at the last
    /// durability point, then the state after each later write.
    candidates: Vec<Model>,
}

impl Run {
    fn db(&self) -> &Db {
        self.db.as_ref().expect("open")
    }

    /// Drops the open database, then opens `fs` (a crash image or the same file system).
    fn reopen(&mut self, fs: SimFs) {
        drop(self.db.take());
        self.db = Some(open(&fs));
        self.fs = fs;
    }

    fn wrote(&mut self, sync: bool) {
        if sync {
            self.durable();
        } else {
            self.candidates.push(self.model.clone());
        }
    }

    fn durable(&mut self) {
        self.candidates.clear();
        self.candidates.push(self.model.clone());
    }

    fn write_opts(sync: bool) -> WriteOptions {
        WriteOptions { sync }
    }

    fn step(&mut self, op: &FOp) {
        match op {
            FOp::Put { key: k, val, sync } => {
                let v = shape(*val);
                self.db()
                    .put_opt(key(*k), bytes(v), &Self::write_opts(*sync))
                    .expect("put");
                self.model.insert(key(*k), v);
                self.wrote(*sync);
            }
            FOp::Delete { key: k, sync } => {
                let mut b = WriteBatch::new();
                b.delete(key(*k));
                self.db()
                    .write_opt(b, &Self::write_opts(*sync))
                    .expect("delete");
                self.model.remove(&key(*k));
                self.wrote(*sync);
            }
            FOp::Batch { ops, sync } => {
                let mut b = WriteBatch::new();
                for (k, v) in ops.iter().take(16) {
                    match v {
                        Some(v) => {
                            let v = shape(*v);
                            b.put(key(*k), bytes(v));
                            self.model.insert(key(*k), v);
                        }
                        None => {
                            b.delete(key(*k));
                            self.model.remove(&key(*k));
                        }
                    }
                }
                self.db()
                    .write_opt(b, &Self::write_opts(*sync))
                    .expect("batch");
                self.wrote(*sync);
            }
            FOp::Get { key: k } => {
                let got = self.db().get(key(*k)).expect("get");
                assert_eq!(got, self.model.get(&key(*k)).map(|v| bytes(*v)), "get {k}");
            }
            FOp::Scan { from, limit } => {
                let from = key(*from);
                let got: Vec<(Vec<u8>, Vec<u8>)> = self
                    .db()
                    .range(from.clone()..)
                    .take(usize::from(*limit % 16))
                    .map(|r| r.expect("range"))
                    .collect();
                let want: Vec<(Vec<u8>, Vec<u8>)> = self
                    .model
                    .range(from..)
                    .take(usize::from(*limit % 16))
                    .map(|(k, v)| (k.clone(), bytes(*v)))
                    .collect();
                assert_eq!(got, want, "range scan");
            }
            FOp::Flush => {
                self.db().flush().expect("flush");
                self.durable();
            }
            FOp::Compact { all } => {
                if *all {
                    self.db().compact_all().expect("compact_all");
                    self.durable();
                } else {
                    self.db().compact().expect("compact");
                }
            }
            FOp::Gc => {
                self.db().gc().expect("gc");
            }
            FOp::Reopen => {
                self.reopen(self.fs.clone());
                assert_eq!(
                    read_all(self.db()),
                    expand(&self.model),
                    "state after a reopen"
                );
                self.durable();
            }
            FOp::Crash { kind, seed } => {
                let kind = match kind % 4 {
                    0 => CrashKind::DropUnsynced,
                    1 => CrashKind::KeepPrefix { seed: *seed },
                    2 => CrashKind::TornSector { seed: *seed },
                    _ => CrashKind::ProcessCrash,
                };
                let img = self.fs.crash_image(kind);
                self.reopen(img);
                let got = read_all(self.db());
                if kind.is_power_loss() {
                    let found = self.candidates.iter().rev().find(|c| expand(c) == got);
                    let Some(state) = found.cloned() else {
                        panic!(
                            "after {kind:?} the state ({} keys) is no prefix holding every \
                             durable write ({} candidates)",
                            got.len(),
                            self.candidates.len()
                        );
                    };
                    self.model = state;
                } else {
                    assert_eq!(got, expand(&self.model), "state after a process crash");
                }
                let report = self.db().check().expect("check");
                assert!(report.is_ok(), "check after {kind:?}: {:?}", report.errors);
                self.durable();
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    while ops.len() < MAX_OPS {
        match FOp::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
        if u.is_empty() {
            break;
        }
    }
    let fs = SimFs::new();
    let db = open(&fs);
    let mut run = Run {
        fs,
        db: Some(db),
        model: Model::new(),
        candidates: vec![Model::new()],
    };
    for op in &ops {
        run.step(op);
    }
    assert_eq!(read_all(run.db()), expand(&run.model), "final state");
});
