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
