//! Entry points for the fuzz targets; not a stable API.
//!
//! Compiled only with the `fuzzing` cargo feature (which turns on `sim`). Each function is
//! a thin wrapper over the engine's real decoder (or encoder) of one on-disk layout of
//! `docs/FORMAT.md`, so the targets in `fuzz/` can feed it arbitrary bytes and check round
//! trips. They take and return the engine's own types, re-exported below. Three types are
//! declared here: [`Op`], an owned batch operation (the engine's decoded operation borrows
//! the payload), [`Manifest`] with [`ManifestSegment`], a public copy of the manifest
//! state with each segment's kind as its byte code (the engine's `ManifestState` and
//! `SegmentKind` are crate-private), and [`LevelScan`], the result of
//! [`decode_level_file`]. Decoders that read files run on an in-memory [`SimFs`].
//!
//! Never: a stable API, or a decoder of its own: every entry point calls the code the
//! engine runs.

use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::io::{Io, IoComponent, SimFs};
use crate::level::footer::{FooterError, LEVEL_VERSION};
use crate::level::node::{self, NodeBuf, NodeView, KIND_LARGE, KIND_MEDIUM, NODE_INDEX, NODE_LEAF};
use crate::level::{EntryValue, LevelBuilder, LevelFile};
use crate::log::large::{self, SegmentKind, SegmentWriter};
use crate::log::small::{self, SmallLogWriter};
use crate::manifest::{ManifestState, SegmentRecord};
use crate::write::batch::{decode_ops, encode_op, BatchOp, WriteBatch};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::level::footer::{Footer, FOOTER_SIZE};
pub use crate::level::reader::LevelEntry;
pub use crate::log::large::{LargeRecord, RecordIndex, SegmentTail};
pub use crate::log::ptr::{LogPtr, LOG_PTR_SIZE};
pub use crate::log::small::{Record as WalRecord, Replay as WalReplay};
pub use crate::value::LevelValue;

/// Directory the file-based decoders run in (on a fresh [`SimFs`]).
const DIR: &str = "/";

fn sim_io() -> (SimFs, Io) {
    let fs = SimFs::new();
    let io = Io::new(Arc::new(fs.clone()), false);
    (fs, io)
}

/// Writes `data` as file `name` of a fresh in-memory file system.
fn sim_with_file(name: &str, data: &[u8]) -> Result<(SimFs, Io)> {
    let (fs, io) = sim_io();
    let mut f = io.create(&Path::new(DIR).join(name), IoComponent::Flush)?;
    f.append(data)?;
    f.sync_data()?;
    Ok((fs, io))
}

/// Reads back file `name` of `fs` (empty if it does not exist).
fn sim_read(fs: &SimFs, name: &str) -> Vec<u8> {
    fs.read_file(&Path::new(DIR).join(name)).unwrap_or_default()
}

fn corrupt(what: &str) -> Error {
    Error::corruption("<fuzz input>", 0, what)
}

// ---------------------------------------------------------------------------------------
// Log pointers.

/// Decodes a log pointer from the start of `buf`; returns it and the bytes consumed.
pub fn decode_log_ptr(buf: &[u8]) -> Result<(LogPtr, usize)> {
    let mut d = crate::format::Decoder::new(buf);
    let p = LogPtr::decode(&mut d).ok_or_else(|| corrupt("truncated log pointer"))?;
    Ok((p, buf.len() - d.remaining()))
}

/// Encodes a log pointer.
pub fn encode_log_ptr(p: LogPtr) -> Vec<u8> {
    let mut out = Vec::with_capacity(LOG_PTR_SIZE);
    p.encode_into(&mut out);
    out
}

// ---------------------------------------------------------------------------------------
// Write batches and small-log records.

/// One batch operation, owning its bytes (the engine's decoded operation borrows them from
/// the payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `op 1`: key, value.
    Put(Vec<u8>, Vec<u8>),
    /// `op 2`: key.
    Delete(Vec<u8>),
    /// `op 3`: key, pointer to the value in the large log.
    PutLarge(Vec<u8>, LogPtr),
    /// `op 4`: key, delta for the merge operator.
    Merge(Vec<u8>, Vec<u8>),
    /// `op 5`: start, end (`None`: to the end of the key space) of a range deletion.
    DeleteRange(Vec<u8>, Option<Vec<u8>>),
    /// `op 6`: the operations after it go to this keyspace (not counted as an operation).
    Keyspace(u32),
}

