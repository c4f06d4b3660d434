//! Writes one level file bottom-up from entries arriving in key order (Parallax §3.4):
//! leaves are filled completely, each full leaf adds a pivot to the index node above it,
//! and full index nodes add pivots further up, so no node is ever rewritten.
//! Optionally puts the leaves it writes (all, or those marked hot) into the node cache.

use super::filter::BloomBuilder;
use super::footer::Footer;
use super::large_pointers::LargePointersBuilder;
use super::node::{
    NodeBuf, INDEX_FIXED, INLINE_FIXED, KIND_DELTAS, KIND_DELTAS_OVERFLOW, KIND_LARGE, KIND_MEDIUM,
    KIND_OVERFLOW, NODE_BLOB, NODE_INDEX, NODE_LEAF,
};
use crate::cache::{BlockBytes, BlockCache};
use crate::error::{Error, Result};
use crate::format::crc32c;
use crate::io::{WritableFile, IO_ALIGN};
use crate::log::ptr::LogPtr;
use std::sync::Arc;

/// Header of an overflow blob: `[kind u8][version u8][reserved u16][len u32][data crc u32]
/// [header crc u32]`.
pub(crate) const BLOB_HEADER: usize = 16;

/// The value of an entry handed to the builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryValue<'a> {
    /// Value bytes: stored inline, or as an overflow blob when too big for a leaf.
    Bytes(&'a [u8]),
    /// A medium pair in the transient log.
    Medium(LogPtr),
    /// A large pair in the large log.
    Large(LogPtr),
    Tombstone,
    /// An operand list (deltas): inline, or as an overflow blob when too big for a leaf.
    Deltas(&'a [u8]),
}

/// What a finished level file holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LevelMeta {
    pub file_len: u64,
    pub entries: u64,
    pub tombstones: u64,
    /// Logical key + value bytes of the live (non-tombstone) entries.
    pub kv_bytes: u64,
    /// Entries whose value is in a log.
    pub pointer_entries: u64,
    /// Value bytes of medium pairs held by pointer.
    pub medium_bytes: u64,
}

struct IndexLevel {
    node: NodeBuf,
    first_key: Vec<u8>,
    /// Child of the most recent pivot (the root when it is the only one at the top).
    last_child: u64,
    emitted: u64,
}

/// Builds a level file. Entries must arrive in strictly increasing key order.
pub(crate) struct LevelBuilder {
    file: Box<dyn WritableFile>,
    leaf_size: usize,
    index_size: usize,
    max_inline: usize,
    leaf: NodeBuf,
    leaf_first_key: Vec<u8>,
    index: Vec<IndexLevel>,
    leaves: u64,
    meta: LevelMeta,
    last_key: Option<Vec<u8>>,
    zero: Vec<u8>,
    bloom: Option<BloomBuilder>,
    /// The large pointer table being collected, when the file gets one.
    large: Option<LargePointersBuilder>,
    fill: Option<LeafFill>,
}

/// Leaves a builder puts into the node cache as it writes them.
struct LeafFill {
    cache: Arc<BlockCache>,
    file_id: u64,
    /// Every leaf, or only those marked hot.
    all: bool,
    /// Bytes the builder may still put into the cache.
    left: u64,
    /// The leaf being filled holds an entry marked hot.
    hot: bool,
}

/// Largest entry a leaf of `leaf_size` bytes holds inline (a value beyond it goes to an
/// overflow blob): a quarter of the leaf, so full leaves hold several pairs, but a third
/// of a 4 KiB leaf, so that a medium value (up to `large_threshold`, 1 KiB by default)
/// stays inline there too.
fn max_inline(leaf_size: usize) -> usize {
    let capacity = NodeBuf::capacity(leaf_size);
    if leaf_size < 8192 {
        capacity / 3
    } else {
        capacity / 4
    }
}

