//! The read path's costs as `Stats` reports them: pinned level indexes (PinK) make a
//! point lookup read at most one leaf per run; the node cache's hits and misses, the
//! lookup reads and the scans are counted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use common::hooked_fs::{assert_io_error_on, FailReads, FsCall, FsHooks, HookedFs};
use hybridkv::io::{IoComponent, SimFs};
use hybridkv::{Db, Options, Placement};
use std::sync::Arc;

fn key(i: u32) -> Vec<u8> {
    format!("key{:010}", i.wrapping_mul(2_654_435_761)).into_bytes()
}

/// A database of `n` small pairs spread over several runs, with no node cache and no
/// Bloom filter, so every lookup reads its nodes from the files.
fn build(dir: &std::path::Path, n: u32, pinned: usize) -> Db {
    let opts = Options {
        memtable_size: 256 << 10,
        cache_bytes: 0,
        bloom_bits_per_key: 0,
        placement: Placement::InPlace,
        pinned_index_bytes: pinned,
        ..Options::default()
    };
    let db = Db::open(dir, opts.clone()).unwrap();
    for i in 0..n {
        db.put(key(i), vec![(i % 251) as u8; 60]).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    drop(db);
    // Reopen, so that recovery's open of every level file is what pins the indexes.
    Db::open(dir, opts).unwrap()
}

fn runs(db: &Db) -> u64 {
    db.stats()
        .unwrap()
        .levels
        .iter()
        .map(|l| l.files as u64)
        .sum()
}

#[test]
fn a_lookup_reads_at_most_one_leaf_per_run_with_pinned_indexes() {
    let n = 60_000;
    let dir = tempfile::tempdir().unwrap();
    let db = build(dir.path(), n, 256 << 20);
    let s = db.stats().unwrap();
    let runs = runs(&db);
    assert!(runs >= 2, "{s}");
    assert!(s.pinned_index_bytes > 0, "{s}");
    assert_eq!(
        s.pinned_index_bytes,
        s.levels.iter().map(|l| l.pinned_bytes).sum::<u64>()
    );
    let before = db.stats().unwrap().lookup_reads();
    let probes: Vec<u32> = (0..n).step_by(97).collect();
    for &i in &probes {
        assert_eq!(db.get(key(i)).unwrap(), Some(vec![(i % 251) as u8; 60]));
    }
    let reads = db.stats().unwrap().lookup_reads() - before;
    assert!(
        reads <= probes.len() as u64 * runs,
        "{reads} reads for {} gets over {runs} runs",
        probes.len()
    );

    // The same database without pinning descends each tree from its root.
    drop(db);
    let dir2 = tempfile::tempdir().unwrap();
    let unpinned = build(dir2.path(), n, 0);
    assert_eq!(unpinned.stats().unwrap().pinned_index_bytes, 0);
    let before = unpinned.stats().unwrap().lookup_reads();
    for &i in &probes {
        assert!(unpinned.get(key(i)).unwrap().is_some());
    }
    let unpinned_reads = unpinned.stats().unwrap().lookup_reads() - before;
    assert!(
        unpinned_reads > reads,
        "unpinned {unpinned_reads} reads, pinned {reads}"
    );
}

/// `Stats::gets_by_reads` sorts each get by the reads it made: the same histogram as one
/// built get by get from the lookup reads counted before and after it.
#[test]
fn gets_are_counted_by_the_reads_each_made() {
    let n = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let db = build(dir.path(), n, 256 << 20);
    // One key in the memtable: its get reads nothing.
    db.put(b"in the memtable", b"v").unwrap();
    let start = db.stats().unwrap();
    let mut expected = [0u64; 4];
    let mut note = |db: &Db, f: &dyn Fn(&Db)| {
        let before = db.stats().unwrap().lookup_reads();
        f(db);
        let reads = db.stats().unwrap().lookup_reads() - before;
        expected[usize::try_from(reads.min(3)).unwrap()] += 1;
    };
    note(&db, &|db| {
        assert_eq!(db.get(b"in the memtable").unwrap(), Some(b"v".to_vec()));
    });
    for i in (0..n).step_by(101) {
        note(&db, &|db| {
            assert_eq!(db.get(key(i)).unwrap(), Some(vec![(i % 251) as u8; 60]));
        });
    }
    let s = db.stats().unwrap();
    let counted: Vec<u64> = (0..4)
        .map(|b| s.gets_by_reads[b] - start.gets_by_reads[b])
        .collect();
    assert_eq!(counted, expected.to_vec());
    // Without a cache every get of a flushed key reads at least its leaf.
    assert_eq!(
        counted[0], 1,
        "only the memtable's key read nothing: {counted:?}"
    );
}

/// Hooks that make a helper thread read while the armed thread's read is under way: each
/// read the armed thread makes hands the helper one get to make (a read of its own) and
/// waits until it is done, so that the helper's read falls inside the armed thread's get
/// every time, whatever the scheduler does.
#[derive(Default)]
struct ReadsBeside {
    armed: std::sync::Mutex<Option<std::thread::ThreadId>>,
    ask: std::sync::Mutex<Option<std::sync::mpsc::Sender<std::sync::mpsc::SyncSender<()>>>>,
}

impl FsHooks for ReadsBeside {
    fn around<T>(
        &self,
        what: FsCall<'_>,
        _path: &std::path::Path,
        call: impl FnOnce() -> hybridkv::Result<T>,
    ) -> hybridkv::Result<T> {
        let mine = *self.armed.lock().unwrap() == Some(std::thread::current().id());
        if mine && matches!(what, FsCall::Read { .. }) {
            let ask = self.ask.lock().unwrap().clone();
            if let Some(ask) = ask {
                let (done, wait) = std::sync::mpsc::sync_channel(1);
                ask.send(done).unwrap();
                wait.recv().unwrap();
            }
        }
        call()
    }
}

/// A get's count is its own thread's reads: the same gets sort the same way whether or not
/// another thread reads during each of their reads. Large values (a leaf and a log record
/// each, with no pointer table) give gets of two reads.
#[test]
fn a_gets_read_count_leaves_out_other_threads_reads() {
    let n = 4_000u32;
    let opts = Options {
        memtable_size: 256 << 10,
        cache_bytes: 0,
        bloom_bits_per_key: 0,
        placement: Placement::Hybrid,
        large_pointer_table_bytes: 0,
        ..Options::default()
    };
    let value = |i: u32| vec![(i % 251) as u8; if i.is_multiple_of(2) { 60 } else { 2_000 }];
    let fs = HookedFs::new(Arc::new(SimFs::new()), ReadsBeside::default());
    let open = |dir: &str| {
        let db = Db::open_with_fs(dir, opts.clone(), Arc::new(fs.clone())).unwrap();
        for i in 0..n {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
        drop(db);
        Db::open_with_fs(dir, opts.clone(), Arc::new(fs.clone())).unwrap()
    };
    let db = open("/db");
    // The helper reads a database of its own, so that its gets do not count in this one's
    // histogram; its reads still run in this process, through the same file system.
    let other = open("/other");
    let probes: Vec<u32> = (0..n).step_by(37).collect();
    let histogram = |db: &Db| db.stats().unwrap().gets_by_reads;
    let pass = |db: &Db| {
        let before = histogram(db);
        for &i in &probes {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i)));
        }
        let after = histogram(db);
        std::array::from_fn::<u64, 4, _>(|b| after[b] - before[b])
    };

    // Alone: a small pair's get reads its leaf, a large pair's its leaf and its record.
    let reads_before = db.stats().unwrap().lookup_reads();
    let alone = pass(&db);
    let reads_alone = db.stats().unwrap().lookup_reads() - reads_before;
    assert_eq!(alone.iter().sum::<u64>(), probes.len() as u64);
    assert!(alone[1] > 0 && alone[2] > 0, "{alone:?}");

    // With a helper reading once inside each of this thread's reads.
    let (ask, asked) = std::sync::mpsc::channel::<std::sync::mpsc::SyncSender<()>>();
    let helper = std::thread::spawn(move || {
        let mut gets = 0u64;
        for done in asked {
            let i = u32::try_from(gets % u64::from(n)).unwrap();
            assert_eq!(other.get(key(i)).unwrap(), Some(value(i)));
            gets += 1;
            done.send(()).unwrap();
        }
        gets
    });
    *fs.hooks().ask.lock().unwrap() = Some(ask);
    *fs.hooks().armed.lock().unwrap() = Some(std::thread::current().id());
    let reads_before = db.stats().unwrap().lookup_reads();
    let beside = pass(&db);
    let reads_beside = db.stats().unwrap().lookup_reads() - reads_before;
    *fs.hooks().armed.lock().unwrap() = None;
    *fs.hooks().ask.lock().unwrap() = None;
    let helper_gets = helper.join().unwrap();

    assert_eq!(
        helper_gets, reads_alone,
        "one helper get per read of this thread"
    );
    assert_eq!(
        reads_beside, reads_alone,
        "the same gets made the same reads"
    );
    assert_eq!(beside, alone, "a get counts only its own thread's reads");
}

