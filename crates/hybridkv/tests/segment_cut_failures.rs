//! Large-log segments whose cut fails: a segment whose creation fails after its file exists
//! (the header append, the header's sync or the directory's sync) and whose cut back to
//! what was appended fails too; and the cut of the newest segment at close.
//!
//! A segment appended to through a memory map reserves its space ahead with `fallocate`
//! (the first step 4 KiB), so a cut that fails leaves zeros past what was appended. What
//! must hold: the write that hit the failure returns the typed `Error::Io` and the engine
//! refuses later writes (`Error::Poisoned`); a close reports a cut it could not make; and a
//! reopen holds every acknowledged write (after a power loss, every synced one), `check`
//! is clean, the leftover segment is cut or removed, and writes go on in a new segment and
//! survive another reopen.
//!
//! On the simulated file system a wrapper ([`FaultFs`]) injects the failures by file and
//! step, and can leave the reserved zeros a mapped segment keeps after a refused cut. On
//! the real file system the test runs itself again as a child process whose test thread
//! (and only it: the filter is not synchronized to the engine's background threads) has
//! the kernel refuse chosen system calls with `EIO` through a seccomp filter: `fdatasync`
//! or the directory's `fsync`, and `ftruncate` of the segment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::hooked_fs::{injected, FsCall, FsHooks, HoldLevelCreate, HookedFs};
use hybridkv::io::{CrashKind, FileSystem, SimFs, WritableFile};
use hybridkv::{Db, Error, Options, WriteOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DIR: &str = "/db";
/// The space a memory-mapped segment reserves first (`MAPPED_FIRST_STEP` in `io::real`).
const RESERVED: u64 = 4096;
/// The magic a large-log segment's header starts with (then the version and a CRC32C).
const MAGIC: &[u8] = b"HKVLLOG\0";

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts() -> Options {
    Options {
        // No flush or GC runs on its own: the tests decide when the directory is synced.
        memtable_size: 4 << 20,
        large_segment_size: 64 << 10,
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn key(prefix: &str, i: usize) -> Vec<u8> {
    format!("{prefix}{i:05}").into_bytes()
}

/// A large value (3-4 KiB), derived from its index.
fn large(i: usize) -> Vec<u8> {
    let len = 3000 + (i * 131) % 1000;
    (0..len).map(|b| ((b * 7 + i * 13) % 251) as u8).collect()
}

/// A small value.
fn small(i: usize) -> Vec<u8> {
    format!("small-{i}").into_bytes()
}

fn put(db: &Db, model: &mut Model, k: Vec<u8>, v: Vec<u8>, sync: bool) {
    db.put_opt(&k, &v, &WriteOptions { sync }).unwrap();
    model.insert(k, v);
}

/// Every pair of `model` reads back, and `check` is clean with no orphan.
fn assert_holds(db: &Db, model: &Model, when: &str) {
    for (k, v) in model {
        assert_eq!(
            db.get(k).unwrap().as_deref(),
            Some(v.as_slice()),
            "{when}: {} lost or wrong",
            String::from_utf8_lossy(k)
        );
    }
    let report = db.check().unwrap();
    assert!(report.is_ok(), "{when}: check: {report:?}");
    assert!(report.orphans.is_empty(), "{when}: orphans: {report:?}");
}

/// Ids of the large-log segments in `dir`.
fn segment_ids(fs: &dyn FileSystem, dir: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = fs
        .list(dir)
        .unwrap()
        .iter()
        .filter_map(|n| n.strip_suffix(".vlog")?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:08}.vlog"))
}

/// Puts large values until one fails; returns that error (the ones before are in `model`).
fn put_large_until_failure(db: &Db, model: &mut Model, from: usize, sync: bool) -> Error {
    for i in from..from + 200 {
        let (k, v) = (key("big", i), large(i));
        match db.put_opt(&k, &v, &WriteOptions { sync }) {
            Ok(()) => {
                model.insert(k, v);
            }
            Err(e) => return e,
        }
    }
    panic!("200 large puts and no segment creation failed");
}

/// Writes go on after a reopen: large values land in a new segment with a newer id than
/// every segment before, and everything survives another reopen.
fn writes_go_on(fs: Arc<dyn FileSystem>, dir: &Path, model: &mut Model, when: &str) {
    let db = Db::open_with_fs(dir, opts(), Arc::clone(&fs)).unwrap();
    let before = segment_ids(fs.as_ref(), dir);
    for i in 0..30 {
        put(&db, model, key("after", i), large(i + 7), i % 3 == 0);
    }
    let after = segment_ids(fs.as_ref(), dir);
    let newest_before = before.iter().max().copied().unwrap_or(0);
    assert!(
        after.iter().any(|&id| id > newest_before),
        "{when}: no new segment after {before:?}: {after:?}"
    );
    db.close().unwrap();
    let db = Db::open_with_fs(dir, opts(), fs).unwrap();
    assert_holds(&db, model, &format!("{when}, reopened after more writes"));
    db.close().unwrap();
}

// ----------------------------------------------------------------------------------------
// The simulated file system with failures by file and step.

/// Where a segment's creation fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Appending the header.
    HeaderAppend,
    /// Syncing the header (the bytes reach the OS, not the disk, as a failed `fsync`).
    HeaderSync,
    /// Syncing the directory after the header.
    DirSync,
}

impl Stage {
    const ALL: [Stage; 3] = [Stage::HeaderAppend, Stage::HeaderSync, Stage::DirSync];

    /// The operation the error names.
    fn op(self) -> &'static str {
        match self {
            Stage::HeaderAppend => "write",
            Stage::HeaderSync => "fsync",
            Stage::DirSync => "fsync directory",
        }
    }
}

#[derive(Debug, Default)]
struct Plan {
    /// The next large-log segment created fails at this stage, and its cut fails too.
    create_fault: Option<Stage>,
    /// The segment that fault hit.
    hit: Option<PathBuf>,
    /// The next sync of this directory fails (set by a `DirSync` fault).
    fail_dir_sync: Option<PathBuf>,
    /// Every cut of a large-log segment fails from now on (the cut at close).
    fail_cuts: bool,
    /// Segments whose cut was refused, with the bytes appended to them.
    refused_cuts: Vec<(PathBuf, u64)>,
    /// A refused cut leaves zeros to the end of the reserved step, as a segment appended
    /// to through a memory map does; otherwise nothing (buffered appends reserve nothing).
    reserved: bool,
}

/// Hooks with the failures of [`Plan`].
#[derive(Debug)]
struct Faults {
    plan: Arc<Mutex<Plan>>,
    /// A flush held before its install (its level file's create).
    hold: HoldLevelCreate,
}

/// A `SimFs` with the failures of [`Plan`].
type FaultFs = HookedFs<Faults>;

fn fault_fs(fs: SimFs, reserved: bool) -> FaultFs {
    let plan = Plan {
        reserved,
        ..Plan::default()
    };
    HookedFs::new(
        Arc::new(fs),
        Faults {
            plan: Arc::new(Mutex::new(plan)),
            hold: HoldLevelCreate::default(),
        },
    )
}

impl Faults {
    fn with<R>(&self, f: impl FnOnce(&mut Plan) -> R) -> R {
        f(&mut self.plan.lock().unwrap())
    }
}

struct FaultWriter {
    inner: Box<dyn WritableFile>,
    path: PathBuf,
    plan: Arc<Mutex<Plan>>,
    /// This segment's creation fails at this stage (a `DirSync` failure is the directory's).
    stage: Option<Stage>,
    /// Its cut fails (a segment whose creation failed).
    refuse_cut: bool,
}

impl WritableFile for FaultWriter {
    fn append(&mut self, data: &[u8]) -> hybridkv::Result<()> {
        if self.stage == Some(Stage::HeaderAppend) {
            return Err(injected("write", &self.path));
        }
        self.inner.append(data)
    }
    fn flush(&mut self) -> hybridkv::Result<()> {
        self.inner.flush()
    }
    fn sync_data(&mut self) -> hybridkv::Result<()> {
        if self.stage == Some(Stage::HeaderSync) {
            self.inner.flush()?;
            return Err(injected("fsync", &self.path));
        }
        self.inner.sync_data()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn finish(&mut self) -> hybridkv::Result<()> {
        let (refuse, reserved) = {
            let p = self.plan.lock().unwrap();
            let segment = self.path.extension().is_some_and(|e| e == "vlog");
            (self.refuse_cut || (segment && p.fail_cuts), p.reserved)
        };
        if !refuse {
            return self.inner.finish();
        }
        let appended = self.inner.len();
        if reserved {
            // The zeros a mapped segment reserved past what was appended stay.
            let end = (appended / RESERVED + 1) * RESERVED;
            self.inner
                .append(&vec![0u8; usize::try_from(end - appended).unwrap()])?;
            self.inner.flush()?;
        }
        self.plan
            .lock()
            .unwrap()
            .refused_cuts
            .push((self.path.clone(), appended));
        Err(injected("truncate", &self.path))
    }
}

impl FsHooks for Faults {
    fn around<T>(
        &self,
        what: FsCall<'_>,
        path: &Path,
        call: impl FnOnce() -> hybridkv::Result<T>,
    ) -> hybridkv::Result<T> {
        self.hold.pause(what, path);
        if what == FsCall::SyncDir {
            let fail = self.with(|p| {
                if p.fail_dir_sync.as_deref() == Some(path) {
                    p.fail_dir_sync = None;
                    true
                } else {
                    false
                }
            });
            if fail {
                return Err(injected("fsync directory", path));
            }
        }
        call()
    }

    fn writer(
        &self,
        path: &Path,
        inner: Box<dyn WritableFile>,
    ) -> hybridkv::Result<Box<dyn WritableFile>> {
        let stage = if path.extension().is_some_and(|e| e == "vlog") {
            self.with(|p| {
                let stage = p.create_fault.take();
                if let Some(s) = stage {
                    p.hit = Some(path.to_path_buf());
                    if s == Stage::DirSync {
                        p.fail_dir_sync = path.parent().map(Path::to_path_buf);
                    }
                }
                stage
            })
        } else {
            None
        };
        Ok(Box::new(FaultWriter {
            inner,
            path: path.to_path_buf(),
            plan: Arc::clone(&self.plan),
            stage,
            refuse_cut: stage.is_some(),
        }))
    }
}

fn id_of(path: &Path) -> u64 {
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .unwrap()
}

/// A database on a fresh `SimFs` behind a `FaultFs` (leaving reserved zeros after a
/// refused cut or not), holding [`first_writes`].
fn opened_with_first_writes(reserved: bool, all_synced: bool) -> (SimFs, FaultFs, Db, Model) {
    let sim = SimFs::new();
    let fs = fault_fs(sim.clone(), reserved);
    let db = Db::open_with_fs(DIR, opts(), Arc::new(fs.clone())).unwrap();
    let mut model = Model::new();
    first_writes(&db, &mut model, all_synced);
    (sim, fs, db, model)
}

/// Writes a first segment's worth of acknowledged pairs (large ones in segments, small
/// ones beside them; every fourth synced, or all with `all_synced`).
fn first_writes(db: &Db, model: &mut Model, all_synced: bool) {
    for i in 0..24 {
        let sync = all_synced || i % 4 == 0;
        put(db, model, key("big", i), large(i), sync);
        put(db, model, key("small", i), small(i), sync);
    }
}

/// Segment creation failing after its file exists, at each step, with its cut failing
/// too: the put gets the typed error naming the failed step's file, later writes are
/// refused, and the file keeps what was appended (nothing, or the header) and, as a
/// mapped segment would, the reserved zeros. A restart holds every acknowledged write
/// with `check` clean: the leftover is the newest segment, so recovery removes it (no
/// header) or cuts it to its header. Writes then go on in a segment with a newer id, the
/// leftover is no longer the newest, and another reopen is clean; GC frees it (no
/// records).
#[test]
fn a_segment_creation_failing_with_its_cut_loses_nothing_after_a_restart() {
    let dir = Path::new(DIR);
    for reserved in [false, true] {
        for stage in Stage::ALL {
            let when = format!("{stage:?} failed, reserved zeros {reserved}");
            let (sim, fs, db, mut model) = opened_with_first_writes(reserved, false);
            let before = segment_ids(&sim, dir);
            fs.hooks().with(|p| p.create_fault = Some(stage));
            let err = put_large_until_failure(&db, &mut model, 24, false);
            let hit = fs
                .hooks()
                .with(|p| p.hit.clone())
                .expect("the fault hit no segment");
            let n = id_of(&hit);
            assert!(before.iter().all(|&id| id < n), "{when}: {before:?}, {n}");
            match &err {
                Error::Io { op, path, .. } => {
                    assert_eq!(*op, stage.op(), "{when}: {err}");
                    let named = if stage == Stage::DirSync { dir } else { &hit };
                    assert_eq!(path, named, "{when}: {err}");
                }
                other => panic!("{when}: expected Error::Io, got {other:?}"),
            }
            assert!(
                matches!(db.put("later", "x"), Err(Error::Poisoned(_))),
                "{when}"
            );
            assert!(
                matches!(db.put(key("big", 999), large(999)), Err(Error::Poisoned(_))),
                "{when}"
            );
            for (k, v) in &model {
                assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "{when}");
            }
            let appended = if stage == Stage::HeaderAppend { 0 } else { 16 };
            assert_eq!(
                fs.hooks().with(|p| p.refused_cuts.clone()),
                vec![(hit.clone(), appended)],
                "{when}"
            );
            let left = sim.read_file(&hit).unwrap();
            let left_len = if reserved { RESERVED } else { appended };
            assert_eq!(left.len() as u64, left_len, "{when}");
            assert!(
                left.starts_with(&MAGIC[..appended.min(8) as usize]),
                "{when}"
            );
            assert!(left[appended as usize..].iter().all(|&b| b == 0), "{when}");
            // Nothing fails at close: the segment appended to is the full one before, sealed.
            db.close().unwrap();

            let db = Db::open_with_fs(DIR, opts(), Arc::new(fs.clone())).unwrap();
            assert_holds(&db, &model, &when);
            match sim.read_file(&hit) {
                None => assert_eq!(appended, 0, "{when}: the header was lost"),
                Some(b) => {
                    assert_eq!(appended, 16, "{when}: a headerless segment was kept");
                    assert_eq!(b.len(), 16, "{when}: not cut to its header");
                    assert!(b.starts_with(MAGIC), "{when}");
                }
            }
            db.close().unwrap();
            writes_go_on(Arc::new(fs.clone()), dir, &mut model, &when);

            if appended == 16 {
                let db = Db::open_with_fs(DIR, opts(), Arc::new(fs.clone())).unwrap();
                let report = db.gc().unwrap();
                assert!(report.segments_freed >= 1, "{when}: {report:?}");
                db.close().unwrap();
                assert!(
                    sim.read_file(&hit).is_none(),
                    "{when}: GC left the leftover"
                );
                let db = Db::open_with_fs(DIR, opts(), Arc::new(fs.clone())).unwrap();
                assert_holds(&db, &model, &format!("{when}, after GC"));
                db.close().unwrap();
            }
        }
    }
}

/// The header's sync fails, its cut fails, and a flush that was running installs after
/// that: the manifest's directory sync makes the failed segment's name durable while its
/// header is not. A power loss then brings the name back with nothing, a prefix of the
/// header, or a header torn to garbage (with the reserved zeros behind it, as a mapped
/// segment leaves them). Every image must open with every acknowledged (synced) write and
/// `check` clean, and writes must go on and survive another reopen.
#[test]
fn a_segment_whose_header_sync_failed_survives_a_power_loss_after_a_flush_synced_its_name() {
    let dir = Path::new(DIR);
    for reserved in [false, true] {
        let (sim, fs, db, mut model) = opened_with_first_writes(reserved, true);
        // A flush held before its level file: it installs after the failure below.
        fs.hooks().hold.arm();
        let flusher = {
            let db = db.clone();
            std::thread::spawn(move || db.flush())
        };
        fs.hooks().hold.wait_holding();
        fs.hooks()
            .with(|p| p.create_fault = Some(Stage::HeaderSync));
        let err = put_large_until_failure(&db, &mut model, 24, true);
        assert!(
            matches!(&err, Error::Io { op: "fsync", .. }),
            "reserved {reserved}: {err:?}"
        );
        let hit = fs.hooks().with(|p| p.hit.clone()).unwrap();
        fs.hooks().hold.release();
        // The flush returns once it is done, or once it sees the engine refuse writes;
        // the close waits for the background thread either way.
        let _ = flusher.join().unwrap();
        db.close().unwrap();
        assert_eq!(
            sim.crash_image(CrashKind::DropUnsynced).read_file(&hit),
            Some(Vec::new()),
            "the flush's install did not make the failed segment's name durable"
        );

        let mut torn = 0;
        let kinds = std::iter::once(CrashKind::DropUnsynced)
            .chain((0..8).map(|seed| CrashKind::KeepPrefix { seed }))
            .chain((0..64).map(|seed| CrashKind::TornSector { seed }));
        for kind in kinds {
            let image = sim.crash_image(kind);
            let left = image.read_file(&hit).unwrap();
            let header_torn =
                left.len() >= 16 && left[..16] != [0u8; 16] && !left.starts_with(MAGIC);
            let when = format!(
                "reserved {reserved}, {kind:?}: the leftover holds {} bytes{}",
                left.len(),
                if header_torn { ", its header torn" } else { "" }
            );
            let db = Db::open_with_fs(DIR, opts(), Arc::new(image.clone())).unwrap();
            assert_holds(&db, &model, &when);
            db.close().unwrap();
            if header_torn {
                torn += 1;
                writes_go_on(Arc::new(image), dir, &mut model.clone(), &when);
            }
        }
        assert!(torn > 0, "reserved {reserved}: no image tore the header");
    }
}

/// The cut of the newest segment fails at close: `close` returns that typed error (the
/// database is closed all the same), and the file keeps its records and, as a mapped
/// segment would, the reserved zeros behind them. A restart holds every acknowledged
/// write with the segment cut to its records; a power loss after the close, every synced
/// one; `check` is clean, and writes go on.
#[test]
fn a_cut_refused_at_close_is_reported_and_the_reopen_cuts_the_segment() {
    let dir = Path::new(DIR);
    for reserved in [false, true] {
        let (sim, fs, db, mut model) = opened_with_first_writes(reserved, false);
        put(&db, &mut model, key("big", 100), large(100), true);
        let synced = model.clone();
        for i in 101..105 {
            put(&db, &mut model, key("big", i), large(i), false);
        }
        let newest = *segment_ids(&sim, dir).last().unwrap();
        let path = segment_path(dir, newest);
        fs.hooks().with(|p| p.fail_cuts = true);
        match db.close() {
            Err(Error::Io { op, path: p, .. }) => {
                assert_eq!((op, p.as_path()), ("truncate", path.as_path()));
            }
            other => panic!("reserved {reserved}: close returned {other:?}"),
        }
        fs.hooks().with(|p| p.fail_cuts = false);
        let cuts = fs.hooks().with(|p| p.refused_cuts.clone());
        assert_eq!(cuts.len(), 1, "{cuts:?}");
        assert_eq!(cuts[0].0, path);
        let appended = cuts[0].1;
        let on_disk = sim.read_file(&path).unwrap();
        let expected = if reserved {
            (appended / RESERVED + 1) * RESERVED
        } else {
            appended
        };
        assert_eq!(on_disk.len() as u64, expected);

        let kinds = std::iter::once(CrashKind::DropUnsynced)
            .chain((0..4).map(|seed| CrashKind::TornSector { seed }));
        for kind in kinds {
            let db = Db::open_with_fs(DIR, opts(), Arc::new(sim.crash_image(kind))).unwrap();
            assert_holds(&db, &synced, &format!("reserved {reserved}, {kind:?}"));
            db.close().unwrap();
        }
        let db = Db::open_with_fs(DIR, opts(), Arc::new(fs.clone())).unwrap();
        assert_holds(&db, &model, &format!("reserved {reserved}, restarted"));
        assert_eq!(
            sim.file_len(&path).unwrap(),
            appended,
            "not cut to its records"
        );
        db.close().unwrap();
        writes_go_on(
            Arc::new(fs),
            dir,
            &mut model,
            &format!("reserved {reserved}"),
        );
    }
}

// ----------------------------------------------------------------------------------------
// The real file system: the kernel refuses the calls, in a child process.

/// Set in the child process: which refusal it runs (`fdatasync`, `fsync-dir` or `close`).
const CHILD: &str = "HYBRIDKV_SEGMENT_CUT_CHILD";
/// Set in the child process: the database directory.
const CHILD_DIR: &str = "HYBRIDKV_SEGMENT_CUT_DIR";

/// Has the kernel refuse, with `EIO`, the system calls `rules` name (a call number, and
/// optionally an argument's index and the value it must have) in this thread and in the
/// threads it starts afterwards; other threads are left alone (the filter is not
/// synchronized to them), so the engine's background threads, started before, still
/// work. A seccomp filter: no privilege needed once the thread gives up gaining any.
fn refuse_in_this_thread(rules: &[(libc::c_long, Option<(u32, u64)>)]) {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const ARCH: u32 = 0;
    assert_ne!(ARCH, 0, "no seccomp architecture known for this target");
    let ld = |k: u32| libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt: 0,
        jf,
        k,
    };
    let ret = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let refuse = libc::SECCOMP_RET_ERRNO | libc::EIO as u32;
    // `struct seccomp_data`: the call's number at 0, the architecture at 4, the arguments
    // from 16, 8 bytes each (the low half first).
    let mut prog = vec![
        ld(4),
        libc::sock_filter {
            jt: 1,
            ..jeq(ARCH, 0)
        },
        ret(libc::SECCOMP_RET_ALLOW),
    ];
    for &(nr, arg) in rules {
        prog.push(ld(0));
        match arg {
            None => {
                prog.push(jeq(u32::try_from(nr).unwrap(), 1));
                prog.push(ret(refuse));
            }
            Some((i, value)) => {
                let at = 16 + 8 * i;
                prog.push(jeq(u32::try_from(nr).unwrap(), 5));
                prog.push(ld(at));
                prog.push(jeq(value as u32, 3));
                prog.push(ld(at + 4));
                prog.push(jeq((value >> 32) as u32, 1));
                prog.push(ret(refuse));
            }
        }
    }
    prog.push(ret(libc::SECCOMP_RET_ALLOW));
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).unwrap(),
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: plain prctl calls on this thread; the kernel copies the program.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog
            ),
            0,
            "seccomp filter refused: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Whether the engine appends to a log in `dir` through a memory map: `fallocate` works
