//! A file the kernel will not let grow, on the real file system, with two writers.
//!
//! The test re-executes itself as a child process whose file-size limit (`RLIMIT_FSIZE`)
//! is 2 MiB, with `SIGXFSZ` ignored: any write, `fallocate` or `ftruncate` past 2 MiB then
//! fails with `EFBIG`, the kernel's own answer, as a full disk fails with `ENOSPC`. The
//! child's database appends its small log and its 8 MiB large-log segments through memory
//! maps (the default), reserving space ahead with `fallocate`, so the large log's
//! reservation is what fails first; a second child appends with `pwrite`s, where the
//! kernel writes what fits below the limit and refuses the rest (a torn record). Two threads put large values until each write fails;
//! every write acknowledged is printed (`ACK <thread> <i>`). What must hold:
//! - each failed write returns a typed error (`Error::Io` naming the file, or
//!   `Error::Poisoned` after one), never a panic or a hang;
//! - the child closes its database (a cut that fails at close is logged, not fatal);
//! - reopened without the limit, the database holds every acknowledged write with its
//!   value, `check` is clean, and writes go on and survive another reopen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hybridkv::{Db, Error, Options};
use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_DIR: &str = "HYBRIDKV_FILE_LIMIT_DIR";
/// `mapped` or `pwrite`: how the child's logs are appended.
const CHILD_MODE: &str = "HYBRIDKV_FILE_LIMIT_MODE";
const TEST_NAME: &str =
    "a_file_the_kernel_will_not_let_grow_fails_writes_and_loses_no_acknowledged_one";
const LIMIT: u64 = 2 << 20;

fn opts(mapped: bool) -> Options {
    Options {
        memtable_size: 256 << 10,
        large_segment_size: 8 << 20,
        mmap_log_writes: mapped,
        ..Options::default()
    }
}

fn key(thread: usize, i: usize) -> String {
    format!("t{thread}-{i:06}")
}

/// 2-6 KiB (a large value), derived from the key so the parent can rebuild it.
fn value(thread: usize, i: usize) -> Vec<u8> {
    let len = 2048 + (i * 577 + thread * 131) % 4096;
    (0..len)
        .map(|b| ((b * 7 + i * 13 + thread) % 251) as u8)
        .collect()
}

/// In the child: the limit, then two writers until each one's write fails.
fn child(dir: &str, mapped: bool) {
    // SAFETY: plain libc calls on this process, before any thread of the test starts.
    unsafe {
        assert_ne!(libc::signal(libc::SIGXFSZ, libc::SIG_IGN), libc::SIG_ERR);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
        assert!(
            lim.rlim_max >= LIMIT,
            "the hard file-size limit ({}) is below the test's {LIMIT}",
            lim.rlim_max
        );
        lim.rlim_cur = LIMIT;
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
    let db = Db::open(dir, opts(mapped)).expect("open under the limit");
    std::thread::scope(|s| {
        for t in 0..2 {
            let db = &db;
            s.spawn(move || {
                for i in 0..100_000 {
                    match db.put(key(t, i), value(t, i)) {
                        Ok(()) => println!("ACK {t} {i}"),
                        Err(e @ (Error::Io { .. } | Error::Poisoned(_))) => {
                            println!("FAILED {t} {i}: {e}");
                            return;
                        }
                        Err(e) => panic!("thread {t}, put {i}: unexpected error {e:?}"),
                    }
                }
                panic!("thread {t}: 100,000 puts under a 2 MiB file limit and no error");
            });
        }
    });
    // Close may fail to cut a log it could not grow: logged, and the reopen cuts it.
    drop(db);
    println!("CLOSED");
}

#[test]
fn a_file_the_kernel_will_not_let_grow_fails_writes_and_loses_no_acknowledged_one() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let mapped = std::env::var(CHILD_MODE).as_deref() != Ok("pwrite");
        child(&dir, mapped);
        return;
    }
    // Logs appended through memory maps (the default: the reservation fails), then with
    // `pwrite`s (a write runs past the limit: the kernel writes what fits, then refuses).
    for mapped in [true, false] {
        run(mapped);
    }
}

fn run(mapped: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, &dir)
        .env(CHILD_MODE, if mapped { "mapped" } else { "pwrite" })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The child's output is read while it runs (a full pipe would block it). A child that
    // hangs, the failure this test rules out, is killed after a deadline far above the
    // fraction of a second it needs, and the test fails saying so.
    let (pipe_out, pipe_err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).unwrap();
            bytes
        })
    };
    let (out_reader, err_reader) = (drain(Box::new(pipe_out)), drain(Box::new(pipe_err)));
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child (mapped logs: {mapped}) still ran after 300 s: a write hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = std::process::Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child (mapped: {mapped}) failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("CLOSED"),
        "the child did not close:\n{stdout}"
    );
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut failures = Vec::new();
    for line in stdout.lines() {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("ACK") => {
                let t: usize = w.next().unwrap().parse().unwrap();
                let i: usize = w.next().unwrap().parse().unwrap();
                acked.insert(key(t, i), value(t, i));
            }
            Some("FAILED") => failures.push(line.to_string()),
            _ => {}
        }
    }
    eprintln!(
        "mapped logs: {mapped}; {} writes acknowledged; the failures: {failures:?}",
        acked.len()
    );
    assert_eq!(
        failures.len(),
        2,
        "each writer ends on a failed write:\n{stdout}"
    );
    // The first failure names the file that could not grow and the kernel's answer.
    assert!(
        failures
            .iter()
            .any(|f| f.contains("File too large") && f.contains(".vlog")),
        "{failures:?}"
    );
    // About the limit's worth of values was acknowledged: the failure came from a file's
    // growth, not from the first writes.
    let acked_bytes: usize = acked.values().map(Vec::len).sum();
    assert!(
        acked_bytes > (LIMIT as usize) / 2,
        "{acked_bytes} bytes acknowledged"
    );

    let db = Db::open(&dir, opts(mapped)).unwrap();
    for (k, v) in &acked {
        let got = db.get(k).unwrap();
        assert_eq!(
            got.as_deref(),
            Some(v.as_slice()),
            "acknowledged {k} lost or wrong"
        );
    }
    assert!(db.check().unwrap().is_ok());
    // Writes go on past the old limit, and survive a reopen.
    for i in 0..600 {
        db.put(key(9, i), value(9, i)).unwrap();
    }
    drop(db);
    let db = Db::open(&dir, opts(mapped)).unwrap();
    for i in (0..600).step_by(37) {
        assert_eq!(
            db.get(key(9, i)).unwrap().as_deref(),
            Some(value(9, i).as_slice())
        );
    }
    for (k, v) in acked.iter().step_by(11) {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    assert!(db.check().unwrap().is_ok());
}