#[test]
fn cache_hits_misses_and_scans_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            memtable_size: 256 << 10,
            bloom_bits_per_key: 0,
            pinned_index_bytes: 0,
            ..Options::default()
        },
    )
    .unwrap();
    for i in 0..5_000 {
        db.put(key(i), b"value").unwrap();
    }
    db.flush().unwrap();
    let s0 = db.stats().unwrap();
    for _ in 0..3 {
        assert!(db.get(key(7)).unwrap().is_some());
    }
    let s1 = db.stats().unwrap();
    let (hits, misses) = (
        s1.cache_hits - s0.cache_hits,
        s1.cache_misses - s0.cache_misses,
    );
    // The first get misses on each node of its path, the next two find them all.
    assert!(misses >= 1, "{misses} misses");
    assert!(hits >= 2 * misses, "{hits} hits, {misses} misses");
    assert!(s1.cache_hit_ratio() > 0.0 && s1.cache_hit_ratio() < 1.0);
    assert_eq!(s1.gets - s0.gets, 3);

    let pairs = db.range(key(0)..).take(10).count();
    assert_eq!(pairs, 10);
    let _ = db.prefix(b"key").next();
    assert_eq!(db.stats().unwrap().scans - s1.scans, 2);
}

/// Scans resolve their large values ahead of the caller, in batches read together
/// (`io_uring` on the real file system): what they return must equal what gets return,
/// buffered, direct and through memory maps, and a damaged record must stop the scan at
/// its own pair.
#[test]
fn a_scan_of_large_values_read_in_batches_matches_gets_and_stops_at_damage() {
    // Buffered, direct, and through memory maps.
    for (direct, mapped) in [(false, false), (true, false), (false, true)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            memtable_size: 256 << 10,
            direct_io: direct,
            mmap_reads: mapped,
            // A new open's cache starts empty: these reads are counted.
            reload_cache: false,
            ..Options::default()
        };
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let value = |i: u32| {
            let len = match i % 4 {
                0 => 20,   // small, in place
                1 => 400,  // medium
                _ => 2000, // large, in the large log
            };
            vec![(i % 251) as u8; len]
        };
        for i in 0..3_000u32 {
            db.put(format!("k{i:06}"), value(i)).unwrap();
        }
        db.flush().unwrap();
        let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|r| r.unwrap()).collect();
        assert_eq!(all.len(), 3_000, "direct {direct}, mapped {mapped}");
        for (i, (k, v)) in all.iter().enumerate() {
            assert_eq!(k, format!("k{i:06}").as_bytes());
            assert_eq!(
                v,
                &value(i as u32),
                "direct {direct}, mapped {mapped}, pair {i}"
            );
        }
        // Short scans from many starting points, as YCSB E runs them.
        for start in (0..3_000u32).step_by(211) {
            let it = db.range(format!("k{start:06}")..);
            let it = if start % 2 == 0 {
                it.expect_pairs(37)
            } else {
                it
            };
            let got: Vec<_> = it.take(37).map(|r| r.unwrap()).collect();
            assert_eq!(got.len(), 37.min(3_000 - start as usize));
            for (j, (k, v)) in got.iter().enumerate() {
                let i = start + j as u32;
                assert_eq!(k, format!("k{i:06}").as_bytes());
                assert_eq!(Some(v.clone()), db.get(k).unwrap());
            }
        }
        // A scan told its length reads no large value it does not return (a fresh open:
        // nothing cached). The large values of these sequential keys were appended one
        // after the other, so they come in spans: fewer reads than values, and no more
        // bytes than the records returned plus the gap a span may bridge per read.
        drop(db);
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let before = db.stats().unwrap().io;
        let got: Vec<_> = db
            .range("k000100"..)
            .expect_pairs(40)
            .take(40)
            .map(|r| r.unwrap())
            .collect();
        let large = got.iter().filter(|(_, v)| v.len() == 2000).count() as u64;
        let after = db.stats().unwrap().io;
        let reads =
            after.read_ops_by(IoComponent::LargeLog) - before.read_ops_by(IoComponent::LargeLog);
        let bytes = after.read_by(IoComponent::LargeLog) - before.read_by(IoComponent::LargeLog);
        let record = 2000 + 7 + 20; // value, key, record header
        assert_eq!(got.len(), 40);
        assert!(
            large > 10 && (1..large).contains(&reads),
            "direct {direct}, mapped {mapped}: {reads} reads for {large} values"
        );
        assert!(
            bytes <= large * record + reads * 4096,
            "direct {direct}, mapped {mapped}: {bytes} bytes for {large} values"
        );
        drop(db);

        // Damage the value of pair 1502 (large) in its segment: a new open's scan (its
        // cache empty) returns every pair before it, then corruption.
        let target = value(1502);
        let mut hit = false;
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let mut data = std::fs::read(&path).unwrap();
            let key = b"k001502";
            if let Some(at) = data.windows(key.len()).position(|w| w == key) {
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                if data.get(at + key.len()..at + key.len() + 16) == Some(&target[..16])
                    && !name.contains("wal")
                {
                    data[at + key.len() + 100] ^= 0x40;
                    std::fs::write(&path, &data).unwrap();
                    hit = true;
                }
            }
        }
        assert!(hit, "the record of k001502 was not found");
        let db = Db::open(dir.path(), opts).unwrap();
        let mut it = db.range("k001400".."k001600");
        for i in 1400..1502u32 {
            let (k, _) = it.next().unwrap().unwrap();
            assert_eq!(k, format!("k{i:06}").as_bytes());
        }
        match it.next() {
            Some(Err(e)) => assert!(e.is_corruption(), "{e}"),
            other => panic!(
                "direct {direct}, mapped {mapped}: expected corruption at k001502, got {other:?}"
            ),
        }
        assert!(it.next().is_none(), "an error ends the scan");
    }
}