/// and the file system is not copy-on-write (`io::real::reserves_blocks`); elsewhere it
/// falls back to buffered appends, which reserve nothing and whose cut is a flush.
fn maps_appends(dir: &Path) -> bool {
    use std::os::fd::AsRawFd;
    const BTRFS: i64 = 0x9123_683E;
    const ZFS: i64 = 0x2FC1_2FC1;
    const BCACHEFS: i64 = 0xCA45_1A4E;
    let path = dir.join("probe");
    let file = std::fs::File::create(&path).unwrap();
    // SAFETY: plain calls on an open descriptor; `statfs` is plain data.
    let (reserves, kind) = unsafe {
        let reserves = libc::fallocate(file.as_raw_fd(), 0, 0, 4096) == 0;
        let mut st: libc::statfs = std::mem::zeroed();
        assert_eq!(libc::fstatfs(file.as_raw_fd(), &mut st), 0);
        #[allow(clippy::unnecessary_cast)]
        (reserves, st.f_type as i64)
    };
    drop(file);
    std::fs::remove_file(&path).unwrap();
    reserves && !matches!(kind, BTRFS | ZFS | BCACHEFS)
}

/// The descriptors this process holds open on `path`.
fn fds_of(path: &Path) -> Vec<u64> {
    let path = path.canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            (std::fs::read_link(e.path()).ok()? == path)
                .then(|| e.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// Runs this test again as a child doing `what` on `dir`; returns its output, once it
/// exited cleanly having run its checks.
fn run_child(test: &str, what: &str, dir: &Path) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, what)
        .env(CHILD_DIR, dir)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child ({what}) failed: {said}");
    assert!(
        said.contains("CHILD-CHECKED"),
        "the child's checks did not run: {said}"
    );
    said
}

