//! The `hybridkv` command line: inspection commands work, and errors print a message and
//! exit non-zero.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::process::{Command, Output};

fn hybridkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hybridkv"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn put_get_scan_delete_stats_space_check() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    assert!(hybridkv(&["put", "--db", db, "apple", "red"])
        .status
        .success());
    assert!(hybridkv(&["put", "--db", db, "avocado", "green"])
        .status
        .success());
    assert!(hybridkv(&["put", "--db", db, "banana", "yellow"])
        .status
        .success());
    let got = hybridkv(&["get", "--db", db, "apple"]);
    assert!(got.status.success());
    assert_eq!(stdout(&got), "red\n");
    let scan = hybridkv(&["scan", "--db", db, "--prefix", "a"]);
    assert_eq!(stdout(&scan), "apple\tred\navocado\tgreen\n");
    assert!(hybridkv(&["delete", "--db", db, "apple"]).status.success());
    let missing = hybridkv(&["get", "--db", db, "apple"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("key not found"));
    let stats = hybridkv(&["stats", "--db", db]);
    assert!(stats.status.success() && stdout(&stats).contains("write amplification"));
    let space = hybridkv(&["space", "--db", db]);
    assert!(
        space.status.success() && stdout(&space).contains("live data: 2 pairs"),
        "{}",
        stdout(&space)
    );
    let check = hybridkv(&["check", "--db", db]);
    assert!(
        check.status.success() && stdout(&check).contains("errors: 0"),
        "{}",
        stdout(&check)
    );
}

#[test]
fn errors_print_a_message_and_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    let o = hybridkv(&["get", "--db", missing.to_str().unwrap(), "k"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("error:") && err.contains("does not exist"),
        "{err}"
    );
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = hybridkv(&["put", "--db", file.to_str().unwrap(), "k", "v"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a file"));
    let db = dir.path().join("db");
    let o = hybridkv(&["put", "--db", db.to_str().unwrap(), "", "v"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("key is empty"));
    let o = hybridkv(&["demo", "--pairs", "10", "--mix", "XL"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown mix"));
}

#[test]
fn a_second_process_reads_an_open_database_but_cannot_write_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = hybridkv::Db::open(&path, hybridkv::Options::default()).unwrap();
    db.put(b"k", b"v").unwrap();
    // Another process (the CLI) reads it while this process holds it: reading commands
    // open read-only, without the lock.
    let o = hybridkv(&["get", "--db", path.to_str().unwrap(), "k"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o), "v\n");
    let o = hybridkv(&["check", "--db", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A writing command is refused while this process holds the lock.
    let o = hybridkv(&["put", "--db", path.to_str().unwrap(), "k2", "v2"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("locked by another open instance"), "{err}");
    // Once it is closed, the other process can write.
    drop(db);
    let o = hybridkv(&["put", "--db", path.to_str().unwrap(), "k2", "v2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = hybridkv(&["get", "--db", path.to_str().unwrap(), "k2"]);
    assert_eq!(stdout(&o), "v2\n");
}
