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
    // Without --create, a directory that holds no database is an error.
    let o = hybridkv(&["put", "--db", db, "apple", "red"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("create_if_missing is false"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !std::path::Path::new(db).exists(),
        "a mistyped --db made a database"
    );
    assert!(hybridkv(&["put", "--db", db, "--create", "apple", "red"])
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
    let o = hybridkv(&["put", "--db", db.to_str().unwrap(), "--create", "", "v"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("key is empty"));
    let o = hybridkv(&["put", "--db", db.to_str().unwrap(), "--create", "k\\q", "v"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad escape at position 1"));
    let o = hybridkv(&["--hex", "get", "--db", db.to_str().unwrap(), "6g"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not hex"));
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

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn binary_keys_ranges_dump_load_compact_gc_and_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = path.to_str().unwrap();
    // Binary keys and values, given escaped and in hex.
    ok(&hybridkv(&[
        "put",
        "--db",
        db,
        "--create",
        "a\\x00b",
        "tab\\there",
    ]));
    ok(&hybridkv(&["--hex", "put", "--db", db, "62ff", "00010203"]));
    for i in 0..30 {
        ok(&hybridkv(&[
            "put",
            "--db",
            db,
            &format!("k{i:02}"),
            &format!("v{i}"),
        ]));
    }
    let o = hybridkv(&["get", "--db", db, "b\\xff"]);
    ok(&o);
    assert_eq!(stdout(&o), "\\x00\\x01\\x02\\x03\n");
    let o = hybridkv(&["--hex", "get", "--db", db, "610062"]);
    ok(&o);
    assert_eq!(stdout(&o), "7461620968657265\n"); // "tab\there"
                                                  // A range, keys only, and a limit.
    let o = hybridkv(&[
        "scan",
        "--db",
        db,
        "--from",
        "k10",
        "--to",
        "k13",
        "--keys-only",
    ]);
    ok(&o);
    assert_eq!(stdout(&o), "k10\nk11\nk12\n");
    let o = hybridkv(&["scan", "--db", db, "--from", "k28", "--limit", "0"]);
    ok(&o);
    assert_eq!(stdout(&o), "k28\tv28\nk29\tv29\n");
    // dump, then load into a new database: the same pairs, binary ones included.
    let dump = dir.path().join("dump.txt");
    ok(&hybridkv(&[
        "dump",
        "--db",
        db,
        "--out",
        dump.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(&dump).unwrap();
    assert_eq!(text.lines().count(), 32, "{text}");
    assert!(text.starts_with("a\\x00b\ttab\\x09here\n"), "{text}");
    let copy = dir.path().join("copy");
    let copy = copy.to_str().unwrap();
    let o = hybridkv(&["load", "--db", copy, "--in", dump.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "no --create: no new database");
    ok(&hybridkv(&[
        "load",
        "--db",
        copy,
        "--create",
        "--in",
        dump.to_str().unwrap(),
    ]));
    let again = dir.path().join("again.txt");
    ok(&hybridkv(&[
        "dump",
        "--db",
        copy,
        "--out",
        again.to_str().unwrap(),
    ]));
    assert_eq!(std::fs::read_to_string(&again).unwrap(), text);
    // A malformed dump line is an error naming the line.
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "k\tv\nno tab here\n").unwrap();
    let o = hybridkv(&["load", "--db", copy, "--in", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 2"));
    // compact and gc; the data stays.
    for i in 0..10 {
        ok(&hybridkv(&["delete", "--db", db, &format!("k{i:02}")]));
    }
    let o = hybridkv(&["compact", "--db", db]);
    ok(&o);
    assert!(stdout(&o).contains("bytes on disk"), "{}", stdout(&o));
    let o = hybridkv(&["gc", "--db", db]);
    ok(&o);
    assert!(stdout(&o).contains("segments freed"), "{}", stdout(&o));
    let o = hybridkv(&[
        "scan",
        "--db",
        db,
        "--prefix",
        "k",
        "--keys-only",
        "--limit",
        "0",
    ]);
    assert_eq!(stdout(&o).lines().count(), 20);
    // A checkpoint opens like any database and holds the same pairs.
    let ckpt = dir.path().join("ckpt");
    let o = hybridkv(&["checkpoint", "--db", db, "--to", ckpt.to_str().unwrap()]);
    ok(&o);
    assert!(stdout(&o).contains("linked"), "{}", stdout(&o));
    let a = hybridkv(&["scan", "--db", db, "--limit", "0"]);
    let b = hybridkv(&["scan", "--db", ckpt.to_str().unwrap(), "--limit", "0"]);
    assert_eq!(stdout(&a), stdout(&b));
    assert_eq!(stdout(&a).lines().count(), 22);
    // Backward, then range and prefix deletion (k10..k20 are left).
    let o = hybridkv(&[
        "scan",
        "--db",
        db,
        "--prefix",
        "k",
        "--keys-only",
        "--reverse",
        "--limit",
        "3",
    ]);
    ok(&o);
    assert_eq!(stdout(&o), "k29\nk28\nk27\n");
    let o = hybridkv(&[
        "scan",
        "--db",
        db,
        "--from",
        "k18",
        "--reverse",
        "--limit",
        "1",
    ]);
    ok(&o);
    assert_eq!(stdout(&o), "k29\tv29\n");
    ok(&hybridkv(&["delete", "--db", db, "k12", "--to", "k25"]));
    ok(&hybridkv(&["delete", "--db", db, "k2", "--prefix"]));
    let o = hybridkv(&[
        "scan",
        "--db",
        db,
        "--prefix",
        "k",
        "--keys-only",
        "--limit",
        "0",
    ]);
    ok(&o);
    assert_eq!(stdout(&o), "k10\nk11\n");
    let o = hybridkv(&["delete", "--db", db, "k5", "--to", "k1"]);
    assert_eq!(o.status.code(), Some(2), "an inverted range is refused");
}

#[test]
fn keyspace_selects_the_keyspace_a_command_works_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let db = hybridkv::Db::open(&path, hybridkv::Options::default()).unwrap();
        let users = db
            .create_keyspace("users", hybridkv::Options::default())
            .unwrap();
        users.put("u1", "alice").unwrap();
        db.put("u1", "default").unwrap();
    }
    let p = path.to_str().unwrap();
    let got = hybridkv(&["get", "--db", p, "--keyspace", "users", "u1"]);
    ok(&got);
    assert_eq!(stdout(&got).trim(), "alice");
    let got = hybridkv(&["get", "--db", p, "u1"]);
    assert_eq!(stdout(&got).trim(), "default");
    ok(&hybridkv(&[
        "put",
        "--db",
        p,
        "--keyspace",
        "users",
        "u2",
        "bob",
    ]));
    let scan = hybridkv(&["scan", "--db", p, "--keyspace", "users"]);
    assert_eq!(stdout(&scan), "u1\talice\nu2\tbob\n");
    // An unknown keyspace is an error, not a new keyspace.
    let missing = hybridkv(&["get", "--db", p, "--keyspace", "nope", "u1"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no keyspace named"),
        "{missing:?}"
    );
    // Created, listed, written, dropped.
    ok(&hybridkv(&["create-keyspace", "--db", p, "events"]));
    assert_eq!(
        stdout(&hybridkv(&["keyspaces", "--db", p])),
        "events\nusers\n"
    );
    ok(&hybridkv(&[
        "put",
        "--db",
        p,
        "--keyspace",
        "events",
        "e1",
        "x",
    ]));
    let got = hybridkv(&["get", "--db", p, "--keyspace", "events", "e1"]);
    assert_eq!(stdout(&got).trim(), "x");
    ok(&hybridkv(&["drop-keyspace", "--db", p, "users"]));
    assert_eq!(stdout(&hybridkv(&["keyspaces", "--db", p])), "events\n");
    let again = hybridkv(&["drop-keyspace", "--db", p, "users"]);
    assert!(!again.status.success());
}
