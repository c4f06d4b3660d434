//! Concurrent writers, readers and background work (flushes, compactions, GC), and
//! snapshot isolation of open iterators.
//!
//! Every value names its key and a version that only rises per key, so a reader can check
//! that what it sees was written for that key, that versions never go back, that it never
//! sees a write that had not started, and that a scan is one consistent snapshot.

// Helpers outside `#[test]` functions unwrap too: a panic is the failure report here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hybridkv::{Db, Options, WriteBatch};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

fn opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 4,
        cache_bytes: 4 << 20,
        large_segment_size: 64 << 10,
        // Background GC passes run alongside the explicit ones.
        gc_interval: Duration::from_millis(20),
        ..Options::default()
    }
}

const WRITERS: u32 = 3;
const KEYS: u32 = 1000;
const VERSIONS: u32 = 8;

fn key(w: u32, i: u32) -> Vec<u8> {
    format!("w{w}-k{i:04}").into_bytes()
}

/// Small, medium and large values (all three placement classes) in turn.
fn value(w: u32, i: u32, ver: u32) -> Vec<u8> {
    let mut v = format!("w{w}-k{i:04}|{ver}|").into_bytes();
    let len = match (i + ver) % 9 {
        0 => 1500 + (i as usize * 13) % 2000,
        1 | 2 => 150 + (i as usize * 7) % 600,
        _ => 20 + (i as usize) % 60,
    };
    v.resize(len, b'a' + (ver % 26) as u8);
    v
}

/// The key and version a value encodes; panics if the value is not well formed.
fn parse(v: &[u8]) -> (Vec<u8>, u32) {
    let s = std::str::from_utf8(&v[..v.len().min(40)]).unwrap_or("");
    let mut parts = s.splitn(3, '|');
    let (Some(k), Some(ver)) = (parts.next(), parts.next()) else {
        panic!("malformed value {:?}", &v[..v.len().min(40)]);
    };
    let ver: u32 = ver
        .parse()
        .unwrap_or_else(|_| panic!("bad version in {s:?}"));
    let expected = value(k[1..2].parse().unwrap(), k[4..].parse().unwrap(), ver);
    assert!(expected == v, "value of {k} version {ver} damaged");
    (k.as_bytes().to_vec(), ver)
}

/// Position of write (ver, i) in writer order (1-based): writers go round-robin over their
/// keys, one version at a time.
fn position(ver: u32, i: u32) -> u64 {
    u64::from(ver - 1) * u64::from(KEYS) + u64::from(i) + 1
}

/// The per-reader record of versions seen, and the checks on each observation.
struct Observer {
    seen: HashMap<(u32, u32), u32>,
}

impl Observer {
    fn observe(&mut self, w: u32, i: u32, ver: u32, started: &[AtomicU64]) {
        // Read after the value was read: the write had started by then.
        let started = started[w as usize].load(Ordering::SeqCst);
        assert!(
            position(ver, i) <= started,
            "w{w} k{i}: saw version {ver} before its write started ({started} started)"
        );
        let last = self.seen.entry((w, i)).or_insert(0);
        assert!(
            ver >= *last,
            "w{w} k{i}: version went back from {last} to {ver}"
        );
        *last = ver;
    }
}

fn writer(db: &Db, w: u32, started: &AtomicU64) {
    for ver in 1..=VERSIONS {
        let mut i = 0;
        while i < KEYS {
            if (i + ver) % 16 == 0 && i + 4 <= KEYS {
                // Four consecutive keys atomically: a snapshot still sees a staircase.
                let mut b = WriteBatch::new();
                for j in i..i + 4 {
                    b.put(key(w, j), value(w, j, ver));
                }
                started.store(position(ver, i + 3), Ordering::SeqCst);
                db.write(b).unwrap();
                i += 4;
            } else {
                started.store(position(ver, i), Ordering::SeqCst);
                db.put(key(w, i), value(w, i, ver)).unwrap();
                i += 1;
            }
        }
    }
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % u64::from(n)) as u32
    }
}

