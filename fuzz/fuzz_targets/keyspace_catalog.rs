//! The keyspace catalog (`docs/FORMAT.md`, "Keyspace catalog").
//!
//! Input: the file's bytes. Properties: no panic; an accepted catalog encodes to exactly
//! the bytes it was decoded from (there is one encoding of a catalog), and those decode
//! again.
#![no_main]

use hybridkv::fuzzing::roundtrip_keyspace_catalog;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(again) = roundtrip_keyspace_catalog(data) {
        assert_eq!(again, data, "encode(decode(x)) != x");
        assert_eq!(
            roundtrip_keyspace_catalog(&again).expect("an encoded catalog decodes"),
            again
        );
    }
});
