//! Read-only open (`Db::open_read_only`): no lock, nothing on disk changes, recovery's
//! view of the data, every change refused with `Error::ReadOnly`; and it runs beside a
//! process that holds the database open for writing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::hooked_fs::{FsCall, FsHooks, HookedFs};
use hybridkv::io::RealFs;
use hybridkv::{Db, Error, Options, WriteOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn opts() -> Options {
    Options {
        memtable_size: 256 << 10,
        ..Options::default()
    }
}

/// Every file of the directory with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn value(i: usize, len: usize) -> Vec<u8> {
    let mut v = format!("{i:06}|").into_bytes();
    v.resize(len, (i % 251) as u8);
    v
}

fn refused(what: &str, r: hybridkv::Result<()>) {
    assert!(
        matches!(r, Err(Error::ReadOnly)),
        "{what} on a read-only handle: {r:?}"
    );
}

#[test]
fn a_read_only_open_sees_the_data_and_changes_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        // Flushed pairs of every size class, then pairs only in the small log.
        for i in 0..600 {
            let v = value(i, [9, 300, 3000][i % 3]);
            db.put(format!("k{i:04}"), &v).unwrap();
            model.insert(format!("k{i:04}").into_bytes(), v);
        }
        db.flush().unwrap();
        for i in 600..700 {
            let v = value(i, [9, 300, 3000][i % 3]);
            db.put_opt(format!("k{i:04}"), &v, &WriteOptions { sync: true })
                .unwrap();
            model.insert(format!("k{i:04}").into_bytes(), v);
        }
        db.close().unwrap();
    }
    // A torn record at the end of the newest small-log file, as a crash leaves it.
    let wal = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes.extend_from_slice(&[0x5a; 40]);
    std::fs::write(&wal, &bytes).unwrap();
    let before = snapshot(dir.path());

    let db = Db::open_read_only(dir.path(), opts()).unwrap();
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    let scanned: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|p| p.unwrap()).collect();
    assert_eq!(scanned, model);
    assert!(db.check().unwrap().is_ok());
    db.stats().unwrap();
    db.space().unwrap();
    refused("put", db.put("x", "y"));
    refused("delete", db.delete("k0001"));
    refused("flush", db.flush());
    refused("compact", db.compact());
    refused("compact_all", db.compact_all());
    refused("gc", db.gc().map(|_| ()));
    db.close().unwrap();
    assert_eq!(
        snapshot(dir.path()),
        before,
        "a read-only open changed the disk"
    );

    // The writer's own open still recovers the same data (and cuts the tail itself).
    let db = Db::open(dir.path(), opts()).unwrap();
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
}

#[test]
fn a_read_only_open_runs_beside_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Db::open(dir.path(), opts()).unwrap();
    for i in 0..300 {
        writer.put(format!("a{i:04}"), value(i, 200)).unwrap();
    }
    writer.flush().unwrap();
    for i in 0..50 {
        writer.put(format!("b{i:04}"), value(i, 2000)).unwrap(); // acknowledged, not synced
    }
    // A second read-write open is refused; a read-only one is not.
    assert!(matches!(
        Db::open(dir.path(), opts()),
        Err(Error::Locked { .. })
    ));
    let reader = Db::open_read_only(dir.path(), opts()).unwrap();
    for i in 0..300 {
        assert_eq!(reader.get(format!("a{i:04}")).unwrap(), Some(value(i, 200)));
    }
    for i in 0..50 {
        assert_eq!(
            reader.get(format!("b{i:04}")).unwrap(),
            Some(value(i, 2000))
        );
    }
    // The writer goes on; the reader keeps the view it opened with.
    writer.put("after", "open").unwrap();
    writer.flush().unwrap();
    assert_eq!(reader.get("after").unwrap(), None);
    drop(reader);
    assert_eq!(writer.get("after").unwrap().as_deref(), Some(&b"open"[..]));
    writer.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get("b0049").unwrap(), Some(value(49, 2000)));
    assert!(db.check().unwrap().is_ok());
}

#[test]
fn a_read_only_open_of_a_missing_database_fails_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    let r = Db::open_read_only(&missing, Options::default());
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert!(!missing.exists());
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let r = Db::open_read_only(&empty, Options::default());
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

