//! Ranges, prefixes, key-only scans, lazy values, seeks, a scan of known length, and
//! walking backward (reverse and double-ended iteration, `seek_back`).
//!
//! Run: `cargo run -p hybridkv --example iterators`

use hybridkv::{Db, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path(), Options::default())?;
    for (user, city) in [
        ("ann", "oslo"),
        ("bob", "rome"),
        ("cat", "lima"),
        ("dan", "kyiv"),
    ] {
        db.put(format!("user:{user}"), city)?;
        db.put(format!("city:{city}"), user)?;
    }

    // A range (start included, end excluded).
    for pair in db.range("user:b".."user:d") {
        let (k, v) = pair?;
        println!(
            "range:  {} = {}",
            String::from_utf8_lossy(&k),
            String::from_utf8_lossy(&v)
        );
    }
    // A prefix, keys only: no value is read.
    let cities: Vec<Vec<u8>> = db.prefix("city:").keys().collect::<hybridkv::Result<_>>()?;
    println!("{} cities", cities.len());
    assert_eq!(cities.len(), 4);
    // A scan of known length: the values it returns are read in one batch.
    let first_two: Vec<_> = db
        .range("user:".."user;")
        .expect_pairs(2)
        .take(2)
        .collect::<hybridkv::Result<_>>()?;
    assert_eq!(first_two[0].0, b"user:ann");
    // Lazy values: only the pairs asked for are read.
    for pair in db.prefix("user:").lazy() {
        let pair = pair?;
        if pair.key().ends_with(b"cat") {
            println!(
                "lazy:   cat lives in {}",
                String::from_utf8_lossy(&pair.value()?)
            );
        }
    }
    // Seek: jump ahead (or back) inside the same range, as of the same moment.
    let mut it = db.prefix("city:");
    it.seek("city:m");
    let (k, _) = it
        .next()
        .ok_or(hybridkv::Error::Internal("empty".into()))??;
    assert_eq!(k, b"city:oslo");
    it.seek("city:a");
    let (k, _) = it
        .next()
        .ok_or(hybridkv::Error::Internal("empty".into()))??;
    assert_eq!(k, b"city:kyiv");
    // Backward: the same range, last pair first.
    let newest_first: Vec<Vec<u8>> = db
        .range("user:".."user;")
        .rev()
        .map(|p| p.map(|(k, _)| k))
        .collect::<hybridkv::Result<_>>()?;
    assert_eq!(
        newest_first.first().map(Vec::as_slice),
        Some(&b"user:dan"[..])
    );
    // Both ends at once: they meet in the middle without repeating a pair.
    let mut both = db.keys("user:".."user;");
    let first = both
        .next()
        .ok_or(hybridkv::Error::Internal("empty".into()))??;
    let last = both
        .next_back()
        .ok_or(hybridkv::Error::Internal("empty".into()))??;
    let middle = both.count();
    println!(
        "both ends: {} .. {} with {middle} between",
        String::from_utf8_lossy(&first),
        String::from_utf8_lossy(&last)
    );
    assert_eq!(middle, 2);
    // seek_back: the last pair at or before a key (the back of the same range).
    let mut it = db.prefix("city:");
    it.seek_back("city:m");
    let (k, _) = it
        .next_back()
        .ok_or(hybridkv::Error::Internal("empty".into()))??;
    assert_eq!(k, b"city:lima");
    // Every key, in order.
    let all = db.keys::<&[u8], _>(..).count();
    assert_eq!(all, 8);
    println!("{all} keys in all");
    Ok(())
}