/// The numbers after each `@<tag> ` the child printed (libtest may print its own words
/// before the first one on a line).
fn tagged(out: &str, tag: &str) -> Vec<Vec<u64>> {
    let tag = format!("@{tag} ");
    out.lines()
        .filter_map(|l| l.find(&tag).map(|at| &l[at + tag.len()..]))
        .map(|rest| rest.split(' ').map(|n| n.parse().unwrap()).collect())
        .collect()
}

const CREATE_TEST: &str =
    "on_the_real_file_system_a_segment_creation_refused_with_its_cut_loses_nothing";

/// Segment creation on the real file system: the kernel refuses the header's
/// `fdatasync`, or the directory's `fsync`, and then the `ftruncate` that would cut the
/// mapped segment back to its header. The put fails with `Error::Io` naming the step and
/// `EIO`, later writes are refused, and the file keeps its header and the reserved zeros
/// (4 KiB). Reopened without the refusals, every acknowledged write is there, `check` is
/// clean, the leftover (the newest segment) is cut to its header, and writes go on in a
/// newer segment and survive another reopen.
#[test]
fn on_the_real_file_system_a_segment_creation_refused_with_its_cut_loses_nothing() {
    if let (Ok(what), Ok(dir)) = (std::env::var(CHILD), std::env::var(CHILD_DIR)) {
        create_child(&what, Path::new(&dir));
        return;
    }
    for what in ["fdatasync", "fsync-dir"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let mut model = Model::new();
        // A first session, closed cleanly: large values in the segments before.
        let db = Db::open(&dir, opts()).unwrap();
        first_writes(&db, &mut model, false);
        db.close().unwrap();
        let before = segment_ids(&hybridkv::io::RealFs, &dir);

        let out = run_child(CREATE_TEST, what, &dir);
        for ack in tagged(&out, "ACK") {
            let i = usize::try_from(ack[0]).unwrap();
            model.insert(key("late", i), small(i));
        }
        assert_eq!(model.len(), 48 + 10, "{what}: {out}");
        let left = tagged(&out, "LEFT");
        let (n, len) = (left[0][0], left[0][1]);
        println!("{what}: segment {n} left with {len} bytes");
        assert!(before.iter().all(|&id| id < n), "{what}: {before:?} {n}");

        let db = Db::open(&dir, opts()).unwrap();
        assert_holds(&db, &model, what);
        let path = segment_path(&dir, n);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            bytes.len(),
            16,
            "{what}: the leftover is not cut to its header"
        );
        assert!(bytes.starts_with(MAGIC), "{what}");
        db.close().unwrap();
        writes_go_on(Arc::new(hybridkv::io::RealFs), &dir, &mut model, what);
    }
}