impl Op {
    fn borrowed(&self) -> BatchOp<'_> {
        match self {
            Op::Put(k, v) => BatchOp::Put(k, v),
            Op::Delete(k) => BatchOp::Delete(k),
            Op::PutLarge(k, p) => BatchOp::PutLarge(k, *p),
            Op::Merge(k, d) => BatchOp::Merge(k, d),
            Op::DeleteRange(s, e) => BatchOp::DeleteRange(s, e.as_deref()),
            Op::Keyspace(id) => BatchOp::Keyspace(*id),
        }
    }
}

impl From<BatchOp<'_>> for Op {
    fn from(op: BatchOp<'_>) -> Self {
        match op {
            BatchOp::Put(k, v) => Op::Put(k.to_vec(), v.to_vec()),
            BatchOp::Delete(k) => Op::Delete(k.to_vec()),
            BatchOp::PutLarge(k, p) => Op::PutLarge(k.to_vec(), p),
            BatchOp::Merge(k, d) => Op::Merge(k.to_vec(), d.to_vec()),
            BatchOp::DeleteRange(s, e) => Op::DeleteRange(s.to_vec(), e.map(<[u8]>::to_vec)),
            BatchOp::Keyspace(id) => Op::Keyspace(id),
        }
    }
}

/// Decodes a batch payload holding `count` operations (the payload must be consumed
/// exactly).
pub fn decode_batch(payload: &[u8], count: u32) -> Result<Vec<Op>> {
    let ops = decode_ops(payload, count).ok_or_else(|| corrupt("malformed batch payload"))?;
    Ok(ops.into_iter().map(Op::from).collect())
}

/// Encodes operations in the batch payload format (as the small log holds them).
pub fn encode_batch(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::new();
    for op in ops {
        encode_op(&mut out, op.borrowed());
    }
    out
}

/// The payload and operation count of a [`WriteBatch`] as the engine commits it.
pub fn write_batch_payload(batch: &WriteBatch) -> (Vec<u8>, u32) {
    (batch.payload().to_vec(), batch.count())
}

/// Builds a [`WriteBatch`] from puts and deletes (`None` deletes), decodes its payload
/// with the real decoder and returns the decoded operations.
pub fn roundtrip_batch(ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<Vec<Op>> {
    let mut b = WriteBatch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k, v),
            None => b.delete(k),
        };
    }
    decode_batch(b.payload(), b.count())
}

/// Replays `data` as a whole small-log file (header included) as recovery does; `newest`
/// lets the file be shorter than its header.
pub fn decode_wal_chunk(data: &[u8], newest: bool) -> Result<WalReplay> {
    let name = small::file_name(1);
    let (_fs, io) = sim_with_file(&name, data)?;
    small::replay_file(&io, &Path::new(DIR).join(name), newest)
}

/// Writes a small-log file holding `(first_lsn, count, payload)` records with the real
/// writer and returns its bytes.
pub fn encode_wal(records: &[(u64, u32, Vec<u8>)]) -> Result<Vec<u8>> {
    let (fs, io) = sim_io();
    let mut w = SmallLogWriter::create(&io, Path::new(DIR), 1)?;
    for (lsn, count, payload) in records {
        w.add(*lsn, *count, payload);
        w.commit(false)?;
    }
    w.sync()?;
    Ok(sim_read(&fs, &small::file_name(1)))
}

// ---------------------------------------------------------------------------------------
// Large-log and transient-log segments.

/// The path the segment decoders name in their errors (large-log segment 1).
fn segment_path() -> PathBuf {
    Path::new(DIR).join(SegmentKind::Large.file_name(1))
}

/// Decodes every record of a whole segment file (id 1; `tolerate_tail`: a damaged tail
/// ends the scan instead of being an error), as GC and `check` do.
pub fn decode_segment(data: &[u8], tolerate_tail: bool) -> Result<Vec<(LogPtr, LargeRecord)>> {
    large::parse_segment(data, &segment_path(), 1, tolerate_tail)
}

