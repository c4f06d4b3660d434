//! Delta buckets: KDSep's delta separation (`Options::delta_separation`).
//!
//! A flush that would write a key's deltas into a level as an operand list writes them
//! instead as one *record* into the key's bucket (chosen by the top bits of the key's
//! hash), and the level gets a *bucket list*: an operand list that carries only the LSN
//! range `[lo, hi]` of the deltas it stands for (and, when closed, the large-log pointer
//! of their base). A read that meets a bucket list reads the key's records in the bucket
//! whose range lies inside the list's range, oldest first, and folds them like inline
//! deltas; a compaction combines the ranges of a key's bucket lists without reading
//! them, and reads them only to fold them into a base in place. So a key's deltas are
//! never rewritten by compactions, and a read of them costs one bucket read, however many
//! levels they came down through.
//!
//! Owns: the bucket table (which buckets cover which hashes, each bucket's segments and
//! their committed lengths: the bytes a durable manifest vouches for), the record format
//! (FORMAT.md, "Delta bucket segment"), the in-memory index (key hash -> record
//! locations) rebuilt at open, the appends of a flush ([`BucketFlush`]), the reads of a
//! key's deltas ([`BucketTable::resolve`]), and bucket garbage collection and split
//! ([`gc`]). Never: decides whether a record is live (the levels' bucket lists do, by
//! LSN range, which is why a record past a manifest's committed length, or outside every
//! list's range, is simply never read), stores the manifest, or folds deltas itself
//! (`crate::delta` does).

pub(crate) mod gc;

use crate::error::{Error, Result};
use crate::filename::FileKind;
use crate::format::{crc32c, key_hash, Decoder};
use crate::io::{Io, IoComponent, ReadableFile, WritableFile};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Buckets a table starts with: 2^this.
pub(crate) const INITIAL_BUCKET_BITS: u8 = 3;
/// The deepest split: at most 2^this buckets.
pub(crate) const MAX_BUCKET_BITS: u8 = 16;
/// Segments kept open for appending between flushes (each holds a 256 KiB write buffer);
/// a bucket past them starts a new segment at its next flush.
const MAX_OPEN_SEGMENTS: usize = 32;
/// A bucket of more segments than this is collected (into one) whatever its size.
pub(crate) const MAX_SEGMENTS_PER_BUCKET: usize = 8;
/// Bytes of a record's header: checksum, body length.
const RECORD_HEADER: usize = 8;
/// A segment starts with `magic (8) | version u32 | crc32c u32 of the first 12 bytes`.
const SEGMENT_MAGIC: &[u8; 8] = b"HKVDBKT\0";
/// Format version of bucket segments written.
pub(crate) const SEGMENT_VERSION: u32 = 1;
/// Bytes of a segment's header.
pub(crate) const SEGMENT_HEADER: usize = 16;

/// A segment's header.
fn segment_header() -> [u8; SEGMENT_HEADER] {
    let mut h = [0u8; SEGMENT_HEADER];
    h[..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    let crc = crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}
/// Bytes of a record body before its key: key length, lo, hi.
const BODY_FIXED: usize = 20;

/// File name of bucket segment `id`.
pub(crate) fn file_name(id: u64) -> String {
    FileKind::DeltaBucket.name(id)
}

/// One decoded record: the deltas of one key with LSNs in `[lo, hi]`, as an open operand
/// list (`crate::delta` encoding), oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BucketRecord<'a> {
    pub key: &'a [u8],
    pub lo: u64,
    pub hi: u64,
    pub list: &'a [u8],
}

