//! The reports serialize (the `serde` feature): what a metrics exporter or a `--json`
//! command line would print carries the same figures as the structs. Background events
//! reach the application's logger.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::{Db, Options};

#[test]
fn stats_space_check_and_gc_reports_serialize_with_their_figures() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            memtable_size: 256 << 10,
            ..Options::default()
        },
    )
    .unwrap();
    for i in 0..3000u32 {
        db.put(
            format!("k{i:05}"),
            vec![i as u8; (i % 3 * 900) as usize + 10],
        )
        .unwrap();
    }
    db.flush().unwrap();
    assert!(db.get("k00007").unwrap().is_some());

    let stats = db.stats().unwrap();
    let json = serde_json::to_value(&stats).unwrap();
    assert_eq!(json["puts"], 3000);
    assert_eq!(json["gets"], 1);
    assert_eq!(json["flushes"], stats.flushes);
    assert_eq!(json["levels"][0]["files"], stats.levels[0].files);
    assert_eq!(
        json["io"]["written"].as_array().unwrap().len(),
        stats.io.written.len()
    );

    let space = db.space().unwrap();
    let json = serde_json::to_value(&space).unwrap();
    assert_eq!(json["live_pairs"], 3000);
    assert_eq!(json["total_on_disk"], space.total_on_disk);
    assert_eq!(
        json["components"].as_array().unwrap().len(),
        space.components.len()
    );

    let check = db.check().unwrap();
    let json = serde_json::to_value(&check).unwrap();
    assert_eq!(json["error_count"], 0);
    assert_eq!(json["runs_checked"], check.runs_checked);

    let gc = db.gc().unwrap();
    let json = serde_json::to_value(&gc).unwrap();
    assert_eq!(json["segments_freed"], gc.segments_freed);
}

/// Keeps every message logged in this test process.
struct Capture(std::sync::Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {}", record.level(), record.args()));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(std::sync::Mutex::new(Vec::new()));

#[test]
fn flushes_merges_and_gc_passes_are_logged() {
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Debug);
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            memtable_size: 128 << 10,
            large_segment_size: 64 << 10,
            ..Options::default()
        },
    )
    .unwrap();
    for round in 0..3u32 {
        for i in 0..600u32 {
            db.put(format!("k{i:05}"), vec![(i + round) as u8; 2000])
                .unwrap();
        }
    }
    db.compact_all().unwrap();
    db.gc().unwrap();
    drop(db);
    // Every event names its database (the other test of this binary logs too).
    let name = dir.path().display().to_string();
    let logged: Vec<String> = CAPTURE
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains(&name))
        .cloned()
        .collect();
    let has = |what: &str| logged.iter().any(|m| m.contains(what));
    assert!(has("flushed a memtable"), "{logged:?}");
    assert!(has("merged L1 into L2"), "{logged:?}");
    assert!(has("garbage collection freed"), "{logged:?}");
}
