//! Close and reopen at every stage (memtable only, after flushes, after compactions, after
//! GC), damaged logs and level files, and the directory lock.

// Helpers outside `#[test]` functions unwrap too: a panic is the failure report here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hybridkv::{Db, Error, Options, WriteBatch};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Small memtable: writes flush and merge on their own.
fn small_opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 4,
        cache_bytes: 4 << 20,
        large_segment_size: 64 << 10,
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

/// Large memtable: nothing leaves the small log (WAL) unless `flush` is called.
fn wal_opts() -> Options {
    Options {
        memtable_size: 64 << 20,
        ..small_opts()
    }
}

fn value(i: u32, round: u32, len: usize) -> Vec<u8> {
    let mut v = format!("{i}/{round}/").into_bytes();
    let fill = (i.wrapping_mul(31) ^ round) as u8;
    v.resize(len.max(v.len()), fill);
    v
}

/// Small, medium and large sizes (placement classes) in turn.
fn len_for(i: u32) -> usize {
    match i % 10 {
        0 => 3000 + (i as usize % 7) * 1000,
        1..=3 => 150 + (i as usize % 500),
        _ => (i as usize * 7) % 100,
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// Writes `n` keys for `round` (puts, every 7th key deleted, some through batches).
fn write_round(db: &Db, model: &mut Model, n: u32, round: u32) {
    let mut i = 0;
    while i < n {
        if i % 50 == 0 && i + 5 <= n {
            let mut b = WriteBatch::new();
            for j in i..i + 5 {
                let v = value(j, round, len_for(j + round));
                b.put(key(j), &v);
                model.insert(key(j), v);
            }
            db.write(b).unwrap();
            i += 5;
            continue;
        }
        if (i + round).is_multiple_of(7) {
            db.delete(key(i)).unwrap();
            model.remove(&key(i));
        } else {
            let v = value(i, round, len_for(i + round));
            db.put(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        i += 1;
    }
}

fn verify(db: &Db, model: &Model, what: &str) {
    let scanned: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{what}: scan error {e}")))
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scanned.len(), want.len(), "{what}: scan length");
    for (g, w) in scanned.iter().zip(&want) {
        assert_eq!(
            g.0,
            w.0,
            "{what}: scan key {:?}",
            String::from_utf8_lossy(&w.0)
        );
        assert!(
            g.1 == w.1,
            "{what}: scan value of {:?}",
            String::from_utf8_lossy(&w.0)
        );
    }
    for (k, v) in model {
        let got = db.get(k).unwrap();
        assert!(
            got.as_ref() == Some(v),
            "{what}: get {:?} returned {:?} bytes, expected {} bytes",
            String::from_utf8_lossy(k),
            got.map(|g| g.len()),
            v.len()
        );
    }
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

/// The newest small-log file (ids are zero-padded, so the last name is the newest).
fn newest_wal(dir: &Path) -> PathBuf {
    files_with_ext(dir, "wal").pop().expect("no .wal file")
}

const WAL_FILE_HEADER: usize = 16;
const WAL_RECORD_HEADER: usize = 24;

/// `(start, total length)` of every record of a small-log file.
fn wal_records(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut pos = WAL_FILE_HEADER;
    while pos + WAL_RECORD_HEADER <= data.len() {
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
        let total = WAL_RECORD_HEADER + len;
        assert!(pos + total <= data.len(), "test log parse ran past the end");
        out.push((pos, total));
        pos += total;
    }
    assert_eq!(pos, data.len(), "trailing bytes in the log");
    out
}

/// Data written only to the memtable (and the small log) survives every reopen; each open
/// writes what it replayed to L1, so the logs do not pile up (issue 14, defect 4).
#[test]
fn reopen_with_data_only_in_the_memtable() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    {
        let db = Db::open(dir.path(), wal_opts()).unwrap();
        write_round(&db, &mut model, 600, 0);
        write_round(&db, &mut model, 300, 1);
        verify(&db, &model, "before close");
        assert_eq!(db.stats().unwrap().flushes, 0);
    }
    assert!(
        files_with_ext(dir.path(), "lvl").is_empty(),
        "a level file exists: the data did not stay in the memtable"
    );
    assert!(!files_with_ext(dir.path(), "wal").is_empty());
    for round in 0..3 {
        let db = Db::open(dir.path(), wal_opts()).unwrap();
        verify(&db, &model, &format!("reopen {round}"));
        // Opening wrote the replayed memtable to L1 and deleted the logs it came from:
        // one small-log file is left, the new one.
        assert!(
            !files_with_ext(dir.path(), "lvl").is_empty(),
            "reopen {round}: the replayed data was not flushed"
        );
        assert_eq!(
            files_with_ext(dir.path(), "wal").len(),
            1,
            "reopen {round}: replayed logs kept"
        );
        // More memtable-only writes on top of the replayed ones.
        write_round(&db, &mut model, 200, 10 + round);
        if round == 1 {
            db.close().unwrap();
        }
    }
    let db = Db::open(dir.path(), wal_opts()).unwrap();
    verify(&db, &model, "final reopen");
    assert!(db.check().unwrap().is_ok());
}

#[test]
fn reopen_after_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    {
        let db = Db::open(dir.path(), wal_opts()).unwrap();
        write_round(&db, &mut model, 800, 0);
        db.flush().unwrap();
        assert_eq!(db.stats().unwrap().flushes, 1);
        // Overwrites and deletes that stay in the memtable, shadowing the level.
        write_round(&db, &mut model, 400, 1);
        verify(&db, &model, "before close");
    }
    assert_eq!(files_with_ext(dir.path(), "lvl").len(), 1);
    {
        let db = Db::open(dir.path(), wal_opts()).unwrap();
        verify(&db, &model, "after reopen");
        db.flush().unwrap();
        verify(&db, &model, "after second flush");
    }
    let db = Db::open(dir.path(), wal_opts()).unwrap();
    verify(&db, &model, "after reopen of the flushed state");
}

#[test]
fn reopen_at_every_stage_through_compactions_and_gc() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let reopen = |model: &Model, what: &str| -> Db {
        let db = Db::open(dir.path(), small_opts()).unwrap();
        verify(&db, model, what);
        db
    };
    let db = Db::open(dir.path(), small_opts()).unwrap();
    // Stage 1: writes with automatic flushes, dropped without waiting for background work.
    write_round(&db, &mut model, 3000, 0);
    drop(db);
    let db = reopen(&model, "after writes");
    // Stage 2: explicit flush.
    write_round(&db, &mut model, 1500, 1);
    db.flush().unwrap();
    drop(db);
    let db = reopen(&model, "after flush");
    // Stage 3: enough data for level-to-level merges.
    let mut compactions = 0;
    let mut round = 2;
    while compactions < 3 && round < 40 {
        write_round(&db, &mut model, 4000, round);
        db.compact().unwrap();
        compactions = db.stats().unwrap().compactions;
        round += 1;
    }
    assert!(compactions >= 3, "no compaction happened");
    let deep = db
        .stats()
        .unwrap()
        .levels
        .iter()
        .filter(|l| l.level > 1 && l.files > 0)
        .count();
    assert!(deep > 0, "no level below L1 holds data");
    drop(db);
    let db = reopen(&model, "after compactions");
    // Stage 4: a GC pass over large values made garbage by overwrites.
    for r in 0..3 {
        for i in (0..4000).step_by(10) {
            let v = value(i, 100 + r, 5000);
            db.put(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    let report = db.gc().unwrap();
    drop(db);
    let db = reopen(&model, "after gc");
    assert!(report.segments_freed > 0, "gc freed nothing: {report:?}");
    // Stage 5: delete most keys, merge, reopen.
    for i in 0..4000 {
        if i % 3 != 0 {
            db.delete(key(i)).unwrap();
            model.remove(&key(i));
        }
    }
    db.flush().unwrap();
    db.compact().unwrap();
    drop(db);
    let db = reopen(&model, "after deletes");
    db.close().unwrap();
    let _db = reopen(&model, "after close");
}

/// Writes 100 single-put records, drops the Db, and returns the model and the path and
/// bytes of the newest log.
fn hundred_records(dir: &Path) -> (Model, PathBuf, Vec<u8>) {
    let mut model = Model::new();
    {
        let db = Db::open(dir, wal_opts()).unwrap();
        for i in 0..100u32 {
            // The last record carries a medium value inline, so its payload is long.
            let len = if i == 99 { 900 } else { len_for(i) };
            let v = value(i, 0, len);
            db.put(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
    }
    let wal = newest_wal(dir);
    let data = std::fs::read(&wal).unwrap();
    (model, wal, data)
}

#[test]
fn torn_wal_tail_is_cut_and_earlier_writes_survive() {
    let probe = tempfile::tempdir().unwrap();
    let (_, _, data) = hundred_records(probe.path());
    let records = wal_records(&data);
    assert_eq!(records.len(), 100);
    let (last_start, last_len) = *records.last().unwrap();
    assert!(last_len > 900);
    let cuts = [
        last_start + 1,
        last_start + 10,
        last_start + WAL_RECORD_HEADER - 1,
        last_start + WAL_RECORD_HEADER,
        last_start + WAL_RECORD_HEADER + 1,
        last_start + last_len / 2,
        last_start + last_len - 1,
    ];
    for cut in cuts {
        let dir = tempfile::tempdir().unwrap();
        let (mut model, wal, data) = hundred_records(dir.path());
        assert_eq!(
            wal_records(&data),
            records,
            "the log layout is deterministic"
        );
        std::fs::OpenOptions::new()
            .write(true)
            .open(&wal)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();
        model.remove(&key(99));
        {
            let db = Db::open(dir.path(), wal_opts())
                .unwrap_or_else(|e| panic!("cut at {cut}: open failed: {e}"));
            verify(&db, &model, &format!("cut at {cut}"));
            assert_eq!(
                db.get(key(99)).unwrap(),
                None,
                "cut at {cut}: torn write visible"
            );
            // The records before the tear are in a level file now (opening flushes what
            // it replayed), so the torn log is gone, not kept to be replayed again.
            assert!(!wal.exists(), "cut at {cut}: the replayed log was kept");
            assert!(db.check().unwrap().is_ok(), "cut at {cut}: check failed");
            db.put("after", "the tear").unwrap();
            model.insert(b"after".to_vec(), b"the tear".to_vec());
        }
        let db = Db::open(dir.path(), wal_opts())
            .unwrap_or_else(|e| panic!("cut at {cut}: second open failed: {e}"));
        verify(&db, &model, &format!("cut at {cut}, second reopen"));
    }
}

#[test]
fn corrupt_wal_record_in_the_middle_is_corruption_naming_file_and_offset() {
    // A flipped payload byte and a flipped header byte, each in record 3 of 100.
    for (what, delta) in [("payload", WAL_RECORD_HEADER + 2), ("header", 5)] {
        let dir = tempfile::tempdir().unwrap();
        let (_, wal, mut data) = hundred_records(dir.path());
        let records = wal_records(&data);
        let (start, _) = records[3];
        data[start + delta] ^= 0x20;
        std::fs::write(&wal, &data).unwrap();
        for attempt in 0..2 {
            match Db::open(dir.path(), wal_opts()) {
                Err(Error::Corruption {
                    file,
                    offset,
                    what: why,
                }) => {
                    assert_eq!(file, wal, "{what}: wrong file ({why})");
                    assert_eq!(offset, start as u64, "{what}: wrong offset ({why})");
                    let msg = Error::Corruption {
                        file: file.clone(),
                        offset,
                        what: why,
                    }
                    .to_string();
                    let name = wal.file_name().unwrap().to_string_lossy().to_string();
                    assert!(msg.contains(&name), "{msg}");
                    assert!(msg.contains(&start.to_string()), "{msg}");
                }
                Err(e) => panic!("{what}, attempt {attempt}: expected Corruption, got {e}"),
                Ok(_) => panic!("{what}, attempt {attempt}: open succeeded over a corrupt log"),
            }
            // The failed open repaired nothing by cutting the log.
            assert_eq!(
                std::fs::read(&wal).unwrap(),
                data,
                "{what}: log was modified"
            );
        }
    }
}

#[test]
fn corrupt_level_node_is_corruption_on_read_never_wrong_data() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2000u32;
    // No Bloom filter: an absent key must reach the damaged leaf (with one, the filter
    // answers "absent" for most absent keys, correctly, without reading the leaf).
    let opts = Options {
        bloom_bits_per_key: 0,
        ..wal_opts()
    };
    let val = |i: u32| format!("value-{i:05}-{}", "v".repeat(20)).into_bytes();
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for i in 0..n {
            db.put(key(i * 2), val(i)).unwrap();
        }
        db.flush().unwrap();
    }
    let lvls = files_with_ext(dir.path(), "lvl");
    assert_eq!(lvls.len(), 1);
    let lvl = lvls[0].clone();
    let mut data = std::fs::read(&lvl).unwrap();
    // Small inline values and no overflow blobs: the file starts with its leaves (8 KiB
    // each, kind byte 1); the only index node comes after them. Damage the second leaf.
    let leaf = 8192usize;
    assert!(
        data.len() > 4 * leaf,
        "level file too small: {}",
        data.len()
    );
    assert_eq!(data[leaf], 1, "offset {leaf} is not a leaf");
    data[leaf + 100] ^= 0xff;
    data[leaf + 4000] ^= 0x01;
    std::fs::write(&lvl, &data).unwrap();

    let db = Db::open(dir.path(), opts.clone()).expect("open must not read leaves");
    let mut damaged = Vec::new();
    for i in 0..n {
        match db.get(key(i * 2)) {
            Ok(Some(v)) => assert_eq!(v, val(i), "wrong value for key {i}"),
            Ok(None) => panic!("key {i} vanished instead of reporting corruption"),
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, lvl);
                assert_eq!(offset, leaf as u64);
                damaged.push(i);
            }
            Err(e) => panic!("key {i}: unexpected error {e}"),
        }
    }
    assert!(!damaged.is_empty(), "the damaged leaf was never reported");
    assert!(
        damaged.len() < n as usize / 2,
        "{} keys damaged",
        damaged.len()
    );
    let (first, last) = (damaged[0], *damaged.last().unwrap());
    assert_eq!(
        damaged.len() as u32,
        last - first + 1,
        "damaged keys are not one leaf's run"
    );
    // An absent key inside the damaged leaf's range is not silently "absent".
    assert!(matches!(
        db.get(key(first * 2 + 1)),
        Err(Error::Corruption { .. })
    ));
    // A scan yields pairs of the intact leaf before the damage (correct ones, in order),
    // then the corruption, then ends. (The cursor reads one entry ahead, so the error may
    // come in place of the last pair before the damaged leaf.)
    let mut it = db.iter();
    let mut good = 0u32;
    loop {
        match it.next() {
            Some(Ok((k, v))) => {
                assert!(good < first, "scan read past the damaged leaf");
                assert_eq!((k, v), (key(good * 2), val(good)));
                good += 1;
            }
            Some(Err(Error::Corruption { file, .. })) => {
                assert_eq!(file, lvl);
                break;
            }
            Some(Err(e)) => panic!("scan: unexpected error {e}"),
            None => panic!("scan ended without reporting the damaged leaf"),
        }
    }
    assert!(it.next().is_none(), "scan went on after an error");
    // A scan that stays in intact leaves works completely.
    let tail: Vec<_> = db.range(key((n - 100) * 2)..).map(|r| r.unwrap()).collect();
    assert_eq!(tail.len(), 100);
    assert_eq!(tail[0], (key((n - 100) * 2), val(n - 100)));
}

#[test]
fn reopen_right_after_drop_in_the_same_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    for i in 0..30u32 {
        let db = Db::open(dir.path(), small_opts()).unwrap_or_else(|e| panic!("reopen {i}: {e}"));
        verify(&db, &model, &format!("reopen {i}"));
        for j in 0..50 {
            let v = value(i * 50 + j, i, len_for(j));
            db.put(key(j + i * 7), &v).unwrap();
            model.insert(key(j + i * 7), v);
        }
        match i % 3 {
            0 => db.flush().unwrap(),
            1 => db.clone().close().unwrap(),
            _ => {}
        }
    }
    // A clone keeps the directory locked; the last handle's drop releases it.
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let clone = db.clone();
    drop(db);
    assert!(matches!(
        Db::open(dir.path(), small_opts()),
        Err(Error::Locked { .. })
    ));
    clone.put("from clone", "x").unwrap();
    model.insert(b"from clone".to_vec(), b"x".to_vec());
    drop(clone);
    let db = Db::open(dir.path(), small_opts()).unwrap();
    verify(&db, &model, "after the clone was dropped");
}

#[test]
fn second_open_while_the_first_is_alive_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put("k", "v1").unwrap();
    for opts in [
        small_opts(),
        Options {
            create_if_missing: false,
            ..wal_opts()
        },
    ] {
        match Db::open(dir.path(), opts) {
            Err(Error::Locked { path }) => {
                assert_eq!(path, dir.path());
                let msg = Error::Locked { path }.to_string();
                assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
            }
            Err(e) => panic!("expected Locked, got {e}"),
            Ok(_) => panic!("a second open of a live database succeeded"),
        }
    }
    // The failed opens disturbed nothing.
    db.put("k", "v2").unwrap();
    db.flush().unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v2"[..]));
    drop(db);
    let db = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v2"[..]));
}

