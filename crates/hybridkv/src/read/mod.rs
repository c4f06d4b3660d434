//! The read path: point lookups and merged iterators over the memtables and levels.
//!
//! Owns: finding the newest visible version of a key (memtable, immutable memtables, then
//! L1..Ln; the first match wins, but for deltas, which take every older version down to
//! their base, folded with the merge operator), dereferencing log pointers through the captured segment
//! set, and the iterators (one cursor per source, merged in key order by `crate::merge`).
//! Never: writes anything; it reads from a captured `SuperVersion`, so every file and
//! segment it reads stays alive.

pub(crate) mod iter;

use crate::bucket::BucketTable;
use crate::delta::MergeOperator;
use crate::error::{Error, Result};
use crate::level::{LevelFile, LevelValue, Probe};
use crate::log::large::SegmentKind;
use crate::range_delete::RangeTombstones;
use crate::value::Value;
use std::sync::Arc;

pub(crate) use crate::log::large::SegmentSet;
pub(crate) use crate::version_set::SuperVersion;

/// A stored version (pointers not followed) with the level file it came from (to read
/// overflow blobs); `None` for the memtable.
pub(crate) type Stored = (LevelValue, Option<Arc<LevelFile>>);

/// What a lookup found for a key: the deltas above its base, if any, and the base.
#[derive(Debug, Default)]
pub(crate) struct Lookup {
    /// The operand lists of every delta newer than the base, newest first; empty if the
    /// newest version is not a delta.
    pub deltas: crate::delta::Stack,
    /// The newest version that is not a delta (a tombstone included); `None` if there is
    /// none below the deltas (or a closed list ended them), or no version at all.
    pub base: Option<Stored>,
    /// Level files that gave a delta list or the base.
    pub from_files: usize,
    /// The delta buckets the stacked bucket lists read (set when one was met).
    buckets: Option<Arc<BucketTable>>,
    /// The value of a large base already read, with its pointer: a level file's large
    /// pointer table named the record and the record held the key
    /// (`LevelFile::large_guess`), so the value is not read again.
    large_read: Option<(crate::log::ptr::LogPtr, bytes::Bytes)>,
}

impl Lookup {
    /// One operand list of every delta found, oldest first (bucket lists read from their
    /// delta bucket).
    pub(crate) fn into_list(self, key: &[u8]) -> Result<Vec<u8>> {
        let mut deltas = self.deltas;
        if let Some(table) = &self.buckets {
            deltas.resolve_each(|list| table.resolve(key, list))?;
        }
        deltas.into_list(key)
    }

    /// Takes `v`: a delta is stacked below the ones already met; anything else is the
    /// base. True while the lookup must look further (no base, no closed list yet).
    /// A bucket list is read from `buckets` (the version's delta buckets) first.
    fn take(
        &mut self,
        v: LevelValue,
        file: Option<&Arc<LevelFile>>,
        buckets: &Arc<BucketTable>,
    ) -> Result<bool> {
        self.from_files += usize::from(file.is_some());
        let v = match (&v, file) {
            (LevelValue::DeltasOverflow { .. }, Some(f)) => f.load_overflow(v)?,
            _ => v,
        };
        match v {
            LevelValue::Deltas(older) => {
                // A bucket list is stacked as it is (its head says whether it is closed
                // and over which pointer); its records are read only when the deltas are
                // folded (`Lookup::into_list`), not by a lookup that only wants the base.
                if self.buckets.is_none() && crate::delta::bucket_range(&older).is_some() {
                    self.buckets = Some(Arc::clone(buckets));
                }
                let ptr = crate::log::ptr::LogPtr::closed_base_of(&older);
                self.deltas.push_older(older);
                if let Some(p) = ptr {
                    // Closed over a value in the large log: that value is the base.
                    self.base = Some((LevelValue::Large(p), file.cloned()));
                }
                Ok(!self.deltas.is_closed())
            }
            LevelValue::DeltasOverflow { offset, .. } => Err(Error::Internal(format!(
                "an overflow operand list at offset {offset} outside a level file"
            ))),
            base => {
                self.base = Some((base, file.cloned()));
                Ok(false)
            }
        }
    }
}

