//! Range and prefix deletion: one write whatever the number of keys; a snapshot taken
//! before still sees them; compaction gives their space back.
//!
//! Run: `cargo run -p hybridkv --example delete_range`

use hybridkv::{Db, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path(), Options::default())?;
    for user in 0..10_000u32 {
        db.put(format!("session:{user:05}"), [1u8; 100])?;
        db.put(format!("user:{user:05}"), "profile")?;
    }
    db.flush()?;
    let before = db.snapshot()?;

    // Every session of users 02000..05000: one small write, not 3,000 deletes.
    db.delete_range("session:02000", "session:05000")?;
    assert_eq!(db.get("session:02500")?, None);
    assert!(db.get("session:05000")?.is_some());
    // Every key under a prefix.
    db.delete_prefix("session:")?;
    assert_eq!(db.prefix("session:").count(), 0);
    assert_eq!(db.prefix("user:").keys().count(), 10_000);
    // A key written after the deletion is not affected by it.
    db.put("session:00001", "new")?;
    assert_eq!(db.get("session:00001")?.as_deref(), Some(&b"new"[..]));

    // The snapshot reads as of before both deletions.
    assert_eq!(before.prefix("session:").count(), 10_000);
    drop(before);

    // Compaction drops what the deletions covered and then forgets them.
    let on_disk = db.space()?.total_on_disk;
    db.compact_all()?;
    let stats = db.stats()?;
    println!(
        "{} range deletions, {} versions dropped by them, {} range tombstones left; {} -> {} bytes on disk",
        stats.range_deletes,
        stats.dropped_by_range,
        stats.range_tombstones,
        on_disk,
        db.space()?.total_on_disk
    );
    assert_eq!(stats.range_tombstones, 0);
    Ok(())
}
