//! Merges that lookups pay for (`Options::merge_bytes_per_wasted_search`): a level whose
//! runs gets search in vain, or scans position a cursor in and take nothing from, is
//! merged into the next once the searches it wasted, weighed in bytes, reach what the
//! merge rewrites, with no write to set it off (L1's runs into one run of L1 once the
//! waste pays for rewriting them alone, below any run flushed meanwhile; into L2 once it
//! pays for L2 too); Bloom filters that rule the runs out
//! leave gets nothing to waste (not scans); `0` turns it off; the engine's own lookups
//! and walks count nothing. The counts outlive the process: a clean close saves them
//! (`SEARCH_COUNTS`) and the next open adds them back, so a merge two processes paid for
//! runs; a crash keeps the last clean close's, and a damaged file is ignored and counted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use common::hooked_fs::{FailNamed, HoldLevelCreate, HookedFs};
use hybridkv::io::{CrashKind, SimFs};
use hybridkv::{Db, Keyspace, Options};
use std::sync::Arc;

const RUNS: u32 = 4;
const PER_RUN: u32 = 2_000;

/// Keys spread over the key space, so that every run covers nearly all of it and no run
/// is skipped for its key range.
fn key(i: u32) -> Vec<u8> {
    format!("key{:010}", i.wrapping_mul(2_654_435_761)).into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    vec![(i % 251) as u8; 50]
}

fn opts(bytes_per_search: u64, bloom: u32) -> Options {
    Options {
        memtable_size: 256 << 10,
        bloom_bits_per_key: bloom,
        merge_bytes_per_wasted_search: bytes_per_search,
        ..Options::default()
    }
}

/// `RUNS` flushed runs in L1, the oldest holding keys `0..PER_RUN`.
fn l1_of_runs(dir: &std::path::Path, o: Options) -> Db {
    let db = Db::open(dir, o).unwrap();
    fill_runs(&db);
    db
}

/// Writes `RUNS` runs into `ks`'s L1 (see [`l1_of_runs`]).
fn fill_runs(ks: &Keyspace) {
    for r in 0..RUNS {
        for i in r * PER_RUN..(r + 1) * PER_RUN {
            ks.put(key(i), value(i)).unwrap();
        }
        ks.flush().unwrap();
    }
    ks.compact().unwrap();
    let s = ks.stats().unwrap();
    assert_eq!(s.levels[0].files, RUNS as usize, "{s}");
    assert_eq!(s.levels[0].wasted_searches, 0, "{s}");
}

/// Reads `count` keys of the oldest run with `read` (each looks at the newer runs too),
/// then waits for every merge due. Returns L1's runs and wasted searches right after the
/// reads (a background thread may have merged L1 already, which leaves no runs and no
/// count), and L1's runs once every due merge has run.
fn read_oldest(
    db: &Keyspace,
    from: u32,
    count: u32,
    read: impl Fn(&Keyspace, u32),
) -> (usize, u64, usize) {
    for i in from..from + count {
        read(db, i % PER_RUN);
    }
    let l1 = db.stats().unwrap().levels[0].clone();
    db.compact().unwrap();
    (
        l1.files,
        l1.wasted_searches,
        db.stats().unwrap().levels[0].files,
    )
}

/// [`read_oldest`] by gets.
fn get_oldest(db: &Db, from: u32, count: u32) -> (usize, u64, usize) {
    read_oldest(db, from, count, |db, i| {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    })
}

/// `gets` of the oldest run's keys searched each newer run in vain, but for the few keys
/// below a newer run's first key, which that run's range rules out.
fn in_vain(wasted: u64, gets: u32) {
    let most = u64::from(gets) * u64::from(RUNS - 1);
    assert!(
        wasted <= most && wasted >= most * 95 / 100,
        "{wasted} of {most}"
    );
}

fn every_pair_is_there(db: &Db) {
    for i in 0..RUNS * PER_RUN {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
}

#[test]
fn runs_that_gets_search_in_vain_are_merged_once_the_waste_pays_for_the_merge() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(256, 0));
    let s = db.stats().unwrap();
    let rewrites: u64 = s.levels[0].file_bytes + s.levels[1].file_bytes;
    let compactions = s.compactions;

    // Gets that waste four fifths of what the merge rewrites (at 256 bytes a search): not
    // yet due, so L1 keeps its runs.
    let per_get = 256 * u64::from(RUNS - 1);
    let short = u32::try_from(rewrites * 4 / 5 / per_get).unwrap();
    let (_, wasted, runs) = get_oldest(&db, 0, short);
    in_vain(wasted, short);
    assert!(
        wasted * 256 < rewrites,
        "{wasted} searches, {rewrites} bytes"
    );
    assert_eq!(runs, RUNS as usize);
    assert_eq!(db.stats().unwrap().compactions, compactions);

    // Two fifths more pass it (even with a twentieth of the searches ruled out by the
    // runs' key ranges): the merge runs without a single write.
    let more = u32::try_from(rewrites * 2 / 5 / per_get).unwrap();
    let (runs_then, wasted, runs) = get_oldest(&db, short, more);
    if runs_then == RUNS as usize {
        assert!(
            wasted * 256 >= rewrites,
            "{wasted} searches, {rewrites} bytes"
        );
    }
    assert_eq!(runs, 0, "{}", db.stats().unwrap());
    let s = db.stats().unwrap();
    assert!(s.compactions > compactions, "{s}");
    assert_eq!(s.levels[1].files, 1, "{s}");
    assert_eq!(s.levels[1].entries, u64::from(RUNS * PER_RUN), "{s}");
    every_pair_is_there(&db);

    // The merged runs' count is gone with them; a key now takes one search.
    let before = db.stats().unwrap().levels[1].wasted_searches;
    assert_eq!(db.get(key(7)).unwrap(), Some(value(7)));
    assert_eq!(db.stats().unwrap().levels[1].wasted_searches, before);
    assert_eq!(db.get(b"absent").unwrap(), None);
}

