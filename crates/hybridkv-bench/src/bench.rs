//! The whole benchmark of one invocation: resolve the workload, run the asked phases for
//! each engine in turn, append the results and print the comparison.

use crate::engine::{EngineConfig, EngineKind};
use crate::error::{BenchError, Result};
use crate::memlimit::{self, MemoryLimit};
use crate::record::{self, PhaseRecord};
use crate::report;
use crate::runner::{self, EngineDir, Phase, PhasePlan};
use hybridkv_ycsb::{ValueMix, Workload, WorkloadSpec};
use std::io::Write;
use std::path::{Path, PathBuf};

/// How big a run is when records and operations are not given: every preset keeps the
/// data at least [`runner::DEPTH`] times the memtable (so every engine builds three levels
/// or more) and differs only in the number of records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    /// 300,000 records and operations: a check in a minute, at the same depth.
    Quick,
    /// 1,000,000 records and operations: the README's first command (a few minutes for
    /// five engines).
    #[default]
    Default,
    /// 40,000,000 records (10 GB of SD pairs), 10,000,000 operations: the paper's depth.
    Paper,
}

impl Scale {
    /// Records loaded.
    pub const fn records(self) -> u64 {
        match self {
            Scale::Quick => 300_000,
            Scale::Default => 1_000_000,
            Scale::Paper => 40_000_000,
        }
    }

    /// Run-phase operations.
    pub const fn ops(self) -> u64 {
        match self {
            Scale::Quick => 300_000,
            Scale::Default => 1_000_000,
            Scale::Paper => 10_000_000,
        }
    }

    /// The name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Scale::Quick => "quick",
            Scale::Default => "default",
            Scale::Paper => "paper",
        }
    }
}

/// Value mix by default (the paper's small-dominated mix).
pub const DEFAULT_MIX: ValueMix = ValueMix::SD;

/// Where the workload comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadSource {
    /// A YCSB core workload, `a`..`f`.
    Core(char),
    /// A YCSB property file.
    File(PathBuf),
}

/// Which phases to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseChoice {
    /// Only the load (a new database).
    Load,
    /// Only the run (a database loaded earlier with the same `--db`).
    Run,
    /// Load, close, reopen, run: two measured phases per engine.
    All,
}

/// Everything `hybridkv bench` can be asked.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Engines, run one after the other.
    pub engines: Vec<EngineKind>,
    /// The workload.
    pub workload: WorkloadSource,
    /// Value mix (default: the property file's `valuemix`, else SD).
    pub mix: Option<ValueMix>,
    /// Default records and operations (`Scale::records`, `Scale::ops`).
    pub scale: Scale,
    /// Records to load (default: the property file's `recordcount`, else the scale's).
    pub records: Option<u64>,
    /// Run operations (default: the property file's `operationcount`, else the scale's).
    pub ops: Option<u64>,
    /// Client threads.
    pub threads: usize,
    /// Cache bytes (default: a fifth of the loaded data, 4 MiB..2 GiB, or what the load
    /// used).
    pub cache_bytes: Option<u64>,
    /// Memtable bytes (default: the loaded data over `runner::DEPTH`, 256 KiB..64 MiB, or
    /// what the load used).
    pub memtable_bytes: Option<u64>,
    /// Direct I/O.
    pub direct_io: bool,
    /// Bloom filters.
    pub bloom: bool,
    /// The whole process under this memory limit, page cache included (a cgroup), and
    /// every engine's files evicted from the page cache before each phase.
    pub memory_limit: Option<u64>,
    /// Background threads per engine.
    pub background_threads: usize,
    /// The benchmark directory (one sub-directory per engine).
    pub db: PathBuf,
    /// Phases.
    pub phase: PhaseChoice,
    /// Results file to append to (`None`: none).
    pub results: Option<PathBuf>,
    /// Workload seed.
    pub seed: u64,
    /// Label recorded with the results.
    pub label: String,
    /// Progress bars.
    pub progress: bool,
    /// YCSB's read-modify-write as a merge (a field patch) where the engine has one.
    pub rmw_as_merge: bool,
    /// hybridkv reads through memory maps (`Options::mmap_reads`).
    pub mmap_reads: bool,
    /// Where hybridkv writes medium pairs in place (`None`: its default).
    pub medium_merge_level: Option<hybridkv::MediumMergeLevel>,
    /// Whether hybridkv prepopulates its cache (`None`: its default).
    pub prepopulate_cache: Option<bool>,
    /// hybridkv's reads around a missing leaf while its cache fills (`None`: its default).
    pub warm_read_bytes: Option<u64>,
    /// hybridkv's memory for large pointer tables (`None`: its default).
    pub large_pointer_table_bytes: Option<u64>,
    /// hybridkv's bytes of merging per wasted search (`None`: its default).
    pub merge_bytes_per_wasted_search: Option<u64>,
    /// hybridkv's spin on a direct read's completion (`None`: its default).
    pub read_spin_us: Option<u32>,
    /// hybridkv's garbage ratio at which a large-log segment is collected (`None`: its
    /// default).
    pub gc_threshold: Option<f64>,
    /// hybridkv's leaf size in bytes (`None`: its default).
    pub leaf_size: Option<usize>,
    /// Whether hybridkv reloads its cache at open (`None`: its default).
    pub reload_cache: Option<bool>,
}

