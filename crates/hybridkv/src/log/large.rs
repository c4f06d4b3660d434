//! The large (value) log: segments `NNNNNNNN.vlog` holding large pairs, their only durable
//! copy (Parallax §3.1; WiscKey's vLog). Transient segments (`NNNNNNNN.tlog`, medium pairs
//! on their way to the merge level) use the same format ([`SegmentKind`]).
//!
//! Segment layout (FORMAT.md, "Large log"): a 16-byte header, then records
//! `[key_len u32][value_len u32][lsn u64][crc u32][key][value]`, the CRC32C covering the
//! first 16 bytes, the key and the value. Records carry the key so garbage collection can
//! check, by looking the key up, whether the index still points at them. [`SegmentSizes`]
//! remembers the sizes of complete segments, which never change, for GC's passes.

use super::ptr::LogPtr;
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::filename::FileKind;
use crate::format::{crc32c, crc32c_append, Decoder};
use crate::io::{Io, IoComponent, ReadableFile, WritableFile};
use crate::options::MAX_VALUE_SIZE;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"HKVLLOG\0";
/// Format version of large-log segments.
pub(crate) const VERSION: u32 = 1;
/// Bytes before the first record.
pub(crate) const SEGMENT_HEADER: u64 = 16;
/// Bytes of a record before its key.
pub(crate) const RECORD_HEADER: usize = 20;

/// The two logs that use this segment format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentKind {
    /// The large (value) log, `NNNNNNNN.vlog`, collected by GC.
    Large,
    /// The transient log of medium pairs, `NNNNNNNN.tlog`, freed whole at the merge level.
    Transient,
}

impl SegmentKind {
    /// Its kind of file (`filename`).
    pub(crate) fn file_kind(self) -> FileKind {
        match self {
            SegmentKind::Large => FileKind::LargeSegment,
            SegmentKind::Transient => FileKind::TransientSegment,
        }
    }

    /// The I/O component its reads and writes are counted under.
    pub(crate) fn component(self) -> IoComponent {
        match self {
            SegmentKind::Large => IoComponent::LargeLog,
            SegmentKind::Transient => IoComponent::TransientLog,
        }
    }

    /// File name of segment `id`.
    pub(crate) fn file_name(self, id: u64) -> String {
        self.file_kind().name(id)
    }
}

/// File name of large-log segment `id`.
pub(crate) fn file_name(id: u64) -> String {
    SegmentKind::Large.file_name(id)
}

fn segment_header() -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The segment being appended to.
pub(crate) struct SegmentWriter {
    id: u64,
    file: Box<dyn WritableFile>,
    /// Bytes made durable so far.
    synced: u64,
}

impl SegmentWriter {
    /// Creates segment `id` in `dir`, durably. The header is synced before the directory:
    /// once the file's name survives a power loss, so does its header (a torn header
    /// would make the whole segment unreadable).
    /// A failure after the file exists cuts it to what was appended (best effort): a
    /// mapped file reserved space past its header, and a segment that is not the newest
    /// is read strictly.
    pub(crate) fn create(io: &Io, dir: &Path, kind: SegmentKind, id: u64) -> Result<Self> {
        let mut file = io.create(&dir.join(kind.file_name(id)), kind.component())?;
        let started = file
            .append(&segment_header())
            .and_then(|()| file.sync_data())
            .and_then(|()| io.fs().sync_dir(dir));
        if let Err(e) = started {
            let _ = file.finish();
            return Err(e);
        }
        Ok(SegmentWriter {
            id,
            file,
            synced: SEGMENT_HEADER,
        })
    }

    /// Whether records were appended since the last sync.
    pub(crate) fn has_unsynced(&self) -> bool {
        self.file.len() > self.synced
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Bytes in the segment so far.
    pub(crate) fn len(&self) -> u64 {
        self.file.len()
    }

    /// Appends one record (buffered until [`Self::commit`]).
    pub(crate) fn append(&mut self, key: &[u8], value: &[u8], lsn: u64) -> Result<LogPtr> {
        self.append_record(&record_header(key, value, lsn), key, value)
    }

    /// [`Self::append`], and the record kept in `cache` as a read would keep it (a
    /// record over [`CACHE_RECORD_MAX`] is only appended). A value just written is what
    /// a read soon wants (a zipfian update, a fold of deltas), and a direct read of bytes
    /// still dirty in the page cache would first make the kernel write them back. The
    /// callers append this way only a record that takes the place of one in use (the
    /// value a get just folded, a relocated record the cache held), so it enters the
    /// cache as used ([`BlockCache::insert_in_use`]), not through its small probation
    /// queue, which a GC pass relocating thousands of records would cycle through.
    pub(crate) fn append_cached(
        &mut self,
        key: &[u8],
        value: &[u8],
        lsn: u64,
        cache: &BlockCache,
    ) -> Result<LogPtr> {
        let header = record_header(key, value, lsn);
        let ptr = self.append_record(&header, key, value)?;
        let len = ptr.len as usize;
        if len <= CACHE_RECORD_MAX {
            let mut rec = Vec::with_capacity(len);
            rec.extend_from_slice(&header);
            rec.extend_from_slice(key);
            rec.extend_from_slice(value);
            cache.insert_in_use(self.id, ptr.offset, Bytes::from(rec));
        }
        Ok(ptr)
    }

    fn append_record(
        &mut self,
        header: &[u8; RECORD_HEADER],
        key: &[u8],
        value: &[u8],
    ) -> Result<LogPtr> {
        let offset = self.file.len();
        self.file.append(header)?;
        self.file.append(key)?;
        self.file.append(value)?;
        Ok(LogPtr {
            segment: self.id,
            offset,
            len: (RECORD_HEADER + key.len() + value.len()) as u32,
        })
    }

    /// Hands every record to the OS and cuts the file to them (a segment appended to
    /// through a memory map reserved space past them), not durably: nothing is appended
    /// after. A close's last step; a crash before the cut is written back leaves a tail
    /// of zeros, which recovery cuts (only the newest segment can have one).
    pub(crate) fn finish(&mut self) -> Result<()> {
        self.file.finish()
    }

    /// [`SegmentWriter::finish`], durably, length included: a full segment, before the
    /// next one starts (so that only the newest segment can end in a reserved tail).
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.file.finish()?;
        self.file.sync_data()?;
        self.synced = self.file.len();
        Ok(())
    }

    /// Hands appended records to the OS; with `sync`, makes them durable.
    pub(crate) fn commit(&mut self, sync: bool) -> Result<()> {
        if sync {
            self.file.sync_data()?;
            self.synced = self.file.len();
            Ok(())
        } else {
            self.file.flush()
        }
    }
}

/// A record's header: key and value lengths, LSN, and the checksum of all three and the
/// key and value bytes.
fn record_header(key: &[u8], value: &[u8], lsn: u64) -> [u8; RECORD_HEADER] {
    let mut h = [0u8; RECORD_HEADER];
    h[..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
    h[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    h[8..16].copy_from_slice(&lsn.to_le_bytes());
    let crc = crc32c_append(crc32c_append(crc32c(&h[..16]), key), value);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

/// One decoded record.
// `pub`, not `pub(crate)`: `hybridkv::fuzzing` re-exports it (the module stays private).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LargeRecord {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// The LSN the pair was written with.
    pub lsn: u64,
}

/// A record's parts, borrowed from the buffer it was decoded from.
struct RecordView<'a> {
    key: &'a [u8],
    value: &'a [u8],
    lsn: u64,
}

/// Decodes the record at the start of `buf` (exactly `buf.len()` bytes when `exact`),
/// checking its CRC when `verify` (a record cached after its check is not checked again).
fn parse_record(
    buf: &[u8],
    exact: bool,
    verify: bool,
) -> std::result::Result<(RecordView<'_>, usize), &'static str> {
    let mut d = Decoder::new(buf);
    let (Some(klen), Some(vlen), Some(lsn), Some(crc)) = (d.u32(), d.u32(), d.u64(), d.u32())
    else {
        return Err("truncated record header");
    };
    let total = RECORD_HEADER
        .checked_add(klen as usize)
        .and_then(|t| t.checked_add(vlen as usize))
        .ok_or("record length overflows")?;
    if exact && total != buf.len() {
        return Err("record length does not match its pointer");
    }
    let key = d.bytes(klen as usize).ok_or("record key past end")?;
    let value = d.bytes(vlen as usize).ok_or("record value past end")?;
    if verify {
        let head = buf.get(..16).ok_or("truncated record header")?;
        if crc32c_append(crc32c_append(crc32c(head), key), value) != crc {
            return Err("record checksum mismatch");
        }
    }
    Ok((RecordView { key, value, lsn }, total))
}

/// Decodes and checks the record at the start of `buf` into owned parts.
fn decode_record(
    buf: &[u8],
    exact: bool,
) -> std::result::Result<(LargeRecord, usize), &'static str> {
    let (rec, total) = parse_record(buf, exact, true)?;
    Ok((
        LargeRecord {
            key: rec.key.to_vec(),
            value: rec.value.to_vec(),
            lsn: rec.lsn,
        },
        total,
    ))
}

/// Open log segments (large and transient) by file id: what readers resolve pointers with.
pub(crate) type SegmentSet = std::collections::BTreeMap<u64, std::sync::Arc<SegmentFile>>;

/// A segment open for reading. Deleted when marked obsolete and no longer referenced.
pub(crate) struct SegmentFile {
    id: u64,
    path: PathBuf,
    file: Arc<dyn ReadableFile>,
    /// Where gets and scans keep the records they read (`read_through_cache`).
    cache: Option<Arc<BlockCache>>,
    /// A transient segment: its records are sorted by key and it is whole once opened
    /// (written and synced before it is published), so it is cached in blocks: a miss
    /// reads the block that holds its record, whose other records are the values of the
    /// keys next to it ([`SegmentFile::read_blocks`]).
    sorted: bool,
    io: Io,
    obsolete: AtomicBool,
}

impl std::fmt::Debug for SegmentFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentFile").field("id", &self.id).finish()
    }
}

