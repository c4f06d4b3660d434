//! Deltas (read-modify-write as blind writes, KDSep): the merge operator a user sets in
//! `Options`, the ready operators, the operand list a version of kind *deltas* holds, and
//! folding (deltas onto a base, or deltas into fewer deltas).
//!
//! Owns: the encoding of an operand list (FORMAT.md, "Operand list": `[count u32]` then
//! `[len u32][bytes]` per operand, oldest first), its checked decoding, and the three folds
//! every path uses (`stack_older`, `fold_full`, `fold_partial`), so that a get, a scan, a
//! flush, a compaction and a GC relocation apply the operator the same way.
//! Never: reads or writes a file, or decides *when* deltas fold (the read path, the merge
//! job and GC do).

use crate::error::{Error, Result};
use crate::format::Decoder;
use std::sync::Arc;

/// Why a merge operator refused its input (an operand or a base it cannot read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeError(pub String);

impl std::fmt::Display for MergeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A user-supplied merge operator: folds deltas (written with `Db::merge`) into a value.
///
/// `full_merge` must be deterministic. When `partial_merge` is given, folding any
/// consecutive run of deltas with it and then the rest with `full_merge` must give what
/// `full_merge` gives over all of them (associativity): the engine folds deltas partially
/// above the bottom level and fully where it meets a base (or the bottom).
pub trait MergeOperator: Send + Sync {
    /// A name stored with the database's options (tools show it).
    fn name(&self) -> &str;

    /// The value of `key` after `deltas` (oldest first) were applied to `base` (`None`: the
    /// key had no value, or was deleted).
    fn full_merge(
        &self,
        key: &[u8],
        base: Option<&[u8]>,
        deltas: &[&[u8]],
    ) -> Result<Vec<u8>, MergeError>;

    /// One delta equivalent to `deltas` (oldest first, at least two), or `None` when the
    /// operator cannot combine deltas without their base (they are then kept as a list).
    fn partial_merge(&self, _key: &[u8], _deltas: &[&[u8]]) -> Option<Vec<u8>> {
        None
    }

    /// Checks an operand when it is written (`Db::merge`), so that a bad one is refused
    /// then instead of failing a later read or compaction.
    fn check_operand(&self, _operand: &[u8]) -> Result<(), MergeError> {
        Ok(())
    }
}

impl std::fmt::Debug for dyn MergeOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MergeOperator({})", self.name())
    }
}

fn read_u64(what: &str, bytes: &[u8]) -> Result<u64, MergeError> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| {
        MergeError(format!(
            "{what} is {} bytes, a counter is 8 (u64 little-endian)",
            bytes.len()
        ))
    })?;
    Ok(u64::from_le_bytes(arr))
}

/// Adds unsigned 64-bit little-endian integers (wrapping); a missing base counts as 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct CounterAdd;

impl MergeOperator for CounterAdd {
    fn name(&self) -> &str {
        "hybridkv.counter_add"
    }
    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        deltas: &[&[u8]],
    ) -> Result<Vec<u8>, MergeError> {
        let mut sum = match base {
            Some(b) => read_u64("the base value", b)?,
            None => 0,
        };
        for d in deltas {
            sum = sum.wrapping_add(read_u64("a delta", d)?);
        }
        Ok(sum.to_le_bytes().to_vec())
    }
    fn partial_merge(&self, key: &[u8], deltas: &[&[u8]]) -> Option<Vec<u8>> {
        self.full_merge(key, None, deltas).ok()
    }
    fn check_operand(&self, operand: &[u8]) -> Result<(), MergeError> {
        read_u64("a delta", operand).map(|_| ())
    }
}

/// Appends each delta to the value (a missing base is empty).
#[derive(Debug, Clone, Copy, Default)]
pub struct Append;