/// Gets and scans until `done`; returns (gets, scans) performed.
fn reader(db: &Db, seed: u64, started: &[AtomicU64], done: &AtomicBool) -> (u64, u64) {
    let mut rng = Rng(seed | 1);
    let mut obs = Observer {
        seen: HashMap::new(),
    };
    let (mut gets, mut scans) = (0u64, 0u64);
    while !done.load(Ordering::SeqCst) || scans < 5 {
        let w = rng.below(WRITERS);
        if rng.below(10) == 0 {
            // A scan of part of one writer's keys: one snapshot, so versions over the keys
            // in order form a staircase: non-increasing, spanning at most one version.
            let a = rng.below(KEYS);
            let b = a + 1 + rng.below(KEYS - a);
            let mut versions: BTreeMap<u32, u32> = (a..b).map(|i| (i, 0)).collect();
            let mut last: Option<Vec<u8>> = None;
            for item in db.range(key(w, a)..key(w, b)) {
                let (k, v) = item.unwrap();
                assert!(last.as_ref().is_none_or(|l| *l < k), "scan out of order");
                let (vk, ver) = parse(&v);
                assert_eq!(vk, k, "value of another key");
                let i: u32 = std::str::from_utf8(&k[4..]).unwrap().parse().unwrap();
                versions.insert(i, ver);
                obs.observe(w, i, ver, started);
                last = Some(k);
            }
            let seq: Vec<u32> = versions.values().copied().collect();
            let (max, min) = (
                seq.iter().copied().max().unwrap_or(0),
                seq.iter().copied().min().unwrap_or(0),
            );
            assert!(
                seq.windows(2).all(|p| p[0] >= p[1]) && max - min <= 1,
                "w{w} keys {a}..{b}: scan is not one snapshot: versions {seq:?}"
            );
            scans += 1;
        } else {
            let i = rng.below(KEYS);
            match db.get(key(w, i)).unwrap() {
                Some(v) => {
                    let (vk, ver) = parse(&v);
                    assert_eq!(vk, key(w, i), "value of another key");
                    obs.observe(w, i, ver, started);
                }
                None => {
                    let last = obs.seen.get(&(w, i)).copied().unwrap_or(0);
                    assert_eq!(last, 0, "w{w} k{i}: seen at version {last}, then absent");
                }
            }
            gets += 1;
        }
    }
    (gets, scans)
}

#[test]
fn writers_readers_and_background_work_agree() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let started: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let writers_left = Arc::new(AtomicU64::new(u64::from(WRITERS)));

    let mut writer_threads = Vec::new();
    for w in 0..WRITERS {
        let (db, started, done, left) = (
            db.clone(),
            started.clone(),
            done.clone(),
            writers_left.clone(),
        );
        writer_threads.push(std::thread::spawn(move || {
            writer(&db, w, &started[w as usize]);
            if left.fetch_sub(1, Ordering::SeqCst) == 1 {
                done.store(true, Ordering::SeqCst);
            }
        }));
    }
    let mut reader_threads = Vec::new();
    for r in 0..2u64 {
        let (db, started, done) = (db.clone(), started.clone(), done.clone());
        reader_threads.push(std::thread::spawn(move || {
            reader(&db, 0x1234_5678 + r * 7919, &started, &done)
        }));
    }
    let maintenance = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            // At least one round even if the writers finish before this thread runs
            // (a loaded machine may schedule it late).
            let mut rounds = 0u64;
            loop {
                db.flush().unwrap();
                db.compact().unwrap();
                db.gc().unwrap();
                rounds += 1;
                if done.load(Ordering::SeqCst) {
                    break;
                }
            }
            rounds
        })
    };
    for t in writer_threads {
        t.join().unwrap();
    }
    for t in reader_threads {
        let (gets, scans) = t.join().unwrap();
        assert!(
            gets > 0 && scans > 0,
            "reader did no work: {gets} gets, {scans} scans"
        );
    }
    assert!(maintenance.join().unwrap() > 0);
    db.compact().unwrap();
    let s = db.stats().unwrap();
    println!("{s}");
    assert!(s.flushes > 1, "{s}");
    assert!(s.compactions > 0, "{s}");

    let check_final = |db: &Db, what: &str| {
        for w in 0..WRITERS {
            for i in 0..KEYS {
                let got = db.get(key(w, i)).unwrap();
                assert!(
                    got.as_deref() == Some(&value(w, i, VERSIONS)[..]),
                    "{what}: w{w} k{i} is not at its last version"
                );
            }
        }
        let all: Vec<_> = db.iter().map(|r| r.unwrap()).collect();
        assert_eq!(all.len(), (WRITERS * KEYS) as usize, "{what}");
        for (k, v) in &all {
            let (vk, ver) = parse(v);
            assert_eq!((&vk, ver), (k, VERSIONS), "{what}");
        }
    };
    check_final(&db, "after the run");
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    check_final(&db, "after reopen");
}

fn snapshot_key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn snapshot_value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{i}@{round}:").into_bytes();
    let len = match i % 7 {
        0 => 2000 + (i as usize % 5) * 500,
        1 | 2 => 200 + (i as usize % 300),
        _ => 10 + (i as usize % 50),
    };
    v.resize(len, b'0' + (round % 10) as u8);
    v
}