/// The highest LSN of a range tombstone visible at `snapshot` that covers `key` (0 if
/// none): every version of `key` below it is deleted.
pub(crate) fn range_cut(sv: &SuperVersion, snapshot: u64, key: &[u8]) -> u64 {
    std::iter::once(&sv.mem)
        .chain(sv.imms.iter())
        .map(|m| m.range_cut(key, snapshot))
        .chain(std::iter::once(sv.version.range_cut(key)))
        .max()
        .unwrap_or(0)
}

/// Every range tombstone visible at `snapshot` (what a scan applies).
pub(crate) fn range_tombstones(sv: &SuperVersion, snapshot: u64) -> RangeTombstones {
    let mut all = RangeTombstones::default();
    for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
        mem.range_tombstones_into(&mut all, snapshot);
    }
    sv.version.range_tombstones_into(&mut all);
    all
}

/// The versions of `key` visible at `snapshot` that make its value: the newest, and below
/// a delta every older one down to the first that is not a delta. A version older than a
/// range tombstone covering the key counts as a tombstone (and ends the search).
pub(crate) fn lookup(sv: &SuperVersion, snapshot: u64, key: &[u8], asker: Asker) -> Result<Lookup> {
    let mut pending = KeySearch::start(sv, snapshot, key, asker)?;
    for file in sv.version.all_runs() {
        if !pending.more || !pending.step(sv, file, key)? {
            break;
        }
    }
    Ok(pending.found)
}

/// Who a lookup or a scan is for. A client's get counts each run it searched in vain
/// (`LevelFile::search`), and a client's scan each run it positioned a cursor in and took
/// no pair from (`LevelFile::note_wasted_seek`), which can make that run's level due for
/// a merge (`Options::merge_bytes_per_wasted_search`); the engine's own lookups and walks
/// (GC's liveness checks, `check`, space accounting) count nothing, so that they never
/// set off a merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asker {
    /// `Db::get`, `Db::range` and their kin, and those of a snapshot.
    Client,
    /// Garbage collection, `check` and space accounting.
    Engine,
}

/// Keys whose leaf reads in one run are batched together (one `io_uring` round).
const PREFETCH_BATCH: usize = 64;

/// [`lookup`] of each of `keys` (at the newest snapshot, for the engine: GC's liveness
/// checks), the reads of each level run
/// batched for [`PREFETCH_BATCH`] keys at a time: before those keys still searching step
/// into a run, the leaves their gets there will read are read together
/// (`level::reader::prefetch_leaves`). The same versions, reads and errors as one
/// `lookup` per key, with one device notification per run instead of one per leaf.
/// Results in the order of `keys`.
pub(crate) fn lookup_many(sv: &SuperVersion, keys: &[&[u8]]) -> Vec<Result<Lookup>> {
    keys.chunks(PREFETCH_BATCH)
        .flat_map(|chunk| lookup_batch(sv, chunk))
        .collect()
}

/// [`lookup_many`] of at most [`PREFETCH_BATCH`] keys.
fn lookup_batch(sv: &SuperVersion, keys: &[&[u8]]) -> Vec<Result<Lookup>> {
    let mut states: Vec<Result<KeySearch>> = keys
        .iter()
        .map(|key| KeySearch::start(sv, u64::MAX, key, Asker::Engine))
        .collect();
    for file in sv.version.all_runs() {
        let searching: Vec<(&LevelFile, &[u8])> = states
            .iter()
            .zip(keys)
            .filter(|(s, _)| s.as_ref().is_ok_and(|p| p.more))
            .map(|(_, key)| (file.as_ref(), *key))
            .collect();
        if searching.is_empty() {
            break;
        }
        crate::level::reader::prefetch_leaves(&searching);
        for (state, key) in states.iter_mut().zip(keys) {
            if let Ok(p) = state {
                if p.more {
                    if let Err(e) = p.step(sv, file, key) {
                        *state = Err(e);
                    }
                }
            }
        }
    }
    states.into_iter().map(|s| s.map(|p| p.found)).collect()
}

/// A lookup under way: what it found so far, and whether it must look further down.
struct KeySearch {
    found: Lookup,
    asker: Asker,
    /// The range tombstones' cut for the key (see [`range_cut`]).
    cut: u64,
    more: bool,
}

