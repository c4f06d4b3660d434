//! The options file (`docs/FORMAT.md`, "Options file").
//!
//! Input: `[flags u8][file bytes]`. Bit 0 rewrites the payload checksum first, so the
//! text parser is reached. Properties: no panic; an accepted file's options encode to a
//! file that decodes to the same options (every option survives a round trip).
#![no_main]

use hybridkv::fuzzing::{decode_options, encode_options};
use hybridkv_fuzz::fix_options;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&flags, rest)) = input.split_first() else {
        return;
    };
    let mut data = rest.to_vec();
    if flags & 1 != 0 {
        fix_options(&mut data);
    }
    if let Ok(options) = decode_options(&data) {
        let again = encode_options(&options);
        let back = decode_options(&again).expect("an encoded options file must decode");
        assert_eq!(
            encode_options(&back),
            again,
            "options changed in a round trip"
        );
    }
});