fn create_child(what: &str, dir: &Path) {
    let db = Db::open(dir, opts()).unwrap();
    for i in 0..10 {
        db.put(key("late", i), small(i)).unwrap();
        println!("@ACK {i}");
    }
    let mapped = maps_appends(dir);
    let sync = if what == "fdatasync" {
        libc::SYS_fdatasync
    } else {
        libc::SYS_fsync
    };
    // The sync, and any cut of a file to 16 bytes (the segment's header).
    refuse_in_this_thread(&[(sync, None), (libc::SYS_ftruncate, Some((1, 16)))]);
    let err = db.put(key("big", 500), large(500)).unwrap_err();
    let n = *segment_ids(&hybridkv::io::RealFs, dir).last().unwrap();
    let path = segment_path(dir, n);
    match &err {
        Error::Io {
            op,
            path: p,
            source,
        } => {
            assert_eq!(source.raw_os_error(), Some(libc::EIO), "{err}");
            if what == "fdatasync" {
                assert_eq!((*op, p.file_name()), ("fsync", path.file_name()), "{err}");
            } else {
                assert_eq!((*op, p.file_name()), ("fsync directory", dir.file_name()));
            }
        }
        other => panic!("expected Error::Io, got {other:?}"),
    }
    assert!(matches!(
        db.put(key("late", 99), small(99)),
        Err(Error::Poisoned(_))
    ));
    // Mapped: the refused cut left the reserved first step, the header then zeros.
    // Buffered: the header alone (a buffered cut is a flush, nothing to refuse).
    let left = std::fs::read(&path).unwrap();
    let expected = if mapped { RESERVED } else { 16 };
    assert_eq!(left.len() as u64, expected, "mapped appends: {mapped}");
    assert!(left.starts_with(MAGIC));
    assert!(left[16..].iter().all(|&b| b == 0));
    println!("@LEFT {n} {}", left.len());
    // Nothing fails at close: the small log is cut (not to 16 bytes), and no segment is
    // being appended to.
    db.close().unwrap();
    println!("CHILD-CHECKED (mapped appends: {mapped})");
}