impl KeySearch {
    /// Searches the memtables for `key`: `more` is false when they settle the lookup.
    fn start(sv: &SuperVersion, snapshot: u64, key: &[u8], asker: Asker) -> Result<KeySearch> {
        let mut found = Lookup::default();
        let cut = range_cut(sv, snapshot, key);
        for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
            let mut more = true;
            let mut failed = None;
            mem.versions_of(key, snapshot, |(lsn, v)| {
                let v = if lsn < cut { LevelValue::Tombstone } else { v };
                more = match found.take(v, None, &sv.version.buckets) {
                    Ok(m) => m,
                    Err(e) => {
                        failed = Some(e);
                        false
                    }
                };
                more
            });
            if let Some(e) = failed {
                return Err(e);
            }
            if !more {
                return Ok(KeySearch {
                    found,
                    asker,
                    cut,
                    more: false,
                });
            }
        }
        Ok(KeySearch {
            found,
            asker,
            cut,
            more: true,
        })
    }

    /// Looks for `key` in level run `file`; returns whether the lookup must look further.
    fn step(&mut self, sv: &SuperVersion, file: &Arc<LevelFile>, key: &[u8]) -> Result<bool> {
        let found = match self.asker {
            // A client's get that would read this run's leaf from the device may read the
            // large record the run's pointer table names instead. Not under a range
            // tombstone: whether it cuts the entry depends on the entry's LSN, in the leaf.
            Asker::Client => match file.search(key, self.cut == 0)? {
                Probe::Entry(found) => found,
                Probe::Record(p) => {
                    if self.took_record(sv, file, key, p)? {
                        return Ok(self.more);
                    }
                    file.search(key, false)?.into_entry()
                }
            },
            Asker::Engine => file.get(key)?,
        };
        if let Some((lsn, v)) = found {
            self.more = if lsn < self.cut {
                self.found
                    .take(LevelValue::Tombstone, None, &sv.version.buckets)?;
                false
            } else {
                self.found.take(v, Some(file), &sv.version.buckets)?
            };
        }
        Ok(self.more)
    }
}

impl KeySearch {
    /// Reads the record `p` a run's large pointer table named for `key` and, if it holds
    /// `key`, takes it as the key's entry in that run (its value kept for the answer,
    /// `Lookup::large_read`): true. False when it holds another key or cannot be read (the
    /// caller then searches the leaf, which reports what the key's own entry meets).
    fn took_record(
        &mut self,
        sv: &SuperVersion,
        file: &Arc<LevelFile>,
        key: &[u8],
        p: crate::log::ptr::LogPtr,
    ) -> Result<bool> {
        // Under deltas the record is a base the get may fold and write back: read for the
        // last time, not cached (as `value_of`'s `read_passing`).
        let keep = self.found.deltas.is_empty();
        let read = sv
            .segments
            .get(&p.segment)
            .and_then(|s| s.read_if_holds(p, key, keep));
        file.note_large_guess(read.is_some());
        let Some(value) = read else {
            return Ok(false);
        };
        self.found.large_read = Some((p, value));
        self.more = self
            .found
            .take(LevelValue::Large(p), Some(file), &sv.version.buckets)?;
        Ok(true)
    }
}

/// The LSN ranges of every bucket list of `key` in `version`'s runs, newest first: the
/// records of its delta bucket that a read or a later compaction may still need (what
/// bucket GC keeps). Lists below a newer version are kept too: a compaction of the lower
/// levels meets them without the version that hides them, and may fold them into a base
/// there. Only a covering range tombstone ends the walk (every later merge applies it, so
/// no one reads what lies below it).
pub(crate) fn bucket_ranges(
    version: &crate::manifest::version::Version,
    key: &[u8],
) -> Result<Vec<(u64, u64)>> {
    Ok(bucket_ranges_many(version, &[key])?
        .pop()
        .unwrap_or_default())
}

