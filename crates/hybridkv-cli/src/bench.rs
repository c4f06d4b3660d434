//! `hybridkv bench`: the YCSB benchmark (issue #6), and its `plot` and `report` tools.

use clap::{Args, Subcommand, ValueEnum};
use hybridkv_bench::bench::Scale;
use hybridkv_bench::{
    bench, plot, record, report, BenchOptions, EngineKind, PhaseChoice, WorkloadSource,
};
use hybridkv_ycsb::{ValueMix, Workload};
use std::path::PathBuf;

/// Options of `hybridkv bench`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub action: Option<BenchAction>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// The tools that work on a results file.
#[derive(Subcommand, Debug)]
pub enum BenchAction {
    /// Draw the PNG plots (throughput, I/O amplification, CPU per operation for each engine
    /// and phase; one file per value mix) from a results file.
    Plot {
        /// The results file (JSON lines).
        #[arg(long)]
        results: PathBuf,
        /// Directory for the PNG files.
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the Markdown of docs/BENCHMARKS.md from a results file.
    Report {
        /// The results file (JSON lines).
        #[arg(long)]
        results: PathBuf,
        /// Directory of the plots, relative to where the Markdown will live (e.g. `bench`).
        #[arg(long)]
        plots: Option<String>,
        /// A file with the machine's description (lscpu, nproc, free -h), included verbatim.
        #[arg(long)]
        machine: Option<PathBuf>,
        /// A file with the exact commands that produced the results, included verbatim.
        #[arg(long)]
        commands: Option<PathBuf>,
        /// A Markdown file with the reading of the results, included as is.
        #[arg(long)]
        notes: Option<PathBuf>,
        /// A note shown at the top (e.g. that the run is small-scale).
        #[arg(long)]
        banner: Option<String>,
    },
    /// List the engines built into this binary.
    Engines,
}

/// Phases to run.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseArg {
    /// Load a new database (needs --db).
    Load,
    /// Run the workload on a database loaded earlier with the same --db.
    Run,
    /// Load, reopen, run.
    All,
}

/// Default records and operations.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleArg {
    /// 300,000 records and operations.
    Quick,
    /// 1,000,000 records and operations.
    Default,
    /// 40,000,000 records, 10,000,000 operations (the paper's depth).
    Paper,
}

/// How the engines are set up.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigArg {
    /// The paper's: direct I/O, a fixed cache, Bloom filters off, no memory limit.
    Paper,
    /// What users run: buffered I/O, Bloom filters on, and the whole process under one
    /// memory limit that includes the page cache (a cgroup the harness creates and joins).
    Users,
}