impl Drop for SegmentFile {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            // A failure leaves an orphan that the next open sweeps.
            let _ = self.io.fs().remove(&self.path);
        }
    }
}

impl SegmentFile {
    pub(crate) fn open(io: &Io, dir: &Path, kind: SegmentKind, id: u64) -> Result<Self> {
        let path = dir.join(kind.file_name(id));
        let file = io.open(&path, kind.component())?;
        Ok(SegmentFile {
            id,
            path,
            file,
            cache: None,
            sorted: kind == SegmentKind::Transient,
            io: io.clone(),
            obsolete: AtomicBool::new(false),
        })
    }

    /// Lets [`SegmentFile::read_through_cache`] keep the records it reads in `cache`.
    pub(crate) fn with_cache(mut self, cache: Arc<BlockCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    /// Bytes in the file now (it may still be growing).
    pub(crate) fn len(&self) -> u64 {
        self.io.fs().file_len(&self.path).unwrap_or(0)
    }

    /// Reads the record `ptr` points at from the file and checks that it holds `key`.
    pub(crate) fn read(&self, ptr: LogPtr, key: &[u8]) -> Result<Vec<u8>> {
        check_ptr_len(ptr, &self.path)?;
        let mut buf = crate::io::read_buf(ptr.len as usize);
        self.read_into(ptr, &mut buf)?;
        decode_checked(&buf, ptr, key, &self.path)
    }

    /// [`SegmentFile::read`] for gets and scans: the record comes from the block cache
    /// when it holds it ([`SegmentFile::cached_value`]), else from the file: in a sorted
    /// segment with the block that holds it, which is cached ([`SegmentFile::read_blocks`]),
    /// else alone, and then cached alone. Segment ids are file ids, never reused, so a
    /// record of a deleted segment can never answer for another file.
    pub(crate) fn read_through_cache(&self, ptr: LogPtr, key: &[u8]) -> Result<Bytes> {
        if let Some(value) = self.cached_value(ptr, key) {
            return value;
        }
        check_ptr_len(ptr, &self.path)?;
        if let Some(value) = self.read_blocks(ptr, key) {
            return value;
        }
        let (rec, value) = self.read_alone(ptr, key)?;
        self.keep(ptr, rec);
        Ok(value)
    }

    /// The record `ptr` points at, read alone (its length checked against what a record
    /// may be before a buffer is sized by it), and its value, checked to hold `key`: a
    /// view of the record, which is what a caller caches, so nothing is copied.
    fn read_alone(&self, ptr: LogPtr, key: &[u8]) -> Result<(Bytes, Bytes)> {
        check_ptr_len(ptr, &self.path)?;
        let mut buf = crate::io::read_buf(ptr.len as usize);
        self.read_into(ptr, &mut buf)?;
        let rec = Bytes::from(buf);
        let value = value_in(&rec, ptr, key, &self.path, true)?;
        Ok((rec, value))
    }

    /// [`SegmentFile::read_through_cache`] of a record that may hold another key than
    /// `key` (a level file's large pointer table names it by the key's fingerprint): its
    /// value when it holds `key`, else `None`, as when it cannot be read, is damaged, or is
    /// longer than a record the cache keeps (a guess that names another key's record would
    /// read it whole; such records are rare, and their gets read the leaf). The caller
    /// then searches the leaf, which reports what a read of the key's own record finds. A
    /// record that holds `key` is cached as a get's is when `keep` (not when the get folds
    /// deltas into it and writes the result back: it is then read for the last time).
    pub(crate) fn read_if_holds(&self, ptr: LogPtr, key: &[u8], keep: bool) -> Option<Bytes> {
        if let Some(found) = self.cached_value(ptr, key) {
            return found.ok();
        }
        if ptr.len as usize > CACHE_RECORD_MAX {
            return None;
        }
        let (rec, value) = self.read_alone(ptr, key).ok()?;
        if keep {
            self.keep(ptr, rec);
        }
        Some(value)
    }

    /// [`SegmentFile::read_through_cache`] for a record likely to be superseded (the
    /// base of deltas a get folds and means to write back): from the cache when it is
    /// there (and left there: the write-back may still be skipped, and then the record
    /// is the key's base still), else read alone and not cached, so it does not push out
    /// what later reads want.
    pub(crate) fn read_passing(&self, ptr: LogPtr, key: &[u8]) -> Result<Bytes> {
        if let Some(value) = self.cached_value(ptr, key) {
            return value;
        }
        self.read_alone(ptr, key).map(|(_, value)| value)
    }

    /// For a sorted segment's record of at most a block: reads the
    /// [`SEGMENT_BLOCK`]-aligned blocks that hold the record `ptr` points at (and, while
    /// the cache has room, the blocks after them up to `BlockCache::warm_read_bytes`),
    /// caches each block whole, unchecked, and returns the record's value, checked. A
    /// sorted segment holds a run's medium values in key order, so a block holds the
    /// values of the keys next to `key`: of a recent run, keys written together and
    /// likely read together. Its records are checked one by one as gets take them
    /// ([`SegmentFile::cached_value`]), so damage in a block is reported by the get of
    /// the damaged record alone. `None` when this read does not apply (not a
    /// sorted segment, no cache, a pointer past the end) or fails: the caller then reads
    /// the record alone and reports what that read finds.
    fn read_blocks(&self, ptr: LogPtr, key: &[u8]) -> Option<Result<Bytes>> {
        if !self.sorted || u64::from(ptr.len) > SEGMENT_BLOCK {
            return None;
        }
        let cache = self.cache.as_ref().filter(|c| c.enabled())?;
        let file_len = self.file.len();
        let rec_end = ptr.offset.checked_add(u64::from(ptr.len))?;
        if rec_end > file_len || file_len >= BLOCK_TAG {
            return None;
        }
        let start = ptr.offset - ptr.offset % SEGMENT_BLOCK;
        let own_end = rec_end.next_multiple_of(SEGMENT_BLOCK);
        // The window's end on a block boundary too (the option may be any size), so
        // that every block cached but the file's last is whole.
        let window_end = start.saturating_add(cache.warm_read_bytes());
        let end = own_end
            .max(window_end - window_end % SEGMENT_BLOCK)
            .min(file_len);
        let mut buf = crate::io::read_buf(usize::try_from(end - start).ok()?);
        self.file.read_exact_at(start, &mut buf).ok()?;
        let buf = Bytes::from(buf);
        // A read of one block is that block, as read; several are split into blocks of
        // their own allocation, each weighed by its own length and evicted alone.
        let single = buf.len() as u64 <= SEGMENT_BLOCK;
        let at = usize::try_from(ptr.offset - start).ok()?;
        let rec_len = ptr.len as usize;
        let mut value = None;
        let mut added = 0;
        for (i, chunk) in buf.chunks(SEGMENT_BLOCK as usize).enumerate() {
            let offset = start + i as u64 * SEGMENT_BLOCK;
            // The first block, when it holds the record whole: its value is a view of it.
            let holds_record = i == 0 && at + rec_len <= chunk.len();
            let held = cache.contains(self.id, BLOCK_TAG | offset);
            if held && !holds_record {
                continue;
            }
            let block = if single {
                buf.clone()
            } else {
                Bytes::copy_from_slice(chunk)
            };
            if holds_record {
                let rec = block.slice(at..at + rec_len);
                value = Some(value_in(&rec, ptr, key, &self.path, true));
            }
            if !held {
                cache.insert(self.id, BLOCK_TAG | offset, block);
                // A neighbour: a block past the record's own.
                added += u64::from(offset >= rec_end);
            }
        }
        cache.note_warm_read(added);
        Some(value.unwrap_or_else(|| {
            // The record crosses into the next block: copied out of the two.
            let rec = Bytes::copy_from_slice(buf.get(at..at + rec_len).unwrap_or_default());
            value_in(&rec, ptr, key, &self.path, true)
        }))
    }

    /// The value of the record `ptr` points at, taken out of the block cache if it holds
    /// the record alone (`None`: it does not). Blocks of a sorted segment are left to
    /// age out: the merge that asks reads the segment in windows anyway.
    pub(crate) fn take_cached(&self, ptr: LogPtr, key: &[u8]) -> Option<Result<Bytes>> {
        if ptr.offset & BLOCK_TAG != 0 {
            return None;
        }
        let rec = self
            .cache
            .as_ref()?
            .take(self.id, ptr.offset, ptr.len as usize)?;
        Some(value_in(&rec, ptr, key, &self.path, false))
    }

    /// The value of the record `ptr` points at, from the block cache: from the record
    /// cached alone (checked when it was read: only its key is compared), else, in a
    /// sorted segment, from the cached block (or two) holding it, checked in full as it
    /// is taken. A record a block holds that fails its check makes the cache forget that
    /// block and answers `None`: the caller reads the record from the file, which
    /// reports damage on disk and mends a block damaged on its way into memory. One
    /// lookup counted, a hit if the value came from memory.
    fn cached_value(&self, ptr: LogPtr, key: &[u8]) -> Option<Result<Bytes>> {
        let cache = self.cache.as_ref()?;
        // No record lies that far (a damaged pointer): never another entry's key.
        if ptr.offset & BLOCK_TAG != 0 {
            return cache.count(None);
        }
        let len = ptr.len as usize;
        if let Some(rec) = cache.find(self.id, ptr.offset).filter(|r| r.len() == len) {
            return cache.count(Some(value_in(&rec, ptr, key, &self.path, false)));
        }
        let found = self.in_blocks(cache, ptr).and_then(|(rec, first, across)| {
            match value_in(&rec, ptr, key, &self.path, true) {
                Ok(value) => Some(Ok(value)),
                Err(_) => {
                    cache.forget(self.id, BLOCK_TAG | first);
                    if across {
                        cache.forget(self.id, BLOCK_TAG | (first + SEGMENT_BLOCK));
                    }
                    None
                }
            }
        });
        cache.count(found)
    }

    /// The bytes of record `ptr` inside the cached blocks of this sorted segment
    /// (unchecked), with the offset of the block holding its start and whether it
    /// crosses into the next one: a view of the block, or a copy out of the two.
    fn in_blocks(&self, cache: &BlockCache, ptr: LogPtr) -> Option<(Bytes, u64, bool)> {
        if !self.sorted || u64::from(ptr.len) > SEGMENT_BLOCK {
            return None;
        }
        let len = ptr.len as usize;
        let start = ptr.offset - ptr.offset % SEGMENT_BLOCK;
        let at = usize::try_from(ptr.offset - start).ok()?;
        let end = at.checked_add(len)?;
        let block = cache.find(self.id, BLOCK_TAG | start)?;
        if end <= block.len() {
            return Some((block.slice(at..end), start, false));
        }
        // Across the end of its block (a record is at most a block: into the next one).
        // Only a whole block has a next one.
        if block.len() as u64 != SEGMENT_BLOCK {
            return None;
        }
        let head = block.get(at..)?;
        let second = start.checked_add(SEGMENT_BLOCK)?;
        let next = cache.find(self.id, BLOCK_TAG | second)?;
        let tail = next.get(..len.checked_sub(head.len())?)?;
        let mut rec = Vec::with_capacity(len);
        rec.extend_from_slice(head);
        rec.extend_from_slice(tail);
        Some((Bytes::from(rec), start, true))
    }

    /// Reads back into the cache the entries a hint file names for this segment
    /// (`entries`: (cache tag, length), ascending) that the cache lacks, in few device
    /// reads ([`Io::read_spans`]), each while the cache has room for it
    /// ([`BlockCache::has_room_to_reload`]): records cached alone, each cached only if it
    /// parses and passes its CRC (its key is compared by the get that takes it), and a sorted
    /// segment's whole blocks, cached as read, as [`SegmentFile::read_blocks`] caches
    /// them (their records are checked as they are taken). An entry at an impossible
    /// offset or length is left out. `go_on()` is asked before each batch of reads.
    /// Returns (entries cached, bytes read).
    pub(crate) fn reload_entries(
        &self,
        entries: &[(u64, u32)],
        go_on: &mut dyn FnMut() -> bool,
    ) -> (u64, u64) {
        let Some(cache) = self.cache.as_ref().filter(|c| c.enabled()) else {
            return (0, 0);
        };
        let fresh = |tag: u64| !cache.contains(self.id, tag);
        let records: Vec<(u64, u32)> = entries
            .iter()
            .copied()
            .filter(|&(tag, len)| {
                tag & BLOCK_TAG == 0
                    && (RECORD_HEADER..=CACHE_RECORD_MAX).contains(&(len as usize))
                    && fresh(tag)
            })
            .collect();
        // Blocks by their offset in the file (ascending, as their tags are).
        let blocks: Vec<(u64, u32)> = entries
            .iter()
            .copied()
            .filter(|&(tag, len)| {
                let offset = tag & !BLOCK_TAG;
                self.sorted
                    && tag & BLOCK_TAG != 0
                    && offset.is_multiple_of(SEGMENT_BLOCK)
                    && u64::from(len) <= SEGMENT_BLOCK
                    && fresh(tag)
            })
            .map(|(tag, len)| (tag & !BLOCK_TAG, len))
            .collect();
        let mut cached = 0;
        let mut read = self.io.read_spans(
            self.file.as_ref(),
            &records,
            crate::io::SPAN_MAX_GAP,
            crate::io::SPAN_MAX_READ,
            go_on,
            &mut |i, rec| {
                if parse_record(rec, true, true).is_ok()
                    && cache.has_room_to_reload(rec.len() as u64)
                {
                    cache.insert(self.id, records[i].0, Bytes::copy_from_slice(rec));
                    cached += 1;
                }
            },
        );
        read += self.io.read_spans(
            self.file.as_ref(),
            &blocks,
            crate::io::SPAN_MAX_GAP,
            crate::io::SPAN_MAX_READ,
            go_on,
            &mut |i, block| {
                if cache.has_room_to_reload(block.len() as u64) {
                    cache.insert(
                        self.id,
                        BLOCK_TAG | blocks[i].0,
                        Bytes::copy_from_slice(block),
                    );
                    cached += 1;
                }
            },
        );
        (cached, read)
    }

    /// Caches a record that passed its checks (not one over [`CACHE_RECORD_MAX`]). `rec`
    /// must be exactly the record's bytes, not a view into a larger buffer: the cache
    /// weighs an entry by its length.
    fn keep(&self, ptr: LogPtr, rec: Bytes) {
        if let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| rec.len() <= CACHE_RECORD_MAX && ptr.offset & BLOCK_TAG == 0)
        {
            cache.insert(self.id, ptr.offset, rec);
        }
    }

