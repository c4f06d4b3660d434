//! The value of one version, as the memtable, the levels, the merge and the read path
//! pass it around: bytes in place, an overflow blob of a level file, a pointer into the
//! transient or the large log, or a tombstone.
//!
//! Owns: that one type, low in the module graph, so that the memtable does not depend on
//! the level format.
//! Also [`Value`], the value a read hands the caller: a view of bytes the engine already
//! holds (a cached log record), so returning it copies nothing.
//! Never: reads or decodes anything (the level and log modules do).

use crate::log::ptr::LogPtr;

/// A stored value, owned.
// `pub`, not `pub(crate)`: `hybridkv::fuzzing` re-exports it (the module stays private).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelValue {
    /// The value bytes (in a leaf or the memtable, or loaded from an overflow blob).
    Inline(Vec<u8>),
    /// The value is an overflow blob of the same level file.
    Overflow {
        /// Offset of the blob.
        offset: u64,
        /// Length of the value.
        len: u32,
        /// CRC32C of the value.
        crc: u32,
    },
    /// A medium pair's value in the transient log.
    Medium(LogPtr),
    /// A large pair's value in the large log.
    Large(LogPtr),
    /// The key was deleted.
    Tombstone,
    /// Deltas for the merge operator: an operand list (`crate::delta`), oldest first. The
    /// key's value is these applied to the version below (its *base*), or to nothing.
    Deltas(Vec<u8>),
    /// An operand list that is an overflow blob of the same level file.
    DeltasOverflow {
        /// Offset of the blob.
        offset: u64,
        /// Length of the list.
        len: u32,
        /// CRC32C of the list.
        crc: u32,
    },
}

impl LevelValue {
    /// Makes this value `Inline(bytes)`, copying into the buffer it holds if it is in
    /// place, else into `spare` (a merge source's buffer, reading into the caller's
    /// entry).
    pub(crate) fn set_inline(&mut self, bytes: &[u8], spare: &mut Vec<u8>) {
        if let LevelValue::Inline(v) = self {
            v.clear();
            v.extend_from_slice(bytes);
        } else {
            let mut v = std::mem::take(spare);
            v.clear();
            v.extend_from_slice(bytes);
            *self = LevelValue::Inline(v);
        }
    }

    /// Makes this value `other` (not in place), keeping the buffer it held in `spare`.
    pub(crate) fn set_other(&mut self, other: LevelValue, spare: &mut Vec<u8>) {
        if let LevelValue::Inline(v) = std::mem::replace(self, other) {
            *spare = v;
        }
    }

    /// Whether this version holds deltas (its value needs the versions below it).
    pub(crate) fn is_deltas(&self) -> bool {
        matches!(
            self,
            LevelValue::Deltas(_) | LevelValue::DeltasOverflow { .. }
        )
    }
}

/// A value read from the database ([`Db::get_value`](crate::Db::get_value),
/// [`Snapshot::get_value`](crate::Snapshot::get_value)): a value read from the large or
/// the transient log is a reference-counted view of the record as it was read (and is
/// cached, for records up to 64 KiB), so handing it out copies nothing (it keeps that
/// record's bytes alive, even if the cache evicts it meanwhile); a value stored in place (small, or medium at the merge level) is
/// the copy made out of its leaf. Dereferences to `&[u8]`; [`Value::into_vec`] gives a
/// `Vec`.
#[derive(Clone)]
pub struct Value(Repr);

#[derive(Clone)]
enum Repr {
    /// Copied out of a leaf, or folded from deltas.
    Owned(Vec<u8>),
    /// A view of a cached record.
    Shared(bytes::Bytes),
}

impl Value {
    /// The bytes as a `bytes::Bytes` (no copy).
    pub fn into_bytes(self) -> bytes::Bytes {
        match self.0 {
            Repr::Owned(v) => bytes::Bytes::from(v),
            Repr::Shared(b) => b,
        }
    }

    /// The bytes as a `Vec` (no copy for a value that was copied out of a leaf; one copy
    /// for a view of a cached record).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Owned(v) => v,
            Repr::Shared(b) => Vec::from(b),
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(v) => v,
            Repr::Shared(b) => b,
        }
    }
}

impl Default for Value {
    fn default() -> Self {
        Value(Repr::Owned(Vec::new()))
    }
}

impl std::ops::Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::borrow::Borrow<[u8]> for Value {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&bytes::Bytes::copy_from_slice(self.as_slice()), f)
    }
}

impl From<bytes::Bytes> for Value {
    fn from(b: bytes::Bytes) -> Self {
        Value(Repr::Shared(b))
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value(Repr::Owned(v))
    }
}

impl From<Value> for Vec<u8> {
    fn from(v: Value) -> Self {
        v.into_vec()
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Value {}

impl std::hash::Hash for Value {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Value) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value {
    fn cmp(&self, other: &Value) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl PartialEq<[u8]> for Value {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[u8]> for Value {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_slice() == *other
    }
}

impl PartialEq<Vec<u8>> for Value {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}
