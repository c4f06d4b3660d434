//! `WriteBatch`: an ordered group of puts, deletes, merges and range deletions applied
//! atomically.
//!
//! The batch keeps its operations already encoded in the small-log payload format
//! (FORMAT.md, "Batch payload"), so a commit copies it into the log without re-encoding.

use crate::error::{Error, Result};
use crate::format::Decoder;
use crate::log::ptr::LogPtr;
use crate::options::{check_key, check_value, MAX_KEY_SIZE};

pub(crate) const OP_PUT: u8 = 1;
pub(crate) const OP_DELETE: u8 = 2;
/// Only in the small log: a large put whose value went to the large log (key + pointer).
pub(crate) const OP_PUT_LARGE: u8 = 3;
/// A delta for the merge operator (key + operand; same layout as a put).
pub(crate) const OP_MERGE: u8 = 4;
/// A range deletion (start + end, the put layout; an end length of [`NO_END`] and no end
/// bytes: to the end of the key space).
pub(crate) const OP_DELETE_RANGE: u8 = 5;
/// The end length of a range deletion that runs to the end of the key space.
pub(crate) const NO_END: u32 = u32::MAX;
/// Switches the keyspace of the operations after it (`op u8, keyspace u32`); not an
/// operation itself (no LSN, not in the record's count). A payload starts in keyspace 0,
/// the default one.
pub(crate) const OP_KEYSPACE: u8 = 6;

/// Largest encoded batch accepted (keeps a log record's length in 32 bits with room).
pub const MAX_BATCH_BYTES: usize = 1 << 30;

/// A group of writes applied atomically: after a crash either all or none are visible.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
    count: u32,
    /// Merge operations held (checked against the operator before the commit).
    merges: u32,
    /// First argument error, reported when the batch is written (builder methods are
    /// infallible so they chain).
    invalid: Option<String>,
    /// The keyspace of the last operation added: `None` until an operation names one (the
    /// batch's operations then go to the keyspace it is written to), `Some(id)` once one
    /// did (every later operation is encoded with its keyspace).
    keyspace: Option<u32>,
    /// The database the named keyspaces belong to (keyspace ids mean nothing elsewhere).
    db: Option<usize>,
}

/// One decoded operation of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchOp<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
    /// Decoded from the small log only: the value is in the large log.
    PutLarge(&'a [u8], LogPtr),
    /// A delta (key, operand) for the merge operator.
    Merge(&'a [u8], &'a [u8]),
    /// Deletes every key in `start..end` (`None`: to the end of the key space) written
    /// before it.
    DeleteRange(&'a [u8], Option<&'a [u8]>),
    /// The operations after it belong to this keyspace (not an operation: no LSN).
    Keyspace(u32),
}

/// Encodes a large put's log record for the small log (`OP_PUT_LARGE`).
pub(crate) fn encode_put_large(out: &mut Vec<u8>, key: &[u8], ptr: LogPtr) {
    out.push(OP_PUT_LARGE);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    ptr.encode_into(out);
}

/// Re-encodes a plain op (put or delete) in the batch payload format.
pub(crate) fn encode_op(out: &mut Vec<u8>, op: BatchOp<'_>) {
    match op {
        BatchOp::Put(k, v) | BatchOp::Merge(k, v) => {
            out.push(if matches!(op, BatchOp::Merge(..)) {
                OP_MERGE
            } else {
                OP_PUT
            });
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(v);
        }
        BatchOp::Delete(k) => {
            out.push(OP_DELETE);
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
        }
        BatchOp::PutLarge(k, p) => encode_put_large(out, k, p),
        BatchOp::DeleteRange(start, end) => encode_delete_range(out, start, end),
        BatchOp::Keyspace(id) => encode_keyspace(out, id),
    }
}

/// Encodes a keyspace switch (`OP_KEYSPACE`).
pub(crate) fn encode_keyspace(out: &mut Vec<u8>, id: u32) {
    out.push(OP_KEYSPACE);
    out.extend_from_slice(&id.to_le_bytes());
}