    /// Whether a scan's span of this segment is read in whole blocks and cached as
    /// blocks ([`Span::widen_to_blocks`]): a sorted segment with a cache, as gets read it
    /// ([`SegmentFile::read_blocks`]).
    fn scans_in_blocks(&self) -> bool {
        self.sorted
            && self.cache.as_ref().is_some_and(|c| c.enabled())
            && self.file.len() < BLOCK_TAG
    }

    /// Caches the blocks of `buf`, read from `start` (a block boundary), that the cache
    /// lacks: each whole block, and a last partial one only where the file ends. Each its
    /// own allocation, unchecked: their records are checked as they are taken
    /// ([`SegmentFile::cached_value`]).
    fn keep_blocks(&self, start: u64, buf: &[u8]) {
        let Some(cache) = self.cache.as_ref() else {
            return;
        };
        let file_len = self.file.len();
        for (i, chunk) in buf.chunks(SEGMENT_BLOCK as usize).enumerate() {
            let offset = start + i as u64 * SEGMENT_BLOCK;
            let whole =
                chunk.len() as u64 == SEGMENT_BLOCK || offset + chunk.len() as u64 == file_len;
            if whole && !cache.contains(self.id, BLOCK_TAG | offset) {
                cache.insert(self.id, BLOCK_TAG | offset, Bytes::copy_from_slice(chunk));
            }
        }
    }

    /// Reads `buf.len()` bytes at `ptr.offset` (a pointer past the end is corruption).
    pub(crate) fn read_into(&self, ptr: LogPtr, buf: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(ptr.offset, buf)
            .map_err(|e| self.read_error(ptr, e))
    }

    /// A read's error as the reader reports it: past the end of the segment is corruption.
    fn read_error(&self, ptr: LogPtr, e: Error) -> Error {
        match e {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof => {
                Error::corruption(
                    &self.path,
                    ptr.offset,
                    "log pointer past the end of the segment",
                )
            }
            other => other,
        }
    }

    /// [`SegmentFile::read_through_cache`] for several records at once (the log values of a
    /// scan's next pairs): those the cache holds come from it; the others are grouped into
    /// spans (records of one segment at most [`SPAN_GAP`] bytes apart, a span at most
    /// [`SPAN_MAX`] bytes: a sorted transient segment holds a scan's medium values side by
    /// side) and the spans are read in one batch (`Io::read_batch`: one submission for all
    /// of them where the file system allows). A span whose read fails is read again record
    /// by record, so each error is that record's own. One result per item, in order.
    pub(crate) fn read_many_through_cache(
        items: &[(&SegmentFile, LogPtr, &[u8])],
    ) -> Vec<Result<Bytes>> {
        let mut out: Vec<Option<Result<Bytes>>> = Vec::with_capacity(items.len());
        let mut to_read: Vec<usize> = Vec::new();
        for (i, &(seg, ptr, key)) in items.iter().enumerate() {
            if let Err(e) = check_ptr_len(ptr, &seg.path) {
                out.push(Some(Err(e)));
                continue;
            }
            match seg.cached_value(ptr, key) {
                Some(value) => out.push(Some(value)),
                None => {
                    out.push(None);
                    to_read.push(i);
                }
            }
        }
        let mut spans = spans_of(items, to_read);
        for span in &mut spans {
            span.widen_to_blocks();
        }
        let mut bufs: Vec<Vec<u8>> = spans
            .iter()
            .map(|s| span_buffer(usize::try_from(s.end - s.start).unwrap_or(0)))
            .collect();
        let results = match spans.first() {
            Some(first) => {
                let mut reqs: Vec<crate::io::BatchRead<'_>> = spans
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(s, buf)| crate::io::BatchRead {
                        file: s.seg.file.as_ref(),
                        offset: s.start,
                        buf: buf.as_mut_slice(),
                    })
                    .collect();
                first.seg.io.read_batch(&mut reqs)
            }
            None => Vec::new(),
        };
        for ((span, buf), res) in spans.iter().zip(&bufs).zip(results) {
            if res.is_ok() && span.blocks {
                span.seg.keep_blocks(span.start, buf);
            }
            for &i in &span.members {
                let Some(&(seg, ptr, key)) = items.get(i) else {
                    continue;
                };
                let value = if res.is_ok() {
                    let at = usize::try_from(ptr.offset - span.start).unwrap_or(usize::MAX);
                    match buf.get(at..at.saturating_add(ptr.len as usize)) {
                        // The blocks hold the record now: the value is a copy of it,
                        // checked in full.
                        Some(rec) if span.blocks => {
                            value_in(&Bytes::copy_from_slice(rec), ptr, key, &seg.path, true)
                        }
                        // A record the cache keeps gets a copy of its own (the cache must
                        // never hold the whole span); of a larger one only the value is
                        // copied out.
                        Some(rec) if rec.len() <= CACHE_RECORD_MAX => {
                            let rec = Bytes::copy_from_slice(rec);
                            value_in(&rec, ptr, key, &seg.path, true)
                                .inspect(|_| seg.keep(ptr, rec.clone()))
                        }
                        Some(rec) => checked_value(rec, ptr, key, &seg.path, true)
                            .map(Bytes::copy_from_slice),
                        None => seg.read_through_cache(ptr, key),
                    }
                } else {
                    // Read alone, for this record's own answer (its error, or its value
                    // when the damage was elsewhere in the span).
                    seg.read_through_cache(ptr, key)
                };
                if let Some(slot) = out.get_mut(i) {
                    *slot = Some(value);
                }
            }
        }
        give_back_span_buffers(bufs);
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::InvalidArgument("unread batch item".into()))))
            .collect()
    }
}