fn count_ext(dir: &Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == ext)
        })
        .count()
}

#[test]
fn open_iterators_keep_their_snapshot_and_block_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            gc_interval: Duration::from_secs(3600),
            ..opts()
        },
    )
    .unwrap();
    let n = 3000u32;
    let mut model = BTreeMap::new();
    for i in 0..n {
        db.put(snapshot_key(i), snapshot_value(i, 0)).unwrap();
        model.insert(snapshot_key(i), snapshot_value(i, 0));
        if i == 2000 {
            db.flush().unwrap();
        }
    }
    for i in (0..n).step_by(11) {
        db.delete(snapshot_key(i)).unwrap();
        model.remove(&snapshot_key(i));
    }
    // The snapshot spans levels, immutable memtables, the active memtable and both logs.
    let mut full = db.iter();
    let range = db.range(snapshot_key(500)..snapshot_key(1500));
    let prefix = db.prefix("key01");
    let mut got_full: Vec<(Vec<u8>, Vec<u8>)> =
        full.by_ref().take(100).map(|r| r.unwrap()).collect();
    let stats_before = db.stats().unwrap();

    // Overwrite, delete and add keys, flush, merge and collect, while the iterators are
    // open. The work runs on another thread; the channel wait only turns a deadlock (an
    // iterator blocking writers or background work) into a failure instead of a hang.
    let (tx, rx) = mpsc::channel();
    let worker = {
        let db = db.clone();
        std::thread::spawn(move || {
            for round in 1..=6u32 {
                for i in 0..n {
                    if (i + round) % 5 == 0 {
                        db.delete(snapshot_key(i)).unwrap();
                    } else {
                        db.put(snapshot_key(i), snapshot_value(i, round)).unwrap();
                    }
                }
                for i in n..n + 200 {
                    db.put(snapshot_key(i), snapshot_value(i, round)).unwrap();
                }
                db.flush().unwrap();
                db.compact().unwrap();
                db.gc().unwrap();
            }
            tx.send(()).unwrap();
        })
    };
    // Meanwhile, read the full iterator a little at a time.
    while rx.try_recv().is_err() {
        match full.next() {
            Some(item) => got_full.push(item.unwrap()),
            None => {
                match rx.recv_timeout(Duration::from_secs(300)) {
                    // Disconnected: the worker panicked; `join` below reports it.
                    Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {}
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        panic!(
                            "writers and background work did not finish while iterators were open"
                        )
                    }
                }
                break;
            }
        }
    }
    worker.join().unwrap();
    let s = db.stats().unwrap();
    assert!(s.flushes > stats_before.flushes + 5, "{s}");
    assert!(s.compactions > stats_before.compactions, "{s}");
    assert!(s.gc_segments_freed > 0, "{s}");

    got_full.extend(full.map(|r| r.unwrap()));
    let want_full: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert!(
        got_full == want_full,
        "full scan changed under the iterator"
    );
    let got_range: Vec<_> = range.map(|r| r.unwrap()).collect();
    let want_range: Vec<_> = model
        .range(snapshot_key(500)..snapshot_key(1500))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(got_range == want_range, "range scan (started late) changed");
    let got_prefix: Vec<_> = prefix.map(|r| r.unwrap()).collect();
    let want_prefix: Vec<_> = model
        .iter()
        .filter(|(k, _)| k.starts_with(b"key01"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(got_prefix == want_prefix, "prefix scan changed");

    // New reads see the new state.
    for i in 0..n {
        let want = if (i + 6) % 5 == 0 {
            None
        } else {
            Some(snapshot_value(i, 6))
        };
        assert_eq!(db.get(snapshot_key(i)).unwrap(), want, "key {i}");
    }
    // With the iterators gone, files they kept alive are deleted: what is on disk is what
    // the current state names.
    let s = db.stats().unwrap();
    let live_levels: usize = s.levels.iter().map(|l| l.files).sum();
    assert_eq!(count_ext(dir.path(), "lvl"), live_levels, "{s}");
    assert_eq!(
        count_ext(dir.path(), "vlog") as u64,
        s.large_log_segments,
        "{s}"
    );
}

/// GC passes racing with writers that roll large-log segments quickly: a pass must never
/// collect the segment being appended to (values written after its scan would point into
/// a freed segment) nor one registered but not yet created.
#[test]
fn gc_passes_racing_segment_rollover_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            gc_interval: Duration::from_secs(3600),
            ..opts()
        },
    )
    .unwrap();
    const THREADS: u32 = 2;
    let n = 800u32;
    let rounds = 3u32;
    let big = |i: u32, round: u32| {
        let mut v = format!("{i}/{round}/").into_bytes();
        v.resize(3000 + (i as usize % 7) * 100, (i ^ round) as u8);
        v
    };
    let done = Arc::new(AtomicBool::new(false));
    let gc = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            let mut passes = 0u64;
            loop {
                db.gc().unwrap();
                passes += 1;
                if done.load(Ordering::SeqCst) {
                    break;
                }
            }
            passes
        })
    };
    // Readers keep every core busy, so threads are preempted between lock acquisitions:
    // that is what opens the window between a GC pass choosing victims and a segment
    // rollover.
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (db, done) = (db.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9 + r);
                while !done.load(Ordering::SeqCst) {
                    let i = rng.below(THREADS * n);
                    if let Some(v) = db.get(snapshot_key(i)).unwrap() {
                        let round: u32 = v
                            .split(|&b| b == b'/')
                            .nth(1)
                            .and_then(|r| std::str::from_utf8(r).ok())
                            .and_then(|r| r.parse().ok())
                            .unwrap_or_else(|| panic!("key {i}: malformed value"));
                        assert!(v == big(i, round), "key {i}: wrong value");
                    }
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for round in 0..rounds {
                    for i in t * n..(t + 1) * n {
                        db.put(snapshot_key(i), big(i, round)).unwrap();
                        // Read back at once: its segment must be readable.
                        let got = db
                            .get(snapshot_key(i))
                            .unwrap_or_else(|e| panic!("round {round} key {i}: {e}"));
                        assert!(
                            got == Some(big(i, round)),
                            "round {round} key {i}: wrong value"
                        );
                    }
                }
            })
        })
        .collect();
    let results: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
    done.store(true, Ordering::SeqCst);
    let passes = gc.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    for r in results {
        if let Err(p) = r {
            std::panic::resume_unwind(p);
        }
    }
    assert!(passes > 0);
    let s = db.stats().unwrap();
    assert!(s.gc_segments_freed > 0, "{s}");
    let check = |db: &Db, what: &str| {
        for i in 0..THREADS * n {
            assert!(
                db.get(snapshot_key(i)).unwrap() == Some(big(i, rounds - 1)),
                "key {i} {what}"
            );
        }
    };
    check(&db, "at the end");
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    check(&db, "after reopen");
}