/// The two ends of an iterator met (the front read ahead up to the key the back had
/// yielded); a `seek_back` then moves the back away, and the front must go on past the old
/// meeting point: the key it met there is not lost. The same for `seek` and the back.
#[test]
fn after_the_ends_met_a_seek_of_one_end_lets_the_other_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for k in ["a", "b", "c", "d", "e", "f"] {
        db.put(k, k).unwrap();
    }
    let keys = |items: Vec<hybridkv::Result<(Vec<u8>, Vec<u8>)>>| -> Vec<String> {
        items
            .into_iter()
            .map(|r| String::from_utf8(r.unwrap().0).unwrap())
            .collect()
    };
    for flushed in [false, true] {
        if flushed {
            db.flush().unwrap();
        }
        let mut it = db.iter();
        assert_eq!(keys(it.next_back().into_iter().collect()), ["f"]);
        assert_eq!(keys(it.next().into_iter().collect()), ["a"]);
        it.seek_back("z");
        assert_eq!(
            keys(it.by_ref().collect()),
            ["b", "c", "d", "e", "f"],
            "flushed {flushed}"
        );

        let mut it = db.iter();
        assert_eq!(keys(it.next().into_iter().collect()), ["a"]);
        assert_eq!(keys(it.next_back().into_iter().collect()), ["f"]);
        it.seek("");
        let back: Vec<_> = std::iter::from_fn(|| it.next_back()).collect();
        assert_eq!(keys(back), ["e", "d", "c", "b", "a"], "flushed {flushed}");
    }
}