#[test]
fn with_lookup_merges_off_the_runs_stay_however_many_searches_they_waste() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(0, 0));
    let compactions = db.stats().unwrap().compactions;
    let (_, wasted, runs) = get_oldest(&db, 0, 3 * PER_RUN);
    in_vain(wasted, 3 * PER_RUN);
    assert_eq!(runs, RUNS as usize);
    assert_eq!(db.stats().unwrap().compactions, compactions);
    every_pair_is_there(&db);
}

#[test]
fn runs_a_bloom_filter_rules_out_waste_next_to_nothing_and_stay() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(256, 10));
    let gets = 3 * PER_RUN;
    let (_, wasted, runs) = get_oldest(&db, 0, gets);
    // Only the filters' false positives (about 1% at 10 bits per key) search in vain.
    let searched = u64::from(gets) * u64::from(RUNS - 1);
    assert!(wasted * 20 < searched, "{wasted} of {searched}");
    assert_eq!(runs, RUNS as usize);
}

#[test]
fn a_merge_that_gets_of_two_processes_paid_for_runs_in_the_second() {
    let fs = Arc::new(SimFs::new());
    let open =
        |fs: &Arc<SimFs>| Db::open_with_fs("/db", opts(256, 0), Arc::clone(fs) as _).unwrap();
    let db = open(&fs);
    fill_runs(&db);
    let s = db.stats().unwrap();
    let rewrites: u64 = s.levels[0].file_bytes + s.levels[1].file_bytes;
    let per_get = 256 * u64::from(RUNS - 1);
    // Three fifths of what the merge rewrites, in each process: neither pays for it
    // alone, both together do (even with a twentieth ruled out by the runs' key ranges).
    let part = u32::try_from(rewrites * 3 / 5 / per_get).unwrap();
    let (_, first, runs) = get_oldest(&db, 0, part);
    in_vain(first, part);
    assert_eq!(runs, RUNS as usize);
    drop(db);
    assert!(fs
        .read_file(std::path::Path::new("/db/SEARCH_COUNTS"))
        .is_some());

    let db = open(&fs);
    let s = db.stats().unwrap();
    assert_eq!(s.levels[0].files, RUNS as usize, "{s}");
    assert_eq!(s.levels[0].wasted_searches, first, "{s}");
    assert_eq!(s.search_counts_rejected, 0, "{s}");
    let (_, _, runs) = get_oldest(&db, part, part);
    let s = db.stats().unwrap();
    assert_eq!(runs, 0, "{s}");
    assert_eq!(s.levels[1].files, 1, "{s}");
    every_pair_is_there(&db);

    // The process dies after the merge: the file of the last clean close names runs that
    // are gone. Their counts are dropped, not given to another run.
    let image = Arc::new(fs.crash_image(CrashKind::ProcessCrash));
    drop(db);
    let db = open(&image);
    let s = db.stats().unwrap();
    assert_eq!(s.levels[0].files, 0, "{s}");
    assert!(s.levels.iter().all(|l| l.wasted_searches == 0), "{s}");
    assert_eq!(s.search_counts_rejected, 0, "{s}");
    every_pair_is_there(&db);
}

#[test]
fn counts_come_back_with_lookup_merges_off_and_each_keyspace_gets_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(0, 0));
    let other = db.create_keyspace("other", opts(0, 0)).unwrap();
    fill_runs(&other);
    let (_, mine, _) = get_oldest(&db, 0, 100);
    in_vain(mine, 100);
    let (_, theirs, _) = read_oldest(&other, 0, 300, |ks, i| {
        assert_eq!(ks.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    });
    in_vain(theirs, 300);
    drop(other);
    drop(db);

    let db = Db::open(dir.path(), opts(0, 0)).unwrap();
    let other = db.keyspace("other").unwrap();
    assert_eq!(db.stats().unwrap().levels[0].wasted_searches, mine);
    assert_eq!(other.stats().unwrap().levels[0].wasted_searches, theirs);
    // They go on counting from there.
    let (_, more, _) = get_oldest(&db, 0, 100);
    assert!(more > mine, "{more} after {mine}");
    every_pair_is_there(&db);
}

