//! The field-patch merge operator every engine gets when read-modify-write runs as a merge
//! (`--rmw merge`): the same function behind hybridkv's `MergeOperator` and RocksDB's merge
//! operator, so both fold the same deltas into the same values. A delta is
//! `[offset u32 LE][bytes]`: it overwrites those bytes of the value (extending a shorter
//! value with zeros), as a field update of a record (KDSep's small deltas on large values).

/// The operator's name (both engines).
pub const NAME: &str = "bench.field_patch";

/// Bytes of the record a YCSB read-modify-write rewrites as a delta.
pub const PATCH_BYTES: usize = 16;

/// The delta that writes `bytes` at `offset`.
pub fn delta(offset: u32, bytes: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(4 + bytes.len());
    d.extend_from_slice(&offset.to_le_bytes());
    d.extend_from_slice(bytes);
    d
}

/// `base` with `deltas` (oldest first) applied; a delta shorter than its offset field is
/// skipped (hybridkv refuses it when written; RocksDB's operator cannot refuse).
pub fn apply<'a>(base: Option<&[u8]>, deltas: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = base.unwrap_or_default().to_vec();
    for d in deltas {
        let Some((head, bytes)) = d.split_first_chunk::<4>() else {
            continue;
        };
        let at = u32::from_le_bytes(*head) as usize;
        if out.len() < at + bytes.len() {
            out.resize(at + bytes.len(), 0);
        }
        if let Some(dst) = out.get_mut(at..at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    }
    out
}

/// The operator for hybridkv.
#[derive(Debug, Clone, Copy, Default)]
pub struct FieldPatch;

impl hybridkv::MergeOperator for FieldPatch {
    fn name(&self) -> &str {
        NAME
    }
    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        deltas: &[&[u8]],
    ) -> Result<Vec<u8>, hybridkv::MergeError> {
        Ok(apply(base, deltas.iter().copied()))
    }
    fn check_operand(&self, operand: &[u8]) -> Result<(), hybridkv::MergeError> {
        if operand.len() < 4 {
            return Err(hybridkv::MergeError(format!(
                "a field patch is at least 4 bytes (its offset), this one is {}",
                operand.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_overwrite_and_extend_in_order() {
        let v = apply(
            Some(b"hello world"),
            [&delta(6, b"WORLD")[..], &delta(0, b"J")],
        );
        assert_eq!(v, b"Jello WORLD");
        assert_eq!(apply(None, [&delta(2, b"ab")[..]]), b"\0\0ab");
        assert_eq!(
            apply(Some(b"x"), [&b"ab"[..]]),
            b"x",
            "a short delta is skipped"
        );
    }
}