/// Bytes of span buffers each thread keeps for its next batch.
const SPARE_SPAN_BYTES: usize = 8 << 20;

thread_local! {
    /// Each thread's span buffers from its last batches: a scan reads a batch every few
    /// dozen pairs, and allocating its spans (up to 512 KiB each) anew each time cost page
    /// faults and page clearing as the allocator gave the memory back and took it again.
    static SPARE_SPANS: std::cell::RefCell<Vec<Vec<u8>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer of `len` bytes (what it holds is overwritten by the read), reusing one of this
/// thread's spare span buffers.
fn span_buffer(len: usize) -> Vec<u8> {
    let mut buf = SPARE_SPANS
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default();
    // Only a grown tail is zeroed: the batched read fills the span whole or fails, so no
    // byte of an earlier span is ever handed out.
    buf.resize(len, 0);
    buf
}

/// Keeps `bufs` for this thread's next batch, up to [`SPARE_SPAN_BYTES`].
fn give_back_span_buffers(bufs: Vec<Vec<u8>>) {
    let _ = SPARE_SPANS.try_with(|s| {
        let mut spare = s.borrow_mut();
        let mut kept: usize = spare.iter().map(Vec::capacity).sum();
        for buf in bufs {
            if kept + buf.capacity() <= SPARE_SPAN_BYTES {
                kept += buf.capacity();
                spare.push(buf);
            }
        }
    });
}

/// A sorted (transient) segment is cached in blocks of this many bytes, aligned to it
/// (the last one ends with the file): the device's page, a leaf's default size.
const SEGMENT_BLOCK: u64 = 4096;

/// Set in the cache offset of a segment block, so that the block at an offset and the
/// record cached alone at the same offset are two entries (no segment reaches this size).
const BLOCK_TAG: u64 = 1 << 63;

/// Records larger than this are not kept in the block cache: one long scan of large values
/// must not push out the leaves and records that gets reuse.
const CACHE_RECORD_MAX: usize = 64 << 10;

/// Records of one segment at most this many bytes apart are read as one span by
/// [`SegmentFile::read_many_through_cache`] (the bytes between are read and dropped).
const SPAN_GAP: u64 = 4096;
/// Largest span [`SegmentFile::read_many_through_cache`] reads in one request.
const SPAN_MAX: u64 = 512 << 10;

/// One read of a batch: `[start, end)` of `seg`, holding the records of `members`.
struct Span<'a> {
    seg: &'a SegmentFile,
    start: u64,
    end: u64,
    members: Vec<usize>,
    /// The longest member record's length.
    longest: u32,
    /// Read in whole blocks, which are cached ([`Span::widen_to_blocks`]).
    blocks: bool,
}

impl Span<'_> {
    /// In a segment whose scans read blocks ([`SegmentFile::scans_in_blocks`]), widens
    /// the span to the [`SEGMENT_BLOCK`]s that hold it (the last ending with the file),
    /// so that its blocks are cached: the next scans and gets near these keys (a sorted
    /// segment holds one run's medium values in key order) find their records there, as
    /// a get's miss caches its block. Not for a span holding a record longer than a
    /// block, which blocks never serve ([`SegmentFile::in_blocks`]): its records stay
    /// cached alone (up to [`CACHE_RECORD_MAX`]). (Two widened spans of a batch may share
    /// a block where a span was cut at [`SPAN_MAX`]: it is read twice and cached once.)
    fn widen_to_blocks(&mut self) {
        if !self.seg.scans_in_blocks()
            || self.members.is_empty()
            || u64::from(self.longest) > SEGMENT_BLOCK
        {
            return;
        }
        let file_len = self.seg.file.len();
        if self.end > file_len {
            return; // a pointer past the end: read as it is, for its own error
        }
        self.start -= self.start % SEGMENT_BLOCK;
        self.end = self.end.next_multiple_of(SEGMENT_BLOCK).min(file_len);
        self.blocks = true;
    }
}

/// Groups the records `indices` of `items` names into spans: by segment and offset, a
/// record joining the span before it when it starts at most [`SPAN_GAP`] bytes after the
/// span's end and the span stays within [`SPAN_MAX`].
fn spans_of<'a>(
    items: &[(&'a SegmentFile, LogPtr, &[u8])],
    mut indices: Vec<usize>,
) -> Vec<Span<'a>> {
    indices.sort_by_key(|&i| items.get(i).map(|(s, p, _)| (s.id, p.offset)));
    let mut spans: Vec<Span<'a>> = Vec::new();
    for i in indices {
        let Some(&(seg, ptr, _)) = items.get(i) else {
            continue;
        };
        let end = ptr.offset.saturating_add(u64::from(ptr.len));
        match spans.last_mut() {
            Some(last)
                if last.seg.id == seg.id
                    && ptr.offset <= last.end.saturating_add(SPAN_GAP)
                    && end.max(last.end) - last.start <= SPAN_MAX =>
            {
                last.end = last.end.max(end);
                last.members.push(i);
                last.longest = last.longest.max(ptr.len);
            }
            _ => spans.push(Span {
                seg,
                start: ptr.offset,
                end,
                members: vec![i],
                longest: ptr.len,
                blocks: false,
            }),
        }
    }
    spans
}

/// Largest record a pointer can name: a header, the largest key and the largest value.
/// Keys up to 4096 bytes were accepted before `MAX_KEY_SIZE` became 4000: records that
/// hold them are still valid.
const MAX_STORED_KEY: usize = 4096;
const MAX_RECORD: usize = RECORD_HEADER + MAX_STORED_KEY + MAX_VALUE_SIZE;

/// Rejects a pointer whose length no record can have, before a buffer is sized by it.
pub(crate) fn check_ptr_len(ptr: LogPtr, path: &Path) -> Result<()> {
    if (RECORD_HEADER..=MAX_RECORD).contains(&(ptr.len as usize)) {
        Ok(())
    } else {
        Err(Error::corruption(
            path,
            ptr.offset,
            format!("log pointer length {} is out of range", ptr.len),
        ))
    }
}

/// Decodes the record `ptr` points at from exactly its bytes, checking its CRC and that it
/// holds `key`.
pub(crate) fn decode_checked(buf: &[u8], ptr: LogPtr, key: &[u8], path: &Path) -> Result<Vec<u8>> {
    checked_value(buf, ptr, key, path, true).map(<[u8]>::to_vec)
}

/// The value of the record `ptr` points at, from exactly its bytes, once the record is
/// known to hold `key` (and to pass its CRC, when `verify`).
fn checked_value<'a>(
    buf: &'a [u8],
    ptr: LogPtr,
    key: &[u8],
    path: &Path,
    verify: bool,
) -> Result<&'a [u8]> {
    let (rec, _) =
        parse_record(buf, true, verify).map_err(|w| Error::corruption(path, ptr.offset, w))?;
    if rec.key != key {
        return Err(Error::corruption(
            path,
            ptr.offset,
            "log record holds another key",
        ));
    }
    Ok(rec.value)
}

/// [`checked_value`] as a view of `rec` (no copy).
fn value_in(rec: &Bytes, ptr: LogPtr, key: &[u8], path: &Path, verify: bool) -> Result<Bytes> {
    let value = checked_value(rec, ptr, key, path, verify)?;
    // `value` lies inside `rec` (the parser returns sub-slices of its input).
    Ok(rec.slice_ref(value))
}

/// Reads every record of segment file `path` (for GC and checks). A damaged record ends
/// the scan with `Error::Corruption`, except a torn tail when `tolerate_tail` is set.
pub(crate) fn scan_segment(
    io: &Io,
    path: &Path,
    id: u64,
    tolerate_tail: bool,
) -> Result<Vec<(LogPtr, LargeRecord)>> {
    let data = io.read_all(path, IoComponent::Gc)?;
    parse_segment(&data, path, id, tolerate_tail)
}

/// Offset -> (length, key) of each valid record of a segment.
pub type RecordIndex = BTreeMap<u64, (u32, Vec<u8>)>;