const CLOSE_TEST: &str =
    "on_the_real_file_system_a_cut_refused_at_close_is_reported_and_the_reopen_cuts_the_zeros";

/// The cut at close on the real file system: the kernel refuses the `ftruncate` of the
/// segment being appended to through a memory map. `close` returns `Error::Io` naming the
/// segment and `EIO`, and the file keeps the zeros reserved past its records. Reopened,
/// every acknowledged write is there, the segment is cut to its records, `check` is
/// clean, and writes go on and survive another reopen.
#[test]
fn on_the_real_file_system_a_cut_refused_at_close_is_reported_and_the_reopen_cuts_the_zeros() {
    if let (Ok(_), Ok(dir)) = (std::env::var(CHILD), std::env::var(CHILD_DIR)) {
        close_child(Path::new(&dir));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    std::fs::create_dir(&dir).unwrap();
    let out = run_child(CLOSE_TEST, "close", &dir);
    let mut model = Model::new();
    for ack in tagged(&out, "ACK") {
        let i = usize::try_from(ack[0]).unwrap();
        model.insert(key("big", i), large(i));
    }
    assert_eq!(model.len(), 12, "{out}");
    let seg = tagged(&out, "SEGMENT");
    let [n, end, left] = seg[0][..] else {
        panic!("{out}")
    };
    let db = Db::open(&dir, opts()).unwrap();
    assert_holds(&db, &model, "after a refused cut at close");
    let path = segment_path(&dir, n);
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len, end, "not cut to its records (it held {left} bytes)");
    db.close().unwrap();
    writes_go_on(
        Arc::new(hybridkv::io::RealFs),
        &dir,
        &mut model,
        "after a refused cut at close",
    );
}

