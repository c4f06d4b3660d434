//! The field-patch merge operator every engine gets when read-modify-write runs as a merge
//! (`--rmw merge`): the same function behind hybridkv's `MergeOperator` and RocksDB's merge
//! operator, so both fold the same deltas into the same values. A delta is
//! `[offset u32 LE][bytes]`: it overwrites those bytes of the value (extending a shorter
//! value with zeros), as a field update of a record (KDSep's small deltas on large values).

/// The operator's name (both engines).
pub const NAME: &str = "bench.field_patch";

/// Bytes of the record a YCSB read-modify-write rewrites as a delta.
pub const PATCH_BYTES: usize = 16;

/// The delta that writes `bytes` at `offset`: one segment `[offset u32][len u32][bytes]`
/// (a delta is one or more segments, applied in order).
pub fn delta(offset: u32, bytes: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + bytes.len());
    d.extend_from_slice(&offset.to_le_bytes());
    d.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    d.extend_from_slice(bytes);
    d
}

/// The segments of a delta, in order; a malformed tail is ignored (hybridkv refuses
/// such a delta when written; RocksDB's operator cannot refuse).
fn segments(d: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut rest = d;
    std::iter::from_fn(move || {
        let (head, tail) = rest.split_first_chunk::<8>()?;
        let at = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        let (bytes, after) = (tail.get(..len)?, tail.get(len..)?);
        rest = after;
        Some((at, bytes))
    })
}

/// `base` with `deltas` (oldest first) applied: each segment overwrites its bytes
/// (extending a shorter value with zeros).
pub fn apply<'a>(base: Option<&[u8]>, deltas: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = base.unwrap_or_default().to_vec();
    for d in deltas {
        for (at, bytes) in segments(d) {
            if out.len() < at + bytes.len() {
                out.resize(at + bytes.len(), 0);
            }
            if let Some(dst) = out.get_mut(at..at + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
    }
    out
}

/// One delta equivalent to `deltas` (oldest first): the bytes they write, later ones
/// winning, as segments of contiguous written bytes (the partial merge both engines use).
pub fn combine<'a>(deltas: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut painted: Vec<Option<u8>> = Vec::new();
    for d in deltas {
        for (at, bytes) in segments(d) {
            if painted.len() < at + bytes.len() {
                painted.resize(at + bytes.len(), None);
            }
            for (dst, b) in painted.iter_mut().skip(at).zip(bytes) {
                *dst = Some(*b);
            }
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < painted.len() {
        if painted[i].is_none() {
            i += 1;
            continue;
        }
        let run: Vec<u8> = painted[i..].iter().map_while(|b| *b).collect();
        out.extend_from_slice(&delta(i as u32, &run));
        i += run.len();
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
    fn partial_merge(&self, _key: &[u8], deltas: &[&[u8]]) -> Option<Vec<u8>> {
        Some(combine(deltas.iter().copied()))
    }
    fn check_operand(&self, operand: &[u8]) -> Result<(), hybridkv::MergeError> {
        let covered: usize = segments(operand).map(|(_, b)| 8 + b.len()).sum();
        if operand.is_empty() || covered != operand.len() {
            return Err(hybridkv::MergeError(format!(
                "a field patch is one or more [offset u32][len u32][bytes] segments; {} of \
                 its {} bytes are not",
                operand.len() - covered,
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

    #[test]
    fn combined_patches_apply_as_the_sequence_does() {
        let ds = [
            delta(0, b"abcdef"),
            delta(3, b"XY"),
            delta(10, b"zz"),
            delta(1, b"Q"),
        ];
        let refs: Vec<&[u8]> = ds.iter().map(Vec::as_slice).collect();
        let one = combine(refs.iter().copied());
        for base in [None, Some(&b"0123456789abcdef"[..]), Some(&b"01"[..])] {
            assert_eq!(
                apply(base, [one.as_slice()]),
                apply(base, refs.iter().copied())
            );
        }
        // Bytes never written stay the base's (a hole between segments).
        assert_eq!(
            apply(Some(b"0123456789abcdef"), [one.as_slice()]),
            b"aQcXYf6789zzcdef"
        );
        use hybridkv::MergeOperator;
        assert!(FieldPatch.check_operand(&one).is_ok());
        assert!(FieldPatch.check_operand(&one[..one.len() - 1]).is_err());
        assert!(FieldPatch.check_operand(b"").is_err());
    }
}