/// What recovery finds in the newest large-log segment, the only one that can hold records
/// never made durable (a full segment is synced before the next one starts).
// `pub`, not `pub(crate)`: `hybridkv::fuzzing` re-exports it (the module stays private).
#[derive(Debug)]
pub enum SegmentTail {
    /// A creation cut short, so no record and no pointer into it exists: shorter than its
    /// header, or a header that is not whole with no valid record anywhere after it. The
    /// header is synced before the name, so a crash of the start leaves no header or
    /// zeros (a mapped segment reserves its space before the header is copied in); a
    /// start whose header sync failed can also leave a torn header, once a later directory
    /// sync (a flush's install) made its name durable. A header of another version is
    /// never read as one cut short.
    Headerless,
    /// Records up to `end` are valid; nothing valid starts at or after it (a torn or lost
    /// tail).
    Valid {
        /// End of the last valid record.
        end: u64,
        /// The valid records.
        records: RecordIndex,
    },
    /// A damaged header with a valid record after it, a header of another version, or a
    /// damaged record with a valid one after it: not what a crash of an ordered writer
    /// leaves (a page written back before an earlier one can). Left
    /// alone for reads and `check` to report; `records` holds the valid records before
    /// the first damage, so replay still stops at the first commit whose value is not
    /// among them.
    Damaged {
        /// The valid records before the first damage.
        records: RecordIndex,
    },
}

/// Scans the newest segment's bytes after a crash (see [`SegmentTail`]).
pub(crate) fn scan_tail(data: &[u8]) -> SegmentTail {
    let Some(header) = data.get(..SEGMENT_HEADER as usize) else {
        return SegmentTail::Headerless;
    };
    if header != segment_header().as_slice() {
        // No record anywhere and no header of another version: a creation cut short.
        if other_version(header).is_none() && !valid_record_after(data, 0) {
            return SegmentTail::Headerless;
        }
        return SegmentTail::Damaged {
            records: RecordIndex::new(),
        };
    }
    let mut records = BTreeMap::new();
    let mut pos = SEGMENT_HEADER as usize;
    while pos < data.len() {
        match decode_record(data.get(pos..).unwrap_or_default(), false) {
            Ok((rec, n)) => {
                records.insert(pos as u64, (n as u32, rec.key));
                pos += n;
            }
            Err(_) => {
                if valid_record_after(data, pos) {
                    return SegmentTail::Damaged { records };
                }
                break;
            }
        }
    }
    SegmentTail::Valid {
        end: pos as u64,
        records,
    }
}

/// Whether a valid record starts anywhere after `pos`. Zeros to the end (the space a
/// memory-mapped segment reserved ahead) hold none: not searched byte by byte.
fn valid_record_after(data: &[u8], pos: usize) -> bool {
    let rest = data.get(pos + 1..).unwrap_or_default();
    if rest.iter().all(|&b| b == 0) {
        return false;
    }
    (pos + 1..data.len()).any(|p| decode_record(data.get(p..).unwrap_or_default(), false).is_ok())
}

/// The version a segment header names when it starts with the magic and names another
/// version than this build's (a segment of another build: never read as a torn header).
fn other_version(header: &[u8]) -> Option<u32> {
    let version = Decoder::new(header.get(8..12)?).u32()?;
    (header.get(..8) == Some(MAGIC.as_slice()) && version != VERSION).then_some(version)
}

