//! The node cache's warm restart (`Options::reload_cache`): a clean close names what the
//! cache holds in `CACHE_HINTS`, and the next open reads it back, checked, within the
//! budget; a hint file that is damaged, stale or names damaged bytes costs nothing but
//! the reload.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use common::hooked_fs::{FailNamed, HookedFs};
use hybridkv::{Db, Error, Options};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn opts() -> Options {
    Options {
        memtable_size: 256 << 10,
        growth_factor: 4,
        max_levels: 3,
        cache_bytes: 32 << 20,
        gc_interval: std::time::Duration::from_secs(3600),
        reload_cache: true,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("user{:08}", i.wrapping_mul(2_654_435_761) % 100_000_007).into_bytes()
}

/// Small, medium and large values (in the leaves, the transient log and the large log).
fn value(i: u32) -> Vec<u8> {
    let len = match i % 5 {
        0 | 1 => 9,
        2 | 3 => 150,
        _ => 1500,
    };
    let mut v = format!("{i}:").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

const N: u32 = 6000;

/// A database of `N` pairs spread over levels and logs.
fn fill(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    fill_with(dir, opts())
}

fn fill_with(dir: &Path, o: Options) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let db = Db::open(dir, o).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..N {
        db.put(key(i), value(i)).unwrap();
        model.insert(key(i), value(i));
    }
    db.flush().unwrap();
    db.compact().unwrap();
    db.close().unwrap();
    model
}

/// Opens, reads every key (so the cache holds what they need), checks each, closes.
fn read_all_and_close(dir: &Path, o: Options, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let db = Db::open(dir, o).unwrap();
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    db.close().unwrap();
}

#[test]
fn a_reopened_database_finds_what_its_cache_held_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let model = fill(dir.path());
    read_all_and_close(dir.path(), opts(), &model);
    assert!(dir.path().join("CACHE_HINTS").exists());

    let db = Db::open(dir.path(), opts()).unwrap();
    db.wait_for_cache_reload();
    let before = db.stats().unwrap();
    assert!(before.cache_reloaded > 0, "nothing reloaded");
    assert!(before.cache_reload_bytes > 0);
    assert_eq!(before.cache_hints_rejected, 0);
    // Every get is served from memory: no lookup misses the cache.
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    let after = db.stats().unwrap();
    assert_eq!(
        after.cache_misses, before.cache_misses,
        "gets missed the cache"
    );
    assert!(after.cache_hits > before.cache_hits);
    // The reload read spans of nodes and records, not the whole database.
    assert!(after.cache_bytes <= opts().cache_bytes as u64);
    db.close().unwrap();
}

#[test]
fn without_the_option_no_hints_are_written_or_read() {
    let dir = tempfile::tempdir().unwrap();
    let off = Options {
        reload_cache: false,
        ..opts()
    };
    let model = fill_with(dir.path(), off.clone());
    read_all_and_close(dir.path(), off.clone(), &model);
    assert!(!dir.path().join("CACHE_HINTS").exists());
    // Hints left by an earlier open with the option on are not read either.
    read_all_and_close(dir.path(), opts(), &model);
    assert!(dir.path().join("CACHE_HINTS").exists());
    let db = Db::open(dir.path(), off).unwrap();
    db.wait_for_cache_reload();
    assert_eq!(db.stats().unwrap().cache_reloaded, 0);
    db.close().unwrap();
    // Nor without a cache.
    let none = Options {
        cache_bytes: 0,
        ..opts()
    };
    let db = Db::open(dir.path(), none).unwrap();
    db.wait_for_cache_reload();
    assert_eq!(db.stats().unwrap().cache_reloaded, 0);
    db.close().unwrap();
}