/// The workload spec and its name for the results, from a core letter or a property file.
pub fn resolve_workload(
    source: &WorkloadSource,
    scale: Scale,
    mix: Option<ValueMix>,
    records: Option<u64>,
    ops: Option<u64>,
) -> Result<(WorkloadSpec, String, Vec<String>)> {
    let mut warnings = Vec::new();
    let (mut spec, name, from_file) = match source {
        WorkloadSource::Core(c) => (
            *Workload::core(*c)?.spec(),
            c.to_ascii_lowercase().to_string(),
            false,
        ),
        WorkloadSource::File(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| BenchError::io("read the workload file", path, e))?;
            let parsed = WorkloadSpec::parse(&text)
                .map_err(|e| BenchError::Usage(format!("workload file {}: {e}", path.display())))?;
            for k in parsed.unknown_keys {
                warnings.push(format!(
                    "{} line {}: `{}` is not used by this benchmark",
                    path.display(),
                    k.line,
                    k.key
                ));
            }
            (parsed.spec, path.display().to_string(), true)
        }
    };
    if let Some(m) = mix {
        spec.value_mix = m;
    } else if !from_file {
        spec.value_mix = DEFAULT_MIX;
    }
    if let Some(r) = records {
        spec.record_count = r;
    } else if !from_file || spec.record_count == 0 {
        spec.record_count = scale.records();
    }
    if let Some(o) = ops {
        spec.operation_count = o;
    } else if !from_file || spec.operation_count == 0 {
        spec.operation_count = scale.ops();
    }
    spec.validate()
        .map_err(|e| BenchError::Usage(format!("workload: {e}")))?;
    Ok((spec, name, warnings))
}

