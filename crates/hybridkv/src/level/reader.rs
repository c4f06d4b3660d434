//! Reads a level file: point lookups descending the B+-tree through the node cache,
//! cursors for scans, and a sequential scanner for compaction that reads the file in large
//! aligned chunks and bypasses the cache.

use super::builder::BLOB_HEADER;
use super::filter::{Bloom, FilterError};
use super::footer::{Footer, FooterError, FOOTER_SIZE};
use super::large_pointers::{LargePointers, LargePointersError};
use super::node::{NodeView, ValueRef, NODE_BLOB, NODE_INDEX, NODE_LEAF};
use super::pinned::{Fences, PinnedIndex};
use crate::cache::{BlockBytes, BlockCache};
use crate::error::{Error, Result};
use crate::format::{crc32c, Decoder};
use crate::io::{Io, IoComponent, ReadableFile, IO_ALIGN};
use crate::log::ptr::LogPtr;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

thread_local! {
    /// The buffer of this thread's group reads (`LevelFile::read_leaves_around`).
    static GROUP_SPAN: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Largest group-read buffer a thread keeps between reads: the default 64 KiB group and
/// its alignment slack. A larger `warm_read_bytes` reads into a buffer dropped after use,
/// so that a thread does not hold megabytes once the cache is warm and group reads stop.
const GROUP_SPAN_KEEP: usize = (64 << 10) + 2 * IO_ALIGN;

/// Read size of the compaction scanner (the paper reads levels in 2 MiB segments).
const SCAN_WINDOW: usize = 2 << 20;

/// Most bytes a cursor reads ahead at once ([`ReadAhead`]); RocksDB's iterators read
/// ahead up to 256 KiB too.
const READ_AHEAD_MAX: u64 = 256 << 10;

pub(crate) use crate::value::LevelValue;

impl From<ValueRef<'_>> for LevelValue {
    fn from(v: ValueRef<'_>) -> Self {
        match v {
            ValueRef::Inline(b) => LevelValue::Inline(b.to_vec()),
            ValueRef::Overflow { offset, len, crc } => LevelValue::Overflow { offset, len, crc },
            ValueRef::Medium(p) => LevelValue::Medium(p),
            ValueRef::Large(p) => LevelValue::Large(p),
            ValueRef::Tombstone => LevelValue::Tombstone,
            ValueRef::Deltas(b) => LevelValue::Deltas(b.to_vec()),
            ValueRef::DeltasOverflow { offset, len, crc } => {
                LevelValue::DeltasOverflow { offset, len, crc }
            }
        }
    }
}

/// What a client's search of one level file found ([`LevelFile::search`]).
#[derive(Debug)]
pub(crate) enum Probe {
    /// The file's entry for the key (LSN and value), or `None`: it holds none.
    Entry(Option<(u64, LevelValue)>),
    /// The key's leaf is not cached and the file's large pointer table names this record
    /// for the key's fingerprint: the key's value in this file if the record holds the key
    /// (the file holds one entry per key, and only its large pairs are in the table).
    Record(LogPtr),
}

impl Probe {
    /// The entry of a search made without guessing (which never answers `Record`).
    pub(crate) fn into_entry(self) -> Option<(u64, LevelValue)> {
        match self {
            Probe::Entry(found) => found,
            Probe::Record(_) => None,
        }
    }
}

/// Reads into the node cache, as one batch (`Io::read_batch`: one submission and one
/// device notification for all of them where the system allows), every leaf that
/// [`LevelFile::get`] of each `(file, key)` would read and the cache lacks, so that those
/// gets then find their leaves cached. The leaves are the ones the gets would read, no
/// more. Best effort: a leaf that fails to read or to verify is left out, and the get
/// that wants it reads it again and reports what it finds.
pub(crate) fn prefetch_leaves(wanted: &[(&LevelFile, &[u8])]) {
    let mut leaves: Vec<(&LevelFile, u64)> = wanted
        .iter()
        .filter_map(|&(f, key)| f.leaf_to_fetch(key).map(|offset| (f, offset)))
        .collect();
    leaves.sort_unstable_by_key(|&(f, offset)| (f.id, offset));
    leaves.dedup_by_key(|&mut (f, offset)| (f.id, offset));
    // One read gains nothing from a batch.
    if leaves.len() < 2 {
        return;
    }
    let mut bufs: Vec<(&LevelFile, u64, Vec<u8>)> = leaves
        .into_iter()
        .filter(|&(f, offset)| {
            offset.is_multiple_of(IO_ALIGN as u64)
                && offset.saturating_add(u64::from(f.footer.leaf_size)) <= f.data_end
        })
        .map(|(f, offset)| (f, offset, crate::io::read_buf(f.footer.leaf_size as usize)))
        .collect();
    let Some(io) = bufs.first().map(|(f, _, _)| f.io.clone()) else {
        return;
    };
    let mut reqs: Vec<crate::io::BatchRead<'_>> = bufs
        .iter_mut()
        .map(|(f, offset, buf)| crate::io::BatchRead {
            file: f.file.as_ref(),
            offset: *offset,
            buf: buf.as_mut_slice(),
        })
        .collect();
    let results = io.read_batch(&mut reqs);
    drop(reqs);
    for ((f, offset, buf), result) in bufs.into_iter().zip(results) {
        if result.is_ok() && NodeView::verify(&buf, NODE_LEAF).is_ok() {
            f.cache.insert_fetched(f.id, offset, BlockBytes::from(buf));
        }
    }
}

/// An entry read from a level: key, LSN, value.
pub type LevelEntry = (Vec<u8>, u64, LevelValue);

/// File name of level file `id`.
pub(crate) fn file_name(id: u64) -> String {
    crate::filename::FileKind::Level.name(id)
}

/// One immutable level file. Deleted from disk when marked obsolete and the last reference
/// (a version, an iterator, a running compaction) is dropped.
pub(crate) struct LevelFile {
    id: u64,
    path: PathBuf,
    file: Arc<dyn ReadableFile>,
    footer: Footer,
    data_end: u64,
    /// The file's Bloom filter, if it has one (checked at open, held in memory).
    bloom: Option<Bloom>,
    /// The leaves' fences, when the pinning budget had room for them at open.
    pinned: Option<PinnedIndex>,
    cache: Arc<BlockCache>,
    io: Io,
    obsolete: AtomicBool,
    /// See [`LevelFile::wasted_searches`].
    wasted_searches: AtomicU64,
}

impl std::fmt::Debug for LevelFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LevelFile")
            .field("id", &self.id)
            .field("footer", &self.footer)
            .finish()
    }
}

impl Drop for LevelFile {
    fn drop(&mut self) {
        self.cache.remove_level_bytes(self.node_bytes());
        if self.obsolete.load(Ordering::Acquire) {
            // Its cached leaves can never be read again: their room goes back now, not
            // when the cache's clock reaches them (a merge's inputs were in use, so
            // they sit in the cache's hot section, where they would push out live nodes
            // first). File ids are never reused, so nothing else has these keys. An
            // index the pinning budget had no room for is not read again for this: its
            // leaves are left to the clock.
            if let Some(fences) = self.pinned.as_ref().map(PinnedIndex::fences) {
                for at in (0..fences.len()).filter_map(|i| fences.leaf_offset(i)) {
                    self.cache.forget(self.id, at);
                }
            }
            // A failure leaves an orphan that the next open sweeps.
            let _ = self.io.fs().remove(&self.path);
        }
    }
}