#[test]
fn a_crash_keeps_the_counts_of_the_last_clean_close() {
    let fs = Arc::new(SimFs::new());
    let open = |fs: &Arc<SimFs>| Db::open_with_fs("/db", opts(0, 0), Arc::clone(fs) as _).unwrap();
    let db = open(&fs);
    fill_runs(&db);
    let (_, closed, _) = get_oldest(&db, 0, 100);
    in_vain(closed, 100);
    drop(db);

    let db = open(&fs);
    assert_eq!(db.stats().unwrap().levels[0].wasted_searches, closed);
    let (_, more, _) = get_oldest(&db, 0, 200);
    assert!(more > closed, "{more} after {closed}");
    // The process dies: what it counted since the open is lost, the saved counts are not.
    let image = Arc::new(fs.crash_image(CrashKind::ProcessCrash));
    drop(db);
    let db = open(&image);
    let s = db.stats().unwrap();
    assert_eq!(s.levels[0].wasted_searches, closed, "{s}");
    assert_eq!(s.search_counts_rejected, 0, "{s}");
    every_pair_is_there(&db);
}

#[test]
fn a_damaged_count_file_is_ignored_and_counted_and_the_next_close_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(0, 0));
    let (_, wasted, _) = get_oldest(&db, 0, 100);
    in_vain(wasted, 100);
    drop(db);
    let path = dir.path().join("SEARCH_COUNTS");
    let good = std::fs::read(&path).unwrap();

    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x10;
    std::fs::write(&path, &bad).unwrap();
    let db = Db::open(dir.path(), opts(0, 0)).unwrap();
    let s = db.stats().unwrap();
    assert_eq!(s.search_counts_rejected, 1, "{s}");
    assert_eq!(s.levels[0].wasted_searches, 0, "{s}");
    every_pair_is_there(&db);
    let counted = db.stats().unwrap().levels[0].wasted_searches;
    drop(db);

    // The close wrote a good file again, with what this process counted (the gets above
    // of keys in older runs searched the newer ones in vain).
    let db = Db::open(dir.path(), opts(0, 0)).unwrap();
    let s = db.stats().unwrap();
    assert_eq!(s.search_counts_rejected, 0, "{s}");
    assert_eq!(s.levels[0].wasted_searches, counted, "{s}");
    assert!(counted > 0, "{s}");
    drop(db);

    // The file of another version, and a file that is not one, are refused too.
    for (what, bytes) in [
        ("version 2", {
            let mut v = good.clone();
            v[8] = 2;
            v
        }),
        ("empty", Vec::new()),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let db = Db::open(dir.path(), opts(0, 0)).unwrap();
        assert_eq!(db.stats().unwrap().search_counts_rejected, 1, "{what}");
        drop(db);
    }
}

