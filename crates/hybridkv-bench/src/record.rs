//! One result per phase and engine ([`PhaseRecord`]), stored as one JSON line in a
//! results file. [`FIELDS`] documents every field; `docs/BENCHMARKS.md` prints that table
//! and a test checks that the JSON has exactly these fields.

use crate::error::{BenchError, Result};
use crate::sys::Host;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;

/// Version of the JSON-line schema (bumped when a field changes meaning).
pub const SCHEMA_VERSION: u32 = 1;

/// Latency of one operation type, in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Operations measured.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Slowest.
    pub max: f64,
}

/// The normalised operation proportions of a workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    /// Reads.
    pub read: f64,
    /// Updates.
    pub update: f64,
    /// Inserts.
    pub insert: f64,
    /// Scans.
    pub scan: f64,
    /// Read-modify-writes.
    pub read_modify_write: f64,
}

/// The result of one phase (load or run) of one engine. See [`FIELDS`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)] // documented field by field in FIELDS
pub struct PhaseRecord {
    pub schema: u32,
    pub label: String,
    pub unix_time: u64,
    pub engine: String,
    pub engine_options: BTreeMap<String, String>,
    pub phase: String,
    pub workload: String,
    pub mix: String,
    pub distribution: String,
    pub proportions: Mix,
    pub records_before: u64,
    pub records_after: u64,
    pub operations: u64,
    pub op_counts: BTreeMap<String, u64>,
    pub threads: usize,
    pub seed: u64,
    pub cache_bytes: u64,
    pub memtable_bytes: u64,
    pub direct_io: bool,
    pub bloom: bool,
    pub open_seconds: f64,
    pub ops_seconds: f64,
    pub finish_seconds: f64,
    pub close_seconds: f64,
    pub throughput_kops: f64,
    pub latency_us: BTreeMap<String, Latency>,
    pub read_misses: u64,
    pub scan_pairs: u64,
    pub app_bytes_written: u64,
    pub app_bytes_read: u64,
    pub device_bytes_read: Option<u64>,
    #[serde(default)]
    pub device_reads: Option<u64>,
    #[serde(default)]
    pub device_read_ms: Option<u64>,
    pub device_bytes_written: Option<u64>,
    pub io_amplification: Option<f64>,
    pub cpu_user_seconds: f64,
    pub cpu_sys_seconds: f64,
    pub cpu_us_per_op: f64,
    pub cpu_mhz: Option<f64>,
    pub kcycles_per_op: Option<f64>,
    pub disk_bytes: u64,
    pub live_bytes: u64,
    pub space_amplification: Option<f64>,
    pub engine_stats: serde_json::Value,
    #[serde(default)]
    pub memory_limit_bytes: Option<u64>,
    /// Resident memory of the process just before the engine opened.
    #[serde(default)]
    pub rss_start_bytes: Option<u64>,
    /// Peak resident memory of the process during the phase (open to the end of finish).
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    pub host: Host,
}