/// Decodes every record of a segment's bytes.
pub(crate) fn parse_segment(
    data: &[u8],
    path: &Path,
    id: u64,
    tolerate_tail: bool,
) -> Result<Vec<(LogPtr, LargeRecord)>> {
    let header = data.get(..SEGMENT_HEADER as usize);
    if header != Some(segment_header().as_slice()) {
        if let Some(version) = header.and_then(other_version) {
            return Err(Error::UnsupportedVersion {
                file: path.to_path_buf(),
                found: version,
                supported: VERSION,
            });
        }
        // Shorter than its header, or a header that is not whole (zeros, a torn one) with
        // no record after it: a creation cut short (as `scan_tail` reads it).
        if tolerate_tail && (header.is_none() || !valid_record_after(data, 0)) {
            return Ok(Vec::new());
        }
        return Err(Error::corruption(path, 0, "bad large-log segment header"));
    }
    let mut out = Vec::new();
    let mut pos = SEGMENT_HEADER as usize;
    while pos < data.len() {
        match decode_record(data.get(pos..).unwrap_or_default(), false) {
            Ok((rec, n)) => {
                out.push((
                    LogPtr {
                        segment: id,
                        offset: pos as u64,
                        len: n as u32,
                    },
                    rec,
                ));
                pos += n;
            }
            // A torn tail is a damaged record with no valid one after it (as at open,
            // `scan_tail`); a damaged record followed by valid ones is corruption.
            Err(_) if tolerate_tail && !valid_record_after(data, pos) => break,
            Err(what) => return Err(Error::corruption(path, pos as u64, what)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealFs;

    #[test]
    fn a_mapped_segment_reads_while_reserved_ahead_and_a_seal_cuts_it_durably() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false).with_mapped_log_writes(true);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 3).unwrap();
        let mut ptrs = Vec::new();
        for i in 0..300u64 {
            let value = vec![i as u8; 1000 + (i as usize % 7) * 300];
            ptrs.push((
                w.append(format!("k{i}").as_bytes(), &value, i + 1).unwrap(),
                value,
            ));
        }
        w.commit(false).unwrap();
        let end = w.len();
        let path = dir.path().join(file_name(3));
        // Every record reached the OS (a crash of the process keeps it); past them, the
        // file holds the zeros reserved ahead, which recovery reads as the end.
        let on_disk = std::fs::read(&path).unwrap();
        assert!(on_disk.len() as u64 > end, "{} <= {end}", on_disk.len());
        assert!(on_disk[end as usize..].iter().all(|&b| b == 0));
        match scan_tail(&on_disk) {
            SegmentTail::Valid { end: e, records } => {
                assert_eq!(e, end);
                assert_eq!(records.len(), 300);
            }
            _ => panic!("a reserved tail read as damage"),
        }
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 3).unwrap();
        for (i, (p, v)) in ptrs.iter().enumerate() {
            assert_eq!(&seg.read(*p, format!("k{i}").as_bytes()).unwrap(), v);
        }
        // Sealed: exactly its records, read strictly (as GC reads a full segment).
        w.seal().unwrap();
        assert!(!w.has_unsynced());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), end);
        assert_eq!(scan_segment(&io, &path, 3, false).unwrap().len(), 300);
    }

    #[test]
    fn a_segment_of_zeros_is_a_creation_cut_short_unless_a_record_follows() {
        // Killed after the first step was reserved and before the header was copied in.
        let zeros = vec![0u8; 4096];
        assert!(matches!(scan_tail(&zeros), SegmentTail::Headerless));
        // So reads `check` of the newest segment (tolerant), and only of the newest.
        let at = Path::new("00000005.vlog");
        assert!(parse_segment(&zeros, at, 5, true).unwrap().is_empty());
        assert!(parse_segment(&zeros, at, 5, false)
            .unwrap_err()
            .is_corruption());
        // A header of zeros in front of a record is damage, not a creation cut short:
        // the record stays (nothing is cut or removed).
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 5).unwrap();
        w.append(b"key", b"value", 1).unwrap();
        w.commit(true).unwrap();
        let mut data = std::fs::read(dir.path().join(file_name(5))).unwrap();
        data[..SEGMENT_HEADER as usize].fill(0);
        assert!(matches!(scan_tail(&data), SegmentTail::Damaged { .. }));
    }

    #[test]
    fn a_torn_header_with_nothing_after_it_is_a_creation_cut_short_but_not_another_version() {
        let at = Path::new("00000006.vlog");
        // The header's sync failed, a later directory sync made the name durable, and a
        // power loss tore the header: garbage, alone or in front of the reserved zeros.
        let torn: [u8; 16] = *b"\x93K\x07LOGx\x00\x01\xfe\x00\x7f\x11\x22\x33\x44";
        let partial = [&MAGIC[..6], &[0u8; 10][..]].concat();
        for header in [&torn[..], &partial[..]] {
            for tail in [0usize, 4080] {
                let mut data = header.to_vec();
                data.resize(16 + tail, 0);
                assert!(
                    matches!(scan_tail(&data), SegmentTail::Headerless),
                    "{header:?} + {tail} zeros"
                );
                assert!(parse_segment(&data, at, 6, true).unwrap().is_empty());
                assert!(parse_segment(&data, at, 6, false)
                    .unwrap_err()
                    .is_corruption());
            }
        }
        // A whole header of another version is that version's segment, never one cut
        // short (recovery would remove it): left for reads and `check` to report.
        let mut newer = segment_header();
        newer[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let crc = crc32c(&newer[..12]);
        newer[12..].copy_from_slice(&crc.to_le_bytes());
        let mut data = newer.to_vec();
        data.resize(4096, 0);
        assert!(matches!(scan_tail(&data), SegmentTail::Damaged { .. }));
        assert!(matches!(
            parse_segment(&data, at, 6, true),
            Err(Error::UnsupportedVersion { found, .. }) if found == VERSION + 1
        ));
        // A torn header in front of a record is damage: the record stays.
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 6).unwrap();
        w.append(b"key", b"value", 1).unwrap();
        w.commit(true).unwrap();
        let mut data = std::fs::read(dir.path().join(file_name(6))).unwrap();
        data[..SEGMENT_HEADER as usize].copy_from_slice(&torn);
        assert!(matches!(scan_tail(&data), SegmentTail::Damaged { .. }));
        assert!(parse_segment(&data, at, 6, true)
            .unwrap_err()
            .is_corruption());
    }

    #[test]
    fn append_read_scan_and_detect_damage() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 7).unwrap();
        let big = vec![0xabu8; 70_000]; // length needs more than 16 bits
        let p1 = w.append(b"k1", b"v1", 10).unwrap();
        let p2 = w.append(b"k2", &big, 11).unwrap();
        w.commit(true).unwrap();
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 7).unwrap();
        assert_eq!(seg.read(p1, b"k1").unwrap(), b"v1");
        assert_eq!(seg.read(p2, b"k2").unwrap(), big);
        assert!(seg.read(p1, b"other").unwrap_err().is_corruption());
        let recs = scan_segment(&io, seg.path(), 7, false).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].0, p2);
        assert_eq!(recs[1].1.lsn, 11);
        // Flip one value byte: the read reports corruption at the record's offset.
        let path = seg.path().to_path_buf();
        let mut data = std::fs::read(&path).unwrap();
        data[p2.offset as usize + RECORD_HEADER + 2 + 100] ^= 1;
        std::fs::write(&path, &data).unwrap();
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 7).unwrap();
        match seg.read(p2, b"k2") {
            Err(Error::Corruption { offset, .. }) => assert_eq!(offset, p2.offset),
            other => panic!("expected corruption, got {other:?}"),
        }
        assert!(scan_segment(&io, &path, 7, false)
            .unwrap_err()
            .is_corruption());
        assert_eq!(scan_segment(&io, &path, 7, true).unwrap().len(), 1);
        // A pointer whose length no record can have is corruption, found before a
        // buffer of that size is allocated (found by fuzzing: a read allocated
        // `ptr.len` bytes, up to 4 GiB, whatever the segment held).
        for len in [0, RECORD_HEADER as u32 - 1, MAX_RECORD as u32 + 1, u32::MAX] {
            let bad = LogPtr { len, ..p1 };
            match seg.read(bad, b"k1") {
                Err(Error::Corruption { offset, what, .. }) => {
                    assert_eq!(offset, p1.offset);
                    assert!(what.contains("length"), "{what}");
                }
                other => panic!("expected corruption, got {other:?}"),
            }
        }
        // A pointer past the end is corruption, not an I/O error.
        let past = LogPtr {
            segment: 7,
            offset: 1 << 20,
            len: 30,
        };
        assert!(seg.read(past, b"k1").unwrap_err().is_corruption());
    }

    #[test]
    fn a_record_likely_superseded_is_read_without_being_cached() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 9).unwrap();
        let p = w.append(b"key", &[7u8; 3000], 5).unwrap();
        let q = w.append(b"other", &[8u8; 3000], 6).unwrap();
        w.commit(true).unwrap();
        let cache = Arc::new(BlockCache::new(1 << 20));
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 9)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let reads = || io.stats().snapshot().read_ops_by(IoComponent::LargeLog);
        // Cached by a get: served from memory and left there (a write-back that is then
        // skipped leaves it the key's base).
        assert_eq!(seg.read_through_cache(p, b"key").unwrap(), vec![7u8; 3000]);
        assert!(cache.contains(9, p.offset));
        let r0 = reads();
        assert_eq!(seg.read_passing(p, b"key").unwrap(), vec![7u8; 3000]);
        assert_eq!(reads(), r0);
        assert!(cache.contains(9, p.offset));
        // Not cached: read from the file, and not cached afterwards.
        assert_eq!(seg.read_passing(q, b"other").unwrap(), vec![8u8; 3000]);
        assert_eq!(reads(), r0 + 1);
        assert!(!cache.contains(9, q.offset));
        // Checked like any read: the wrong key is corruption, cached or not.
        assert!(seg.read_passing(q, b"key").unwrap_err().is_corruption());
        seg.read_through_cache(q, b"other").unwrap();
        assert!(seg.read_passing(q, b"key").unwrap_err().is_corruption());
    }

    #[test]
    fn reads_through_the_cache_are_served_from_memory_once_checked() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 9).unwrap();
        let p = w.append(b"key", &[7u8; 3000], 5).unwrap();
        w.commit(true).unwrap();
        let cache = Arc::new(BlockCache::new(1 << 20));
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 9)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let reads = || io.stats().snapshot().read_ops_by(IoComponent::LargeLog);
        let r0 = reads();
        assert_eq!(seg.read_through_cache(p, b"key").unwrap(), vec![7u8; 3000]);
        assert_eq!(reads(), r0 + 1);
        assert_eq!(seg.read_through_cache(p, b"key").unwrap(), vec![7u8; 3000]);
        assert_eq!(reads(), r0 + 1, "the second read is a cache hit");
        // A cached record still answers only for its own key and length.
        assert!(seg
            .read_through_cache(p, b"other")
            .unwrap_err()
            .is_corruption());
        let shorter = LogPtr {
            len: p.len - 1,
            ..p
        };
        assert!(seg
            .read_through_cache(shorter, b"key")
            .unwrap_err()
            .is_corruption());
        // `read` (what `check` uses) always goes to the file: damage on disk is found
        // even while the cache holds a good copy.
        let path = seg.path().to_path_buf();
        let mut data = std::fs::read(&path).unwrap();
        data[p.offset as usize + RECORD_HEADER + 3 + 10] ^= 1;
        std::fs::write(&path, &data).unwrap();
        assert!(seg.read(p, b"key").unwrap_err().is_corruption());
        // Without a cache, every read goes to the file.
        let plain = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 9).unwrap();
        assert!(plain
            .read_through_cache(p, b"key")
            .unwrap_err()
            .is_corruption());

        // A record over CACHE_RECORD_MAX is never cached: every read goes to the file.
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 10).unwrap();
        let big = w
            .append(b"big", &vec![3u8; CACHE_RECORD_MAX + 1], 6)
            .unwrap();
        w.commit(true).unwrap();
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 10)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let r0 = reads();
        for _ in 0..2 {
            let v = seg.read_through_cache(big, b"big").unwrap();
            assert_eq!(v.len(), CACHE_RECORD_MAX + 1);
        }
        assert_eq!(reads(), r0 + 2);
    }

    #[test]
    fn a_sorted_segment_is_cached_in_blocks_whose_records_are_checked_as_gets_take_them() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Transient, 3).unwrap();
        let key = |i: usize| format!("k{i:03}").into_bytes();
        let value = |i: usize| vec![i as u8; 200];
        // 100 records of 224 bytes: 18 to a block, the last block partial.
        let ptrs: Vec<LogPtr> = (0..100)
            .map(|i| w.append(&key(i), &value(i), i as u64).unwrap())
            .collect();
        w.commit(true).unwrap();
        let in_block = |p: &LogPtr| p.offset / SEGMENT_BLOCK;
        let whole = |p: &LogPtr| in_block(p) == (p.offset + u64::from(p.len) - 1) / SEGMENT_BLOCK;
        // Damage a record of the third block that crosses into no other block.
        let victim = (0..100)
            .find(|&i| in_block(&ptrs[i]) == 2 && whole(&ptrs[i]) && whole(&ptrs[i - 1]))
            .unwrap();
        let path = dir.path().join(SegmentKind::Transient.file_name(3));
        let mut data = std::fs::read(&path).unwrap();
        data[ptrs[victim].offset as usize + RECORD_HEADER + 4 + 100] ^= 1;
        std::fs::write(&path, &data).unwrap();

        let cache = Arc::new(BlockCache::new(1 << 20));
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Transient, 3)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let reads = || io.stats().snapshot().read_ops_by(IoComponent::TransientLog);
        let get = |i: usize| seg.read_through_cache(ptrs[i], &key(i));
        // The first record's read caches its block: every record wholly inside it is
        // then served from memory, each lookup counted once.
        assert_eq!(get(0).unwrap(), value(0));
        assert_eq!((reads(), cache.hits_and_misses()), (1, (0, 1)));
        let first_block: Vec<usize> = (0..100)
            .filter(|&i| in_block(&ptrs[i]) == 0 && whole(&ptrs[i]))
            .collect();
        assert!(first_block.len() >= 17, "{first_block:?}");
        for &i in &first_block {
            assert_eq!(get(i).unwrap(), value(i), "record {i}");
        }
        let n = first_block.len() as u64;
        assert_eq!((reads(), cache.hits_and_misses()), (1, (n, 1)));
        // A record across a block boundary is read with both blocks, then served from
        // the two cached blocks, as is every record of the second block.
        let across = (0..100).find(|&i| !whole(&ptrs[i])).unwrap();
        assert_eq!(get(across).unwrap(), value(across));
        assert_eq!(reads(), 2);
        assert!(
            !cache.contains(3, ptrs[across].offset),
            "cached alone as well"
        );
        assert_eq!(get(across).unwrap(), value(across));
        for i in (0..100).filter(|&i| in_block(&ptrs[i]) == 1 && whole(&ptrs[i])) {
            assert_eq!(get(i).unwrap(), value(i), "record {i}");
        }
        assert_eq!(reads(), 2, "the record across blocks came from the cache");
        // The damaged record's neighbour brings in its block. The damaged record fails
        // its check there: the block is forgotten and the record read again from the
        // file (which mends a block damaged in memory), where the damage is found and
        // reported, by its own get alone; its neighbours are served, by a get or a scan.
        assert_eq!(get(victim - 1).unwrap(), value(victim - 1));
        let r = reads();
        assert!(get(victim).unwrap_err().is_corruption());
        assert!(get(victim).unwrap_err().is_corruption());
        assert_eq!(
            reads(),
            r + 2,
            "each get of the damaged record read the file"
        );
        if whole(&ptrs[victim + 1]) {
            assert_eq!(get(victim + 1).unwrap(), value(victim + 1));
        }
        let (k0, k1) = (key(victim - 1), key(victim));
        let scanned = SegmentFile::read_many_through_cache(&[
            (&seg, ptrs[victim - 1], &k0),
            (&seg, ptrs[victim], &k1),
        ]);
        assert_eq!(scanned[0].as_ref().unwrap(), &value(victim - 1));
        assert!(scanned[1].as_ref().unwrap_err().is_corruption());
        // A damaged pointer whose offset has the block tag's bit is never a block.
        let tagged = LogPtr {
            offset: BLOCK_TAG,
            len: 4096,
            ..ptrs[0]
        };
        assert!(seg.read_through_cache(tagged, &key(0)).is_err());
        // A cached block still answers only for a record's own key and length.
        assert!(seg
            .read_through_cache(ptrs[victim - 1], b"k999")
            .unwrap_err()
            .is_corruption());
        let shorter = LogPtr {
            len: ptrs[1].len - 1,
            ..ptrs[1]
        };
        assert!(seg
            .read_through_cache(shorter, &key(1))
            .unwrap_err()
            .is_corruption());
        // The last block ends with the file; every record reads its value, each block
        // not yet cached read once.
        let r = reads();
        assert_eq!(get(99).unwrap(), value(99));
        for i in (0..100).filter(|&i| i != victim) {
            assert_eq!(get(i).unwrap(), value(i), "record {i}");
        }
        let blocks = (ptrs[99].offset + u64::from(ptrs[99].len)).div_ceil(SEGMENT_BLOCK);
        assert!(
            reads() - r <= blocks - 3,
            "{} reads for the {} blocks not cached yet",
            reads() - r,
            blocks - 3
        );
        // A record read for the last time (a fold's base) is served by its block too.
        let r = reads();
        assert_eq!(seg.read_passing(ptrs[50], &key(50)).unwrap(), value(50));
        assert_eq!(reads(), r);
    }

    #[test]
    fn a_record_appended_through_the_cache_outlasts_a_burst_of_records_no_one_reads() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let cache = Arc::new(BlockCache::new(1 << 20));
        let filler = |file: u64| {
            for i in 0..2000u64 {
                cache.insert(file, i * 4096, Bytes::from(vec![0u8; 1024]));
            }
        };
        // A cache full of records never read.
        filler(5);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 4).unwrap();
        let kept: Vec<LogPtr> = (0..100u32)
            .map(|i| {
                let key = format!("hot{i:03}");
                w.append_cached(key.as_bytes(), &[2u8; 1000], u64::from(i), &cache)
                    .unwrap()
            })
            .collect();
        w.commit(false).unwrap();
        // Then twice the budget of records read by no one (a scan, another file's GC).
        filler(6);
        let held = kept.iter().filter(|p| cache.contains(4, p.offset)).count();
        assert!(held >= 90, "{held} of 100 appended records still cached");
    }

    #[test]
    fn a_record_appended_through_the_cache_is_read_from_memory_and_matches_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let cache = Arc::new(BlockCache::new(1 << 20));
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 4).unwrap();
        let plain = w.append(b"plain", &[1u8; 2000], 7).unwrap();
        let cached = w.append_cached(b"hot", &[2u8; 2000], 8, &cache).unwrap();
        let big = w
            .append_cached(b"big", &vec![3u8; CACHE_RECORD_MAX], 9, &cache)
            .unwrap();
        w.commit(false).unwrap();
        // The two ways of appending write the same format, one after the other.
        assert_eq!(cached.offset, plain.offset + u64::from(plain.len));
        assert_eq!(big.offset, cached.offset + u64::from(cached.len));
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 4)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let reads = || io.stats().snapshot().read_ops_by(IoComponent::LargeLog);
        let r0 = reads();
        assert_eq!(
            seg.read_through_cache(cached, b"hot").unwrap(),
            vec![2u8; 2000]
        );
        assert_eq!(reads(), r0, "the appended record came from the cache");
        assert_eq!(
            seg.read_through_cache(plain, b"plain").unwrap(),
            vec![1u8; 2000]
        );
        assert_eq!(
            seg.read_through_cache(big, b"big").unwrap().len(),
            CACHE_RECORD_MAX
        );
        assert_eq!(
            reads(),
            r0 + 2,
            "the plain and the oversized record were read"
        );
        // What the cache held is what the file holds: a check of the file agrees.
        assert_eq!(seg.read(cached, b"hot").unwrap(), vec![2u8; 2000]);
        let scanned: Vec<_> = scan_segment(&io, seg.path(), 4, false)
            .unwrap()
            .into_iter()
            .map(|(ptr, rec)| (ptr, rec.lsn))
            .collect();
        assert_eq!(scanned, vec![(plain, 7), (cached, 8), (big, 9)]);
    }

    #[test]
    fn a_scan_of_a_sorted_segment_caches_the_blocks_it_read_for_the_next_gets_and_scans() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Transient, 5).unwrap();
        let key = |i: usize| format!("k{i:03}").into_bytes();
        let value = |i: usize| vec![i as u8; 150];
        // 300 records of 174 bytes: 23 or 24 to a block, the last block partial.
        let ptrs: Vec<LogPtr> = (0..300)
            .map(|i| w.append(&key(i), &value(i), i as u64).unwrap())
            .collect();
        w.commit(true).unwrap();
        let block_of = |i: usize| ptrs[i].offset / SEGMENT_BLOCK;
        let last_block_of =
            |i: usize| (ptrs[i].offset + u64::from(ptrs[i].len) - 1) / SEGMENT_BLOCK;
        // Damage a record of block 6 that lies wholly in it.
        let victim = (0..300)
            .find(|&i| block_of(i) == 6 && last_block_of(i) == 6 && block_of(i - 1) == 6)
            .unwrap();
        let path = dir.path().join(SegmentKind::Transient.file_name(5));
        let mut data = std::fs::read(&path).unwrap();
        data[ptrs[victim].offset as usize + RECORD_HEADER + 4 + 50] ^= 1;
        std::fs::write(&path, &data).unwrap();

        let cache = Arc::new(BlockCache::new(1 << 20));
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Transient, 5)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let reads = || io.stats().snapshot().read_ops_by(IoComponent::TransientLog);
        let keys: Vec<Vec<u8>> = (0..300).map(key).collect();
        let scan = |range: std::ops::Range<usize>| {
            let items: Vec<(&SegmentFile, LogPtr, &[u8])> = range
                .clone()
                .map(|i| (&seg, ptrs[i], keys[i].as_slice()))
                .collect();
            SegmentFile::read_many_through_cache(&items)
        };
        // A scan of every fifth record from 10 to 40 (one span): one read, of the
        // blocks that hold them, all cached.
        let items: Vec<(&SegmentFile, LogPtr, &[u8])> = (10..40)
            .step_by(5)
            .map(|i| (&seg, ptrs[i], keys[i].as_slice()))
            .collect();
        for (got, i) in SegmentFile::read_many_through_cache(&items)
            .iter()
            .zip((10..40).step_by(5))
        {
            assert_eq!(got.as_ref().unwrap(), &value(i), "record {i}");
        }
        assert_eq!(reads(), 1);
        let (lo, hi) = (block_of(10), last_block_of(35));
        for b in lo..=hi {
            assert!(
                cache.contains(5, BLOCK_TAG | (b * SEGMENT_BLOCK)),
                "block {b}"
            );
        }
        assert!(
            !cache.contains(5, ptrs[10].offset),
            "a record cached alone as well"
        );
        // Every record those blocks hold whole comes from memory, to a get or a scan.
        let held: Vec<usize> = (0..300)
            .filter(|&i| block_of(i) >= lo && last_block_of(i) <= hi)
            .collect();
        for &i in &held {
            assert_eq!(seg.read_through_cache(ptrs[i], &key(i)).unwrap(), value(i));
        }
        let (first, last) = (held[0], held[held.len() - 1]);
        assert!(scan(first..last + 1).iter().all(Result::is_ok));
        assert_eq!(reads(), 1, "served from the scan's blocks");

        // A scan over the damaged record: it fails alone, its neighbours come back; the
        // block it lies in was cached unchecked, so a get of it finds the damage there,
        // forgets the block and reads the record's block from the file, which reports it.
        let got = scan(victim - 2..victim + 3);
        assert!(got[2].as_ref().unwrap_err().is_corruption());
        for (j, i) in (victim - 2..victim + 3)
            .enumerate()
            .filter(|&(j, _)| j != 2)
        {
            assert_eq!(got[j].as_ref().unwrap(), &value(i), "record {i}");
        }
        let r = reads();
        assert!(seg
            .read_through_cache(ptrs[victim], &key(victim))
            .unwrap_err()
            .is_corruption());
        assert_eq!(reads(), r + 1, "the damaged record read from the file");

        // The last records: the file's last block, partial, is cached too.
        let r = reads();
        assert!(scan(290..300).iter().all(Result::is_ok));
        let end = ptrs[299].offset + u64::from(ptrs[299].len);
        assert!(!end.is_multiple_of(SEGMENT_BLOCK));
        assert!(cache.contains(5, BLOCK_TAG | (end - end % SEGMENT_BLOCK)));
        assert_eq!(
            seg.read_through_cache(ptrs[299], &key(299)).unwrap(),
            value(299)
        );
        assert_eq!(reads(), r + 1);

        // Without a cache, a scan reads its records' span alone and caches nothing.
        let plain = SegmentFile::open(&io, dir.path(), SegmentKind::Transient, 5).unwrap();
        let items: Vec<(&SegmentFile, LogPtr, &[u8])> = (100..103)
            .map(|i| (&plain, ptrs[i], keys[i].as_slice()))
            .collect();
        let spans = spans_of(&items, vec![0, 1, 2]);
        assert_eq!(spans.len(), 1);
        let mut span = spans.into_iter().next().unwrap();
        span.widen_to_blocks();
        assert!(!span.blocks);
        assert_eq!(
            (span.start, span.end),
            (
                ptrs[100].offset,
                ptrs[102].offset + u64::from(ptrs[102].len)
            )
        );
    }

    #[test]
    fn a_scan_of_sorted_records_longer_than_a_block_caches_them_alone() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Transient, 6).unwrap();
        let key = |i: usize| format!("k{i:03}").into_bytes();
        let value = |i: usize| vec![i as u8; 5_000 + i * 1_000];
        let ptrs: Vec<LogPtr> = (0..6)
            .map(|i| w.append(&key(i), &value(i), i as u64).unwrap())
            .collect();
        w.commit(true).unwrap();
        let cache = Arc::new(BlockCache::new(1 << 20));
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Transient, 6)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let reads = || io.stats().snapshot().read_ops_by(IoComponent::TransientLog);
        let keys: Vec<Vec<u8>> = (0..6).map(key).collect();
        let items: Vec<(&SegmentFile, LogPtr, &[u8])> = (0..6)
            .map(|i| (&seg, ptrs[i], keys[i].as_slice()))
            .collect();
        for (i, got) in SegmentFile::read_many_through_cache(&items)
            .iter()
            .enumerate()
        {
            assert_eq!(got.as_ref().unwrap(), &value(i), "record {i}");
        }
        assert_eq!(reads(), 1, "one span");
        // Each record cached alone, no block: gets and another scan read nothing.
        for (i, p) in ptrs.iter().enumerate() {
            assert!(cache.contains(6, p.offset), "record {i}");
            assert!(!cache.contains(
                6,
                BLOCK_TAG | (ptrs[i].offset - ptrs[i].offset % SEGMENT_BLOCK)
            ));
            assert_eq!(seg.read_through_cache(ptrs[i], &key(i)).unwrap(), value(i));
        }
        assert!(SegmentFile::read_many_through_cache(&items)
            .iter()
            .all(Result::is_ok));
        assert_eq!(reads(), 1);
    }

    #[test]
    fn many_records_are_read_in_spans_and_a_damaged_one_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut wa = SegmentWriter::create(&io, dir.path(), SegmentKind::Transient, 3).unwrap();
        let mut pa = Vec::new();
        for i in 0..4u8 {
            pa.push(wa.append(&[b'a', i], &[i; 500], 1).unwrap());
        }
        // A 10 KB record leaves a gap wider than SPAN_GAP before the next one.
        let far_gap = wa.append(b"big", &[9u8; 10_000], 1).unwrap();
        pa.push(wa.append(b"a9", &[42u8; 300], 1).unwrap());
        wa.commit(true).unwrap();
        let mut wb = SegmentWriter::create(&io, dir.path(), SegmentKind::Large, 4).unwrap();
        let pb = [
            wb.append(b"b0", &[7u8; 2000], 1).unwrap(),
            wb.append(b"b1", &[8u8; 2000], 1).unwrap(),
        ];
        wb.commit(true).unwrap();
        let cache = Arc::new(BlockCache::new(1 << 20));
        let a = SegmentFile::open(&io, dir.path(), SegmentKind::Transient, 3)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let b = SegmentFile::open(&io, dir.path(), SegmentKind::Large, 4)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let keys: Vec<Vec<u8>> = (0..4u8).map(|i| vec![b'a', i]).collect();
        // Out of order, as a scan's merge hands them out.
        let items: Vec<(&SegmentFile, LogPtr, &[u8])> = vec![
            (&b, pb[1], b"b1"),
            (&a, pa[2], &keys[2]),
            (&a, pa[4], b"a9"),
            (&a, pa[0], &keys[0]),
            (&b, pb[0], b"b0"),
            (&a, pa[1], &keys[1]),
            (&a, pa[3], &keys[3]),
        ];
        let spans = spans_of(&items, (0..items.len()).collect());
        let shape: Vec<(u64, usize)> = spans.iter().map(|s| (s.seg.id, s.members.len())).collect();
        assert_eq!(
            shape,
            vec![(3, 4), (3, 1), (4, 2)],
            "a's first four, a9 past the gap, b's two"
        );
        assert!(far_gap.len > SPAN_GAP as u32);
        let reads = || io.stats().snapshot();
        let r0 = reads();
        let got = SegmentFile::read_many_through_cache(&items);
        let r1 = reads();
        let ops = |s: &crate::io::IoStatsSnapshot| {
            s.read_ops_by(IoComponent::TransientLog) + s.read_ops_by(IoComponent::LargeLog)
        };
        assert_eq!(ops(&r1) - ops(&r0), 3, "one read per span");
        for ((seg, ptr, key), got) in items.iter().zip(&got) {
            assert_eq!(got.as_ref().unwrap(), &seg.read(*ptr, key).unwrap());
        }
        // All cached now: a second batch reads nothing.
        let again = SegmentFile::read_many_through_cache(&items);
        assert_eq!(
            ops(&reads()),
            ops(&r1) + items.len() as u64,
            "only the checks above read"
        );
        assert!(again.iter().all(Result::is_ok));

        // A damaged record in the middle of a span: that record alone fails.
        let path = a.path().to_path_buf();
        let mut data = std::fs::read(&path).unwrap();
        data[pa[1].offset as usize + RECORD_HEADER + 2 + 100] ^= 1;
        std::fs::write(&path, &data).unwrap();
        let fresh = SegmentFile::open(&io, dir.path(), SegmentKind::Transient, 3).unwrap();
        let items: Vec<(&SegmentFile, LogPtr, &[u8])> = (0..4)
            .map(|i| (&fresh, pa[i], keys[i].as_slice()))
            .collect();
        let got = SegmentFile::read_many_through_cache(&items);
        assert!(got[1].as_ref().unwrap_err().is_corruption());
        for i in [0, 2, 3] {
            assert_eq!(got[i].as_ref().unwrap(), &vec![i as u8; 500]);
        }
    }
}

