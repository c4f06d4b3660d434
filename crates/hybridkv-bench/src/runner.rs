//! Runs one phase (load or run) of one engine and measures it.
//!
//! A database directory for the benchmark (`--db DIR`) holds one sub-directory per
//! engine: `DIR/<engine>/db` is the engine's database, `DIR/<engine>/state.json` and
//! `DIR/<engine>/records.bin` are the runner's memory between invocations (how many
//! records exist, the value length of each, the settings of the load). Only `db` is
//! measured for bytes on disk.

use crate::engine::{patch, Engine, EngineConfig, EngineKind, EngineOptions};
use crate::error::{BenchError, Result};
use crate::live::LiveTracker;
use crate::record::{self, Latency, Mix, PhaseRecord, SCHEMA_VERSION};
use crate::sys::{self, CpuTime, DeviceIo, Host};
use hdrhistogram::Histogram;
use hybridkv_ycsb::{
    InsertOrder, OpGenerator, Operation, OperationKind, ValueMix, Workload, WorkloadSpec, KEY_LEN,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Which phase to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Insert records `0..records` into a new database.
    Load,
    /// Run the workload's operation mix against a loaded database.
    Run,
}

impl Phase {
    /// `load` or `run`.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Run => "run",
        }
    }
}

/// The runner's memory of one engine's database between invocations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineState {
    /// Engine name.
    pub engine: String,
    /// Records that exist (loaded plus inserted by runs).
    pub records: u64,
    /// Records loaded.
    pub loaded_records: u64,
    /// Value mix of the load.
    pub mix: String,
    /// `hashed` or `ordered`.
    pub insert_order: String,
    /// Seed of the load.
    pub seed: u64,
    /// Settings of the load.
    pub cache_bytes: u64,
    /// Memtable size of the load.
    pub memtable_bytes: u64,
    /// Phases run so far, e.g. `load a`, `run a`.
    pub history: Vec<String>,
}

/// Paths of one engine's part of a benchmark directory.
#[derive(Debug, Clone)]
pub struct EngineDir {
    root: PathBuf,
}

impl EngineDir {
    /// `root/<engine>`.
    pub fn new(bench_root: &Path, engine: EngineKind) -> Self {
        EngineDir {
            root: bench_root.join(engine.name()),
        }
    }
    /// The engine's database directory.
    pub fn db(&self) -> PathBuf {
        self.root.join("db")
    }
    fn state_path(&self) -> PathBuf {
        self.root.join("state.json")
    }
    fn lens_path(&self) -> PathBuf {
        self.root.join("records.bin")
    }
    /// Whether a load has been done here.
    pub fn is_loaded(&self) -> bool {
        self.state_path().exists()
    }
    /// The state saved by the last phase, if any.
    pub fn state(&self) -> Result<Option<EngineState>> {
        let path = self.state_path();
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io("read", &path, e))?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| BenchError::Json {
                what: path.display().to_string(),
                source,
            })
    }
    fn save(&self, state: &EngineState, tracker: &LiveTracker) -> Result<()> {
        std::fs::create_dir_all(&self.root).map_err(|e| BenchError::io("create", &self.root, e))?;
        tracker.save(&self.lens_path(), state.records)?;
        let text = serde_json::to_string_pretty(state).map_err(|source| BenchError::Json {
            what: "serialize the runner state".into(),
            source,
        })?;
        let path = self.state_path();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| BenchError::io("write", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| BenchError::io("rename", &path, e))
    }
}

/// Everything one phase needs.
#[derive(Debug, Clone)]
pub struct PhasePlan {
    /// The engine.
    pub engine: EngineKind,
    /// Load or run.
    pub phase: Phase,
    /// Workload name for the results (`a`..`f` or a property-file path).
    pub workload_name: String,
    /// The workload. For a load, `record_count` records are inserted. For a run,
    /// `record_count`, the mix's absence and the insert order are taken from the saved
    /// state (the records that exist); `operation_count` operations are run.
    pub spec: WorkloadSpec,
    /// Workload seed.
    pub seed: u64,
    /// Client threads.
    pub threads: usize,
    /// Engine settings.
    pub config: EngineConfig,
    /// The benchmark directory (the engine uses `bench_root/<engine>`).
    pub bench_root: PathBuf,
    /// Show a progress bar (on stderr, only if it is a terminal).
    pub progress: bool,
    /// Free text recorded with the result.
    pub label: String,
    /// The memory limit (page cache included) the process ran under, if any.
    pub memory_limit: Option<u64>,
}