impl LevelBuilder {
    pub(crate) fn new(file: Box<dyn WritableFile>, leaf_size: usize, index_size: usize) -> Self {
        LevelBuilder {
            file,
            leaf_size,
            index_size,
            max_inline: max_inline(leaf_size),
            leaf: NodeBuf::new(leaf_size, NODE_LEAF),
            leaf_first_key: Vec::new(),
            index: Vec::new(),
            leaves: 0,
            meta: LevelMeta::default(),
            last_key: None,
            zero: vec![0u8; IO_ALIGN],
            bloom: None,
            large: None,
            fill: None,
        }
    }

    /// Also puts leaves into `cache` as they are written, as the leaves of file `file_id`:
    /// every one (`all`), or those [`LevelBuilder::mark_leaf_hot`] marks; at most `limit`
    /// bytes of them (the first that qualify).
    pub(crate) fn with_cache_fill(
        mut self,
        cache: Arc<BlockCache>,
        file_id: u64,
        all: bool,
        limit: u64,
    ) -> Self {
        self.fill = cache.enabled().then_some(LeafFill {
            cache,
            file_id,
            all,
            left: limit,
            hot: false,
        });
        self
    }

    /// Marks the leaf that holds the entry added last as one to cache when it is written.
    pub(crate) fn mark_leaf_hot(&mut self) {
        if let Some(f) = &mut self.fill {
            f.hot = true;
        }
    }

    /// Also writes a Bloom filter of `bits_per_key` bits per key, sized for `expected`
    /// keys (an upper bound: the entries of the merge's inputs); 0 bits: none.
    pub(crate) fn with_bloom(mut self, bits_per_key: u32, expected: u64) -> Self {
        self.bloom = (bits_per_key > 0).then(|| BloomBuilder::new(bits_per_key, expected));
        self
    }

    /// Also writes a large pointer table (`super::large_pointers`) when `on` and the file
    /// holds a large pair: 16 bytes per large pair, held in memory until the file is
    /// finished.
    pub(crate) fn with_large_pointers(mut self, on: bool) -> Self {
        self.large = on.then(LargePointersBuilder::default);
        self
    }

    /// Number of entries added so far.
    pub(crate) fn entries(&self) -> u64 {
        self.meta.entries
    }

    fn pad_to_alignment(&mut self) -> Result<()> {
        let rem = (self.file.len() % IO_ALIGN as u64) as usize;
        if rem != 0 {
            let pad = self.zero.get(..IO_ALIGN - rem).unwrap_or_default();
            self.file.append(pad)?;
        }
        Ok(())
    }