#[test]
fn a_damaged_hint_file_is_ignored_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let model = fill(dir.path());
    read_all_and_close(dir.path(), opts(), &model);
    let path = dir.path().join("CACHE_HINTS");
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.wait_for_cache_reload();
    let s = db.stats().unwrap();
    assert_eq!((s.cache_reloaded, s.cache_hints_rejected), (0, 1));
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    db.close().unwrap();
    // That close wrote a good one again.
    let db = Db::open(dir.path(), opts()).unwrap();
    db.wait_for_cache_reload();
    assert!(db.stats().unwrap().cache_reloaded > 0);
    db.close().unwrap();
}

#[test]
fn hints_of_files_merged_away_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = fill(dir.path());
    read_all_and_close(dir.path(), opts(), &model);
    let hints = std::fs::read(dir.path().join("CACHE_HINTS")).unwrap();
    // Every pair written again and merged down: the hinted runs are gone.
    let db = Db::open(dir.path(), opts()).unwrap();
    db.wait_for_cache_reload();
    let all = db.stats().unwrap().cache_reloaded;
    for i in 0..N {
        let v = value(i + 7);
        db.put(key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    db.compact_all().unwrap();
    db.close().unwrap();
    std::fs::write(dir.path().join("CACHE_HINTS"), &hints).unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.wait_for_cache_reload();
    let s = db.stats().unwrap();
    assert_eq!(s.cache_hints_rejected, 0);
    // Only entries of files still live (large-log segments no GC has freed) came back.
    assert!(s.cache_reloaded < all, "{} of {all}", s.cache_reloaded);
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    db.close().unwrap();
}

#[test]
fn a_smaller_cache_reloads_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let model = fill(dir.path());
    read_all_and_close(dir.path(), opts(), &model);
    let small = Options {
        cache_bytes: 256 << 10,
        ..opts()
    };
    let db = Db::open(dir.path(), small).unwrap();
    db.wait_for_cache_reload();
    let s = db.stats().unwrap();
    assert!(s.cache_reloaded > 0);
    // The reload stops with a sixteenth of the budget free.
    assert!(
        s.cache_bytes <= (256 << 10) - (256 << 10) / 16,
        "{} bytes held",
        s.cache_bytes
    );
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    db.close().unwrap();
}

#[test]
fn reads_while_the_reload_runs_return_the_right_values() {
    let dir = tempfile::tempdir().unwrap();
    let model = fill(dir.path());
    read_all_and_close(dir.path(), opts(), &model);
    for _ in 0..3 {
        // No wait: gets race the reload (and a close may end it half way).
        let db = Db::open(dir.path(), opts()).unwrap();
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let db = &db;
                let model = &model;
                s.spawn(move || {
                    for (k, v) in model.iter().skip(t as usize).step_by(2) {
                        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
                    }
                });
            }
        });
        db.close().unwrap();
    }
}

#[test]
fn damaged_bytes_a_hint_names_are_not_cached_and_the_get_reports_them() {
    let dir = tempfile::tempdir().unwrap();
    let model = fill(dir.path());
    read_all_and_close(dir.path(), opts(), &model);
    // Damage every level file in the middle of a leaf.
    let mut damaged = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "lvl") {
            let mut bytes = std::fs::read(&path).unwrap();
            if bytes.len() > 3 * 4096 {
                bytes[4096 + 100] ^= 0xff;
                std::fs::write(&path, &bytes).unwrap();
                damaged += 1;
            }
        }
    }
    assert!(damaged > 0);
    let db = Db::open(dir.path(), opts()).unwrap();
    db.wait_for_cache_reload();
    assert!(db.stats().unwrap().cache_reloaded > 0);
    let mut corrupt = 0;
    for (k, v) in &model {
        match db.get(k) {
            Ok(got) => assert_eq!(got.as_ref(), Some(v)),
            Err(Error::Corruption { .. }) => corrupt += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert!(corrupt > 0, "no get met the damaged leaves");
    db.close().unwrap();
}

#[test]
fn each_keyspace_finds_its_own_entries() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let ks = db.create_keyspace("other", opts()).unwrap();
    for i in 0..N {
        db.put(key(i), value(i)).unwrap();
        ks.put(key(i), value(i + 1)).unwrap();
    }
    db.flush().unwrap();
    ks.flush().unwrap();
    for i in 0..N {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)));
        assert_eq!(ks.get(key(i)).unwrap(), Some(value(i + 1)));
    }
    drop(ks);
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.wait_for_cache_reload();
    let ks = db.keyspace("other").unwrap();
    let (root, other) = (db.stats().unwrap(), ks.stats().unwrap());
    assert!(root.cache_reloaded > 0 && other.cache_reloaded > 0);
    for i in 0..N {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)));
        assert_eq!(ks.get(key(i)).unwrap(), Some(value(i + 1)));
    }
    assert_eq!(db.stats().unwrap().cache_misses, root.cache_misses);
    assert_eq!(ks.stats().unwrap().cache_misses, other.cache_misses);
    drop(ks);
    db.close().unwrap();
}