/// What the worker threads measured.
struct WorkerTotals {
    hist: Vec<Histogram<u64>>,
    counts: [u64; 5],
    app_written: u64,
    app_read: u64,
    read_misses: u64,
    scan_pairs: u64,
}

impl WorkerTotals {
    fn new() -> Result<Self> {
        let hist = (0..5)
            .map(|_| {
                Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                    .map_err(|e| BenchError::Usage(format!("latency histogram: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(WorkerTotals {
            hist,
            counts: [0; 5],
            app_written: 0,
            app_read: 0,
            read_misses: 0,
            scan_pairs: 0,
        })
    }

    fn merge(&mut self, other: &WorkerTotals) -> Result<()> {
        for (a, b) in self.hist.iter_mut().zip(&other.hist) {
            a.add(b)
                .map_err(|e| BenchError::Usage(format!("latency histogram: {e:?}")))?;
        }
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.app_written += other.app_written;
        self.app_read += other.app_read;
        self.read_misses += other.read_misses;
        self.scan_pairs += other.scan_pairs;
        Ok(())
    }
}

fn kind_index(kind: OperationKind) -> usize {
    OperationKind::ALL
        .iter()
        .position(|&k| k == kind)
        .unwrap_or(0)
}

/// The name of an operation type in results.
pub fn kind_name(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::Read => "read",
        OperationKind::Update => "update",
        OperationKind::Insert => "insert",
        OperationKind::Scan => "scan",
        OperationKind::ReadModifyWrite => "read_modify_write",
    }
}

/// Operations between two updates of the shared progress counter.
const PROGRESS_STEP: u64 = 64;

/// One client thread: runs its generator's operations against the engine.
fn worker(
    engine: &dyn Engine,
    generator: OpGenerator,
    tracker: &LiveTracker,
    done: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(WorkerTotals, Instant)> {
    let mut t = WorkerTotals::new()?;
    let mut buf = Vec::with_capacity(1024);
    let key_len = KEY_LEN as u64;
    let mut pending = 0u64;
    for op in generator {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(v) = op.value() {
            v.fill(&mut buf);
        }
        let start = Instant::now();
        match &op {
            Operation::Insert { key, .. } | Operation::Update { key, .. } => {
                let _guard = tracker.lock(key.record());
                if matches!(op, Operation::Insert { .. }) {
                    engine.insert(key.as_bytes(), &buf)?;
                } else {
                    engine.update(key.as_bytes(), &buf)?;
                }
                tracker.set(key.record(), buf.len())?;
                t.app_written += key_len + buf.len() as u64;
            }
            Operation::Read { key } => match engine.read(key.as_bytes())? {
                Some(len) => t.app_read += key_len + len as u64,
                None => t.read_misses += 1,
            },
            Operation::Scan { start_key, len } => {
                let c = engine.scan(start_key.as_bytes(), *len)?;
                t.scan_pairs += c.pairs;
                t.app_read += c.bytes;
            }
            Operation::ReadModifyWrite { key, .. } if engine.rmw_is_merge() => {
                // A blind write: the first bytes of the new value as a field patch, no
                // longer than the record (its size stays what the tracker holds).
                let _guard = tracker.lock(key.record());
                let len = (tracker.get(key.record()) as usize)
                    .min(patch::PATCH_BYTES)
                    .min(buf.len());
                let delta = patch::delta(0, buf.get(..len).unwrap_or_default());
                engine.merge(key.as_bytes(), &delta)?;
                t.app_written += key_len + delta.len() as u64;
            }
            Operation::ReadModifyWrite { key, .. } => {
                let _guard = tracker.lock(key.record());
                match engine.read_modify_write(key.as_bytes(), &buf)? {
                    Some(len) => t.app_read += key_len + len as u64,
                    None => t.read_misses += 1,
                }
                tracker.set(key.record(), buf.len())?;
                t.app_written += key_len + buf.len() as u64;
            }
        }
        let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let i = kind_index(op.kind());
        t.hist[i].saturating_record(nanos.max(1));
        t.counts[i] += 1;
        pending += 1;
        if pending == PROGRESS_STEP {
            done.fetch_add(pending, Ordering::Relaxed);
            pending = 0;
        }
    }
    done.fetch_add(pending, Ordering::Relaxed);
    Ok((t, Instant::now()))
}

fn progress_bar(show: bool, total: u64, prefix: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:>24} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg} eta {eta}",
    ) {
        pb.set_style(style);
    }
    pb.set_prefix(prefix);
    pb
}