/// `get_value` hands out a view of the log record the block cache holds: two reads of a
/// cached large value return the same bytes at the same address, with no copy; `get`
/// returns the same bytes as a `Vec`; values in place come out too.
#[test]
fn get_value_is_a_view_of_the_cached_record() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_size: 256 << 10,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let large = vec![0x5Au8; 3000];
    let medium = vec![0x3Cu8; 500];
    db.put("large", &large).unwrap();
    db.put("medium", &medium).unwrap();
    db.put("small", "tiny").unwrap();
    db.flush().unwrap();
    let first = db.get_value("large").unwrap().unwrap();
    let second = db.get_value("large").unwrap().unwrap();
    assert_eq!(first, large);
    assert_eq!(
        first.as_ptr(),
        second.as_ptr(),
        "the second read copied the value instead of viewing the cached record"
    );
    assert_eq!(db.get("large").unwrap(), Some(large.clone()));
    // A medium value: in the transient log or (a flush into the merge level) in place.
    assert_eq!(db.get_value("medium").unwrap().unwrap(), medium);
    assert_eq!(db.get_value("small").unwrap().unwrap(), b"tiny".to_vec());
    assert!(db.get_value("absent").unwrap().is_none());
    // A view outlives the database handle and the cache entry it came from.
    drop(db);
    assert_eq!(first.into_vec(), large);
}

/// A scan through `values()` hands out the same views: a large value read by a scan and
/// by a get of the cached record share one address (no copy), from the front and from the
/// back, while the plain iterator returns the same bytes as `Vec`s; every pair comes out.
#[test]
fn a_scans_values_are_views_of_the_cached_records() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_size: 256 << 10,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let large = |i: u8| vec![i; 3000];
    for i in 0..10u8 {
        db.put(format!("large{i}"), large(i)).unwrap();
        db.put(format!("small{i}"), [i; 4]).unwrap();
    }
    db.flush().unwrap();
    let scanned: Vec<(Vec<u8>, hybridkv::Value)> = db
        .range("large"..)
        .values()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(scanned.len(), 20);
    let backward: Vec<(Vec<u8>, hybridkv::Value)> = db
        .range("large".."largf")
        .values()
        .rev()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(backward.len(), 10);
    for (i, (k, v)) in scanned.iter().take(10).enumerate() {
        assert_eq!(k, format!("large{i}").as_bytes());
        assert_eq!(*v, large(i as u8));
        let got = db.get_value(k).unwrap().unwrap();
        assert_eq!(
            v.as_ptr(),
            got.as_ptr(),
            "the scan copied {} instead of viewing the cached record",
            String::from_utf8_lossy(k)
        );
        let (bk, bv) = &backward[9 - i];
        assert_eq!((bk, bv.as_ptr()), (k, v.as_ptr()));
    }
    for (i, (k, v)) in scanned.iter().skip(10).enumerate() {
        assert_eq!(
            (k.as_slice(), v.as_slice()),
            (format!("small{i}").as_bytes(), &[i as u8; 4][..])
        );
    }
    let plain: Vec<(Vec<u8>, Vec<u8>)> = db.range("large"..).collect::<Result<_, _>>().unwrap();
    let viewed: Vec<(Vec<u8>, Vec<u8>)> = scanned
        .into_iter()
        .map(|(k, v)| (k, v.into_vec()))
        .collect();
    assert_eq!(plain, viewed);
}

/// A scan's batch holds records too large for the block cache (over 64 KiB) beside small
/// ones: their values come straight out of the span read, equal to what gets return, and
/// after a reopen (nothing cached) as well.
#[test]
fn a_scan_batch_with_records_too_large_to_cache_returns_them_whole() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_size: 1 << 20,
        // After the reopen nothing is cached.
        reload_cache: false,
        ..Options::default()
    };
    let value = |i: u32| {
        let len = if i.is_multiple_of(3) {
            100_000 + i as usize
        } else {
            1500
        };
        (0..len)
            .map(|j| (j as u32 * 31 + i) as u8)
            .collect::<Vec<u8>>()
    };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    for i in 0..30u32 {
        db.put(format!("k{i:02}"), value(i)).unwrap();
    }
    db.flush().unwrap();
    for round in 0..2 {
        let got: Vec<(Vec<u8>, Vec<u8>)> = db
            .range("k00"..)
            .expect_pairs(30)
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got.len(), 30, "round {round}");
        for (i, (k, v)) in got.iter().enumerate() {
            assert_eq!(k, format!("k{i:02}").as_bytes());
            assert!(v == &value(i as u32), "round {round}: value of k{i:02}");
        }
    }
    drop(db);
    let db = Db::open(dir.path(), opts).unwrap();
    let got: Vec<Vec<u8>> = db.iter().expect_pairs(30).map(|r| r.unwrap().1).collect();
    let want: Vec<Vec<u8>> = (0..30).map(value).collect();
    assert!(got == want, "after reopen");
}

/// Device reads of level leaves `f` makes (reads of the level files by gets).
fn leaf_reads(db: &Db, f: impl FnOnce()) -> u64 {
    let before = db.stats().unwrap().io.read_ops_by(IoComponent::LevelRead);
    f();
    db.stats().unwrap().io.read_ops_by(IoComponent::LevelRead) - before
}

fn fill_opts(prepopulate: bool) -> Options {
    Options {
        memtable_size: 256 << 10,
        cache_bytes: 64 << 20,
        bloom_bits_per_key: 0,
        placement: Placement::InPlace,
        prepopulate_cache: prepopulate,
        // Leaves read one by one, so the counts below are those of prepopulation alone.
        warm_read_bytes: 0,
        ..Options::default()
    }
}