/// A process forked while a `Db` is open (any subprocess the application starts) shares the
/// lock file's open file description until it execs or exits. Dropping the `Db` must still
/// release the directory at once: the same process can reopen it while that child lives.
#[test]
fn reopen_after_drop_while_a_forked_child_holds_the_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"k", b"v").unwrap();
    // SAFETY: the child only calls async-signal-safe functions (pause, _exit) and is
    // killed by the parent; it never returns into Rust code.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // SAFETY: see above.
        unsafe {
            libc::pause();
            libc::_exit(0);
        }
    }
    drop(db);
    let reopened = Db::open(dir.path(), small_opts());
    // SAFETY: `child` is our child's pid; reaping it with waitpid.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let db = reopened.unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn a_torn_large_log_tail_is_cut_and_mapped_reads_follow_the_new_end() {
    // The newest large-log segment loses the end of its last record (a power loss in
    // the middle of its write). With reads through memory maps, the open must cut that
    // tail under no mapping of the old length: the values before the tear read back,
    // the torn write is gone, and values written after the open (appended where the
    // cut left the file, or to a new segment) read back through the maps too.
    let opts = Options {
        mmap_reads: true,
        large_segment_size: 1 << 20,
        ..wal_opts()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for i in 0..40u32 {
            let v = value(i, 0, 5000);
            db.put(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        // Every value read once through the maps before the crash.
        verify(&db, &model, "before the tear");
    }
    let segment = files_with_ext(dir.path(), "vlog")
        .pop()
        .expect("no .vlog file");
    let len = std::fs::metadata(&segment).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    model.remove(&key(39));
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        verify(&db, &model, "after the tear");
        assert_eq!(db.get(key(39)).unwrap(), None, "the torn write is visible");
        for i in 40..80u32 {
            let v = value(i, 1, 5000 + i as usize);
            db.put(key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        verify(&db, &model, "after writes past the cut");
        let report = db.check().unwrap();
        assert!(report.is_ok(), "{report:?}");
    }
    let db = Db::open(dir.path(), opts).unwrap();
    verify(&db, &model, "reopened");
}

/// Copies every file of `from` into `to` as it is now (a crash of the process leaves the
/// files so: every write that reached the OS, nothing more), skipping the lock file.
fn copy_as_crashed(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() && e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The large log appended to through a memory map (`Options::mmap_log_writes`, the
/// default), on the real file system: a full segment is cut to its records before the
/// next starts; the one being appended to runs past its records with reserved zeros, and
/// a crash leaves them; the next open reads every write, cuts that tail, and the
/// database checks clean then and after more segments follow the cut one.
#[test]
fn mapped_large_segments_are_cut_when_full_and_a_crash_leaves_a_tail_the_open_cuts() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let crashed = dir.path().join("crashed");
    let vlogs = |dir: &Path| {
        let mut v: Vec<(PathBuf, u64)> = files_with_ext(dir, "vlog")
            .into_iter()
            .map(|p| {
                let len = std::fs::metadata(&p).unwrap().len();
                (p, len)
            })
            .collect();
        v.sort();
        v
    };
    // Each ends in a byte other than zero, so a file that ends in zero ends in
    // reserved space.
    let big = |i: u32| {
        let mut v = value(i, 7, 1500 + (i as usize % 5) * 700);
        v.push(0xab);
        v
    };
    let mut model = Model::new();
    let db = Db::open(&live, wal_opts()).unwrap();
    for i in 0..200u32 {
        db.put(key(i), big(i)).unwrap();
        model.insert(key(i), big(i));
    }
    let segs = vlogs(&live);
    assert!(segs.len() >= 3, "{} large segments", segs.len());
    let (newest, full) = segs.split_last().unwrap();
    for (p, _) in full {
        // Cut to its records: the last value's fill byte ends it, not a reserved zero.
        let bytes = std::fs::read(p).unwrap();
        assert_ne!(bytes.last(), Some(&0), "{} not cut", p.display());
    }
    let tail = std::fs::read(&newest.0).unwrap();
    assert_eq!(
        tail.len() % 4096,
        0,
        "the active segment is not reserved ahead"
    );
    assert_eq!(tail.last(), Some(&0), "no reserved tail to cut");
    copy_as_crashed(&live, &crashed);
    drop(db);

    let db = Db::open(&crashed, wal_opts()).unwrap();
    verify(&db, &model, "after the crash");
    let cut = std::fs::read(crashed.join(newest.0.file_name().unwrap())).unwrap();
    assert!(
        cut.len() < tail.len() && cut.last() != Some(&0),
        "tail not cut"
    );
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report}");
    // More segments after the cut one; a full pass of GC reads the old ones strictly.
    for i in 0..200u32 {
        db.put(key(i + 1000), big(i + 1000)).unwrap();
        model.insert(key(i + 1000), big(i + 1000));
    }
    db.gc().unwrap();
    db.close().unwrap();
    let db = Db::open(&crashed, wal_opts()).unwrap();
    verify(&db, &model, "after a close");
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report}");
    for (p, len) in vlogs(&crashed) {
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len() as u64, len);
        assert_ne!(bytes.last(), Some(&0), "{} not cut at close", p.display());
    }
}