/// Runs recovery's tail scan over a whole segment file.
pub fn scan_segment_tail(data: &[u8]) -> SegmentTail {
    large::scan_tail(data)
}

/// Decodes the record `ptr` points at from exactly its bytes (`buf` is `ptr.len` bytes),
/// checking that it holds `key`, as a read through a pointer does.
pub fn decode_segment_record(buf: &[u8], ptr: LogPtr, key: &[u8]) -> Result<Vec<u8>> {
    large::decode_checked(buf, ptr, key, &segment_path())
}

/// Reads the value `ptr` points at from segment file `data` (id `ptr.segment`) as a get
/// does: the read itself, then the record checks.
pub fn read_segment_value(data: &[u8], ptr: LogPtr, key: &[u8]) -> Result<Vec<u8>> {
    let kind = SegmentKind::Large;
    let (_fs, io) = sim_with_file(&kind.file_name(ptr.segment), data)?;
    let seg = large::SegmentFile::open(&io, Path::new(DIR), kind, ptr.segment)?;
    seg.read(ptr, key)
}

/// Reads the values `reads` ((pointer, key) pairs, the pointers' segment ids ignored) name
/// from segment file `data` opened as a transient segment with a cache, as scans and gets
/// do: all of them in scan batches of up to 8, in the order given
/// (`read_many_through_cache`: spans widened to whole blocks, which are cached), and each
/// alone through a second, fresh cache (`read_through_cache`: a miss reads its block).
/// Returns both answers, in order.
#[allow(clippy::type_complexity)]
pub fn read_transient_values(
    data: &[u8],
    reads: &[(LogPtr, Vec<u8>)],
) -> Result<(Vec<Result<Vec<u8>>>, Vec<Result<Vec<u8>>>)> {
    let kind = SegmentKind::Transient;
    let (_fs, io) = sim_with_file(&kind.file_name(1), data)?;
    let seg = large::SegmentFile::open(&io, Path::new(DIR), kind, 1)?
        .with_cache(Arc::new(BlockCache::with_pinning(1 << 20, 0)));
    let ptr_of = |p: LogPtr| LogPtr { segment: 1, ..p };
    let mut scanned = Vec::with_capacity(reads.len());
    for batch in reads.chunks(8) {
        let items: Vec<(&large::SegmentFile, LogPtr, &[u8])> = batch
            .iter()
            .map(|(p, k)| (&seg, ptr_of(*p), k.as_slice()))
            .collect();
        scanned.extend(
            large::SegmentFile::read_many_through_cache(&items)
                .into_iter()
                .map(|r| r.map(|v| v.to_vec())),
        );
    }
    // Gets on a fresh cache (their own block reads from the file), then scans.
    let fresh = large::SegmentFile::open(&io, Path::new(DIR), kind, 1)?
        .with_cache(Arc::new(BlockCache::with_pinning(1 << 20, 0)));
    let alone = reads
        .iter()
        .map(|(p, k)| fresh.read_through_cache(ptr_of(*p), k).map(|v| v.to_vec()))
        .collect();
    Ok((scanned, alone))
}

/// Writes a segment (id 1) holding `(key, value, lsn)` records with the real writer;
/// returns its bytes and each record's pointer.
pub fn encode_segment(records: &[(Vec<u8>, Vec<u8>, u64)]) -> Result<(Vec<u8>, Vec<LogPtr>)> {
    let (fs, io) = sim_io();
    let kind = SegmentKind::Large;
    let mut w = SegmentWriter::create(&io, Path::new(DIR), kind, 1)?;
    let mut ptrs = Vec::with_capacity(records.len());
    for (k, v, lsn) in records {
        ptrs.push(w.append(k, v, *lsn)?);
    }
    w.commit(true)?;
    Ok((sim_read(&fs, &kind.file_name(1)), ptrs))
}

// ---------------------------------------------------------------------------------------
// Level files: nodes, footer, whole files.

/// Writes the node checksum of `node` (so structural checks can be fuzzed past it).
pub fn seal_node(node: &mut [u8]) {
    let crc = node::node_crc(node);
    crate::format::put_u32_at(node, 12, crc);
}

