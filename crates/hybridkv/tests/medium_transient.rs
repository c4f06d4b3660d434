//! Medium pairs travel the upper levels in the transient log and are merged in place at
//! the last level, where their segments are freed whole (no GC on the transient log).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use common::hooked_fs::{assert_io_error_on, FailReads, HookedFs};
use hybridkv::io::SimFs;
use hybridkv::{Db, MediumMergeLevel, Options};
use std::collections::BTreeMap;
use std::sync::Arc;

fn opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 2,
        max_levels: 3,
        cache_bytes: 4 << 20,
        gc_interval: std::time::Duration::from_secs(3600),
        // These tests count the reads of a cold cache after a reopen.
        reload_cache: false,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{:07}", i.wrapping_mul(7919) % 1_000_003).into_bytes()
}

fn medium(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{i}/{round}/").into_bytes();
    v.resize(150 + (i % 200) as usize, b'm');
    v
}

fn tlog_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "tlog")
        })
        .count()
}

#[test]
fn medium_pairs_go_through_the_transient_log_and_merge_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..8 {
        for i in 0..3000 {
            db.put(key(i), medium(i, round)).unwrap();
            model.insert(key(i), medium(i, round));
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let s = db.stats().unwrap();
    assert!(
        s.medium_values_logged > 0,
        "no medium pair reached the transient log: {s}"
    );
    assert!(s.transient_segments_created > 0, "{s}");
    assert!(
        s.medium_values_merged > 0,
        "no medium pair was merged in place: {s}"
    );
    assert!(s.transient_segments_freed > 0, "{s}");
    // Segments on disk are exactly those the engine still tracks.
    assert_eq!(tlog_files(dir.path()) as u64, s.transient_segments, "{s}");
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    let scanned: BTreeMap<_, _> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(scanned, model);
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "after reopen");
    }
}

#[test]
fn the_bottom_level_holds_medium_pairs_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..4000 {
        db.put(key(i), medium(i, 0)).unwrap();
    }
    db.compact().unwrap();
    let s = db.stats().unwrap();
    let bottom = s.levels.iter().rev().find(|l| l.files > 0).unwrap();
    // Bottom level file holds the values themselves: at least the medium payload.
    assert!(bottom.file_bytes >= 4000 * 150, "{s}");
    assert!(s.levels.len() >= 2);
}