#[test]
fn the_reload_reads_through_every_read_mode() {
    // Direct reads that spin (through io_uring), direct reads that sleep, memory maps, and
    // buffered reads: each reads back what the cache held, every get then a hit.
    for (direct_io, read_spin_us, mmap_reads) in [
        (true, 200, false),
        (true, 0, false),
        (false, 0, true),
        (false, 0, false),
    ] {
        let mode = Options {
            direct_io,
            read_spin_us,
            mmap_reads,
            ..opts()
        };
        let dir = tempfile::tempdir().unwrap();
        let model = fill_with(dir.path(), mode.clone());
        read_all_and_close(dir.path(), mode.clone(), &model);
        let db = Db::open(dir.path(), mode).unwrap();
        db.wait_for_cache_reload();
        let before = db.stats().unwrap();
        assert!(
            before.cache_reloaded > 0,
            "direct {direct_io}, mmap {mmap_reads}"
        );
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
        assert_eq!(
            db.stats().unwrap().cache_misses,
            before.cache_misses,
            "direct {direct_io}, spin {read_spin_us}, mmap {mmap_reads}"
        );
        db.close().unwrap();
    }
}

#[test]
fn a_hint_file_that_cannot_be_written_fails_no_close_and_the_one_left_costs_only_the_reload() {
    for what in ["create", "append", "sync", "rename"] {
        let dir = tempfile::tempdir().unwrap();
        // A first close writes a good hint file.
        let mut model = fill(dir.path());
        read_all_and_close(dir.path(), opts(), &model);
        let first_hints = std::fs::read(dir.path().join("CACHE_HINTS")).unwrap();

        // A second session overwrites a third of the keys and merges, so the hints left
        // name files merged away; its close cannot write the hint file, and still
        // succeeds.
        let fs = Arc::new(HookedFs::new(
            Arc::new(hybridkv::io::RealFs),
            FailNamed::new("CACHE_HINTS", what),
        ));
        let db = Db::open_with_fs(dir.path(), opts(), fs.clone()).unwrap();
        for i in (0..N).step_by(3) {
            let mut v = value(i);
            v.extend_from_slice(b"-second");
            db.put(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        db.flush().unwrap();
        db.compact().unwrap();
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{what}");
        }
        db.close().unwrap();
        assert!(fs.hooks().failed() > 0, "{what}");
        // The first session's hint file is left as it was; a write that failed after
        // the temporary file was made leaves that file behind.
        assert_eq!(
            std::fs::read(dir.path().join("CACHE_HINTS")).unwrap(),
            first_hints,
            "{what}"
        );
        assert_eq!(
            dir.path().join("CACHE_HINTS.tmp").exists(),
            what != "create",
            "{what}"
        );

        // The next open reads what the first close named (stale now): every get still
        // returns the second session's values, and the temporary file a failed write
        // left behind is swept.
        let db = Db::open(dir.path(), opts()).unwrap();
        db.wait_for_cache_reload();
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{what}");
        }
        assert!(!dir.path().join("CACHE_HINTS.tmp").exists(), "{what}");
        db.close().unwrap();
    }
}