impl MergeOperator for Append {
    fn name(&self) -> &str {
        "hybridkv.append"
    }
    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        deltas: &[&[u8]],
    ) -> Result<Vec<u8>, MergeError> {
        let len = base.map_or(0, <[u8]>::len) + deltas.iter().map(|d| d.len()).sum::<usize>();
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(base.unwrap_or_default());
        for d in deltas {
            out.extend_from_slice(d);
        }
        Ok(out)
    }
    fn partial_merge(&self, key: &[u8], deltas: &[&[u8]]) -> Option<Vec<u8>> {
        self.full_merge(key, None, deltas).ok()
    }
}

/// Keeps the largest value, compared as bytes (the base and every delta).
#[derive(Debug, Clone, Copy, Default)]
pub struct Max;

impl MergeOperator for Max {
    fn name(&self) -> &str {
        "hybridkv.max"
    }
    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        deltas: &[&[u8]],
    ) -> Result<Vec<u8>, MergeError> {
        Ok(base
            .into_iter()
            .chain(deltas.iter().copied())
            .max()
            .unwrap_or_default()
            .to_vec())
    }
    fn partial_merge(&self, key: &[u8], deltas: &[&[u8]]) -> Option<Vec<u8>> {
        self.full_merge(key, None, deltas).ok()
    }
}

/// The operator of a database, or the error a delta meets without one.
pub(crate) fn require(op: Option<&Arc<dyn MergeOperator>>) -> Result<&dyn MergeOperator> {
    op.map(|o| o.as_ref()).ok_or_else(|| {
        Error::InvalidArgument(
            "the database holds or was given a merge delta, but Options::merge_operator is not set"
                .into(),
        )
    })
}

/// A key for error messages: at most 32 bytes, escaped.
fn show_key(key: &[u8]) -> String {
    let shown = key.get(..32).unwrap_or(key);
    let more = if shown.len() < key.len() { "..." } else { "" };
    format!("\"{}\"{more}", shown.escape_ascii())
}

fn merge_failed(op: &dyn MergeOperator, key: &[u8], e: MergeError) -> Error {
    Error::MergeFailed {
        operator: op.name().to_string(),
        key: show_key(key),
        reason: e.0,
    }
}

/// An operand list holding one operand.
pub(crate) fn single(operand: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + operand.len());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&(operand.len() as u32).to_le_bytes());
    out.extend_from_slice(operand);
    out
}

fn encode(operands: &[&[u8]]) -> Vec<u8> {
    let len = 4 + operands.iter().map(|o| 4 + o.len()).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(operands.len() as u32).to_le_bytes());
    for o in operands {
        out.extend_from_slice(&(o.len() as u32).to_le_bytes());
        out.extend_from_slice(o);
    }
    out
}

/// The operands of a list, oldest first. `None` if the bytes are not a well-formed list
/// (every length is checked against what is left; nothing may follow the last operand).
pub(crate) fn decode(list: &[u8]) -> Option<Vec<&[u8]>> {
    let mut d = Decoder::new(list);
    let count = d.u32()? as usize;
    // Each operand takes at least its 4-byte length: a damaged count cannot size this.
    let mut out = Vec::with_capacity(count.min(d.remaining() / 4));
    for _ in 0..count {
        let len = d.u32()? as usize;
        out.push(d.bytes(len)?);
    }
    (d.remaining() == 0).then_some(out)
}

fn decoded<'a>(list: &'a [u8], key: &[u8]) -> Result<Vec<&'a [u8]>> {
    decode(list).ok_or_else(|| {
        Error::Internal(format!(
            "the operand list of key {} is malformed ({} bytes)",
            show_key(key),
            list.len()
        ))
    })
}

/// `newer` with the operands of `older` put before its own (both lists oldest first).
pub(crate) fn stack_older(newer: &[u8], older: &[u8], key: &[u8]) -> Result<Vec<u8>> {
    let mut all = decoded(older, key)?;
    all.extend(decoded(newer, key)?);
    Ok(encode(&all))
}

/// The value after the list's deltas are applied to `base`.
pub(crate) fn fold_full(
    op: &dyn MergeOperator,
    key: &[u8],
    base: Option<&[u8]>,
    list: &[u8],
) -> Result<Vec<u8>> {
    let operands = decoded(list, key)?;
    op.full_merge(key, base, &operands)
        .map_err(|e| merge_failed(op, key, e))
}

