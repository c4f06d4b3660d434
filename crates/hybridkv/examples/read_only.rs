//! A second handle that only reads, beside the one that writes: no lock, nothing on disk
//! changes, writes refused.
//!
//! Run: `cargo run -p hybridkv --example read_only`

use hybridkv::{Db, Error, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let writer = Db::open(dir.path(), Options::default())?;
    writer.put("config:mode", "fast")?;

    // Another process would do the same (the CLI's reading commands do).
    let reader = Db::open_read_only(dir.path(), Options::default())?;
    println!(
        "the reader sees config:mode = {:?}",
        reader.get("config:mode")?.map(String::from_utf8)
    );
    match reader.put("config:mode", "slow") {
        Err(Error::ReadOnly) => println!("the reader refuses writes: {}", Error::ReadOnly),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A second writer is refused while the first holds the directory.
    match Db::open(dir.path(), Options::default()) {
        Err(e @ Error::Locked { .. }) => println!("a second writer: {e}"),
        other => panic!("expected Locked, got {other:?}"),
    }
    // The options the database was opened with are stored beside it.
    let stored = Db::stored_options(dir.path())?.unwrap_or_default();
    println!("stored options: memtable {} bytes", stored.memtable_size);
    Ok(())
}
