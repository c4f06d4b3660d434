//! Operand lists (`docs/FORMAT.md`, "Operand list": the value of a deltas entry).
//!
//! Input: `[base_len u8][base][list bytes]` (`base_len` 255: no base). Properties: no panic
//! and no allocation sized by a damaged count; an accepted list encodes back to exactly its
//! bytes (the encoding is canonical); `Append` folds it into the base it applies to followed
//! by every operand, oldest first; a bucket list (its deltas in a delta bucket) is refused
//! by the fold.
#![no_main]

use hybridkv::fuzzing::operand_list;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&base_len, rest)) = input.split_first() else {
        return;
    };
    let (base, list) = if base_len == u8::MAX {
        (None, rest)
    } else {
        let n = usize::from(base_len).min(rest.len());
        (Some(&rest[..n]), &rest[n..])
    };
    if let Some(l) = operand_list(list, base) {
        assert_eq!(l.again, list, "an accepted list is not encoded the same way again");
        let mut want = l.base.unwrap_or_default().to_vec();
        for o in &l.operands {
            want.extend_from_slice(o);
        }
        // A bucket list holds no delta: folding it alone must be refused, never read as
        // "no deltas".
        if l.bucket.is_some() {
            assert!(
                matches!(l.folded, Err(hybridkv::Error::Internal(_))),
                "a bucket list folded without its bucket: {:?}",
                l.folded
            );
            return;
        }
        // Append refuses nothing but a folded value over the maximum size.
        match l.folded {
            Ok(v) => assert_eq!(v, want, "Append folded the list into something else"),
            Err(e) => assert!(want.len() > 16 << 20, "refused: {e}"),
        }
    }
});