/// The file sizes of complete large-log segments, as GC passes learned them: a segment no
/// longer active is never appended to again, so its size is asked of the file system once
/// (a pass used to `stat` every segment, about 4,000 at 40M MD pairs, once a second).
/// GC holds one under its lock (`Engine::gc_lock`), so one pass at a time reads or changes
/// it.
#[derive(Debug, Default)]
pub(crate) struct SegmentSizes {
    known: std::collections::HashMap<u64, u64>,
}

impl SegmentSizes {
    /// The size of segment `id`: remembered, or learned from `stat` (remembered only for a
    /// segment that is not `active` and only when `stat` answered).
    pub(crate) fn size_of(
        &mut self,
        id: u64,
        active: Option<u64>,
        stat: impl FnOnce() -> Result<u64>,
    ) -> Result<u64> {
        if let Some(&len) = self.known.get(&id) {
            return Ok(len);
        }
        let len = stat()?;
        if Some(id) != active {
            self.known.insert(id, len);
        }
        Ok(len)
    }

    /// Forgets every segment not in `listed` (freed since).
    pub(crate) fn keep_only(&mut self, listed: &[(u64, u64)]) {
        // Listed ids are distinct: when as many of them are known as the table holds,
        // every id it holds is listed and nothing was freed.
        let listed_known = listed
            .iter()
            .filter(|(id, _)| self.known.contains_key(id))
            .count();
        if listed_known < self.known.len() {
            let live: std::collections::HashSet<u64> = listed.iter().map(|&(id, _)| id).collect();
            self.known.retain(|id, _| live.contains(id));
        }
    }
}