/// [`bucket_ranges`] of each of `keys` (in their order), the leaf reads of each run
/// batched for [`PREFETCH_BATCH`] keys at a time (`level::reader::prefetch_leaves`).
pub(crate) fn bucket_ranges_many(
    version: &crate::manifest::version::Version,
    keys: &[&[u8]],
) -> Result<Vec<Vec<(u64, u64)>>> {
    /// One key's walk down the runs: its range tombstones' cut, whether it goes on, and
    /// the ranges found.
    struct Walk {
        cut: u64,
        going: bool,
        ranges: Vec<(u64, u64)>,
    }
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(PREFETCH_BATCH) {
        let mut walks: Vec<Walk> = chunk
            .iter()
            .map(|key| Walk {
                cut: version.range_cut(key),
                going: true,
                ranges: Vec::new(),
            })
            .collect();
        for file in version.all_runs() {
            let wanted: Vec<(&LevelFile, &[u8])> = chunk
                .iter()
                .zip(&walks)
                .filter(|(_, w)| w.going)
                .map(|(key, _)| (file.as_ref(), *key))
                .collect();
            if wanted.is_empty() {
                break;
            }
            crate::level::reader::prefetch_leaves(&wanted);
            for (key, w) in chunk.iter().zip(walks.iter_mut()) {
                if !w.going {
                    continue;
                }
                let Some((lsn, v)) = file.get(key)? else {
                    continue;
                };
                if lsn < w.cut {
                    w.going = false;
                    continue;
                }
                let v = match v {
                    LevelValue::DeltasOverflow { .. } => file.load_overflow(v)?,
                    v => v,
                };
                if let LevelValue::Deltas(list) = v {
                    if let Some(r) = crate::delta::bucket_range(&list) {
                        w.ranges.push(r);
                    }
                }
            }
        }
        out.extend(walks.into_iter().map(|w| w.ranges));
    }
    Ok(out)
}

/// The bytes of a stored value: reads overflow blobs and follows log pointers.
/// `None` for a tombstone.
pub(crate) fn resolve_with(
    segments: &SegmentSet,
    key: &[u8],
    value: LevelValue,
    file: Option<&LevelFile>,
) -> Result<Option<Value>> {
    match value {
        LevelValue::Inline(b) => Ok(Some(Value::from(b))),
        LevelValue::Tombstone => Ok(None),
        LevelValue::Overflow { .. } => match file {
            Some(f) => match f.load_overflow(value)? {
                LevelValue::Inline(b) => Ok(Some(Value::from(b))),
                _ => Ok(None),
            },
            None => Err(Error::InvalidArgument(
                "overflow value outside a level file".into(),
            )),
        },
        LevelValue::Deltas(_) | LevelValue::DeltasOverflow { .. } => Err(Error::Internal(
            "deltas resolved as a value (they must be folded first)".into(),
        )),
        LevelValue::Large(p) | LevelValue::Medium(p) => segment_of(segments, &value, p)?
            .read_through_cache(p, key)
            .map(|b| Some(Value::from(b))),
    }
}

/// The segment the log pointer `p` of `value` points into (a missing one is corruption).
fn segment_of<'s>(
    segments: &'s SegmentSet,
    value: &LevelValue,
    p: crate::log::ptr::LogPtr,
) -> Result<&'s Arc<crate::log::large::SegmentFile>> {
    segments.get(&p.segment).ok_or_else(|| {
        Error::corruption(
            match value {
                LevelValue::Medium(_) => SegmentKind::Transient,
                _ => SegmentKind::Large,
            }
            .file_name(p.segment),
            p.offset,
            "pointer to a log segment that does not exist",
        )
    })
}

/// The value a lookup found: its base's bytes with the deltas above it folded in by
/// `operator` (`None` if absent or deleted). `passing`: the folded value will be written
/// back, so a log base under deltas is read for the last time (not kept in the cache).
pub(crate) fn value_of(
    segments: &SegmentSet,
    operator: Option<&Arc<dyn MergeOperator>>,
    key: &[u8],
    mut found: Lookup,
    passing: bool,
) -> Result<Option<Value>> {
    let base = match found.base.take() {
        // A large base the lookup already read (through a level file's pointer table; not
        // cached when deltas were stacked above it) is not read again.
        Some((LevelValue::Large(p), _))
            if found.large_read.as_ref().is_some_and(|(q, _)| *q == p) =>
        {
            found.large_read.take().map(|(_, value)| Value::from(value))
        }
        // A log base the get folds and writes back is read for the last time: taken out
        // of the cache, or read without caching it (the value written back is cached).
        Some((v @ (LevelValue::Large(p) | LevelValue::Medium(p)), _))
            if passing && !found.deltas.is_empty() =>
        {
            Some(Value::from(
                segment_of(segments, &v, p)?.read_passing(p, key)?,
            ))
        }
        Some((v, file)) => resolve_with(segments, key, v, file.as_deref())?,
        None => None,
    };
    if found.deltas.is_empty() {
        return Ok(base);
    }
    let op = crate::delta::require(operator)?;
    let list = found.into_list(key)?;
    crate::delta::fold_full(op, key, base.as_deref(), &list).map(|v| Some(Value::from(v)))
}

