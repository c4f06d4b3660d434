//! Leaf and index node layouts (FORMAT.md, "Level file").
//!
//! Both node kinds share a 16-byte header `[kind u8][version u8][reserved u16][count u32]
//! [data_start u32][crc u32]`, a slot array of 4-byte cells growing from the front and a
//! data area growing from the back (Parallax §3.2). A cell's top three bits hold the entry
//! kind (the pair's category), the low 29 bits its offset inside the node. The CRC32C covers
//! the whole node except the crc field itself.

use crate::format::{crc32c, crc32c_append, put_u32_at, u32_at, Decoder};
use crate::log::ptr::{LogPtr, LOG_PTR_SIZE};

pub(crate) const NODE_HEADER: usize = 16;
pub(crate) const NODE_LEAF: u8 = 1;
pub(crate) const NODE_INDEX: u8 = 2;
pub(crate) const NODE_BLOB: u8 = 3;
pub(crate) const NODE_VERSION: u8 = 1;

/// Entry kinds stored in a slot's top three bits.
pub(crate) const KIND_INLINE: u8 = 0;
pub(crate) const KIND_OVERFLOW: u8 = 1;
/// A medium pair whose value is in the transient log.
pub(crate) const KIND_MEDIUM: u8 = 2;
/// A large pair whose value is in the large log.
pub(crate) const KIND_LARGE: u8 = 3;
pub(crate) const KIND_TOMBSTONE: u8 = 4;
/// Deltas for the merge operator: an operand list in the leaf (laid out as `KIND_INLINE`).
pub(crate) const KIND_DELTAS: u8 = 5;
/// An operand list too big for a leaf, as an overflow blob (laid out as `KIND_OVERFLOW`).
pub(crate) const KIND_DELTAS_OVERFLOW: u8 = 6;

const OFFSET_MASK: u32 = (1 << 29) - 1;

/// Size of the fixed part of each entry kind (before the key / value bytes).
pub(crate) const INLINE_FIXED: usize = 2 + 8 + 4;
pub(crate) const OVERFLOW_FIXED: usize = 2 + 8 + 4 + 8 + 4;
pub(crate) const TOMBSTONE_FIXED: usize = 2 + 8;
pub(crate) const INDEX_FIXED: usize = 2 + 8;
pub(crate) const POINTER_FIXED: usize = 2 + 8 + LOG_PTR_SIZE;

/// A value as stored in a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueRef<'a> {
    /// The value bytes, in the leaf.
    Inline(&'a [u8]),
    /// The value is a blob elsewhere in the same level file.
    Overflow { offset: u64, len: u32, crc: u32 },
    /// A medium pair's value in the transient log.
    Medium(LogPtr),
    /// A large pair's value in the large log.
    Large(LogPtr),
    /// The key was deleted.
    Tombstone,
    /// An operand list (deltas), in the leaf.
    Deltas(&'a [u8]),
    /// An operand list in an overflow blob of the same level file.
    DeltasOverflow { offset: u64, len: u32, crc: u32 },
}

/// One decoded leaf entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeafEntry<'a> {
    pub key: &'a [u8],
    pub lsn: u64,
    pub value: ValueRef<'a>,
}

/// A node being filled (leaf or index), written from both ends.
pub(crate) struct NodeBuf {
    buf: Vec<u8>,
    kind: u8,
    count: u32,
    data_start: usize,
}

impl NodeBuf {
    pub(crate) fn new(size: usize, kind: u8) -> Self {
        NodeBuf {
            buf: vec![0u8; size],
            kind,
            count: 0,
            data_start: size,
        }
    }

    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Whether an entry of `len` data bytes (plus its slot) still fits.
    pub(crate) fn fits(&self, len: usize) -> bool {
        NODE_HEADER + 4 * (self.count as usize + 1) + len <= self.data_start
    }

    /// Bytes an empty node offers for entries and their slots.
    pub(crate) fn capacity(size: usize) -> usize {
        size - NODE_HEADER
    }

    /// Reserves `len` bytes in the data area, adds the slot, and returns the space.
    /// # Preconditions
    /// `self.fits(len)`.
    fn reserve(&mut self, kind: u8, len: usize) -> &mut [u8] {
        debug_assert!(self.fits(len));
        self.data_start -= len;
        let cell = (u32::from(kind) << 29) | (self.data_start as u32 & OFFSET_MASK);
        put_u32_at(&mut self.buf, NODE_HEADER + 4 * self.count as usize, cell);
        self.count += 1;
        let start = self.data_start;
        self.buf.get_mut(start..start + len).unwrap_or_default()
    }