fn view(buf: &[u8], kind: u8, verify: bool) -> Result<NodeView<'_>> {
    let v = if verify {
        NodeView::verify(buf, kind)
    } else {
        NodeView::new(buf, kind)
    };
    v.map_err(corrupt)
}

/// Decodes every entry of a leaf (`verify`: check the checksum first, as a node read from
/// disk is), and runs a lookup of each key. Overflow values stay references.
pub fn decode_leaf(buf: &[u8], verify: bool) -> Result<Vec<LevelEntry>> {
    let v = view(buf, NODE_LEAF, verify)?;
    let mut out = Vec::new();
    for i in 0..v.count() {
        let e = v
            .leaf_entry(i)
            .ok_or_else(|| corrupt("undecodable leaf entry"))?;
        if v.leaf_key(i) != Some(e.key) {
            return Err(corrupt("leaf key accessor disagrees with the entry"));
        }
        out.push((e.key.to_vec(), e.lsn, LevelValue::from(e.value)));
    }
    // A leaf the builder could have written (keys ascending, search keys true to them)
    // must find each key where it is; any other leaf only must not panic.
    let well_formed = out.windows(2).all(|w| w[0].0 < w[1].0) && v.check_search_keys().is_ok();
    for (i, (key, _, _)) in out.iter().enumerate() {
        let at = v
            .lower_bound(key, false)
            .ok_or_else(|| corrupt("undecodable leaf key"))?;
        let past = v
            .lower_bound(key, true)
            .ok_or_else(|| corrupt("undecodable leaf key"))?;
        if well_formed && (at, past) != (i, i + 1) {
            return Err(corrupt("a lookup in a well-formed leaf misses its key"));
        }
    }
    Ok(out)
}

/// Decodes every (pivot key, child offset) of an index node and runs a child lookup of
/// each pivot.
pub fn decode_index(buf: &[u8], verify: bool) -> Result<Vec<(Vec<u8>, u64)>> {
    let v = view(buf, NODE_INDEX, verify)?;
    let mut out = Vec::new();
    for i in 0..v.count() {
        let key = v.key(i).ok_or_else(|| corrupt("undecodable index key"))?;
        let child = v
            .child(i)
            .ok_or_else(|| corrupt("undecodable index entry"))?;
        out.push((key.to_vec(), child));
    }
    for (k, _) in &out {
        v.child_for(k)
            .ok_or_else(|| corrupt("undecodable index key"))?;
    }
    Ok(out)
}

/// Builds a leaf of `size` bytes from `entries` (in the given order) with the real node
/// writer; `None` if they do not fit. Overflow entries are written as given.
pub fn encode_leaf(size: usize, entries: &[LevelEntry]) -> Option<Vec<u8>> {
    let mut n = NodeBuf::new(size, NODE_LEAF);
    for (k, lsn, value) in entries {
        let need = match value {
            LevelValue::Inline(v) | LevelValue::Deltas(v) => n.inline_len(k.len(), *lsn, v.len()),
            LevelValue::Overflow { len, .. } | LevelValue::DeltasOverflow { len, .. } => {
                n.overflow_len(k.len(), *lsn, *len)
            }
            LevelValue::Medium(p) | LevelValue::Large(p) => n.pointer_len(k.len(), *lsn, *p),
            LevelValue::Tombstone => n.tombstone_len(k.len(), *lsn),
        };
        if k.len() > usize::from(u16::MAX) || !n.fits(k, need) {
            return None;
        }
        match value {
            LevelValue::Inline(v) => n.push_inline(k, *lsn, v),
            LevelValue::Deltas(v) => n.push_bytes(node::KIND_DELTAS, k, *lsn, v),
            LevelValue::Overflow { offset, len, crc } => {
                n.push_overflow(node::KIND_OVERFLOW, k, *lsn, *len, *offset, *crc)
            }
            LevelValue::DeltasOverflow { offset, len, crc } => {
                n.push_overflow(node::KIND_DELTAS_OVERFLOW, k, *lsn, *len, *offset, *crc)
            }
            LevelValue::Medium(p) => n.push_pointer(KIND_MEDIUM, k, *lsn, *p),
            LevelValue::Large(p) => n.push_pointer(KIND_LARGE, k, *lsn, *p),
            LevelValue::Tombstone => n.push_tombstone(k, *lsn),
        }
    }
    Some(n.finish().ok()?.to_vec())
}

