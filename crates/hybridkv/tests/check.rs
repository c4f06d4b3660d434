//! `Db::check` finds damage in every kind of file and names it; a clean database passes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::{Db, Options};

fn opts() -> Options {
    Options {
        memtable_size: 64 << 10,
        growth_factor: 2,
        large_segment_size: 64 << 10,
        gc_interval: std::time::Duration::from_secs(3600),
        ..Options::default()
    }
}

fn fill(db: &Db) {
    for round in 0..3u32 {
        for i in 0..1500u32 {
            let len = [9usize, 104, 1004][((i + round) % 3) as usize];
            let mut v = format!("{round}").into_bytes();
            v.resize(len, b'x');
            db.put(format!("user{i:020}"), v).unwrap();
        }
        db.flush().unwrap();
    }
    db.compact().unwrap();
}

fn files_with(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

#[test]
fn clean_database_passes_and_damage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        fill(&db);
        let r = db.check().unwrap();
        assert!(r.is_ok(), "{r}");
        assert!(
            r.pointers_checked > 0 && r.entries_checked >= 1500 && r.segments_checked > 0,
            "{r}"
        );
        assert!(r.orphans.is_empty(), "{r}");
    }
    // Damage one byte in the middle of a large-log segment and of a level run.
    let vlog = files_with(dir.path(), "vlog");
    let lvl = files_with(dir.path(), "lvl");
    assert!(!vlog.is_empty() && !lvl.is_empty());
    for path in [&vlog[0], &lvl[0]] {
        let mut data = std::fs::read(path).unwrap();
        let mid = data.len() / 3;
        data[mid] ^= 0x55;
        std::fs::write(path, &data).unwrap();
    }
    std::fs::write(dir.path().join("00999999.lvl"), b"stray").unwrap();
    let db = Db::open(dir.path(), opts());
    // The stray file is swept at open; it is no longer an orphan afterwards.
    let db = db.unwrap();
    let r = db.check().unwrap();
    assert!(!r.is_ok(), "damage not found: {r}");
    let text = r.errors.join("\n");
    let vlog_name = vlog[0].file_name().unwrap().to_str().unwrap();
    assert!(text.contains(vlog_name), "segment damage not named: {text}");
    assert!(
        !dir.path().join("00999999.lvl").exists(),
        "orphan not swept at open"
    );
}

/// A level file whose Bloom filter passes its checksum but leaves out a key the file holds
/// (what a bug in building it would write) makes lookups answer "absent" for that key;
/// `check` tests every key of every file against its filter and names the file.
#[test]
fn a_filter_that_leaves_out_a_key_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..500u32 {
            db.put(format!("user{i:020}"), b"v").unwrap();
        }
        db.flush().unwrap();
        assert!(db.check().unwrap().is_ok());
    }
    let lvl = files_with(dir.path(), "lvl");
    assert_eq!(lvl.len(), 1);
    let mut data = std::fs::read(&lvl[0]).unwrap();
    let n = data.len();
    let footer = n - 128;
    let word = |d: &[u8], at: usize, len: usize| {
        d[at..at + len]
            .iter()
            .rev()
            .fold(0u64, |a, &b| a << 8 | u64::from(b)) as usize
    };
    let (at, len) = (word(&data, footer + 72, 8), word(&data, footer + 80, 4));
    assert!(at > 0 && len > 16, "the file has a filter");
    // Every bit cleared, the checksum made to match: a well-formed filter that holds
    // nothing.
    data[at + 16..at + len].fill(0);
    let mut crc_input = data[at..at + 8].to_vec();
    crc_input.extend_from_slice(&data[at + 16..at + len]);
    let crc = crc32c_of(&crc_input);
    data[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&lvl[0], &data).unwrap();

    let db = Db::open(dir.path(), opts()).unwrap();
    let report = db.check().unwrap();
    assert_eq!(report.error_count, 500, "{:?}", report.errors.first());
    assert!(
        report.errors[0].contains("Bloom filter rules out a key")
            && report.errors[0]
                .contains(&lvl[0].file_name().unwrap().to_string_lossy().into_owned()),
        "{}",
        report.errors[0]
    );
}

/// CRC32C (Castagnoli), bitwise: the test's own, to forge a well-formed unit.
fn crc32c_of(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