fn close_child(dir: &Path) {
    let mapped = maps_appends(dir);
    let db = Db::open(dir, opts()).unwrap();
    let mut end = 16;
    for i in 0..12 {
        let (k, v) = (key("big", i), large(i));
        db.put_opt(&k, &v, &WriteOptions { sync: i % 4 == 0 })
            .unwrap();
        println!("@ACK {i}");
        end += (20 + k.len() + v.len()) as u64;
    }
    let ids = segment_ids(&hybridkv::io::RealFs, dir);
    assert_eq!(ids.len(), 1, "one segment holds them all: {ids:?}");
    let path = segment_path(dir, ids[0]);
    let reserved = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        reserved > end,
        mapped,
        "{reserved} bytes for {end} of records"
    );
    let fds = fds_of(&path);
    assert!(!fds.is_empty());
    let rules: Vec<_> = fds
        .iter()
        .map(|&fd| (libc::SYS_ftruncate, Some((0, fd))))
        .collect();
    refuse_in_this_thread(&rules);
    let closed = db.close();
    let left = std::fs::metadata(&path).unwrap().len();
    if mapped {
        match &closed {
            Err(Error::Io {
                op,
                path: p,
                source,
            }) => {
                assert_eq!((*op, p.file_name()), ("truncate", path.file_name()));
                assert_eq!(source.raw_os_error(), Some(libc::EIO));
            }
            other => panic!("close returned {other:?}"),
        }
        assert_eq!(left, reserved, "the refused cut changed the file");
    } else {
        closed.unwrap();
        assert_eq!(left, end);
    }
    println!("@SEGMENT {} {end} {left}", ids[0]);
    println!("CHILD-CHECKED (mapped appends: {mapped})");
}