/// Deltas of one key in the memtables that make a get's value worth writing back.
const FOLD_BACK_CHAIN: usize = 16;

/// The value of `key` visible at `snapshot` (`None` if absent or deleted), and whether it
/// folded deltas read from level files, or [`FOLD_BACK_CHAIN`] deltas or more (a value
/// worth writing back so that later reads of the key stop at the memtable's newest
/// version: KDSep's fold into the base). With `fold_back` (the caller writes such a value
/// back) the log base under those deltas is not kept in the cache.
pub(crate) fn get(
    sv: &SuperVersion,
    operator: Option<&Arc<dyn MergeOperator>>,
    snapshot: u64,
    key: &[u8],
    fold_back: bool,
) -> Result<(Option<Value>, bool)> {
    let found = lookup(sv, snapshot, key, Asker::Client)?;
    let worth =
        !found.deltas.is_empty() && (found.from_files > 0 || found.deltas.len() >= FOLD_BACK_CHAIN);
    Ok((
        value_of(&sv.segments, operator, key, found, worth && fold_back)?,
        worth,
    ))
}

/// Whether the value of `key` in `sv` is the log record at `p`: its newest version, or the
/// base below its newest deltas, or the value a closed list of deltas points at (the
/// record is live). GC's liveness and `check`'s missing-segment test both ask this.
pub(crate) fn value_is_at(
    sv: &SuperVersion,
    key: &[u8],
    p: crate::log::ptr::LogPtr,
) -> Result<bool> {
    Ok(matches!(
        lookup(sv, u64::MAX, key, Asker::Engine)?.base,
        Some((LevelValue::Large(q) | LevelValue::Medium(q), _)) if q == p
    ))
}

/// [`value_is_at`] of each `(key, pointer)`, the level reads batched ([`lookup_many`]).
pub(crate) fn values_are_at(
    sv: &SuperVersion,
    records: &[(&[u8], crate::log::ptr::LogPtr)],
) -> Vec<Result<bool>> {
    let keys: Vec<&[u8]> = records.iter().map(|&(k, _)| k).collect();
    lookup_many(sv, &keys)
        .into_iter()
        .zip(records)
        .map(|(found, &(_, p))| {
            Ok(matches!(
                found?.base,
                Some((LevelValue::Large(q) | LevelValue::Medium(q), _)) if q == p
            ))
        })
        .collect()
}

