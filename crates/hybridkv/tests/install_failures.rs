//! Install failures: an I/O operation fails inside a flush, a compaction, a GC pass or a
//! medium merge (a compaction into the last level that writes medium values from the
//! transient log in place), at every I/O point of those jobs, and the workload goes on.
//! This is the class of a failed install leaving half-applied state (a segment table
//! changed before a manifest store that failed, then a later store forgetting live
//! transient segments): an install must store its whole change before applying it, or
//! poison the engine.
//!
//! The workload is `common::gc_workload` (rounds of large values in 64 KiB segments,
//! medium and small pairs, overwrites and deletes, some synced, some never synced before a
//! GC pass), with a `compact_all` after every second GC pass (compactions run by the
//! calling thread, merging medium values down). It runs with one background thread and
//! its memtables never fill, so flushes and compactions run only inside its `Flush`,
//! `Compact` and `compact_all` calls, and GC passes inside its `Gc` calls, while the
//! calling thread waits for them: the file system's operation numbers are the same from
//! run to run. A reference run, through a file system that records every call (its
//! operation number, the thread, what and on which file), finds the jobs: the background
//! thread's calls, and the calling thread's inside `compact_all` after its flush, split
//! into jobs at each manifest install; a job that lists the directory (to delete the logs
//! it flushed) is a flush, one that reads a transient segment a medium merge, any other a
//! compaction. The calling thread's calls inside a flush call (the memtable switch) belong
//! to the flush, those inside a `Gc` call to the GC pass.
//!
//! For every operation k of those jobs and both fault modes (only k fails, or k and every
//! later one), the workload runs again on a fresh `SimFs` with operation k failing, to its
//! end (later writes may be refused), and:
//!
//! - nothing panics (the workload runs in `catch_unwind`; a panic hook counts panics in
//!   background threads), every failed call returns `Error::Io` or `Error::Poisoned`, and
//!   no read returns a value other than the acknowledged one;
//! - after the first failed write every later write is refused, and after a failed
//!   manifest store no write is acknowledged (the engine poisoned);
//! - with the device answering again, the live database reads exactly the acknowledged
//!   writes;
//! - reopened on the same file system (a process restart), the database holds a prefix of
//!   the workload that includes every acknowledged write; reopened from a power-loss image
//!   (`CrashKind::DropUnsynced`) taken at the end of the run, a prefix that includes every
//!   synced write and every write acknowledged before an acknowledged flush. Each time
//!   every key reads without error, `check` finds no damage, and a write works; after the
//!   restart, a synced write and a second power loss bring back the same prefix and the
//!   write;
//! - when an install succeeds after the fault (the fault did not poison, e.g. a failed
//!   read), a process-crash and a power-loss image taken right after it pass the same
//!   checks: a store that forgot what the failed install left in place loses it there,
//!   before a later merge could repair it.
//!
//! Which job the fault actually hit is taken from the failing run's own record of calls
//! (the summary also counts runs whose failing call differs from the reference run's).
//!
//! Every point runs when there are at most 1500 of them (about 20 s in a debug build),
//! otherwise a seeded sample of 1500; `INSTALL_POINTS=all` forces every point, and
//! `INSTALL_SEED=n` runs workload seed n, e.g.
//! `INSTALL_POINTS=all INSTALL_SEED=5 cargo test -p hybridkv --test install_failures --
//! --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::hooked_fs::{FsCall, FsHooks, HookedFs};
use common::{
    acked_state, apply, count_panics, find_prefix, gc_workload, lower_bound, panics, read_state,
    run_op, small_opts, states, universe, Model, Op, Outcome, Rng, DIR,
};
use hybridkv::io::{CrashKind, FailMode, FileSystem, SimFs};
use hybridkv::{Db, Error, Options, WriteOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Rounds of the GC workload.
const ROUNDS: usize = 4;
/// Default workload seed.
const SEED: u64 = 21;
/// Failure points tried per fault mode by default (every one with `INSTALL_POINTS=all`).
const SAMPLE: usize = 1500;
const MANIFEST_TMP: &str = "MANIFEST.tmp";

/// One background thread, so that background jobs run one after another.
fn opts() -> Options {
    Options {
        background_threads: 1,
        ..small_opts()
    }
}

// ---------------------------------------------------------------------------------------
// A file system that records every call.

/// One call to the file system.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    /// The `SimFs` operation number it got.
    n: u64,
    /// The thread that made it.
    thread: Thread,
    what: &'static str,
    path: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Thread {
    /// The thread running the workload.
    Caller,
    /// A flush and compaction worker.
    Background,
    /// The periodic garbage collector.
    Gc,
}

fn this_thread() -> Thread {
    match std::thread::current().name() {
        Some(n) if n.starts_with("hybridkv-bg") => Thread::Background,
        Some(n) if n.starts_with("hybridkv-gc") => Thread::Gc,
        _ => Thread::Caller,
    }
}

/// Hooks that record each call with the `SimFs` operation number it gets. Calls are
/// serialized by the record's lock, so the number read before a call is its own.
#[derive(Debug)]
struct Trace {
    fs: SimFs,
    calls: Mutex<Vec<Call>>,
}

impl Trace {
    fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl FsHooks for Trace {
    fn around<T>(
        &self,
        what: FsCall<'_>,
        path: &Path,
        call: impl FnOnce() -> hybridkv::Result<T>,
    ) -> hybridkv::Result<T> {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        let n = self.fs.op_count();
        let result = call();
        calls.push(Call {
            n,
            thread: this_thread(),
            what: what.name(),
            path: path.to_path_buf(),
        });
        result
    }
}

/// `fs` seen through a [`Trace`].
fn traced_fs(fs: &SimFs) -> HookedFs<Trace> {
    HookedFs::new(
        Arc::new(fs.clone()),
        Trace {
            fs: fs.clone(),
            calls: Mutex::default(),
        },
    )
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

fn is_manifest_rename(c: &Call) -> bool {
    c.what == "rename" && file_name(&c.path) == MANIFEST_TMP
}

// ---------------------------------------------------------------------------------------
// Jobs.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Flush,
    Compaction,
    Gc,
    Merge,
    /// A call of no install job (a fault that landed elsewhere than planned).
    Other,
}

/// What a workload step does, for finding the jobs it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Data,
    Flush,
    Compact,
    CompactAll,
    Gc,
}

/// Threads whose calls split into jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    /// The background worker: flushes and compactions.
    Background,
    /// The calling thread inside `compact_all`, after its flush: compactions.
    Caller,
}

