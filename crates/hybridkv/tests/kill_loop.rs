//! Kill loop with real processes and a real `SIGKILL` (issue #7).
//!
//! Each round starts a child process (this test binary re-executed with the child's
//! environment; the file has its own `main`, `harness = false`) that opens the database
//! and writes a seeded, endless mix of puts of every size class (small, medium, large, and
//! values over 64 KiB), updates, deletes and atomic batches, some with `sync: true`, with
//! 64 KiB memtables and large-log segments, so flushes, compactions, transient-log merges
//! and GC passes run all the time (the GC thread wakes every 20 ms and a helper thread
//! calls `Db::gc` too). After each write returns, the child prints `A <op index>` on
//! stdout; a monitor thread samples `Db::stats` every millisecond and prints
//! `S <flush> <compaction> <gc>` whenever the set of background jobs in flight changes
//! (see `monitor`).
//!
//! The parent kills the child with `SIGKILL` after a random 5–500 ms, reopens the database
//! and checks the process-crash guarantee: every acknowledged write reached the OS, so all
//! of them survive (synced or not), and the state is exactly the model after the round's
//! operations up to the last acknowledged one, or one more (the write in flight): no lost
//! acknowledged write, no hole, no half batch, no resurrected value (every value written is
//! unique). Every 10th round `Db::check` also verifies every checksum and pointer. The next
//! round continues on the recovered database with a new seed; the model carries over.
//!
//! Every atomic batch is also written, in the same batch, to a second keyspace ("mirror",
//! created by the first child): a batch across two keyspaces. After each kill the mirror
//! keyspace must hold exactly the batches of the prefix the default keyspace holds (a part
//! of a batch in one keyspace without the other is a *torn batch*, counted as a hole).
//!
//! Two rounds in three append to the small log and the large log through memory maps
//! (`Options::mmap_log_writes`, the default: a kill leaves the small log and the large
//! segment being appended to with a reserved tail of zeros), the third with `pwrite`s.
//!
//! The loop runs twice, on two databases in temp dirs on the real file system: once with
//! the default buffered I/O, once with `Options::direct_io` on (level files written, and
//! level files and log segments read, with `O_DIRECT`; the parent's verification reads
//! too). The child learns the mode, like its round and seed, from an environment variable.
//! The direct-I/O half needs a file system that supports `O_DIRECT` under the temp dir
//! (ext4, xfs, ...; tmpfs rejects it before Linux 6.6): elsewhere the child fails to open
//! or to read, and the test fails saying so.
//!
//! It prints one line per mode: `kills: N, during flush/compaction/GC: a/b/c, lost
//! acknowledged writes: 0, holes: 0, direct_io: off` (then `on`). 80 rounds run by
//! default, half in each mode; thousands with
//!
//! ```text
//! HYBRIDKV_KILL_ROUNDS=5000 cargo test --release -p hybridkv --test kill_loop
//! ```
//!
//! (`HYBRIDKV_KILL_ROUNDS` counts the rounds of both modes together;
//! `HYBRIDKV_KILL_MODE=buffered` or `=direct` gives all of them to one mode.
//! `HYBRIDKV_KILL_SEED=n` picks another sequence of seeds and kill times; each mode derives
//! its own from it. A failure prints the seed, the mode and the round.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{apply, key, read_state, run_op, Model, Op, Rng};
use hybridkv::{Db, Keyspace, Options, WriteBatch, WriteOptions};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Both modes together: a direct-I/O round costs about 1.6 buffered ones (its verification
/// reads bypass the page cache), so 40 + 40 take about as long as 100 buffered rounds did.
const ROUNDS: u64 = 80;
const KEYS: u64 = 4000;
/// Keys `0..HOT` get half of all writes, so versions die young and GC has work.
const HOT: u64 = 200;
const ENV_DIR: &str = "HYBRIDKV_KILL_CHILD_DIR";
const ENV_ROUND: &str = "HYBRIDKV_KILL_CHILD_ROUND";
const ENV_SEED: &str = "HYBRIDKV_KILL_CHILD_SEED";
/// `1` when the child opens the database with `direct_io` on, `0` otherwise.
const ENV_DIRECT: &str = "HYBRIDKV_KILL_CHILD_DIRECT";
/// The signal number of `SIGKILL` on every unix (`Child::kill` sends it).
const SIGKILL: i32 = 9;
/// A child left behind by a parent that died stops on its own after this long.
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

/// Tiny memtables and segments: background work never stops. `direct` turns
/// `direct_io` on; `mapped_log` appends to the small and large logs through memory maps
/// (the default) rather than with `pwrite`s.
fn kill_opts(direct: bool, mapped_log: bool) -> Options {
    Options {
        direct_io: direct,
        mmap_log_writes: mapped_log,
        memtable_size: 64 << 10,
        max_immutable_memtables: 2,
        growth_factor: 2,
        max_levels: 5,
        large_segment_size: 64 << 10,
        cache_bytes: 1 << 20,
        gc_threshold: 0.50,
        gc_interval: Duration::from_millis(20),
        background_threads: 2,
        ..Options::default()
    }
}

/// The endless operation sequence of one round: a pure function of (round, seed), so the
/// parent regenerates what the child issued from the index of its last acknowledgement.
struct Gen {
    rng: Rng,
    round: u64,
    i: u64,
}

impl Gen {
    fn new(round: u64, seed: u64) -> Gen {
        Gen {
            rng: Rng::new(seed),
            round,
            i: 0,
        }
    }

    fn key(&mut self) -> Vec<u8> {
        if self.rng.chance(50) {
            key(self.rng.below(HOT))
        } else {
            key(self.rng.below(KEYS))
        }
    }

    /// Keys are 24 bytes, so (pair sizes) small < 120 ≤ medium < 1024 ≤ large; 1% of the
    /// values are over 64 KiB. The first 8 bytes make every value ever written unique.
    fn value(&mut self, member: u64) -> Vec<u8> {
        let len = match self.rng.below(100) {
            0..=34 => 8 + self.rng.below(88),
            35..=67 => 96 + self.rng.below(904),
            68..=98 => 1000 + self.rng.below(8000),
            _ => 65_537 + self.rng.below(100_000),
        } as usize;
        let tag = (self.round << 32) | (self.i << 6) | member;
        let mut v = tag.to_le_bytes().to_vec();
        v.resize(len, (tag.wrapping_mul(0x9e37_79b9) >> 24) as u8 | 1);
        v
    }

    fn next_op(&mut self) -> Op {
        let sync = self.rng.chance(4);
        let op = match self.rng.below(100) {
            0..=59 => Op::Put {
                key: self.key(),
                value: self.value(0),
                sync,
            },
            60..=74 => Op::Delete {
                key: self.key(),
                sync,
            },
            _ => {
                let n = 2 + self.rng.below(7);
                let ops = (0..n)
                    .map(|m| {
                        let k = self.key();
                        let v = (!self.rng.chance(25)).then(|| self.value(m + 1));
                        (k, v)
                    })
                    .collect();
                Op::Batch { ops, sync }
            }
        };
        self.i += 1;
        op
    }
}

/// One line to the parent; a parent that went away ends the child.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(2);
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// This file is a test without libtest's harness (`harness = false` in Cargo.toml): `main`
/// runs the parent loop, or the child when the parent set `HYBRIDKV_KILL_CHILD_DIR`.
fn main() {
    match std::env::var(ENV_DIR) {
        Ok(dir) => kill_loop_child(&dir),
        Err(_) => kill_loop(),
    }
}

/// The child: opens the database in `dir` and writes until it is killed.
fn kill_loop_child(dir: &str) {
    let round = env_u64(ENV_ROUND).expect("round");
    let seed = env_u64(ENV_SEED).expect("seed");
    let direct = env_u64(ENV_DIRECT).expect("direct") == 1;
    // Two rounds in three append to the small log through a memory map (the default),
    // the third with a `pwrite` per commit: a kill leaves the logs of either kind.
    let mapped_log = round % 3 != 2;
    let db = match Db::open(dir, kill_opts(direct, mapped_log)) {
        Ok(db) => db,
        Err(e) => {
            say(&format!("E open: {e}"));
            std::process::exit(3);
        }
    };
    let mirror = match db
        .keyspace(MIRROR)
        .or_else(|_| db.create_keyspace(MIRROR, kill_opts(direct, mapped_log)))
    {
        Ok(k) => k,
        Err(e) => {
            say(&format!("E keyspace: {e}"));
            std::process::exit(3);
        }
    };
    say("R");
    {
        let db = db.clone();
        thread::spawn(move || monitor(&db));
    }
    {
        let db = db.clone();
        thread::spawn(move || loop {
            thread::sleep(Duration::from_millis(15));
            if let Err(e) = db.gc() {
                say(&format!("E gc: {e}"));
                std::process::exit(3);
            }
        });
    }
    let started = Instant::now();
    let mut gen = Gen::new(round, seed);
    let none = Model::new();
    loop {
        let i = gen.i;
        let op = gen.next_op();
        let result = match &op {
            Op::Batch { ops, sync } => mirrored_batch(&db, &mirror, ops, *sync),
            _ => run_op(&db, &op, &none),
        };
        if let Err(e) = result {
            say(&format!("E op {i}: {e}"));
            std::process::exit(3);
        }
        say(&format!("A {i}"));
        if started.elapsed() > CHILD_DEADLINE {
            std::process::exit(4);
        }
    }
}

/// The second keyspace every batch is written to as well.
const MIRROR: &str = "mirror";

/// Writes a batch's puts and deletes into the default keyspace and into `mirror`, as one
/// batch across the two.
fn mirrored_batch(
    db: &Db,
    mirror: &Keyspace,
    ops: &[(Vec<u8>, Option<Vec<u8>>)],
    sync: bool,
) -> hybridkv::Result<()> {
    let mut b = WriteBatch::new();
    for ks in [&**db, mirror] {
        for (k, v) in ops {
            match v {
                Some(v) => b.put_in(ks, k, v),
                None => b.delete_in(ks, k),
            };
        }
    }
    db.write_opt(b, &WriteOptions { sync })
}

/// The mirror keyspace's model: `op` applied if it is a batch.
fn apply_mirror(m: &mut Model, op: &Op) {
    if matches!(op, Op::Batch { .. }) {
        apply(m, op);
    }
}

/// Samples `Db::stats` every millisecond and reports which background jobs are in flight.
/// A flush is in flight while an immutable memtable waits (it leaves the list only when
/// its run is installed). A compaction or GC pass is in flight from the sample where its
/// component's I/O counters moved until the sample where its completion counter
/// (`compactions`, `gc_passes`) moves; a pass that finds no victim does no I/O and is not
/// counted.
fn monitor(db: &Db) {
    use hybridkv::io::IoComponent;
    let io = |s: &hybridkv::Stats, c| s.io.read_by(c) + s.io.written_by(c);
    let Ok(mut prev) = db.stats() else { return };
    let (mut compacting, mut collecting) = (false, false);
    let mut last = None;
    loop {
        thread::sleep(Duration::from_millis(1));
        let Ok(s) = db.stats() else { return };
        if s.compactions != prev.compactions {
            compacting = false;
        } else if io(&s, IoComponent::Compaction) != io(&prev, IoComponent::Compaction) {
            compacting = true;
        }
        if s.gc_passes != prev.gc_passes {
            collecting = false;
        } else if io(&s, IoComponent::Gc) != io(&prev, IoComponent::Gc) {
            collecting = true;
        }
        let now = (s.immutable_memtables > 0, compacting, collecting);
        if last != Some(now) {
            say(&format!(
                "S {} {} {}",
                u8::from(now.0),
                u8::from(now.1),
                u8::from(now.2)
            ));
            last = Some(now);
        }
        prev = s;
    }
}

/// What the parent learned from one child.
#[derive(Debug, Default)]
struct ChildReport {
    opened: bool,
    /// Acknowledged operations (indexes `0..acked`).
    acked: u64,
    /// (flush, compaction, GC) in flight at the last report.
    busy: (bool, bool, bool),
    errors: Vec<String>,
    stray: Vec<String>,
}

fn read_report(out: impl Read) -> ChildReport {
    let mut r = ChildReport::default();
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["R"] => r.opened = true,
            ["A", n] => {
                let n: u64 = n.parse().unwrap_or(u64::MAX);
                if n != r.acked {
                    r.stray
                        .push(format!("acknowledgement {n} after {}", r.acked));
                }
                r.acked = n.saturating_add(1);
            }
            ["S", a, b, c] => r.busy = (*a == "1", *b == "1", *c == "1"),
            ["E", ..] => r.errors.push(line.clone()),
            _ => {}
        }
    }
    r
}