#[test]
fn second_to_last_merge_level_also_frees_segments() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        medium_merge_level: MediumMergeLevel::SecondToLast,
        ..opts()
    };
    let db = Db::open(dir.path(), o).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..4 {
        for i in 0..2500 {
            if (i + round) % 9 == 0 {
                db.delete(key(i)).unwrap();
                model.remove(&key(i));
            } else {
                db.put(key(i), medium(i, round)).unwrap();
                model.insert(key(i), medium(i, round));
            }
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let scanned: BTreeMap<_, _> = db.iter().map(|r| r.unwrap()).collect();
    assert_eq!(scanned, model);
    let s = db.stats().unwrap();
    assert_eq!(tlog_files(dir.path()) as u64, s.transient_segments, "{s}");
}

/// Medium values of `n` keys in L1's transient segment (beside `n` others merged in place
/// below), then the database reopened cold with `warm_read_bytes`; the `n` keys of L1 in
/// key order.
fn upper_mediums_reopened(dir: &std::path::Path, n: u32, warm: usize) -> (Db, Vec<u32>) {
    upper_mediums_reopened_on(|o| Db::open(dir, o).unwrap(), n, warm)
}

/// [`upper_mediums_reopened`] on whatever file system `open` opens the database on.
fn upper_mediums_reopened_on(open: impl Fn(Options) -> Db, n: u32, warm: usize) -> (Db, Vec<u32>) {
    upper_mediums_reopened_as(open, n, |o| Options {
        warm_read_bytes: warm,
        ..o
    })
}

/// [`upper_mediums_reopened_on`], reopened with the options `reopen` makes of the ones the
/// database was written with.
fn upper_mediums_reopened_as(
    open: impl Fn(Options) -> Db,
    n: u32,
    reopen: impl Fn(Options) -> Options,
) -> (Db, Vec<u32>) {
    // A memtable that holds a whole round: the last round's flush is one L1 run.
    let opts = || Options {
        memtable_size: 4 << 20,
        ..opts()
    };
    let db = open(opts());
    for round in 0..4 {
        for i in 0..n {
            db.put(key(i), medium(i, round)).unwrap();
        }
        db.flush().unwrap();
    }
    // Everything to the bottom, whatever the background threads merged meanwhile.
    db.compact_all().unwrap();
    // New keys: a run that overwrote the bottom's would be merged down at once (the dead
    // share it makes there).
    for i in n..2 * n {
        db.put(key(i), medium(i, 4)).unwrap();
    }
    db.flush().unwrap();
    let s = db.stats().unwrap();
    assert!(
        s.transient_segments > 0 && s.levels[0].entries == u64::from(n),
        "{s}"
    );
    drop(db);
    let db = open(reopen(opts()));
    let mut order: Vec<u32> = (n..2 * n).collect();
    order.sort_by_key(|&i| key(i));
    (db, order)
}

fn transient_reads(db: &Db) -> u64 {
    db.stats()
        .unwrap()
        .io
        .read_ops_by(hybridkv::io::IoComponent::TransientLog)
}

/// A transient segment is cached in 4 KiB blocks: a cold get of a medium value reads its
/// block, whose other records are the values of the keys next to it; while the cache
/// fills, the blocks after it come with it (`warm_read_bytes`).
#[test]
fn a_cold_get_of_a_medium_value_caches_its_block_and_the_blocks_after_it_while_the_cache_fills() {
    let n = 3000;
    let mut reads = Vec::new();
    for warm in [0, 64 << 10] {
        let dir = tempfile::tempdir().unwrap();
        let (db, order) = upper_mediums_reopened(dir.path(), n, warm);
        let before = transient_reads(&db);
        for &i in &order {
            assert_eq!(db.get(key(i)).unwrap(), Some(medium(i, 4)), "key {i}");
        }
        reads.push(transient_reads(&db) - before);
        let s = db.stats().unwrap();
        if warm == 0 {
            assert_eq!((s.warm_reads, s.warm_neighbours), (0, 0), "{s}");
        } else {
            assert!(s.warm_reads > 0 && s.warm_neighbours > 0, "{s}");
        }
    }
    // Records of about 250 bytes: 16 to a block, read once each; 64 KiB at a time while
    // the cache fills.
    assert!(reads[0] > 0 && reads[0] * 8 <= u64::from(n), "{reads:?}");
    assert!(reads[1] * 8 <= reads[0], "{reads:?}");
}

/// Without a cache (`cache_bytes` 0) nothing is read in blocks or around a record: every
/// get of a medium value in a transient segment reads its record alone, each time, and
/// gets, a second pass and a scan all return the values written.
#[test]
fn without_a_cache_each_get_of_a_medium_value_reads_its_record_alone() {
    let n = 3000;
    let dir = tempfile::tempdir().unwrap();
    let (db, order) = upper_mediums_reopened_as(
        |o| Db::open(dir.path(), o).unwrap(),
        n,
        |o| Options {
            cache_bytes: 0,
            warm_read_bytes: 64 << 10,
            ..o
        },
    );
    let transient_bytes = || {
        db.stats()
            .unwrap()
            .io
            .read_by(hybridkv::io::IoComponent::TransientLog)
    };
    for pass in 0..2 {
        let (before, bytes_before) = (transient_reads(&db), transient_bytes());
        for &i in &order {
            assert_eq!(db.get(key(i)).unwrap(), Some(medium(i, 4)), "key {i}");
        }
        let reads = transient_reads(&db) - before;
        assert_eq!(reads, u64::from(n), "pass {pass}: one read per get");
        // Records of 150 to 350 value bytes plus key and header: far from a 4 KiB block.
        let bytes = transient_bytes() - bytes_before;
        assert!(
            bytes < u64::from(n) * 512,
            "pass {pass}: {bytes} bytes read"
        );
    }
    let s = db.stats().unwrap();
    assert_eq!(
        (s.warm_reads, s.warm_neighbours, s.cache_hits),
        (0, 0, 0),
        "{s}"
    );
    let scanned: BTreeMap<_, _> = db.iter().map(|r| r.unwrap()).collect();
    for &i in &order {
        assert_eq!(scanned.get(&key(i)), Some(&medium(i, 4)), "key {i}");
    }
}

/// Threads that miss on the same blocks at once each read and cache them; every get sees
/// its own value, whatever the order the blocks arrive in (real files, a cold cache).
#[test]
fn concurrent_cold_gets_of_medium_values_share_the_blocks_they_read() {
    let n = 3000;
    for warm in [0, 64 << 10] {
        let dir = tempfile::tempdir().unwrap();
        let (db, order) = upper_mediums_reopened(dir.path(), n, warm);
        let db = Arc::new(db);
        let order = Arc::new(order);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (db, order) = (Arc::clone(&db), Arc::clone(&order));
                std::thread::spawn(move || {
                    // Each thread walks the keys from another point, two of them backwards.
                    let len = order.len();
                    for j in 0..len {
                        let at = (j + t * len / 4) % len;
                        let at = if t % 2 == 1 { len - 1 - at } else { at };
                        let i = order[at];
                        assert_eq!(db.get(key(i)).unwrap(), Some(medium(i, 4)), "key {i}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Four walks over the same blocks (about 16 records to a block): however the
        // threads interleave, each reads a block at most once (the cache holds them all),
        // so at most four reads per block, never one per get.
        let reads = transient_reads(&db);
        assert!(reads * 2 <= u64::from(n), "{reads} reads for 4 x {n} gets");
    }
}

/// The blocks of a transient segment are cached as read and their records checked as gets
/// take them: a damaged record is read again from the file and reported by its own get
/// alone, and the records beside it are served.
#[test]
fn a_damaged_medium_record_is_reported_by_its_own_get_alone_and_its_neighbours_are_served() {
    let n = 3000;
    let dir = tempfile::tempdir().unwrap();
    let (db, order) = upper_mediums_reopened(dir.path(), n, 0);
    drop(db);
    // Damage the live record of a key in the middle of the key order.
    let victim = order[n as usize / 2];
    let mut needle = key(victim);
    needle.extend_from_slice(format!("{victim}/4/").as_bytes());
    let mut damaged = false;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "tlog") {
            continue;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            bytes[at + needle.len() + 4] ^= 0xff;
            std::fs::write(&path, bytes).unwrap();
            damaged = true;
        }
    }
    assert!(damaged, "the victim's record is in no transient segment");
    let db = Db::open(
        dir.path(),
        Options {
            memtable_size: 4 << 20,
            warm_read_bytes: 64 << 10,
            ..opts()
        },
    )
    .unwrap();
    // The key just before the victim: its record is followed by the victim's (one flush
    // wrote them, in key order), so the read of its block brings in the victim's record
    // and the one after it. The victim's record fails its check there: its get reads it
    // again from the file and reports the damage; the record after it is served from
    // the block that read brought back.
    let mid = order.iter().position(|&i| i == victim).unwrap();
    let (before, after) = (order[mid - 1], order[mid + 1]);
    assert_eq!(db.get(key(before)).unwrap(), Some(medium(before, 4)));
    let reads = transient_reads(&db);
    assert!(matches!(
        db.get(key(victim)),
        Err(hybridkv::Error::Corruption { .. })
    ));
    assert_eq!(db.get(key(after)).unwrap(), Some(medium(after, 4)));
    assert_eq!(
        transient_reads(&db) - reads,
        1,
        "the damaged record's get read it again, and the record after it was served"
    );
    // Every key in key order: only the victim's own get reports the damage.
    for &i in &order {
        match db.get(key(i)) {
            Ok(v) => {
                assert_ne!(i, victim, "the damaged record was read as valid");
                assert_eq!(v, Some(medium(i, 4)), "key {i}");
            }
            Err(hybridkv::Error::Corruption { .. }) => assert_eq!(i, victim),
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    assert!(db.stats().unwrap().warm_reads > 0);
}

/// A read around a medium record that fails (an I/O error) falls back to the record
/// alone; when that read fails too, the get reports the error naming the transient
/// segment, and caches nothing: once the device answers again, the same get reads it.
#[test]
fn a_failed_read_around_a_medium_record_falls_back_to_the_record_alone() {
    let n = 3000;
    let fs = HookedFs::new(Arc::new(SimFs::new()), FailReads::default());
    let open = |o| Db::open_with_fs("/db", o, Arc::new(fs.clone())).unwrap();
    let (db, order) = upper_mediums_reopened_on(open, n, 64 << 10);
    // A record alone is a few hundred bytes (a 4 KiB block or two with direct reads);
    // the read around one is 64 KiB: fail the next transient-log read of 16 KiB or more.
    let first = order[0];
    fs.hooks().arm("tlog", 16 << 10, 1);
    assert_eq!(db.get(key(first)).unwrap(), Some(medium(first, 4)));
    assert_eq!(fs.hooks().failed(), 1, "the read around was not tried");
    // Nothing around it was cached: the record after it costs a read of its own.
    let second = order[1];
    let reads = transient_reads(&db);
    assert_eq!(db.get(key(second)).unwrap(), Some(medium(second, 4)));
    assert_eq!(transient_reads(&db) - reads, 1);

    // Every transient-log read fails: a get of a record not cached reports the error.
    let far = order[n as usize / 2];
    fs.hooks().arm("tlog", 0, u64::MAX);
    assert_io_error_on(db.get(key(far)), "tlog");
    assert!(fs.hooks().failed() >= 2);

    // The device answers again: every key reads its value, the records around cached.
    fs.hooks().disarm();
    assert_eq!(db.get(key(far)).unwrap(), Some(medium(far, 4)));
    let reads = transient_reads(&db);
    for &i in &order {
        assert_eq!(db.get(key(i)).unwrap(), Some(medium(i, 4)), "key {i}");
    }
    let walk = transient_reads(&db) - reads;
    assert!(walk * 16 <= u64::from(n), "{walk} reads for {n} keys");
    assert!(db.stats().unwrap().warm_neighbours > 0);
}
