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

/// Adds unsigned 64-bit little-endian integers (wrapping). A missing base counts as 0, and
/// so does a base that is not 8 bytes (a value that is not a counter is replaced, as
/// RocksDB's `uint64add` does): the operator never fails on data already written, and
/// deltas are checked when they are written.
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
        let mut sum = base
            .and_then(|b| read_u64("the base value", b).ok())
            .unwrap_or(0);
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
pub(crate) fn show_key(key: &[u8]) -> String {
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

/// Bit of an operand list's head word: the list does not apply to older versions (it is
/// its key's value on its own: its deltas over the base it carries, or over nothing).
const CLOSED: u32 = 1 << 31;
/// Bit of the head word (with `CLOSED`): the first operand is the base value.
const WITH_BASE: u32 = 1 << 30;
/// Bit of the head word (with `CLOSED`, not with `WITH_BASE`): the first operand is the
/// encoded pointer (20 bytes) of the base value in the large log, which stays there.
const BASE_PTR: u32 = 1 << 29;
/// Bit of the head word: a *bucket list*. Its deltas are not in it but in the key's delta
/// bucket (ARCHITECTURE.md, "Delta separation"): the records of the key whose LSN range lies inside the range
/// `[lo u64][hi u64]` that follows the head word. It holds no operand but the base
/// pointer (with `CLOSED | BASE_PTR`); never with `WITH_BASE`.
const BUCKET: u32 = 1 << 28;
const COUNT_MASK: u32 = BUCKET - 1;
/// Bytes of an encoded large-log pointer (`log::ptr::LOG_PTR_SIZE`; this module does
/// not name `log`, which names `options`, which names this one).
pub(crate) const BASE_PTR_BYTES: usize = 20;

/// Largest value a fold may produce: the largest value a put accepts
/// (`options::MAX_VALUE_SIZE`, which a test there keeps equal; `options` names this module,
/// so this one does not name it back).
pub(crate) const MAX_FOLDED_VALUE: usize = 16 << 20;

/// Largest operand list the engine builds (the level format stores lengths in 32 bits).
pub(crate) const MAX_LIST_BYTES: usize = 1 << 30;

/// A decoded operand list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct List<'a> {
    /// The list is its key's whole value: older versions do not matter.
    pub closed: bool,
    /// The base a closed list carries (`None`: it applies to nothing, or to `base_ptr`).
    pub base: Option<&'a [u8]>,
    /// The encoded large-log pointer of the base a closed list applies to.
    pub base_ptr: Option<&'a [u8]>,
    /// The deltas, oldest first.
    pub operands: Vec<&'a [u8]>,
    /// A bucket list: the LSN range `(lo, hi)` of its deltas in the key's delta bucket
    /// (`operands` is then empty).
    pub bucket: Option<(u64, u64)>,
}

/// An operand list holding one operand.
pub(crate) fn single(operand: &[u8]) -> Vec<u8> {
    encode(false, None, &[operand])
}