fn encode_delete_range(out: &mut Vec<u8>, start: &[u8], end: Option<&[u8]>) {
    out.push(OP_DELETE_RANGE);
    out.extend_from_slice(&(start.len() as u32).to_le_bytes());
    out.extend_from_slice(&end.map_or(NO_END, |e| e.len() as u32).to_le_bytes());
    out.extend_from_slice(start);
    out.extend_from_slice(end.unwrap_or_default());
}

/// The largest buffer a thread keeps for its next batch ([`WriteBatch::recycle`]): a
/// single put of a value up to about 4 KiB fits (the paper's large values are 1 KiB); a
/// big batch's memory is not pinned.
const KEPT_BATCH_BYTES: usize = 4 << 10;

thread_local! {
    /// The buffer of this thread's last committed batch, for its next one: a `put` writes
    /// a one-operation batch each time, and its allocation and free were ~1.5% of a
    /// load's instructions.
    static SPARE_REP: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl WriteBatch {
    /// An empty batch (in the buffer of this thread's last committed batch, if it kept
    /// one).
    pub fn new() -> Self {
        WriteBatch {
            rep: SPARE_REP
                .try_with(std::cell::Cell::take)
                .unwrap_or_default(),
            ..Self::default()
        }
    }

    #[cfg(test)]
    pub(crate) fn capacity_for_tests(&self) -> usize {
        self.rep.capacity()
    }

    /// Keeps this batch's buffer (if at most [`KEPT_BATCH_BYTES`]) for the thread's next
    /// [`WriteBatch::new`]; called once the batch is committed.
    pub(crate) fn recycle(self) {
        let mut rep = self.rep;
        // An empty buffer would only free the spare that is there.
        if rep.capacity() > 0 && rep.capacity() <= KEPT_BATCH_BYTES {
            rep.clear();
            let _ = SPARE_REP.try_with(|s| s.set(rep));
        }
    }

    fn note(&mut self, r: Result<()>) {
        if let (Err(e), None) = (r, &self.invalid) {
            self.invalid = Some(e.to_string());
        }
    }

    /// Adds a put of `key` -> `value`.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        self.push_pair(OP_PUT, key.as_ref(), value.as_ref())
    }

    /// Adds a put of `key` -> `value` in keyspace `ks` (see [`crate::Keyspace`]): one
    /// batch may write several keyspaces of a database, atomically.
    pub fn put_in(
        &mut self,
        ks: &crate::Keyspace,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.switch_to(ks).put(key, value)
    }

    /// Adds a delete of `key` in keyspace `ks`.
    pub fn delete_in(&mut self, ks: &crate::Keyspace, key: impl AsRef<[u8]>) -> &mut Self {
        self.switch_to(ks).delete(key)
    }

    /// Adds a delta for `key` in keyspace `ks` (see [`WriteBatch::merge`]).
    pub fn merge_in(
        &mut self,
        ks: &crate::Keyspace,
        key: impl AsRef<[u8]>,
        operand: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.switch_to(ks).merge(key, operand)
    }

    /// Adds a range deletion in keyspace `ks` (see [`WriteBatch::delete_range`]).
    pub fn delete_range_in(
        &mut self,
        ks: &crate::Keyspace,
        start: impl AsRef<[u8]>,
        end: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.switch_to(ks).delete_range(start, end)
    }

    /// Operations added from now on go to keyspace `id` (until the next `*_in` call names
    /// another); those added before any `*_in` call go to the keyspace the batch is
    /// written to.
    fn switch_to(&mut self, ks: &crate::Keyspace) -> &mut Self {
        let id = ks.id();
        let db = ks.db_token();
        if self.db.is_some_and(|d| d != db) {
            self.note(Err(Error::InvalidArgument(
                "a batch names keyspaces of two different databases".into(),
            )));
        }
        self.db = Some(db);
        if self.keyspace != Some(id) {
            if self.keyspace.is_none() && self.count > 0 {
                // Operations so far were meant for the keyspace the batch is written to:
                // they keep that meaning only if no switch precedes them, so the switch
                // cannot be encoded after them. Refused rather than guessed.
                self.note(Err(Error::InvalidArgument(
                    "a batch mixes operations without a keyspace (put, delete, ...) before \
                     operations with one (put_in, delete_in, ...): name the keyspace of \
                     every operation, or of none"
                        .into(),
                )));
            }
            encode_keyspace(&mut self.rep, id);
            self.keyspace = Some(id);
        }
        self
    }

    /// The database whose keyspaces the batch names, if it names any.
    pub(crate) fn db_token(&self) -> Option<usize> {
        self.db
    }

    /// Whether the batch names its keyspaces (`*_in` methods) rather than going to the
    /// keyspace it is written to.
    pub(crate) fn names_keyspaces(&self) -> bool {
        self.keyspace.is_some()
    }

    /// Appends an operation of the put layout (`OP_PUT` or `OP_MERGE`).
    fn push_pair(&mut self, op: u8, key: &[u8], value: &[u8]) -> &mut Self {
        self.note(check_key(key).and_then(|()| check_value(value)));
        // One allocation for a one-put batch instead of a doubling series of them.
        self.rep.reserve(1 + 4 + 4 + key.len() + value.len());
        self.rep.push(op);
        self.rep
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.rep
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.rep.extend_from_slice(key);
        self.rep.extend_from_slice(value);
        self.count += 1;
        self
    }

    /// Adds a delta for `key`: the merge operator (`Options::merge_operator`) folds
    /// `operand` into the key's value (reads see the folded value). Refused when the batch
    /// is written if the database has no merge operator or the operator refuses `operand`.
    pub fn merge(&mut self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> &mut Self {
        self.merges += 1;
        self.push_pair(OP_MERGE, key.as_ref(), operand.as_ref())
    }

    /// Whether the batch holds a merge operation.
    pub(crate) fn has_merges(&self) -> bool {
        self.merges > 0
    }

    /// Adds a deletion of every key in `start..end` (`end` excluded) that exists when the
    /// batch is written: one operation whatever the number of keys (see
    /// [`crate::Db::delete_range`]). `start > end` is refused when the batch is written;
    /// `start == end` deletes nothing.
    pub fn delete_range(&mut self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> &mut Self {
        self.push_range(start.as_ref(), Some(end.as_ref()))
    }

    /// Adds a deletion of every key that starts with `prefix` (every key, for an empty
    /// prefix): one operation whatever the number of keys.
    pub fn delete_prefix(&mut self, prefix: impl AsRef<[u8]>) -> &mut Self {
        let prefix = prefix.as_ref();
        let end = crate::range_delete::prefix_end(prefix);
        self.push_range(prefix, end.as_deref())
    }

    fn push_range(&mut self, start: &[u8], end: Option<&[u8]>) -> &mut Self {
        let check = |what: &str, k: &[u8]| {
            if k.len() > MAX_KEY_SIZE {
                Err(Error::InvalidArgument(format!(
                    "range deletion {what} is {} bytes, the maximum key size is {MAX_KEY_SIZE}",
                    k.len()
                )))
            } else {
                Ok(())
            }
        };
        let r = check("start", start)
            .and_then(|()| end.map_or(Ok(()), |e| check("end", e)))
            .and_then(|()| match end {
                Some(e) if e < start => Err(Error::InvalidArgument(format!(
                    "range deletion starts after its end ({} > {})",
                    start.escape_ascii(),
                    e.escape_ascii()
                ))),
                _ => Ok(()),
            });
        self.note(r);
        encode_delete_range(&mut self.rep, start, end);
        self.count += 1;
        self
    }

    /// Adds a delete of `key`.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        let key = key.as_ref();
        self.note(check_key(key));
        self.rep.reserve(1 + 4 + key.len());
        self.rep.push(OP_DELETE);
        self.rep
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.rep.extend_from_slice(key);
        self.count += 1;
        self
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Bytes of keys and values (the "application bytes" of the batch).
    pub(crate) fn payload(&self) -> &[u8] {
        &self.rep
    }

    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Rejects a batch that had a bad argument or is too large.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(msg) = &self.invalid {
            return Err(Error::InvalidArgument(format!("write batch: {msg}")));
        }
        if self.rep.len() > MAX_BATCH_BYTES {
            return Err(Error::InvalidArgument(format!(
                "write batch is {} bytes, the maximum is {MAX_BATCH_BYTES}",
                self.rep.len()
            )));
        }
        Ok(())
    }
}

/// Smallest encoded operation: a delete of an empty key (`op u8, key_len u32`).
const MIN_OP_BYTES: usize = 5;

/// Operations to reserve room for: `count` as declared, but never more than `payload_len`
/// bytes can hold (a damaged count must not size an allocation).
fn ops_capacity(payload_len: usize, count: u32) -> usize {
    (count as usize).min(payload_len / MIN_OP_BYTES)
}

/// A batch's decoded operations: up to two held inline (a put, or a switch and a put),
/// so the commit of a one-put batch allocates no list.
pub(crate) type Ops<'a> = smallvec::SmallVec<[BatchOp<'a>; 2]>;