#[test]
fn the_engines_own_lookups_waste_nothing() {
    // Large values in the large log over several runs, half of them overwritten: garbage
    // collection checks each live record of the old segments with a lookup of its key.
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        large_segment_size: 256 << 10,
        ..opts(256, 0)
    };
    let db = Db::open(dir.path(), o).unwrap();
    let large = |i: u32, round: u8| vec![round.wrapping_add((i % 199) as u8); 2_000];
    for r in 0..RUNS {
        for i in r * 200..(r + 1) * 200 {
            db.put(key(i), large(i, 0)).unwrap();
        }
        db.flush().unwrap();
    }
    // Every other key: each segment half garbage, so a pass checks its live records.
    for i in (0..RUNS * 200).step_by(2) {
        db.put(key(i), large(i, 1)).unwrap();
    }
    // Merged into one run, which drops the old versions (their records become garbage);
    // then runs of other keys above it, which the liveness lookups search in vain.
    db.compact_all().unwrap();
    for r in 0..3 {
        for i in 0..100 {
            let k = 1_000_000 + r * 100 + i;
            db.put(key(k), value(k)).unwrap();
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    assert_eq!(db.stats().unwrap().levels[0].files, 3);
    let report = db.gc().unwrap();
    assert!(report.entries_checked > 0, "{report:?}");
    let check = db.check().unwrap();
    assert!(check.is_ok(), "{check:?}");
    let s = db.stats().unwrap();
    assert!(s.levels.iter().all(|l| l.wasted_searches == 0), "{s}");
    // A client's gets of the old keys do count (all but those outside the new runs' key
    // ranges search them in vain).
    for i in 0..RUNS * 200 {
        let want = large(i, u8::from(i % 2 == 0));
        assert_eq!(db.get(key(i)).unwrap(), Some(want), "key {i}");
    }
    let s = db.stats().unwrap();
    assert!(
        s.levels.iter().map(|l| l.wasted_searches).sum::<u64>() > 0,
        "{s}"
    );
}

/// [`read_oldest`] by scans of one pair starting at each key (each positions a cursor in
/// every newer run and takes nothing from it).
fn scan_oldest(db: &Db, from: u32, count: u32) -> (usize, u64, usize) {
    read_oldest(db, from, count, |db, i| {
        let mut it = db.range(key(i)..).expect_pairs(1);
        let (k, v) = it.next().unwrap().unwrap();
        assert_eq!((k, v), (key(i), value(i)), "key {i}");
    })
}

#[test]
fn runs_that_scans_position_in_vain_are_merged_once_the_waste_pays_even_with_bloom_filters() {
    // Bloom filters spare gets these runs, not scans: a range has no filter.
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(256, 10));
    let s = db.stats().unwrap();
    let rewrites: u64 = s.levels[0].file_bytes + s.levels[1].file_bytes;
    let compactions = s.compactions;

    // Four fifths of the merge's bytes: every scan wastes a seek in each newer run.
    let per_scan = 256 * u64::from(RUNS - 1);
    let short = u32::try_from(rewrites * 4 / 5 / per_scan).unwrap();
    let (_, wasted, runs) = scan_oldest(&db, 0, short);
    assert_eq!(wasted, u64::from(short) * u64::from(RUNS - 1));
    assert_eq!(runs, RUNS as usize);
    assert_eq!(db.stats().unwrap().compactions, compactions);

    // Two fifths more pass it: merged with no write.
    let more = u32::try_from(rewrites * 2 / 5 / per_scan).unwrap();
    let (runs_then, wasted, runs) = scan_oldest(&db, short, more);
    if runs_then == RUNS as usize {
        assert!(wasted * 256 >= rewrites, "{wasted} seeks, {rewrites} bytes");
    }
    assert_eq!(runs, 0, "{}", db.stats().unwrap());
    let s = db.stats().unwrap();
    assert!(s.compactions > compactions, "{s}");
    assert_eq!(s.levels[1].entries, u64::from(RUNS * PER_RUN), "{s}");
    every_pair_is_there(&db);
}

#[test]
fn scans_off_leave_the_runs_however_many_seeks_they_waste() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(0, 10));
    let compactions = db.stats().unwrap().compactions;
    let (_, wasted, runs) = scan_oldest(&db, 0, 3 * PER_RUN);
    assert_eq!(wasted, u64::from(3 * PER_RUN) * u64::from(RUNS - 1));
    assert_eq!(runs, RUNS as usize);
    assert_eq!(db.stats().unwrap().compactions, compactions);
}

#[test]
fn scans_that_take_pairs_from_every_run_waste_nothing_and_one_past_the_end_wastes_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(256, 0));
    let wasted = |db: &Db| db.stats().unwrap().levels[0].wasted_searches;

    // The whole range, from the front and from the back: each run yields.
    assert_eq!(db.iter().count(), (RUNS * PER_RUN) as usize);
    assert_eq!(db.iter().rev().count(), (RUNS * PER_RUN) as usize);
    // 100 neighbouring pairs hold keys of every run (the keys are spread over the key
    // space), and the iterator is dropped before its end.
    let some: Vec<_> = db
        .range(key(5)..)
        .take(100)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(some.len(), 100);
    assert_eq!(wasted(&db), 0);

    // A scan past the last key positions every run and takes nothing: wasted in each.
    assert_eq!(db.range(b"z".as_slice()..).count(), 0);
    assert_eq!(wasted(&db), u64::from(RUNS));
}

#[test]
fn an_iterator_used_from_both_ends_counts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(256, 0));
    let wasted = |db: &Db| db.stats().unwrap().levels[0].wasted_searches;
    // Everything from the front, then the back: the back's walk meets the front at once
    // and takes nothing, though every run gave the scan its pairs.
    let mut it = db.iter();
    assert_eq!(it.by_ref().count(), (RUNS * PER_RUN) as usize);
    assert!(it.next_back().is_none());
    drop(it);
    assert_eq!(wasted(&db), 0);
    // Seeks of one end restart the other end's walk: not a positioning in vain either.
    let mut it = db.range(key(3)..);
    for i in 0..10u32 {
        assert!(it.next().is_some());
        it.seek_back(key(i * 97));
        let _ = it.next_back();
        it.seek(key(i * 89));
    }
    drop(it);
    assert_eq!(wasted(&db), 0);
}