/// Where a closed list's base is.
#[derive(Debug, Clone, Copy)]
enum Base<'a> {
    /// The value's bytes.
    Bytes(&'a [u8]),
    /// The encoded large-log pointer of the value.
    Ptr(&'a [u8]),
}

fn encode(closed: bool, base: Option<Base<'_>>, operands: &[&[u8]]) -> Vec<u8> {
    encode_with(closed, base, operands, None)
}

fn encode_with(
    closed: bool,
    base: Option<Base<'_>>,
    operands: &[&[u8]],
    bucket: Option<(u64, u64)>,
) -> Vec<u8> {
    let first = base.map(|b| match b {
        Base::Bytes(v) | Base::Ptr(v) => v,
    });
    let all = || first.into_iter().chain(operands.iter().copied());
    let len = 4 + all().map(|o| 4 + o.len()).sum::<usize>() + if bucket.is_some() { 16 } else { 0 };
    let mut out = Vec::with_capacity(len);
    let mut head = all().count() as u32 & COUNT_MASK;
    if closed {
        head |= CLOSED;
    }
    match base {
        Some(Base::Bytes(_)) => head |= CLOSED | WITH_BASE,
        Some(Base::Ptr(_)) => head |= CLOSED | BASE_PTR,
        None => {}
    }
    if bucket.is_some() {
        head |= BUCKET;
    }
    out.extend_from_slice(&head.to_le_bytes());
    if let Some((lo, hi)) = bucket {
        out.extend_from_slice(&lo.to_le_bytes());
        out.extend_from_slice(&hi.to_le_bytes());
    }
    for o in all() {
        out.extend_from_slice(&(o.len() as u32).to_le_bytes());
        out.extend_from_slice(o);
    }
    out
}

/// Whether the list in `bytes` is closed (read from its head word only; `false` if the
/// bytes are too short to tell, which the full decoding then reports).
pub(crate) fn is_closed(bytes: &[u8]) -> bool {
    bytes
        .first_chunk::<4>()
        .is_some_and(|h| u32::from_le_bytes(*h) & CLOSED != 0)
}

/// A list's parts. `None` if the bytes are not a well-formed list (every length is checked
/// against what is left; nothing may follow the last operand; a base needs an operand
/// to hold it).
pub(crate) fn decode(list: &[u8]) -> Option<List<'_>> {
    let mut d = Decoder::new(list);
    let head = d.u32()?;
    let (closed, with_base, with_ptr, in_bucket) = (
        head & CLOSED != 0,
        head & WITH_BASE != 0,
        head & BASE_PTR != 0,
        head & BUCKET != 0,
    );
    if (with_base || with_ptr) && !closed || with_base && with_ptr || in_bucket && with_base {
        return None;
    }
    let bucket = if in_bucket {
        let (lo, hi) = (d.u64()?, d.u64()?);
        if lo > hi {
            return None;
        }
        Some((lo, hi))
    } else {
        None
    };
    let count = (head & COUNT_MASK) as usize;
    // Each operand takes at least its 4-byte length: a damaged count cannot size this.
    let mut operands = Vec::with_capacity(count.min(d.remaining() / 4));
    for _ in 0..count {
        let len = d.u32()? as usize;
        operands.push(d.bytes(len)?);
    }
    if d.remaining() != 0 {
        return None;
    }
    let first = if with_base || with_ptr {
        if operands.is_empty() {
            return None;
        }
        Some(operands.remove(0))
    } else {
        None
    };
    if with_ptr && first.is_some_and(|p| p.len() != BASE_PTR_BYTES) {
        return None;
    }
    let (base, base_ptr) = if with_ptr {
        (None, first)
    } else {
        (first, None)
    };
    if bucket.is_some() && !operands.is_empty() {
        return None;
    }
    Some(List {
        closed,
        base,
        base_ptr,
        operands,
        bucket,
    })
}

/// A list with its operands in hand: a bucket list here means a path that should have
/// read its bucket did not, and folding it would silently drop its deltas.
fn decoded<'a>(list: &'a [u8], key: &[u8]) -> Result<List<'a>> {
    let l = decode(list).ok_or_else(|| {
        Error::Internal(format!(
            "the operand list of key {} is malformed ({} bytes)",
            show_key(key),
            list.len()
        ))
    })?;
    if l.bucket.is_some() {
        return Err(Error::Internal(format!(
            "the bucket list of key {} was used without reading its delta bucket",
            show_key(key)
        )));
    }
    Ok(l)
}

/// The LSN range of a bucket list (`None` for any other list, or bytes that are not a
/// list).
pub(crate) fn bucket_range(list: &[u8]) -> Option<(u64, u64)> {
    let head = u32::from_le_bytes(*list.first_chunk::<4>()?);
    if head & BUCKET == 0 {
        return None;
    }
    decode(list).and_then(|l| l.bucket)
}