    pub(crate) fn push_inline(&mut self, key: &[u8], lsn: u64, value: &[u8]) {
        self.push_bytes(KIND_INLINE, key, lsn, value);
    }

    /// An entry of `KIND_INLINE`'s layout: `KIND_INLINE` or `KIND_DELTAS`.
    pub(crate) fn push_bytes(&mut self, kind: u8, key: &[u8], lsn: u64, value: &[u8]) {
        let dst = self.reserve(kind, INLINE_FIXED + key.len() + value.len());
        let mut w = Writer(dst, 0);
        w.put(&(key.len() as u16).to_le_bytes());
        w.put(&lsn.to_le_bytes());
        w.put(&(value.len() as u32).to_le_bytes());
        w.put(key);
        w.put(value);
    }

    /// An entry of `KIND_OVERFLOW`'s layout: `KIND_OVERFLOW` or `KIND_DELTAS_OVERFLOW`.
    pub(crate) fn push_overflow(
        &mut self,
        kind: u8,
        key: &[u8],
        lsn: u64,
        len: u32,
        offset: u64,
        crc: u32,
    ) {
        let dst = self.reserve(kind, OVERFLOW_FIXED + key.len());
        let mut w = Writer(dst, 0);
        w.put(&(key.len() as u16).to_le_bytes());
        w.put(&lsn.to_le_bytes());
        w.put(&len.to_le_bytes());
        w.put(&offset.to_le_bytes());
        w.put(&crc.to_le_bytes());
        w.put(key);
    }

    pub(crate) fn push_pointer(&mut self, kind: u8, key: &[u8], lsn: u64, ptr: LogPtr) {
        let dst = self.reserve(kind, POINTER_FIXED + key.len());
        let mut w = Writer(dst, 0);
        w.put(&(key.len() as u16).to_le_bytes());
        w.put(&lsn.to_le_bytes());
        w.put(&ptr.to_bytes());
        w.put(key);
    }

    pub(crate) fn push_tombstone(&mut self, key: &[u8], lsn: u64) {
        let dst = self.reserve(KIND_TOMBSTONE, TOMBSTONE_FIXED + key.len());
        let mut w = Writer(dst, 0);
        w.put(&(key.len() as u16).to_le_bytes());
        w.put(&lsn.to_le_bytes());
        w.put(key);
    }

    pub(crate) fn push_index(&mut self, key: &[u8], child: u64) {
        let dst = self.reserve(KIND_INLINE, INDEX_FIXED + key.len());
        let mut w = Writer(dst, 0);
        w.put(&(key.len() as u16).to_le_bytes());
        w.put(&child.to_le_bytes());
        w.put(key);
    }

    /// Writes the header, zeros the gap between the slots and the data (a reset leaves
    /// the last node's bytes there) and the checksum; returns the finished node bytes.
    pub(crate) fn finish(&mut self) -> &[u8] {
        let slots_end = NODE_HEADER + 4 * self.count as usize;
        if let Some(gap) = self.buf.get_mut(slots_end..self.data_start) {
            gap.fill(0);
        }
        if let Some(h) = self.buf.get_mut(..NODE_HEADER) {
            h.fill(0);
            h[0] = self.kind;
            h[1] = NODE_VERSION;
            h[4..8].copy_from_slice(&self.count.to_le_bytes());
            h[8..12].copy_from_slice(&(self.data_start as u32).to_le_bytes());
        }
        let crc = node_crc(&self.buf);
        put_u32_at(&mut self.buf, 12, crc);
        &self.buf
    }

    /// Empties the node for the next one. The old bytes stay: every entry overwrites all
    /// of its slot and data, the header is written and the gap zeroed in [`Self::finish`].
    pub(crate) fn reset(&mut self) {
        self.count = 0;
        self.data_start = self.buf.len();
    }
}

struct Writer<'a>(&'a mut [u8], usize);
impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        if let Some(dst) = self.0.get_mut(self.1..self.1 + b.len()) {
            dst.copy_from_slice(b);
        }
        self.1 += b.len();
    }
}

/// CRC32C of a node with its crc field (bytes 12..16) left out.
pub(crate) fn node_crc(node: &[u8]) -> u32 {
    let head = node.get(..12).unwrap_or_default();
    let tail = node.get(NODE_HEADER..).unwrap_or_default();
    crc32c_append(crc32c(head), tail)
}

/// A validated, read-only view of a node. Every accessor re-checks offsets, so a view
/// over damaged bytes yields `None`, never a panic.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeView<'a> {
    buf: &'a [u8],
    kind: u8,
    count: usize,
    data_start: usize,
}