/// A leaf whose checksum holds but whose search key (the 2 key bytes a lookup compares
/// in its slot array) does not match its key misdirects gets: `check` must name it.
#[test]
fn check_reports_a_leaf_whose_search_key_lies() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        bloom_bits_per_key: 0,
        ..wal_opts()
    };
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for i in 0..2000u32 {
            db.put(key(i), b"small value").unwrap();
        }
        db.flush().unwrap();
        assert!(db.check().unwrap().is_ok());
    }
    let lvl = files_with_ext(dir.path(), "lvl").remove(0);
    let mut data = std::fs::read(&lvl).unwrap();
    let leaf = opts.leaf_size;
    let node = &mut data[leaf..2 * leaf];
    assert_eq!((node[0], node[1]), (1, 4), "a version 4 leaf");
    let skip = usize::from(u16::from_le_bytes([node[2], node[3]]));
    // Slots of 4 bytes (a 2-byte cell, then the 2-byte search key) after the prefix.
    let slots = 16 + skip.next_multiple_of(4);
    node[slots + 4 * 3 + 2] ^= 0x20; // the fourth entry's search key
    let crc = crc32c::crc32c_append(crc32c::crc32c(&node[..12]), &node[16..]);
    node[12..16].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&lvl, &data).unwrap();

    let db = Db::open(dir.path(), opts).unwrap();
    let report = db.check().unwrap();
    assert_eq!(report.error_count, 1, "{report}");
    let what = &report.errors[0];
    assert!(
        what.contains("search key does not match") && what.contains(&lvl.display().to_string()),
        "{what}"
    );
}