#[test]
fn a_run_whose_every_pair_is_deleted_wastes_a_clients_scan_not_the_engines_walk() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(256, 0)).unwrap();
    // Two runs; a range deletion (still in the memtable) covers every key of the older
    // one, so a walk of the whole range takes nothing from it.
    for (prefix, value) in [("a", 1u8), ("b", 2u8)] {
        for i in 0..PER_RUN {
            db.put(format!("{prefix}{i:06}"), vec![value; 50]).unwrap();
        }
        db.flush().unwrap();
    }
    db.delete_prefix(b"a").unwrap();
    db.compact().unwrap();
    let l1 = |db: &Db| db.stats().unwrap().levels[0].clone();
    assert_eq!(l1(&db).files, 2);

    // Space accounting walks every key for the engine: it counts nothing.
    assert_eq!(db.space().unwrap().live_pairs, u64::from(PER_RUN));
    assert_eq!(l1(&db).wasted_searches, 0);

    // A client's walk of the same range counts the older run once.
    assert_eq!(db.iter().count(), PER_RUN as usize);
    assert_eq!(l1(&db).wasted_searches, 1);
}

#[test]
fn a_count_file_that_cannot_be_written_fails_no_close_and_leaves_the_last_counts() {
    for what in ["create", "append", "sync", "rename"] {
        let dir = tempfile::tempdir().unwrap();
        let db = l1_of_runs(dir.path(), opts(0, 0));
        let (_, first, _) = get_oldest(&db, 0, 100);
        in_vain(first, 100);
        drop(db);

        // A second process counts more; its close cannot write the file, and still
        // succeeds.
        let fs = Arc::new(HookedFs::new(
            Arc::new(hybridkv::io::RealFs),
            FailNamed::new("SEARCH_COUNTS", what),
        ));
        let db = Db::open_with_fs(dir.path(), opts(0, 0), fs.clone()).unwrap();
        let (_, more, _) = get_oldest(&db, 0, 100);
        assert!(more > first, "{what}: {more} after {first}");
        db.close().unwrap();
        assert!(fs.hooks().failed() > 0, "{what}");
        assert_eq!(
            dir.path().join("SEARCH_COUNTS.tmp").exists(),
            what != "create",
            "{what}"
        );

        // The next open adds back what the first close saved, and sweeps the temporary
        // file a failed write left.
        let db = Db::open(dir.path(), opts(0, 0)).unwrap();
        let s = db.stats().unwrap();
        assert_eq!(s.levels[0].wasted_searches, first, "{what}: {s}");
        assert_eq!(s.search_counts_rejected, 0, "{what}: {s}");
        assert!(!dir.path().join("SEARCH_COUNTS.tmp").exists(), "{what}");
        every_pair_is_there(&db);
        db.close().unwrap();
    }
}

#[test]
fn a_count_file_that_cannot_be_read_is_counted_and_the_open_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = l1_of_runs(dir.path(), opts(0, 0));
    let (_, wasted, _) = get_oldest(&db, 0, 100);
    in_vain(wasted, 100);
    drop(db);

    // Opening the file fails (EIO on the real file system): the open succeeds with every
    // count at zero, and says so.
    let fs = Arc::new(HookedFs::new(
        Arc::new(hybridkv::io::RealFs),
        FailNamed::new("SEARCH_COUNTS", "open"),
    ));
    let db = Db::open_with_fs(dir.path(), opts(0, 0), fs.clone()).unwrap();
    assert!(fs.hooks().failed() > 0);
    let s = db.stats().unwrap();
    assert_eq!(s.search_counts_rejected, 1, "{s}");
    assert_eq!(s.levels[0].wasted_searches, 0, "{s}");
    every_pair_is_there(&db);
    db.close().unwrap();
}

/// Pairs of an L2 written before the runs: keys `L2_FROM..L2_FROM + L2_KEYS`.
const L2_FROM: u32 = 100_000;
const L2_KEYS: u32 = 40_000;

/// An L2 of `L2_KEYS` pairs, several times larger than the `RUNS` runs then flushed into
/// L1 (see [`fill_runs`]).
fn l2_then_l1_runs(ks: &Keyspace) {
    for i in L2_FROM..L2_FROM + L2_KEYS {
        ks.put(key(i), value(i)).unwrap();
    }
    ks.compact_all().unwrap();
    let s = ks.stats().unwrap();
    assert_eq!((s.levels[0].files, s.levels[1].files), (0, 1), "{s}");
    fill_runs(ks);
}

