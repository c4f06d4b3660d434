//! Level files' large pointer tables (`Options::large_pointer_table_bytes`): a get of a large
//! pair whose leaf is not cached reads the value's record alone; a record that holds
//! another key (a shared fingerprint) sends the get to the leaf; a key under a range
//! tombstone is never answered from the table.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::io::IoComponent;
use hybridkv::{Db, Options};

fn key(i: u32) -> Vec<u8> {
    format!("user{:012}", i.wrapping_mul(2_654_435_761)).into_bytes()
}

/// Pair `i`: a large value (past `large_threshold`) when `i % 3 == 0`, else a small one.
fn value(i: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(3) {
        1500 + (i % 7) as usize
    } else {
        40
    };
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

fn opts(tables: bool) -> Options {
    Options {
        memtable_size: 256 << 10,
        // A cache, so the table is used (it saves a leaf read that would be cached), but
        // nothing in it at open, and each leaf read alone.
        cache_bytes: 32 << 20,
        prepopulate_cache: false,
        warm_read_bytes: 0,
        large_pointer_table_bytes: if tables { 256 << 20 } else { 0 },
        ..Options::default()
    }
}

/// `n` pairs merged into the levels, then the database reopened with an empty cache.
fn build(dir: &std::path::Path, n: u32, tables: bool) -> Db {
    let db = Db::open(dir, opts(tables)).unwrap();
    for i in 0..n {
        db.put(key(i), value(i)).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    drop(db);
    Db::open(dir, opts(tables)).unwrap()
}

/// Device reads of level files and of the large log that `f` makes.
fn reads(db: &Db, f: impl FnOnce()) -> (u64, u64) {
    let s = db.stats().unwrap();
    let before = (
        s.io.read_ops_by(IoComponent::LevelRead),
        s.io.read_ops_by(IoComponent::LargeLog),
    );
    f();
    let s = db.stats().unwrap();
    (
        s.io.read_ops_by(IoComponent::LevelRead) - before.0,
        s.io.read_ops_by(IoComponent::LargeLog) - before.1,
    )
}

#[test]
fn a_large_get_whose_leaf_is_not_cached_reads_only_its_record() {
    let n = 6000;
    let probes: Vec<u32> = (0..n)
        .filter(|i: &u32| i.is_multiple_of(3))
        .step_by(41)
        .collect();
    for tables in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = build(dir.path(), n, tables);
        let table_bytes = db.stats().unwrap().large_pointer_table_bytes;
        let (level, large) = reads(&db, || {
            for &i in &probes {
                assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
            }
        });
        let s = db.stats().unwrap();
        let gets = probes.len() as u64;
        assert_eq!(large, gets, "one record read per large get");
        if tables {
            assert_eq!(level, 0, "no leaf read: {s}");
            assert_eq!(s.large_pointer_reads, gets, "{s}");
            assert_eq!(s.large_pointer_misses, 0, "{s}");
        } else {
            // Without the table, each get reads its leaf first, unless an earlier probe
            // read the same leaf (the index is pinned: no index node is read).
            assert!(level > gets / 2 && level <= gets, "{level} leaf reads: {s}");
            assert_eq!(s.large_pointer_reads, 0, "{s}");
        }
        // A table costs pinned memory, 16 bytes a large pair and its directory, in its own
        // budget.
        let large_pairs = u64::from(n.div_ceil(3));
        if tables {
            assert!(table_bytes >= 16 * large_pairs, "{s}");
            assert!(table_bytes <= 17 * large_pairs, "{s}");
            let per_level: u64 = s.levels.iter().map(|l| l.large_pointer_bytes).sum();
            assert_eq!(per_level, table_bytes, "{s}");
        } else {
            assert_eq!(table_bytes, 0, "{s}");
        }
        // Small pairs and missing keys are answered as before.
        for i in (1..n).step_by(97) {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
        }
        assert_eq!(db.get(b"user-missing").unwrap(), None);
    }
}

/// The fingerprint the tables key by (`docs/FORMAT.md`, "Large pointer table"): the high
/// 32 bits of the key's xxh3 with the format's seed.
fn fingerprint(key: &[u8]) -> u32 {
    (xxhash_rust::xxh3::xxh3_64_with_seed(key, 0x6c61_7267_6570_7472) >> 32) as u32
}

/// Two keys of the form `key(i)` that share a fingerprint.
fn colliding_pair() -> (u32, u32) {
    let mut seen = std::collections::HashMap::new();
    for i in 0u32.. {
        if let Some(j) = seen.insert(fingerprint(&key(i)), i) {
            return (j, i);
        }
    }
    unreachable!("the loop returns")
}

/// `pairs` written, merged into one run, and the database reopened with an empty cache.
fn merged(dir: &std::path::Path, pairs: &[(&[u8], &[u8])]) -> Db {
    {
        let db = Db::open(dir, opts(true)).unwrap();
        for (k, v) in pairs {
            db.put(k, v).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
    }
    Db::open(dir, opts(true)).unwrap()
}

#[test]
fn a_record_holding_another_key_sends_the_get_to_the_leaf() {
    let (a, b) = colliding_pair();
    let dir = tempfile::tempdir().unwrap();
    let small = b"a small value".to_vec();
    let big = vec![7u8; 3000];
    let other = vec![9u8; 2000];
    // Another pair, so the file's table is not only the colliding key's.
    let db = merged(
        dir.path(),
        &[(&key(a), &big), (&key(b), &small), (b"user-other", &other)],
    );
    // `b` is small: the table names `a`'s record for its fingerprint, which holds `a`.
    let (level, _) = reads(&db, || {
        assert_eq!(db.get(key(b)).unwrap(), Some(small.clone()));
    });
    let s = db.stats().unwrap();
    assert_eq!(
        (s.large_pointer_reads, s.large_pointer_misses),
        (0, 1),
        "{s}"
    );
    assert_eq!(level, 1, "the leaf was read after the guess: {s}");
    assert_eq!(db.get(key(a)).unwrap(), Some(big.clone()));
    drop(db);

    // Both large: the fingerprint is left out of the table, and each get reads its leaf.
    let dir = tempfile::tempdir().unwrap();
    let big_b = vec![8u8; 2500];
    let db = merged(
        dir.path(),
        &[(&key(a), &big), (&key(b), &big_b), (b"user-other", &other)],
    );
    // The pairs share one leaf: the first get finds it uncached, the others cached.
    assert_eq!(db.get(b"user-other").unwrap(), Some(other));
    assert_eq!(db.get(key(a)).unwrap(), Some(big));
    assert_eq!(db.get(key(b)).unwrap(), Some(big_b));
    let s = db.stats().unwrap();
    assert_eq!(
        (s.large_pointer_reads, s.large_pointer_misses),
        (1, 0),
        "{s}"
    );
    drop(db);
    let db = Db::open(dir.path(), opts(true)).unwrap();
    let (level, _) = reads(&db, || {
        assert_eq!(db.get(key(a)).unwrap(), Some(vec![7u8; 3000]));
    });
    assert_eq!(level, 1, "left out of the table: the leaf is read");
    let s = db.stats().unwrap();
    assert_eq!(
        (s.large_pointer_reads, s.large_pointer_misses),
        (0, 0),
        "{s}"
    );
}

#[test]
fn a_key_under_a_range_tombstone_is_not_answered_from_the_table() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts(true)).unwrap();
        for i in 0..3000 {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
        // The tombstone stays in the memtable (and the small log): the run keeps the
        // values, and their table names them.
        db.delete_range(b"user", b"user002000000000").unwrap();
    }
    let db = Db::open(dir.path(), opts(true)).unwrap();
    let large = |i: &u32| i.is_multiple_of(3);
    let under = |i: &u32| key(*i).as_slice() < b"user002000000000".as_slice();
    // A few keys under the tombstone first, each in a leaf not yet cached: the table
    // names their records, which hold them, but the tombstone deletes them.
    for i in (0..3000).filter(large).filter(under).take(10) {
        assert_eq!(db.get(key(i)).unwrap(), None, "key {i}");
    }
    let s = db.stats().unwrap();
    assert_eq!(s.large_pointer_reads + s.large_pointer_misses, 0, "{s}");
    for i in (0..3000).filter(large).filter(|i| !under(i)) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
    let s = db.stats().unwrap();
    assert!(
        s.large_pointer_reads > 0,
        "keys past the range still use it: {s}"
    );
}