fn seq_key(i: u32) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

#[test]
fn a_flush_caches_the_leaves_it_writes_unless_told_not_to() {
    for prepopulate in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), fill_opts(prepopulate)).unwrap();
        for i in 0..2_000 {
            db.put(seq_key(i), vec![(i % 251) as u8; 60]).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
        assert_eq!(runs(&db), 1);
        let reads = leaf_reads(&db, || {
            for i in (0..2_000).step_by(7) {
                assert_eq!(db.get(seq_key(i)).unwrap(), Some(vec![(i % 251) as u8; 60]));
            }
        });
        if prepopulate {
            assert_eq!(reads, 0, "a get read a leaf its flush had just written");
        } else {
            assert!(reads > 10, "{reads} leaf reads without prepopulation");
        }
    }
}

/// A merge caches the leaves of the regions gets were reading (the keys of cached leaves
/// in the run it rewrites), and only those: after the bottom run is rewritten, the keys
/// read before are read again from the cache, the others from the files.
#[test]
fn a_merge_caches_the_leaves_of_the_regions_that_were_read() {
    let n = 40_000;
    for prepopulate in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), fill_opts(prepopulate)).unwrap();
        for i in 0..n {
            db.put(seq_key(i), vec![(i % 251) as u8; 60]).unwrap();
        }
        db.compact_all().unwrap();
        assert_eq!(runs(&db), 1);
        // Merged from flushed runs only: nothing of the bottom run was read, nothing is
        // cached (flushed leaves do not count as read).
        let cold = leaf_reads(&db, || {
            for i in (0..n).step_by(1_000) {
                db.get(seq_key(i)).unwrap().unwrap();
            }
        });
        assert!(cold >= u64::from(n / 1_000) / 2, "{cold} leaf reads");
        // Read the first quarter of the keys: their leaves are now cached.
        for i in 0..n / 4 {
            db.get(seq_key(i)).unwrap().unwrap();
        }
        // Overwrite a few keys in the last quarter and merge everything again.
        for i in (n - 100)..n {
            db.put(seq_key(i), b"new").unwrap();
        }
        db.compact_all().unwrap();
        assert_eq!(runs(&db), 1);
        let warm = leaf_reads(&db, || {
            for i in (0..n / 4 - 200).step_by(13) {
                assert_eq!(db.get(seq_key(i)).unwrap(), Some(vec![(i % 251) as u8; 60]));
            }
        });
        let untouched = leaf_reads(&db, || {
            // Half way between the probes above (a leaf holds about a hundred pairs), in
            // the second half: 19 keys.
            for i in (n / 2 + 500..n - 1_000).step_by(1_000) {
                db.get(seq_key(i)).unwrap().unwrap();
            }
        });
        // Some of their leaves may have been cached by a flush's lookups of L2 (its
        // shadow estimate), never most of them.
        assert!(
            untouched >= 10,
            "{untouched} leaf reads for 19 keys never read"
        );
        if prepopulate {
            assert_eq!(
                warm, 0,
                "keys read before the merge were read from the files"
            );
        } else {
            assert!(warm > 10, "{warm} leaf reads without prepopulation");
        }
        assert_eq!(db.get(seq_key(n - 1)).unwrap(), Some(b"new".to_vec()));
    }
}

#[test]
fn a_flush_caches_the_medium_records_it_logs_unless_told_not_to() {
    for prepopulate in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            placement: Placement::Hybrid,
            ..fill_opts(prepopulate)
        };
        let db = Db::open(dir.path(), opts).unwrap();
        let medium = |i: u32| vec![(i % 251) as u8; 400];
        for i in 0..2_000 {
            db.put(seq_key(i), medium(i)).unwrap();
        }
        // A level below L1: the next flush logs its medium values (L1 is not the merge
        // level).
        db.compact_all().unwrap();
        let logged = db.stats().unwrap().medium_values_logged;
        for i in 2_000..2_300 {
            db.put(seq_key(i), medium(i)).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
        let before = db.stats().unwrap();
        assert_eq!(before.medium_values_logged - logged, 300, "{before}");
        for i in 2_000..2_300 {
            assert_eq!(db.get(seq_key(i)).unwrap(), Some(medium(i)));
        }
        let after = db.stats().unwrap();
        let reads = after.io.read_ops_by(IoComponent::TransientLog)
            - before.io.read_ops_by(IoComponent::TransientLog);
        if prepopulate {
            assert_eq!(
                reads, 0,
                "a get read a medium record its flush had just logged"
            );
        } else {
            // Read from the device in 4 KiB blocks of a transient segment: at least one
            // read per block the 300 records of 400-byte values fill.
            assert!(
                reads >= 300 * 400 / 4096,
                "{reads} transient-log reads without prepopulation"
            );
        }
    }
}