/// Every top-level field of a JSON line, with its meaning.
pub const FIELDS: &[(&str, &str)] = &[
    ("schema", "schema version (1)"),
    ("label", "free text naming the run (`--label`; the matrix script sets the scale, e.g. `matrix-4000000`)"),
    ("unix_time", "when the phase ended, seconds since 1970"),
    ("engine", "engine name: hybridkv, hybridkv-inplace, hybridkv-alllog, hybridkv-ms, hybridkv-ml, hybridkv-kdsep, rocksdb, blobdb, fjall, fjall-kv"),
    ("engine_options", "the options the engine ran with (name -> value text), as the adapter set them"),
    ("phase", "`load` (inserts of records 0..N) or `run` (the workload's operation mix)"),
    ("workload", "core workload letter `a`..`f`, or the path of a YCSB property file"),
    ("mix", "value-size mix: S, M, L, SD, MD, LD (paper Table 1)"),
    ("distribution", "request distribution: zipfian, latest or uniform"),
    ("proportions", "normalised operation proportions {read, update, insert, scan, read_modify_write}"),
    ("records_before", "records in the database when the phase started"),
    ("records_after", "records in the database when it ended (run-phase inserts add records)"),
    ("operations", "operations executed"),
    ("op_counts", "operations per type (read, update, insert, scan, read_modify_write)"),
    ("threads", "client threads"),
    ("seed", "workload seed"),
    ("cache_bytes", "cache size every engine was given"),
    ("memtable_bytes", "memtable / write-buffer size every engine was given"),
    ("direct_io", "direct I/O asked for (see engine_options for what each engine does with it)"),
    ("bloom", "Bloom filters asked for"),
    ("open_seconds", "time to open (or recover) the database"),
    ("ops_seconds", "time from the first operation to the last (throughput's denominator)"),
    ("finish_seconds", "time to flush the memtable and wait for background work at the end"),
    ("close_seconds", "time to close the database"),
    ("throughput_kops", "operations / ops_seconds / 1000"),
    ("latency_us", "per operation type: {count, mean, p50, p99, p999, max} in microseconds"),
    ("read_misses", "reads (and read-modify-writes) that found no value; 0 unless something is wrong"),
    ("scan_pairs", "pairs returned by scans"),
    ("app_bytes_written", "key + value bytes written by the application"),
    ("app_bytes_read", "key + value bytes returned to the application (reads, scans, read-modify-writes)"),
    ("device_bytes_read", "`read_bytes` delta of /proc/self/io over open + operations + finish + close (null if unavailable)"),
    ("device_reads", "reads completed by the block device holding the database (`/proc/diskstats`) over the same span: every process's reads of that device, so run nothing else beside the benchmark (null if unavailable)"),
    ("device_read_ms", "milliseconds the device's reads of that span took from issue to completion, summed over reads (`/proc/diskstats`' seventh column; reads in flight together each count their whole time): `device_read_ms` * 1000 / `device_reads` is the mean time a device read took, the device's speed in that phase whatever the engine's CPU (null if unavailable)"),
    ("device_bytes_written", "`write_bytes` minus `cancelled_write_bytes` delta of /proc/self/io over the same span: bytes written to the device, less dirty page-cache bytes of files deleted before writeback (null if unavailable)"),
    ("io_amplification", "(device_bytes_read + device_bytes_written) / (app_bytes_read + app_bytes_written)"),
    ("cpu_user_seconds", "user CPU seconds of the process (all threads) over the same span (getrusage)"),
    ("cpu_sys_seconds", "system CPU seconds over the same span"),
    ("cpu_us_per_op", "(cpu_user_seconds + cpu_sys_seconds) / operations, in microseconds"),
    ("cpu_mhz", "processor frequency from /proc/cpuinfo (mean over CPUs), null if unknown"),
    ("kcycles_per_op", "CPU seconds x cpu_mhz / operations, in thousands of cycles"),
    ("disk_bytes", "allocated bytes of every file in the database directory after the phase (what du reports)"),
    ("live_bytes", "key + current value bytes of every record, tracked by the runner"),
    ("space_amplification", "disk_bytes / live_bytes"),
    ("engine_stats", "the engine's own counters after the phase (hybridkv: bytes written/read per component, flushes, compactions, GC; null if none)"),
    ("memory_limit_bytes", "the memory limit (a cgroup; page cache included) the whole benchmark process ran under, null for none (`--config users` sets one; every engine's files are evicted from the page cache before a run phase)"),
    ("rss_start_bytes", "resident memory of the benchmark process just before the engine opened (VmRSS; the harness and what earlier phases left), null where /proc/self/status is unavailable"),
    ("peak_rss_bytes", "peak resident memory of the process from the engine's open to the end of its finish (VmHWM, reset at the phase's start through /proc/self/clear_refs; memory-mapped file pages count), null where it cannot be reset"),
    ("host", "{cpus, cpu_model, mem_bytes, kernel} of the machine"),
];

/// `(device read + written) / (application read + written)`; `None` when the device
/// counters are unavailable or the application moved no bytes.
pub fn io_amplification(
    device_read: Option<u64>,
    device_written: Option<u64>,
    app_read: u64,
    app_written: u64,
) -> Option<f64> {
    let device = device_read? + device_written?;
    let app = app_read + app_written;
    (app > 0).then(|| device as f64 / app as f64)
}