    /// Adds one entry.
    /// # Preconditions
    /// `key` is greater than every key added before.
    #[inline]
    pub(crate) fn add(&mut self, key: &[u8], lsn: u64, value: EntryValue<'_>) -> Result<()> {
        debug_assert!(
            self.last_key.as_deref().is_none_or(|k| k < key),
            "keys out of order"
        );
        let max_inline = self.max_inline;
        let inline = |v: &[u8]| INLINE_FIXED + key.len() + v.len() + 4 <= max_inline;
        let leaf = &self.leaf;
        let entry_len = match value {
            EntryValue::Tombstone => leaf.tombstone_len(key.len(), lsn),
            EntryValue::Bytes(v) | EntryValue::Deltas(v) if inline(v) => {
                leaf.inline_len(key.len(), lsn, v.len())
            }
            EntryValue::Bytes(v) | EntryValue::Deltas(v) => {
                leaf.overflow_len(key.len(), lsn, v.len() as u32)
            }
            EntryValue::Medium(p) | EntryValue::Large(p) => leaf.pointer_len(key.len(), lsn, p),
        };
        if !self.leaf.fits(key, entry_len) {
            self.emit_leaf()?;
            if !self.leaf.fits(key, entry_len) {
                // Only a key over `MAX_KEY_SIZE`, from a database written before it was
                // lowered, can fail to fit an empty leaf.
                return Err(Error::InvalidArgument(format!(
                    "a key of {} bytes (starting {:?}) does not fit a {}-byte leaf: \
                     open this database with leaf_size 8192 or more",
                    key.len(),
                    String::from_utf8_lossy(key.get(..16).unwrap_or(key)),
                    self.leaf_size
                )));
            }
        }
        if self.leaf.count() == 0 {
            self.leaf_first_key.clear();
            self.leaf_first_key.extend_from_slice(key);
        }
        if let Some(b) = &mut self.bloom {
            b.add(key); // tombstones too: a lookup must find them
        }
        let value_len = match value {
            EntryValue::Tombstone => {
                self.leaf.push_tombstone(key, lsn);
                self.meta.tombstones += 1;
                None
            }
            EntryValue::Bytes(v) if inline(v) => {
                self.leaf.push_inline(key, lsn, v);
                Some(v.len())
            }
            EntryValue::Bytes(v) => {
                let (offset, crc) = self.write_blob(v)?;
                self.leaf
                    .push_overflow(KIND_OVERFLOW, key, lsn, v.len() as u32, offset, crc);
                Some(v.len())
            }
            EntryValue::Deltas(v) if inline(v) => {
                self.leaf.push_bytes(KIND_DELTAS, key, lsn, v);
                Some(v.len())
            }
            EntryValue::Deltas(v) => {
                let (offset, crc) = self.write_blob(v)?;
                self.leaf.push_overflow(
                    KIND_DELTAS_OVERFLOW,
                    key,
                    lsn,
                    v.len() as u32,
                    offset,
                    crc,
                );
                Some(v.len())
            }
            EntryValue::Medium(p) | EntryValue::Large(p) => {
                let medium = matches!(value, EntryValue::Medium(_));
                let kind = if medium { KIND_MEDIUM } else { KIND_LARGE };
                self.leaf.push_pointer(kind, key, lsn, p);
                if let (false, Some(t)) = (medium, &mut self.large) {
                    t.add(key, p);
                }
                self.meta.pointer_entries += 1;
                let vlen =
                    (p.len as usize).saturating_sub(key.len() + crate::log::large::RECORD_HEADER);
                if medium {
                    self.meta.medium_bytes += vlen as u64;
                }
                Some(vlen)
            }
        };
        if let Some(vlen) = value_len {
            self.meta.kv_bytes += (key.len() + vlen) as u64;
        }
        self.meta.entries += 1;
        if cfg!(debug_assertions) {
            self.last_key = Some(key.to_vec());
        }
        Ok(())
    }

