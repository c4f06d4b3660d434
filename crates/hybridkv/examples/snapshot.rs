//! A snapshot reads the database as of one moment, whatever is written, merged or
//! collected afterwards.
//!
//! Run: `cargo run -p hybridkv --example snapshot`

use hybridkv::{Db, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path(), Options::default())?;
    db.put("balance:alice", "100")?;
    db.put("balance:bob", "50")?;

    let before = db.snapshot()?;
    // A transfer, after the snapshot.
    let mut batch = hybridkv::WriteBatch::new();
    batch.put("balance:alice", "70").put("balance:bob", "80");
    db.write(batch)?;
    db.flush()?; // the snapshot's files stay until it is dropped

    let then: Vec<_> = before.prefix("balance:").collect::<hybridkv::Result<_>>()?;
    let now: Vec<_> = db.prefix("balance:").collect::<hybridkv::Result<_>>()?;
    for ((k, old), (_, new)) in then.iter().zip(&now) {
        println!(
            "{}: {} at the snapshot (sequence {}), {} now",
            String::from_utf8_lossy(k),
            String::from_utf8_lossy(old),
            before.sequence(),
            String::from_utf8_lossy(new)
        );
    }
    assert_eq!(before.get("balance:alice")?.as_deref(), Some(&b"100"[..]));
    assert_eq!(db.get("balance:alice")?.as_deref(), Some(&b"70"[..]));
    Ok(())
}