/// Options of a benchmark run.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Size preset for records and operations (explicit --records / --ops win). Every
    /// preset sizes the memtable so that the data is at least 256 memtables (three levels
    /// or more for every engine).
    #[arg(long, value_enum, default_value = "default")]
    pub scale: ScaleArg,
    /// Engine configuration: the paper's (direct I/O, Bloom off) or the users' (buffered
    /// I/O, Bloom on, a memory limit including the page cache). --direct-io, --bloom and
    /// --memory-limit-mib override parts of it.
    #[arg(long, value_enum, default_value = "paper")]
    pub config: ConfigArg,
    /// The memory limit of the users' configuration in MiB, page cache included. Default:
    /// twice the cache plus 8 memtables plus 512 MiB. 0: no limit.
    #[arg(long)]
    pub memory_limit_mib: Option<u64>,
    /// Engines, comma-separated: hybridkv, hybridkv-inplace, hybridkv-alllog, hybridkv-ms,
    /// hybridkv-ml, hybridkv-kdsep (delta separation on), rocksdb, blobdb, fjall, fjall-kv,
    /// harness (no engine: the benchmark's own cost per operation); `default` = hybridkv
    /// and every built peer; `all` = every built engine (not the harness).
    #[arg(long, default_value = "default")]
    pub engines: String,
    /// YCSB core workload a..f.
    #[arg(long, default_value = "a", value_parser = parse_workload, conflicts_with = "workload_file")]
    pub workload: char,
    /// A YCSB property file instead of a core workload (recordcount, operationcount,
    /// proportions, requestdistribution, maxscanlength, insertorder, valuemix).
    #[arg(long)]
    pub workload_file: Option<PathBuf>,
    /// Value-size mix: S, M, L, SD, MD, LD (paper Table 1). Default SD (or the file's).
    #[arg(long, value_parser = parse_mix)]
    pub mix: Option<ValueMix>,
    /// Records to load. Default: the file's recordcount, else the scale's.
    #[arg(long)]
    pub records: Option<u64>,
    /// Operations of the run phase. Default: the file's operationcount, else the scale's.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Cache size in MiB for every engine. Default: a fifth of the loaded data, 4 MiB to
    /// 2 GiB.
    #[arg(long)]
    pub cache_mib: Option<u64>,
    /// Memtable (write buffer) size in MiB for every engine. Default: the loaded data over
    /// 256, rounded down to 64 KiB, between 256 KiB and 64 MiB.
    #[arg(long)]
    pub memtable_mib: Option<u64>,
    /// Direct I/O for reads and flush/compaction where the engine has it. Default: on with
    /// --config paper, off with --config users.
    #[arg(long, value_parser = ["on", "off"])]
    pub direct_io: Option<String>,
    /// Bloom filters on (10 bits per key) where the engine has them. Default: off with
    /// --config paper (as in the paper), on with --config users.
    #[arg(long)]
    pub bloom: bool,
    /// Background (flush/compaction) threads per engine.
    #[arg(long, default_value_t = 2)]
    pub background_threads: usize,
    /// YCSB's read-modify-write (workload F): `read-write` reads the record and writes it
    /// back; `merge` writes a 16-byte field patch as a delta that the engine's merge
    /// operator folds (hybridkv and RocksDB/BlobDB get the same operator; fjall has none).
    #[arg(long, default_value = "read-write", value_parser = ["read-write", "merge"])]
    pub rmw: String,
    /// hybridkv reads level files and log segments through memory maps
    /// (`Options::mmap_reads`; writes as --direct-io says). The peers are unchanged.
    #[arg(long)]
    pub mmap_reads: bool,
    /// Where hybridkv writes medium pairs in place (`Options::medium_merge_level`):
    /// the last level or the one above it. Default: the engine's default. The peers are
    /// unchanged.
    #[arg(long, value_parser = ["last", "second-to-last"])]
    pub medium_merge_level: Option<String>,
    /// Whether hybridkv puts what its flushes and merges write into its cache
    /// (`Options::prepopulate_cache`). Default: the engine's default (on).
    #[arg(long, value_parser = ["on", "off"])]
    pub prepopulate_cache: Option<String>,
    /// Bytes a leaf read that misses hybridkv's cache reads around the leaf while the
    /// cache has room (`Options::warm_read_bytes`; 0 turns it off). Default: the
    /// engine's default (64 KiB). The peers are unchanged.
    #[arg(long)]
    pub warm_read_bytes: Option<u64>,
    /// Memory for hybridkv's large pointer tables in MiB (`Options::
    /// large_pointer_table_bytes`; 0: no tables written or used). Default: the engine's
    /// default (256 MiB). The peers are unchanged.
    #[arg(long)]
    pub large_pointer_table_mib: Option<u64>,
    /// Bytes of merging one wasted search of a run pays for: hybridkv merges a level into
    /// the next once its runs' wasted searches times this reach what the merge rewrites
    /// (`Options::merge_bytes_per_wasted_search`; 0 turns it off). Default: the engine's
    /// default (256). The peers are unchanged.
    #[arg(long)]
    pub merge_bytes_per_wasted_search: Option<u64>,
    /// Whether hybridkv reads back at open what its cache held at the last close
    /// (`Options::reload_cache`). Default: the engine's default (off). The peers are
    /// unchanged.
    #[arg(long, value_parser = ["on", "off"])]
    pub reload_cache: Option<String>,
    /// Microseconds hybridkv spins on a direct read's completion before it sleeps
    /// (`Options::read_spin_us`; 0 sleeps at once). Default: the engine's default
    /// (200). The peers are unchanged.
    #[arg(long)]
    pub read_spin_us: Option<u32>,
    /// The garbage ratio (0 < r <= 1) at which hybridkv collects a large-log segment
    /// (`Options::gc_threshold`). Default: the engine's default. The peers are unchanged.
    #[arg(long)]
    pub gc_threshold: Option<f64>,
    /// hybridkv's leaf size in bytes (`Options::leaf_size`, a multiple of 4096 in
    /// 4 KiB ..= 1 MiB). Default: the engine's default (8 KiB). The peers are unchanged
    /// (RocksDB's block is 4 KiB).
    #[arg(long)]
    pub leaf_size: Option<usize>,
    /// Benchmark directory (one sub-directory per engine). Default: a temporary directory
    /// in the current one, deleted afterwards (only with --phase all).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Phases: load, run or all (load, reopen, run).
    #[arg(long, value_enum, default_value = "all")]
    pub phase: PhaseArg,
    /// Results file: one JSON line per phase and engine is appended.
    #[arg(long, default_value = "bench-results.jsonl")]
    pub results: PathBuf,
    /// Workload seed.
    #[arg(long, default_value_t = Workload::DEFAULT_SEED)]
    pub seed: u64,
    /// Label recorded with the results (groups results in reports and plots).
    #[arg(long, default_value = "")]
    pub label: String,
    /// Also draw this invocation's plots into this directory.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