/// A bucket list for the deltas of LSNs `[lo, hi]`, open, or closed over the encoded
/// large-log pointer `ptr` of their base, or closed over nothing (`closed` without `ptr`:
/// the deltas apply to no value, older versions do not matter).
pub(crate) fn bucket_list(closed: bool, ptr: Option<&[u8]>, lo: u64, hi: u64) -> Vec<u8> {
    encode_with(
        closed || ptr.is_some(),
        ptr.map(Base::Ptr),
        &[],
        Some((lo, hi)),
    )
}

/// The inline list a bucket list `list` stands for, given the operand lists of its
/// records (each an open list, oldest record first): their operands in order, closed
/// like `list` (over its base pointer, if any).
pub(crate) fn inline_bucket_list<'a>(
    key: &[u8],
    list: &[u8],
    records: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<u8>> {
    let Some(l) = decode(list).filter(|l| l.bucket.is_some()) else {
        return Err(Error::Internal(format!(
            "the operand list of key {} is not a bucket list",
            show_key(key)
        )));
    };
    let mut operands: Vec<&[u8]> = Vec::new();
    for r in records {
        operands.extend(operands_of(key, r)?);
    }
    Ok(encode(l.closed, l.base_ptr.map(Base::Ptr), &operands))
}

/// An open list of `operands` (oldest first): what a flush writes into a bucket record.
pub(crate) fn open_list(operands: &[&[u8]]) -> Vec<u8> {
    encode(false, None, operands)
}

/// The operands of an open inline list (a bucket record's), checked.
pub(crate) fn operands_of<'a>(key: &[u8], list: &'a [u8]) -> Result<Vec<&'a [u8]>> {
    let l = decoded(list, key)?;
    if l.closed {
        return Err(Error::Internal(format!(
            "a closed operand list of key {} where open deltas were expected",
            show_key(key)
        )));
    }
    Ok(l.operands)
}

/// The operand lists met for one key, newest first, made into one list once (in time
/// linear in their bytes, however many there are).
#[derive(Debug, Default)]
pub(crate) struct Stack {
    lists: Vec<Vec<u8>>,
}

impl Stack {
    /// Adds a list older than every list added before.
    pub(crate) fn push_older(&mut self, list: Vec<u8>) {
        self.lists.push(list);
    }

    /// Whether no list was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// Lists added (one per delta in a memtable, one per run).
    pub(crate) fn len(&self) -> usize {
        self.lists.len()
    }

    /// Replaces every list by `f(list)` (a bucket list by the inline list it stands for).
    pub(crate) fn resolve_each(
        &mut self,
        mut f: impl FnMut(Vec<u8>) -> Result<Vec<u8>>,
    ) -> Result<()> {
        for list in &mut self.lists {
            *list = f(std::mem::take(list))?;
        }
        Ok(())
    }

    /// Whether the oldest list added is closed: no older version of the key matters.
    pub(crate) fn is_closed(&self) -> bool {
        self.lists.last().is_some_and(|l| is_closed(l))
    }

    /// One list of every operand, oldest first (closed, with its base, if the oldest list
    /// added is). Every list is checked; a closed list may only be the oldest.
    pub(crate) fn into_list(mut self, key: &[u8]) -> Result<Vec<u8>> {
        if self.lists.len() == 1 {
            let list = self.lists.pop().unwrap_or_default();
            decoded(&list, key)?;
            return Ok(list);
        }
        let mut closed = false;
        let mut base = None;
        let mut base_ptr = None;
        let mut operands = Vec::new();
        let last = self.lists.len().saturating_sub(1);
        for (i, list) in self.lists.iter().enumerate().rev() {
            let l = decoded(list, key)?;
            if l.closed && i != last {
                return Err(Error::Internal(format!(
                    "a closed operand list of key {} above older versions",
                    show_key(key)
                )));
            }
            closed |= l.closed;
            base = base.or(l.base);
            base_ptr = base_ptr.or(l.base_ptr);
            operands.extend(l.operands);
        }
        let bytes: usize = self.lists.iter().map(Vec::len).sum();
        if bytes > MAX_LIST_BYTES {
            return Err(Error::InvalidArgument(format!(
                "the unfolded deltas of key {} take {bytes} bytes, over {MAX_LIST_BYTES}: the \
                 merge operator has no partial merge and their base was not met",
                show_key(key)
            )));
        }
        let base = base.map(Base::Bytes).or(base_ptr.map(Base::Ptr));
        Ok(encode(closed, base, &operands))
    }
}