fn engine_config(opts: &BenchOptions, cache_bytes: u64, memtable_bytes: u64) -> EngineConfig {
    EngineConfig {
        cache_bytes,
        memtable_bytes,
        direct_io: opts.direct_io,
        bloom: opts.bloom,
        sync: false,
        background_threads: opts.background_threads,
        rmw_as_merge: opts.rmw_as_merge,
        mmap_reads: opts.mmap_reads,
        medium_merge_level: opts.medium_merge_level,
        prepopulate_cache: opts.prepopulate_cache,
        warm_read_bytes: opts.warm_read_bytes,
        large_pointer_table_bytes: opts.large_pointer_table_bytes,
        merge_bytes_per_wasted_search: opts.merge_bytes_per_wasted_search,
        read_spin_us: opts.read_spin_us,
        gc_threshold: opts.gc_threshold,
        leaf_size: opts.leaf_size,
        reload_cache: opts.reload_cache,
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn summary_line(r: &PhaseRecord) -> String {
    format!(
        "{:<17} {:<7} {} ops in {:.1} s = {:.1} Kops/s; finish {:.1} s; I/O amp {}; CPU {:.2} us/op; disk {:.1} MiB, space amp {}",
        r.engine,
        r.phase_label(),
        r.operations,
        r.ops_seconds,
        r.throughput_kops,
        r.finish_seconds,
        r.io_amplification.map_or("-".into(), |v| format!("{v:.2}")),
        r.cpu_us_per_op,
        mib(r.disk_bytes),
        r.space_amplification.map_or("-".into(), |v| format!("{v:.2}")),
    )
}

/// What the phase left behind, from the engine's own counters: the levels (the depth the
/// run reached) and, for hybridkv, the medium pairs that went through the transient log.
pub fn depth_line(r: &PhaseRecord) -> Option<String> {
    let s = &r.engine_stats;
    let levels = s.get("levels")?.as_array()?;
    let parts: Vec<String> = levels
        .iter()
        .filter_map(|l| {
            let level = l.get("level")?.as_u64()?;
            let runs = l.get("runs").or_else(|| l.get("files"))?.as_u64()?;
            if runs == 0 {
                return None;
            }
            Some(match l.get("file_bytes").and_then(|b| b.as_u64()) {
                Some(b) => format!("L{level} {runs} run(s) {:.1} MiB", mib(b)),
                None => format!("L{level} {runs} file(s)"),
            })
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    let mut line = format!("   levels: {}", parts.join(", "));
    let num = |pointer: &str| s.pointer(pointer).and_then(serde_json::Value::as_u64);
    if let Some(logged) = num("/medium_values_logged") {
        line.push_str(&format!(
            "\n   transient log: {logged} medium pairs logged ({:.1} MiB written), {} merged in place",
            mib(num("/bytes_written/transient_log").unwrap_or(0)),
            num("/medium_values_merged").unwrap_or(0),
        ));
        line.push_str(&format!(
            "; large log: {:.1} MiB written, {} segments freed by GC",
            mib(num("/bytes_written/large_log").unwrap_or(0)),
            num("/gc_segments_freed").unwrap_or(0),
        ));
    }
    if let (Some(reads), Some(hits), Some(misses)) = (
        num("/lookup_reads"),
        num("/cache_hits"),
        num("/cache_misses"),
    ) {
        let (gets, scans) = (num("/gets").unwrap_or(0), num("/scans").unwrap_or(0));
        if gets + scans > 0 {
            let lookups = hits + misses;
            line.push_str(&format!(
                "
   reads: {:.2} per get or scan ({gets} gets, {scans} scans); node cache {:.1}% hits; pinned indexes {:.1} MiB",
                reads as f64 / (gets + scans) as f64,
                if lookups == 0 { 0.0 } else { 100.0 * hits as f64 / lookups as f64 },
                mib(num("/pinned_index_bytes").unwrap_or(0)),
            ));
            let timed: Vec<String> = ["level_read", "large_log", "transient_log"]
                .iter()
                .filter_map(|c| {
                    let ops = num(&format!("/read_ops/{c}"))?;
                    let us = num(&format!("/read_us/{c}"))?;
                    let timed = num(&format!("/timed_reads/{c}"))?;
                    (ops > 0).then(|| {
                        let each = if timed == 0 {
                            "all in batches, not timed".to_string()
                        } else {
                            format!("{:.1} us each", us as f64 / timed as f64)
                        };
                        let batched = if timed > 0 && timed < ops {
                            format!(" ({} in batches, not timed)", ops - timed)
                        } else {
                            String::new()
                        };
                        format!(
                            "{c} {:.3} per get or scan, {each}{batched}",
                            ops as f64 / (gets + scans) as f64,
                        )
                    })
                })
                .collect();
            if !timed.is_empty() {
                line.push_str(&format!("\n   read calls: {}", timed.join("; ")));
            }
            if let Some(by) = s
                .pointer("/gets_by_reads")
                .and_then(serde_json::Value::as_array)
            {
                let by: Vec<u64> = by.iter().filter_map(serde_json::Value::as_u64).collect();
                if gets > 0 && by.len() == 4 {
                    let share = |n: u64| 100.0 * n as f64 / gets as f64;
                    line.push_str(&format!(
                        "\n   gets by read calls: none {:.1}%, one {:.1}%, two {:.2}%, three or more {:.2}%",
                        share(by[0]),
                        share(by[1]),
                        share(by[2]),
                        share(by[3]),
                    ));
                }
            }
        }
    }
    Some(line)
}

/// The phase's resident memory: the process's peak and how far above what it held before
/// the engine opened, and for hybridkv the budget its options set (cache, memtables,
/// pinned indexes, Bloom filters) beside it.
pub fn memory_line(r: &PhaseRecord) -> Option<String> {
    let peak = r.peak_rss_bytes?;
    let mut line = format!("   memory: peak RSS {:.1} MiB", mib(peak));
    if let Some(start) = r.rss_start_bytes {
        line.push_str(&format!(
            " ({:+.1} MiB over the {:.1} MiB held before open)",
            mib(peak) - mib(start),
            mib(start)
        ));
    }
    let s = &r.engine_stats;
    let num = |pointer: &str| s.pointer(pointer).and_then(serde_json::Value::as_u64);
    if let Some(memtables) = num("/memtable_budget_bytes") {
        let pinned = num("/pinned_index_bytes").unwrap_or(0);
        let tables = num("/large_pointer_table_bytes").unwrap_or(0);
        let filters = num("/filter_bytes").unwrap_or(0);
        line.push_str(&format!(
            "; budget: cache {:.1} + memtables {:.1} + pinned {:.1} + large pointer tables {:.1} + filters {:.1} = {:.1} MiB",
            mib(r.cache_bytes),
            mib(memtables),
            mib(pinned),
            mib(tables),
            mib(filters),
            mib(r.cache_bytes + memtables + pinned + tables + filters)
        ));
    }
    Some(line)
}

/// Runs the benchmark; prints progress lines, each engine's options and the final
/// comparison to `out`; appends every result to the results file as soon as it exists.
pub fn run_bench(opts: &BenchOptions, out: &mut dyn Write) -> Result<Vec<PhaseRecord>> {
    let w = |out: &mut dyn Write, text: String| {
        writeln!(out, "{text}").map_err(|e| BenchError::io("write to", "stdout", e))
    };
    let (spec, workload_name, warnings) =
        resolve_workload(&opts.workload, opts.scale, opts.mix, opts.records, opts.ops)?;
    for warning in warnings {
        w(out, format!("note: {warning}"))?;
    }
    if opts.threads == 0 {
        return Err(BenchError::Usage("--threads must be at least 1".into()));
    }
    let phases: &[Phase] = match opts.phase {
        PhaseChoice::Load => &[Phase::Load],
        PhaseChoice::Run => &[Phase::Run],
        PhaseChoice::All => &[Phase::Load, Phase::Run],
    };
    // Check every engine before running any, so a mistake fails fast.
    for &engine in &opts.engines {
        let dir = EngineDir::new(&opts.db, engine);
        if phases.contains(&Phase::Load) && (dir.is_loaded() || dir.db().exists()) {
            return Err(BenchError::Usage(format!(
                "{} already holds a database: delete it or choose another --db to load anew",
                dir.db().display()
            )));
        }
        if phases == [Phase::Run] && !dir.is_loaded() {
            return Err(BenchError::Usage(format!(
                "no loaded {engine} database in {}: run `--phase load` with this --db first",
                opts.db.display()
            )));
        }
    }
    // Joined before any engine opens, so that everything the phases cache is charged to
    // the limit; left when the invocation ends.
    let limit = match opts.memory_limit {
        Some(bytes) => {
            let group = MemoryLimit::join(bytes)?;
            w(out, format!("memory limit: {}", group.describe()))?;
            Some(group)
        }
        None => None,
    };
    let mut all = Vec::new();
    for &engine in &opts.engines {
        for &phase in phases {
            let dir = EngineDir::new(&opts.db, engine);
            if limit.is_some() && phase == Phase::Run {
                // Pages cached by the load (perhaps another process, another cgroup) would
                // let the run read from memory outside the limit.
                memlimit::evict_page_cache(&dir.db())?;
            }
            let state = if phase == Phase::Run {
                dir.state()?
            } else {
                None
            };
            let mut phase_spec = spec;
            let cache = match (opts.cache_bytes, &state) {
                (Some(c), _) => c,
                (None, Some(s)) => s.cache_bytes,
                (None, None) => runner::auto_cache_bytes(spec.record_count, spec.value_mix),
            };
            let memtable = match (opts.memtable_bytes, &state) {
                (Some(m), _) => m,
                (None, Some(s)) => s.memtable_bytes,
                (None, None) => runner::auto_memtable_bytes(spec.record_count, spec.value_mix),
            };
            if let Some(s) = &state {
                phase_spec.record_count = s.records;
            }
            let plan = PhasePlan {
                engine,
                phase,
                workload_name: workload_name.clone(),
                spec: phase_spec,
                seed: opts.seed,
                threads: opts.threads,
                config: engine_config(opts, cache, memtable),
                bench_root: opts.db.clone(),
                progress: opts.progress,
                label: opts.label.clone(),
                memory_limit: limit.as_ref().map(MemoryLimit::limit),
            };
            if phase == Phase::Load || opts.phase == PhaseChoice::Run {
                w(
                    out,
                    format!(
                        "== {engine}: {} (mix {}, {} records, {} ops, {} thread(s), cache {}, memtable {}) ==",
                        plan.engine_options_line(),
                        phase_spec.value_mix.name(),
                        phase_spec.record_count,
                        phase_spec.operation_count,
                        opts.threads,
                        crate::engine::show_bytes(cache),
                        crate::engine::show_bytes(memtable)
                    ),
                )?;
            }
            let r = runner::run_phase(&plan)?;
            if phase == Phase::Load || opts.phase == PhaseChoice::Run {
                let o: Vec<String> = r
                    .engine_options
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                w(out, format!("   options: {}", o.join("; ")))?;
            }
            w(out, summary_line(&r))?;
            if let Some(line) = depth_line(&r) {
                w(out, line)?;
            }
            if let Some(line) = memory_line(&r) {
                w(out, line)?;
            }
            if let Some(path) = &opts.results {
                record::append(path, std::slice::from_ref(&r))?;
            }
            all.push(r);
        }
    }
    w(out, String::new())?;
    w(out, report::comparison_text(&all))?;
    if let Some(path) = &opts.results {
        w(
            out,
            format!(
                "results appended to {}; plot them with `hybridkv bench plot --results {} --out DIR`",
                path.display(),
                path.display()
            ),
        )?;
    }
    Ok(all)
}

impl PhasePlan {
    fn engine_options_line(&self) -> String {
        format!("{} {}", self.phase.name(), self.workload_name)
    }
}

/// Whether `path` is on a file system that accepts `O_DIRECT` (tmpfs does not).
pub fn direct_io_supported(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(".direct-io-probe");
    let ok = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with_stats(stats: serde_json::Value) -> PhaseRecord {
        PhaseRecord {
            engine_stats: stats,
            ..PhaseRecord::default()
        }
    }

    #[test]
    fn the_depth_line_shows_levels_and_the_transient_log() {
        let hybrid = with_stats(json!({
            "levels": [
                {"level": 1, "runs": 3, "file_bytes": 3u64 << 20},
                {"level": 2, "runs": 0, "file_bytes": 0},
                {"level": 3, "runs": 1, "file_bytes": 40u64 << 20},
            ],
            "medium_values_logged": 1234,
            "medium_values_merged": 1000,
            "bytes_written": {"transient_log": 2u64 << 20, "large_log": 5u64 << 20},
            "gc_segments_freed": 7,
            "lookup_reads": 60, "cache_hits": 30, "cache_misses": 10, "gets": 100, "scans": 0,
            "read_ops": {"level_read": 40, "large_log": 20, "transient_log": 0},
            "read_us": {"level_read": 2000, "large_log": 1400, "transient_log": 0},
            "timed_reads": {"level_read": 40, "large_log": 14, "transient_log": 0},
        }));
        let line = depth_line(&hybrid).unwrap();
        assert!(
            line.contains("read calls: level_read 0.400 per get or scan, 50.0 us each; large_log 0.200 per get or scan, 100.0 us each (6 in batches, not timed)"),
            "a component that read nothing is left out: {line}"
        );
        // A component whose reads all went in batches has no time to show.
        let mut batched = hybrid.clone();
        batched.engine_stats["read_ops"]["transient_log"] = json!(5);
        let line = depth_line(&batched).unwrap();
        assert!(
            line.ends_with("; transient_log 0.050 per get or scan, all in batches, not timed"),
            "{line}"
        );
        // Gets by the read calls each made, as shares of the gets.
        let mut counted = hybrid.clone();
        counted.engine_stats["gets_by_reads"] = json!([50, 40, 8, 2]);
        let line = depth_line(&counted).unwrap();
        assert!(
            line.ends_with(
                "\n   gets by read calls: none 50.0%, one 40.0%, two 8.00%, three or more 2.00%"
            ),
            "{line}"
        );
        assert!(
            line.contains("L1 3 run(s) 3.0 MiB, L3 1 run(s) 40.0 MiB"),
            "{line}"
        );
        assert!(!line.contains("L2"), "an empty level is left out: {line}");
        assert!(
            line.contains("1234 medium pairs logged (2.0 MiB written), 1000 merged"),
            "{line}"
        );
        assert!(
            line.contains("large log: 5.0 MiB written, 7 segments freed"),
            "{line}"
        );

        let rocks =
            with_stats(json!({"levels": [{"level": 0, "files": 2}, {"level": 6, "files": 9}]}));
        let line = depth_line(&rocks).unwrap();
        assert_eq!(line, "   levels: L0 2 file(s), L6 9 file(s)");
        assert!(!line.contains("transient"));

        assert!(depth_line(&with_stats(json!({"tables": 3}))).is_none());
        assert!(depth_line(&with_stats(serde_json::Value::Null)).is_none());
    }

    #[test]
    fn the_memory_line_sets_the_peak_beside_the_budget() {
        let mut r = with_stats(json!({
            "memtable_budget_bytes": 6u64 << 20,
            "pinned_index_bytes": 1u64 << 20,
            "large_pointer_table_bytes": 2u64 << 20,
            "filter_bytes": 1u64 << 19,
        }));
        assert!(memory_line(&r).is_none(), "no peak, no line");
        r.cache_bytes = 100 << 20;
        r.rss_start_bytes = Some(50 << 20);
        r.peak_rss_bytes = Some(200 << 20);
        let line = memory_line(&r).unwrap();
        assert!(
            line.contains("peak RSS 200.0 MiB (+150.0 MiB over the 50.0 MiB held before open)"),
            "{line}"
        );
        assert!(
            line.contains(
                "cache 100.0 + memtables 6.0 + pinned 1.0 + large pointer tables 2.0 + filters 0.5 = 109.5 MiB"
            ),
            "{line}"
        );
        let mut peer = with_stats(json!({"levels": []}));
        peer.peak_rss_bytes = Some(10 << 20);
        let line = memory_line(&peer).unwrap();
        assert!(!line.contains("budget"), "{line}");
    }

    #[test]
    fn every_scale_keeps_the_data_at_least_depth_memtables() {
        for scale in [Scale::Quick, Scale::Default, Scale::Paper] {
            for mix in [ValueMix::SD, ValueMix::MD] {
                let m = runner::auto_memtable_bytes(scale.records(), mix);
                let data = scale.records() as f64 * runner::mean_pair_bytes(mix);
                assert!(
                    data / m as f64 >= runner::DEPTH as f64,
                    "{} {}: data {data} over memtable {m}",
                    scale.name(),
                    mix.name()
                );
            }
        }
    }
}