/// Runs every operation of the phase on `threads` client threads, with a progress bar.
fn run_operations(
    engine: &dyn Engine,
    workload: &Workload,
    plan: &PhasePlan,
    tracker: &LiveTracker,
    total: u64,
) -> Result<(WorkerTotals, Duration)> {
    let threads = plan.threads.max(1);
    let generators = (0..threads as u64)
        .map(|i| match plan.phase {
            Phase::Load => Ok(workload.load_generator(i)),
            Phase::Run => workload.run_generator(i),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let pb = progress_bar(
        plan.progress,
        total,
        format!(
            "{} {} {}",
            plan.engine,
            plan.phase.name(),
            plan.workload_name
        ),
    );
    let start = Instant::now();
    let results: Vec<Result<(WorkerTotals, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = generators
            .into_iter()
            .map(|g| {
                let (done, stop) = (&done, &stop);
                s.spawn(move || {
                    let r = worker(engine, g, tracker, done, stop);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        let mut last = (Instant::now(), 0u64);
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
            let n = done.load(Ordering::Relaxed);
            let dt = last.0.elapsed().as_secs_f64();
            if dt >= 1.0 {
                let rate = (n - last.1) as f64 / dt / 1e3;
                pb.set_message(format!("{rate:.1} Kops/s"));
                last = (Instant::now(), n);
            }
            pb.set_position(n);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Usage("a client thread panicked".into())))
            })
            .collect()
    });
    pb.finish_and_clear();
    // The phase ends when its last client thread does (not when the progress loop
    // notices, which is up to 100 ms later).
    let mut totals = WorkerTotals::new()?;
    let mut end = start;
    for r in results {
        let (t, finished) = r?;
        totals.merge(&t)?;
        end = end.max(finished);
    }
    Ok((totals, end.duration_since(start)))
}

fn latency_summary(h: &Histogram<u64>) -> Latency {
    let us = |ns: u64| ns as f64 / 1e3;
    Latency {
        count: h.len(),
        mean: h.mean() / 1e3,
        p50: us(h.value_at_quantile(0.50)),
        p99: us(h.value_at_quantile(0.99)),
        p999: us(h.value_at_quantile(0.999)),
        max: us(h.max()),
    }
}

fn insert_order_name(o: InsertOrder) -> &'static str {
    match o {
        InsertOrder::Hashed => "hashed",
        InsertOrder::Ordered => "ordered",
    }
}