    /// Appends a value too big for a leaf as a blob; returns its offset and data CRC.
    fn write_blob(&mut self, value: &[u8]) -> Result<(u64, u32)> {
        let offset = self.file.len();
        let crc = crc32c(value);
        let mut h = [0u8; BLOB_HEADER];
        h[0] = NODE_BLOB;
        h[1] = super::node::NODE_VERSION;
        h[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
        h[8..12].copy_from_slice(&crc.to_le_bytes());
        let hcrc = crc32c(&h[..12]);
        h[12..16].copy_from_slice(&hcrc.to_le_bytes());
        self.file.append(&h)?;
        self.file.append(value)?;
        self.pad_to_alignment()?;
        Ok((offset, crc))
    }

    fn emit_leaf(&mut self) -> Result<()> {
        if self.leaf.count() == 0 {
            return Ok(());
        }
        let offset = self.file.len();
        let bytes = match self.leaf.finish() {
            Ok(bytes) => bytes,
            Err(e) => {
                // Reset even on failure: a finished leaf must not take more entries.
                self.leaf.reset();
                return Err(e);
            }
        };
        let appended = self.file.append(bytes);
        if let Some(f) = &mut self.fill {
            // What the cache charges for the leaf (its bytes and the entry's overhead).
            let charge = bytes.len() as u64 + crate::cache::ENTRY_OVERHEAD;
            if appended.is_ok() && (f.all || f.hot) && f.left >= charge {
                f.left -= charge;
                let node = BlockBytes::copy_from_slice(bytes);
                if f.hot {
                    f.cache.insert_in_use(f.file_id, offset, node);
                } else {
                    f.cache.insert(f.file_id, offset, node);
                }
            }
            f.hot = false;
        }
        // Reset even on failure: a finished leaf must not take more entries.
        self.leaf.reset();
        appended?;
        self.leaves += 1;
        let first = std::mem::take(&mut self.leaf_first_key);
        self.push_pivot(0, &first, offset)?;
        self.leaf_first_key = first;
        Ok(())
    }

    fn push_pivot(&mut self, level: usize, key: &[u8], child: u64) -> Result<()> {
        if self.index.len() == level {
            self.index.push(IndexLevel {
                node: NodeBuf::new(self.index_size, NODE_INDEX),
                first_key: Vec::new(),
                last_child: 0,
                emitted: 0,
            });
        }
        let full = self
            .index
            .get(level)
            .is_some_and(|l| !l.node.fits(key, INDEX_FIXED + key.len()));
        if full {
            self.emit_index(level)?;
        }
        if let Some(l) = self.index.get_mut(level) {
            if l.node.count() == 0 {
                l.first_key.clear();
                l.first_key.extend_from_slice(key);
            }
            l.node.push_index(key, child);
            l.last_child = child;
        }
        Ok(())
    }

    fn emit_index(&mut self, level: usize) -> Result<()> {
        let offset = self.file.len();
        let Some(l) = self.index.get_mut(level) else {
            return Ok(());
        };
        let bytes = l.node.finish()?;
        self.file.append(bytes)?;
        l.node.reset();
        l.emitted += 1;
        let first = std::mem::take(&mut l.first_key);
        self.push_pivot(level + 1, &first, offset)
    }

    /// Writes the last nodes and the footer, syncs, and reports what the file holds.
    pub(crate) fn finish(mut self) -> Result<LevelMeta> {
        self.emit_leaf()?;
        let mut root = 0u64;
        let mut height = 0u32;
        if self.leaves > 0 {
            let mut level = 0;
            while let Some(l) = self.index.get(level) {
                let is_top = level + 1 == self.index.len();
                if is_top && l.emitted == 0 && l.node.count() == 1 {
                    // A single pending pivot at the top: its child is the root.
                    root = l.last_child;
                    height = level as u32 + 1;
                    break;
                }
                self.emit_index(level)?;
                level += 1;
            }
        }
        // The filter unit (for a file with entries), aligned, then the footer.
        let (mut filter_offset, mut filter_len) = (0, 0);
        if let Some(mut b) = self.bloom.take().filter(|b| b.keys() > 0) {
            self.pad_to_alignment()?;
            let unit = b.encode();
            filter_offset = self.file.len();
            filter_len = u32::try_from(unit.len()).unwrap_or(u32::MAX);
            self.file.append(&unit)?;
            self.pad_to_alignment()?;
        }
        // The large pointer table (when a large pair was added), aligned; one too large
        // for the footer's length field (over 268 million large pairs) is left out.
        let (mut pointers_offset, mut pointers_len) = (0, 0);
        let unit = self.large.take().and_then(|mut t| t.encode());
        if let Some((unit, len)) = unit.and_then(|u| u32::try_from(u.len()).ok().map(|l| (u, l))) {
            self.pad_to_alignment()?;
            pointers_offset = self.file.len();
            pointers_len = len;
            self.file.append(&unit)?;
            self.pad_to_alignment()?;
        }
        // The footer fills the end of one aligned block, so the file stays aligned.
        let footer = Footer {
            height,
            root,
            entries: self.meta.entries,
            tombstones: self.meta.tombstones,
            kv_bytes: self.meta.kv_bytes,
            leaves: self.leaves,
            leaf_size: self.leaf_size as u32,
            index_size: self.index_size as u32,
            medium_bytes: self.meta.medium_bytes,
            filter_offset,
            filter_len,
            pointers_offset,
            pointers_len,
        };
        let mut block = vec![0u8; IO_ALIGN];
        footer.encode_into(&mut block);
        self.file.append(&block)?;
        self.file.sync_data()?;
        self.meta.file_len = self.file.len();
        Ok(self.meta)
    }
}
