//! The small log at a memtable switch: the sealed log is not synced (it is deleted once its
//! memtable is flushed, often before the OS writes it back, so it costs no device writes);
//! a synced commit first makes every older log durable; recovery takes a torn tail in any
//! log as the end of the durable prefix and discards the logs after it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::io::{CrashKind, IoComponent, SimFs};
use hybridkv::{Db, Options, WriteOptions};
use std::sync::Arc;
use std::time::Duration;

const DIR: &str = "/db";
const SYNC: WriteOptions = WriteOptions { sync: true };

fn opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        max_immutable_memtables: 4,
        cache_bytes: 1 << 20,
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn open(fs: &SimFs) -> Db {
    Db::open_with_fs(DIR, opts(), Arc::new(fs.clone())).unwrap()
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(60 + (i % 7) as usize * 30, b'v'); // small and medium pairs
    v
}

/// Enough pairs for several memtable switches at 64 KiB.
const PAIRS: u32 = 4000;

fn load(db: &Db) {
    for i in 0..PAIRS {
        db.put(key(i), value(i)).unwrap();
    }
}

/// The keys present after recovery must be `0..n` for some `n` (a prefix of the writes,
/// no holes), each with its value. Returns `n`.
fn assert_prefix(db: &Db, what: &str) -> u32 {
    let mut n = 0;
    while n < PAIRS && db.get(key(n)).unwrap().is_some() {
        n += 1;
    }
    for i in 0..PAIRS {
        let got = db.get(key(i)).unwrap();
        if i < n {
            assert_eq!(got, Some(value(i)), "{what}: key {i} has a wrong value");
        } else {
            assert_eq!(got, None, "{what}: key {i} survived after a hole at {n}");
        }
    }
    n
}

#[test]
fn a_memtable_switch_does_not_sync_the_sealed_log() {
    let fs = SimFs::new();
    let db = open(&fs);
    load(&db);
    db.flush().unwrap();
    db.compact().unwrap();
    let s = db.stats().unwrap();
    assert!(s.flushes >= 4, "the load should switch memtables: {s}");
    // One fdatasync per small-log file created (its header, before its name is made
    // durable), none per switch: `flush` and each full memtable start a new log.
    let logs_created = 1 + s.flushes;
    assert_eq!(s.io.syncs_by(IoComponent::Wal), logs_created, "{s}");
    // A synced write syncs the current log once more (older ones are flushed already).
    db.put_opt("synced", "1", &SYNC).unwrap();
    let s2 = db.stats().unwrap();
    assert_eq!(s2.io.syncs_by(IoComponent::Wal), logs_created + 1, "{s2}");
}

#[test]
fn a_synced_write_makes_every_earlier_write_durable_across_switches() {
    for round in 0..4u64 {
        let fs = SimFs::new();
        let db = open(&fs);
        load(&db); // several switches, nothing synced
        db.put_opt("synced", "yes", &SYNC).unwrap();
        let kinds = [
            CrashKind::DropUnsynced,
            CrashKind::KeepPrefix { seed: round },
            CrashKind::TornSector { seed: round },
        ];
        let images: Vec<SimFs> = kinds.iter().map(|&k| fs.crash_image(k)).collect();
        drop(db);
        for (kind, img) in kinds.iter().zip(images) {
            let db = open(&img);
            let what = format!("round {round}, {kind:?}");
            assert_eq!(
                db.get("synced").unwrap().as_deref(),
                Some(&b"yes"[..]),
                "{what}"
            );
            assert_eq!(
                assert_prefix(&db, &what),
                PAIRS,
                "{what}: a write before the synced one was lost"
            );
        }
    }
}

#[test]
fn a_torn_older_log_ends_recovery_there_and_later_logs_are_discarded() {
    let mut shorter = 0;
    for seed in 0..24u64 {
        let fs = SimFs::new();
        let db = open(&fs);
        load(&db); // unsynced: a power loss may tear any log that is not flushed yet
        let kind = if seed % 2 == 0 {
            CrashKind::KeepPrefix { seed }
        } else {
            CrashKind::TornSector { seed }
        };
        let img = fs.crash_image(kind);
        drop(db);
        let what = format!("{kind:?}");
        let db = open(&img);
        let n = assert_prefix(&db, &what);
        if n < PAIRS {
            shorter += 1;
        }
        // New writes after the recovery, synced, then another power loss: the recovered
        // prefix and the new write survive, and nothing discarded comes back.
        db.put_opt("after", "1", &SYNC).unwrap();
        let again = img.crash_image(CrashKind::DropUnsynced);
        drop(db);
        let db = open(&again);
        assert_eq!(
            assert_prefix(&db, &what),
            n,
            "{what}: second recovery differs"
        );
        assert_eq!(
            db.get("after").unwrap().as_deref(),
            Some(&b"1"[..]),
            "{what}"
        );
        let report = db.check().unwrap();
        assert!(report.is_ok(), "{what}: {report}");
    }
    // Unsynced writes were lost in some images (the test exercised torn logs).
    assert!(shorter > 0, "no crash image lost unsynced writes");
}

/// The small log appended to through a memory map (`Options::mmap_log_writes`, on by
/// default), on the real file system: the log being appended to is reserved ahead (steps
/// of 4 KiB or more, zeros past its records); every log a memtable switch leaves is cut to its
/// records at once (else a newer log would follow a tail of zeros, which replay reads as a
/// tear); a close cuts the last one; a reopen reads every write.
#[test]
fn mapped_small_logs_are_cut_at_each_switch_and_at_close_on_the_real_file_system() {
    const STEP: u64 = 4 << 10;
    let dir = tempfile::tempdir().unwrap();
    let real_opts = || Options {
        gc_interval: Duration::from_secs(3600),
        ..opts()
    };
    let wal_files = |dir: &std::path::Path| {
        let mut logs: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        logs.sort();
        logs
    };
    {
        let db = Db::open(dir.path(), real_opts()).unwrap();
        // One write to a keyspace written no more holds the oldest log (and every later
        // one, up to the small log's file bound) until its memtable is flushed.
        let rare = db.create_keyspace("rare", real_opts()).unwrap();
        rare.put("rare-key", "rare-value").unwrap();
        load(&db);
        let logs = wal_files(dir.path());
        assert!(logs.len() >= 3, "{} small-log files", logs.len());
        let (newest, older) = logs.split_last().unwrap();
        for (name, bytes) in older {
            // Cut to its records: it ends with the last value's bytes (a reserved tail
            // would end in zeros).
            assert_eq!(bytes.last(), Some(&b'v'), "{name} does not end at a record");
        }
        // The log being appended to: reserved in whole steps (zeros past its records,
        // unless they end exactly at a step).
        let (name, bytes) = newest;
        assert_eq!(bytes.len() as u64 % STEP, 0, "{name} is not reserved ahead");
        drop(rare);
        db.close().unwrap();
    }
    let logs = wal_files(dir.path());
    let (name, bytes) = logs.last().unwrap();
    assert_eq!(bytes.last(), Some(&b'v'), "{name} not cut at close");
    let db = Db::open(dir.path(), real_opts()).unwrap();
    assert_eq!(assert_prefix(&db, "reopen"), PAIRS);
    let rare = db.keyspace("rare").unwrap();
    assert_eq!(
        rare.get("rare-key").unwrap().as_deref(),
        Some(&b"rare-value"[..])
    );
}