/// The bytes of a decoded list (its encoding is canonical: `decode` then this gives the
/// bytes back).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn reencode(l: &List<'_>) -> Vec<u8> {
    let base = l.base.map(Base::Bytes).or(l.base_ptr.map(Base::Ptr));
    encode_with(l.closed, base, &l.operands, l.bucket)
}

/// The encoded base pointer of the list in `bytes`, if it is closed over one.
pub(crate) fn base_ptr(bytes: &[u8]) -> Option<&[u8]> {
    decode(bytes).and_then(|l| l.base_ptr)
}

/// The value after the list's deltas are applied to `base` (for a closed list that carries
/// its base's bytes, to those: `base` is ignored; for one closed over a base pointer, the
/// caller passes the value read there). `Error::MergeFailed` if the operator refuses, or
/// if the value would be over `MAX_VALUE_SIZE`.
pub(crate) fn fold_full(
    op: &dyn MergeOperator,
    key: &[u8],
    base: Option<&[u8]>,
    list: &[u8],
) -> Result<Vec<u8>> {
    let l = decoded(list, key)?;
    let base = if l.closed && l.base_ptr.is_none() {
        l.base
    } else {
        base
    };
    let value = op
        .full_merge(key, base, &l.operands)
        .map_err(|e| merge_failed(op, key, e))?;
    if value.len() > MAX_FOLDED_VALUE {
        return Err(merge_failed(
            op,
            key,
            MergeError(format!(
                "the folded value is {} bytes, over the maximum value size {}",
                value.len(),
                MAX_FOLDED_VALUE
            )),
        ));
    }
    Ok(value)
}

/// A closed list of `list`'s deltas over `base`: what a flush or compaction keeps when
/// the operator refuses to fold them (that key's reads then report the refusal).
pub(crate) fn close(key: &[u8], base: Option<&[u8]>, list: &[u8]) -> Result<Vec<u8>> {
    let l = decoded(list, key)?;
    let base = if l.closed && l.base_ptr.is_none() {
        l.base
    } else {
        base
    };
    Ok(encode(true, base.map(Base::Bytes), &l.operands))
}

/// A closed list of `list`'s deltas over the large-log value at `ptr` (encoded): what a
/// flush or compaction keeps for deltas whose base is in the large log, which it does not
/// read (KDSep's delta separation: the large value stays where it is; a read, a GC
/// relocation or a fold-back folds them).
pub(crate) fn close_over_ptr(key: &[u8], ptr: &[u8], list: &[u8]) -> Result<Vec<u8>> {
    let l = decoded(list, key)?;
    if l.closed && l.base_ptr != Some(ptr) {
        return Err(Error::Internal(format!(
            "deltas of key {} closed over another base met a base pointer",
            show_key(key)
        )));
    }
    Ok(encode(true, Some(Base::Ptr(ptr)), &l.operands))
}