/// Which job a call belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    None,
    /// The calling thread's own part of a flush (the memtable switch) or of a GC pass.
    Direct(Kind),
    /// Job number `j` of a stream.
    Job(Stream, usize),
}

/// Splits one stream's calls into jobs: a job ends with its manifest install and the
/// deletions, listings and directory syncs that follow it.
#[derive(Default)]
struct Splitter {
    job: Option<usize>,
    installed: bool,
}

impl Splitter {
    fn next(&mut self, c: &Call) -> usize {
        let trailing = matches!(c.what, "sync directory" | "list" | "remove");
        let j = match self.job {
            Some(j) if !self.installed || trailing => j,
            Some(j) => j + 1,
            None => 0,
        };
        if Some(j) != self.job {
            self.installed = false;
        }
        self.job = Some(j);
        self.installed |= is_manifest_rename(c);
        j
    }
}

/// The workload operation whose call window holds operation number `k`.
fn op_at(outcomes: &[Outcome], k: u64) -> Option<usize> {
    outcomes.iter().position(|o| o.start <= k && k < o.end)
}

/// The kind of each job of one stream, from its calls in a complete run: a job that lists
/// the directory (to delete the logs it flushed) is a flush, one that reads a transient
/// segment a medium merge, any other a compaction.
fn job_kinds(calls: &[Call], labels: &[Label], stream: Stream) -> Vec<Kind> {
    let mut seen: Vec<(bool, bool)> = Vec::new();
    for (c, l) in calls.iter().zip(labels) {
        let Label::Job(s, j) = *l else { continue };
        if s != stream {
            continue;
        }
        if j == seen.len() {
            seen.push((false, false));
        }
        seen[j].0 |= c.what == "list";
        seen[j].1 |= c.what == "read" && c.path.extension().is_some_and(|e| e == "tlog");
    }
    seen.into_iter()
        .map(|(lists, merges)| match (lists, merges) {
            (true, _) => Kind::Flush,
            (false, true) => Kind::Merge,
            (false, false) => Kind::Compaction,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The walk.

fn open(fs: Arc<dyn FileSystem>) -> hybridkv::Result<Db> {
    Db::open_with_fs(DIR, opts(), fs)
}

struct Workload {
    seed: u64,
    /// The steps; a `compact_all` call stands as an `Op::Flush` (for the model it is one: a
    /// durability point that changes no state), its index in `compact_all`.
    ops: Vec<Op>,
    compact_all: BTreeSet<usize>,
    states: Vec<Model>,
    universe: BTreeSet<Vec<u8>>,
    /// The reference run's calls, and the kinds of its jobs.
    calls: Vec<Call>,
    background_kinds: Vec<Kind>,
    caller_kinds: Vec<Kind>,
    /// Every operation number of an install job, with its kind.
    points: BTreeMap<u64, Kind>,
}

#[derive(Default)]
struct Tally {
    runs: u64,
    /// Runs by the kind of job the fault actually hit.
    hit: BTreeMap<Kind, u64>,
    /// Runs whose failing call differs from the reference run's call at that number.
    moved: u64,
    /// Runs in which the engine refused writes afterwards.
    poisoned: u64,
    /// Runs in which an install succeeded after the fault (checked by crash images).
    next_installs: u64,
    failed_calls: u64,
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

const MARKER: &[u8] = b"zz-marker-after-reopen";

impl Workload {
    /// Builds the workload and runs it once without faults, recording its calls.
    fn new(seed: u64) -> Workload {
        // The GC workload, with a `compact_all` after every second GC pass: an install
        // from the calling thread, merging medium values down to the last level.
        let mut ops = Vec::new();
        let mut compact_all = BTreeSet::new();
        let mut passes = 0;
        for op in gc_workload(seed, ROUNDS) {
            let gc = matches!(op, Op::Gc);
            ops.push(op);
            if gc {
                passes += 1;
                if passes % 2 == 0 {
                    compact_all.insert(ops.len());
                    ops.push(Op::Flush);
                }
            }
        }
        let mut w = Workload {
            seed,
            states: states(&ops),
            universe: universe(&ops),
            ops,
            compact_all,
            calls: Vec::new(),
            background_kinds: Vec::new(),
            caller_kinds: Vec::new(),
            points: BTreeMap::new(),
        };

        let fs = SimFs::new();
        let traced = traced_fs(&fs);
        let db = open(Arc::new(traced.clone())).unwrap();
        let outcomes = w.run_steps(&db, &fs, |_, _| {});
        for (i, o) in outcomes.iter().enumerate() {
            assert!(o.ok(), "op {i} {:?} failed: {:?}", w.ops[i], o.result);
        }
        let calls = traced.hooks().calls();
        let s = db.stats().unwrap();
        drop(db);
        println!(
            "workload seed {seed}: {} ops ({} compact_all), {} I/O operations; {} flushes, \
             {} compactions, {} transient segments created / {} freed ({} medium values \
             merged), {} GC passes freed {} segments ({} records relocated)",
            w.ops.len(),
            w.compact_all.len(),
            outcomes.last().map_or(0, |o| o.end),
            s.flushes,
            s.compactions,
            s.transient_segments_created,
            s.transient_segments_freed,
            s.medium_values_merged,
            s.gc_passes,
            s.gc_segments_freed,
            s.gc_entries_relocated
        );
        assert!(s.compactions > 0, "the workload must compact");
        assert!(
            s.medium_values_merged > 0,
            "a compaction must merge medium values from the transient log in place"
        );
        assert!(s.gc_segments_freed > 0, "GC must free segments");

        // Every operation number is its call's: nothing bypassed the record.
        for (i, c) in calls.iter().enumerate() {
            assert_eq!(c.n, i as u64, "call {i} {c:?} got another number");
        }
        // Background work runs only while the caller waits for it, and the periodic GC
        // never runs: the operation numbers do not depend on thread scheduling.
        for c in &calls {
            let step = op_at(&outcomes, c.n).map(|i| w.step(i));
            let waiting = matches!(step, Some(Step::Flush | Step::Compact | Step::CompactAll));
            if !(c.thread == Thread::Caller || (c.thread == Thread::Background && waiting)) {
                // Before failing: the calls around it and the steps they fell in, and the
                // steps' operation ranges, to tell which step let background work escape.
                let lo = c.n.saturating_sub(25) as usize;
                for d in calls.iter().take(c.n as usize + 5).skip(lo) {
                    let at = op_at(&outcomes, d.n);
                    eprintln!("call {d:?} in step {at:?} {:?}", at.map(|i| &w.ops[i]));
                }
                let first = outcomes.first().map(|o| (o.start, o.end));
                let last = outcomes.last().map(|o| (o.start, o.end));
                eprintln!("first step's range {first:?}, last step's {last:?}");
            }
            assert!(
                c.thread == Thread::Caller || (c.thread == Thread::Background && waiting),
                "{c:?} ran while the caller was not waiting for it ({step:?})"
            );
        }

        let labels = w.label(&calls, &outcomes);
        w.background_kinds = job_kinds(&calls, &labels, Stream::Background);
        w.caller_kinds = job_kinds(&calls, &labels, Stream::Caller);
        for (c, l) in calls.iter().zip(&labels) {
            let kind = w.kind(*l);
            if kind != Kind::Other {
                w.points.insert(c.n, kind);
            }
        }
        w.calls = calls;
        w
    }

    fn step(&self, i: usize) -> Step {
        match &self.ops[i] {
            Op::Flush if self.compact_all.contains(&i) => Step::CompactAll,
            Op::Flush => Step::Flush,
            Op::Compact => Step::Compact,
            Op::Gc => Step::Gc,
            _ => Step::Data,
        }
    }

    /// Runs every step in order (continuing after failures), recording the operation
    /// numbers around each and calling `after` after each; reads are checked against the
    /// acknowledged writes.
    fn run_steps(
        &self,
        db: &Db,
        fs: &SimFs,
        mut after: impl FnMut(usize, &Outcome),
    ) -> Vec<Outcome> {
        let mut acked = Model::new();
        let mut out = Vec::with_capacity(self.ops.len());
        for (i, op) in self.ops.iter().enumerate() {
            let start = fs.op_count();
            let result = if self.compact_all.contains(&i) {
                db.compact_all()
            } else {
                run_op(db, op, &acked)
            };
            // `flush` returns once its run is installed; the background thread may then
            // start, on its own, the compaction the new run calls for. The step waits for
            // that work too, so that no background call falls between two steps (where its
            // operation numbers would depend on when the caller starts the next step).
            let result = match (result, op) {
                (Ok(()), Op::Flush) if !self.compact_all.contains(&i) => db.compact(),
                (r, _) => r,
            };
            let end = fs.op_count();
            if result.is_ok() {
                apply(&mut acked, op);
            }
            let o = Outcome { start, end, result };
            after(i, &o);
            out.push(o);
        }
        out
    }

    /// The job of each call of a run.
    fn label(&self, calls: &[Call], outcomes: &[Outcome]) -> Vec<Label> {
        let mut background = Splitter::default();
        let mut caller = Splitter::default();
        // `compact_all` steps whose flush was installed: the caller's calls after it are
        // its compactions, those before it the memtable switch.
        let mut flushed = BTreeSet::new();
        let mut out = Vec::with_capacity(calls.len());
        for c in calls {
            let i = op_at(outcomes, c.n);
            let step = i.map(|i| self.step(i));
            out.push(match (c.thread, step) {
                (Thread::Background, _) => Label::Job(Stream::Background, background.next(c)),
                (Thread::Caller, Some(Step::Flush)) => Label::Direct(Kind::Flush),
                (Thread::Caller, Some(Step::Gc)) => Label::Direct(Kind::Gc),
                (Thread::Caller, Some(Step::CompactAll)) if flushed.contains(&i) => {
                    Label::Job(Stream::Caller, caller.next(c))
                }
                (Thread::Caller, Some(Step::CompactAll)) => Label::Direct(Kind::Flush),
                _ => Label::None,
            });
            if step == Some(Step::CompactAll) && is_manifest_rename(c) {
                flushed.insert(i);
            }
        }
        out
    }

    fn kind(&self, l: Label) -> Kind {
        let of = |kinds: &[Kind], j: usize| kinds.get(j).copied().unwrap_or(Kind::Other);
        match l {
            Label::None => Kind::Other,
            Label::Direct(kind) => kind,
            Label::Job(Stream::Background, j) => of(&self.background_kinds, j),
            Label::Job(Stream::Caller, j) => of(&self.caller_kinds, j),
        }
    }

    /// Runs the workload with operation `k` failing in `mode`, then checks everything.
    fn run(&self, k: u64, mode: FailMode, t: &mut Tally) {
        let at = format!("seed {}, fault at op {k} ({mode:?})", self.seed);
        let fs = SimFs::new();
        let traced = traced_fs(&fs);
        let db = open(Arc::new(traced.clone())).unwrap();
        fs.fail_at(k, mode);
        // Crash images right after the first install that succeeds after the fault (a
        // store of the manifest): one that forgot something the failed install left in
        // place loses it here, before a later merge could repair it.
        let mut next_install: Option<(usize, SimFs, SimFs)> = None;
        let run = catch_unwind(AssertUnwindSafe(|| {
            self.run_steps(&db, &fs, |i, o| {
                if next_install.is_some() || !o.ok() || o.start <= k {
                    return;
                }
                let stored = traced.hooks().calls()[o.start as usize..o.end as usize]
                    .iter()
                    .any(is_manifest_rename);
                if stored {
                    let restart = fs.crash_image(CrashKind::ProcessCrash);
                    let power_loss = fs.crash_image(CrashKind::DropUnsynced);
                    next_install = Some((i, restart, power_loss));
                }
            })
        }));
        t.runs += 1;
        let Ok(outcomes) = run else {
            t.violation(format!("{at}: the workload panicked"));
            return;
        };
        let calls = traced.hooks().calls();
        let labels = self.label(&calls, &outcomes);
        let index = calls.iter().position(|c| c.n == k);
        let kind = index.map_or(Kind::Other, |i| self.kind(labels[i]));
        *t.hit.entry(kind).or_default() += 1;
        if index.map(|i| &calls[i]) != self.calls.get(k as usize) {
            t.moved += 1;
        }
        if fs.faults_injected() == 0 {
            t.violation(format!("{at}: the fault never fired"));
        }
        // A failing call of a manifest store (writing MANIFEST.tmp, renaming it, syncing
        // the directory right after): the install failed and the engine must poison.
        let store_failed = index.is_some_and(|i| {
            let c = &calls[i];
            file_name(&c.path) == MANIFEST_TMP
                || (c.what == "sync directory" && i > 0 && is_manifest_rename(&calls[i - 1]))
        });

        // Failures are I/O errors or the refusal after one; reads were right; after the
        // first failed write, and after a failed manifest store, no write is acknowledged.
        let mut first_failed_write = None;
        for (i, (op, o)) in self.ops.iter().zip(&outcomes).enumerate() {
            match &o.result {
                Err(e) => {
                    t.failed_calls += 1;
                    if !matches!(e, Error::Io { .. } | Error::Poisoned(_)) {
                        t.violation(format!("{at}: op {i} {op:?} failed with {e}"));
                    }
                    if op.is_write() && first_failed_write.is_none() {
                        first_failed_write = Some(i);
                    }
                }
                Ok(()) if op.is_write() => {
                    if let Some(f) = first_failed_write {
                        t.violation(format!(
                            "{at}: write {i} acknowledged after failed write {f}"
                        ));
                    } else if store_failed && o.start > k {
                        t.violation(format!(
                            "{at}: write {i} acknowledged after a failed manifest store"
                        ));
                    }
                }
                Ok(()) => {}
            }
        }
        if first_failed_write.is_some() {
            t.poisoned += 1;
        }

        // Live reads of what was acknowledged, once the device answers again.
        fs.clear_faults();
        let acked = acked_state(&self.ops, &outcomes);
        match read_state(&db, &self.universe) {
            Ok(live) if live == acked => {}
            Ok(_) => t.violation(format!(
                "{at}: live reads differ from the acknowledged state"
            )),
            Err(e) => t.violation(format!("{at}: live reads failed: {e}")),
        }

        // A restart on the same disk, and a power loss at the end of the run.
        let power_loss = fs.crash_image(CrashKind::DropUnsynced);
        drop(db);
        let hi = first_failed_write.map_or(self.ops.len(), |i| i + 1);
        let acked_at = |i: usize| outcomes[i].ok();
        let restart = lower_bound(&self.ops, acked_at, false);
        if let Some(p) = self.reopen(&fs, restart, hi, t, &format!("{at}, restart")) {
            // A synced write, then a power loss: the same prefix, with the write.
            let lost = fs.crash_image(CrashKind::DropUnsynced);
            self.reopen_with_marker(&lost, p, t, &format!("{at}, restart, power loss"));
        }
        let lo = lower_bound(&self.ops, acked_at, true);
        self.reopen(&power_loss, lo, hi, t, &format!("{at}, power loss"));

        if let Some((i, restart, power_loss)) = next_install {
            t.next_installs += 1;
            let at = format!("{at}, crash after the next install (op {i})");
            let acked_then = |j: usize| j <= i && outcomes[j].ok();
            let hi = hi.min(i + 1);
            let lo = lower_bound(&self.ops, acked_then, false);
            self.reopen(&restart, lo, hi, t, &format!("{at}: process crash"));
            let lo = lower_bound(&self.ops, acked_then, true);
            self.reopen(&power_loss, lo, hi, t, &format!("{at}: power loss"));
        }
    }

    /// Opens `fs` and checks that it holds `states[p]` for a `p` in `lo..=hi`, reads
    /// without error, passes `check`, and takes a synced write. Returns `p`.
    fn reopen(&self, fs: &SimFs, lo: usize, hi: usize, t: &mut Tally, at: &str) -> Option<usize> {
        let db = match open(Arc::new(fs.clone())) {
            Ok(db) => db,
            Err(e) => {
                t.violation(format!("{at}: reopen failed: {e}"));
                return None;
            }
        };
        let p = match read_state(&db, &self.universe) {
            Ok(got) => match find_prefix(&self.states, &got, lo, hi) {
                Ok(p) => Some(p),
                Err(e) => {
                    t.violation(format!("{at}: {e}"));
                    None
                }
            },
            Err(e) => {
                t.violation(format!("{at}: reads: {e}"));
                None
            }
        };
        match db.check() {
            Ok(r) if r.is_ok() => {}
            Ok(r) => t.violation(format!("{at}: check: {:?}", r.errors)),
            Err(e) => t.violation(format!("{at}: check failed: {e}")),
        }
        let write = db
            .put_opt(MARKER, b"m", &WriteOptions { sync: true })
            .and_then(|()| db.get(MARKER));
        if !matches!(&write, Ok(Some(v)) if v == b"m") {
            t.violation(format!("{at}: write after reopen: {write:?}"));
            return None;
        }
        p
    }

    /// Opens `fs`, which must hold `states[p]` and the marker write.
    fn reopen_with_marker(&self, fs: &SimFs, p: usize, t: &mut Tally, at: &str) {
        let db = match open(Arc::new(fs.clone())) {
            Ok(db) => db,
            Err(e) => return t.violation(format!("{at}: reopen failed: {e}")),
        };
        let mut universe = self.universe.clone();
        universe.insert(MARKER.to_vec());
        let mut want = self.states[p].clone();
        want.insert(MARKER.to_vec(), b"m".to_vec());
        match read_state(&db, &universe) {
            Ok(got) if got == want => {}
            Ok(got) => t.violation(format!(
                "{at}: state changed from prefix {p} (marker kept: {})",
                got.contains_key(MARKER)
            )),
            Err(e) => t.violation(format!("{at}: reads: {e}")),
        }
        match db.check() {
            Ok(r) if r.is_ok() => {}
            Ok(r) => t.violation(format!("{at}: check: {:?}", r.errors)),
            Err(e) => t.violation(format!("{at}: check failed: {e}")),
        }
    }
}

/// The points to try: all of them with `INSTALL_POINTS=all` or when there are at most
/// `SAMPLE`, otherwise a seeded sample of `SAMPLE`.
fn sample(points: &BTreeMap<u64, Kind>, seed: u64) -> Vec<u64> {
    let all: Vec<u64> = points.keys().copied().collect();
    if std::env::var("INSTALL_POINTS").is_ok_and(|v| v == "all") || all.len() <= SAMPLE {
        return all;
    }
    let mut rng = Rng::new(seed);
    let mut chosen = BTreeSet::new();
    while chosen.len() < SAMPLE {
        chosen.insert(all[rng.below(all.len() as u64) as usize]);
    }
    chosen.into_iter().collect()
}

fn count(kinds: impl IntoIterator<Item = Kind>) -> BTreeMap<Kind, u64> {
    let mut m = BTreeMap::new();
    for k in kinds {
        *m.entry(k).or_default() += 1;
    }
    m
}

fn describe(m: &BTreeMap<Kind, u64>) -> String {
    let get = |k| m.get(&k).copied().unwrap_or(0);
    let mut s = format!(
        "flush {}, compaction {}, gc {}, merge {}",
        get(Kind::Flush),
        get(Kind::Compaction),
        get(Kind::Gc),
        get(Kind::Merge)
    );
    if get(Kind::Other) > 0 {
        s += &format!(", elsewhere {}", get(Kind::Other));
    }
    s
}

#[test]
fn an_install_failing_at_any_io_point_loses_nothing_acknowledged() {
    count_panics();
    let seed = std::env::var("INSTALL_SEED")
        .map_or(SEED, |s| s.parse().expect("INSTALL_SEED is a number"));
    let w = Workload::new(seed);
    let all = count(w.points.values().copied());
    println!(
        "install I/O points: {} ({}); jobs: background {:?}, compact_all {:?}",
        w.points.len(),
        describe(&all),
        w.background_kinds,
        w.caller_kinds
    );
    for kind in [Kind::Flush, Kind::Compaction, Kind::Gc, Kind::Merge] {
        assert!(all.contains_key(&kind), "the workload has no {kind:?} job");
    }

    let chosen = sample(&w.points, seed ^ 0x1a57);
    let tried = count(chosen.iter().map(|k| w.points[k]));
    let mut t = Tally::default();
    for &k in &chosen {
        for mode in [FailMode::Once, FailMode::FromThenOn] {
            w.run(k, mode, &mut t);
        }
    }
    println!(
        "runs: {} (both fault modes; writes refused afterwards in {}, an install succeeded \
         afterwards in {}), failed calls: {}, fault hit: {}, off the planned call: {}",
        t.runs,
        t.poisoned,
        t.next_installs,
        t.failed_calls,
        describe(&t.hit),
        t.moved
    );
    println!(
        "install failures: points {} ({}), violations: {}, panics: {}",
        chosen.len(),
        describe(&tried),
        t.violations,
        panics()
    );
    for kind in [Kind::Flush, Kind::Compaction, Kind::Gc, Kind::Merge] {
        assert!(t.hit.contains_key(&kind), "no fault hit a {kind:?} job");
    }
    assert_eq!(t.violations, 0);
    assert_eq!(panics(), 0);
}