/// Builds an index node of `size` bytes from (pivot, child) pairs; `None` if they do not
/// fit.
pub fn encode_index(size: usize, entries: &[(Vec<u8>, u64)]) -> Option<Vec<u8>> {
    let mut n = NodeBuf::new(size, NODE_INDEX);
    for (k, child) in entries {
        if k.len() > usize::from(u16::MAX) || !n.fits(k, node::INDEX_FIXED + k.len()) {
            return None;
        }
        n.push_index(k, *child);
    }
    Some(n.finish().ok()?.to_vec())
}

/// Decodes a footer (the last [`FOOTER_SIZE`] bytes of a level file).
pub fn decode_footer(f: &[u8]) -> Result<Footer> {
    Footer::decode(f).map_err(|e| match e {
        FooterError::Corrupt(what) => corrupt(what),
        FooterError::Version(found) => Error::UnsupportedVersion {
            file: "<fuzz input>".into(),
            found,
            supported: LEVEL_VERSION,
        },
    })
}

/// Encodes a footer into [`FOOTER_SIZE`] bytes.
pub fn encode_footer(f: &Footer) -> Vec<u8> {
    let mut out = vec![0u8; FOOTER_SIZE];
    f.encode_into(&mut out);
    out
}

/// What reading a whole level file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelScan {
    /// Entries in key order through the index (overflow values loaded).
    pub cursor: Vec<LevelEntry>,
    /// Entries in file order as compaction reads them (overflow values loaded).
    pub scanner: Vec<LevelEntry>,
}

/// Opens `data` as a whole level file and reads it every way the engine does: a cursor
/// walk (with overflow values), a seek to and a point lookup of every key it found, and a
/// compaction scan. The first error ends the walk. The file's index is pinned when it
/// decodes (so the fence walk is fuzzed too), else read through the cache.
pub fn decode_level_file(data: &[u8]) -> Result<LevelScan> {
    let id = 1;
    let (_fs, io) = sim_with_file(&crate::level::reader::file_name(id), data)?;
    let lf = Arc::new(LevelFile::open(
        &io,
        Path::new(DIR),
        id,
        Arc::new(BlockCache::with_pinning(1 << 20, 64 << 20)),
    )?);
    let mut cursor = Vec::new();
    let mut c = lf.cursor();
    c.seek(Bound::Unbounded)?;
    // A well-formed file holds at most one entry per 4 bytes of leaf (its slot).
    let limit = data.len() / 4 + 1;
    while let Some((key, lsn, v)) = c.next_entry()? {
        cursor.push((key, lsn, lf.load_overflow(v)?));
        if cursor.len() > limit {
            return Err(corrupt("cursor yields more entries than the file can hold"));
        }
    }
    for (key, _, _) in cursor.iter().take(64) {
        c.seek(Bound::Included(key))?;
        c.next_entry()?;
        c.seek(Bound::Excluded(key))?;
        c.next_entry()?;
        if let Some((_, v)) = lf.get(key)? {
            lf.load_overflow(v)?;
        }
        let _ = lf.search(key, true)?;
    }
    let mut scanner = Vec::new();
    let mut s = lf.scanner(IoComponent::Compaction)?;
    while let Some((key, lsn, v)) = s.next_entry()? {
        scanner.push((key, lsn, s.load_overflow(v)?));
        if scanner.len() > limit {
            return Err(corrupt(
                "scanner yields more entries than the file can hold",
            ));
        }
    }
    Ok(LevelScan { cursor, scanner })
}