fn parse_workload(s: &str) -> Result<char, String> {
    let mut chars = s.trim().chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if ('a'..='f').contains(&c.to_ascii_lowercase()) => {
            Ok(c.to_ascii_lowercase())
        }
        _ => Err(format!(
            "{s:?} is not a core workload: use a, b, c, d, e or f (or --workload-file FILE)"
        )),
    }
}

fn parse_mix(s: &str) -> Result<ValueMix, String> {
    s.parse::<ValueMix>().map_err(|e| e.to_string())
}

fn read_text(path: &Option<PathBuf>) -> Result<Option<String>, Box<dyn std::error::Error>> {
    match path {
        Some(p) => Ok(Some(
            std::fs::read_to_string(p).map_err(|e| format!("read {}: {e}", p.display()))?,
        )),
        None => Ok(None),
    }
}

/// Runs `hybridkv bench`.
pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    match args.action {
        Some(BenchAction::Plot { results, out }) => {
            let records = record::read_all(&results)?;
            if records.is_empty() {
                return Err(format!("{} holds no results", results.display()).into());
            }
            for f in plot::plot_all(&records, &out)? {
                println!("wrote {}", f.display());
            }
            Ok(())
        }
        Some(BenchAction::Report {
            results,
            plots,
            machine,
            commands,
            notes,
            banner,
        }) => {
            let records = record::read_all(&results)?;
            let inputs = report::ReportInputs {
                results_name: results.display().to_string(),
                plots_dir: plots,
                machine: read_text(&machine)?,
                commands: read_text(&commands)?,
                notes: read_text(&notes)?,
                banner,
            };
            print!("{}", report::markdown(&records, &inputs));
            Ok(())
        }
        Some(BenchAction::Engines) => {
            for k in EngineKind::ALL {
                println!(
                    "{:<17} {}",
                    k.name(),
                    if k.is_built() {
                        "built"
                    } else {
                        "not built (needs --features rocksdb)"
                    }
                );
            }
            Ok(())
        }
        None => run_benchmark(args.run),
    }
}