#[test]
fn each_writer_reads_its_own_write_at_once_and_every_write_survives_reopen() {
    // Four writers (more than this machine's cores) through group commit, with puts,
    // deletes and now and then a range delete, over memtables small enough to switch
    // often: each write must be visible to its writer as soon as it returns (whichever
    // group inserted it, and whenever it was published), and the final state must
    // survive a reopen. Nothing assumes how groups form or threads are scheduled.
    const THREADS: u32 = 4;
    let per: u32 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let o = opts();
    let db = Arc::new(Db::open(dir.path(), o.clone()).unwrap());
    let finals: Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>> = (0..THREADS)
        .map(|t| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
                let mut rng = Rng(0x9e37_79b9 + u64::from(t));
                for n in 0..per {
                    let i = rng.below(400);
                    let k = format!("t{t}-{i:03}").into_bytes();
                    match n % 23 {
                        0 => {
                            // A range delete of ten of this writer's keys (with a put, in
                            // one batch).
                            let from = i - i % 10;
                            let (a, b) = (
                                format!("t{t}-{from:03}").into_bytes(),
                                format!("t{t}-{:03}", from + 10).into_bytes(),
                            );
                            let mut batch = WriteBatch::new();
                            batch.delete_range(&a, &b).put(&k, b"after");
                            db.write(batch).unwrap();
                            for j in from..from + 10 {
                                model.insert(format!("t{t}-{j:03}").into_bytes(), None);
                            }
                            model.insert(k.clone(), Some(b"after".to_vec()));
                        }
                        1..=4 => {
                            db.delete(&k).unwrap();
                            model.insert(k.clone(), None);
                        }
                        _ => {
                            let v = value(t, i, n);
                            db.put(&k, &v).unwrap();
                            model.insert(k.clone(), Some(v));
                        }
                    }
                    assert_eq!(
                        db.get(&k).unwrap(),
                        model[&k],
                        "writer {t} op {n}: its own write not visible on return"
                    );
                }
                model
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let check = |db: &Db| {
        for model in &finals {
            for (k, v) in model {
                assert_eq!(&db.get(k).unwrap(), v, "{}", String::from_utf8_lossy(k));
            }
        }
    };
    check(&db);
    drop(db);
    let db = Db::open(dir.path(), o).unwrap();
    check(&db);
}
