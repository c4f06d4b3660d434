//! Regression tests for the bugs the crash-point enumeration (`crash_points.rs`) found,
//! each reduced to the smallest sequence on a `SimFs` that showed it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hybridkv::io::{CrashKind, FailMode, FileSystem, SimFs};
use hybridkv::{Db, Error, Options, WriteBatch, WriteOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const DIR: &str = "/db";
const SYNC: WriteOptions = WriteOptions { sync: true };

fn opts() -> Options {
    Options {
        memtable_size: 4 << 20,
        growth_factor: 8,
        large_segment_size: 64 << 10,
        cache_bytes: 1 << 20,
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn open(fs: &SimFs) -> Db {
    Db::open_with_fs(DIR, opts(), Arc::new(fs.clone())).unwrap()
}

fn large(tag: u8) -> Vec<u8> {
    vec![tag; 2000]
}

fn files(fs: &SimFs, ext: &str) -> Vec<PathBuf> {
    fs.list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(ext))
        .map(|n| Path::new(DIR).join(n))
        .collect()
}

/// Replaces `path` with `data`, durably (name included).
fn rewrite(fs: &SimFs, path: &Path, data: &[u8]) {
    let mut f = fs.create(path, false).unwrap();
    f.append(data).unwrap();
    f.sync_data().unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
}

fn assert_check_clean(db: &Db) {
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{report}");
}

/// Symptom: after a power loss, reading a large value written before a synced write
/// failed with "log pointer past the end of the segment". Cause: a synced group fsynced
/// the large log only if the group itself wrote a large value, so the synced small-log
/// record made an earlier group's pointer durable while its value was not.
#[test]
fn regression_synced_write_makes_earlier_unsynced_large_values_durable() {
    let fs = SimFs::new();
    let db = open(&fs);
    db.put("big", large(1)).unwrap(); // acknowledged, not synced
    db.put_opt("small", "s", &SYNC).unwrap(); // synced: everything before it is durable
    let img = fs.crash_image(CrashKind::DropUnsynced);
    drop(db);
    let db = open(&img);
    assert_eq!(db.get("small").unwrap().as_deref(), Some(&b"s"[..]));
    assert_eq!(db.get("big").unwrap(), Some(large(1)));
    assert_check_clean(&db);
}

/// Symptom (found by the `ops_vs_model` fuzz target): an unsynced put, then an empty
/// batch written with `sync`, then a power loss: the put was gone although a synced write
/// had returned after it. Cause: an empty batch returned before reaching the log, synced
/// or not. Fix: a synced empty batch makes every write before it durable, as any synced
/// write does.
#[test]
fn regression_an_empty_synced_batch_makes_earlier_writes_durable() {
    let fs = SimFs::new();
    let db = open(&fs);
    db.put("small", "s").unwrap(); // acknowledged, not synced
    db.put("big", large(3)).unwrap();
    db.write_opt(WriteBatch::new(), &SYNC).unwrap();
    let img = fs.crash_image(CrashKind::DropUnsynced);
    drop(db);
    let db = open(&img);
    assert_eq!(db.get("small").unwrap().as_deref(), Some(&b"s"[..]));
    assert_eq!(db.get("big").unwrap(), Some(large(3)));
    assert_check_clean(&db);
}

/// An empty batch after a failed sync: the failure poisoned the database, and the empty
/// batch must say so, as every write after it does. Synced, it must not sync again: a
/// retried fsync may succeed with the failed pages dropped, which would promise the
/// earlier writes falsely. Found in review.
#[test]
fn an_empty_synced_batch_after_a_failed_sync_reports_the_failure() {
    let fs = SimFs::new();
    let db = open(&fs);
    db.put("a", "1").unwrap(); // acknowledged, not synced
    let mut failed = false;
    // The synced write's operations, one after another, until one of them fails it.
    for k in 0..8 {
        fs.fail_at(fs.op_count() + k, FailMode::Once);
        if db.put_opt("b", "2", &SYNC).is_err() {
            failed = true;
            break;
        }
        fs.clear_faults();
    }
    assert!(failed, "no fault failed the synced write");
    fs.clear_faults();
    match db.write_opt(WriteBatch::new(), &SYNC) {
        Err(Error::Poisoned(_)) => {}
        other => panic!("expected the earlier failure, got {other:?}"),
    }
    // Unsynced, it is refused too, as every write after the failure is.
    assert!(matches!(
        db.write(WriteBatch::new()),
        Err(Error::Poisoned(_))
    ));
}

/// Symptom: a power loss that kept the small log's unsynced tail but not the large log's
/// (write-back order is not append order) left a replayed pointer to a lost value:
/// reads failed with "log pointer past the end of the segment". Cause: recovery replayed
/// `put-large` records without checking their values survived. Fix: recovery cuts the
/// newest large segment's torn tail and stops replay at the first record whose value is
/// gone, as it does at a torn small-log record.
#[test]
fn regression_power_loss_losing_the_large_log_tail_cuts_replay_there() {
    let fs = SimFs::new();
    let db = open(&fs);
    db.put_opt("a", "1", &SYNC).unwrap();
    db.put("b", large(2)).unwrap();
    db.put("c", "3").unwrap();
    let img = fs.crash_image(CrashKind::ProcessCrash);
    drop(db);
    // The small log kept every record; the large log lost its unsynced record.
    let vlogs = files(&img, ".vlog");
    assert_eq!(vlogs.len(), 1);
    let bytes = img.read_file(&vlogs[0]).unwrap();
    rewrite(&img, &vlogs[0], &bytes[..16]); // the header only
    for _ in 0..2 {
        let db = open(&img);
        assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(db.get("b").unwrap(), None, "its value is lost");
        assert_eq!(db.get("c").unwrap(), None, "after the cut: no holes");
        assert_check_clean(&db);
    }
}

/// Symptom: a process crash, a reopen, a synced write and then a power loss lost writes
/// acknowledged before the first crash while keeping the later synced one (a hole), or
/// refused to open ("small-log file shorter than its header"). Cause: recovery replayed
/// the newest small log (and the large log it points into) from the OS's cache without
/// making them durable, then started a new log whose synced records could outlive them.
#[test]
fn regression_recovery_makes_replayed_writes_durable_before_new_ones() {
    let fs = SimFs::new();
    let db = open(&fs);
    db.put("a", "1").unwrap();
    db.put("b", large(2)).unwrap();
    let killed = fs.crash_image(CrashKind::ProcessCrash);
    drop(db);
    let db = open(&killed);
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"1"[..]));
    db.put_opt("c", "3", &SYNC).unwrap();
    let lost = killed.crash_image(CrashKind::DropUnsynced);
    drop(db);
    let db = open(&lost);
    assert_eq!(db.get("c").unwrap().as_deref(), Some(&b"3"[..]));
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.get("b").unwrap(), Some(large(2)));
    assert_check_clean(&db);
}