/// The list with its operands combined into one where the operator can (else unchanged).
pub(crate) fn fold_partial(op: &dyn MergeOperator, key: &[u8], list: Vec<u8>) -> Result<Vec<u8>> {
    let l = decoded(&list, key)?;
    if l.operands.len() < 2 {
        return Ok(list);
    }
    let base = l.base.map(Base::Bytes).or(l.base_ptr.map(Base::Ptr));
    Ok(match op.partial_merge(key, &l.operands) {
        Some(one) => encode(l.closed, base, &[&one]),
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

    fn n8(x: u64) -> Vec<u8> {
        x.to_le_bytes().to_vec()
    }

    fn open(operands: &[&[u8]]) -> Vec<u8> {
        encode(false, None, operands)
    }

    fn stack_older(newer: &[u8], older: &[u8], key: &[u8]) -> Result<Vec<u8>> {
        let mut s = Stack::default();
        s.push_older(newer.to_vec());
        s.push_older(older.to_vec());
        s.into_list(key)
    }

    #[test]
    fn lists_round_trip_and_stack_oldest_first() {
        let a = single(b"one");
        assert_eq!(decode(&a).unwrap().operands, vec![&b"one"[..]]);
        let b = stack_older(&single(b"three"), &open(&[b"one", b""]), b"k").unwrap();
        assert_eq!(
            decode(&b).unwrap().operands,
            vec![&b"one"[..], b"", b"three"]
        );
        assert!(decode(&open(&[])).unwrap().operands.is_empty());
        // A closed list keeps its base below the newer operands.
        let c = close(b"k", Some(b"base"), &single(b"x")).unwrap();
        assert!(is_closed(&c) && !is_closed(&a));
        let d = stack_older(&single(b"y"), &c, b"k").unwrap();
        let l = decode(&d).unwrap();
        assert!(l.closed);
        assert_eq!(l.base, Some(&b"base"[..]));
        assert_eq!(l.operands, vec![&b"x"[..], b"y"]);
        assert_eq!(
            fold_full(&Append, b"k", Some(b"ignored"), &d).unwrap(),
            b"basexy"
        );
        // Closed over a base pointer: the caller reads the base and passes it.
        let p = [7u8; BASE_PTR_BYTES];
        let e = close_over_ptr(b"k", &p, &single(b"x")).unwrap();
        assert_eq!(base_ptr(&e), Some(&p[..]));
        let f = fold_partial(&Append, b"k", stack_older(&single(b"y"), &e, b"k").unwrap()).unwrap();
        assert_eq!(base_ptr(&f), Some(&p[..]));
        assert_eq!(decode(&f).unwrap().operands, vec![&b"xy"[..]]);
        assert_eq!(
            fold_full(&Append, b"k", Some(b"big"), &f).unwrap(),
            b"bigxy"
        );
        assert!(close_over_ptr(b"k", &[8u8; BASE_PTR_BYTES], &f).is_err());
        assert!(close_over_ptr(b"k", &p, &f).is_ok());
        // A closed list above an older one is a broken invariant, not a value.
        assert!(stack_older(&c, &single(b"z"), b"k").is_err());
        // Many lists stack in one pass, oldest first.
        let mut s = Stack::default();
        for i in (0..2000u32).rev() {
            s.push_older(single(&i.to_le_bytes()));
        }
        let l = s.into_list(b"k").unwrap();
        let first = decode(&l).unwrap().operands;
        assert_eq!(first.len(), 2000);
        assert_eq!(first[0], 0u32.to_le_bytes());
        assert_eq!(first[1999], 1999u32.to_le_bytes());
    }

    #[test]
    fn every_list_kind_encodes_canonically() {
        let p = [3u8; BASE_PTR_BYTES];
        for list in [
            single(b"x"),
            open(&[]),
            close(b"k", Some(b"base"), &open(&[b"a", b"b"])).unwrap(),
            close(b"k", None, &single(b"a")).unwrap(),
            close_over_ptr(b"k", &p, &single(b"a")).unwrap(),
        ] {
            assert_eq!(reencode(&decode(&list).unwrap()), list);
        }
    }

    #[test]
    fn an_unfoldable_value_is_refused_past_the_maximum_size() {
        let big = vec![0u8; MAX_FOLDED_VALUE];
        let e = fold_full(&Append, b"k", Some(&big), &single(b"x")).unwrap_err();
        assert!(matches!(e, Error::MergeFailed { .. }), "{e:?}");
    }

    #[test]
    fn damaged_lists_are_refused_never_panic() {
        let good = open(&[b"abc", b"de"]);
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_none(), "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_none());
        // A count far beyond what the bytes hold.
        let mut huge = good.clone();
        huge[..4].copy_from_slice(&COUNT_MASK.to_le_bytes());
        assert!(decode(&huge).is_none());
        // A base flag without the closed flag, or without an operand to hold the base.
        let mut odd = good.clone();
        odd[..4].copy_from_slice(&(WITH_BASE | 2).to_le_bytes());
        assert!(decode(&odd).is_none());
        assert!(decode(&(CLOSED | WITH_BASE).to_le_bytes()).is_none());
        // A pointer flag without the closed flag, with the base flag, or of the wrong size.
        let mut one = (BASE_PTR | 1).to_le_bytes().to_vec();
        one.extend_from_slice(&(BASE_PTR_BYTES as u32).to_le_bytes());
        one.extend_from_slice(&[0; BASE_PTR_BYTES]);
        assert!(decode(&one).is_none());
        one[..4].copy_from_slice(&(CLOSED | BASE_PTR | WITH_BASE | 1).to_le_bytes());
        assert!(decode(&one).is_none());
        one[..4].copy_from_slice(&(CLOSED | BASE_PTR | 1).to_le_bytes());
        assert!(decode(&one).is_some());
        one.push(0);
        one[4..8].copy_from_slice(&(BASE_PTR_BYTES as u32 + 1).to_le_bytes());
        assert!(decode(&one).is_none());
        assert!(decode(&[]).is_none());
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
            let whole = fold_full(op, b"k", base.as_deref(), &open(&refs)).unwrap();
            // Split anywhere: the first part folded partially, then everything fully.
            for split in 0..=refs.len() {
                let head = fold_partial(op, b"k", open(&refs[..split])).unwrap();
                let list = stack_older(&open(&refs[split..]), &head, b"k").unwrap();
                let again = fold_full(op, b"k", base.as_deref(), &list).unwrap();
                assert_eq!(again, whole, "{} split at {split}", op.name());
            }
        }
        assert_eq!(
            fold_full(&CounterAdd, b"k", Some(&n(1)), &open(&[&n(2), &n(3)])).unwrap(),
            n(6)
        );
        assert_eq!(
            fold_full(&Append, b"k", Some(b"a"), &open(&[b"b", b"c"])).unwrap(),
            b"abc"
        );
        assert_eq!(
            fold_full(&Max, b"k", None, &open(&[b"a", b"c", b"b"])).unwrap(),
            b"c"
        );
    }

    #[test]
    fn an_operator_refusal_names_operator_key_and_reason() {
        // A base that is not a counter is replaced, never an error.
        assert_eq!(
            fold_full(&CounterAdd, b"count", Some(b"abc"), &single(&n8(2))).unwrap(),
            n8(2)
        );
        // A delta that is not one (written before `check_operand` existed, say) is refused.
        let e = fold_full(&CounterAdd, b"count", None, &single(b"abc")).unwrap_err();
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

    #[test]
    fn bucket_lists_round_trip() {
        let p = [5u8; BASE_PTR_BYTES];
        for (closed, ptr, lo, hi) in [
            (false, None, 1, 5),
            (false, None, 0, 0),
            (true, None, 7, 7),
            (true, Some(&p[..]), 3, u64::MAX),
            // A pointer closes the list whatever `closed` says.
            (false, Some(&p[..]), 9, 12),
        ] {
            let list = bucket_list(closed, ptr, lo, hi);
            let l = decode(&list).unwrap();
            assert_eq!(l.bucket, Some((lo, hi)));
            assert!(l.operands.is_empty());
            assert_eq!(l.closed, closed || ptr.is_some());
            assert_eq!(is_closed(&list), closed || ptr.is_some());
            assert_eq!(l.base_ptr, ptr);
            assert_eq!(base_ptr(&list), ptr);
            assert_eq!(l.base, None);
            assert_eq!(reencode(&l), list);
            assert_eq!(bucket_range(&list), Some((lo, hi)));
            // The head word, the range, then the pointer as the only operand.
            assert_eq!(
                list.len(),
                4 + 16 + ptr.map_or(0, |p| 4 + p.len()),
                "{list:?}"
            );
        }
    }

    #[test]
    fn bucket_range_is_only_for_bucket_lists() {
        let p = [5u8; BASE_PTR_BYTES];
        for list in [
            single(b"x"),
            open(&[]),
            open(&[b"a", b"b"]),
            close(b"k", Some(b"base"), &single(b"a")).unwrap(),
            close(b"k", None, &single(b"a")).unwrap(),
            close_over_ptr(b"k", &p, &single(b"a")).unwrap(),
        ] {
            assert!(decode(&list).unwrap().bucket.is_none());
            assert_eq!(bucket_range(&list), None, "{list:?}");
        }
        let good = bucket_list(false, None, 1, 2);
        // The bucket bit with the range cut short, or bytes past it.
        for cut in 0..good.len() {
            assert_eq!(bucket_range(&good[..cut]), None, "cut at {cut}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(bucket_range(&trailing), None);
        for garbage in [&[][..], &[0xff][..], &[0xff; 3][..], &[0xff; 64][..]] {
            assert_eq!(bucket_range(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn malformed_bucket_lists_are_refused() {
        let range = |lo: u64, hi: u64| [lo.to_le_bytes(), hi.to_le_bytes()].concat();
        let operand = |o: &[u8]| [&(o.len() as u32).to_le_bytes()[..], o].concat();
        let build = |head: u32, lo: u64, hi: u64, ops: &[&[u8]]| {
            let mut out = head.to_le_bytes().to_vec();
            out.extend_from_slice(&range(lo, hi));
            for o in ops {
                out.extend_from_slice(&operand(o));
            }
            out
        };
        let p = [5u8; BASE_PTR_BYTES];
        // The builder lays out what `bucket_list` does.
        assert_eq!(build(BUCKET, 1, 2, &[]), bucket_list(false, None, 1, 2));
        assert_eq!(
            build(BUCKET | CLOSED | BASE_PTR | 1, 1, 2, &[&p]),
            bucket_list(true, Some(&p), 1, 2)
        );
        // With a base value: the same list without the bucket bit and range is fine.
        let mut with_base = (CLOSED | WITH_BASE | 1).to_le_bytes().to_vec();
        with_base.extend_from_slice(&operand(b"base"));
        assert!(decode(&with_base).is_some());
        for bad in [
            build(BUCKET | CLOSED | WITH_BASE | 1, 1, 2, &[b"base"]),
            build(BUCKET | CLOSED | WITH_BASE | 2, 1, 2, &[b"base", b"d"]),
            // Operands besides a base pointer.
            build(BUCKET | 1, 1, 2, &[b"d"]),
            build(BUCKET | CLOSED | 1, 1, 2, &[b"d"]),
            build(BUCKET | 2, 1, 2, &[b"", b""]),
            build(BUCKET | CLOSED | BASE_PTR | 2, 1, 2, &[&p, b"d"]),
            // A pointer flag without a pointer, or one of the wrong size.
            build(BUCKET | CLOSED | BASE_PTR, 1, 2, &[]),
            build(BUCKET | CLOSED | BASE_PTR | 1, 1, 2, &[&p[1..]]),
            // A pointer without the closed flag.
            build(BUCKET | BASE_PTR | 1, 1, 2, &[&p]),
            // A reversed range.
            build(BUCKET, 2, 1, &[]),
            build(BUCKET | CLOSED | BASE_PTR | 1, u64::MAX, 0, &[&p]),
            bucket_list(false, None, 5, 4),
            bucket_list(true, Some(&p), 5, 4),
        ] {
            assert!(decode(&bad).is_none(), "{bad:?}");
            assert_eq!(bucket_range(&bad), None, "{bad:?}");
        }
        // lo == hi is a range of one LSN.
        assert!(decode(&build(BUCKET, 3, 3, &[])).is_some());
    }

    /// Every fold of a bucket list is refused: its deltas are in its bucket, and folding
    /// the list would silently drop them.
    #[test]
    fn folds_refuse_a_bucket_list() {
        let p = [5u8; BASE_PTR_BYTES];
        let internal = |r: Result<Vec<u8>>, what: &str| match r {
            Err(Error::Internal(m)) => assert!(m.contains("bucket"), "{what}: {m}"),
            other => panic!("{what}: expected Error::Internal, got {other:?}"),
        };
        for list in [
            bucket_list(false, None, 1, 5),
            bucket_list(true, None, 1, 5),
            bucket_list(true, Some(&p), 1, 5),
        ] {
            internal(fold_full(&Append, b"k", None, &list), "fold_full");
            internal(fold_full(&Append, b"k", Some(b"base"), &list), "fold_full");
            internal(fold_full(&CounterAdd, b"k", None, &list), "fold_full");
            internal(fold_partial(&Append, b"k", list.clone()), "fold_partial");
            internal(fold_partial(&Max, b"k", list.clone()), "fold_partial");
            let mut one = Stack::default();
            one.push_older(list.clone());
            internal(one.into_list(b"k"), "a stack of one bucket list");
            // Under a newer inline list, or above an older one.
            internal(stack_older(&single(b"new"), &list, b"k"), "oldest");
            if !is_closed(&list) {
                internal(stack_older(&list, &single(b"old"), b"k"), "newest");
            }
            let mut three = Stack::default();
            three.push_older(single(b"c"));
            three.push_older(list.clone());
            three.push_older(open(&[b"a"]));
            if !is_closed(&list) {
                internal(three.into_list(b"k"), "in the middle");
            }
            internal(close(b"k", Some(b"base"), &list), "close");
            internal(close_over_ptr(b"k", &p, &list), "close_over_ptr");
            assert!(matches!(operands_of(b"k", &list), Err(Error::Internal(_))));
        }
        // The same folds of an inline list go through (what the refusals stand against).
        let inline = single(b"x");
        assert_eq!(
            fold_full(&Append, b"k", Some(b"b"), &inline).unwrap(),
            b"bx"
        );
        assert!(fold_partial(&Append, b"k", inline.clone()).is_ok());
        let mut one = Stack::default();
        one.push_older(inline.clone());
        assert_eq!(one.into_list(b"k").unwrap(), inline);
    }

    #[test]
    fn a_bucket_list_is_made_inline_from_its_records() {
        let p = [5u8; BASE_PTR_BYTES];
        let records = [open(&[b"a", b"b"]), single(b""), open(&[b"c"])];
        let refs = || records.iter().map(Vec::as_slice);
        assert_eq!(
            inline_bucket_list(b"k", &bucket_list(false, None, 1, 9), refs()).unwrap(),
            open(&[b"a", b"b", b"", b"c"])
        );
        assert_eq!(
            inline_bucket_list(b"k", &bucket_list(true, Some(&p), 1, 9), refs()).unwrap(),
            close_over_ptr(b"k", &p, &open(&[b"a", b"b", b"", b"c"])).unwrap()
        );
        let closed = inline_bucket_list(b"k", &bucket_list(true, None, 1, 9), refs()).unwrap();
        let l = decode(&closed).unwrap();
        assert!(l.closed && l.base.is_none() && l.base_ptr.is_none());
        assert_eq!(l.operands.len(), 4);
        // Only a bucket list is made inline, and only from well-formed records that are
        // not bucket lists themselves.
        assert!(inline_bucket_list(b"k", &single(b"x"), refs()).is_err());
        let nested = bucket_list(false, None, 1, 2);
        assert!(inline_bucket_list(
            b"k",
            &bucket_list(false, None, 1, 9),
            [nested.as_slice()].into_iter()
        )
        .is_err());
        assert!(inline_bucket_list(
            b"k",
            &bucket_list(false, None, 1, 9),
            [&[1u8, 0, 0][..]].into_iter()
        )
        .is_err());
    }
}