/// The list with its operands combined into one where the operator can (else unchanged).
pub(crate) fn fold_partial(op: &dyn MergeOperator, key: &[u8], list: Vec<u8>) -> Result<Vec<u8>> {
    let operands = decoded(&list, key)?;
    if operands.len() < 2 {
        return Ok(list);
    }
    Ok(match op.partial_merge(key, &operands) {
        Some(one) => single(&one),
        None => list,
    })
}

/// Checks an operand against the operator as it is written.
pub(crate) fn check_operand(op: &dyn MergeOperator, key: &[u8], operand: &[u8]) -> Result<()> {
    op.check_operand(operand)
        .map_err(|e| merge_failed(op, key, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip_and_stack_oldest_first() {
        let a = single(b"one");
        assert_eq!(decode(&a), Some(vec![&b"one"[..]]));
        let b = stack_older(&single(b"three"), &encode(&[b"one", b""]), b"k").unwrap();
        assert_eq!(decode(&b), Some(vec![&b"one"[..], b"", b"three"]));
        assert_eq!(decode(&encode(&[])), Some(vec![]));
    }

    #[test]
    fn damaged_lists_are_refused_never_panic() {
        let good = encode(&[b"abc", b"de"]);
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_none(), "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_none());
        // A count far beyond what the bytes hold.
        let mut huge = good.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_none());
        assert!(matches!(
            fold_full(&Append, b"k", None, &huge),
            Err(Error::Internal(_))
        ));
    }

    #[test]
    fn ready_operators_fold_fully_and_partially_alike() {
        let n = |x: u64| x.to_le_bytes().to_vec();
        /// An operator, its deltas and a base.
        type Case<'a> = (&'a dyn MergeOperator, Vec<Vec<u8>>, Option<Vec<u8>>);
        let ops: [Case<'_>; 3] = [
            (&CounterAdd, vec![n(5), n(7), n(u64::MAX)], Some(n(10))),
            (
                &Append,
                vec![b"x".to_vec(), b"".to_vec(), b"yz".to_vec()],
                None,
            ),
            (
                &Max,
                vec![b"b".to_vec(), b"ab".to_vec(), b"c".to_vec()],
                Some(b"bb".to_vec()),
            ),
        ];
        for (op, deltas, base) in ops {
            let refs: Vec<&[u8]> = deltas.iter().map(Vec::as_slice).collect();
            let whole = fold_full(op, b"k", base.as_deref(), &encode(&refs)).unwrap();
            // Split anywhere: the first part folded partially, then everything fully.
            for split in 0..=refs.len() {
                let head = fold_partial(op, b"k", encode(&refs[..split])).unwrap();
                let list = stack_older(&encode(&refs[split..]), &head, b"k").unwrap();
                let again = fold_full(op, b"k", base.as_deref(), &list).unwrap();
                assert_eq!(again, whole, "{} split at {split}", op.name());
            }
        }
        assert_eq!(
            fold_full(&CounterAdd, b"k", Some(&n(1)), &encode(&[&n(2), &n(3)])).unwrap(),
            n(6)
        );
        assert_eq!(
            fold_full(&Append, b"k", Some(b"a"), &encode(&[b"b", b"c"])).unwrap(),
            b"abc"
        );
        assert_eq!(
            fold_full(&Max, b"k", None, &encode(&[b"a", b"c", b"b"])).unwrap(),
            b"c"
        );
    }

    #[test]
    fn an_operator_refusal_names_operator_key_and_reason() {
        let e = fold_full(&CounterAdd, b"count", Some(b"abc"), &single(&[0; 8])).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Error::MergeFailed { .. }), "{e:?}");
        assert!(
            text.contains("hybridkv.counter_add")
                && text.contains("count")
                && text.contains("3 bytes"),
            "{text}"
        );
        assert!(check_operand(&CounterAdd, b"k", &[1, 2]).is_err());
        assert!(check_operand(&CounterAdd, b"k", &[0; 8]).is_ok());
        assert!(require(None).is_err());
    }
}