/// Read-only opens while a writer flushes and compacts (memtables of 64 KiB): every open
/// succeeds, and what it sees is a prefix of the writer's sequence of puts (no hole, no
/// wrong value). Bounded by counts, not time; nothing assumes a thread gets scheduled.
#[test]
fn read_only_opens_while_the_writer_installs_see_a_prefix() {
    const PUTS: usize = 6000;
    let dir = tempfile::tempdir().unwrap();
    let small = Options {
        memtable_size: 64 << 10,
        growth_factor: 2,
        large_segment_size: 64 << 10,
        ..Options::default()
    };
    let writer = Db::open(dir.path(), small.clone()).unwrap();
    let key = |i: usize| format!("w{i:06}");
    let val = |i: usize| value(i, [9, 300, 1500][i % 3]);
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            for i in 0..PUTS {
                writer.put(key(i), val(i)).unwrap();
            }
        });
        for round in 0..15 {
            let ro = Db::open_read_only(dir.path(), small.clone())
                .unwrap_or_else(|e| panic!("read-only open {round}: {e}"));
            let seen: Vec<(Vec<u8>, Vec<u8>)> = ro.iter().map(|p| p.unwrap()).collect();
            for (j, (k, v)) in seen.iter().enumerate() {
                assert_eq!(k, key(j).as_bytes(), "open {round}: a hole before {j}");
                assert_eq!(v, &val(j), "open {round}: wrong value for {j}");
            }
        }
        w.join().unwrap();
    });
    let ro = Db::open_read_only(dir.path(), small).unwrap();
    assert_eq!(ro.iter().count(), PUTS);
}

/// Read-only opens while a writer keeps starting large-log segments and switching
/// memtables (64 KiB each): an open must neither fail nor replay a pointer into a segment
/// it did not see (found by review: "pointer to a log segment that does not exist" in
/// about one open in six). Every open iterates everything without an error, and what it
/// sees is a prefix of the writer's puts.
#[test]
fn read_only_opens_beside_a_writer_of_large_values_read_without_errors() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const ROUNDS: usize = 120;
    const MAX_PUTS: usize = 15_000;
    let dir = tempfile::tempdir().unwrap();
    let small = Options {
        memtable_size: 64 << 10,
        large_segment_size: 256 << 10,
        ..Options::default()
    };
    let writer = Db::open(dir.path(), small.clone()).unwrap();
    let key = |i: usize| format!("w{i:07}");
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Writes until the reader is done (at least 1000 puts, at most MAX_PUTS, so that
        // the data and the open files stay bounded whatever the scheduler does).
        let w = s.spawn(|| {
            let mut i = 0;
            while i < 1000 || (i < MAX_PUTS && !done.load(Ordering::Acquire)) {
                writer.put(key(i), value(i, 3000)).unwrap();
                i += 1;
            }
        });
        for round in 0..ROUNDS {
            let ro = Db::open_read_only(dir.path(), small.clone())
                .unwrap_or_else(|e| panic!("read-only open {round}: {e}"));
            for (j, pair) in ro.iter().enumerate() {
                let (k, v) = pair.unwrap_or_else(|e| panic!("open {round}, pair {j}: {e}"));
                assert_eq!(k, key(j).as_bytes(), "open {round}: a hole before {j}");
                assert_eq!(v, value(j, 3000), "open {round}: wrong value for {j}");
            }
        }
        done.store(true, Ordering::Release);
        w.join().unwrap();
    });
}

/// Options and first steps shared by the GC regressions: large values in 64 KiB segments,
/// memtables flushed only when a test says so; keys `a0000..a0004` written, flushed,
/// overwritten and merged down, so that the first segment holds counted garbage (A's first
/// versions) and live records (A's second versions, `value(i + 100, 5000)`).
fn gc_opts() -> Options {
    Options {
        memtable_size: 64 << 20,
        large_segment_size: 64 << 10,
        background_threads: 1,
        ..Options::default()
    }
}

fn a_key(i: usize) -> String {
    format!("a{i:04}")
}

fn first_segment_with_garbage(writer: &Db) {
    for i in 0..5 {
        writer.put(a_key(i), value(i, 5000)).unwrap();
    }
    writer.flush().unwrap();
    for i in 0..5 {
        writer.put(a_key(i), value(i + 100, 5000)).unwrap();
    }
    writer.compact_all().unwrap();
}

