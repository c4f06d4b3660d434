//! Delta bucket segments (`docs/FORMAT.md`, "Delta bucket segment"): the records a flush
//! appends to a key's bucket when delta separation is on.
//!
//! Input: `[flags u8][records]` (a segment's bytes after its header). Bit 0 rewrites
//! every record's checksum first (walking the records by their declared body lengths), so
//! mutations reach the length, range and operand-list checks. Properties: no panic,
//! allocation in proportion to the input; records decode one after another as a segment
//! scan reads them, up to the first that does not, and every accepted record encodes back
//! to exactly its bytes (`hybridkv::fuzzing::bucket_record` panics otherwise).
#![no_main]

use hybridkv_fuzz::bounded;
use libfuzzer_sys::fuzz_target;

/// Rewrites the checksum of each record (`[crc32c u32][body_len u32][body]`, the checksum
/// over the body), as far as the bytes reach.
fn fix_records(data: &mut [u8]) {
    let mut pos = 0usize;
    while let Some(len) = data.get(pos + 4..pos + 8) {
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let start = pos + 8;
        let Some(end) = start.checked_add(len).filter(|&e| e <= data.len()) else {
            return;
        };
        let crc = crc32c::crc32c(&data[start..end]);
        data[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
        pos = end;
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&flags, rest)) = input.split_first() else {
        return;
    };
    let mut data = rest.to_vec();
    if flags & 1 != 0 {
        fix_records(&mut data);
    }
    bounded("bucket records", data.len(), 4, 4096, || {
        hybridkv::fuzzing::bucket_record(&data)
    });
});