fn every_l2_pair_is_there(db: &Db) {
    for i in L2_FROM..L2_FROM + L2_KEYS {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
}

/// After a merge within L1 left it one run, with four runs flushed into L1 since its last
/// merge into L2 (`l2_entries` in L2): three more flushes
/// (seven, one short of the limit, `growth_factor` 8) merge nothing, though L1 holds four
/// runs; the fourth makes eight, and L1 goes into L2.
fn four_flushes_make_l1_due(db: &Db, l2_entries: u64) {
    let compactions = db.stats().unwrap().compactions;
    let flush_run = |r: u32| {
        for i in 0..PER_RUN {
            let k = L2_FROM * 2 + r * PER_RUN + i;
            db.put(key(k), value(k)).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
    };
    for r in 0..RUNS - 1 {
        flush_run(r);
    }
    let s = db.stats().unwrap();
    assert_eq!((s.levels[0].files, s.compactions), (4, compactions), "{s}");
    flush_run(RUNS - 1);
    let s = db.stats().unwrap();
    assert_eq!(s.levels[0].files, 0, "{s}");
    assert_eq!(
        s.levels[1].entries,
        l2_entries + u64::from(2 * RUNS * PER_RUN),
        "{s}"
    );
}

#[test]
fn runs_whose_waste_pays_for_rewriting_them_but_not_l2_are_merged_into_one_run_of_l1() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(256, 0)).unwrap();
    l2_then_l1_runs(&db);
    let s = db.stats().unwrap();
    let (l1, l2) = (s.levels[0].file_bytes, s.levels[1].file_bytes);
    let l2_entries = s.levels[1].entries;
    assert!(l2 > 3 * l1, "{s}");

    // Four fifths of what rewriting L1's runs costs: nothing.
    let per_get = 256 * u64::from(RUNS - 1);
    let short = u32::try_from(l1 * 4 / 5 / per_get).unwrap();
    let (_, wasted, runs) = get_oldest(&db, 0, short);
    in_vain(wasted, short);
    assert_eq!(runs, RUNS as usize);
    assert_eq!(db.stats().unwrap().merges_within_l1, 0);

    // Two fifths more pay for L1's runs (not for L2 besides): they become one run of L1,
    // and L2 is not rewritten.
    let more = u32::try_from(l1 * 2 / 5 / per_get).unwrap();
    let (runs_then, wasted, runs) = get_oldest(&db, short, more);
    if runs_then == RUNS as usize {
        assert!(wasted * 256 >= l1, "{wasted} searches, {l1} bytes");
        assert!(
            wasted * 256 < l1 + l2,
            "{wasted} searches, {l1} + {l2} bytes"
        );
    }
    let s = db.stats().unwrap();
    assert_eq!(runs, 1, "{s}");
    assert_eq!(s.merges_within_l1, 1, "{s}");
    assert_eq!(s.levels[0].entries, u64::from(RUNS * PER_RUN), "{s}");
    assert_eq!(
        (s.levels[1].file_bytes, s.levels[1].entries),
        (l2, l2_entries),
        "{s}"
    );

    // A key of the oldest run is now one search in L1, not one per run; no key of L1 is
    // a search in vain.
    let before = s.levels[0].wasted_searches;
    assert_eq!(db.get(key(3)).unwrap(), Some(value(3)));
    every_pair_is_there(&db);
    assert_eq!(db.stats().unwrap().levels[0].wasted_searches, before);

    // The merge within L1 did not reset its run limit: the `growth_factor` (8) flushes
    // since L1's last merge into L2 make it due, though L1 holds fewer runs.
    four_flushes_make_l1_due(&db, l2_entries);

    // Reopened without lookup merges (gets of L2's keys would pay for another merge).
    drop(db);
    let db = Db::open(dir.path(), opts(0, 0)).unwrap();
    every_pair_is_there(&db);
    every_l2_pair_is_there(&db);
    for k in L2_FROM * 2..L2_FROM * 2 + RUNS * PER_RUN {
        assert_eq!(db.get(key(k)).unwrap(), Some(value(k)), "key {k}");
    }
}

#[test]
fn a_merge_within_l1_goes_below_a_run_flushed_while_it_ran() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(HookedFs::new(
        Arc::new(hybridkv::io::RealFs),
        HoldLevelCreate::default(),
    ));
    let db = Db::open_with_fs(dir.path(), opts(256, 0), fs.clone()).unwrap();
    l2_then_l1_runs(&db);
    let l1 = db.stats().unwrap().levels[0].file_bytes;

    // Gets that pay for merging L1's runs into one (not L2 besides); the merge is held as
    // it creates its output.
    fs.hooks().arm();
    let per_get = 256 * u64::from(RUNS - 1);
    let gets = u32::try_from(l1 * 6 / 5 / per_get).unwrap();
    for i in 0..gets {
        assert_eq!(db.get(key(i % PER_RUN)).unwrap(), Some(value(i % PER_RUN)));
    }
    fs.hooks().wait_holding();

    // Meanwhile a newer version of a key of the oldest run is flushed (on the other
    // background thread), as L1's newest run, with a range tombstone over another key of
    // the oldest run, which the merge (begun before it) does not apply: the tombstone
    // must go on deleting it in the merged run.
    db.put(key(5), b"newer").unwrap();
    let mut end = key(6);
    end.push(0);
    db.delete_range(key(6), &end).unwrap();
    db.flush().unwrap();
    assert_eq!(db.stats().unwrap().levels[0].files, RUNS as usize + 1);
    fs.hooks().release();
    db.compact().unwrap();

    // The merged run went below it: the newer version is what a get finds, before and
    // after a reopen.
    let s = db.stats().unwrap();
    assert_eq!(s.merges_within_l1, 1, "{s}");
    assert_eq!(s.levels[0].files, 2, "{s}");
    assert_eq!(db.get(key(5)).unwrap().as_deref(), Some(&b"newer"[..]));
    assert_eq!(db.get(key(6)).unwrap(), None);
    drop(db);
    let db = Db::open(dir.path(), opts(0, 0)).unwrap();
    assert_eq!(db.get(key(5)).unwrap().as_deref(), Some(&b"newer"[..]));
    assert_eq!(db.get(key(6)).unwrap(), None);
    for i in (0..RUNS * PER_RUN).filter(|&i| i != 5 && i != 6) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
    every_l2_pair_is_there(&db);
}