/// The LSN of the newest write to `key` in `sv` (any kind, a range tombstone covering it
/// included; `None` if it has none).
pub(crate) fn newest_lsn(sv: &SuperVersion, key: &[u8]) -> Result<Option<u64>> {
    let cut = Some(range_cut(sv, u64::MAX, key)).filter(|&c| c > 0);
    for mem in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
        if let Some(lsn) = mem.newest_lsn(key) {
            return Ok(Some(lsn).max(cut));
        }
    }
    for file in sv.version.all_runs() {
        if let Some((lsn, _)) = file.get(key)? {
            return Ok(Some(lsn).max(cut));
        }
    }
    Ok(cut)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test fails by panicking
    use super::*;
    use crate::cache::BlockCache;
    use crate::io::{Io, IoComponent, RealFs};
    use crate::level::builder::{EntryValue, LevelBuilder};
    use crate::manifest::version::Version;

    fn run(
        dir: &std::path::Path,
        id: u64,
        key: &[u8],
        lsn: u64,
        v: EntryValue<'_>,
    ) -> Arc<LevelFile> {
        let io = Io::new(Arc::new(RealFs), false);
        let path = dir.join(crate::level::reader::file_name(id));
        let f = io.create(&path, IoComponent::Flush).unwrap();
        let mut b = LevelBuilder::new(f, 8192, 12288);
        b.add(key, lsn, v).unwrap();
        b.finish().unwrap();
        Arc::new(LevelFile::open(&io, dir, id, Arc::new(BlockCache::new(1 << 20))).unwrap())
    }

    /// A level file of `entries` (sorted) in `dir`, read through `cache`.
    fn run_of(
        io: &Io,
        dir: &std::path::Path,
        id: u64,
        entries: &[(String, u64, Option<Vec<u8>>)],
        cache: &Arc<BlockCache>,
    ) -> Arc<LevelFile> {
        let path = dir.join(crate::level::reader::file_name(id));
        let mut b = LevelBuilder::new(io.create(&path, IoComponent::Flush).unwrap(), 8192, 12288);
        for (k, lsn, v) in entries {
            let v = v
                .as_deref()
                .map_or(EntryValue::Tombstone, EntryValue::Bytes);
            b.add(k.as_bytes(), *lsn, v).unwrap();
        }
        b.finish().unwrap();
        Arc::new(LevelFile::open(io, dir, id, Arc::clone(cache)).unwrap())
    }

    fn key(i: usize) -> String {
        format!("k{i:05}")
    }

    /// Three level runs and a memtable over 3,000 keys: L1 holds every third key (every
    /// seventh of those a tombstone), L2 every key, L3 every other key with older values;
    /// the memtable every eleventh key.
    fn three_runs(dir: &std::path::Path, cache: &Arc<BlockCache>) -> (Io, SuperVersion) {
        let io = Io::new(Arc::new(RealFs), true);
        let val = |tag: &str, i: usize| Some(format!("{tag}-{i}-{}", "v".repeat(180)).into_bytes());
        let l1: Vec<_> = (0..3000)
            .step_by(3)
            .map(|i| (key(i), 30, if i % 7 == 0 { None } else { val("one", i) }))
            .collect();
        let l2: Vec<_> = (0..3000).map(|i| (key(i), 20, val("two", i))).collect();
        let l3: Vec<_> = (0..3000)
            .step_by(2)
            .map(|i| (key(i), 10, val("three", i)))
            .collect();
        let mut version = Version::empty(3);
        version.levels[0].push(run_of(&io, dir, 1, &l1, cache));
        version.levels[1].push(run_of(&io, dir, 2, &l2, cache));
        version.levels[2].push(run_of(&io, dir, 3, &l3, cache));
        let mem = crate::memtable::Memtable::new();
        for i in (0..3000).step_by(11) {
            let v = format!("mem-{i}");
            mem.insert(
                key(i).as_bytes(),
                40,
                crate::memtable::MemValue::Value(v.as_bytes()),
            );
        }
        let sv = SuperVersion {
            mem: Arc::new(mem),
            imms: Vec::new(),
            version: Arc::new(version),
            segments: Arc::new(SegmentSet::new()),
        };
        (io, sv)
    }

    #[test]
    fn a_batched_lookup_finds_what_one_lookup_per_key_finds() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(BlockCache::with_pinning(64 << 20, 1 << 20));
        let (_io, sv) = three_runs(dir.path(), &cache);
        // Every key, keys between them and past the last, and one below the first.
        let mut keys: Vec<String> = (0..3000).map(key).collect();
        keys.extend(["k00010x".into(), "k99999".into(), "a".into()]);
        let asked: Vec<&[u8]> = keys.iter().map(String::as_bytes).collect();
        let shown = |l: Lookup| format!("{:?} {:?}", l.base.map(|(v, _)| v), l.deltas.len());
        for batch in asked.chunks(64) {
            let many = lookup_many(&sv, batch);
            assert_eq!(many.len(), batch.len());
            for (got, k) in many.into_iter().zip(batch) {
                let one = lookup(&sv, u64::MAX, k, Asker::Engine).unwrap();
                assert_eq!(
                    shown(got.unwrap()),
                    shown(one),
                    "key {:?}",
                    String::from_utf8_lossy(k)
                );
            }
        }
        // Spot checks against what was written.
        let base = |i: usize| {
            lookup(&sv, u64::MAX, key(i).as_bytes(), Asker::Engine)
                .unwrap()
                .base
                .map(|(v, _)| v)
        };
        assert_eq!(base(22), Some(LevelValue::Inline(b"mem-22".to_vec())));
        assert_eq!(base(21), Some(LevelValue::Tombstone));
        assert!(matches!(base(1), Some(LevelValue::Inline(v)) if v.starts_with(b"two-1-")));
    }

    #[test]
    fn a_prefetch_reads_the_leaves_the_gets_then_find_cached_and_no_others() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(BlockCache::with_pinning(64 << 20, 1 << 20));
        let (io, sv) = three_runs(dir.path(), &cache);
        let l2 = &sv.version.levels[1][0];
        let keys: Vec<String> = (0..3000).step_by(97).map(key).collect();
        let wanted: Vec<(&LevelFile, &[u8])> =
            keys.iter().map(|k| (l2.as_ref(), k.as_bytes())).collect();
        let reads = |io: &Io| io.stats().snapshot().read_ops_by(IoComponent::LevelRead);
        let before = reads(&io);
        crate::level::reader::prefetch_leaves(&wanted);
        let fetched = reads(&io) - before;
        // 31 keys 97 apart, each leaf holding about 40 of these 200-byte pairs: at least
        // one leaf per two keys, and never more than one per key.
        assert!((16..=31).contains(&fetched), "{fetched} leaves read");
        // The gets find every leaf cached: no read more.
        for k in &keys {
            assert!(l2.get(k.as_bytes()).unwrap().is_some());
        }
        assert_eq!(reads(&io) - before, fetched);
        // Fetched again: everything is cached, nothing is read.
        crate::level::reader::prefetch_leaves(&wanted);
        assert_eq!(reads(&io) - before, fetched);
    }

    #[test]
    fn a_damaged_leaf_is_not_cached_by_a_prefetch_and_its_gets_report_it() {
        // The prefetch verifies what it reads and drops what fails; the get that wants the
        // leaf then reads it itself and reports the damage, as without batching.
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(BlockCache::with_pinning(64 << 20, 1 << 20));
        let (_io, sv) = three_runs(dir.path(), &cache);
        // A byte of L2's third leaf flipped (leaves come first in a level file, 8 KiB each).
        let path = dir.path().join(crate::level::reader::file_name(2));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[2 * 8192 + 300] ^= 0x5A;
        std::fs::write(&path, &bytes).unwrap();
        let keys: Vec<String> = (0..3000).map(key).collect();
        let asked: Vec<&[u8]> = keys.iter().map(String::as_bytes).collect();
        let many = lookup_many(&sv, &asked);
        let mut damaged = 0;
        for (got, k) in many.iter().zip(&asked) {
            let one = lookup(&sv, u64::MAX, k, Asker::Engine);
            assert_eq!(
                got.is_err(),
                one.is_err(),
                "key {}",
                String::from_utf8_lossy(k)
            );
            if let Err(e) = got {
                assert!(e.is_corruption(), "{e}");
                damaged += 1;
            }
        }
        // The keys of that leaf that neither the memtable nor L1 answers.
        assert!(damaged > 0);
        assert!(damaged < 3000);
    }

    #[test]
    fn without_a_cache_a_prefetch_reads_nothing() {
        // With nowhere to keep them the leaves would be read twice.
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(BlockCache::with_pinning(0, 1 << 20));
        let (io, sv) = three_runs(dir.path(), &cache);
        let keys: Vec<String> = (0..3000).step_by(97).map(key).collect();
        let wanted: Vec<(&LevelFile, &[u8])> = keys
            .iter()
            .map(|k| (sv.version.levels[1][0].as_ref(), k.as_bytes()))
            .collect();
        let before = io.stats().snapshot().read_ops_by(IoComponent::LevelRead);
        crate::level::reader::prefetch_leaves(&wanted);
        assert_eq!(
            io.stats().snapshot().read_ops_by(IoComponent::LevelRead),
            before
        );
        // Lookups still answer.
        let many = lookup_many(&sv, &[b"k00001".as_slice(), b"k00022".as_slice()]);
        assert!(many.iter().all(Result::is_ok));
    }

    #[test]
    fn bucket_ranges_of_many_keys_are_those_of_each_key() {
        // Three runs over 1,000 keys: bucket lists at different LSN ranges in each, puts
        // and tombstones between them, and a range tombstone over part of the keys that
        // ends their walks below it. Asked in batches (leaf reads prefetched), every key
        // gets what it gets alone.
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), true);
        let cache = Arc::new(BlockCache::with_pinning(64 << 20, 1 << 20));
        let lists: Vec<Vec<u8>> = (0..3u64)
            .map(|r| crate::delta::bucket_list(false, None, 100 - 30 * r, 110 - 30 * r))
            .collect();
        let mut version = Version::empty(3);
        for (r, list) in lists.iter().enumerate() {
            let id = r as u64 + 1;
            let path = dir.path().join(crate::level::reader::file_name(id));
            let mut b =
                LevelBuilder::new(io.create(&path, IoComponent::Flush).unwrap(), 8192, 12288);
            let filler = vec![b'f'; 150];
            for i in (0..1000).filter(|i| i % (r + 2) != 1) {
                let v = match (i + r) % 5 {
                    0 | 1 => EntryValue::Deltas(list),
                    2 => EntryValue::Tombstone,
                    _ => EntryValue::Bytes(&filler),
                };
                b.add(key(i).as_bytes(), 110 - 30 * r as u64, v).unwrap();
            }
            b.finish().unwrap();
            version.levels[r].push(Arc::new(
                LevelFile::open(&io, dir.path(), id, Arc::clone(&cache)).unwrap(),
            ));
        }
        version
            .range_tombstones
            .push(crate::range_delete::PendingTombstone {
                tombstone: crate::range_delete::RangeTombstone {
                    start: key(300).into_bytes(),
                    end: Some(key(600).into_bytes()),
                    lsn: 75,
                },
                pending: vec![2, 3],
            });
        let keys: Vec<String> = (0..1000).map(key).chain(["k00000x".into()]).collect();
        let asked: Vec<&[u8]> = keys.iter().map(String::as_bytes).collect();
        let many = bucket_ranges_many(&version, &asked).unwrap();
        assert_eq!(many.len(), asked.len());
        for (got, k) in many.iter().zip(&asked) {
            let alone = bucket_ranges(&version, k).unwrap();
            assert_eq!(got, &alone, "key {}", String::from_utf8_lossy(k));
        }
        // Key 24 has a put in the first run and lists in the other two; key 424 the same
        // shape under the range tombstone, whose LSN (75) is above the third run's list
        // (the second run does not hold the key): nothing left.
        assert_eq!(many[24], vec![(70, 80), (40, 50)]);
        assert_eq!(many[424], Vec::<(u64, u64)>::new());
    }

    #[test]
    fn bucket_ranges_keep_lists_a_newer_version_hides_but_not_those_a_range_deletes() {
        // L1: a put of the key; L2: a bucket list under it; L3: another list. A compaction
        // of L2 into L3 meets both lists without the put, so a collection must keep both.
        let dir = tempfile::tempdir().unwrap();
        let k = b"key";
        let hidden = crate::delta::bucket_list(false, None, 20, 30);
        let deeper = crate::delta::bucket_list(false, None, 5, 9);
        let mut version = Version::empty(3);
        version.levels[0].push(run(dir.path(), 1, k, 40, EntryValue::Bytes(b"put")));
        version.levels[1].push(run(dir.path(), 2, k, 30, EntryValue::Deltas(&hidden)));
        version.levels[2].push(run(dir.path(), 3, k, 9, EntryValue::Deltas(&deeper)));
        assert_eq!(bucket_ranges(&version, k).unwrap(), vec![(20, 30), (5, 9)]);
        // A range tombstone at LSN 35 covers the key: what lies below it is never read
        // again (every later merge applies it), so the walk ends there.
        version
            .range_tombstones
            .push(crate::range_delete::PendingTombstone {
                tombstone: crate::range_delete::RangeTombstone {
                    start: b"a".to_vec(),
                    end: None,
                    lsn: 35,
                },
                pending: vec![2, 3],
            });
        assert_eq!(
            bucket_ranges(&version, k).unwrap(),
            Vec::<(u64, u64)>::new()
        );
    }
}
