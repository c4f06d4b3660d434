//! Small-log (WAL) files (`docs/FORMAT.md`, "Small log"), through the replay recovery runs.
//!
//! Input: `[flags u8][file bytes]`. Flag bit 0 rewrites every checksum first (so mutations
//! reach the length and structure checks behind them). Properties: replay never panics
//! and allocates in proportion to the file; an older file (not the newest) never reports
//! a torn tail, and whatever an older file accepts the newest accepts identically; the
//! accepted records are back to back from the header, and writing them again with the
//! real writer yields exactly the file up to the torn tail; only a file shorter than its
//! header or with a header of zeros is dropped whole; each record's batch payload goes
//! through the batch decoder as replay does.
#![no_main]

use hybridkv::fuzzing::{decode_batch, decode_wal_chunk, encode_wal};
use hybridkv_fuzz::{bounded, fix_wal};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&flags, rest)) = input.split_first() else {
        return;
    };
    let mut data = rest.to_vec();
    if flags & 1 != 0 {
        fix_wal(&mut data);
    }
    let newest = bounded("replay newest", data.len(), 4, 1 << 20, || {
        decode_wal_chunk(&data, true)
    });
    let older = bounded("replay older", data.len(), 4, 1 << 20, || {
        decode_wal_chunk(&data, false)
    });
    // Older and newest files follow one torn-tail rule; they differ only for a file
    // shorter than its header (only the newest may be).
    if let Ok(o) = &older {
        assert_eq!(
            newest.as_ref().ok(),
            Some(o),
            "newest and older replays disagree"
        );
    }
    let Ok(chunk) = newest else { return };
    let end = chunk.torn_at.map_or(data.len(), |t| t as usize);
    assert!(end <= data.len());
    let mut pos = 16u64;
    for r in &chunk.records {
        assert_eq!(r.offset, pos, "records are not back to back");
        pos += 24 + r.payload.len() as u64;
        let _ = bounded("decode_batch", r.payload.len(), 16, 1024, || {
            decode_batch(&r.payload, r.count)
        });
    }
    if chunk.torn_at == Some(0) {
        // Only a file shorter than its header, or one whose header is zeros with no record
        // behind it (a creation cut short), is dropped whole.
        assert!(
            data.len() < 16 || data[..16].iter().all(|&b| b == 0),
            "a file with a header was dropped whole"
        );
        assert!(chunk.records.is_empty());
        return;
    }
    assert_eq!(
        pos as usize, end,
        "records do not reach the end of the valid part"
    );
    let recs: Vec<(u64, u32, Vec<u8>)> = chunk
        .records
        .iter()
        .map(|r| (r.first_lsn, r.count, r.payload.clone()))
        .collect();
    let again = encode_wal(&recs).expect("encode");
    assert_eq!(again, &data[..end], "encode(decode(x)) != x");
});