/// Writes a level file from entries in strictly increasing key order with the real
/// builder (`leaf_size` and `index_size` as the options allow); returns its bytes.
/// `Inline` values are handed over as bytes (the builder decides whether they become
/// overflow blobs); an `Overflow` value is an invalid argument.
pub fn encode_level_file(
    entries: &[LevelEntry],
    leaf_size: usize,
    index_size: usize,
) -> Result<Vec<u8>> {
    let (fs, io) = sim_io();
    let name = crate::level::reader::file_name(1);
    let f = io.create(&Path::new(DIR).join(&name), IoComponent::Flush)?;
    let mut b = LevelBuilder::new(f, leaf_size, index_size).with_large_pointers(true);
    for (k, lsn, v) in entries {
        let ev = match v {
            LevelValue::Inline(bytes) => EntryValue::Bytes(bytes),
            LevelValue::Medium(p) => EntryValue::Medium(*p),
            LevelValue::Large(p) => EntryValue::Large(*p),
            LevelValue::Tombstone => EntryValue::Tombstone,
            LevelValue::Deltas(list) => EntryValue::Deltas(list),
            LevelValue::Overflow { .. } | LevelValue::DeltasOverflow { .. } => {
                return Err(Error::InvalidArgument(
                    "the level builder places overflow blobs itself".into(),
                ))
            }
        };
        b.add(k, *lsn, ev)?;
    }
    b.finish()?;
    Ok(sim_read(&fs, &name))
}

// ---------------------------------------------------------------------------------------
// The manifest.

/// One log segment named by the manifest (a copy of the engine's record; see the module
/// documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestSegment {
    /// File id.
    pub id: u64,
    /// 1 = large, 2 = transient.
    pub kind: u8,
    /// Owner run (transient).
    pub owner: u64,
    /// Garbage bytes (large).
    pub garbage: u64,
}

/// The manifest's contents (a copy of the engine's state, as [`ManifestSegment`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    /// Every id below this was allocated.
    pub next_file_id: u64,
    /// Small-log files below this id are flushed.
    pub log_min_id: u64,
    /// Highest LSN in the levels.
    pub flushed_lsn: u64,
    /// (level, file id, file length) per run.
    pub levels: Vec<(u32, u64, u64)>,
    /// Live log segments.
    pub segments: Vec<ManifestSegment>,
    /// Flushed range tombstones with their pending runs (format version 2).
    pub range_tombstones: Vec<ManifestRangeTombstone>,
    /// The format version the manifest was read in (`encode_manifest` writes the newest).
    pub version: u32,
}

/// A flushed range tombstone as the manifest records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestRangeTombstone {
    /// Versions of covered keys below this LSN are deleted.
    pub lsn: u64,
    /// First key covered.
    pub start: Vec<u8>,
    /// First key past the range (`None`: to the end of the key space).
    pub end: Option<Vec<u8>>,
    /// Runs that may still hold what it deletes (ascending, at least one).
    pub pending: Vec<u64>,
}

/// Decodes a whole `MANIFEST` file.
pub fn decode_manifest(data: &[u8]) -> Result<Manifest> {
    let s = ManifestState::decode(data, Path::new("MANIFEST"))?;
    let version = data
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes);
    Ok(Manifest {
        version,
        range_tombstones: s
            .range_tombstones
            .iter()
            .map(|r| ManifestRangeTombstone {
                lsn: r.tombstone.lsn,
                start: r.tombstone.start.clone(),
                end: r.tombstone.end.clone(),
                pending: r.pending.clone(),
            })
            .collect(),
        next_file_id: s.next_file_id,
        log_min_id: s.log_min_id,
        flushed_lsn: s.flushed_lsn,
        levels: s.levels,
        segments: s
            .segments
            .into_iter()
            .map(|r| ManifestSegment {
                id: r.id,
                kind: crate::manifest::kind_code(r.kind),
                owner: r.owner,
                garbage: r.garbage,
            })
            .collect(),
    })
}

/// Encodes a manifest as the engine writes it.
pub fn encode_manifest(m: &Manifest) -> Vec<u8> {
    ManifestState {
        next_file_id: m.next_file_id,
        log_min_id: m.log_min_id,
        flushed_lsn: m.flushed_lsn,
        levels: m.levels.clone(),
        segments: m
            .segments
            .iter()
            .map(|r| SegmentRecord {
                id: r.id,
                // A code the manifest cannot hold is written as a large segment.
                kind: crate::manifest::kind_of(r.kind).unwrap_or(SegmentKind::Large),
                owner: r.owner,
                garbage: r.garbage,
            })
            .collect(),
        range_tombstones: m
            .range_tombstones
            .iter()
            .map(|r| crate::range_delete::PendingTombstone {
                tombstone: crate::range_delete::RangeTombstone {
                    start: r.start.clone(),
                    end: r.end.clone(),
                    lsn: r.lsn,
                },
                pending: r.pending.clone(),
            })
            .collect(),
        // `Manifest` has no delta bucket table: it is written as version 3.
        buckets: Vec::new(),
    }
    .encode()
}