impl<'a> NodeView<'a> {
    /// Checks the checksum, then the header and slot-array bounds.
    pub(crate) fn verify(buf: &'a [u8], expected_kind: u8) -> Result<Self, &'static str> {
        if u32_at(buf, 12) != Some(node_crc(buf)) {
            return Err("node checksum mismatch");
        }
        Self::new(buf, expected_kind)
    }

    /// Checks the header and slot-array bounds (for nodes verified when loaded).
    pub(crate) fn new(buf: &'a [u8], expected_kind: u8) -> Result<Self, &'static str> {
        let mut d = Decoder::new(buf);
        let kind = d.u8().ok_or("node shorter than its header")?;
        let version = d.u8().ok_or("node shorter than its header")?;
        let _reserved = d.u16();
        let count = d.u32().ok_or("node shorter than its header")? as usize;
        let data_start = d.u32().ok_or("node shorter than its header")? as usize;
        if kind != expected_kind {
            return Err("unexpected node kind");
        }
        if version != NODE_VERSION {
            return Err("unknown node version");
        }
        let slots_end = count
            .checked_mul(4)
            .and_then(|s| s.checked_add(NODE_HEADER))
            .ok_or("slot count overflows")?;
        if slots_end > data_start || data_start > buf.len() {
            return Err("slot array overlaps data area");
        }
        Ok(NodeView {
            buf,
            kind,
            count,
            data_start,
        })
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    fn slot(&self, i: usize) -> Option<(u8, usize)> {
        if i >= self.count {
            return None;
        }
        let cell = u32_at(self.buf, NODE_HEADER + 4 * i)?;
        let off = (cell & OFFSET_MASK) as usize;
        if off < self.data_start || off >= self.buf.len() {
            return None;
        }
        Some(((cell >> 29) as u8, off))
    }

    /// Key of entry `i` (leaf or index).
    pub(crate) fn key(&self, i: usize) -> Option<&'a [u8]> {
        let (kind, off) = self.slot(i)?;
        let mut d = Decoder::new(self.buf.get(off..)?);
        let klen = d.u16()? as usize;
        let skip = match (self.kind, kind) {
            (NODE_INDEX, _) => 8,
            (_, KIND_INLINE | KIND_DELTAS) => 12,
            (_, KIND_OVERFLOW | KIND_DELTAS_OVERFLOW) => 24,
            (_, KIND_TOMBSTONE) => 8,
            (_, KIND_MEDIUM | KIND_LARGE) => 8 + LOG_PTR_SIZE,
            _ => return None,
        };
        d.bytes(skip)?;
        d.bytes(klen)
    }

    /// Leaf entry `i`.
    pub(crate) fn leaf_entry(&self, i: usize) -> Option<LeafEntry<'a>> {
        let (kind, off) = self.slot(i)?;
        let mut d = Decoder::new(self.buf.get(off..)?);
        let klen = d.u16()? as usize;
        let lsn = d.u64()?;
        match kind {
            KIND_INLINE | KIND_DELTAS => {
                let vlen = d.u32()? as usize;
                let key = d.bytes(klen)?;
                let value = d.bytes(vlen)?;
                Some(LeafEntry {
                    key,
                    lsn,
                    value: if kind == KIND_DELTAS {
                        ValueRef::Deltas(value)
                    } else {
                        ValueRef::Inline(value)
                    },
                })
            }
            KIND_OVERFLOW | KIND_DELTAS_OVERFLOW => {
                let len = d.u32()?;
                let offset = d.u64()?;
                let crc = d.u32()?;
                let key = d.bytes(klen)?;
                Some(LeafEntry {
                    key,
                    lsn,
                    value: if kind == KIND_DELTAS_OVERFLOW {
                        ValueRef::DeltasOverflow { offset, len, crc }
                    } else {
                        ValueRef::Overflow { offset, len, crc }
                    },
                })
            }
            KIND_MEDIUM | KIND_LARGE => {
                let ptr = LogPtr::decode(&mut d)?;
                let key = d.bytes(klen)?;
                let value = if kind == KIND_MEDIUM {
                    ValueRef::Medium(ptr)
                } else {
                    ValueRef::Large(ptr)
                };
                Some(LeafEntry { key, lsn, value })
            }
            KIND_TOMBSTONE => Some(LeafEntry {
                key: d.bytes(klen)?,
                lsn,
                value: ValueRef::Tombstone,
            }),
            _ => None,
        }
    }

    /// Child offset of index entry `i`.
    pub(crate) fn child(&self, i: usize) -> Option<u64> {
        let (_, off) = self.slot(i)?;
        let mut d = Decoder::new(self.buf.get(off..)?);
        d.u16()?;
        d.u64()
    }

    /// First entry whose key is >= `key` (or > `key` when `strict`); `count()` if none.
    /// `None` if a key could not be decoded.
    pub(crate) fn lower_bound(&self, key: &[u8], strict: bool) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let k = self.key(mid)?;
            let before = if strict { k <= key } else { k < key };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    /// Index node: the child whose range holds `key` (the last pivot <= key, else the first).
    pub(crate) fn child_for(&self, key: &[u8]) -> Option<usize> {
        let after = self.lower_bound(key, true)?;
        Some(after.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_node_finishes_byte_for_byte_like_a_fresh_one() {
        let p = LogPtr {
            segment: 9,
            offset: 4096,
            len: 1030,
        };
        let fill = |n: &mut NodeBuf, round: u8| {
            n.push_inline(b"a", 1, &[round; 40]);
            n.push_pointer(KIND_LARGE, b"b", 2, p);
            n.push_tombstone(b"c", 3);
        };
        // The reused node first holds far more (every byte of it ends up non-zero).
        let mut reused = NodeBuf::new(4096, NODE_LEAF);
        let mut i = 0u32;
        while reused.fits(INLINE_FIXED + 8 + 200) {
            reused.push_inline(&i.to_be_bytes(), 5, &[0xAB; 200]);
            i += 1;
        }
        reused.finish();
        reused.reset();
        fill(&mut reused, 7);
        let mut fresh = NodeBuf::new(4096, NODE_LEAF);
        fill(&mut fresh, 7);
        assert_eq!(reused.finish(), fresh.finish());
        let view = NodeView::new(reused.finish(), NODE_LEAF).unwrap();
        assert_eq!(view.leaf_entry(2).unwrap().key, b"c");
    }

    #[test]
    fn leaf_round_trip_and_search() {
        let mut n = NodeBuf::new(8192, NODE_LEAF);
        n.push_inline(b"apple", 7, b"red");
        n.push_tombstone(b"banana", 8);
        n.push_overflow(KIND_OVERFLOW, b"cherry", 9, 100_000, 4096, 0xdead_beef);
        let p = LogPtr {
            segment: 3,
            offset: 16,
            len: 1044,
        };
        n.push_pointer(KIND_LARGE, b"date", 10, p);
        n.push_pointer(KIND_MEDIUM, b"elder", 11, p);
        let bytes = n.finish().to_vec();
        let v = NodeView::verify(&bytes, NODE_LEAF).unwrap();
        assert_eq!(v.count(), 5);
        assert_eq!(v.leaf_entry(3).unwrap().value, ValueRef::Large(p));
        assert_eq!(v.key(4).unwrap(), b"elder");
        assert_eq!(v.leaf_entry(4).unwrap().value, ValueRef::Medium(p));
        let e = v.leaf_entry(0).unwrap();
        assert_eq!(
            (e.key, e.lsn, e.value),
            (&b"apple"[..], 7, ValueRef::Inline(b"red"))
        );
        assert_eq!(v.leaf_entry(1).unwrap().value, ValueRef::Tombstone);
        assert_eq!(
            v.leaf_entry(2).unwrap().value,
            ValueRef::Overflow {
                offset: 4096,
                len: 100_000,
                crc: 0xdead_beef
            }
        );
        assert_eq!(v.lower_bound(b"b", false), Some(1));
        assert_eq!(v.lower_bound(b"banana", true), Some(2));
        assert_eq!(v.lower_bound(b"z", false), Some(5));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let mut n = NodeBuf::new(8192, NODE_LEAF);
        for i in 0..20u32 {
            n.push_inline(format!("key{i:04}").as_bytes(), u64::from(i), b"value");
        }
        let good = n.finish().to_vec();
        for byte in (0..good.len()).step_by(97) {
            let mut bad = good.clone();
            bad[byte] ^= 1;
            assert!(NodeView::verify(&bad, NODE_LEAF).is_err(), "flip at {byte}");
        }
    }

    #[test]
    fn garbage_header_never_panics() {
        let mut buf = vec![0u8; 8192];
        buf[0] = NODE_LEAF;
        buf[1] = NODE_VERSION;
        buf[4..8].copy_from_slice(&5000u32.to_le_bytes());
        buf[8..12].copy_from_slice(&100u32.to_le_bytes());
        assert!(NodeView::new(&buf, NODE_LEAF).is_err());
        buf[4..8].copy_from_slice(&3u32.to_le_bytes());
        buf[8..12].copy_from_slice(&8000u32.to_le_bytes());
        let v = NodeView::new(&buf, NODE_LEAF).unwrap();
        // Slots are zero: offset 0 is inside the header, so entries are rejected.
        assert!(v.leaf_entry(0).is_none());
        assert!(v.key(2).is_none());
        assert_eq!(v.lower_bound(b"x", false), None);
    }
}