#[test]
fn a_put_caches_its_large_value_only_when_a_get_read_its_key_lately() {
    for prepopulate in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            placement: Placement::Hybrid,
            // No GC pass may move a value (its new place would be read from the device).
            gc_interval: std::time::Duration::from_secs(3600),
            ..fill_opts(prepopulate)
        };
        let db = Db::open(dir.path(), opts).unwrap();
        let large = |i: u32, round: u8| vec![(i % 251) as u8 ^ round; 3_000];
        let large_reads = |db: &Db| db.stats().unwrap().io.read_ops_by(IoComponent::LargeLog);
        // A load: no get between the puts, so no value is cached as it is written.
        for i in 0..200 {
            db.put(seq_key(i), large(i, 0)).unwrap();
        }
        let before = large_reads(&db);
        for i in 0..200 {
            assert_eq!(db.get(seq_key(i)).unwrap(), Some(large(i, 0)));
        }
        assert_eq!(
            large_reads(&db) - before,
            200,
            "a value loaded without gets between the puts was cached"
        );
        // Updates between gets: each new value is cached as it is appended, when the
        // option is on.
        for i in 0..200 {
            assert_eq!(db.get(seq_key(i)).unwrap(), Some(large(i, 0)));
            db.put(seq_key(i), large(i, 1)).unwrap();
        }
        let before = large_reads(&db);
        for i in 0..200 {
            assert_eq!(db.get(seq_key(i)).unwrap(), Some(large(i, 1)));
        }
        let reads = large_reads(&db) - before;
        if prepopulate {
            assert_eq!(reads, 0, "a get read a large value put after a get");
        } else {
            assert_eq!(reads, 200, "{reads} large-log reads without prepopulation");
        }
        // Gets of some keys between updates of others that no get read: those values are
        // not cached, gets running or not (they would only push read keys out).
        for i in 0..200 {
            assert_eq!(db.get(seq_key(i)).unwrap(), Some(large(i, 1)));
            db.put(seq_key(1_000 + i), large(i, 2)).unwrap();
        }
        let before = large_reads(&db);
        for i in 0..200 {
            assert_eq!(db.get(seq_key(1_000 + i)).unwrap(), Some(large(i, 2)));
        }
        assert_eq!(
            large_reads(&db) - before,
            200,
            "a value of a key no get had read was cached as it was appended"
        );
    }
}

/// Leaf size of the cold-run tests: their group arithmetic (8 leaves to a 64 KiB group,
/// an index node holding more than 8 pivots) is written for 8 KiB leaves, whatever the
/// default.
const LEAF: usize = 8192;

/// One run of `n` sequential small pairs (about 80 leaves per 10,000), then the database
/// reopened cold with `warm_read_bytes` and `cache_bytes`.
fn one_cold_run(dir: &std::path::Path, n: u32, warm: usize, cache: usize) -> Db {
    one_cold_run_on(|o| Db::open(dir, o).unwrap(), n, warm, cache)
}

/// [`one_cold_run`] on whatever file system `open` opens the database on.
fn one_cold_run_on(open: impl Fn(Options) -> Db, n: u32, warm: usize, cache: usize) -> Db {
    let opts = |warm, cache| Options {
        memtable_size: 256 << 10,
        cache_bytes: cache,
        bloom_bits_per_key: 0,
        placement: Placement::InPlace,
        prepopulate_cache: false,
        warm_read_bytes: warm,
        leaf_size: LEAF,
        // Every open starts cold: these tests count its reads.
        reload_cache: false,
        ..Options::default()
    };
    let db = open(opts(0, 64 << 20));
    for i in 0..n {
        db.put(seq_key(i), vec![(i % 251) as u8; 60]).unwrap();
    }
    db.compact_all().unwrap();
    assert_eq!(runs(&db), 1);
    drop(db);
    open(opts(warm, cache))
}

fn leaves_of_the_run(db: &Db) -> u64 {
    db.stats()
        .unwrap()
        .levels
        .iter()
        .map(|l| l.file_bytes)
        .sum::<u64>()
        / LEAF as u64
}

#[test]
fn a_cold_cache_reads_a_group_of_leaves_per_device_read_while_it_has_room() {
    let n = 20_000;
    let probe = |db: &Db| {
        leaf_reads(db, || {
            for i in (0..n).step_by(40) {
                assert_eq!(db.get(seq_key(i)).unwrap(), Some(vec![(i % 251) as u8; 60]));
            }
        })
    };
    // Leaves one by one: a device read per leaf the gets touch (every leaf: a leaf holds
    // about 100 pairs, the gets step by 40).
    let dir = tempfile::tempdir().unwrap();
    let single = one_cold_run(dir.path(), n, 0, 64 << 20);
    let leaves = leaves_of_the_run(&single);
    assert!(leaves >= 100, "{leaves} leaves");
    let one_by_one = probe(&single);
    assert!(
        one_by_one + 10 >= leaves,
        "{one_by_one} reads, {leaves} leaves"
    );
    let s = single.stats().unwrap();
    assert_eq!((s.warm_reads, s.warm_neighbours), (0, 0));
    drop(single);

    // Groups of 8 leaves: about an eighth of the reads (a group ends early where an
    // index node lies between two leaves), every value the same.
    let grouped = one_cold_run(dir.path(), n, 8 * LEAF, 64 << 20);
    let reads = probe(&grouped);
    let s = grouped.stats().unwrap();
    assert!(
        reads * 4 <= one_by_one,
        "{reads} reads in groups, {one_by_one} one by one"
    );
    assert_eq!(s.warm_reads, reads, "{s}");
    assert!(s.warm_neighbours + reads + 10 >= one_by_one, "{s}");
    // Every leaf is cached now: the same gets read nothing.
    assert_eq!(probe(&grouped), 0);
    drop(grouped);

    // A cache with room for a sixth of the leaves: groups only while it has room, then
    // one leaf per read.
    let small = leaves * LEAF as u64 / 6;
    let tight = one_cold_run(dir.path(), n, 8 * LEAF, small as usize);
    let reads = probe(&tight);
    let s = tight.stats().unwrap();
    assert!(s.warm_reads > 0, "{s}");
    assert!(
        (s.warm_reads + s.warm_neighbours) * LEAF as u64 <= small,
        "{} leaves cached by groups in a cache of {small} bytes",
        s.warm_reads + s.warm_neighbours
    );
    assert!(
        reads > one_by_one / 2,
        "{reads} reads, {one_by_one} one by one"
    );
}