/// The manifest format version `encode_manifest` writes: 3, the version of a manifest
/// without delta buckets ([`Manifest`] has no bucket table; the engine writes version
/// `crate::manifest::MANIFEST_VERSION`, 4, only for a state that has one).
pub const MANIFEST_VERSION: u32 = 3;

/// Decodes an `OPTIONS` file (`docs/FORMAT.md`, "Options file").
pub fn decode_options(data: &[u8]) -> Result<crate::Options> {
    crate::options_file::decode(data, Path::new("OPTIONS"))
}

/// Decodes a keyspace catalog (`KEYSPACES`) and encodes it again: `Ok` holds the
/// re-encoded bytes of an accepted catalog.
pub fn roundtrip_keyspace_catalog(data: &[u8]) -> Result<Vec<u8>> {
    crate::catalog::Catalog::decode(data, Path::new("KEYSPACES")).map(|c| c.encode())
}

/// Encodes options as an `OPTIONS` file.
pub fn encode_options(o: &crate::Options) -> Vec<u8> {
    crate::options_file::encode(o)
}

/// What [`operand_list`] found in a list that decodes.
#[derive(Debug)]
pub struct OperandList<'a> {
    /// The list encoded again from its decoded parts.
    pub again: Vec<u8>,
    /// The base a fold uses: the list's own for a closed list that carries one, else the
    /// base given.
    pub base: Option<&'a [u8]>,
    /// The deltas, oldest first.
    pub operands: Vec<&'a [u8]>,
    /// The value `Append` folds from the list.
    pub folded: Result<Vec<u8>>,
    /// A bucket list's LSN range (its deltas are in a delta bucket: a fold of the list
    /// alone is refused).
    pub bucket: Option<(u64, u64)>,
}

/// An operand list (`docs/FORMAT.md`, "Operand list"), if `list` decodes.
pub fn operand_list<'a>(list: &'a [u8], base: Option<&'a [u8]>) -> Option<OperandList<'a>> {
    let l = crate::delta::decode(list)?;
    let again = crate::delta::reencode(&l);
    let used = if l.closed && l.base_ptr.is_none() {
        l.base
    } else {
        base
    };
    let folded = crate::delta::fold_full(&crate::delta::Append, b"key", base, list);
    Some(OperandList {
        again,
        base: used,
        operands: l.operands,
        folded,
        bucket: l.bucket,
    })
}

// ---------------------------------------------------------------------------------------
// Delta bucket segments.

/// Scans `data` as the records of a delta bucket segment (`docs/FORMAT.md`, "Delta
/// bucket segment": the bytes after its header) the way the engine does
/// (`BucketSegment::scan`): decodes a record, advances by the length it returned, and
/// stops at the end or at the first record that does not decode. Panics
/// (a fuzz finding) if a decoded length is zero or runs past the bytes, or if a decoded
/// record does not encode back to exactly its bytes with the engine's encoder.
pub fn bucket_record(data: &[u8]) {
    let mut at = 0usize;
    let mut again = Vec::new();
    while let Some(rest) = data.get(at..).filter(|r| !r.is_empty()) {
        let Ok((rec, n)) = crate::bucket::decode_record(rest) else {
            return;
        };
        let Some(bytes) = rest.get(..n).filter(|b| !b.is_empty()) else {
            panic!(
                "a record at {at} decoded with length {n} of {} bytes",
                rest.len()
            );
        };
        again.clear();
        crate::bucket::encode_record(rec.key, rec.lo, rec.hi, rec.list, &mut again);
        assert!(
            again == bytes,
            "the record at {at} ({rec:?}) encodes to {again:?}, not to its bytes {bytes:?}"
        );
        at += n;
    }
}