/// Appends the encoding of one record to `out`: `[crc32c u32][body_len u32]` then the
/// body `[key_len u32][lo u64][hi u64][key][operand list]`; the checksum covers the body.
pub(crate) fn encode_record(key: &[u8], lo: u64, hi: u64, list: &[u8], out: &mut Vec<u8>) {
    let body_len = BODY_FIXED + key.len() + list.len();
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&lo.to_le_bytes());
    out.extend_from_slice(&hi.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(list);
    let crc = crc32c(&out[start + RECORD_HEADER..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes the record at the start of `bytes`; returns it and its encoded length. Every
/// length is checked against what is left, the checksum against the body, and the
/// operand list against its own format (an open list); `Err` says what is wrong.
pub(crate) fn decode_record(
    bytes: &[u8],
) -> std::result::Result<(BucketRecord<'_>, usize), &'static str> {
    let mut d = Decoder::new(bytes);
    let crc = d.u32().ok_or("truncated record header")?;
    let body_len = d.u32().ok_or("truncated record header")? as usize;
    let body = d.bytes(body_len).ok_or("record body runs past the end")?;
    if crc32c(body) != crc {
        return Err("record checksum mismatch");
    }
    let mut b = Decoder::new(body);
    let key_len = b.u32().ok_or("record body shorter than its fixed part")? as usize;
    let lo = b.u64().ok_or("record body shorter than its fixed part")?;
    let hi = b.u64().ok_or("record body shorter than its fixed part")?;
    let key = b.bytes(key_len).ok_or("record key runs past its body")?;
    let list = b.bytes(b.remaining()).ok_or("record body truncated")?;
    if lo > hi {
        return Err("record LSN range is reversed");
    }
    match crate::delta::decode(list) {
        Some(l) if !l.closed && l.bucket.is_none() && !l.operands.is_empty() => {}
        _ => return Err("record operand list is malformed"),
    }
    Ok((BucketRecord { key, lo, hi, list }, RECORD_HEADER + body_len))
}

/// Where one record lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    segment: u64,
    offset: u64,
    len: u32,
}

/// Key hash -> the records of keys with that hash, in every segment of every bucket
/// (one per keyspace, shared by every table). A reader keeps only the locations its own
/// table vouches for (its segments, below their committed lengths).
#[derive(Debug, Default)]
pub(crate) struct BucketIndex {
    map: RwLock<HashMap<u64, Vec<Loc>>>,
}

impl BucketIndex {
    fn insert(&self, hash: u64, loc: Loc) {
        self.map.write().entry(hash).or_default().push(loc);
    }

    fn locations(&self, hash: u64) -> Vec<Loc> {
        self.map.read().get(&hash).cloned().unwrap_or_default()
    }

    /// Drops the locations of segment `id` (deleted) under `hashes`.
    fn forget(&self, id: u64, hashes: &[u64]) {
        let mut map = self.map.write();
        for h in hashes {
            if let Some(v) = map.get_mut(h) {
                v.retain(|l| l.segment != id);
                if v.is_empty() {
                    map.remove(h);
                }
            }
        }
    }

    /// Record locations held (for `stats()` and tests).
    pub(crate) fn len(&self) -> usize {
        self.map.read().values().map(Vec::len).sum()
    }
}

/// One segment file of a bucket. Deleted from disk when marked obsolete and the last
/// table naming it is dropped; its index entries go with it.
pub(crate) struct BucketSegment {
    id: u64,
    path: PathBuf,
    file: Arc<dyn ReadableFile>,
    io: Io,
    index: Arc<BucketIndex>,
    /// The hash of every record indexed from this segment (to forget them).
    hashes: Mutex<Vec<u64>>,
    obsolete: AtomicBool,
}

impl std::fmt::Debug for BucketSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketSegment")
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for BucketSegment {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.index.forget(self.id, &self.hashes.lock());
            // A failure leaves an orphan that the next open sweeps.
            let _ = self.io.fs().remove(&self.path);
        }
    }
}

impl BucketSegment {
    fn open(io: &Io, dir: &Path, id: u64, index: &Arc<BucketIndex>) -> Result<BucketSegment> {
        let path = dir.join(file_name(id));
        let file = io.open(&path, IoComponent::DeltaBuckets)?;
        Ok(BucketSegment {
            id,
            path,
            file,
            io: io.clone(),
            index: Arc::clone(index),
            hashes: Mutex::new(Vec::new()),
            obsolete: AtomicBool::new(false),
        })
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Marks the segment for deletion once no table names it.
    pub(crate) fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    /// Keeps the segment on disk when it is dropped (an installed table names it).
    fn keep(&self) {
        self.obsolete.store(false, Ordering::Release);
    }

    fn note(&self, hash: u64, offset: u64, len: usize) {
        self.index.insert(
            hash,
            Loc {
                segment: self.id,
                offset,
                len: len as u32,
            },
        );
        self.hashes.lock().push(hash);
    }

    fn corrupt(&self, offset: u64, what: &str) -> Error {
        Error::corruption(&self.path, offset, what.to_string())
    }

    /// Reads `[0, committed)` whole and calls `f` with each record and its offset. A
    /// damaged record is corruption (every byte below `committed` was synced before a
    /// manifest vouched for it).
    pub(crate) fn scan(
        &self,
        committed: u64,
        mut f: impl FnMut(u64, BucketRecord<'_>) -> Result<()>,
    ) -> Result<()> {
        let len = usize::try_from(committed)
            .map_err(|_| self.corrupt(0, "committed length does not fit in memory"))?;
        if len < SEGMENT_HEADER {
            return Err(self.corrupt(0, "committed length shorter than the segment header"));
        }
        // Checked before the buffer is allocated and zeroed: a committed length past the
        // file's end is damage to report, not up to a GiB of memory to fill first.
        // (The file system's length, not the reader's: a segment grows after it is opened.)
        let file_len = self.io.fs().file_len(&self.path)?;
        if committed > file_len {
            return Err(self.corrupt(
                file_len,
                "committed length runs past the end of the segment file",
            ));
        }
        let mut buf = crate::io::read_buf(len);
        self.file.read_exact_at(0, &mut buf)?;
        let header = buf.get(..SEGMENT_HEADER).unwrap_or_default();
        if header.get(..8) != Some(SEGMENT_MAGIC.as_slice())
            || crate::format::u32_at(header, 12)
                != Some(crc32c(header.get(..12).unwrap_or_default()))
        {
            return Err(self.corrupt(0, "not a delta bucket segment (bad header)"));
        }
        let version = crate::format::u32_at(header, 8).unwrap_or(0);
        if version != SEGMENT_VERSION {
            return Err(Error::UnsupportedVersion {
                file: self.path.clone(),
                found: version,
                supported: SEGMENT_VERSION,
            });
        }
        let mut at = SEGMENT_HEADER;
        while at < len {
            let rest = buf.get(at..).unwrap_or_default();
            let (rec, n) = decode_record(rest).map_err(|what| self.corrupt(at as u64, what))?;
            f(at as u64, rec)?;
            at += n;
        }
        Ok(())
    }

    /// Indexes every record below `committed` (at open).
    fn index_all(&self, committed: u64) -> Result<()> {
        let mut found = Vec::new();
        self.scan(committed, |offset, rec| {
            found.push((
                key_hash(rec.key),
                offset,
                RECORD_HEADER + BODY_FIXED + rec.key.len() + rec.list.len(),
            ));
            Ok(())
        })?;
        for (h, off, len) in found {
            self.note(h, off, len);
        }
        Ok(())
    }
}

/// One bucket: the hashes whose top `depth` bits are `prefix`, and its segments, oldest
/// first, each with its committed length.
#[derive(Debug, Clone)]
pub(crate) struct BucketSlot {
    pub depth: u8,
    pub prefix: u64,
    pub segments: Vec<(Arc<BucketSegment>, u64)>,
}

impl BucketSlot {
    /// The lowest hash the bucket covers.
    fn start(&self) -> u64 {
        if self.depth == 0 {
            0
        } else {
            self.prefix << (64 - u32::from(self.depth))
        }
    }

    pub(crate) fn covers(&self, hash: u64) -> bool {
        self.depth == 0 || hash >> (64 - u32::from(self.depth)) == self.prefix
    }

    /// Committed bytes of every segment.
    pub(crate) fn bytes(&self) -> u64 {
        self.segments.iter().map(|(_, c)| c).sum()
    }
}

/// The buckets of one version, in hash order, covering every hash (or none: delta
/// separation was never used). Immutable: a flush or a bucket GC builds a new table and
/// installs it with its `VersionEdit`.
#[derive(Debug, Clone, Default)]
pub(crate) struct BucketTable {
    pub slots: Vec<BucketSlot>,
}

/// How the manifest records one bucket (FORMAT.md, "Manifest").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BucketMeta {
    pub depth: u8,
    pub prefix: u64,
    /// (segment file id, committed length), oldest first.
    pub segments: Vec<(u64, u64)>,
}

impl BucketMeta {
    /// Whether a list of buckets (in the manifest's order) covers every hash once, in
    /// hash order, at depths the engine makes.
    pub(crate) fn valid_table(buckets: &[BucketMeta]) -> bool {
        if buckets.is_empty() {
            return true;
        }
        let mut next: u128 = 0;
        for b in buckets {
            if b.depth > MAX_BUCKET_BITS || (b.depth < 64 && b.prefix >> b.depth != 0) {
                return false;
            }
            let width: u128 = 1u128 << (64 - u32::from(b.depth));
            let start = u128::from(b.prefix) * width;
            if start != next {
                return false;
            }
            next = start + width;
        }
        next == 1u128 << 64
    }
}

impl BucketTable {
    /// The bucket covering `hash`.
    fn slot_of(&self, hash: u64) -> Option<usize> {
        let i = self.slots.partition_point(|s| s.start() <= hash);
        let i = i.checked_sub(1)?;
        self.slots.get(i).filter(|s| s.covers(hash)).map(|_| i)
    }

    /// The table as the manifest records it.
    pub(crate) fn meta(&self) -> Vec<BucketMeta> {
        self.slots
            .iter()
            .map(|s| BucketMeta {
                depth: s.depth,
                prefix: s.prefix,
                segments: s.segments.iter().map(|(f, c)| (f.id, *c)).collect(),
            })
            .collect()
    }

    /// Called once an install made this table current: every segment it names stays on
    /// disk (a segment a flush or collection created is deleted on drop until then, so a
    /// failed job leaves no file behind).
    pub(crate) fn installed(&self) {
        for s in self.segments() {
            s.keep();
        }
    }

    /// Every segment the table names.
    pub(crate) fn segments(&self) -> impl Iterator<Item = &Arc<BucketSegment>> {
        self.slots
            .iter()
            .flat_map(|s| s.segments.iter().map(|(f, _)| f))
    }

    /// Committed bytes of every bucket.
    pub(crate) fn bytes(&self) -> u64 {
        self.slots.iter().map(BucketSlot::bytes).sum()
    }

    /// The operands of `key`'s records with an LSN range inside `[lo, hi]`, oldest first
    /// (records never overlap: each holds the deltas of one flush, or of one range a GC
    /// combined). Reads each record once (one read per record; a collected bucket holds
    /// one record per key and range).
    pub(crate) fn read_operands(
        &self,
        key: &[u8],
        lo: u64,
        hi: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let hash = key_hash(key);
        let Some(slot) = self.slot_of(hash).and_then(|i| self.slots.get(i)) else {
            return Err(Error::Internal(format!(
                "a bucket list of key {} but no delta bucket covers its hash",
                crate::delta::show_key(key)
            )));
        };
        let Some((first, _)) = slot.segments.first() else {
            return Ok(Vec::new());
        };
        let mut found: Vec<(u64, Vec<u8>)> = Vec::new();
        for loc in first.index.locations(hash) {
            let Some((seg, committed)) = slot.segments.iter().find(|(s, _)| s.id == loc.segment)
            else {
                continue;
            };
            if loc.offset + u64::from(loc.len) > *committed {
                continue; // written after this table, or by a flush that failed
            }
            let mut buf = crate::io::read_buf(loc.len as usize);
            seg.file.read_exact_at(loc.offset, &mut buf)?;
            let (rec, _) = decode_record(&buf).map_err(|what| seg.corrupt(loc.offset, what))?;
            if rec.key != key || rec.lo < lo || rec.hi > hi {
                continue;
            }
            let (rlo, list) = (rec.lo, rec.list.to_vec());
            found.push((rlo, list));
        }
        found.sort_by_key(|(l, _)| *l);
        Ok(found)
    }

    /// The inline operand list a bucket list stands for (its records' operands, oldest
    /// first, closed over its base pointer if it is); any other list is returned as it is.
    pub(crate) fn resolve(&self, key: &[u8], list: Vec<u8>) -> Result<Vec<u8>> {
        let Some((lo, hi)) = crate::delta::bucket_range(&list) else {
            return Ok(list);
        };
        let records = self.read_operands(key, lo, hi)?;
        if records.is_empty() {
            // A flush writes a record for every list, and a collection keeps what a live
            // list stands for: none means lost deltas, never "no deltas".
            let slot = self.slot_of(key_hash(key)).and_then(|i| self.slots.get(i));
            let path = slot
                .and_then(|s| s.segments.last())
                .map_or_else(|| PathBuf::from("delta buckets"), |(s, _)| s.path.clone());
            return Err(Error::corruption(
                path,
                0,
                format!(
                    "the delta bucket of key {} holds none of the records of LSNs {lo}..={hi} a run names",
                    crate::delta::show_key(key)
                ),
            ));
        }
        crate::delta::inline_bucket_list(key, &list, records.iter().map(|(_, l)| l.as_slice()))
    }
}

/// The segment a bucket is appending to, kept between flushes.
struct OpenSegment {
    segment: Arc<BucketSegment>,
    file: Box<dyn WritableFile>,
}

/// A keyspace's delta buckets: the shared index, the directory, and the segments being
/// appended to (one per bucket at most). Only flushes append, one at a time.
pub(crate) struct BucketStore {
    io: Io,
    dir: PathBuf,
    index: Arc<BucketIndex>,
    open: Mutex<HashMap<(u8, u64), OpenSegment>>,
    /// Committed bytes of each bucket right after its last collection: it is collected
    /// again once over twice that (and over `delta_bucket_size`), so a bucket of live
    /// records that cannot split is not rewritten at every flush.
    collected: Mutex<HashMap<(u8, u64), u64>>,
}

impl BucketStore {
    /// Opens the buckets a manifest names: checks that each segment holds at least its
    /// committed bytes, cuts what lies past them when `writable` (a flush that wrote them
    /// never installed), and indexes every record below them.
    pub(crate) fn open(
        io: &Io,
        dir: &Path,
        buckets: &[BucketMeta],
        writable: bool,
    ) -> Result<(Arc<BucketStore>, BucketTable)> {
        let store = Arc::new(BucketStore {
            io: io.clone(),
            dir: dir.to_path_buf(),
            index: Arc::new(BucketIndex::default()),
            open: Mutex::new(HashMap::new()),
            collected: Mutex::new(HashMap::new()),
        });
        if !BucketMeta::valid_table(buckets) {
            return Err(Error::corruption(
                dir.join(crate::filename::MANIFEST),
                0,
                "the delta bucket table does not cover every hash exactly once",
            ));
        }
        let mut slots = Vec::with_capacity(buckets.len());
        for b in buckets {
            let mut segments = Vec::with_capacity(b.segments.len());
            for &(id, committed) in &b.segments {
                let path = dir.join(file_name(id));
                let len = io.fs().file_len(&path)?;
                if len < committed {
                    return Err(Error::corruption(
                        &path,
                        len,
                        format!("delta bucket segment is {len} bytes, the manifest vouches for {committed}"),
                    ));
                }
                if len > committed && writable {
                    io.fs().truncate(&path, committed)?;
                }
                let seg = BucketSegment::open(io, dir, id, &store.index)?;
                seg.index_all(committed)?;
                segments.push((Arc::new(seg), committed));
            }
            slots.push(BucketSlot {
                depth: b.depth,
                prefix: b.prefix,
                segments,
            });
        }
        Ok((store, BucketTable { slots }))
    }

    /// The bucket of `table` most worth collecting: over `size` bytes and over twice what
    /// its last collection left, or made of more than [`MAX_SEGMENTS_PER_BUCKET`] segments
    /// (each holds a file descriptor, and a key's records spread over them).
    pub(crate) fn due_for_collection(&self, table: &BucketTable, size: u64) -> Option<usize> {
        let collected = self.collected.lock();
        table
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                let last = collected.get(&(s.depth, s.prefix)).copied().unwrap_or(0);
                s.bytes() > size.max(last.saturating_mul(2))
                    || s.segments.len() > MAX_SEGMENTS_PER_BUCKET
            })
            .max_by_key(|(_, s)| (s.bytes(), s.segments.len()))
            .map(|(i, _)| i)
    }

    /// Notes what a collection left in the buckets at `slots`.
    pub(crate) fn note_collected(&self, slots: &[BucketSlot]) {
        let mut collected = self.collected.lock();
        for s in slots {
            collected.insert((s.depth, s.prefix), s.bytes());
        }
    }

    /// Record locations the in-memory index holds (every segment's, replaced ones
    /// included until they are deleted).
    pub(crate) fn indexed(&self) -> usize {
        self.index.len()
    }

    /// Creates segment `id` (empty) for appending.
    fn create_segment(&self, id: u64) -> Result<OpenSegment> {
        let path = self.dir.join(file_name(id));
        let mut file = self.io.create(&path, IoComponent::DeltaBuckets)?;
        file.append(&segment_header())?;
        let segment = Arc::new(BucketSegment::open(&self.io, &self.dir, id, &self.index)?);
        Ok(OpenSegment { segment, file })
    }

    /// Starts the appends of one flush over `table` (the current one).
    pub(crate) fn begin_flush<'a>(
        self: &'a Arc<Self>,
        table: &BucketTable,
        new_id: &'a dyn Fn() -> u64,
    ) -> BucketFlush<'a> {
        let mut table = table.clone();
        if table.slots.is_empty() {
            let n = 1u64 << INITIAL_BUCKET_BITS;
            table.slots = (0..n)
                .map(|prefix| BucketSlot {
                    depth: INITIAL_BUCKET_BITS,
                    prefix,
                    segments: Vec::new(),
                })
                .collect();
        }
        BucketFlush {
            store: self,
            table,
            touched: HashMap::new(),
            created: false,
            new_id,
            buf: Vec::new(),
            records: 0,
        }
    }
}