/// L1's run limit counts the runs flushed into it since its last merge into L2, and a
/// reopen starts that count at the runs L1 holds: runs flushed by the last process, then
/// merged within L1 by this one, still count towards the merge into L2.
#[test]
fn the_runs_flushed_before_a_reopen_count_towards_l1s_merge_into_l2() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(0, 0)).unwrap();
    l2_then_l1_runs(&db);
    let l2_entries = db.stats().unwrap().levels[1].entries;
    drop(db);

    // A new process: the four runs flushed before it are merged into one run of L1.
    let db = Db::open(dir.path(), opts(256, 0)).unwrap();
    let s = db.stats().unwrap();
    assert_eq!(s.levels[0].files, RUNS as usize, "{s}");
    let per_get = 256 * u64::from(RUNS - 1);
    let gets = u32::try_from(s.levels[0].file_bytes * 6 / 5 / per_get).unwrap();
    let (_, _, runs) = get_oldest(&db, 0, gets);
    let s = db.stats().unwrap();
    assert_eq!((runs, s.merges_within_l1), (1, 1), "{s}");

    // Four more flushes make eight since L1's last merge into L2 (a count started at
    // zero by the reopen would make four, and leave L1 where it is).
    four_flushes_make_l1_due(&db, l2_entries);
    drop(db);
    let db = Db::open(dir.path(), opts(0, 0)).unwrap();
    every_pair_is_there(&db);
    every_l2_pair_is_there(&db);
}