/// A level file's Bloom filter unit (`docs/FORMAT.md`, "Filter unit") decoded as opening
/// the file does; `Ok` holds what the filter answers for each of `keys` (`false`: certainly
/// absent). `Err` says why the unit was refused.
pub fn decode_filter(unit: &[u8], keys: &[&[u8]]) -> std::result::Result<Vec<bool>, String> {
    use crate::level::filter::{Bloom, FilterError};
    match Bloom::decode(unit) {
        Ok(bloom) => Ok(keys.iter().map(|k| bloom.may_contain(k)).collect()),
        Err(FilterError::Corrupt(what)) => Err(what.to_string()),
        Err(FilterError::Version(v)) => Err(format!("unsupported filter version {v}")),
    }
}

/// A level file's large pointer table (`docs/FORMAT.md`, "Large pointer table") decoded as
/// opening the file does; `Ok` holds the pointer it names for each of `keys`.
pub fn decode_large_pointers(
    unit: &[u8],
    keys: &[&[u8]],
) -> std::result::Result<Vec<Option<LogPtr>>, String> {
    use crate::level::large_pointers::{LargePointers, LargePointersError};
    match LargePointers::decode(unit) {
        Ok(t) => Ok(keys.iter().map(|k| t.guess(k)).collect()),
        Err(LargePointersError::Corrupt(what)) => Err(what.to_string()),
        Err(LargePointersError::Version(v)) => {
            Err(format!("unsupported large pointer table version {v}"))
        }
    }
}

/// The large pointer table a level file whose large pairs are `pairs` carries (`None`:
/// no table, when no pointer is kept).
pub fn encode_large_pointers(pairs: &[(&[u8], LogPtr)]) -> Option<Vec<u8>> {
    let mut b = crate::level::large_pointers::LargePointersBuilder::default();
    for (k, p) in pairs {
        b.add(k, *p);
    }
    b.encode()
}

/// The filter unit a level file of `keys` carries at `bits_per_key` (1..=30), as the
/// builder writes it.
pub fn encode_filter(bits_per_key: u32, keys: &[&[u8]]) -> Vec<u8> {
    let mut b = crate::level::filter::BloomBuilder::new(bits_per_key, keys.len() as u64);
    for k in keys {
        b.add(k);
    }
    b.encode()
}

/// Decodes a cache hint file (`CACHE_HINTS`): `Ok` holds its entries as (keyspace, file
/// id, tag, length), in the file's order; `Err` says why it was refused.
pub fn decode_cache_hints(data: &[u8]) -> std::result::Result<Vec<(u32, u64, u64, u32)>, String> {
    crate::cache::hints::decode(data)
        .map(|entries| {
            entries
                .into_iter()
                .map(|e| (e.keyspace, e.file, e.tag, e.len))
                .collect()
        })
        .map_err(|e| e.to_string())
}

/// Encodes a cache hint file naming `entries` ((keyspace, file id, tag, length)).
pub fn encode_cache_hints(entries: &[(u32, u64, u64, u32)]) -> Vec<u8> {
    crate::cache::hints::encode(
        entries
            .iter()
            .map(|&(keyspace, file, tag, len)| crate::cache::HintedEntry {
                keyspace,
                file,
                tag,
                len,
            })
            .collect(),
    )
}

/// Decodes a wasted-search count file (`SEARCH_COUNTS`): `Ok` holds its counts as
/// (keyspace, file id, searches), in the file's order; `Err` says why it was refused.
pub fn decode_search_counts(data: &[u8]) -> std::result::Result<Vec<(u32, u64, u64)>, String> {
    crate::search_counts::decode(data)
        .map(|counts| {
            counts
                .into_iter()
                .map(|c| (c.keyspace, c.file, c.searches))
                .collect()
        })
        .map_err(|e| e.to_string())
}

/// Encodes a wasted-search count file naming `counts` ((keyspace, file id, searches)).
pub fn encode_search_counts(counts: &[(u32, u64, u64)]) -> Vec<u8> {
    crate::search_counts::encode(
        counts
            .iter()
            .map(
                |&(keyspace, file, searches)| crate::search_counts::RunCount {
                    keyspace,
                    file,
                    searches,
                },
            )
            .collect(),
    )
}