/// Symptom: after a power loss that tore the first sector of a just-created small-log
/// file the open failed ("not a small-log file (bad magic)"); a torn large-log header
/// made `check` report the segment damaged. Cause: new log files synced their directory
/// (making the name durable) but not their header. Fix: the header is synced first.
#[test]
fn regression_torn_header_of_a_new_log_file() {
    for seed in 0..64 {
        let fs = SimFs::new();
        let db = open(&fs);
        db.put("b", large(2)).unwrap(); // starts a large-log segment; not synced
        let img = fs.crash_image(CrashKind::TornSector { seed });
        drop(db);
        let db = Db::open_with_fs(DIR, opts(), Arc::new(img))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let b = db.get("b").unwrap();
        assert!(b.is_none() || b == Some(large(2)), "seed {seed}");
        assert_check_clean(&db);
    }
}

/// Appends a transient segment record (`id`, owned by run `owner`) to the manifest, as
/// any manifest written while a flush was still filling that segment holds it (FORMAT.md,
/// "Manifest").
fn add_transient_segment(manifest: &[u8], id: u64, owner: u64) -> Vec<u8> {
    let mut payload = manifest[20..].to_vec();
    let next = u64::from_le_bytes(payload[..8].try_into().unwrap());
    assert!(id >= next && owner >= next);
    payload[..8].copy_from_slice(&(id.max(owner) + 1).to_le_bytes());
    let runs = u32::from_le_bytes(payload[24..28].try_into().unwrap()) as usize;
    let at = 28 + runs * 20;
    let segs = u32::from_le_bytes(payload[at..at + 4].try_into().unwrap());
    payload[at..at + 4].copy_from_slice(&(segs + 1).to_le_bytes());
    // After the last segment entry (25 bytes each; the range tombstones follow them).
    let end = at + 4 + segs as usize * 25;
    let mut entry = id.to_le_bytes().to_vec();
    entry.push(2); // transient
    entry.extend_from_slice(&owner.to_le_bytes());
    entry.extend_from_slice(&0u64.to_le_bytes());
    payload.splice(end..end, entry);
    let mut out = manifest[..12].to_vec();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Symptom: after a power loss during a flush that wrote medium pairs to the transient
/// log, `check` reported a torn record in a transient segment, and the segment was never
/// freed. Cause: the segment is registered (so any manifest written meanwhile, e.g. by a
/// compaction or GC, names it) before the flush installs the run that owns it; recovery
/// kept every transient segment the manifest named. Fix: recovery keeps a transient
/// segment only if the manifest holds its owner run.
#[test]
fn regression_transient_segment_of_an_uninstalled_flush_is_swept() {
    let fs = SimFs::new();
    let db = open(&fs);
    db.put("a", "1").unwrap();
    db.flush().unwrap();
    drop(db);
    let manifest = Path::new(DIR).join("MANIFEST");
    let old = fs.read_file(&manifest).unwrap();
    let next = u64::from_le_bytes(old[20..28].try_into().unwrap());
    rewrite(&fs, &manifest, &add_transient_segment(&old, next, next + 1));
    // The segment the interrupted flush was writing: a header and a torn record.
    let tlog = Path::new(DIR).join(format!("{next:08}.tlog"));
    rewrite(&fs, &tlog, b"HKVLLOG\0 torn, half-written segment");
    let db = open(&fs);
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_check_clean(&db);
    assert!(files(&fs, ".tlog").is_empty(), "the dead segment was swept");
}

/// Symptom: `Db::check` reported "a pointer names log segment N which does not exist"
/// after garbage collection, on a healthy database. Cause: it followed every pointer in
/// the levels, including old versions shadowed by newer ones whose segment GC had freed
/// (they stay until a merge drops them). Fix: a pointer into a missing segment is damage
/// only if it is the key's newest version.
#[test]
fn regression_check_ignores_shadowed_pointers_into_collected_segments() {
    let fs = SimFs::new();
    let db = open(&fs);
    db.put("k", large(1)).unwrap();
    // Overwrites inside one memtable: the flush counts the dropped versions as garbage.
    for round in 0..8u8 {
        for i in 0..5 {
            db.put(format!("a{i}"), large(10 + round)).unwrap();
        }
    }
    db.flush().unwrap(); // run 1 holds k -> its first segment
    db.put("k", large(2)).unwrap();
    db.flush().unwrap(); // run 2 shadows it
    let report = db.gc().unwrap();
    assert!(report.segments_freed > 0, "{report:?}");
    assert_eq!(db.get("k").unwrap(), Some(large(2)));
    assert_eq!(
        db.stats().unwrap().levels[0].files,
        2,
        "no merge dropped the old pointer"
    );
    assert_check_clean(&db);
}