fn run_benchmark(a: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let engines = EngineKind::parse_list(&a.engines)?;
    let phase = match a.phase {
        PhaseArg::Load => PhaseChoice::Load,
        PhaseArg::Run => PhaseChoice::Run,
        PhaseArg::All => PhaseChoice::All,
    };
    let users = a.config == ConfigArg::Users;
    let direct_io = match a.direct_io.as_deref() {
        Some(v) => v == "on",
        None => !users,
    };
    let bloom = a.bloom || users;
    let scale = match a.scale {
        ScaleArg::Quick => Scale::Quick,
        ScaleArg::Default => Scale::Default,
        ScaleArg::Paper => Scale::Paper,
    };
    let tmp;
    let db = match &a.db {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("create {}: {e}", d.display()))?;
            d.clone()
        }
        None if phase == PhaseChoice::All => {
            tmp = tempfile::Builder::new()
                .prefix(".hybridkv-bench-")
                .tempdir_in(".")
                .map_err(|e| format!("create a temporary directory here: {e}"))?;
            tmp.path().to_path_buf()
        }
        None => {
            return Err(
                "--phase load and --phase run work on one database across invocations: give it with --db DIR"
                    .into(),
            )
        }
    };
    if direct_io && !bench::direct_io_supported(&db) {
        return Err(format!(
            "{} is on a file system without O_DIRECT (tmpfs?): choose another --db or pass --direct-io off",
            db.display()
        )
        .into());
    }
    if hybridkv_bench::sys::DeviceIo::now().is_none() {
        eprintln!("note: /proc/self/io is unavailable here: device bytes and I/O amplification will be missing");
    }
    let workload = match &a.workload_file {
        Some(f) => WorkloadSource::File(f.clone()),
        None => WorkloadSource::Core(a.workload),
    };
    let memory_limit = match (a.memory_limit_mib, users) {
        (Some(0), _) | (None, false) => None,
        (Some(m), _) => Some(m << 20),
        (None, true) => {
            let (spec, _, _) = bench::resolve_workload(&workload, scale, a.mix, a.records, a.ops)?;
            let cache = a.cache_mib.map_or_else(
                || hybridkv_bench::runner::auto_cache_bytes(spec.record_count, spec.value_mix),
                |m| m << 20,
            );
            let memtable = a.memtable_mib.map_or_else(
                || hybridkv_bench::runner::auto_memtable_bytes(spec.record_count, spec.value_mix),
                |m| m << 20,
            );
            Some(2 * cache + 8 * memtable + (512 << 20))
        }
    };
    let opts = BenchOptions {
        engines,
        workload,
        mix: a.mix,
        scale,
        records: a.records,
        ops: a.ops,
        threads: a.threads,
        cache_bytes: a.cache_mib.map(|m| m << 20),
        memtable_bytes: a.memtable_mib.map(|m| m << 20),
        direct_io,
        bloom,
        memory_limit,
        background_threads: a.background_threads,
        db,
        phase,
        results: Some(a.results.clone()),
        seed: a.seed,
        label: a.label.clone(),
        progress: !a.no_progress,
        rmw_as_merge: a.rmw == "merge",
        mmap_reads: a.mmap_reads,
        medium_merge_level: a.medium_merge_level.as_deref().map(|l| match l {
            "second-to-last" => hybridkv::MediumMergeLevel::SecondToLast,
            _ => hybridkv::MediumMergeLevel::Last,
        }),
        prepopulate_cache: a.prepopulate_cache.as_deref().map(|v| v == "on"),
        warm_read_bytes: a.warm_read_bytes,
        large_pointer_table_bytes: a.large_pointer_table_mib.map(|m| m << 20),
        merge_bytes_per_wasted_search: a.merge_bytes_per_wasted_search,
        read_spin_us: a.read_spin_us,
        gc_threshold: a.gc_threshold,
        leaf_size: a.leaf_size,
        reload_cache: a.reload_cache.as_deref().map(|v| v == "on"),
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let records = hybridkv_bench::run_bench(&opts, &mut out)?;
    if let Some(dir) = &a.plots {
        for f in plot::plot_all(&records, dir)? {
            println!("wrote {}", f.display());
        }
    }
    Ok(())
}
