//! `hybridkv bench` from the command line: separate load and run invocations, plot and
//! report, and clear errors (never a panic) for bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn hybridkv(args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hybridkv"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn load_then_run_then_plot_and_report() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let d = dir.path();
    let common = [
        "--engines",
        "hybridkv,fjall",
        "--db",
        "db",
        "--results",
        "r.jsonl",
        "--mix",
        "MD",
        "--direct-io",
        "off",
        "--cache-mib",
        "8",
        "--memtable-mib",
        "1",
        "--no-progress",
    ];
    let mut load = vec!["bench", "--phase", "load", "--records", "2000"];
    load.extend(common);
    let o = hybridkv(&load, d);
    assert!(o.status.success(), "{}", text(&o));
    let mut run = vec![
        "bench",
        "--phase",
        "run",
        "--workload",
        "b",
        "--ops",
        "1000",
    ];
    run.extend(common);
    let o = hybridkv(&run, d);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("Run B") && out.contains("hybridkv / peer"),
        "{out}"
    );
    let lines = std::fs::read_to_string(d.join("r.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 4);

    let o = hybridkv(
        &["bench", "plot", "--results", "r.jsonl", "--out", "plots"],
        d,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(d.join("plots/bench-MD.png").exists());
    let o = hybridkv(
        &[
            "bench",
            "report",
            "--results",
            "r.jsonl",
            "--plots",
            "plots",
        ],
        d,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("| Run B | fjall |"));

    // A second load into the same directory is refused.
    let o = hybridkv(&load, d);
    assert!(!o.status.success());
    assert!(text(&o).contains("already holds"), "{}", text(&o));
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let d = dir.path();
    std::fs::write(d.join("bad.properties"), "readproportion=oops\n").unwrap();
    let cases: &[&[&str]] = &[
        &["bench", "--workload", "z"],
        &["bench", "--mix", "XL"],
        &["bench", "--engines", "leveldb"],
        &["bench", "--phase", "run"],
        &["bench", "--phase", "run", "--db", "empty"],
        &["bench", "--workload-file", "bad.properties", "--db", "x"],
        &[
            "bench",
            "--workload-file",
            "missing.properties",
            "--db",
            "y",
        ],
        &["bench", "--threads", "0", "--records", "10", "--db", "z"],
        &["bench", "--direct-io", "maybe"],
        &["bench", "plot", "--results", "missing.jsonl", "--out", "p"],
    ];
    for args in cases {
        let o = hybridkv(args, d);
        assert!(!o.status.success(), "{args:?} succeeded");
        let t = text(&o);
        assert!(!t.contains("panicked"), "{args:?}: {t}");
        assert!(t.contains("error"), "{args:?}: {t}");
    }
    if !cfg!(feature = "rocksdb") {
        let o = hybridkv(&["bench", "--engines", "rocksdb"], d);
        assert!(text(&o).contains("--features rocksdb"), "{}", text(&o));
    }
}
