//! The runner and its metrics against real engines (hybridkv and fjall; RocksDB and
//! BlobDB too with `--features rocksdb`), on tiny workloads in temporary directories.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hybridkv_bench::engine::{EngineConfig, EngineKind};
use hybridkv_bench::record::{self, PhaseRecord, FIELDS};
use hybridkv_bench::runner::{run_phase, EngineDir, Phase, PhasePlan};
use hybridkv_bench::{bench, plot, report, BenchError};
use hybridkv_ycsb::{ValueMix, WorkloadSpec};
use std::path::Path;

fn tempdir() -> tempfile::TempDir {
    // Under the target directory: a real file system (not tmpfs), like a user's --db.
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn config() -> EngineConfig {
    EngineConfig {
        cache_bytes: 4 << 20,
        memtable_bytes: 1 << 20,
        direct_io: false,
        bloom: false,
        sync: false,
        background_threads: 2,
        rmw_as_merge: false,
        mmap_reads: false,
        medium_merge_level: None,
        prepopulate_cache: None,
        warm_read_bytes: None,
        large_pointer_table_bytes: None,
        merge_bytes_per_wasted_search: None,
        read_spin_us: None,
        gc_threshold: None,
        leaf_size: None,
        reload_cache: None,
    }
}

fn plan(
    engine: EngineKind,
    phase: Phase,
    workload: char,
    records: u64,
    ops: u64,
    root: &Path,
) -> PhasePlan {
    let mut spec = WorkloadSpec::core(workload).unwrap();
    spec.record_count = records;
    spec.operation_count = ops;
    spec.value_mix = ValueMix::SD;
    PhasePlan {
        engine,
        phase,
        workload_name: workload.to_string(),
        spec,
        seed: 42,
        threads: 1,
        config: config(),
        bench_root: root.to_path_buf(),
        progress: false,
        label: "test".into(),
        memory_limit: None,
    }
}

/// Key + value bytes of every pair in the engine's database, read back through the adapter.
fn scanned_bytes(engine: EngineKind, root: &Path) -> (u64, u64) {
    let e = engine
        .open(&EngineDir::new(root, engine).db(), &config())
        .unwrap();
    let c = e.scan(b"u", usize::MAX).unwrap();
    (c.pairs, c.bytes)
}

fn check_derived(r: &PhaseRecord) {
    let app = r.app_bytes_read + r.app_bytes_written;
    if let (Some(dr), Some(dw)) = (r.device_bytes_read, r.device_bytes_written) {
        let io = r.io_amplification.unwrap();
        assert!(
            (io - (dr + dw) as f64 / app as f64).abs() < 1e-9,
            "io amp of {r:?}"
        );
    }
    let space = r.space_amplification.unwrap();
    assert!((space - r.disk_bytes as f64 / r.live_bytes as f64).abs() < 1e-9);
    let cpu = r.cpu_user_seconds + r.cpu_sys_seconds;
    assert!((r.cpu_us_per_op - cpu * 1e6 / r.operations as f64).abs() < 1e-6);
    if let (Some(mhz), Some(k)) = (r.cpu_mhz, r.kcycles_per_op) {
        assert!((k - cpu * mhz * 1e3 / r.operations as f64).abs() < 1e-6);
    }
    assert!(r.disk_bytes > 0);
    assert!(r.throughput_kops > 0.0);
    let t = r.operations as f64 / r.ops_seconds / 1e3;
    assert!((r.throughput_kops - t).abs() < 1e-6 * t.max(1.0));
}

fn load_then_runs(engine: EngineKind) {
    let dir = tempdir();
    let root = dir.path();
    let n = 3000;

    let load = run_phase(&plan(engine, Phase::Load, 'a', n, 0, root)).unwrap();
    assert_eq!(load.operations, n);
    assert_eq!(load.op_counts.get("insert"), Some(&n));
    assert_eq!(load.records_after, n);
    assert_eq!(load.latency_us["insert"].count, n);
    // A load writes every record once: application bytes are the live bytes.
    assert_eq!(load.app_bytes_written, load.live_bytes);
    assert_eq!(load.app_bytes_read, 0);
    if let Some(w) = load.device_bytes_written {
        assert!(w > 0, "a load writes to the device");
    }
    check_derived(&load);
    assert_eq!(scanned_bytes(engine, root), (n, load.live_bytes));

    // Run A: reads and updates; updates change size classes, live bytes follow.
    let run_a = run_phase(&plan(engine, Phase::Run, 'a', n, 2000, root)).unwrap();
    assert_eq!(run_a.operations, 2000);
    assert_eq!(
        run_a.op_counts.values().sum::<u64>(),
        2000,
        "{:?}",
        run_a.op_counts
    );
    assert!(run_a.op_counts["read"] > 700 && run_a.op_counts["update"] > 700);
    assert_eq!(run_a.read_misses, 0);
    assert_eq!(run_a.records_before, n);
    assert_eq!(run_a.records_after, n);
    check_derived(&run_a);
    assert_eq!(scanned_bytes(engine, root), (n, run_a.live_bytes));

    // Run D inserts new records; Run E scans; Run F reads-modifies-writes.
    let run_d = run_phase(&plan(engine, Phase::Run, 'd', n, 2000, root)).unwrap();
    let inserted = run_d.op_counts["insert"];
    assert!(inserted > 40, "{:?}", run_d.op_counts);
    assert_eq!(run_d.records_after, n + inserted);
    assert_eq!(run_d.read_misses, 0);
    assert_eq!(
        scanned_bytes(engine, root),
        (n + inserted, run_d.live_bytes)
    );
    check_derived(&run_d);

    let run_e = run_phase(&plan(engine, Phase::Run, 'e', n, 300, root)).unwrap();
    assert_eq!(run_e.records_before, n + inserted);
    assert!(run_e.scan_pairs > 0 && run_e.app_bytes_read > 0);
    let scans = run_e.op_counts["scan"];
    assert!(run_e.scan_pairs <= scans * 100);
    let run_f = run_phase(&plan(engine, Phase::Run, 'f', n, 1000, root)).unwrap();
    assert!(run_f.op_counts["read_modify_write"] > 300);
    assert_eq!(run_f.read_misses, 0);
    let records_now = run_f.records_after;
    assert_eq!(scanned_bytes(engine, root), (records_now, run_f.live_bytes));

    // The results file round-trips.
    let results = root.join("results.jsonl");
    let all = vec![load, run_a, run_d, run_e, run_f];
    record::append(&results, &all[..2]).unwrap();
    record::append(&results, &all[2..]).unwrap();
    assert_eq!(record::read_all(&results).unwrap(), all);
}

/// Run F with read-modify-write as a merge: blind field patches, folded by the engine;
/// every record is still there at its size (a patch never extends a record).
fn run_f_as_merge(engine: EngineKind) {
    let dir = tempdir();
    let root = dir.path();
    let n = 3000;
    let load = run_phase(&plan(engine, Phase::Load, 'a', n, 0, root)).unwrap();
    let before = scanned_bytes(engine, root);
    let mut p = plan(engine, Phase::Run, 'f', n, 4000, root);
    p.config.rmw_as_merge = true;
    let run_f = run_phase(&p).unwrap();
    let rmw = run_f.op_counts["read_modify_write"];
    assert!(rmw > 1000, "{:?}", run_f.op_counts);
    // Reads are only the workload's reads: a merge reads nothing.
    assert!(run_f.app_bytes_read <= run_f.op_counts["read"] * 1100);
    assert_eq!(run_f.live_bytes, load.live_bytes);
    assert_eq!(before, (n, load.live_bytes));
    // Opened with the operator, every record folds to its loaded size.
    let mut c = config();
    c.rmw_as_merge = true;
    let e = engine.open(&EngineDir::new(root, engine).db(), &c).unwrap();
    let after = e.scan(b"u", usize::MAX).unwrap();
    assert_eq!((after.pairs, after.bytes), before);
}

#[test]
fn hybridkv_runs_f_as_merge() {
    run_f_as_merge(EngineKind::Hybridkv);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_runs_f_as_merge() {
    run_f_as_merge(EngineKind::RocksDb);
}

#[test]
fn hybridkv_load_and_runs() {
    load_then_runs(EngineKind::Hybridkv);
}

#[test]
fn fjall_load_and_runs() {
    load_then_runs(EngineKind::Fjall);
}

#[test]
fn fjall_kv_load_and_runs() {
    load_then_runs(EngineKind::FjallKv);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_load_and_runs() {
    load_then_runs(EngineKind::RocksDb);
}

#[cfg(feature = "rocksdb")]
#[test]
fn blobdb_load_and_runs() {
    load_then_runs(EngineKind::BlobDb);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_options_are_recorded() {
    let dir = tempdir();
    for kind in [EngineKind::RocksDb, EngineKind::BlobDb] {
        let e = kind.open(&dir.path().join(kind.name()), &config()).unwrap();
        let o = e.options();
        assert_eq!(o["compression"], "none (kNoCompression)");
        assert_eq!(o["bloom"], "off");
        assert!(o["blob_files"].starts_with(if kind == EngineKind::BlobDb {
            "on"
        } else {
            "off"
        }));
    }
}

#[test]
fn ablation_engines_run() {
    let dir = tempdir();
    for kind in [
        EngineKind::HybridkvInPlace,
        EngineKind::HybridkvAllLog,
        EngineKind::HybridkvMs,
        EngineKind::HybridkvMl,
        EngineKind::HybridkvKdsep,
    ] {
        let load = run_phase(&plan(kind, Phase::Load, 'a', 500, 0, dir.path())).unwrap();
        let run = run_phase(&plan(kind, Phase::Run, 'a', 500, 500, dir.path())).unwrap();
        assert_eq!(load.operations + run.operations, 1000);
        assert_eq!(scanned_bytes(kind, dir.path()), (500, run.live_bytes));
        assert!(!run.engine_options.is_empty());
    }
}

#[test]
fn several_threads_keep_live_bytes_exact() {
    let dir = tempdir();
    let root = dir.path();
    let mut p = plan(EngineKind::Hybridkv, Phase::Load, 'a', 4000, 0, root);
    p.threads = 2;
    let load = run_phase(&p).unwrap();
    assert_eq!(load.operations, 4000);
    assert_eq!(load.threads, 2);
    let mut p = plan(EngineKind::Hybridkv, Phase::Run, 'a', 4000, 6000, root);
    p.threads = 2;
    let run = run_phase(&p).unwrap();
    assert_eq!(run.operations, 6000);
    assert_eq!(
        scanned_bytes(EngineKind::Hybridkv, root),
        (4000, run.live_bytes)
    );
}

#[test]
fn every_documented_field_is_in_the_json_and_nothing_else() {
    let dir = tempdir();
    let r = run_phase(&plan(
        EngineKind::Hybridkv,
        Phase::Load,
        'a',
        200,
        0,
        dir.path(),
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.to_json_line().unwrap()).unwrap();
    let obj = v.as_object().unwrap();
    for (name, _) in FIELDS {
        assert!(
            obj.contains_key(*name),
            "field {name} missing from the JSON"
        );
    }
    for key in obj.keys() {
        assert!(
            FIELDS.iter().any(|(n, _)| n == key),
            "field {key} is not documented in FIELDS"
        );
    }
    // And docs/BENCHMARKS.md documents each one.
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/BENCHMARKS.md"
    ))
    .unwrap();
    for (name, _) in FIELDS {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/BENCHMARKS.md does not document `{name}`"
        );
    }
    for (kind, l) in &r.latency_us {
        assert!(
            l.p50 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max,
            "{kind}: {l:?}"
        );
    }
}

#[test]
fn phases_refuse_what_cannot_be_done() {
    let dir = tempdir();
    let root = dir.path();
    // A run before any load.
    let err = run_phase(&plan(EngineKind::Hybridkv, Phase::Run, 'a', 10, 10, root)).unwrap_err();
    assert!(
        matches!(err, BenchError::Usage(ref m) if m.contains("--phase load")),
        "{err}"
    );
    run_phase(&plan(EngineKind::Hybridkv, Phase::Load, 'a', 10, 0, root)).unwrap();
    // A second load into the same directory.
    let err = run_phase(&plan(EngineKind::Hybridkv, Phase::Load, 'a', 10, 0, root)).unwrap_err();
    assert!(
        matches!(err, BenchError::Usage(ref m) if m.contains("already holds")),
        "{err}"
    );
    // A run without an operation count.
    let err = run_phase(&plan(EngineKind::Hybridkv, Phase::Run, 'a', 10, 0, root)).unwrap_err();
    assert!(matches!(err, BenchError::Usage(_)), "{err}");
}

#[test]
fn property_files_are_read_and_bad_ones_rejected() {
    let dir = tempdir();
    let good = dir.path().join("w.properties");
    std::fs::write(
        &good,
        "recordcount=123\noperationcount=45\nreadproportion=0.2\nupdateproportion=0.8\nrequestdistribution=uniform\nvaluemix=MD\nfieldcount=3\n",
    )
    .unwrap();
    let (spec, name, warnings) = bench::resolve_workload(
        &bench::WorkloadSource::File(good.clone()),
        bench::Scale::Default,
        None,
        None,
        None,
    )
    .unwrap();
    assert_eq!(spec.record_count, 123);
    assert_eq!(spec.operation_count, 45);
    assert_eq!(spec.value_mix, ValueMix::MD);
    assert_eq!(name, good.display().to_string());
    assert_eq!(warnings.len(), 1, "fieldcount is reported as unused");
    // Flags override the file.
    let (spec, _, _) = bench::resolve_workload(
        &bench::WorkloadSource::File(good),
        bench::Scale::Default,
        Some(ValueMix::S),
        Some(7),
        Some(8),
    )
    .unwrap();
    assert_eq!(
        (spec.record_count, spec.operation_count, spec.value_mix),
        (7, 8, ValueMix::S)
    );

    let bad = dir.path().join("bad.properties");
    std::fs::write(&bad, "readproportion=2\n").unwrap();
    let err = bench::resolve_workload(
        &bench::WorkloadSource::File(bad),
        bench::Scale::Default,
        None,
        None,
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("readproportion"), "{err}");
    let missing = bench::resolve_workload(
        &bench::WorkloadSource::File(dir.path().join("nope")),
        bench::Scale::Default,
        None,
        None,
        None,
    );
    assert!(missing.is_err());
}

#[test]
fn whole_invocation_writes_results_table_report_and_plot() {
    let dir = tempdir();
    let results = dir.path().join("r.jsonl");
    let opts = bench::BenchOptions {
        engines: vec![EngineKind::Hybridkv, EngineKind::Fjall],
        workload: bench::WorkloadSource::Core('a'),
        mix: Some(ValueMix::MD),
        scale: bench::Scale::Default,
        records: Some(1000),
        ops: Some(1000),
        threads: 1,
        cache_bytes: None,
        memtable_bytes: Some(1 << 20),
        direct_io: false,
        bloom: false,
        memory_limit: None,
        background_threads: 2,
        db: dir.path().join("db"),
        phase: bench::PhaseChoice::All,
        results: Some(results.clone()),
        seed: 1,
        label: String::new(),
        progress: false,
        rmw_as_merge: false,
        mmap_reads: false,
        medium_merge_level: None,
        prepopulate_cache: None,
        warm_read_bytes: None,
        large_pointer_table_bytes: None,
        merge_bytes_per_wasted_search: None,
        read_spin_us: None,
        gc_threshold: None,
        leaf_size: None,
        reload_cache: None,
    };
    let mut out = Vec::new();
    let records = hybridkv_bench::run_bench(&opts, &mut out).unwrap();
    assert_eq!(records.len(), 4);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("hybridkv / peer"), "{text}");
    assert!(text.contains("Run A") && text.contains("Load A"));
    assert_eq!(record::read_all(&results).unwrap(), records);

    let md = report::markdown(
        &records,
        &report::ReportInputs {
            results_name: "r.jsonl".into(),
            plots_dir: Some("bench".into()),
            ..Default::default()
        },
    );
    assert!(md.contains("## Mix MD") && md.contains("bench/bench-MD.png"));
    assert!(md.contains("| Run A | fjall |"));

    let files = plot::plot_all(&records, &dir.path().join("plots")).unwrap();
    assert_eq!(files.len(), 1);
    let png = std::fs::read(&files[0]).unwrap();
    assert!(png.len() > 10_000 && png.starts_with(b"\x89PNG"));
}