#[test]
fn a_damaged_leaf_in_a_group_is_left_out_and_reported_by_the_get_that_wants_it() {
    let n = 20_000;
    let dir = tempfile::tempdir().unwrap();
    drop(one_cold_run(dir.path(), n, 0, 64 << 20));
    // Damage the fourth leaf. The builder writes leaves in key order from offset 0, 8 KiB
    // each, and an index node only after its children (a 12 KiB index node holds far more
    // than 8 pivots), and 60-byte values are in the leaves (no overflow blobs): the first
    // 8 leaves lie back to back, and are the first group.
    let lvl = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "lvl"))
        .unwrap();
    let mut bytes = std::fs::read(&lvl).unwrap();
    bytes[3 * LEAF + 200] ^= 0xff;
    std::fs::write(&lvl, bytes).unwrap();

    let db = one_cold_run_reopen(dir.path());
    // The first key's group holds the damaged leaf: the group read caches the others.
    assert_eq!(db.get(seq_key(0)).unwrap(), Some(vec![0u8; 60]));
    let s = db.stats().unwrap();
    assert_eq!(s.warm_reads, 1, "{s}");
    assert_eq!(
        s.warm_neighbours, 6,
        "8 leaves less the wanted one and the damaged one: {s}"
    );
    // Every key reads its value, or (the damaged leaf's keys) reports the damage.
    let mut damaged = Vec::new();
    for i in 0..n {
        match db.get(seq_key(i)) {
            Ok(v) => assert_eq!(v, Some(vec![(i % 251) as u8; 60]), "key {i}"),
            Err(hybridkv::Error::Corruption { .. }) => damaged.push(i),
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    assert!(
        (1..=200).contains(&damaged.len()),
        "{} keys reported damaged",
        damaged.len()
    );
    // A get of a damaged key reads that leaf alone (its group's other leaves are
    // cached), one device read each, and still reports the damage.
    let groups_before = db.stats().unwrap().warm_reads;
    let reads = leaf_reads(&db, || {
        for &i in &damaged {
            assert!(matches!(
                db.get(seq_key(i)),
                Err(hybridkv::Error::Corruption { .. })
            ));
        }
    });
    assert_eq!(reads, damaged.len() as u64);
    assert_eq!(db.stats().unwrap().warm_reads, groups_before);
}

/// Hooks whose readers, once armed, answer a read of 16 KiB or more (only a group read is
/// that long here) as done without writing a byte into the buffer: a file system that
/// breaks the read contract.
#[derive(Default)]
struct GroupReadsLeftUnfilled {
    armed: Arc<std::sync::atomic::AtomicBool>,
}

struct UnfilledReader {
    inner: Arc<dyn hybridkv::io::ReadableFile>,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl hybridkv::io::ReadableFile for UnfilledReader {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> hybridkv::Result<()> {
        if buf.len() >= 16 << 10 && self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.read_exact_at(offset, buf)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

impl FsHooks for GroupReadsLeftUnfilled {
    fn reader(
        &self,
        _path: &std::path::Path,
        inner: Arc<dyn hybridkv::io::ReadableFile>,
    ) -> Arc<dyn hybridkv::io::ReadableFile> {
        Arc::new(UnfilledReader {
            inner,
            armed: Arc::clone(&self.armed),
        })
    }
}

/// A group read reads into a buffer its thread keeps, which holds the leaves of the last
/// group, all of which verify: a read reported done without filling the buffer must not
/// hand those out as the leaves of the new group. Each get here returns its own value.
#[test]
fn a_group_read_left_unfilled_never_hands_out_the_last_groups_leaves() {
    let n = 20_000;
    let fs = HookedFs::new(Arc::new(SimFs::new()), GroupReadsLeftUnfilled::default());
    let open = |o| Db::open_with_fs("/db", o, Arc::new(fs.clone())).unwrap();
    let db = one_cold_run_on(open, n, 8 * LEAF, 64 << 20);
    let value = |i: u32| Some(vec![(i % 251) as u8; 60]);
    let groups = |db: &Db| db.stats().unwrap().warm_reads;

    // A group read that fills the buffer.
    let before = groups(&db);
    assert_eq!(db.get(seq_key(0)).unwrap(), value(0));
    assert!(groups(&db) > before, "the first get read a group");

    // Far from that group, every group read now comes back unfilled.
    fs.hooks()
        .armed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    for i in (n / 2..n).step_by(997) {
        assert_eq!(db.get(seq_key(i)).unwrap(), value(i), "key {i}");
    }
    fs.hooks()
        .armed
        .store(false, std::sync::atomic::Ordering::SeqCst);
    for i in (0..n).step_by(499) {
        assert_eq!(db.get(seq_key(i)).unwrap(), value(i), "key {i}");
    }
}

/// A group read that fails (an I/O error, not damage) falls back to the wanted leaf
/// alone; when that read fails too, the get reports the error naming the level file, and
/// caches nothing: once the device answers again, the same get reads its value.
#[test]
fn a_failed_group_read_falls_back_to_the_leaf_alone_and_a_failed_leaf_read_is_reported() {
    let n = 20_000;
    let sim = SimFs::new();
    let fs = HookedFs::new(Arc::new(sim), FailReads::default());
    let open = |o| Db::open_with_fs("/db", o, Arc::new(fs.clone())).unwrap();
    let db = one_cold_run_on(open, n, 8 * LEAF, 64 << 20);
    let value = |i: u32| Some(vec![(i % 251) as u8; 60]);

    // Groups are 8 leaves (64 KiB), a leaf alone 8 KiB: fail the next read of 16 KiB or
    // more of a level file, which only a group read is.
    fs.hooks().arm("lvl", 16 << 10, 1);
    let reads = leaf_reads(&db, || assert_eq!(db.get(seq_key(0)).unwrap(), value(0)));
    assert_eq!(fs.hooks().failed(), 1, "the group read was not tried");
    let s = db.stats().unwrap();
    assert_eq!((s.warm_reads, s.warm_neighbours), (0, 0), "{s}");
    assert_eq!(reads, 1, "the leaf alone, once");
    // The fallback cached the wanted leaf: a key beside key 0 reads nothing.
    assert_eq!(
        leaf_reads(&db, || assert_eq!(db.get(seq_key(1)).unwrap(), value(1))),
        0
    );

    // Every read of a level file fails: a get of a leaf not cached reports the error
    // with the file's path.
    let far = n / 2;
    fs.hooks().arm("lvl", 0, u64::MAX);
    assert_io_error_on(db.get(seq_key(far)), "lvl");
    assert!(fs.hooks().failed() >= 2);

    // The device answers again: the same get reads its group and its value.
    fs.hooks().disarm();
    assert_eq!(db.get(seq_key(far)).unwrap(), value(far));
    assert_eq!(db.stats().unwrap().warm_reads, 1);
    for i in (0..n).step_by(97) {
        assert_eq!(db.get(seq_key(i)).unwrap(), value(i), "key {i}");
    }
}

/// The database `one_cold_run` built, opened again cold with groups of 8 leaves.
fn one_cold_run_reopen(dir: &std::path::Path) -> Db {
    Db::open(
        dir,
        Options {
            memtable_size: 256 << 10,
            cache_bytes: 64 << 20,
            bloom_bits_per_key: 0,
            placement: Placement::InPlace,
            prepopulate_cache: false,
            warm_read_bytes: 8 * LEAF,
            leaf_size: LEAF,
            reload_cache: false,
            ..Options::default()
        },
    )
    .unwrap()
}

/// A scan's read-ahead (several leaves in one device read, once group reads are off or
/// the cache is full) that fails falls back to the leaf alone: the scan returns every
/// pair, in order. When the leaf alone fails too, the scan reports the error naming the
/// level file after the pairs before it, and once the device answers again a scan from
/// there returns the rest.
#[test]
fn a_failed_read_ahead_falls_back_to_the_leaf_alone_and_a_failed_leaf_read_is_reported() {
    let n = 20_000;
    let sim = SimFs::new();
    let fs = HookedFs::new(Arc::new(sim), FailReads::default());
    let open = |o| Db::open_with_fs("/db", o, Arc::new(fs.clone())).unwrap();
    // No group reads: a forward walk's misses read ahead.
    let db = one_cold_run_on(open, n, 0, 64 << 20);
    let value = |i: u32| vec![(i % 251) as u8; 60];
    let leaves = leaves_of_the_run(&db);

    // Every read of two leaves or more fails: each read-ahead is tried and fails, and its
    // leaf is read alone.
    fs.hooks().arm("lvl", 2 * LEAF, u64::MAX);
    let reads = leaf_reads(&db, || {
        let mut i = 0u32;
        for item in db.iter() {
            let (k, v) = item.unwrap();
            assert_eq!((k, v), (seq_key(i), value(i)), "pair {i}");
            i += 1;
        }
        assert_eq!(i, n);
    });
    assert!(fs.hooks().failed() > 0, "no read-ahead was tried");
    // Each leaf once, alone (the failed read-aheads count no read; `leaves` counts the
    // index nodes and the footer too).
    assert!(
        reads <= leaves && reads + 10 >= leaves,
        "{reads} reads for {leaves} leaves"
    );
    fs.hooks().disarm();
    drop(db);

    // Cold again: a scan takes its first pairs, then every level read fails.
    let db = one_cold_run_on(open, n, 0, 64 << 20);
    let mut it = db.iter();
    let first = 3_000u32;
    for i in 0..first {
        assert_eq!(
            it.next().unwrap().unwrap(),
            (seq_key(i), value(i)),
            "pair {i}"
        );
    }
    fs.hooks().arm("lvl", 0, u64::MAX);
    // Pairs the walk had read (the leaves held in its read-ahead) still come, in order,
    // then the error.
    let mut i = first;
    let err = loop {
        match it.next() {
            Some(Ok(pair)) => {
                assert_eq!(pair, (seq_key(i), value(i)), "pair {i}");
                i += 1;
            }
            Some(Err(e)) => break e,
            None => panic!("the scan ended at pair {i} with every level read failing"),
        }
    };
    assert!(i < n, "every pair came back");
    assert!(
        i > first,
        "no pair the read-ahead held came back before the error"
    );
    assert_io_error_on::<()>(Err(err), "lvl");
    drop(it);

    // The device answers again: a scan from the first pair not returned returns the rest.
    fs.hooks().disarm();
    let rest: Vec<(Vec<u8>, Vec<u8>)> = db.range(seq_key(i)..).map(|r| r.unwrap()).collect();
    assert_eq!(rest.len() as u32, n - i);
    for (j, pair) in rest.into_iter().enumerate() {
        let at = i + j as u32;
        assert_eq!(pair, (seq_key(at), value(at)), "pair {at}");
    }
}