#[test]
fn a_newer_version_above_the_run_wins_over_the_table() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts(true)).unwrap();
        for i in 0..600 {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
        // Newer versions in a run above (flushed, not merged down) and in the memtable.
        for i in (0..600).step_by(6) {
            db.put(key(i), b"newer").unwrap();
        }
        db.flush().unwrap();
        for i in (3..600).step_by(6) {
            db.delete(key(i)).unwrap();
        }
    }
    let db = Db::open(dir.path(), opts(true)).unwrap();
    for i in 0..600 {
        let want = match i % 6 {
            0 => Some(b"newer".to_vec()),
            3 => None,
            _ => Some(value(i)),
        };
        assert_eq!(db.get(key(i)).unwrap(), want, "key {i}");
    }
}

/// The level files of the database in `dir`, with the offset and length of each one's
/// large pointer table (footer bytes 84..96, `docs/FORMAT.md`).
fn tables_in(dir: &std::path::Path) -> Vec<(std::path::PathBuf, usize, usize)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "lvl") {
            let data = std::fs::read(&path).unwrap();
            let footer = &data[data.len() - 128..];
            let at = u64::from_le_bytes(footer[84..92].try_into().unwrap()) as usize;
            let len = u32::from_le_bytes(footer[92..96].try_into().unwrap()) as usize;
            if at > 0 {
                out.push((path, at, len));
            }
        }
    }
    out
}

