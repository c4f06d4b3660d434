//! A checkpoint: a consistent copy of a database taken while it is written, opened like
//! any database.
//!
//! Run: `cargo run -p hybridkv --example checkpoint`

use hybridkv::{Db, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("live"), Options::default())?;
    for i in 0..10_000u32 {
        // Small, medium and large values: the copy holds all three kinds of file.
        let value = vec![b'v'; [8, 200, 4000][i as usize % 3]];
        db.put(format!("key{i:05}"), value)?;
    }
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || -> hybridkv::Result<()> {
            for i in 10_000..20_000u32 {
                db.put(format!("key{i:05}"), "written during the checkpoint")?;
            }
            Ok(())
        })
    };
    let report = db.checkpoint(dir.path().join("backup"))?;
    print!("{report}");
    writer.join().map_err(|_| "the writer thread panicked")??;

    let backup = Db::open_read_only(dir.path().join("backup"), Options::default())?;
    let pairs = backup.keys::<&[u8], _>(..).count() as u64;
    println!("the backup holds {pairs} pairs (the live database: 20000)");
    assert!((10_000..=20_000).contains(&pairs));
    // The backup holds a prefix of the writes: every key below its count, none above.
    assert!(backup.get(format!("key{:05}", pairs - 1))?.is_some());
    assert!(backup.get(format!("key{pairs:05}"))?.is_none());
    Ok(())
}