/// `disk / live`; `None` when nothing is live.
pub fn space_amplification(disk_bytes: u64, live_bytes: u64) -> Option<f64> {
    (live_bytes > 0).then(|| disk_bytes as f64 / live_bytes as f64)
}

/// CPU microseconds per operation (0 for no operations).
pub fn cpu_us_per_op(cpu_seconds: f64, operations: u64) -> f64 {
    if operations == 0 {
        return 0.0;
    }
    cpu_seconds * 1e6 / operations as f64
}

/// Thousands of cycles per operation: CPU seconds x frequency / operations.
pub fn kcycles_per_op(cpu_seconds: f64, mhz: Option<f64>, operations: u64) -> Option<f64> {
    let mhz = mhz?;
    (operations > 0).then(|| cpu_seconds * mhz * 1e6 / operations as f64 / 1e3)
}

impl PhaseRecord {
    /// "Load A", "Run C", or "Run <file name>" for a property file.
    pub fn phase_label(&self) -> String {
        let w = if self.workload.chars().count() == 1 {
            self.workload.to_uppercase()
        } else {
            Path::new(&self.workload).file_stem().map_or_else(
                || self.workload.clone(),
                |s| s.to_string_lossy().into_owned(),
            )
        };
        match self.phase.as_str() {
            "load" => format!("Load {w}"),
            _ => format!("Run {w}"),
        }
    }

    /// Sort key of the phase: loads first, then runs A..F, then property files.
    pub fn phase_order(&self) -> (u8, String) {
        (u8::from(self.phase != "load"), self.workload.to_lowercase())
    }

    /// The record as one JSON line (no newline).
    pub fn to_json_line(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|source| BenchError::Json {
            what: "serialize a result".into(),
            source,
        })
    }
}

/// Appends `records` to the results file at `path` (created if absent), one JSON line each.
pub fn append(path: &Path, records: &[PhaseRecord]) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| BenchError::io("create", parent, e))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| BenchError::io("open", path, e))?;
    for r in records {
        let line = r.to_json_line()?;
        writeln!(f, "{line}").map_err(|e| BenchError::io("append to", path, e))?;
    }
    f.flush().map_err(|e| BenchError::io("append to", path, e))
}

/// Reads every record of a results file (blank lines are skipped).
pub fn read_all(path: &Path) -> Result<Vec<PhaseRecord>> {
    let f = std::fs::File::open(path).map_err(|e| BenchError::io("open", path, e))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| BenchError::io("read", path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let r: PhaseRecord = serde_json::from_str(&line).map_err(|source| BenchError::Json {
            what: format!("{} line {}", path.display(), i + 1),
            source,
        })?;
        out.push(r);
    }
    Ok(out)
}

/// Keeps the last record of each (label, mix, engine, phase, workload), in file order of
/// their last appearance: re-running a phase replaces its earlier result.
pub fn latest(records: &[PhaseRecord]) -> Vec<PhaseRecord> {
    let key = |r: &PhaseRecord| {
        (
            r.label.clone(),
            r.mix.clone(),
            r.engine.clone(),
            r.phase.clone(),
            r.workload.clone(),
        )
    };
    let mut out: Vec<PhaseRecord> = Vec::new();
    for r in records {
        out.retain(|o| key(o) != key(r));
        out.push(r.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amplifications_use_the_right_inputs() {
        // Device bytes over application bytes, reads and writes both.
        assert_eq!(io_amplification(Some(300), Some(700), 100, 400), Some(2.0));
        assert_eq!(io_amplification(None, Some(700), 100, 400), None);
        assert_eq!(io_amplification(Some(1), Some(1), 0, 0), None);
        // Disk over live.
        assert_eq!(space_amplification(1300, 1000), Some(1.3));
        assert_eq!(space_amplification(1300, 0), None);
        assert_eq!(cpu_us_per_op(2.0, 1_000_000), 2.0);
        assert_eq!(cpu_us_per_op(2.0, 0), 0.0);
        let k = kcycles_per_op(2.0, Some(2000.0), 1_000_000).unwrap();
        assert!((k - 4.0).abs() < 1e-9, "{k}");
        assert_eq!(kcycles_per_op(2.0, None, 10), None);
    }
}
