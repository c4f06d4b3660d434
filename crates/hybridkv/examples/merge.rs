//! Read-modify-write without the read: counters kept with `merge` and the `CounterAdd`
//! operator, folded on reads and when the deltas reach the disk.
//!
//! Run: `cargo run -p hybridkv --example merge`

use hybridkv::{CounterAdd, Db, Options, WriteBatch};
use std::sync::Arc;

fn count(db: &Db, key: &str) -> Result<u64, Box<dyn std::error::Error>> {
    Ok(match db.get(key)? {
        Some(v) => u64::from_le_bytes(v.as_slice().try_into()?),
        None => 0,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let opts = Options {
        merge_operator: Some(Arc::new(CounterAdd)),
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts.clone())?;
    for page in ["/", "/about", "/", "/", "/docs"] {
        db.merge(format!("hits:{page}"), 1u64.to_le_bytes())?;
    }
    // Deltas and plain writes in one atomic batch.
    let mut batch = WriteBatch::new();
    batch
        .merge("hits:/", 10u64.to_le_bytes())
        .put("hits:/old", 7u64.to_le_bytes());
    db.write(batch)?;
    db.flush()?; // the deltas go to disk; reads still fold them
    db.merge("hits:/old", 1u64.to_le_bytes())?;
    for pair in db.prefix("hits:") {
        let (k, v) = pair?;
        println!(
            "{}: {}",
            String::from_utf8_lossy(&k),
            u64::from_le_bytes(v.as_slice().try_into()?)
        );
    }
    assert_eq!(count(&db, "hits:/")?, 13);
    assert_eq!(count(&db, "hits:/old")?, 8);
    db.compact_all()?; // folds every delta into its value
    drop(db);
    let db = Db::open(dir.path(), opts)?;
    assert_eq!(count(&db, "hits:/docs")?, 1);
    println!("after compact_all and a reopen: the same counts");
    Ok(())
}
