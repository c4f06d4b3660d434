//! Corruption sweeps: a database holding every kind of file (a small log with unflushed
//! records, level runs, large-log segments, a transient segment not yet merged, the
//! manifest) is damaged, one file and one spot at a time, on a fresh copy each time: a bit
//! flip, a zeroed range and a truncation at many offsets (headers, record and node
//! boundaries, footers, and points spread over the file). After each damage the copy is
//! opened, every key is read with `get`, the whole database is scanned, and `check` runs.
//!
//! What must hold (FORMAT.md, ARCHITECTURE.md "A recovery"):
//! - Nothing panics (counted in every thread) and nothing returns wrong bytes: every value
//!   read is the model's value, or the read fails with `Error::Corruption` naming the
//!   damaged file.
//! - Open either succeeds or fails with a typed error naming the damaged file. The
//!   manifest, a level file's footer or length, the small log's header and any small-log
//!   record with an intact record after it are refused at open. Damage at the end of the
//!   newest small log (or of the newest large-log segment) is a torn tail: replay stops
//!   there, so the database holds the model after a prefix of the unflushed writes, never
//!   anything else.
//! - A damaged level node or log record is `Error::Corruption` on the reads that touch it,
//!   and `check` reports damage in that file whenever a read hit it.
//!
//! A second, smaller database stores every value in place (`Placement::InPlace`), so its
//! level file holds overflow blobs, which the hybrid placement never writes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use common::{count_panics, panics, Model};
use hybridkv::io::{CrashKind, FileSystem, SimFs};
use hybridkv::{Db, Error, Options, Placement, WriteBatch};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DIR: &str = "/db";