/// Runs one phase of one engine, measures it, saves the runner state and returns the
/// result (not yet appended to any results file).
pub fn run_phase(plan: &PhasePlan) -> Result<PhaseRecord> {
    let dir = EngineDir::new(&plan.bench_root, plan.engine);
    let db_dir = dir.db();
    let mut spec = plan.spec;
    let previous = dir.state()?;
    let (tracker, records_before, mut state) = match plan.phase {
        Phase::Load => {
            if previous.is_some() || db_dir.exists() {
                return Err(BenchError::Usage(format!(
                    "{} already holds a database: delete it or choose another --db to load anew",
                    db_dir.display()
                )));
            }
            if spec.record_count == 0 {
                return Err(BenchError::Usage(
                    "the load needs at least one record".into(),
                ));
            }
            let tracker = LiveTracker::new(spec.record_count)?;
            let state = EngineState {
                engine: plan.engine.name().to_string(),
                records: spec.record_count,
                loaded_records: spec.record_count,
                mix: spec.value_mix.name().to_string(),
                insert_order: insert_order_name(spec.insert_order).to_string(),
                seed: plan.seed,
                cache_bytes: plan.config.cache_bytes,
                memtable_bytes: plan.config.memtable_bytes,
                history: Vec::new(),
            };
            (tracker, 0, state)
        }
        Phase::Run => {
            let Some(state) = previous else {
                return Err(BenchError::Usage(format!(
                    "no loaded {} database in {}: run `--phase load` with this --db first",
                    plan.engine,
                    plan.bench_root.display()
                )));
            };
            if spec.operation_count == 0 {
                return Err(BenchError::Usage(
                    "the run needs an operation count (--ops or operationcount)".into(),
                ));
            }
            spec.record_count = state.records;
            spec.insert_order = if state.insert_order == "ordered" {
                InsertOrder::Ordered
            } else {
                InsertOrder::Hashed
            };
            let lens = LiveTracker::load_lens(&dir.lens_path())?;
            if lens.len() as u64 != state.records {
                return Err(BenchError::Usage(format!(
                    "{} is damaged: {} records tracked, state says {}",
                    dir.lens_path().display(),
                    lens.len(),
                    state.records
                )));
            }
            let inserts = if spec.proportions.normalized().insert > 0.0 {
                spec.operation_count
            } else {
                0
            };
            let tracker = LiveTracker::from_lens(lens, state.records + inserts)?;
            (tracker, state.records, state)
        }
    };
    let workload = Workload::new(spec)?.with_seed(plan.seed);
    let total = match plan.phase {
        Phase::Load => spec.record_count,
        Phase::Run => spec.operation_count,
    };

    // The peak this phase reaches, from what the process holds before it opens the engine.
    let peak_reset = sys::reset_peak_resident();
    let rss0 = sys::resident_bytes().map(|(now, _)| now);
    let (io0, cpu0) = (DeviceIo::now(), CpuTime::now());
    let reads0 = sys::device_reads(&db_dir);
    let t = Instant::now();
    let engine = plan.engine.open(&db_dir, &plan.config)?;
    let open_seconds = t.elapsed().as_secs_f64();
    let options: EngineOptions = engine.options();
    let (totals, ops_time) = run_operations(engine.as_ref(), &workload, plan, &tracker, total)?;
    let t = Instant::now();
    engine.finish()?;
    let finish_seconds = t.elapsed().as_secs_f64();
    let engine_stats = engine.stats().unwrap_or(serde_json::Value::Null);
    let peak_rss = sys::resident_bytes()
        .filter(|_| peak_reset)
        .map(|(_, peak)| peak);
    let t = Instant::now();
    drop(engine);
    let close_seconds = t.elapsed().as_secs_f64();
    let (io1, cpu1) = (DeviceIo::now(), CpuTime::now());
    let disk_reads = match (reads0, sys::device_reads(&db_dir)) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let device_reads = disk_reads.map(|d| d.reads);
    let device_read_ms = disk_reads.map(|d| d.read_ms);

    let io = match (io0, io1) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let cpu = cpu1.since(&cpu0);
    let disk_bytes = sys::allocated_bytes(&db_dir)?;
    let records_after = match plan.phase {
        Phase::Load => spec.record_count,
        Phase::Run => workload.record_total(),
    };
    let live_bytes = tracker.live_bytes();
    state.records = records_after;
    state
        .history
        .push(format!("{} {}", plan.phase.name(), plan.workload_name));
    dir.save(&state, &tracker)?;

    let operations: u64 = totals.counts.iter().sum();
    let ops_seconds = ops_time.as_secs_f64();
    let mhz = sys::cpu_mhz();
    let p = spec.proportions.normalized();
    let mut op_counts = BTreeMap::new();
    let mut latency_us = BTreeMap::new();
    for (i, kind) in OperationKind::ALL.into_iter().enumerate() {
        if totals.counts[i] > 0 {
            op_counts.insert(kind_name(kind).to_string(), totals.counts[i]);
            latency_us.insert(
                kind_name(kind).to_string(),
                latency_summary(&totals.hist[i]),
            );
        }
    }
    let device_read = io.map(|d| d.read_bytes);
    // Dirty page-cache bytes of files deleted before writeback (a WAL file removed after
    // its flush) were counted in write_bytes but never reached the device.
    let device_written = io.map(|d| d.write_bytes.saturating_sub(d.cancelled_write_bytes));
    Ok(PhaseRecord {
        schema: SCHEMA_VERSION,
        label: plan.label.clone(),
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        engine: plan.engine.name().to_string(),
        engine_options: options,
        phase: plan.phase.name().to_string(),
        workload: plan.workload_name.clone(),
        mix: spec.value_mix.name().to_string(),
        distribution: spec.request_distribution.name().to_string(),
        proportions: match plan.phase {
            Phase::Load => Mix {
                insert: 1.0,
                ..Mix::default()
            },
            Phase::Run => Mix {
                read: p.read,
                update: p.update,
                insert: p.insert,
                scan: p.scan,
                read_modify_write: p.read_modify_write,
            },
        },
        records_before,
        records_after,
        operations,
        op_counts,
        threads: plan.threads.max(1),
        seed: plan.seed,
        cache_bytes: plan.config.cache_bytes,
        memtable_bytes: plan.config.memtable_bytes,
        direct_io: plan.config.direct_io,
        bloom: plan.config.bloom,
        open_seconds,
        ops_seconds,
        finish_seconds,
        close_seconds,
        throughput_kops: if ops_seconds > 0.0 {
            operations as f64 / ops_seconds / 1e3
        } else {
            0.0
        },
        latency_us,
        read_misses: totals.read_misses,
        scan_pairs: totals.scan_pairs,
        app_bytes_written: totals.app_written,
        app_bytes_read: totals.app_read,
        device_bytes_read: device_read,
        device_reads,
        device_read_ms,
        device_bytes_written: device_written,
        io_amplification: record::io_amplification(
            device_read,
            device_written,
            totals.app_read,
            totals.app_written,
        ),
        cpu_user_seconds: cpu.user,
        cpu_sys_seconds: cpu.sys,
        cpu_us_per_op: record::cpu_us_per_op(cpu.total(), operations),
        cpu_mhz: mhz,
        kcycles_per_op: record::kcycles_per_op(cpu.total(), mhz, operations),
        disk_bytes,
        live_bytes,
        space_amplification: record::space_amplification(disk_bytes, live_bytes),
        engine_stats,
        memory_limit_bytes: plan.memory_limit,
        rss_start_bytes: rss0,
        peak_rss_bytes: peak_rss,
        host: Host::detect(),
    })
}