#[test]
fn a_damaged_table_is_not_used_and_check_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let n = 900;
    drop(build(dir.path(), n, true));
    let tables = tables_in(dir.path());
    assert_eq!(tables.len(), 1, "one run after the compaction");
    let (path, at, len) = &tables[0];
    let mut data = std::fs::read(path).unwrap();
    data[at + len / 2] ^= 0x04;
    std::fs::write(path, &data).unwrap();

    let db = Db::open(dir.path(), opts(true)).unwrap();
    let s = db.stats().unwrap();
    assert_eq!(s.large_pointer_table_bytes, 0, "not pinned: {s}");
    assert!(s.pinned_index_bytes > 0, "the fences still are: {s}");
    for i in 0..n {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
    let s = db.stats().unwrap();
    assert_eq!(s.large_pointer_reads + s.large_pointer_misses, 0, "{s}");
    let report = db.check().unwrap();
    let text = report.to_string();
    assert_eq!(report.error_count, 1, "{text}");
    assert!(
        text.contains("large pointer table is not the one its large pairs make"),
        "{text}"
    );
    drop(db);

    // Mended (the byte put back), the table is used and `check` is clean.
    data[at + len / 2] ^= 0x04;
    std::fs::write(path, &data).unwrap();
    let db = Db::open(dir.path(), opts(true)).unwrap();
    assert!(db.stats().unwrap().large_pointer_table_bytes > 0);
    let report = db.check().unwrap();
    assert_eq!(report.error_count, 0, "{report}");
}

#[test]
fn a_large_base_under_deltas_is_read_once_by_a_get_that_folds_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options {
        merge_operator: Some(std::sync::Arc::new(hybridkv::Append)),
        ..opts(true)
    };
    let n = 600;
    {
        let db = Db::open(dir.path(), o.clone()).unwrap();
        for i in 0..n {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
    }
    let db = Db::open(dir.path(), o.clone()).unwrap();
    // Deltas above the large bases, in the memtable.
    let probes: Vec<u32> = (0..n).filter(|i| i.is_multiple_of(3)).step_by(7).collect();
    for &i in &probes {
        db.merge(key(i), b"+delta").unwrap();
    }
    let (_, large) = reads(&db, || {
        for &i in &probes {
            let mut want = value(i);
            want.extend_from_slice(b"+delta");
            assert_eq!(db.get(key(i)).unwrap(), Some(want), "key {i}");
        }
    });
    let s = db.stats().unwrap();
    assert!(s.large_pointer_reads > 0, "{s}");
    assert_eq!(large, probes.len() as u64, "each base read once: {s}");
}

#[test]
fn a_damaged_record_named_by_the_table_is_reported_by_the_leaf_path() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    drop(build(dir.path(), n, true));
    // Damage the value of pair 3 (large) in its log segment: the key is stored in the
    // record, so the segment holding it is found by searching for the key's bytes.
    let victim = key(3);
    let mut damaged = None;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "vlog") {
            let mut data = std::fs::read(&path).unwrap();
            if let Some(at) = data
                .windows(victim.len())
                .position(|w| w == victim.as_slice())
            {
                data[at + victim.len() + 100] ^= 0x40;
                std::fs::write(&path, &data).unwrap();
                damaged = Some(path);
            }
        }
    }
    let damaged = damaged.expect("the victim's segment");
    let db = Db::open(dir.path(), opts(true)).unwrap();
    let err = db.get(&victim).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    let name = damaged.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.to_string().contains(&name), "{err}");
    let s = db.stats().unwrap();
    // The table's guess met the damage and left the get to its leaf, which reports it.
    assert_eq!(
        (s.large_pointer_reads, s.large_pointer_misses),
        (0, 1),
        "{s}"
    );
    // Every other pair still reads.
    for i in (0..n).filter(|&i| i != 3) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
}

#[test]
fn a_record_longer_than_the_cache_keeps_is_not_guessed_at() {
    let dir = tempfile::tempdir().unwrap();
    let huge = vec![5u8; 100 << 10];
    let small = vec![6u8; 1500];
    let db = merged(
        dir.path(),
        &[(b"user-huge", &huge), (b"user-small", &small)],
    );
    let (level, large) = reads(&db, || {
        assert_eq!(db.get(b"user-huge").unwrap(), Some(huge.clone()));
    });
    let s = db.stats().unwrap();
    assert_eq!((level, large), (1, 1), "the leaf, then the record: {s}");
    assert_eq!(
        (s.large_pointer_reads, s.large_pointer_misses),
        (0, 1),
        "{s}"
    );
}