/// Starts the child for `round`, kills it after `delay`, and returns what it reported.
fn run_child(dir: &Path, mode: Mode, round: u64, seed: u64, delay: Duration) -> ChildReport {
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .env(ENV_DIR, dir)
        .env(ENV_ROUND, round.to_string())
        .env(ENV_SEED, seed.to_string())
        .env(ENV_DIRECT, u8::from(mode.direct).to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut stderr = child.stderr.take().expect("child stderr");
    let out = thread::spawn(move || read_report(stdout));
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    thread::sleep(delay);
    let early = child.try_wait().expect("try_wait");
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("wait for the child");
    let report = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    assert!(
        early.is_none() && status.signal() == Some(SIGKILL) && report.errors.is_empty(),
        "{} round {round}: the child ended on its own ({status:?}) or failed: {:?}\n{stderr}",
        mode.name,
        report.errors
    );
    assert!(
        report.stray.is_empty(),
        "{} round {round}: {:?}",
        mode.name,
        report.stray
    );
    report
}

/// One of the two I/O modes the loop runs in.
#[derive(Debug, Clone, Copy)]
struct Mode {
    name: &'static str,
    direct: bool,
    /// Mixed into `HYBRIDKV_KILL_SEED`, so the modes draw different seeds and kill times.
    salt: u64,
}

const BUFFERED: Mode = Mode {
    name: "buffered",
    direct: false,
    salt: 0,
};
const DIRECT: Mode = Mode {
    name: "direct",
    direct: true,
    salt: 0xd1ec_7000,
};

#[derive(Default)]
struct Tally {
    kills: u64,
    before_open: u64,
    flush: u64,
    compaction: u64,
    gc: u64,
    acked: u64,
    lost: u64,
    holes: u64,
    failures: Vec<String>,
}

/// The parent: splits the rounds between the modes and runs the loop once per mode; fails
/// after both have run, with every failure of either.
fn kill_loop() {
    let rounds = env_u64("HYBRIDKV_KILL_ROUNDS").unwrap_or(ROUNDS);
    let base = env_u64("HYBRIDKV_KILL_SEED").unwrap_or(7);
    let plan = match std::env::var("HYBRIDKV_KILL_MODE").as_deref() {
        Ok("buffered") => vec![(BUFFERED, rounds)],
        Ok("direct") => vec![(DIRECT, rounds)],
        Ok("both") | Err(_) => vec![(BUFFERED, rounds - rounds / 2), (DIRECT, rounds / 2)],
        Ok(other) => panic!("HYBRIDKV_KILL_MODE={other}: expected buffered, direct or both"),
    };
    let mut summaries = Vec::new();
    let mut failures = Vec::new();
    for (mode, rounds) in plan {
        let (summary, mut f) = run_loop(mode, rounds, base);
        summaries.push(summary);
        failures.append(&mut f);
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        summaries.join("\n"),
        failures.join("\n")
    );
}

/// The rounds of start, kill, reopen and verify in one mode, on a fresh database. Returns
/// the summary line and the failures.
fn run_loop(mode: Mode, rounds: u64, base: u64) -> (String, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let universe: BTreeSet<Vec<u8>> = (0..KEYS).map(key).collect();
    let mut rng = Rng::new(base ^ mode.salt);
    let mut model = Model::new();
    let mut mirror_model = Model::new();
    let mut t = Tally::default();
    let name = mode.name;
    let start = Instant::now();
    for round in 0..rounds {
        let seed = rng.next();
        let delay = Duration::from_millis(5 + rng.below(496));
        let r = run_child(&dir, mode, round, seed, delay);
        t.kills += 1;
        t.acked += r.acked;
        if r.opened {
            t.flush += u64::from(r.busy.0);
            t.compaction += u64::from(r.busy.1);
            t.gc += u64::from(r.busy.2);
        } else {
            t.before_open += 1;
        }

        // The model after the acknowledged operations, and after one more (in flight).
        let mut gen = Gen::new(round, seed);
        let ops: Vec<Op> = (0..=r.acked).map(|_| gen.next_op()).collect();
        let mut lo = model.clone();
        let mut mirror_lo = mirror_model.clone();
        for op in &ops[..r.acked as usize] {
            apply(&mut lo, op);
            apply_mirror(&mut mirror_lo, op);
        }
        let mut hi = lo.clone();
        let mut mirror_hi = mirror_lo.clone();
        if r.opened {
            apply(&mut hi, &ops[r.acked as usize]);
            apply_mirror(&mut mirror_hi, &ops[r.acked as usize]);
        }

        let db = Db::open(&dir, kill_opts(mode.direct, true)).unwrap_or_else(|e| {
            panic!("seed {base} {name} round {round}: reopen after SIGKILL failed: {e}")
        });
        let got = read_state(&db, &universe)
            .unwrap_or_else(|e| panic!("seed {base} {name} round {round}: {e}"));
        // Before the first child created it, the mirror keyspace is empty.
        let got_mirror = match db.keyspace(MIRROR) {
            Ok(m) => read_state(&m, &universe)
                .unwrap_or_else(|e| panic!("seed {base} {name} round {round}: mirror: {e}")),
            Err(_) => Model::new(),
        };
        let torn = |want: &Model| {
            (got_mirror != *want).then(|| {
                format!(
                    "seed {base} {name} round {round}: torn batch: the mirror keyspace holds \
                     {} keys, the default keyspace's prefix has {} batch keys",
                    got_mirror.len(),
                    want.len()
                )
            })
        };
        if got == lo || got == hi {
            // The mirror must hold the same side: without the operation in flight (lo), or
            // with it (hi). (They can agree on the default keyspace and not on the mirror:
            // a batch that only deletes keys the default keyspace no longer holds.)
            let side = if got == lo && got_mirror == mirror_lo {
                Some(lo.clone())
            } else if got == hi && got_mirror == mirror_hi {
                Some(hi.clone())
            } else {
                None
            };
            match side {
                Some(m) => model = m,
                None => {
                    let want = if got == lo { &mirror_lo } else { &mirror_hi };
                    t.holes += 1;
                    t.failures
                        .push(torn(want).unwrap_or_else(|| "torn batch".to_string()));
                    model = got.clone();
                }
            }
            mirror_model = got_mirror.clone();
        } else {
            // Which prefix (if any) did come back?
            let mut m = model.clone();
            let mut found = (m == got).then_some(0u64);
            for (p, op) in ops.iter().enumerate() {
                apply(&mut m, op);
                if m == got {
                    found = Some(p as u64 + 1);
                }
            }
            let what = match found {
                Some(p) if p < r.acked => {
                    t.lost += r.acked - p;
                    format!("state of prefix {p}: {} acknowledged ops lost", r.acked - p)
                }
                _ => {
                    t.holes += 1;
                    let bad: Vec<String> = universe
                        .iter()
                        .filter(|k| got.get(*k) != lo.get(*k) && got.get(*k) != hi.get(*k))
                        .take(4)
                        .map(|k| {
                            format!(
                                "{}: got {:?} want {:?}",
                                String::from_utf8_lossy(k),
                                got.get(k).map(|v| v.len()),
                                lo.get(k).map(|v| v.len())
                            )
                        })
                        .collect();
                    format!("no prefix matches; e.g. {bad:?}")
                }
            };
            t.failures.push(format!(
                "seed {base} {name} round {round} (child seed {seed}, kill after {delay:?}, \
                 {} acked, busy {:?}): {what}",
                r.acked, r.busy
            ));
            model = got;
            mirror_model = got_mirror;
        }
        if round % 10 == 9 || round + 1 == rounds {
            let report = db
                .check()
                .unwrap_or_else(|e| panic!("seed {base} {name} round {round}: check failed: {e}"));
            assert!(
                report.is_ok(),
                "seed {base} {name} round {round}: check after recovery: {:?}",
                report.errors
            );
        }
        drop(db);
    }
    let summary = format!(
        "kills: {}, during flush/compaction/GC: {}/{}/{}, lost acknowledged writes: {}, holes: {}, \
         direct_io: {}",
        t.kills,
        t.flush,
        t.compaction,
        t.gc,
        t.lost,
        t.holes,
        if mode.direct { "on" } else { "off" }
    );
    let _ = writeln!(
        std::io::stderr().lock(),
        "{summary}\n(kill loop, {name}: seed {base}, {} kills before the child had opened the \
         database, {} acknowledged writes, {} keys at the end, {:.1} s)",
        t.before_open,
        t.acked,
        model.len(),
        start.elapsed().as_secs_f64()
    );
    (summary, t.failures)
}