/// The mean key + value size of a pair under `mix`, in bytes.
pub fn mean_pair_bytes(mix: ValueMix) -> f64 {
    KEY_LEN as f64 + mix.mean_value_len()
}

/// How many times the memtable the loaded data is, at least, when no memtable is asked
/// for: the tree is then at least three levels deep for every engine (hybridkv: L1 up to
/// 8 memtables, L2 64, L3 512; RocksDB with its level base at 8 memtables and a multiplier
/// of 8, which the adapter sets), as in the paper, whose data is about 350 memtables.
pub const DEPTH: u64 = 256;

/// The cache every engine gets when none is asked for: a fifth of the loaded data, rounded
/// up to whole MiB, between 4 MiB and 2 GiB (the paper's fixed cache at 40 million pairs).
pub fn auto_cache_bytes(records: u64, mix: ValueMix) -> u64 {
    let data = records as f64 * mean_pair_bytes(mix);
    let mib = (data / 5.0 / (1u64 << 20) as f64).ceil() as u64;
    mib.clamp(4, 2048) << 20
}

/// The memtable every engine gets when none is asked for: the loaded data over [`DEPTH`],
/// rounded down to 64 KiB, between 256 KiB and 64 MiB (the paper's). With a memtable that
/// is a large share of the data, the tree has two levels, the flush writes medium pairs
/// straight into the last one and the transient log is never used.
pub fn auto_memtable_bytes(records: u64, mix: ValueMix) -> u64 {
    let data = records as f64 * mean_pair_bytes(mix);
    let unit = 64u64 << 10;
    let units = (data / DEPTH as f64 / unit as f64).floor() as u64;
    (units * unit).clamp(256 << 10, 64 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_memtable_keeps_the_data_at_least_depth_memtables_within_bounds() {
        // SD: 251 bytes per pair; 40 M pairs = 10.04 GB -> 37.4 MiB, rounded down.
        let m = auto_memtable_bytes(40_000_000, ValueMix::SD);
        assert_eq!(m % (64 << 10), 0);
        assert!(40_000_000 * 251 / m >= DEPTH, "{m}");
        assert!(m > 37 << 20 && m < 38 << 20, "{m}");
        assert_eq!(auto_memtable_bytes(1_000_000_000, ValueMix::SD), 64 << 20);
        assert_eq!(auto_memtable_bytes(1_000, ValueMix::S), 256 << 10);
        let quick = auto_memtable_bytes(1_000_000, ValueMix::SD);
        assert!(1_000_000 * 251 / quick >= DEPTH, "{quick}");
    }

    #[test]
    fn auto_cache_is_a_fifth_of_the_data() {
        // SD: 24 + (0.6*9 + 0.2*104 + 0.2*1004) = 251 bytes per pair.
        let c = auto_cache_bytes(4_000_000, ValueMix::SD);
        let fifth = 4_000_000.0 * 251.0 / 5.0;
        assert!(
            (c as f64) >= fifth && (c as f64) < fifth + (1 << 20) as f64,
            "{c}"
        );
        assert_eq!(auto_cache_bytes(10, ValueMix::S), 4 << 20);
        assert_eq!(auto_cache_bytes(100_000_000, ValueMix::MD), 2 << 30);
    }
}
