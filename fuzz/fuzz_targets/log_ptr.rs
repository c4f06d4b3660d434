//! Log pointers (`docs/FORMAT.md`, "Pointer": segment u64, offset u64, len u32), as they
//! appear in put-large records and leaf entries: decode(x) consumes exactly 20 bytes and
//! re-encodes to them; shorter inputs are errors.
#![no_main]

use hybridkv::fuzzing::{decode_log_ptr, encode_log_ptr, LOG_PTR_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode_log_ptr(data) {
        Ok((p, used)) => {
            assert_eq!(used, LOG_PTR_SIZE);
            assert_eq!(encode_log_ptr(p), &data[..LOG_PTR_SIZE]);
            assert_eq!(decode_log_ptr(&encode_log_ptr(p)).expect("decodes").0, p);
        }
        Err(e) => {
            assert!(
                data.len() < LOG_PTR_SIZE,
                "rejected a {}-byte pointer: {e}",
                data.len()
            );
            assert!(e.is_corruption());
        }
    }
});