impl LevelFile {
    /// Opens level file `id` in `dir`, checking its footer.
    pub(crate) fn open(io: &Io, dir: &Path, id: u64, cache: Arc<BlockCache>) -> Result<Self> {
        let path = dir.join(file_name(id));
        let file = io.open(&path, IoComponent::LevelRead)?;
        let len = file.len();
        if len < IO_ALIGN as u64 || len % IO_ALIGN as u64 != 0 {
            return Err(Error::corruption(
                &path,
                len,
                "level file length is not a whole number of blocks",
            ));
        }
        let mut f = vec![0u8; FOOTER_SIZE];
        let foff = len - FOOTER_SIZE as u64;
        file.read_exact_at(foff, &mut f)?;
        let footer = match Footer::decode(&f) {
            Ok(footer) => footer,
            Err(FooterError::Corrupt(what)) => return Err(Error::corruption(&path, foff, what)),
            Err(FooterError::Version(found)) => {
                return Err(Error::UnsupportedVersion {
                    file: path,
                    found,
                    supported: super::footer::LEVEL_VERSION,
                })
            }
        };
        let data_end = len - IO_ALIGN as u64;
        let bloom = if footer.filter_offset == 0 {
            None
        } else {
            let at = footer.filter_offset;
            let unit_len = u64::from(footer.filter_len);
            if at.checked_add(unit_len).is_none_or(|end| end > data_end) {
                return Err(Error::corruption(
                    &path,
                    foff,
                    "the footer's filter unit lies past the data",
                ));
            }
            let mut unit = vec![0u8; footer.filter_len as usize];
            file.read_exact_at(at, &mut unit)?;
            Some(Bloom::decode(&unit).map_err(|e| match e {
                FilterError::Corrupt(what) => Error::corruption(&path, at, what),
                FilterError::Version(found) => Error::UnsupportedVersion {
                    file: path.clone(),
                    found: u32::from(found),
                    supported: u32::from(super::filter::BLOCKED_VERSION),
                },
            })?)
        };
        let mut lf = LevelFile {
            id,
            path,
            file,
            footer,
            data_end,
            bloom,
            pinned: None,
            cache,
            io: io.clone(),
            obsolete: AtomicBool::new(false),
            wasted_searches: AtomicU64::new(0),
        };
        lf.cache.add_level_bytes(lf.node_bytes());
        if lf.cache.pins().has_room() {
            // A damaged or unreadable index is not pinned: lookups then descend it through
            // the cache and report the damage where they meet it, as without pinning.
            if let Ok(fences) = lf.read_fences() {
                // A table that cannot be read or is damaged is not pinned either: gets then
                // read their leaves, and `check` reports the damage (it reads the table).
                let large = match lf.cache.table_pins().has_room() {
                    true => lf.read_large_pointers().unwrap_or_else(|e| {
                        log::warn!("{}: large pointer table not used: {e}", lf.path.display());
                        None
                    }),
                    false => None,
                };
                lf.pinned =
                    PinnedIndex::charge(fences, large, lf.cache.pins(), lf.cache.table_pins());
            }
        }
        Ok(lf)
    }

    /// The bytes of the file's large pointer table, as stored (unchecked), if it has one
    /// (`check` compares them with the table its entries make).
    pub(crate) fn large_pointers_unit(&self) -> Result<Option<Vec<u8>>> {
        let (at, len) = (self.footer.pointers_offset, self.footer.pointers_len);
        if at == 0 {
            return Ok(None);
        }
        if at
            .checked_add(u64::from(len))
            .is_none_or(|end| end > self.data_end)
        {
            return Err(self.corrupt(at, "the footer's large pointer table lies past the data"));
        }
        let mut unit = vec![0u8; len as usize];
        self.file.read_exact_at(at, &mut unit)?;
        Ok(Some(unit))
    }

    /// The file's large pointer table, if it has one, checked (damage is corruption at its
    /// offset).
    fn read_large_pointers(&self) -> Result<Option<LargePointers>> {
        let at = self.footer.pointers_offset;
        let Some(unit) = self.large_pointers_unit()? else {
            return Ok(None);
        };
        match LargePointers::decode(&unit) {
            Ok(t) => Ok(Some(t)),
            Err(LargePointersError::Corrupt(what)) => Err(self.corrupt(at, what)),
            Err(LargePointersError::Version(found)) => Err(Error::UnsupportedVersion {
                file: self.path.clone(),
                found: u32::from(found),
                supported: u32::from(super::large_pointers::UNIT_VERSION),
            }),
        }
    }

    /// The first key and offset of every leaf, read from the index nodes (each checked
    /// against its checksum, outside the cache). A one-leaf file gets one fence with the
    /// empty key (its first key is in the leaf, not in an index node).
    fn read_fences(&self) -> Result<Fences> {
        let mut fences = Fences::default();
        let (root, height) = (self.footer.root, self.footer.height);
        if height == 0 {
            return Ok(fences);
        }
        if height == 1 {
            fences
                .push(b"", root)
                .map_err(|what| self.corrupt(root, what))?;
            return Ok(fences);
        }
        // Depth-first, children in order, so the leaves' pivots arrive in key order. A
        // damaged index whose pointers repeat could make the walk revisit nodes without
        // end: it may read at most as many nodes as the file has blocks.
        let mut reads_left = self.data_end / IO_ALIGN as u64;
        let mut stack: Vec<(u64, u32)> = vec![(root, height)];
        while let Some((offset, h)) = stack.pop() {
            reads_left = reads_left
                .checked_sub(1)
                .ok_or_else(|| self.corrupt(offset, "index holds more nodes than the file"))?;
            let node = self.read_node(offset, h)?;
            let view = NodeView::new(&node, NODE_INDEX).map_err(|w| self.corrupt(offset, w))?;
            if h == 2 {
                for i in 0..view.count() {
                    let (Some(key), Some(child)) = (view.key(i), view.child(i)) else {
                        return Err(self.corrupt(offset, "undecodable index entry"));
                    };
                    fences
                        .push(key, child)
                        .map_err(|what| self.corrupt(offset, what))?;
                }
                if fences.len() as u64 > self.footer.leaves {
                    return Err(self.corrupt(offset, "index names more leaves than the footer"));
                }
            } else {
                for i in (0..view.count()).rev() {
                    let child = view
                        .child(i)
                        .ok_or_else(|| self.corrupt(offset, "undecodable index entry"))?;
                    stack.push((child, h - 1));
                }
            }
        }
        // Every leaf the footer counts must have its fence: an index that names fewer
        // (an empty index node) would make pinned lookups miss keys the unpinned descent
        // reports as damage.
        if fences.len() as u64 != self.footer.leaves {
            return Err(self.corrupt(root, "index names fewer leaves than the footer"));
        }
        Ok(fences)
    }

    /// The file's footer (tests look at its shape).
    #[cfg(test)]
    pub(super) fn footer(&self) -> &Footer {
        &self.footer
    }

    /// Bytes of this file's pinned index (0 when it is not pinned).
    pub(crate) fn pinned_bytes(&self) -> u64 {
        self.pinned.as_ref().map_or(0, PinnedIndex::bytes)
    }