/// A medium value (between `small_threshold` and `large_threshold`) for key `i`.
fn medium_value(i: u32) -> Vec<u8> {
    let mut v = vec![(i % 241) as u8; 300];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

/// With L1 the merge level (`MediumMergeLevel::SecondToLast` over an L2), flushes write
/// medium values into L1's runs in place, and a merge within L1 carries them over as they
/// are: every value reads back the same, before and after a reopen, no medium value goes
/// through the transient log, and L2 is not rewritten.
#[test]
fn a_merge_within_l1_at_the_merge_level_keeps_its_medium_values_in_place() {
    // Runs of medium pairs that each fit one memtable.
    const PER_MEDIUM_RUN: u32 = 500;
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        medium_merge_level: hybridkv::MediumMergeLevel::SecondToLast,
        ..opts(256, 0)
    };
    let db = Db::open(dir.path(), o.clone()).unwrap();
    for i in L2_FROM..L2_FROM + L2_KEYS {
        db.put(key(i), value(i)).unwrap();
    }
    db.compact_all().unwrap();
    let s = db.stats().unwrap();
    assert_eq!((s.levels[0].files, s.levels[1].files), (0, 1), "{s}");
    let (l2, l2_entries) = (s.levels[1].file_bytes, s.levels[1].entries);

    // `RUNS` runs of medium pairs flushed into L1, written there in place.
    let pairs = RUNS * PER_MEDIUM_RUN;
    for r in 0..RUNS {
        for i in r * PER_MEDIUM_RUN..(r + 1) * PER_MEDIUM_RUN {
            db.put(key(i), medium_value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let s = db.stats().unwrap();
    assert_eq!(
        (s.levels[0].files, s.levels[0].entries),
        (RUNS as usize, u64::from(pairs)),
        "{s}"
    );
    assert_eq!(
        (s.medium_values_logged, s.transient_segments),
        (0, 0),
        "{s}"
    );
    let l1 = s.levels[0].file_bytes;
    assert!(l1 > u64::from(pairs) * 300, "{s}");
    assert!(l2 > 2 * l1, "{s}");

    // Gets of the oldest run's keys waste a search in each newer run until the waste
    // pays for rewriting L1's runs (their values in place included), not L2 besides.
    let per_get = 256 * u64::from(RUNS - 1);
    let gets = u32::try_from(l1 * 6 / 5 / per_get).unwrap();
    for i in 0..gets {
        let i = i % PER_MEDIUM_RUN;
        assert_eq!(db.get(key(i)).unwrap(), Some(medium_value(i)), "key {i}");
    }
    db.compact().unwrap();
    let s = db.stats().unwrap();
    assert_eq!((s.levels[0].files, s.merges_within_l1), (1, 1), "{s}");
    assert_eq!(s.levels[0].entries, u64::from(pairs), "{s}");
    assert_eq!(
        (s.levels[1].file_bytes, s.levels[1].entries),
        (l2, l2_entries),
        "{s}"
    );
    assert_eq!(
        (s.medium_values_logged, s.transient_segments),
        (0, 0),
        "{s}"
    );

    let check = |db: &Db| {
        for i in 0..pairs {
            assert_eq!(db.get(key(i)).unwrap(), Some(medium_value(i)), "key {i}");
        }
        every_l2_pair_is_there(db);
    };
    check(&db);
    drop(db);
    let o = Options {
        merge_bytes_per_wasted_search: 0,
        ..o
    };
    let db = Db::open(dir.path(), o).unwrap();
    check(&db);
}

/// Keys of L2 that [`flush_overwrites`] writes again.
const OVERWRITTEN: std::ops::Range<u32> = L2_FROM..L2_FROM + PER_RUN;

/// Writes the keys [`OVERWRITTEN`] again (each round's values differ) and flushes: a run
/// that shadows one version of each of them, in L1's newest run or else in L2.
fn flush_overwrites(db: &Db, round: u32) {
    for i in OVERWRITTEN {
        db.put(key(i), overwrite(i, round)).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
}

fn overwrite(i: u32, round: u32) -> Vec<u8> {
    let mut v = value(i);
    v.extend_from_slice(&round.to_le_bytes());
    v
}

/// Flushes overwrite runs (rounds `from..`) until L1 is merged into L2; returns how many
/// it took. L1's run limit is far away (`growth_factor` 32), so what makes L1 due is the
/// share of dead versions its runs shadow.
fn flushes_until_l1_goes_down(db: &Db, from: u32) -> u32 {
    for n in 1..=20 {
        flush_overwrites(db, from + n);
        if db.stats().unwrap().levels[0].files == 0 {
            return n;
        }
    }
    panic!("L1 never went into L2: {}", db.stats().unwrap());
}

#[test]
fn a_merge_within_l1_takes_the_versions_it_dropped_out_of_l1s_dead_share() {
    // Four runs that overwrite the same keys of L2 shadow three runs' worth of versions
    // in L1 and one in L2, a small share of L1 and the L2 a merge into L2 would rewrite.
    // A merge within L1 drops the versions in L1 and takes them out of the estimate, as
    // the bytes L1's nodes shrank by (which exceed the entries they held: it may take the
    // share in L2 with them, counting low, never high). So about as many new overwrite runs
    // make L1 due for L2 as in a database that never had the older runs, one more at most;
    // were the dropped versions still counted, about half as many.
    let o = || Options {
        growth_factor: 32,
        ..opts(256, 0)
    };
    // The same L2 and the same overwrite runs, without the first four runs and their
    // merge within L1: how many overwrite runs it takes from one run of L1.
    let fresh = tempfile::tempdir().unwrap();
    let base = Db::open(fresh.path(), o()).unwrap();
    for i in L2_FROM..L2_FROM + L2_KEYS {
        base.put(key(i), value(i)).unwrap();
    }
    base.compact_all().unwrap();
    flush_overwrites(&base, 0);
    let expected = flushes_until_l1_goes_down(&base, 0);

    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), o()).unwrap();
    for i in L2_FROM..L2_FROM + L2_KEYS {
        db.put(key(i), value(i)).unwrap();
    }
    db.compact_all().unwrap();
    let compactions = db.stats().unwrap().compactions;
    for round in 0..RUNS {
        flush_overwrites(&db, round);
    }
    let s = db.stats().unwrap();
    assert_eq!(
        (s.levels[0].files, s.compactions),
        (RUNS as usize, compactions),
        "{s}"
    );
    // Gets of L2's keys search each of L1's runs in vain until that pays for merging them.
    let mut i = OVERWRITTEN.end;
    while db.stats().unwrap().merges_within_l1 == 0 {
        assert!(i < L2_FROM + L2_KEYS, "no merge within L1");
        for k in i..i + 100 {
            assert_eq!(db.get(key(k)).unwrap(), Some(value(k)), "key {k}");
        }
        i += 100;
        db.compact().unwrap();
    }
    let s = db.stats().unwrap();
    assert_eq!(
        (s.levels[0].files, s.levels[0].entries),
        (1, u64::from(PER_RUN)),
        "{s}"
    );
    assert_eq!(s.levels[1].entries, u64::from(L2_KEYS), "{s}");

    let took = flushes_until_l1_goes_down(&db, RUNS);
    assert!(
        took == expected || took == expected + 1,
        "{took} overwrite runs made L1 due after the merge within L1, {expected} from one run"
    );
    for i in OVERWRITTEN {
        assert_eq!(
            db.get(key(i)).unwrap(),
            Some(overwrite(i, RUNS + took)),
            "key {i}"
        );
    }
}