#[cfg(test)]
mod segment_size_tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_complete_segment_is_stated_once_and_the_active_one_every_time() {
        let mut sizes = SegmentSizes::default();
        let stats = Cell::new(0);
        let stat = |len: u64| {
            let stats = &stats;
            move || {
                stats.set(stats.get() + 1);
                Ok(len)
            }
        };
        assert_eq!(sizes.size_of(1, Some(2), stat(100)).unwrap(), 100);
        assert_eq!(
            sizes.size_of(1, Some(2), stat(999)).unwrap(),
            100,
            "remembered"
        );
        assert_eq!(stats.get(), 1);
        assert_eq!(sizes.size_of(2, Some(2), stat(10)).unwrap(), 10);
        assert_eq!(
            sizes.size_of(2, Some(2), stat(20)).unwrap(),
            20,
            "active: asked again"
        );
        assert_eq!(stats.get(), 3);
        // A failed `stat` is not remembered.
        let failed = || Err(Error::InvalidArgument("no such file".into()));
        assert!(sizes.size_of(3, Some(2), failed).is_err());
        assert_eq!(sizes.size_of(3, Some(2), stat(30)).unwrap(), 30);
        // A freed segment is forgotten: were its id listed again, it would be asked.
        sizes.keep_only(&[(3, 0)]);
        assert_eq!(sizes.size_of(1, None, stat(111)).unwrap(), 111);
        assert_eq!(sizes.size_of(3, None, stat(333)).unwrap(), 30);
    }
}