    /// Bytes of this file's pinned large pointer table (0 when none is pinned).
    pub(crate) fn large_pointer_bytes(&self) -> u64 {
        self.pinned.as_ref().map_or(0, PinnedIndex::table_bytes)
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// File length in bytes.
    pub(crate) fn file_len(&self) -> u64 {
        self.data_end + IO_ALIGN as u64
    }

    /// Bytes of the file's nodes and blobs: its length less the filter unit and the
    /// footer block, which do not grow with its entries as its nodes do.
    pub(crate) fn node_bytes(&self) -> u64 {
        self.nodes_end()
    }

    /// Where the nodes and blobs end: at the filter unit or the large pointer table,
    /// whichever comes first (the builder writes them after every node), else at the
    /// footer block.
    fn nodes_end(&self) -> u64 {
        [self.footer.filter_offset, self.footer.pointers_offset]
            .into_iter()
            .filter(|&at| at > 0)
            .fold(self.data_end, u64::min)
    }

    /// Bytes of the file's root index node (none when its root is a leaf): a cost every
    /// file of more than one leaf pays once, however many entries it holds.
    pub(crate) fn root_index_bytes(&self) -> u64 {
        if self.footer.height >= 2 {
            u64::from(self.footer.index_size)
        } else {
            0
        }
    }

    /// Entries (including tombstones).
    pub(crate) fn entries(&self) -> u64 {
        self.footer.entries
    }

    /// Tombstones.
    pub(crate) fn tombstones(&self) -> u64 {
        self.footer.tombstones
    }

    /// Logical key + value bytes of live entries.
    pub(crate) fn kv_bytes(&self) -> u64 {
        self.footer.kv_bytes
    }

    /// Value bytes of medium pairs this level holds by pointer.
    pub(crate) fn medium_bytes(&self) -> u64 {
        self.footer.medium_bytes
    }

    /// Whether the file's Bloom filter (if any) lets a lookup of `key` through.
    pub(crate) fn filter_admits(&self, key: &[u8]) -> bool {
        self.bloom.as_ref().is_none_or(|b| b.may_contain(key))
    }

    /// Offset of the filter unit (0: none).
    pub(crate) fn filter_offset(&self) -> u64 {
        self.footer.filter_offset
    }

    /// Offset of the large pointer table (0: none).
    pub(crate) fn large_pointers_offset(&self) -> u64 {
        self.footer.pointers_offset
    }

    /// Bytes of the Bloom filter held in memory (0 without one).
    pub(crate) fn filter_bytes(&self) -> u64 {
        self.bloom.as_ref().map_or(0, |b| b.memory_bytes() as u64)
    }

    /// Schedules deletion for when the last reference is dropped.
    pub(crate) fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    fn corrupt(&self, offset: u64, what: &str) -> Error {
        Error::corruption(&self.path, offset, what)
    }

    fn node_shape(&self, height: u32) -> (u8, usize) {
        if height <= 1 {
            (NODE_LEAF, self.footer.leaf_size as usize)
        } else {
            (NODE_INDEX, self.footer.index_size as usize)
        }
    }

    /// Loads the node at `offset` whose subtree height is `height`, via the cache.
    fn load_node(&self, offset: u64, height: u32) -> Result<BlockBytes> {
        if let Some(n) = self.cache.get(self.id, offset) {
            return Ok(n);
        }
        let node = self.read_node(offset, height)?;
        self.cache.insert(self.id, offset, node.clone());
        Ok(node)
    }

    /// Loads leaf `pos` of a pinned file, at `offset`, via the cache; a miss reads its
    /// neighbours with it while the cache fills ([`LevelFile::read_leaves_around`]), and
    /// with `ahead` (a cursor stepping forward) first takes it from the cursor's
    /// read-ahead, or reads it together with the leaves after it ([`ReadAhead`]). A leaf
    /// taken from the read-ahead or read is cached as a leaf read alone would be; one held
    /// in the read-ahead that fails to verify is read alone, which reports the damage.
    fn load_pinned_leaf(
        &self,
        fences: &Fences,
        pos: usize,
        offset: u64,
        mut ahead: Option<&mut ReadAhead>,
    ) -> Result<BlockBytes> {
        if let Some(a) = ahead.as_deref_mut() {
            a.let_go_before(pos);
        }
        if let Some(n) = self.cache.get(self.id, offset) {
            return Ok(n);
        }
        let leaf = self.footer.leaf_size as usize;
        let held = ahead.as_deref_mut().map(|a| a.take(pos, leaf));
        match held {
            Some(Held::Leaf(n)) => return Ok(self.cached(offset, n)),
            Some(Held::Damaged) => return self.read_leaf_alone(offset),
            Some(Held::Absent) | None => {}
        }
        if let Some(n) = self.read_leaves_around(fences, pos, offset) {
            return Ok(n);
        }
        if let Some(a) = ahead {
            if let Some(n) = self.read_ahead(fences, pos, leaf, a) {
                return Ok(self.cached(offset, n));
            }
        }
        self.read_leaf_alone(offset)
    }

    /// Leaf `n`, read from `offset` and verified, put in the cache and handed back.
    fn cached(&self, offset: u64, n: BlockBytes) -> BlockBytes {
        self.cache.insert(self.id, offset, n.clone());
        n
    }

    /// The leaf at `offset`, read alone (and verified) and cached.
    fn read_leaf_alone(&self, offset: u64) -> Result<BlockBytes> {
        let node = self.read_node(offset, 1)?;
        Ok(self.cached(offset, node))
    }

    /// Reads leaf `pos` with the leaves back to back after it that the cache lacks, up to
    /// `ahead.next` of them (two the first time) and [`READ_AHEAD_MAX`] bytes, in one
    /// device read; `ahead` then holds them, and leaf `pos` is handed back if it
    /// verifies. `None` when fewer than two leaves would be read (a leaf over half of
    /// [`READ_AHEAD_MAX`] never reads ahead), the read fails, or leaf `pos` does not
    /// verify: the caller reads it alone.
    fn read_ahead(
        &self,
        fences: &Fences,
        pos: usize,
        leaf: usize,
        ahead: &mut ReadAhead,
    ) -> Option<BlockBytes> {
        let most = usize::try_from(READ_AHEAD_MAX / u64::try_from(leaf.max(1)).ok()?).ok()?;
        if most < 2 {
            return None;
        }
        let want = ahead.next.clamp(2, most);
        let mut hi = pos + 1;
        while hi < fences.len()
            && hi - pos < want
            && self.leaves_adjacent(fences, hi - 1) == Some(true)
            && !self.leaf_cached(fences, hi)
        {
            hi += 1;
        }
        if hi - pos < 2 {
            return None;
        }
        let span = self.read_leaf_span(fences, pos, hi)?;
        *ahead = ReadAhead {
            first: pos,
            end: hi,
            span,
            next: want.saturating_mul(2).min(most),
        };
        match ahead.take(pos, leaf) {
            Held::Leaf(n) => Some(n),
            Held::Damaged | Held::Absent => None,
        }
    }

    /// While the cache has room (`BlockCache::warm_read_bytes`), reads leaf `pos` (at
    /// `offset`) together with the leaves of its group (`warm_read_bytes / leaf_size`
    /// consecutive fences, aligned to the group size) that lie back to back with it in
    /// the file, in one device read, and caches each that verifies. On this project's
    /// machine a device read costs about 50 us of processor time whatever its size up to
    /// tens of KiB, and a process that starts cold reads nearly every leaf of a run
    /// whose levels fit in its cache once: a group read pays that cost once for the
    /// group. `None` when no group read applies, or it failed, or leaf `pos` did not
    /// verify: the caller then reads the leaf alone, and reports what that read finds.
    fn read_leaves_around(&self, fences: &Fences, pos: usize, offset: u64) -> Option<BlockBytes> {
        let leaf = u64::from(self.footer.leaf_size);
        let group = usize::try_from(self.cache.warm_read_bytes() / leaf.max(1)).ok()?;
        if group < 2 || fences.leaf_offset(pos)? != offset {
            return None;
        }
        let first = pos - pos % group;
        let end = first.saturating_add(group).min(fences.len());
        let mut lo = pos;
        while lo > first && self.leaves_adjacent(fences, lo - 1)? {
            lo -= 1;
        }
        let mut hi = pos + 1;
        while hi < end && self.leaves_adjacent(fences, hi - 1)? {
            hi += 1;
        }
        // Neighbours at the ends that the cache holds already are not read again (nor,
        // once a group is cached, is it read again for one leaf that failed to verify).
        while lo < pos && self.leaf_cached(fences, lo) {
            lo += 1;
        }
        while hi > pos + 1 && self.leaf_cached(fences, hi - 1) {
            hi -= 1;
        }
        if hi - lo < 2 {
            return None;
        }
        // The group's leaves are copied out of the span, each into its own allocation, so
        // the span's buffer is this thread's, used again by its next group read rather
        // than 64 KiB allocated and zeroed for each.
        // A thread whose locals are being torn down, or a nested borrow, reads into a
        // buffer of its own instead. A span larger than `GROUP_SPAN_KEEP` is not kept.
        let kept = GROUP_SPAN.try_with(|cell| {
            let mut buf = cell.try_borrow_mut().ok()?;
            let leaf = self.cache_group(fences, pos, lo, hi, &mut buf);
            if buf.capacity() > GROUP_SPAN_KEEP {
                *buf = Vec::new();
            }
            Some(leaf)
        });
        match kept {
            Ok(Some(leaf)) => leaf,
            _ => self.cache_group(fences, pos, lo, hi, &mut Vec::new()),
        }
    }

    /// Reads leaves `lo..hi` (holding leaf `pos`) in one device read into `buf` and caches
    /// each that verifies and the cache lacks; leaf `pos`, if it verified, is handed back.
    fn cache_group(
        &self,
        fences: &Fences,
        pos: usize,
        lo: usize,
        hi: usize,
        buf: &mut Vec<u8>,
    ) -> Option<BlockBytes> {
        let leaf = u64::from(self.footer.leaf_size);
        let range = self.read_leaf_span_into(fences, lo, hi, buf)?;
        let span = buf.get(range)?;
        let mut wanted = None;
        let mut added = 0;
        for (j, node) in (lo..hi).zip(span.chunks_exact(leaf as usize)) {
            let node_at = fences.leaf_offset(j)?;
            // A neighbour that does not verify is left out: the read that wants it reads
            // it alone and reports the damage.
            if NodeView::verify(node, NODE_LEAF).is_err() {
                continue;
            }
            if j == pos {
                let node = BlockBytes::copy_from_slice(node);
                self.cache.insert(self.id, node_at, node.clone());
                wanted = Some(node);
            } else if !self.cache.contains(self.id, node_at) {
                // Each leaf its own allocation: a cached leaf must not keep its group's
                // buffer alive after the others are evicted.
                self.cache
                    .insert(self.id, node_at, BlockBytes::copy_from_slice(node));
                added += 1;
            }
        }
        self.cache.note_warm_read(added);
        wanted
    }

    /// Whether leaf `a` ends where leaf `a + 1` starts (an overflow value written between
    /// two leaves separates them); `None` past the fences.
    fn leaves_adjacent(&self, fences: &Fences, a: usize) -> Option<bool> {
        let end = fences
            .leaf_offset(a)?
            .checked_add(u64::from(self.footer.leaf_size))?;
        Some(end == fences.leaf_offset(a + 1)?)
    }

    /// Whether the cache holds leaf `j`.
    fn leaf_cached(&self, fences: &Fences, j: usize) -> bool {
        fences
            .leaf_offset(j)
            .is_some_and(|at| self.cache.contains(self.id, at))
    }

    /// Leaves `lo..hi`, back to back in the file, read in one device read into an aligned
    /// buffer (a direct read fills it without a bounce copy), not yet verified. `None` if
    /// the span is unaligned or runs past the data, or the read fails: the caller then
    /// reads its leaf alone and reports what that read finds.
    fn read_leaf_span(&self, fences: &Fences, lo: usize, hi: usize) -> Option<BlockBytes> {
        let mut raw = Vec::new();
        let span = self.read_leaf_span_into(fences, lo, hi, &mut raw)?;
        Some(BlockBytes::from(raw).slice(span))
    }

    /// [`LevelFile::read_leaf_span`] into `buf` (grown as needed, never shrunk here, so a
    /// buffer used again is not allocated again; the span is zeroed before each read): the
    /// range of `buf` that holds the leaves, aligned for a direct read.
    fn read_leaf_span_into(
        &self,
        fences: &Fences,
        lo: usize,
        hi: usize,
        buf: &mut Vec<u8>,
    ) -> Option<std::ops::Range<usize>> {
        let start = fences.leaf_offset(lo)?;
        let count = u64::try_from(hi.checked_sub(lo)?).ok()?;
        let len = u64::from(self.footer.leaf_size).checked_mul(count)?;
        if !start.is_multiple_of(IO_ALIGN as u64) || start.checked_add(len)? > self.data_end {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        let room = len.checked_add(IO_ALIGN)?;
        if buf.len() < room {
            buf.resize(room, 0);
        }
        let at = buf.as_ptr().align_offset(IO_ALIGN);
        let end = at.checked_add(len)?;
        let span = buf.get_mut(at..end)?;
        // A buffer used again holds the last group's leaves, which verify: zeroed first,
        // so that a file system that reports a read done without filling all of it hands
        // back leaves that fail their checksums, never another file's.
        span.fill(0);
        self.file.read_exact_at(start, span).ok()?;
        Some(at..end)
    }

    /// Reads back into the cache the nodes a hint file names for this file (`nodes`:
    /// (offset, length), ascending) that the cache lacks, in few device reads
    /// ([`Io::read_spans`]). A node is cached only if it verifies as a leaf or an index
    /// node of its length and the cache has room for it
    /// ([`BlockCache::has_room_to_reload`]); one at an impossible offset or length, or
    /// that does not verify, is left out (a get that wants it reads it and reports what it finds).
    /// `go_on()` is asked before each batch of reads. Returns (nodes cached, bytes read).
    pub(crate) fn reload_nodes(
        &self,
        nodes: &[(u64, u32)],
        go_on: &mut dyn FnMut() -> bool,
    ) -> (u64, u64) {
        let leaf = self.footer.leaf_size;
        let index = self.footer.index_size;
        let spans: Vec<(u64, u32)> = nodes
            .iter()
            .copied()
            .filter(|&(offset, len)| {
                (len == leaf || len == index)
                    && offset.is_multiple_of(IO_ALIGN as u64)
                    && offset.saturating_add(u64::from(len)) <= self.data_end
                    && !self.cache.contains(self.id, offset)
            })
            .collect();
        let mut cached = 0;
        let read = self.io.read_spans(
            self.file.as_ref(),
            &spans,
            crate::io::SPAN_MAX_GAP,
            crate::io::SPAN_MAX_READ,
            go_on,
            &mut |i, node| {
                let len = spans[i].1;
                let verified = (len == leaf && NodeView::verify(node, NODE_LEAF).is_ok())
                    || (len == index && NodeView::verify(node, NODE_INDEX).is_ok());
                if verified && self.cache.has_room_to_reload(u64::from(len)) {
                    // Each node its own allocation, as a group read caches them.
                    self.cache
                        .insert(self.id, spans[i].0, BlockBytes::copy_from_slice(node));
                    cached += 1;
                }
            },
        );
        (cached, read)
    }

    /// Reads and verifies the node at `offset` whose subtree height is `height`.
    fn read_node(&self, offset: u64, height: u32) -> Result<BlockBytes> {
        let (kind, size) = self.node_shape(height);
        if !offset.is_multiple_of(IO_ALIGN as u64)
            || offset.saturating_add(size as u64) > self.data_end
        {
            return Err(self.corrupt(offset, "node offset out of range"));
        }
        let mut buf = crate::io::read_buf(size);
        self.file.read_exact_at(offset, &mut buf)?;
        NodeView::verify(&buf, kind).map_err(|what| self.corrupt(offset, what))?;
        // The read buffer becomes the cached node as it is, without a copy.
        Ok(BlockBytes::from(buf))
    }

    /// Newest entry for `key` in this level, if any.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<(u64, LevelValue)>> {
        self.find(key, false, false).map(Probe::into_entry)
    }

    /// [`LevelFile::get`] for a client's get, which goes on to the runs below when this
    /// one lacks the key: a leaf searched without finding it is counted as a wasted search
    /// ([`LevelFile::wasted_searches`]). The engine's own lookups (GC's liveness checks,
    /// `check`, a flush's estimate of what it shadows) use `get`.
    ///
    /// With `guess`, a search that would read the key's leaf from the device (the filter
    /// admits the key, the cache lacks the leaf) answers [`Probe::Record`] instead when the
    /// file's pinned large pointer table names a record for the key's fingerprint: the
    /// caller reads it, and if it does not hold the key, searches again without `guess`.
    pub(crate) fn search(&self, key: &[u8], guess: bool) -> Result<Probe> {
        self.find(key, true, guess)
    }

    fn find(&self, key: &[u8], count_waste: bool, guess: bool) -> Result<Probe> {
        if self.footer.height == 0 {
            return Ok(Probe::Entry(None));
        }
        if !self.filter_admits(key) {
            return Ok(Probe::Entry(None));
        }
        if let Some(p) = &self.pinned {
            let fences = p.fences();
            let Some(i) = fences.leaf_for(key) else {
                return Ok(Probe::Entry(None)); // below the file's first key
            };
            let offset = fences
                .leaf_offset(i)
                .ok_or_else(|| self.corrupt(0, "pinned fence without a leaf"))?;
            if let Some(table) = p.large().filter(|_| guess && self.cache.enabled()) {
                // The cache is asked once here; on a miss that no guess takes,
                // `load_pinned_leaf` asks again (and counts the miss) before it reads.
                if let Some(node) = self.cache.find(self.id, offset) {
                    self.cache.count(Some(()));
                    let found = self.search_leaf_node(&node, offset, key);
                    return self.searched(found, count_waste).map(Probe::Entry);
                }
                if let Some(ptr) = table.guess(key) {
                    return Ok(Probe::Record(ptr));
                }
            }
            let node = self.load_pinned_leaf(fences, i, offset, None)?;
            let found = self.search_leaf_node(&node, offset, key);
            return self.searched(found, count_waste).map(Probe::Entry);
        }
        let mut offset = self.footer.root;
        let mut height = self.footer.height;
        while height > 1 {
            let node = self.load_node(offset, height)?;
            let view = NodeView::new(&node, NODE_INDEX).map_err(|w| self.corrupt(offset, w))?;
            offset = view
                .child_for(key)
                .and_then(|i| view.child(i))
                .ok_or_else(|| self.corrupt(offset, "undecodable index entry"))?;
            height -= 1;
        }
        self.searched(self.search_leaf(offset, key), count_waste)
            .map(Probe::Entry)
    }

    /// Counts a leaf search that did not find its key, when `count_waste` (see
    /// [`LevelFile::wasted_searches`]), and passes its result on.
    fn searched(
        &self,
        found: Result<Option<(u64, LevelValue)>>,
        count_waste: bool,
    ) -> Result<Option<(u64, LevelValue)>> {
        if count_waste && matches!(found, Ok(None)) {
            self.wasted_searches.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// Clients' gets ([`LevelFile::search`]) that searched one of this file's leaves and did
    /// not find their key, and clients' scans that positioned a cursor in this file and
    /// took no pair from it ([`LevelFile::note_wasted_seek`]), since the file was opened,
    /// plus what earlier processes counted up to their clean close (`crate::search_counts`):
    /// work a merge of the file's level into the next would have spared them
    /// (`Options::merge_bytes_per_wasted_search`).
    pub(crate) fn wasted_searches(&self) -> u64 {
        self.wasted_searches.load(Ordering::Relaxed)
    }

    /// Counts a client's scan that positioned a cursor in this file (a leaf searched for
    /// its start) and took no pair from it, as a wasted search.
    pub(crate) fn note_wasted_seek(&self) {
        self.wasted_searches.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` searches an earlier process counted against this file
    /// (`crate::search_counts::restore`).
    pub(crate) fn add_wasted_searches(&self, n: u64) {
        // Saturating: a count read from a file is bounded (`search_counts::MAX_SEARCHES`),
        // but a sum must never wrap to a count that no longer makes a merge due.
        let _ = self
            .wasted_searches
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(c.saturating_add(n))
            });
    }

    /// The offset of the leaf [`LevelFile::get`] of `key` would read from the device: the
    /// leaf whose range holds `key`, located through the pinned fences, when the filter
    /// admits the key and the cache lacks that leaf. `None` when `get` would read nothing,
    /// or the fences are not pinned (locating the leaf would itself read index nodes).
    fn leaf_to_fetch(&self, key: &[u8]) -> Option<u64> {
        if self.footer.height == 0 || !self.cache.enabled() || !self.filter_admits(key) {
            return None;
        }
        let fences = self.pinned.as_ref()?.fences();
        let offset = fences.leaf_offset(fences.leaf_for(key)?)?;
        (!self.cache.contains(self.id, offset)).then_some(offset)
    }

    /// Counts a [`Probe::Record`] whose record held its key (`hit`) or did not.
    pub(crate) fn note_large_guess(&self, hit: bool) {
        self.cache.note_large_guess(hit);
    }

    /// The entry for `key` in the leaf at `offset`, if it holds one.
    fn search_leaf(&self, offset: u64, key: &[u8]) -> Result<Option<(u64, LevelValue)>> {
        let node = self.load_node(offset, 1)?;
        self.search_leaf_node(&node, offset, key)
    }

    /// The entry for `key` in `node`, the leaf at `offset`, if it holds one.
    fn search_leaf_node(
        &self,
        node: &BlockBytes,
        offset: u64,
        key: &[u8],
    ) -> Result<Option<(u64, LevelValue)>> {
        let view = NodeView::new(node, NODE_LEAF).map_err(|w| self.corrupt(offset, w))?;
        let i = view
            .lower_bound(key, false)
            .ok_or_else(|| self.corrupt(offset, "undecodable leaf key"))?;
        if i == view.count() {
            return Ok(None);
        }
        let e = view
            .leaf_entry(i)
            .ok_or_else(|| self.corrupt(offset, "undecodable leaf entry"))?;
        Ok(e.key.is(key).then(|| (e.lsn, e.value.into())))
    }

    /// Reads an overflow value through `file`, checking its header and checksum.
    fn read_blob(
        &self,
        file: &dyn ReadableFile,
        offset: u64,
        len: u32,
        crc: u32,
    ) -> Result<Vec<u8>> {
        if offset.saturating_add(BLOB_HEADER as u64 + u64::from(len)) > self.data_end {
            return Err(self.corrupt(offset, "overflow value out of range"));
        }
        let mut buf = crate::io::read_buf(BLOB_HEADER + len as usize);
        file.read_exact_at(offset, &mut buf)?;
        let mut d = Decoder::new(&buf);
        let kind = d.u8();
        d.bytes(3);
        let (blen, bcrc, hcrc) = (d.u32(), d.u32(), d.u32());
        if kind != Some(NODE_BLOB) || blen != Some(len) || bcrc != Some(crc) {
            return Err(self.corrupt(
                offset,
                "overflow value header does not match its leaf entry",
            ));
        }
        if buf.get(..12).map(crc32c) != hcrc {
            return Err(self.corrupt(offset, "overflow value header checksum mismatch"));
        }
        buf.drain(..BLOB_HEADER);
        if crc32c(&buf) != crc {
            return Err(self.corrupt(offset, "overflow value checksum mismatch"));
        }
        Ok(buf)
    }

    /// Reads an overflow value into `Inline` (an overflow operand list into `Deltas`);
    /// every other value is returned unchanged
    /// (log pointers are dereferenced by the caller, which knows the logs).
    pub(crate) fn load_overflow(&self, v: LevelValue) -> Result<LevelValue> {
        match v {
            LevelValue::Overflow { offset, len, crc } => self
                .read_blob(self.file.as_ref(), offset, len, crc)
                .map(LevelValue::Inline),
            LevelValue::DeltasOverflow { offset, len, crc } => self
                .read_blob(self.file.as_ref(), offset, len, crc)
                .map(LevelValue::Deltas),
            other => Ok(other),
        }
    }

    /// A cursor positioned before the first entry.
    pub(crate) fn cursor(self: &Arc<Self>) -> LevelCursor {
        LevelCursor {
            file: Arc::clone(self),
            stack: Vec::new(),
            leaf_pos: 0,
            back: false,
            ahead: ReadAhead::default(),
        }
    }

    /// A sequential scanner for compaction, counted under `component`.
    pub(crate) fn scanner(self: &Arc<Self>, component: IoComponent) -> Result<LevelScanner> {
        Ok(LevelScanner {
            reader: self.io.open(&self.path, component)?,
            file: Arc::clone(self),
            pos: 0,
            window: Vec::new(),
            win_off: 0,
            win_len: 0,
            win_start: 0,
            leaf: None,
            spare_value: Vec::new(),
            check_search_keys: false,
            leaves_cached: (false, false),
            note_cached: false,
        })
    }
}

/// A cursor's read-ahead over a pinned file, whatever room the cache has (the group reads
/// of [`LevelFile::read_leaves_around`] stop once it is full): a leaf a forward step
/// misses is read in one device read with the leaves after it, back to back in the file
/// and not cached, two the first time, then twice as many each time up to
/// [`READ_AHEAD_MAX`] bytes (a long scan pays one read per 64 leaves of 4 KiB, a short one
/// reads at most one leaf it may not use; a leaf over half of it never reads ahead). The
/// cursor holds them, unverified, until it steps onto them; a leaf taken is verified and
/// cached as a leaf read alone would be, one that fails to verify is read again alone
/// (which reports the damage), and the span is let go once the walk reaches its end,
/// runs past the file's last leaf, or seeks; leaves never taken go with it, so the cache
/// only ever holds what a walk entered.
#[derive(Default)]
struct ReadAhead {
    /// Positions among the pinned fences of the first leaf of `span` and past its last.
    first: usize,
    end: usize,
    /// Leaves `first..`, back to back as read; empty when none is held.
    span: BlockBytes,
    /// Leaves the next read-ahead reads (0 before the first: two).
    next: usize,
}

/// What a cursor's read-ahead holds of a leaf.
enum Held {
    /// The leaf, verified: a copy of its own (the cache must not keep the whole span).
    Leaf(BlockBytes),
    /// The leaf as read, failing to verify.
    Damaged,
    /// Not held.
    Absent,
}

impl ReadAhead {
    /// What the span holds of leaf `pos` of `leaf` bytes. The span is let go once its
    /// last leaf is taken.
    fn take(&mut self, pos: usize, leaf: usize) -> Held {
        let node = pos
            .checked_sub(self.first)
            .and_then(|i| i.checked_mul(leaf))
            .and_then(|at| Some((at, self.span.get(at..at.checked_add(leaf)?)?)));
        let Some((at, node)) = node else {
            return Held::Absent;
        };
        let held = if NodeView::verify(node, NODE_LEAF).is_ok() {
            Held::Leaf(BlockBytes::copy_from_slice(node))
        } else {
            Held::Damaged
        };
        if at + leaf >= self.span.len() {
            self.span = BlockBytes::new();
        }
        held
    }

    /// Lets the span go once a forward walk reaches `pos` at or past its end (whatever
    /// served the leaves: the cache may have held the last ones).
    fn let_go_before(&mut self, pos: usize) {
        if pos >= self.end {
            self.span = BlockBytes::new();
        }
    }
}

struct Frame {
    node: BlockBytes,
    offset: u64,
    idx: usize,
    count: usize,
}

/// Walks a level's leaves in key order through the index (used by iterators): forward
/// from [`LevelCursor::seek`], backward from [`LevelCursor::seek_back`]. A run holds one
/// version per key, so walking back yields keys strictly descending.
pub(crate) struct LevelCursor {
    file: Arc<LevelFile>,
    /// Path from the root to the current leaf; with a pinned index, the leaf alone. Each
    /// frame's `idx` is the child descended into, or in the leaf the current entry.
    stack: Vec<Frame>,
    /// Position of the current leaf among the pinned fences (pinned files only).
    leaf_pos: usize,
    /// Walking backward (placed by `seek_back`).
    back: bool,
    /// Leaves read ahead of a forward walk (pinned files only).
    ahead: ReadAhead,
}

impl LevelCursor {
    fn height_of_next_frame(&self) -> u32 {
        self.file
            .footer
            .height
            .saturating_sub(self.stack.len() as u32)
    }

    /// Pushes the node at `offset`, one level below the top frame.
    fn push(&mut self, offset: u64) -> Result<()> {
        self.push_node(offset, self.height_of_next_frame())
    }

    /// Pushes the node at `offset` whose subtree height is `height`.
    fn push_node(&mut self, offset: u64, height: u32) -> Result<()> {
        let node = self.file.load_node(offset, height)?;
        self.push_loaded(node, offset, height)
    }

    /// Pushes `node`, read from `offset`, whose subtree height is `height`.
    fn push_loaded(&mut self, node: BlockBytes, offset: u64, height: u32) -> Result<()> {
        let kind = if height == 1 { NODE_LEAF } else { NODE_INDEX };
        let count = NodeView::new(&node, kind)
            .map_err(|w| self.file.corrupt(offset, w))?
            .count();
        self.stack.push(Frame {
            node,
            offset,
            idx: 0,
            count,
        });
        Ok(())
    }

    fn child_of_top(&self) -> Result<u64> {
        let Some(top) = self.stack.last() else {
            return Err(self.file.corrupt(0, "cursor stack empty"));
        };
        NodeView::new(&top.node, NODE_INDEX)
            .ok()
            .and_then(|v| v.child(top.idx))
            .ok_or_else(|| self.file.corrupt(top.offset, "undecodable index entry"))
    }

    /// From an index frame, descends along first children to a leaf.
    fn descend_leftmost(&mut self) -> Result<()> {
        while self.height_of_next_frame() >= 1 {
            let child = self.child_of_top()?;
            self.push(child)?;
        }
        Ok(())
    }

    /// With a pinned index: makes leaf `pos` the cursor's only frame (empties the stack
    /// past the last leaf); `forward`: a step forward, which may read ahead.
    fn enter_pinned_leaf(&mut self, pos: usize, forward: bool) -> Result<()> {
        self.stack.clear();
        self.leaf_pos = pos;
        let Some(p) = &self.file.pinned else {
            return Ok(());
        };
        let Some(offset) = p.fences().leaf_offset(pos) else {
            // Past the last leaf: nothing more to read ahead of.
            self.ahead = ReadAhead::default();
            return Ok(());
        };
        let ahead = forward.then_some(&mut self.ahead);
        let node = self.file.load_pinned_leaf(p.fences(), pos, offset, ahead)?;
        self.push_loaded(node, offset, 1)
    }

    /// Moves to the next leaf that has entries, or empties the stack.
    fn next_leaf(&mut self) -> Result<()> {
        if self.file.pinned.is_some() {
            loop {
                self.enter_pinned_leaf(self.leaf_pos + 1, true)?;
                if self.stack.last().is_none_or(|f| f.count > 0) {
                    return Ok(());
                }
            }
        }
        loop {
            self.stack.pop();
            loop {
                let Some(top) = self.stack.last_mut() else {
                    return Ok(());
                };
                top.idx += 1;
                if top.idx < top.count {
                    break;
                }
                self.stack.pop();
            }
            self.descend_leftmost()?;
            if self.stack.last().is_some_and(|f| f.count > 0) {
                return Ok(());
            }
        }
    }

    /// From an index frame, descends along last children to a leaf, placed on its last
    /// entry.
    fn descend_rightmost(&mut self) -> Result<()> {
        while self.height_of_next_frame() >= 1 {
            let child = self.child_of_top()?;
            self.push(child)?;
            let Some(top) = self.stack.last_mut() else {
                break;
            };
            // (A leaf's last entry, or an index node's last child; an empty leaf is
            // skipped by the caller, an empty index node is damage.)
            top.idx = top.count.saturating_sub(1);
            if top.count == 0 && self.height_of_next_frame() >= 1 {
                return Err(self.file.corrupt(child, "index node without children"));
            }
        }
        Ok(())
    }

    /// Moves to the last entry of the previous leaf that has entries, or empties the
    /// stack.
    fn prev_leaf(&mut self) -> Result<()> {
        if self.file.pinned.is_some() {
            loop {
                let Some(pos) = self.leaf_pos.checked_sub(1) else {
                    self.stack.clear();
                    return Ok(());
                };
                self.enter_pinned_leaf(pos, false)?;
                match self.stack.last_mut() {
                    None => return Ok(()),
                    Some(top) if top.count > 0 => {
                        top.idx = top.count - 1;
                        return Ok(());
                    }
                    Some(_) => {}
                }
            }
        }
        loop {
            self.stack.pop();
            loop {
                let Some(top) = self.stack.last_mut() else {
                    return Ok(());
                };
                if top.idx > 0 {
                    top.idx -= 1;
                    break;
                }
                self.stack.pop();
            }
            self.descend_rightmost()?;
            if self.stack.last().is_some_and(|f| f.count > 0) {
                return Ok(());
            }
        }
    }

    /// Empties the stack and descends to the leaf whose range holds `key`; for an
    /// unbounded key, to the first leaf, or the last with `last`. False when the file has
    /// no leaf to stand on.
    fn descend_to_leaf(&mut self, key: Bound<&[u8]>, last: bool) -> Result<bool> {
        self.stack.clear();
        if self.file.footer.height == 0 {
            return Ok(false);
        }
        if let Some(p) = &self.file.pinned {
            let pos = match key {
                Bound::Unbounded if last => p.fences().len().checked_sub(1),
                Bound::Unbounded => Some(0),
                // A key below the first fence: the first leaf.
                Bound::Included(k) | Bound::Excluded(k) => {
                    Some(p.fences().leaf_for(k).unwrap_or(0))
                }
            };
            let Some(pos) = pos else {
                return Ok(false);
            };
            // A new position: what was read ahead of the old one is let go.
            self.ahead = ReadAhead::default();
            self.enter_pinned_leaf(pos, false)?;
            return Ok(!self.stack.is_empty());
        }
        self.push(self.file.footer.root)?;
        while self.height_of_next_frame() >= 1 {
            let Some(top) = self.stack.last_mut() else {
                break;
            };
            let idx = match key {
                Bound::Unbounded if last => top.count.checked_sub(1),
                Bound::Unbounded => Some(0),
                Bound::Included(k) | Bound::Excluded(k) => NodeView::new(&top.node, NODE_INDEX)
                    .ok()
                    .and_then(|v| v.child_for(k)),
            };
            top.idx = idx.ok_or_else(|| self.file.corrupt(top.offset, "undecodable index key"))?;
            let child = self.child_of_top()?;
            self.push(child)?;
        }
        Ok(!self.stack.is_empty())
    }

    /// The first entry of the current leaf inside `key` as a lower bound (`count` if none;
    /// 0 when unbounded); with `past_equal`, the first past it as an upper bound (after an
    /// included key, at an excluded one).
    fn leaf_lower_bound(&self, key: Bound<&[u8]>, past_equal: bool) -> Result<usize> {
        let Some(top) = self.stack.last() else {
            return Err(self.file.corrupt(0, "cursor stack empty"));
        };
        let idx = match key {
            Bound::Unbounded => Some(0),
            Bound::Included(k) | Bound::Excluded(k) => {
                let strict = matches!(key, Bound::Excluded(_)) != past_equal;
                NodeView::new(&top.node, NODE_LEAF)
                    .ok()
                    .and_then(|v| v.lower_bound(k, strict))
            }
        };
        idx.ok_or_else(|| self.file.corrupt(top.offset, "undecodable leaf key"))
    }

    /// Positions at the last entry at or before `to` (the file's last entry when
    /// unbounded); the cursor then walks backward.
    pub(crate) fn seek_back(&mut self, to: Bound<&[u8]>) -> Result<()> {
        self.back = true;
        if !self.descend_to_leaf(to, true)? {
            return Ok(());
        }
        // The first entry past `to`: the cursor stands on the one before it.
        let past = match to {
            Bound::Unbounded => self.stack.last().map_or(0, |f| f.count),
            _ => self.leaf_lower_bound(to, true)?,
        };
        match past.checked_sub(1) {
            Some(idx) => {
                if let Some(top) = self.stack.last_mut() {
                    top.idx = idx;
                }
            }
            None => self.prev_leaf()?,
        }
        Ok(())
    }

    /// Positions at the first entry at or after `from`; the cursor then walks forward.
    pub(crate) fn seek(&mut self, from: Bound<&[u8]>) -> Result<()> {
        self.back = false;
        if !self.descend_to_leaf(from, false)? {
            return Ok(());
        }
        let idx = self.leaf_lower_bound(from, false)?;
        let Some(top) = self.stack.last_mut() else {
            return Ok(());
        };
        top.idx = idx;
        if top.idx >= top.count {
            self.next_leaf()?;
        }
        Ok(())
    }

    /// Returns the current entry and moves on (to the next entry, or to the previous one
    /// after `seek_back`).
    pub(crate) fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
        let Some(top) = self.stack.last_mut() else {
            return Ok(None);
        };
        let entry = NodeView::new(&top.node, NODE_LEAF)
            .ok()
            .and_then(|v| v.leaf_entry(top.idx))
            .map(|e| (e.key.to_vec(), e.lsn, LevelValue::from(e.value)))
            .ok_or_else(|| self.file.corrupt(top.offset, "undecodable leaf entry"))?;
        if self.back {
            match top.idx.checked_sub(1) {
                Some(idx) => top.idx = idx,
                None => self.prev_leaf()?,
            }
        } else {
            top.idx += 1;
            if top.idx >= top.count {
                self.next_leaf()?;
            }
        }
        Ok(Some(entry))
    }

    /// The file this cursor reads (to resolve overflow values).
    pub(crate) fn file(&self) -> &Arc<LevelFile> {
        &self.file
    }
}

/// Reads a level file front to back in large chunks, yielding leaf entries in key order.
pub(crate) struct LevelScanner {
    file: Arc<LevelFile>,
    reader: Arc<dyn ReadableFile>,
    pos: u64,
    /// The bytes of the file from `win_start`: `win_len` of them at `win_off` in `window`,
    /// an offset aligned to [`IO_ALIGN`] so that a direct read fills them without a
    /// bounce buffer.
    window: Vec<u8>,
    win_off: usize,
    win_len: usize,
    win_start: u64,
    /// The leaf being read: where it starts in `window`, its file offset, the next entry
    /// and the entry count (checked when loaded; the window is not read again until it
    /// is done).
    leaf: Option<(usize, u64, usize, usize)>,
    /// A value buffer kept while the merge's entry holds a value that is not in place
    /// (a pointer), for the next in-place value [`LevelScanner::next_into`] copies.
    spare_value: Vec<u8>,
    /// Whether each leaf's search keys are checked against its keys (`check` does;
    /// a compaction does not pay for it).
    check_search_keys: bool,
    /// Whether the node cache held the leaf before the current one, and the current one,
    /// when the scanner reached them (see [`LevelScanner::entry_was_cached`]); noted only
    /// when `note_cached`.
    leaves_cached: (bool, bool),
    note_cached: bool,
}

impl LevelScanner {
    /// Also checks, leaf by leaf, that the search keys a lookup compares agree with the
    /// keys (a leaf whose checksum holds but whose search keys lie would misdirect gets).
    pub(crate) fn checking_search_keys(mut self) -> Self {
        self.check_search_keys = true;
        self
    }

    /// Also notes, leaf by leaf, whether the node cache holds it (for
    /// [`LevelScanner::entry_was_cached`]).
    pub(crate) fn noting_cached_leaves(mut self) -> Self {
        self.note_cached = true;
        self
    }

    /// Whether the entry the scanner yielded before its last one came from a leaf the
    /// node cache held when the scanner reached it (false unless
    /// [`LevelScanner::noting_cached_leaves`]). A merge reads each source one entry ahead
    /// of what it writes, so that is the entry it is writing; when the last entry is the
    /// first of its leaf, either leaf being cached counts.
    pub(crate) fn entry_was_cached(&self) -> bool {
        let (before, current) = self.leaves_cached;
        match self.leaf {
            Some((_, _, yielded, _)) if yielded <= 1 => before || current,
            _ => current,
        }
    }

    /// Entries of the file being scanned.
    pub(crate) fn file_entries(&self) -> u64 {
        self.file.entries()
    }

    /// Makes `[pos, pos + len)` available in the window.
    fn ensure(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let in_window =
            pos >= self.win_start && pos + len as u64 <= self.win_start + self.win_len as u64;
        if !in_window {
            let avail = self.file.data_end.saturating_sub(pos);
            if (len as u64) > avail {
                return Err(self
                    .file
                    .corrupt(pos, "node extends past the end of the level data"));
            }
            let n = usize::try_from(avail.min(SCAN_WINDOW as u64))
                .unwrap_or(SCAN_WINDOW)
                .max(len);
            if self.window.len() < n + IO_ALIGN {
                self.window = vec![0; n + IO_ALIGN];
            }
            // Nothing is in the window until the read below fills it.
            self.win_len = 0;
            let off = self.window.as_ptr().align_offset(IO_ALIGN);
            let Some(dst) = off
                .checked_add(n)
                .and_then(|end| self.window.get_mut(off..end))
            else {
                return Err(Error::Internal(format!(
                    "level scanner window of {} bytes holds no aligned {n}",
                    self.window.len()
                )));
            };
            self.reader.read_exact_at(pos, dst)?;
            (self.win_off, self.win_len, self.win_start) = (off, n, pos);
        }
        let start = usize::try_from(pos - self.win_start)
            .map_or(usize::MAX, |d| self.win_off.saturating_add(d));
        self.window
            .get(start..start.saturating_add(len))
            .ok_or_else(|| self.file.corrupt(pos, "scanner window out of range"))
    }

    /// Loads the next leaf into `self.leaf`; false at the end of the file.
    fn load_next_leaf(&mut self) -> Result<bool> {
        let (leaf_size, index_size) = (
            self.file.footer.leaf_size as usize,
            self.file.footer.index_size as usize,
        );
        // The filter unit or the large pointer table, if any, ends the nodes.
        let nodes_end = self.file.nodes_end();
        while self.pos < nodes_end {
            let pos = self.pos;
            let head = self.ensure(pos, BLOB_HEADER)?;
            match head.first().copied() {
                Some(NODE_LEAF) => {
                    let check_search_keys = self.check_search_keys;
                    let checked = NodeView::verify(self.ensure(pos, leaf_size)?, NODE_LEAF)
                        .and_then(|v| {
                            if check_search_keys {
                                v.check_search_keys()?;
                            }
                            Ok(v.count())
                        });
                    let count = checked.map_err(|w| self.file.corrupt(pos, w))?;
                    let start = usize::try_from(pos - self.win_start)
                        .map_or(usize::MAX, |d| self.win_off.saturating_add(d));
                    self.pos += leaf_size as u64;
                    self.leaf = Some((start, pos, 0, count));
                    if self.note_cached {
                        let cached = self.file.cache.contains(self.file.id, pos);
                        self.leaves_cached = (self.leaves_cached.1, cached);
                    }
                    return Ok(true);
                }
                Some(NODE_INDEX) => {
                    // Not needed for the entries, but lookups descend through it: verify
                    // it, so `check` reports a damaged index node a `get` would hit.
                    let node = self.ensure(pos, index_size)?;
                    if let Err(w) = NodeView::verify(node, NODE_INDEX) {
                        return Err(self.file.corrupt(pos, w));
                    }
                    self.pos += index_size as u64;
                }
                Some(NODE_BLOB) => {
                    let len = Decoder::new(head.get(4..8).unwrap_or_default()).u32();
                    let Some(len) = len else {
                        return Err(self.file.corrupt(pos, "truncated overflow header"));
                    };
                    if head.get(..12).map(crc32c)
                        != Decoder::new(head.get(12..16).unwrap_or_default()).u32()
                    {
                        return Err(self
                            .file
                            .corrupt(pos, "overflow value header checksum mismatch"));
                    }
                    self.pos +=
                        (BLOB_HEADER as u64 + u64::from(len)).next_multiple_of(IO_ALIGN as u64);
                }
                _ => return Err(self.file.corrupt(pos, "unknown node kind")),
            }
        }
        Ok(false)
    }

    /// The next entry in key order.
    pub(crate) fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
        let (mut key, mut value) = (Vec::new(), LevelValue::Tombstone);
        Ok(self
            .next_into(&mut key, &mut value)?
            .map(|lsn| (key, lsn, value)))
    }

    /// The next entry in key order into `key` and `value`, reusing their buffers (a merge
    /// reads into the same few entry after entry); its LSN, or `None` at the end.
    pub(crate) fn next_into(
        &mut self,
        key: &mut Vec<u8>,
        value: &mut LevelValue,
    ) -> Result<Option<u64>> {
        loop {
            if let Some((start, off, idx, count)) = &mut self.leaf {
                if *idx < *count {
                    let leaf_size = self.file.footer.leaf_size as usize;
                    let Some(e) = self
                        .window
                        .get(*start..start.saturating_add(leaf_size))
                        .and_then(|node| NodeView::new(node, NODE_LEAF).ok())
                        .and_then(|v| v.leaf_entry(*idx))
                    else {
                        return Err(self.file.corrupt(*off, "undecodable leaf entry"));
                    };
                    *idx += 1;
                    key.clear();
                    e.key.append_to(key);
                    match e.value {
                        ValueRef::Inline(b) => value.set_inline(b, &mut self.spare_value),
                        other => value.set_other(LevelValue::from(other), &mut self.spare_value),
                    }
                    return Ok(Some(e.lsn));
                }
            }
            if !self.load_next_leaf()? {
                return Ok(None);
            }
        }
    }

    /// Reads an overflow value (through the scanner's handle) into `Inline`; every other
    /// value is returned unchanged.
    pub(crate) fn load_overflow(&self, v: LevelValue) -> Result<LevelValue> {
        match v {
            LevelValue::Overflow { offset, len, crc } => self
                .file
                .read_blob(self.reader.as_ref(), offset, len, crc)
                .map(LevelValue::Inline),
            LevelValue::DeltasOverflow { offset, len, crc } => self
                .file
                .read_blob(self.reader.as_ref(), offset, len, crc)
                .map(LevelValue::Deltas),
            other => Ok(other),
        }
    }
}