/// The appends of one flush: records go to each bucket's open segment (a new one if the
/// bucket has none, e.g. after a restart or a failed flush); [`BucketFlush::finish`]
/// makes them durable and returns the table that names them, for the flush's edit. Dropped
/// without `finish`, the segments it appended to are abandoned: their bytes past the
/// committed lengths are never read, and a segment it created is deleted.
pub(crate) struct BucketFlush<'a> {
    store: &'a Arc<BucketStore>,
    table: BucketTable,
    touched: HashMap<usize, OpenSegment>,
    created: bool,
    new_id: &'a dyn Fn() -> u64,
    buf: Vec<u8>,
    records: u64,
}

impl BucketFlush<'_> {
    /// Appends the deltas of `key` with LSNs in `[lo, hi]` (an open operand list).
    pub(crate) fn append(&mut self, key: &[u8], lo: u64, hi: u64, list: &[u8]) -> Result<()> {
        let hash = key_hash(key);
        let Some(slot) = self.table.slot_of(hash) else {
            return Err(Error::Internal(
                "the delta bucket table does not cover a hash".into(),
            ));
        };
        if !self.touched.contains_key(&slot) {
            let s = &self.table.slots[slot];
            let open = self.store.open.lock().remove(&(s.depth, s.prefix));
            let open = match open {
                // Only a segment the table names, at exactly its committed length, is
                // appended to (anything else was abandoned).
                Some(o)
                    if s.segments.last().is_some_and(|(seg, c)| {
                        Arc::ptr_eq(seg, &o.segment) && *c == o.file.len()
                    }) =>
                {
                    o
                }
                _ => {
                    self.created = true;
                    let o = self.store.create_segment((self.new_id)())?;
                    // Deleted unless an install names it (`finish` clears the mark).
                    o.segment.mark_obsolete();
                    o
                }
            };
            self.touched.insert(slot, open);
        }
        let Some(open) = self.touched.get_mut(&slot) else {
            return Err(Error::Internal(
                "a delta bucket's open segment vanished".into(),
            ));
        };
        self.buf.clear();
        encode_record(key, lo, hi, list, &mut self.buf);
        let offset = open.file.len();
        open.file.append(&self.buf)?;
        open.segment.note(hash, offset, self.buf.len());
        self.records += 1;
        Ok(())
    }

    /// Records appended.
    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// Makes every append durable and returns the table naming them (unchanged if nothing
    /// was appended and the table existed). The open segments stay open for the next flush.
    pub(crate) fn finish(&mut self) -> Result<Option<BucketTable>> {
        if self.touched.is_empty() {
            return Ok(None);
        }
        for open in self.touched.values_mut() {
            open.file.sync_data()?;
        }
        if self.created {
            self.store.io.fs().sync_dir(&self.store.dir)?;
        }
        let touched = std::mem::take(&mut self.touched);
        let mut open_map = self.store.open.lock();
        for (slot, open) in touched {
            let s = &mut self.table.slots[slot];
            let len = open.file.len();
            match s.segments.last_mut() {
                Some((seg, c)) if Arc::ptr_eq(seg, &open.segment) => *c = len,
                // Still deleted on drop until the install names it (`BucketTable::installed`).
                _ => s.segments.push((Arc::clone(&open.segment), len)),
            }
            if open_map.len() < MAX_OPEN_SEGMENTS {
                open_map.insert((s.depth, s.prefix), open);
            }
        }
        Ok(Some(std::mem::take(&mut self.table)))
    }
}

#[cfg(test)]
mod tests;
