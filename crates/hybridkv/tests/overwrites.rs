//! A database smaller than L1's target, written three times over, keeps its space close to
//! its live size with default merge settings: L1's runs are merged once they shadow enough
//! of each other, and GC then frees the large-log segments they held (issue 17). No
//! `compact_all`: the test only waits for the pending background work and runs the GC pass
//! the GC thread would run on its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hybridkv::{Db, Options};

fn value(i: u64, round: u64) -> Vec<u8> {
    // Like the MD mix: 20% small, 60% medium, 20% large values (over the 1024-byte
    // threshold with the key).
    let len = match (i * 7 + round) % 10 {
        0 | 1 => 9,
        2 | 3 => 1100,
        _ => 104,
    };
    let mut v = format!("{i:08}-{round}|").into_bytes();
    v.resize(len, b'a' + (round as u8));
    v
}

#[test]
fn a_small_database_written_three_times_stays_near_its_live_size() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        // Defaults but a small memtable, so that three rounds make several L1 runs and
        // the data stays under L1's target (memtable x growth factor).
        memtable_size: 1 << 20,
        large_segment_size: 256 << 10,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    const N: u64 = 12_000;
    for round in 0..3 {
        for i in 0..N {
            db.put(
                format!("key{:010}", (i * 7_919) % N),
                value((i * 7_919) % N, round),
            )
            .unwrap();
        }
        db.flush().unwrap();
    }
    db.compact().unwrap(); // waits for pending background work; forces nothing
    db.gc().unwrap();
    let space = db.space().unwrap();
    let s = db.stats().unwrap();
    println!("{space}");
    println!(
        "L1 runs: {}, compactions: {}, GC segments freed: {}",
        s.levels[0].files, s.compactions, s.gc_segments_freed
    );
    assert_eq!(space.live_pairs, N);
    for i in (0..N).step_by(97) {
        assert_eq!(db.get(format!("key{i:010}")).unwrap(), Some(value(i, 2)));
    }
    assert!(
        space.space_amplification() <= 1.5,
        "space amplification {:.2} after three rounds of overwrites",
        space.space_amplification()
    );
}