/// Found by CI (the model test's read-only op, one run in six): GC freed a large segment
/// while the small log still held the commits that first wrote into it (dead values,
/// shadowed by the overwrites further on). A read-only open took the missing segment for
/// one the writer started after the open listed the directory and ended its replay at the
/// first such commit, dropping the overwrites: the view showed stale level pointers into
/// the freed segment ("pointer to a log segment that does not exist") or lost writes.
/// Deterministic: no thread runs beside the writer.
#[test]
fn a_read_only_open_replays_past_commits_into_a_segment_gc_freed() {
    let dir = tempfile::tempdir().unwrap();
    let opts = gc_opts();
    let writer = Db::open(dir.path(), opts.clone()).unwrap();
    let a = a_key;
    let b = |i: usize| format!("b{i:04}");
    first_segment_with_garbage(&writer);
    // B fills the rest of it and the next segments, then is overwritten: these commits
    // stay in the small log (nothing is flushed from here on).
    for i in 0..20 {
        writer.put(b(i), value(i + 200, 5000)).unwrap();
    }
    for i in 0..20 {
        writer.put(b(i), value(i + 300, 5000)).unwrap();
    }
    let report = writer.gc().unwrap();
    assert!(
        report.segments_freed > 0 && report.entries_relocated > 0,
        "the first segment must be collected (A relocated, B dead): {report:?}"
    );
    writer.put("after-gc", value(7, 4000)).unwrap();
    let expect = |ro: &Db| {
        for i in 0..5 {
            assert_eq!(ro.get(a(i)).unwrap(), Some(value(i + 100, 5000)), "a{i}");
        }
        for i in 0..20 {
            assert_eq!(ro.get(b(i)).unwrap(), Some(value(i + 300, 5000)), "b{i}");
        }
        assert_eq!(ro.get("after-gc").unwrap(), Some(value(7, 4000)));
        let seen: Vec<(Vec<u8>, Vec<u8>)> = ro.iter().map(|p| p.unwrap()).collect();
        assert_eq!(seen.len(), 26);
    };

    let ro = Db::open_read_only(dir.path(), opts.clone()).unwrap();
    expect(&ro);
    drop(ro);
    drop(writer);
    // The writer's own recovery agrees.
    expect(&Db::open(dir.path(), opts).unwrap());
}

/// Hooks that let a test act between the steps of a read-only open: `on_list` runs
/// before every directory listing, with its number (from 1), and may fail it.
struct ListSteps {
    lists: AtomicUsize,
    on_list: Box<dyn Fn(usize) -> hybridkv::Result<()> + Send + Sync>,
}

impl FsHooks for ListSteps {
    fn around<T>(
        &self,
        what: FsCall<'_>,
        _path: &Path,
        call: impl FnOnce() -> hybridkv::Result<T>,
    ) -> hybridkv::Result<T> {
        if what == FsCall::List {
            let n = self.lists.fetch_add(1, Ordering::SeqCst) + 1;
            (self.on_list)(n)?;
        }
        call()
    }
}

fn stepped_fs(
    on_list: impl Fn(usize) -> hybridkv::Result<()> + Send + Sync + 'static,
) -> HookedFs<ListSteps> {
    HookedFs::new(
        Arc::new(RealFs),
        ListSteps {
            lists: AtomicUsize::new(0),
            on_list: Box::new(on_list),
        },
    )
}

/// A read-only open loads the manifest, then lists the directory. Between the two, the
/// writer collects a segment the loaded levels point into (GC relocates its live values,
/// frees and deletes it) and flushes (the small logs holding the relocations go). The
/// attempt must not take that view, whose levels point into a file that is gone: it fails
/// (the manifest changed while it read), and when the next attempt fails on an error of
/// its own, the open reports that error instead of handing out the broken view. Before the
/// fix, the open returned the first view and reading it failed with "pointer to a log
/// segment that does not exist".
#[test]
fn a_read_only_open_never_keeps_a_view_missing_a_segment_freed_while_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let opts = gc_opts();
    let writer = Arc::new(Db::open(dir.path(), opts.clone()).unwrap());
    let a = a_key;
    first_segment_with_garbage(&writer);
    for i in 0..20 {
        writer.put(format!("b{i:04}"), value(i, 5000)).unwrap(); // the segment fills
    }
    writer.flush().unwrap();

    // How many listings one attempt makes (an open with nothing happening beside it).
    let quiet = stepped_fs(|_| Ok(()));
    drop(Db::open_read_only_with_fs(dir.path(), opts.clone(), Arc::new(quiet.clone())).unwrap());
    let per_attempt = quiet.hooks().lists.load(Ordering::SeqCst);
    assert!(
        per_attempt >= 2,
        "an open lists the directory, then sweeps it"
    );

    let w = Arc::clone(&writer);
    let fs = stepped_fs(move |n| {
        if n == 2 {
            // The first attempt loaded the manifest; its sweep's listing comes next.
            let report = w.gc()?;
            assert!(report.segments_freed > 0, "{report:?}");
            w.flush()?;
        } else if n > per_attempt {
            // The next attempt fails on an error of its own.
            return Err(Error::Io {
                op: "list",
                path: PathBuf::from("injected"),
                source: std::io::ErrorKind::PermissionDenied.into(),
            });
        }
        Ok(())
    });
    match Db::open_read_only_with_fs(dir.path(), opts, Arc::new(fs)) {
        Err(Error::Io { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
        Ok(ro) => {
            // Any view handed out must read whole.
            for i in 0..5 {
                assert_eq!(ro.get(a(i)).unwrap(), Some(value(i + 100, 5000)), "a{i}");
            }
            assert!(ro.iter().all(|p| p.is_ok()));
        }
    }
}