/// Decodes a batch payload (from memory or from the log): `count` operations, with the
/// keyspace switches among them (which do not count). `None` if malformed.
pub(crate) fn decode_ops(payload: &[u8], count: u32) -> Option<Ops<'_>> {
    let mut d = Decoder::new(payload);
    let mut ops = Ops::with_capacity(ops_capacity(payload.len(), count));
    let mut decoded = 0u32;
    let mut after_switch = false;
    while decoded < count {
        decoded += 1;
        let op = d.u8()?;
        if op == OP_KEYSPACE {
            // A switch, not an operation: it must be followed by one (never by another
            // switch: one payload has one encoding).
            if after_switch {
                return None;
            }
            after_switch = true;
            decoded -= 1;
            ops.push(BatchOp::Keyspace(d.u32()?));
            continue;
        }
        after_switch = false;
        match op {
            op @ (OP_PUT | OP_MERGE) => {
                let klen = d.u32()? as usize;
                let vlen = d.u32()? as usize;
                let key = d.bytes(klen)?;
                let value = d.bytes(vlen)?;
                ops.push(if op == OP_MERGE {
                    BatchOp::Merge(key, value)
                } else {
                    BatchOp::Put(key, value)
                });
            }
            OP_DELETE => {
                let klen = d.u32()? as usize;
                ops.push(BatchOp::Delete(d.bytes(klen)?));
            }
            OP_PUT_LARGE => {
                let klen = d.u32()? as usize;
                let key = d.bytes(klen)?;
                ops.push(BatchOp::PutLarge(key, LogPtr::decode(&mut d)?));
            }
            OP_DELETE_RANGE => {
                let slen = d.u32()? as usize;
                let elen = d.u32()?;
                let start = d.bytes(slen)?;
                let end = match elen {
                    NO_END => None,
                    n => Some(d.bytes(n as usize)?),
                };
                ops.push(BatchOp::DeleteRange(start, end));
            }
            _ => return None,
        }
    }
    (d.remaining() == 0).then_some(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_buffer_serves_the_threads_next_batch_empty() {
        let mut b = WriteBatch::new();
        b.put("key", vec![9u8; 1000]);
        let cap = b.rep.capacity();
        b.recycle();
        let mut next = WriteBatch::new();
        assert!(next.is_empty() && next.payload().is_empty());
        assert_eq!(next.rep.capacity(), cap, "the buffer was reused");
        next.put("k2", "v2");
        let ops = decode_ops(next.payload(), next.count()).unwrap();
        assert_eq!(ops.as_slice(), [BatchOp::Put(b"k2", b"v2")]);
        // Taken once: the batch after gets a fresh buffer.
        assert_eq!(WriteBatch::new().rep.capacity(), 0);
        // A big batch's buffer is not kept.
        let mut big = WriteBatch::new();
        big.put("k", vec![1u8; KEPT_BATCH_BYTES + 1]);
        big.recycle();
        assert_eq!(WriteBatch::new().rep.capacity(), 0);
    }

    #[test]
    fn round_trip() {
        let mut b = WriteBatch::new();
        b.put("a", "1")
            .delete("b")
            .put("c", vec![7u8; 300])
            .merge("d", "+1");
        assert_eq!(b.len(), 4);
        assert!(b.has_merges());
        let ops = decode_ops(b.payload(), b.count()).unwrap();
        assert_eq!(ops[3], BatchOp::Merge(b"d", b"+1"));
        let mut again = Vec::new();
        for op in &ops {
            encode_op(&mut again, *op);
        }
        assert_eq!(again, b.payload());
        assert_eq!(ops[0], BatchOp::Put(b"a", b"1"));
        assert_eq!(ops[1], BatchOp::Delete(b"b"));
        assert!(matches!(ops[2], BatchOp::Put(b"c", v) if v.len() == 300));
    }

    #[test]
    fn large_pointer_ops_round_trip() {
        let p = LogPtr {
            segment: 9,
            offset: 16,
            len: 1048,
        };
        let mut payload = Vec::new();
        encode_put_large(&mut payload, b"big", p);
        encode_op(&mut payload, BatchOp::Delete(b"gone"));
        let ops = decode_ops(&payload, 2).unwrap();
        assert_eq!(
            ops.as_slice(),
            [BatchOp::PutLarge(b"big", p), BatchOp::Delete(b"gone")]
        );
    }

    #[test]
    fn range_deletions_round_trip_and_bad_ranges_are_refused() {
        let mut b = WriteBatch::new();
        b.delete_range("b", "d")
            .delete_prefix(b"x\xff")
            .delete_prefix("");
        let ops = decode_ops(b.payload(), b.count()).unwrap();
        assert_eq!(
            ops.as_slice(),
            [
                BatchOp::DeleteRange(b"b", Some(b"d")),
                BatchOp::DeleteRange(b"x\xff", Some(b"y")),
                BatchOp::DeleteRange(b"", None),
            ]
        );
        let mut again = Vec::new();
        for op in &ops {
            encode_op(&mut again, *op);
        }
        assert_eq!(again, b.payload());
        assert!(b.validate().is_ok());
        let mut inverted = WriteBatch::new();
        inverted.delete_range("d", "b");
        match inverted.validate() {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("after its end"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        let mut long = WriteBatch::new();
        long.delete_range("a", vec![b'z'; MAX_KEY_SIZE + 1]);
        assert!(matches!(long.validate(), Err(Error::InvalidArgument(_))));
        // An end length that runs past the payload is malformed.
        let mut cut = b.payload().to_vec();
        cut.truncate(cut.len() - 1);
        assert!(decode_ops(&cut, b.count()).is_none());
    }

    #[test]
    fn bad_key_is_reported_at_validate() {
        let mut b = WriteBatch::new();
        b.put("", "x");
        assert!(matches!(b.validate(), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn declared_count_is_capped_by_the_payload() {
        // Found by fuzzing: a 0-byte payload declaring u32::MAX operations reserved room
        // for 65536 of them (2 MiB) before failing.
        assert_eq!(ops_capacity(0, u32::MAX), 0);
        assert_eq!(ops_capacity(12, u32::MAX), 2);
        assert_eq!(ops_capacity(1 << 20, 3), 3);
        assert!(decode_ops(&[], u32::MAX).is_none());
        let mut b = WriteBatch::new();
        b.delete("k").put("a", "b");
        let ops = decode_ops(b.payload(), b.count()).unwrap();
        assert_eq!(ops.len(), 2);
        assert!(decode_ops(b.payload(), u32::MAX).is_none());
    }

    #[test]
    fn malformed_payload_is_rejected() {
        let mut b = WriteBatch::new();
        b.put("key", "value");
        let p = b.payload();
        for cut in 0..p.len() {
            assert!(decode_ops(&p[..cut], 1).is_none());
        }
        assert!(decode_ops(p, 2).is_none());
        let mut bad = p.to_vec();
        bad[0] = 9;
        assert!(decode_ops(&bad, 1).is_none());
    }
}