fn opts() -> Options {
    Options {
        memtable_size: 256 << 10,
        growth_factor: 2,
        large_segment_size: 64 << 10,
        cache_bytes: 1 << 20,
        gc_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// Small (< 120 B with the key), medium or large (>= 1024 B), by key and round.
fn value(i: u32, round: u32) -> Vec<u8> {
    let len = match (i * 7 + round * 3) % 10 {
        0..=3 => 5 + (i as usize % 60),
        4..=7 => 150 + (i as usize * 13 % 800),
        _ => 1100 + (i as usize * 31 % 2500),
    };
    let mut v = format!("{i}/{round}/").into_bytes();
    v.resize(len, b'a' + ((i + round) % 26) as u8);
    v
}

/// One write of the unflushed tail (one small-log record each).
enum TailOp {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
}

/// A pristine database and what it must hold.
struct Scenario {
    name: &'static str,
    opts: Options,
    fs: SimFs,
    /// `states[i]`: the model after the first `i` writes of the unflushed tail (everything
    /// before the tail is in level files, flushed and durable).
    states: Vec<Model>,
    universe: BTreeSet<Vec<u8>>,
}

impl Scenario {
    fn full(&self) -> &Model {
        self.states.last().unwrap()
    }
}

fn rewrite(fs: &SimFs, path: &Path, data: &[u8]) {
    let mut f = fs.create(path, false).unwrap();
    f.append(data).unwrap();
    f.sync_data().unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
}

fn files(fs: &SimFs) -> Vec<String> {
    let mut v = fs.list(Path::new(DIR)).unwrap();
    v.sort();
    v
}

fn with_ext(fs: &SimFs, ext: &str) -> Vec<String> {
    files(fs).into_iter().filter(|n| n.ends_with(ext)).collect()
}

fn apply_tail(db: &Db, model: &mut Model, op: &TailOp) {
    match op {
        TailOp::Put(k, v) => {
            db.put(k, v).unwrap();
            model.insert(k.clone(), v.clone());
        }
        TailOp::Delete(k) => {
            db.delete(k).unwrap();
            model.remove(k);
        }
        TailOp::Batch(ops) => {
            let mut b = WriteBatch::new();
            for (k, v) in ops {
                match v {
                    Some(v) => b.put(k, v),
                    None => b.delete(k),
                };
            }
            db.write(b).unwrap();
            for (k, v) in ops {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
        }
    }
}

/// The unflushed tail: puts of every size class, deletes and batches.
fn tail_ops(n: u32) -> Vec<TailOp> {
    let mut out = Vec::new();
    for j in 0..40u32 {
        let i = (j * 37) % n;
        out.push(match j % 8 {
            3 => TailOp::Delete(key(i)),
            6 => TailOp::Batch(vec![
                (key(i), Some(value(i, 9))),
                (key((i + 1) % n), None),
                (key(n + j), Some(value(j, 9))),
            ]),
            _ => TailOp::Put(key(i), value(i + j, 7)),
        });
    }
    out
}

/// The hybrid database: an L2 run at the bottom (medium pairs in place), an L1 run above
/// it whose medium pairs are in a transient segment, large values in several large-log
/// segments, and an unflushed tail in the small log.
fn hybrid_scenario() -> Scenario {
    let fs = SimFs::new();
    let o = opts();
    let n = 500u32;
    let mut model = Model::new();
    let db = Db::open_with_fs(DIR, o.clone(), Arc::new(fs.clone())).unwrap();
    for round in 0..2u32 {
        for i in 0..n {
            if round == 1 && i % 2 == 1 {
                continue;
            }
            db.put(key(i), value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
    // Round 2 lands in L1 above the data in L2: its medium pairs go to the transient log.
    for i in (0..n).step_by(3) {
        if i % 5 == 0 {
            db.delete(key(i)).unwrap();
            model.remove(&key(i));
        } else {
            db.put(key(i), value(i, 2)).unwrap();
            model.insert(key(i), value(i, 2));
        }
    }
    db.flush().unwrap();
    db.compact().unwrap();
    let s = db.stats().unwrap();
    assert!(
        s.levels.iter().any(|l| l.level >= 2 && l.files > 0),
        "no data below L1: {s}"
    );
    assert!(
        s.levels.iter().any(|l| l.level == 1 && l.files > 0),
        "L1 is empty: {s}"
    );
    assert!(s.transient_segments > 0, "no transient segment: {s}");
    assert!(s.large_log_segments >= 3, "too few large segments: {s}");
    let mut states = vec![model.clone()];
    let mut universe: BTreeSet<Vec<u8>> = (0..n).map(key).collect();
    for op in tail_ops(n) {
        apply_tail(&db, &mut model, &op);
        if let TailOp::Batch(ops) = &op {
            universe.extend(ops.iter().map(|(k, _)| k.clone()));
        }
        states.push(model.clone());
    }
    assert_eq!(
        db.stats().unwrap().flushes,
        s.flushes,
        "the tail was flushed"
    );
    drop(db);
    Scenario {
        name: "hybrid",
        opts: o,
        fs,
        states,
        universe,
    }
}

/// Every value in place: the level file holds overflow blobs for values too large for a
/// leaf.
fn in_place_scenario() -> Scenario {
    let fs = SimFs::new();
    let o = Options {
        placement: Placement::InPlace,
        ..opts()
    };
    let mut model = Model::new();
    let db = Db::open_with_fs(DIR, o.clone(), Arc::new(fs.clone())).unwrap();
    for i in 0..120u32 {
        let v = value(i, 0);
        db.put(key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    db.flush().unwrap();
    let states = vec![model];
    let universe = (0..120).map(key).collect();
    drop(db);
    Scenario {
        name: "in-place",
        opts: o,
        fs,
        states,
        universe,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Manifest,
    /// The newest small-log file (holds the unflushed tail).
    Wal,
    Level,
    /// A level file holding overflow blobs (in-place scenario).
    LevelBlobs,
    /// The newest large-log segment (its tail may be torn after a crash).
    VlogNewest,
    /// An older, full large-log segment.
    VlogOld,
    Tlog,
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Flip { at: usize, bit: u8 },
    Zero { at: usize, len: usize },
    Truncate { at: usize },
}

impl Damage {
    /// The damaged bytes, or `None` if it changes nothing.
    fn apply(self, data: &[u8]) -> Option<Vec<u8>> {
        let mut d = data.to_vec();
        match self {
            Damage::Flip { at, bit } => d[at] ^= 1 << bit,
            Damage::Zero { at, len } => {
                let end = (at + len).min(d.len());
                d[at..end].fill(0);
            }
            Damage::Truncate { at } => d.truncate(at),
        }
        (d != data).then_some(d)
    }

    /// First and one-past-last byte it changes (a truncation: to the end).
    fn range(self, file_len: usize) -> (usize, usize) {
        match self {
            Damage::Flip { at, .. } => (at, at + 1),
            Damage::Zero { at, len } => (at, (at + len).min(file_len)),
            Damage::Truncate { at } => (at, file_len),
        }
    }
}

/// `(start, length)` of every record of a small-log file (16-byte header, 24-byte record
/// headers) or a log segment (16-byte header, 20-byte record headers).
fn records(data: &[u8], wal: bool) -> Vec<(usize, usize)> {
    let u32_at = |p: usize| u32::from_le_bytes(data[p..p + 4].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    let mut pos = 16;
    while pos < data.len() {
        let len = if wal {
            24 + u32_at(pos)
        } else {
            20 + u32_at(pos) + u32_at(pos + 4)
        };
        out.push((pos, len));
        pos += len;
    }
    assert_eq!(pos, data.len(), "test parser ran past the end");
    out
}

/// Offsets worth damaging in a file of `kind`.
fn offsets(kind: Kind, data: &[u8]) -> Vec<usize> {
    let len = data.len();
    let mut set: BTreeSet<usize> = [0, 1, 7, 8, 9, 12, 15].into();
    // Spread over the file.
    for i in 1..40 {
        set.insert(len * i / 40 + i);
    }
    set.insert(len - 1);
    match kind {
        Kind::Manifest => {
            set.extend([16, 19, 20, 27, 28, 36, 44, 48, 60, len - 2]);
        }
        Kind::Wal | Kind::VlogNewest | Kind::VlogOld | Kind::Tlog => {
            let recs = records(data, kind == Kind::Wal);
            let n = recs.len();
            // Every record of the small log (each is one write of the tail); a dozen of
            // each segment's, the first and last two included.
            let picks: BTreeSet<usize> = if kind == Kind::Wal {
                (0..n).collect()
            } else {
                (0..10)
                    .map(|i| i * n / 10)
                    .chain([1, n.saturating_sub(2), n - 1])
                    .collect()
            };
            for i in picks {
                let (s, l) = recs[i];
                let hdr = if kind == Kind::Wal { 24 } else { 20 };
                set.extend([s, s + 1, s + 5, s + 16, s + hdr - 1, s + hdr, s + l / 2]);
                set.insert(s + l - 1);
            }
            set.insert(16);
        }
        Kind::Level | Kind::LevelBlobs => {
            // Unit headers (every 4 KiB), node CRCs, the footer and its padding.
            let blocks = len / 4096;
            for b in [0, 1, 2, 3, blocks / 2, blocks - 3, blocks - 2] {
                if b < blocks {
                    set.extend([b * 4096, b * 4096 + 4, b * 4096 + 13, b * 4096 + 2000]);
                }
            }
            let footer = len - 128;
            set.extend([len - 4096, len - 2048, footer - 1]);
            set.extend([footer, footer + 8, footer + 12, footer + 16, footer + 56]);
            set.extend([footer + 64, footer + 100, len - 4, len - 1]);
        }
    }
    set.into_iter().filter(|&o| o < len).collect()
}

fn damages(data: &[u8], kind: Kind) -> Vec<Damage> {
    let mut out = Vec::new();
    for (i, at) in offsets(kind, data).into_iter().enumerate() {
        out.push(Damage::Flip {
            at,
            bit: (i % 8) as u8,
        });
        out.push(Damage::Zero {
            at,
            len: [8, 64, 512][i % 3],
        });
        out.push(Damage::Truncate { at });
    }
    out
}

/// What one damaged copy did.
#[derive(Debug, Default)]
struct Outcome {
    open_failed: bool,
    read_errors: u64,
    check_errors: bool,
    /// Writes of the unflushed tail missing (a torn tail was cut).
    lost_tail_writes: usize,
}

impl Outcome {
    fn detected(&self) -> bool {
        self.open_failed || self.read_errors > 0 || self.check_errors
    }
}

/// Whether `err` is a typed report of damage in `file`.
fn names_file(err: &Error, file: &str) -> bool {
    match err {
        Error::Corruption { file: f, .. } | Error::UnsupportedVersion { file: f, .. } => {
            f.file_name().is_some_and(|n| n == file) && err.to_string().contains(file)
        }
        _ => false,
    }
}

/// Opens the damaged image and reads everything; `Err` describes a violation.
fn run_case(sc: &Scenario, img: SimFs, file: &str, lo: usize) -> Result<Outcome, String> {
    let mut out = Outcome::default();
    let db = match Db::open_with_fs(DIR, sc.opts.clone(), Arc::new(img)) {
        Ok(db) => db,
        Err(e) if names_file(&e, file) => {
            out.open_failed = true;
            return Ok(out);
        }
        Err(e) => return Err(format!("open failed with an error not naming {file}: {e}")),
    };
    // Opening flushes the replayed tail, which can start compactions: let them finish
    // (or fail on the damage and poison) so what the reads meet does not depend on timing.
    let _ = db.compact();
    let typed = |e: &Error, what: &str| -> Result<(), String> {
        if names_file(e, file) && e.to_string().contains("at offset") {
            Ok(())
        } else {
            Err(format!(
                "{what}: error not naming {file} and an offset: {e}"
            ))
        }
    };
    let mut gets: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    for k in &sc.universe {
        match db.get(k) {
            Ok(v) => {
                gets.insert(k.clone(), v);
            }
            Err(e) => {
                typed(&e, &format!("get {}", String::from_utf8_lossy(k)))?;
                out.read_errors += 1;
            }
        }
    }
    let mut scanned = Vec::new();
    let mut scan_error = false;
    for r in db.iter() {
        match r {
            Ok(pair) => scanned.push(pair),
            Err(e) => {
                typed(&e, "scan")?;
                out.read_errors += 1;
                scan_error = true;
            }
        }
    }
    // Some prefix of the unflushed tail, at least `lo` of its writes, explains every read.
    let explains = |m: &Model| {
        gets.iter().all(|(k, v)| m.get(k) == v.as_ref())
            && scanned.len() <= m.len()
            && scanned
                .iter()
                .zip(m.iter())
                .all(|((k, v), (mk, mv))| k == mk && v == mv)
            && (scan_error || scanned.len() == m.len())
    };
    let n = sc.states.len() - 1;
    let Some(p) = (lo..=n).rev().find(|&p| explains(&sc.states[p])) else {
        let full = sc.full();
        let wrong: Vec<String> = gets
            .iter()
            .filter(|(k, v)| full.get(*k) != v.as_ref())
            .take(3)
            .map(|(k, v)| {
                format!(
                    "{} = {:?} bytes (model {:?})",
                    String::from_utf8_lossy(k),
                    v.as_ref().map(Vec::len),
                    full.get(k).map(Vec::len)
                )
            })
            .collect();
        return Err(format!(
            "WRONG BYTES: no state after {lo}..={n} tail writes explains the reads \
             ({} scanned, scan error {scan_error}); e.g. {wrong:?}",
            scanned.len()
        ));
    };
    out.lost_tail_writes = n - p;
    match db.check() {
        Ok(r) => {
            out.check_errors = !r.is_ok();
            if out.read_errors > 0 && !r.errors.iter().any(|e| e.contains(file)) {
                return Err(format!(
                    "reads hit damage in {file} but check does not report it: {r}"
                ));
            }
        }
        Err(e) => {
            typed(&e, "check")?;
            out.check_errors = true;
        }
    }
    Ok(out)
}

/// What the format promises for a damage of `kind`, where it can be stated exactly:
/// `Some(true)` open must fail, `Some(false)` open must succeed, `None` either.
fn open_must_fail(kind: Kind, damage: Damage, data: &[u8]) -> Option<bool> {
    let len = data.len();
    let (a, b) = damage.range(len);
    match kind {
        Kind::Manifest => Some(true),
        Kind::Level | Kind::LevelBlobs => {
            // The Bloom filter unit (its offset and length are in the footer) is read and
            // checked whole at open; its zero padding is not read.
            let footer = &data[len - 128..];
            let word = |at: usize, n: usize| {
                footer[at..at + n]
                    .iter()
                    .rev()
                    .fold(0u64, |acc, &b| acc << 8 | u64::from(b)) as usize
            };
            let (f_at, f_len) = (word(72, 8), word(80, 4));
            let in_filter = f_len > 0 && a < f_at + f_len && b > f_at;
            Some(matches!(damage, Damage::Truncate { .. }) || b > len - 128 || in_filter)
        }
        Kind::Wal => {
            if matches!(damage, Damage::Truncate { .. }) {
                return Some(false); // a shorter newest log is a torn tail
            }
            if a < 16 {
                return Some(true);
            }
            // Refused if a whole, intact record follows the damage.
            Some(records(data, true).iter().any(|&(s, _)| s >= b))
        }
        Kind::VlogNewest | Kind::VlogOld | Kind::Tlog => Some(false),
    }
}

/// Whether bytes `a..b` of level file `data` touch its large pointer table (its offset and
/// length are footer bytes 84..96, `docs/FORMAT.md`).
fn in_large_pointer_table(data: &[u8], a: usize, b: usize) -> bool {
    let footer = &data[data.len() - 128..];
    let at = u64::from_le_bytes(footer[84..92].try_into().unwrap()) as usize;
    let len = u32::from_le_bytes(footer[92..96].try_into().unwrap()) as usize;
    len > 0 && a < at + len && b > at
}

/// Lowest number of tail writes that must survive a damage of `kind`.
fn tail_lower_bound(sc: &Scenario, kind: Kind, damage: Damage, data: &[u8]) -> usize {
    let n = sc.states.len() - 1;
    match kind {
        // Every record ending before the damage survives; replay stops at the first one
        // touched.
        Kind::Wal => {
            let (a, _) = damage.range(data.len());
            records(data, true)
                .iter()
                .take_while(|&&(s, l)| s + l <= a)
                .count()
        }
        // Its torn tail is cut; the small-log records pointing into it end replay.
        Kind::VlogNewest => 0,
        _ => n,
    }
}

#[derive(Default)]
struct Tally {
    tried: u64,
    noop: u64,
    detected: u64,
    torn_tail_cut: u64,
    harmless: u64,
    open_failed: u64,
    violations: u64,
    wrong_bytes: u64,
}

fn sweep(
    sc: &Scenario,
    targets: &[(Kind, String)],
    tallies: &mut BTreeMap<Kind, Tally>,
    harmless: &mut Vec<String>,
) -> u64 {
    let mut violations = 0;
    for (kind, file) in targets {
        let path = PathBuf::from(DIR).join(file);
        let pristine = sc.fs.read_file(&path).unwrap();
        let t = tallies.entry(*kind).or_default();
        for damage in damages(&pristine, *kind) {
            let Some(bad) = damage.apply(&pristine) else {
                t.noop += 1;
                continue;
            };
            t.tried += 1;
            let img = sc.fs.crash_image(CrashKind::ProcessCrash);
            rewrite(&img, &path, &bad);
            let lo = tail_lower_bound(sc, *kind, damage, &pristine);
            let after = img.clone(); // shares the disk: what the case left
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| run_case(sc, img, file, lo)));
            let what = format!("{} {kind:?} {file} {damage:?}", sc.name);
            let outcome = match result {
                Ok(Ok(o)) => o,
                Ok(Err(why)) => {
                    violations += 1;
                    t.violations += 1;
                    if why.starts_with("WRONG BYTES") {
                        t.wrong_bytes += 1;
                    }
                    println!("VIOLATION {what}: {why}");
                    continue;
                }
                Err(_) => {
                    violations += 1;
                    t.violations += 1;
                    println!("VIOLATION {what}: panicked");
                    continue;
                }
            };
            if let Some(must) = open_must_fail(*kind, damage, &pristine) {
                if must != outcome.open_failed {
                    violations += 1;
                    t.violations += 1;
                    println!(
                        "VIOLATION {what}: open {} (expected it to {})",
                        if outcome.open_failed {
                            "failed"
                        } else {
                            "succeeded"
                        },
                        if must { "fail" } else { "succeed" }
                    );
                    continue;
                }
            }
            if outcome.open_failed {
                t.open_failed += 1;
            }
            if outcome.detected() {
                t.detected += 1;
            } else if outcome.lost_tail_writes > 0 {
                t.torn_tail_cut += 1;
            } else {
                // Only three damages may go unnoticed. Bytes no reader interprets: the zero
                // padding of a level file (the footer block before the footer, after an
                // overflow blob); every other byte is under a checksum. A log segment cut
                // exactly at a record boundary when every record cut off is dead (no
                // pointer names it, or a read or `check` would fail): segments record no
                // length, and nothing live was lost. And a transient segment that the
                // opened database merged away without reading the damaged bytes (opening
                // flushes the replayed tail; the compaction that follows writes the live
                // medium pairs in place, checking each one it reads, and frees the file).
                // Likewise a level file's large pointer table (an index no read trusts
                // until the record it names holds the key: `check` compares it with the
                // file's pairs) in a file the opened database merged away.
                let (a, b) = damage.range(pristine.len());
                let padding = matches!(kind, Kind::Level | Kind::LevelBlobs)
                    && pristine[a..b].iter().all(|&x| x == 0);
                let dead_records_cut = matches!(kind, Kind::VlogOld | Kind::Tlog)
                    && matches!(damage, Damage::Truncate { at }
                        if records(&pristine, false).iter().any(|&(s, _)| s == at));
                let gone = after.read_file(&path).is_none();
                let merged_away = gone
                    && (matches!(kind, Kind::Tlog)
                        || (matches!(kind, Kind::Level | Kind::LevelBlobs)
                            && in_large_pointer_table(&pristine, a, b)));
                if !padding && !dead_records_cut && !merged_away {
                    violations += 1;
                    t.violations += 1;
                    println!("VIOLATION {what}: damage went unnoticed (no read, no check)");
                    continue;
                }
                t.harmless += 1;
                harmless.push(what);
            }
        }
    }
    violations
}

#[test]
fn every_damage_is_detected_or_harmless_never_wrong_bytes() {
    count_panics();
    let started = Instant::now();
    let mut tallies: BTreeMap<Kind, Tally> = BTreeMap::new();
    let mut harmless = Vec::new();
    let mut violations = 0;

    let sc = hybrid_scenario();
    {
        // The pristine copy is whole.
        let img = sc.fs.crash_image(CrashKind::ProcessCrash);
        let o = run_case(&sc, img, "none", sc.states.len() - 1).unwrap();
        assert!(!o.detected() && o.lost_tail_writes == 0, "{o:?}");
    }
    let wal = with_ext(&sc.fs, ".wal");
    let vlog = with_ext(&sc.fs, ".vlog");
    let tlog = with_ext(&sc.fs, ".tlog");
    let lvl = with_ext(&sc.fs, ".lvl");
    println!("hybrid database files: {:?}", files(&sc.fs));
    assert_eq!(wal.len(), 1, "{wal:?}");
    assert!(vlog.len() >= 3 && !tlog.is_empty() && lvl.len() >= 2);
    let mut targets = vec![
        (Kind::Manifest, "MANIFEST".to_string()),
        (Kind::Wal, wal[0].clone()),
        (Kind::VlogNewest, vlog.last().unwrap().clone()),
        (Kind::VlogOld, vlog[0].clone()),
        (Kind::VlogOld, vlog[vlog.len() / 2].clone()),
    ];
    targets.extend(tlog.iter().map(|f| (Kind::Tlog, f.clone())));
    targets.extend(lvl.iter().map(|f| (Kind::Level, f.clone())));
    violations += sweep(&sc, &targets, &mut tallies, &mut harmless);

    let sc = in_place_scenario();
    let lvl = with_ext(&sc.fs, ".lvl");
    assert_eq!(lvl.len(), 1);
    violations += sweep(
        &sc,
        &[(Kind::LevelBlobs, lvl[0].clone())],
        &mut tallies,
        &mut harmless,
    );

    let total = |f: fn(&Tally) -> u64| tallies.values().map(f).sum::<u64>();
    let per_kind: Vec<String> = tallies
        .iter()
        .map(|(k, t)| {
            format!(
                "{k:?} {} (detected {}, open refused {}, torn tail cut {}, harmless {})",
                t.tried, t.detected, t.open_failed, t.torn_tail_cut, t.harmless
            )
        })
        .collect();
    println!(
        "corruptions tried: {} (per kind: {}), no-op damages skipped: {}, detected: {}, \
         torn tail cut: {}, undetected and harmless: {}, wrong bytes: {}, violations: {}, \
         panics: {}, in {:.1}s",
        total(|t| t.tried),
        per_kind.join("; "),
        total(|t| t.noop),
        total(|t| t.detected),
        total(|t| t.torn_tail_cut),
        total(|t| t.harmless),
        total(|t| t.wrong_bytes),
        violations,
        panics(),
        started.elapsed().as_secs_f64()
    );
    for h in harmless.iter().take(10) {
        println!("  undetected, in zero padding no reader interprets: {h}");
    }
    assert_eq!(total(|t| t.wrong_bytes), 0, "wrong bytes were read");
    assert_eq!(violations, 0, "see the VIOLATION lines");
    assert_eq!(panics(), 0);
}
