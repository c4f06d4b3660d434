//! Runs one merge: sorted sources (newest first) -> one new level file. The order and the
//! shadowing come from `crate::merge`; this module decides what happens to each survivor.
//!
//! Large values are never read here (pointers are copied as they are). Deltas that meet
//! their base in the merge are folded into it with the merge operator when the base is in
//! place or in the transient log (read from there), and the result is written in place;
//! over a large value they are kept as a list closed over its pointer; deltas that meet
//! none are folded into one operand where the operator can (and into a value at the
//! bottom of the tree, where nothing older exists). Versions older than a range tombstone
//! covering their key are dropped. Every large pair
//! the merge drops (shadowed by a newer version, deleted by a range, or folded) adds its record length to its
//! segment's garbage count, so garbage collection knows what is dead without looking
//! anything up.

use super::transient::{TransientReader, TransientSink};
use crate::bucket::{BucketFlush, BucketTable};
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::io::{Io, IoComponent};
use crate::level::reader::file_name;
use crate::level::{EntryValue, LevelBuilder, LevelEntry, LevelMeta, LevelValue};
use crate::log::large::SegmentSet;
use crate::memtable::{MemVersion, Memtable, NewestVersion};
use crate::merge::{Merge, MergeEntry, Source, Tombstones};
use crate::options::Options;
use crate::placement::Category;
use crate::range_delete::RangeTombstones;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// A sorted stream of (key, LSN, value) with at most one version per key, as the merge
/// reads it (`merge::Source`), plus what a compaction needs besides.
pub(crate) trait MergeSource: Source {
    /// Reads an overflow blob this source produced into `Inline`.
    fn load_overflow(&self, v: LevelValue) -> Result<LevelValue>;
    /// At least as many entries as this source yields (sizes the output's Bloom filter).
    fn entries_hint(&self) -> u64;
    /// Versions this source dropped itself (older versions inside a memtable).
    fn take_dropped(&mut self) -> Vec<LevelValue> {
        Vec::new()
    }
    /// Whether the entry the merge is writing from this source came from a leaf the node
    /// cache held (recently read: its keys are likely read again).
    fn entry_was_cached(&self) -> bool {
        false
    }
}

/// The newest version of each key of an immutable memtable; older versions are reported
/// through `take_dropped`. Keeps every `sample_every`-th key it yields (a flush estimates
/// from them what the new run shadows).
pub(crate) struct MemSource<I> {
    versions: I,
    dropped: Vec<LevelValue>,
    sample_every: usize,
    yielded: usize,
    samples: Vec<Vec<u8>>,
    /// Versions in the memtable (every key's newest is among them).
    versions_held: u64,
    /// A value buffer kept while the merge's entry holds a pointer (`next_into`).
    spare_value: Vec<u8>,
}

impl<I> MemSource<I> {
    /// The keys kept as a sample.
    pub(crate) fn samples(&self) -> &[Vec<u8>] {
        &self.samples
    }
}

impl<'a, I: Iterator<Item = MemVersion<'a>>> MemSource<I> {
    /// The next newest version (sampled), noting the large values of shadowed ones.
    fn next_newest(&mut self) -> Option<NewestVersion<'a>> {
        for version in self.versions.by_ref() {
            match version {
                MemVersion::Newest(v) => {
                    if self.yielded.is_multiple_of(self.sample_every) {
                        self.samples.push(v.key().to_vec());
                    }
                    self.yielded += 1;
                    return Some(v);
                }
                MemVersion::Shadowed(Some(ptr)) => self.dropped.push(LevelValue::Large(ptr)),
                MemVersion::Shadowed(None) => {}
            }
        }
        None
    }
}

impl<'a, I: Iterator<Item = MemVersion<'a>>> Source for MemSource<I> {
    fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
        Ok(self.next_newest().map(|v| v.to_entry()))
    }
    fn next_into(&mut self, key: &mut Vec<u8>, value: &mut LevelValue) -> Result<Option<u64>> {
        let mut spare = std::mem::take(&mut self.spare_value);
        let lsn = self
            .next_newest()
            .map(|v| v.copy_into(key, value, &mut spare));
        self.spare_value = spare;
        Ok(lsn)
    }
}

impl<'a, I: Iterator<Item = MemVersion<'a>>> MergeSource for MemSource<I> {
    fn load_overflow(&self, v: LevelValue) -> Result<LevelValue> {
        Ok(v)
    }
    fn entries_hint(&self) -> u64 {
        self.versions_held
    }
    fn take_dropped(&mut self) -> Vec<LevelValue> {
        std::mem::take(&mut self.dropped)
    }
}

impl Source for crate::level::reader::LevelScanner {
    fn next_entry(&mut self) -> Result<Option<LevelEntry>> {
        crate::level::reader::LevelScanner::next_entry(self)
    }
    fn next_into(&mut self, key: &mut Vec<u8>, value: &mut LevelValue) -> Result<Option<u64>> {
        crate::level::reader::LevelScanner::next_into(self, key, value)
    }
}

impl MergeSource for crate::level::reader::LevelScanner {
    fn load_overflow(&self, v: LevelValue) -> Result<LevelValue> {
        crate::level::reader::LevelScanner::load_overflow(self, v)
    }
    fn entries_hint(&self) -> u64 {
        self.file_entries()
    }
    fn entry_was_cached(&self) -> bool {
        crate::level::reader::LevelScanner::entry_was_cached(self)
    }
}

/// What a merge did.
#[derive(Debug, Default, Clone)]
pub(crate) struct MergeOutcome {
    pub meta: LevelMeta,
    pub entries_in: u64,
    /// Keys whose deltas were folded into a value (with their base, or at the bottom).
    pub deltas_folded: u64,
    pub dropped_shadowed: u64,
    pub dropped_tombstones: u64,
    /// Versions deleted by a range tombstone.
    pub dropped_by_range: u64,
    /// Bytes of large-log records that became garbage, by segment.
    pub garbage: BTreeMap<u64, u64>,
    /// Dropped operand lists that are overflow blobs, with their sources: read once the
    /// merge step that dropped them is over, for the large value they may be closed over.
    dropped_lists: Vec<(usize, LevelValue)>,
}

impl MergeOutcome {
    /// Counts what dropping a version read from source `source` makes garbage (an operand
    /// list that is an overflow blob is read from that source later, see
    /// `count_dropped_lists`).
    fn drop_value(&mut self, source: usize, v: &LevelValue) {
        let ptr = match v {
            LevelValue::Large(p) => Some(*p),
            // Deltas closed over a large value hold it live: dropped, it is garbage.
            LevelValue::Deltas(list) => crate::log::ptr::LogPtr::closed_base_of(list),
            LevelValue::DeltasOverflow { .. } => {
                self.dropped_lists.push((source, v.clone()));
                None
            }
            _ => None,
        };
        if let Some(p) = ptr {
            *self.garbage.entry(p.segment).or_default() += u64::from(p.len);
        }
    }

    /// Reads the dropped operand lists that are overflow blobs and counts the large values
    /// they were closed over as garbage (without it, GC would never learn that the
    /// segment holding such a value lost it, and might never collect it). A list that
    /// cannot be read is left uncounted, not an error: the count only schedules GC, and a
    /// damaged version being dropped must not stop every merge that meets it.
    fn count_dropped_lists(
        &mut self,
        load: impl Fn(usize, LevelValue) -> Result<LevelValue>,
    ) -> Result<()> {
        for (source, v) in std::mem::take(&mut self.dropped_lists) {
            match load(source, v) {
                Ok(LevelValue::Deltas(list)) => {
                    if let Some(p) = crate::log::ptr::LogPtr::closed_base_of(&list) {
                        *self.garbage.entry(p.segment).or_default() += u64::from(p.len);
                    }
                }
                Ok(_) => {}
                Err(e) => log::warn!("a dropped list of deltas was not counted as garbage: {e}"),
            }
        }
        Ok(())
    }
}

/// What a merge does with medium pairs.
pub(crate) enum MediumPolicy<'a, 'b> {
    /// Leave every value as it is (pointers stay pointers).
    Keep,
    /// A flush above the merge level: medium values (all inline, from the memtable) go to
    /// a new sorted transient segment and the run keeps pointers.
    ToLog(&'b mut TransientSink<'a>),
    /// The merge level: every medium pointer is read back and the value written in place.
    Inline(&'b mut TransientReader<'a>),
}

/// Parameters of one merge.
pub(crate) struct MergeJob<'a> {
    pub opts: &'a Options,
    pub io: &'a Io,
    pub dir: &'a Path,
    pub file_id: u64,
    pub component: IoComponent,
    pub leaf_size: usize,
    pub index_size: usize,
    /// The output is the bottom of the tree: tombstones are dropped.
    pub drop_tombstones: bool,
    /// The log segments the inputs point into (to read a medium base of deltas).
    pub segments: &'a SegmentSet,
    /// Range tombstones to apply: the version's, and a flush's own memtable's.
    pub ranges: RangeTombstones,
    /// The delta buckets the inputs' bucket lists read (the version's).
    pub buckets: &'a BucketTable,
    /// A flush with delta separation on: where the deltas it cannot fold go.
    pub bucket_flush: Option<&'a RefCell<BucketFlush<'a>>>,
    /// Which leaves of the output go into `cache` as they are written.
    pub cache_fill: CacheFill,
    pub cache: &'a Arc<BlockCache>,
}

/// Which leaves a merge puts into the node cache as it writes them, so that the gets
/// after a flush or a merge do not read from the device what was cached before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheFill {
    /// None.
    Off,
    /// Every leaf, the first `limit` bytes of them (a flush: its keys were just written,
    /// the likeliest to be read; it adds to what the cache holds, so it is bounded).
    All { limit: u64 },
    /// A leaf that holds an entry read from a cached leaf of an input (no bound: the
    /// leaves replace their input's, which die with their file).
    Inherit,
}

impl MergeJob<'_> {
    /// Merges `sources` (newest first: a version from an earlier source shadows the same
    /// key in later ones) into file `file_id`. Returns `None` (and leaves no file) when
    /// nothing survives.
    pub(crate) fn run(
        &self,
        sources: &mut [&mut dyn MergeSource],
        mut medium: MediumPolicy<'_, '_>,
    ) -> Result<(Option<LevelMeta>, MergeOutcome)> {
        let path = self.dir.join(file_name(self.file_id));
        let file = self.io.create(&path, self.component)?;
        let expected = sources.iter().map(|s| s.entries_hint()).sum();
        let mut builder = LevelBuilder::new(file, self.leaf_size, self.index_size)
            .with_bloom(self.opts.bloom_bits_per_key, expected)
            .with_large_pointers(self.opts.large_pointer_table_bytes > 0);
        let fill = match self.cache_fill {
            CacheFill::Off => None,
            CacheFill::All { limit } => Some((true, limit)),
            CacheFill::Inherit => Some((false, u64::MAX)),
        };
        if let Some((all, limit)) = fill {
            builder = builder.with_cache_fill(Arc::clone(self.cache), self.file_id, all, limit);
        }
        let inherit = self.cache_fill == CacheFill::Inherit;
        let mut out = MergeOutcome::default();
        let tombstones = if self.drop_tombstones {
            Tombstones::Drop
        } else {
            Tombstones::Keep
        };
        let mut merge = Merge::new(sources.iter_mut().map(|s| &mut **s).collect(), tombstones)?
            .with_range_tombstones(self.ranges.clone());
        // The version being written: each step reads the next one into its buffers.
        let mut entry = MergeEntry::default();
        // Medium bases of deltas a merge that keeps medium pointers folds: read in key
        // order, so through a read-ahead over each sorted transient segment.
        let mut bases = TransientReader::for_bases(self.segments);
        loop {
            let more = merge.next_into(&mut entry, |winner, older| {
                let Some(winner) = winner else {
                    out.entries_in += 1;
                    out.dropped_by_range += 1;
                    out.drop_value(older.source, &older.value);
                    return Ok(());
                };
                if older.lsn >= winner.lsn {
                    // Runs out of order would let an old value win: stop here.
                    return Err(Error::corruption(
                        &path,
                        0,
                        format!(
                            "merge inputs out of order: newer LSN {} <= older LSN {}",
                            winner.lsn, older.lsn
                        ),
                    ));
                }
                out.entries_in += 1;
                out.dropped_shadowed += 1;
                out.drop_value(older.source, &older.value);
                Ok(())
            })?;
            out.count_dropped_lists(|source, v| match merge.source(source) {
                Some(s) => s.load_overflow(v),
                None => Err(Error::Internal(format!(
                    "compaction into {}: a dropped list of source {source}, which does not exist",
                    path.display()
                ))),
            })?;
            if !more {
                break;
            }
            out.entries_in += 1 + entry.below.len() as u64;
            if entry.value.is_deltas() {
                entry.value =
                    self.fold(&merge, &mut entry, &mut medium, &mut bases, &mut out, &path)?;
            }
            let (key, lsn, source) = (entry.key.as_slice(), entry.lsn, entry.source);
            let value = std::mem::replace(&mut entry.value, LevelValue::Tombstone);
            let value = match merge.source(source) {
                Some(s) => s.load_overflow(value)?,
                None => {
                    return Err(Error::Internal(format!(
                        "compaction into {}: merge yielded an entry of source {source}, which \
                         does not exist",
                        path.display()
                    )))
                }
            };
            let value = match (value, &mut medium) {
                (LevelValue::Medium(p), MediumPolicy::Inline(reader)) => {
                    LevelValue::Inline(reader.read(key, p)?)
                }
                (LevelValue::Inline(b), MediumPolicy::ToLog(sink))
                    if self.opts.classify(key.len(), b.len()) == Category::Medium =>
                {
                    LevelValue::Medium(sink.append(key, &b, lsn)?)
                }
                (v, _) => v,
            };
            let ev = match &value {
                LevelValue::Inline(b) => EntryValue::Bytes(b),
                LevelValue::Large(p) => EntryValue::Large(*p),
                LevelValue::Medium(p) => EntryValue::Medium(*p),
                LevelValue::Tombstone => EntryValue::Tombstone,
                LevelValue::Deltas(b) => EntryValue::Deltas(b),
                LevelValue::Overflow { offset, .. } | LevelValue::DeltasOverflow { offset, .. } => {
                    return Err(Error::corruption(
                        &path,
                        *offset,
                        "overflow value left unread",
                    ));
                }
            };
            builder.add(key, lsn, ev)?;
            if inherit && merge.source(source).is_some_and(|s| s.entry_was_cached()) {
                builder.mark_leaf_hot();
            }
            // Written: its buffers are read into next.
            entry.value = value;
        }
        // A dropped tombstone was read like any other winner.
        let dropped = merge.counts().tombstones_dropped;
        out.entries_in += dropped;
        out.dropped_tombstones += dropped;
        drop(merge);
        for (i, s) in sources.iter_mut().enumerate() {
            for v in s.take_dropped() {
                out.dropped_shadowed += 1;
                out.drop_value(i, &v);
            }
        }
        out.count_dropped_lists(|i, v| match sources.get(i) {
            Some(s) => s.load_overflow(v),
            None => Err(Error::Internal(format!(
                "compaction into {}: a dropped list of source {i}, which does not exist",
                path.display()
            ))),
        })?;
        if builder.entries() == 0 {
            drop(builder);
            self.io.fs().remove(&path)?;
            return Ok((None, out));
        }
        let meta = builder.finish()?;
        out.meta = meta;
        Ok((Some(meta), out))
    }
}

impl MergeJob<'_> {
    /// The value an entry holding deltas is written as: folded into its base when the merge
    /// met one in place or in the transient log, closed over its pointer when it met a
    /// large one, folded into nothing at the bottom of the tree, else kept as deltas
    /// (combined into one operand where the operator can).
    fn fold<S: MergeSource + ?Sized>(
        &self,
        merge: &Merge<&mut S>,
        entry: &mut MergeEntry,
        medium: &mut MediumPolicy<'_, '_>,
        bases: &mut TransientReader<'_>,
        out: &mut MergeOutcome,
        path: &Path,
    ) -> Result<LevelValue> {
        let op = crate::delta::require(self.opts.merge_operator.as_ref())?;
        if self.bucket_flush.is_none() {
            if let Some(v) = self.combine_bucket_lists(entry, out) {
                return Ok(v);
            }
        }
        // The LSNs of the deltas the stack will hold (a flush's bucket record keeps them).
        let lo = std::iter::once((entry.lsn, &entry.value))
            .chain(entry.below.iter().map(|e| (e.lsn, &e.value)))
            .take_while(|(_, v)| v.is_deltas())
            .map(|(lsn, _)| lsn)
            .min()
            .unwrap_or(entry.lsn);
        let hi = entry.lsn;
        // The key, for reading the bucket of a bucket list (cloned only when the version
        // has delta buckets: the closure cannot borrow the entry `take_stack` changes).
        let key_owned = if self.buckets.slots.is_empty() {
            Vec::new()
        } else {
            entry.key.clone()
        };
        let load = |source: usize, v: LevelValue| {
            let v = match merge.source(source) {
                Some(s) => s.load_overflow(v)?,
                None => {
                    return Err(Error::Internal(format!(
                        "compaction into {}: deltas of source {source}, which does not exist",
                        path.display()
                    )))
                }
            };
            match v {
                // Deltas in a bucket that must be folded here are read from it.
                LevelValue::Deltas(list) => self
                    .buckets
                    .resolve(&key_owned, list)
                    .map(LevelValue::Deltas),
                v => Ok(v),
            }
        };
        let stacked = entry.take_stack(load)?;
        for dead in &stacked.shadowed {
            out.dropped_shadowed += 1;
            out.drop_value(dead.source, &dead.value);
        }
        out.count_dropped_lists(load)?;
        let (list, key) = (stacked.list, entry.key.as_slice());
        let closed = crate::delta::is_closed(&list);
        let base_bytes = match stacked.base {
            None if !closed && !self.drop_tombstones => {
                let list = crate::delta::fold_partial(op, key, list)?;
                if let Some(bf) = self.bucket_flush {
                    // KDSep: the deltas go to the key's bucket, the run keeps their range.
                    bf.borrow_mut().append(key, lo, hi, &list)?;
                    return Ok(LevelValue::Deltas(crate::delta::bucket_list(
                        false, None, lo, hi,
                    )));
                }
                return Ok(LevelValue::Deltas(list));
            }
            None => None,
            Some(b) => {
                let value = load(b.source, b.value)?;
                if let LevelValue::Large(p) = &value {
                    // The base stays in the large log (it is not read here): the deltas
                    // are kept closed over its pointer, combined where the operator can,
                    // for a read, a GC relocation or a fold-back to fold (KDSep's delta
                    // separation). A dead one (its segment freed) is dropped by the newer
                    // version that shadows it.
                    let mut ptr = Vec::with_capacity(crate::delta::BASE_PTR_BYTES);
                    p.encode_into(&mut ptr);
                    let list = crate::delta::fold_partial(op, key, list)?;
                    if let (Some(bf), false) = (self.bucket_flush, closed) {
                        bf.borrow_mut().append(key, lo, hi, &list)?;
                        return Ok(LevelValue::Deltas(crate::delta::bucket_list(
                            true,
                            Some(&ptr),
                            lo,
                            hi,
                        )));
                    }
                    return crate::delta::close_over_ptr(key, &ptr, &list).map(LevelValue::Deltas);
                }
                out.drop_value(b.source, &value);
                match value {
                    LevelValue::Inline(v) => Some(v),
                    LevelValue::Tombstone => None,
                    LevelValue::Medium(p) => Some(match medium {
                        MediumPolicy::Inline(reader) => reader.read(key, p)?,
                        _ => self.read_transient(key, p, bases)?,
                    }),
                    other => {
                        return Err(Error::Internal(format!(
                            "compaction into {}: the base of deltas loaded as {other:?}",
                            path.display()
                        )))
                    }
                }
            }
        };
        match crate::delta::fold_full(op, key, base_bytes.as_deref(), &list) {
            Ok(v) => {
                out.deltas_folded += 1;
                Ok(LevelValue::Inline(v))
            }
            // The operator refuses: the deltas are kept with their base (a closed list),
            // so only this key's reads report it, and nothing is lost.
            Err(e @ Error::MergeFailed { .. }) => {
                log::warn!("{}: deltas kept unfolded: {e}", path.display());
                crate::delta::close(key, base_bytes.as_deref(), &list).map(LevelValue::Deltas)
            }
            Err(e) => Err(e),
        }
    }

    /// When every delta version of `entry` is a bucket list and what is below them needs
    /// no read (no base among the inputs, a large base, a tombstone, or a closed bucket
    /// list; at the bottom of the tree only a large base), the one bucket list that stands
    /// for all of them: their ranges combined, closed over what ends them. The deltas stay
    /// in their bucket, unread. `None` otherwise (the caller folds the usual way, reading
    /// the buckets).
    ///
    /// Combining ranges is exact: a bucket record of the key with a range between two of
    /// the lists' belongs to a list that a newer base or range tombstone removed, and that
    /// version would have removed the older of the two lists as well.
    fn combine_bucket_lists(
        &self,
        entry: &mut MergeEntry,
        out: &mut MergeOutcome,
    ) -> Option<LevelValue> {
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut closed = false;
        let mut ptr: Option<Vec<u8>> = None;
        let mut consumed = 0usize;
        let mut dropped_base = None;
        let versions = std::iter::once((entry.source, &entry.value))
            .chain(entry.below.iter().map(|e| (e.source, &e.value)));
        for (source, v) in versions {
            consumed += 1;
            match v {
                LevelValue::Deltas(list) => {
                    let (l, h) = crate::delta::bucket_range(list)?;
                    lo = lo.min(l);
                    hi = hi.max(h);
                    if crate::delta::is_closed(list) {
                        closed = true;
                        ptr = crate::delta::base_ptr(list).map(<[u8]>::to_vec);
                        break;
                    }
                }
                LevelValue::Large(p) => {
                    let mut b = Vec::with_capacity(crate::delta::BASE_PTR_BYTES);
                    p.encode_into(&mut b);
                    ptr = Some(b);
                    closed = true;
                    break;
                }
                LevelValue::Tombstone => {
                    closed = true;
                    dropped_base = Some((source, LevelValue::Tombstone));
                    break;
                }
                _ => return None,
            }
        }
        // At the bottom of the tree deltas over no base or a tombstone are folded into a
        // value (their bucket read once), as inline deltas are: nothing older can come.
        if self.drop_tombstones && ptr.is_none() {
            return None;
        }
        let below = std::mem::take(&mut entry.below);
        for dead in below.into_iter().skip(consumed.saturating_sub(1)) {
            out.dropped_shadowed += 1;
            out.drop_value(dead.source, &dead.value);
        }
        if let Some((source, v)) = dropped_base {
            out.drop_value(source, &v);
        }
        Some(LevelValue::Deltas(crate::delta::bucket_list(
            closed,
            ptr.as_deref(),
            lo,
            hi,
        )))
    }

    /// Reads the transient-log record `p` of `key` (a medium base of deltas, in a merge
    /// that leaves medium values in the log).
    fn read_transient(
        &self,
        key: &[u8],
        p: crate::log::ptr::LogPtr,
        bases: &mut TransientReader<'_>,
    ) -> Result<Vec<u8>> {
        match self.segments.get(&p.segment) {
            Some(seg) => match seg.take_cached(p, key) {
                Some(value) => value.map(Vec::from),
                None => bases.read(key, p),
            },
            None => Err(Error::corruption(
                crate::log::large::SegmentKind::Transient.file_name(p.segment),
                p.offset,
                "pointer to a log segment that does not exist",
            )),
        }
    }
}

/// Convenience: the newest versions of an immutable memtable.
/// About `samples` of its keys are kept (see [`MemSource::samples`]).
pub(crate) fn memtable_source(
    mem: &Memtable,
    samples: usize,
) -> MemSource<impl Iterator<Item = MemVersion<'_>> + '_> {
    MemSource {
        versions: mem.versions(),
        dropped: Vec::new(),
        sample_every: (mem.len() / samples.max(1)).max(1),
        yielded: 0,
        samples: Vec::with_capacity(samples + 1),
        versions_held: mem.len() as u64,
        spare_value: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test fails by panicking
    use super::*;
    use crate::level::LevelFile;
    use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:05}").into_bytes()
    }

    /// A level file `id` in `dir` of `entries` (sorted), at LSN `lsn`.
    fn run(io: &Io, dir: &Path, id: u64, lsn: u64, entries: &[(Vec<u8>, EntryValue<'_>)]) {
        let f = io
            .create(&dir.join(file_name(id)), IoComponent::Flush)
            .unwrap();
        let mut b = LevelBuilder::new(f, 8192, 12288);
        for (k, v) in entries {
            b.add(k, lsn, *v).unwrap();
        }
        b.finish().unwrap();
    }

    #[test]
    fn a_merge_above_the_merge_level_reads_the_medium_bases_it_folds_in_windows() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(crate::io::RealFs), false);
        // 3000 medium bases of 300 bytes in one sorted transient segment (about 0.9 MiB).
        let n = 3000u32;
        let base = |i: u32| vec![b'a' + (i % 26) as u8; 300];
        // Some bases are cached alone (the flush that wrote them put them in the cache).
        let cache = Arc::new(BlockCache::new(4 << 20));
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Transient, 1).unwrap();
        let ptrs: Vec<_> = (0..n)
            .map(|i| match i {
                0 | 1000 | 2000 => w.append_cached(&key(i), &base(i), 10, &cache).unwrap(),
                _ => w.append(&key(i), &base(i), 10).unwrap(),
            })
            .collect();
        w.commit(true).unwrap();
        drop(w);
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Transient, 1)
            .unwrap()
            .with_cache(Arc::clone(&cache));
        let cached = |p: &crate::log::ptr::LogPtr| cache.contains(1, p.offset);
        let cached_before = ptrs.iter().filter(|p| cached(p)).count();
        assert_eq!(cached_before, 3, "{cached_before} bases cached");
        // A get reads its base's block (cached as a block, not as records).
        assert_eq!(
            seg.read_through_cache(ptrs[500], &key(500)).unwrap(),
            base(500)
        );
        assert_eq!(ptrs.iter().filter(|p| cached(p)).count(), 3);
        let mut segments = SegmentSet::new();
        segments.insert(1, Arc::new(seg));
        // The older run points at the bases; the newer one holds a delta for every key.
        let older: Vec<_> = (0..n)
            .map(|i| (key(i), EntryValue::Medium(ptrs[i as usize])))
            .collect();
        run(&io, dir.path(), 2, 10, &older);
        let deltas: Vec<Vec<u8>> = (0..n)
            .map(|i| crate::delta::single(format!("+{i}").as_bytes()))
            .collect();
        let newer: Vec<_> = (0..n)
            .map(|i| (key(i), EntryValue::Deltas(&deltas[i as usize])))
            .collect();
        run(&io, dir.path(), 3, 20, &newer);

        let open = |id| Arc::new(LevelFile::open(&io, dir.path(), id, Arc::clone(&cache)).unwrap());
        let (newer, older) = (open(3), open(2));
        let opts = Options {
            merge_operator: Some(Arc::new(crate::delta::Append)),
            ..Options::default()
        };
        let buckets = BucketTable::default();
        let job = MergeJob {
            opts: &opts,
            io: &io,
            dir: dir.path(),
            file_id: 4,
            component: IoComponent::Compaction,
            leaf_size: 8192,
            index_size: 12288,
            drop_tombstones: false,
            segments: &segments,
            ranges: RangeTombstones::default(),
            buckets: &buckets,
            bucket_flush: None,
            cache_fill: CacheFill::Off,
            cache: &cache,
        };
        let before = io.stats().snapshot().read_ops_by(IoComponent::TransientLog);
        let mut a = newer.scanner(IoComponent::Compaction).unwrap();
        let mut b = older.scanner(IoComponent::Compaction).unwrap();
        let (meta, out) = job.run(&mut [&mut a, &mut b], MediumPolicy::Keep).unwrap();
        assert!(meta.is_some());
        assert_eq!(out.deltas_folded, u64::from(n));
        // The bases the cache held were taken out of it (dead once folded), the others
        // read in key order through windows growing to 256 KiB: a handful of reads,
        // where one read per base took 3000.
        assert_eq!(ptrs.iter().filter(|p| cached(p)).count(), 0);
        let reads = io.stats().snapshot().read_ops_by(IoComponent::TransientLog) - before;
        assert!((1..=16).contains(&reads), "{reads} reads");
        // Each base folded with its delta, in place in the new run.
        let merged = open(4);
        for i in 0..n {
            let mut want = base(i);
            want.extend_from_slice(format!("+{i}").as_bytes());
            match merged.get(&key(i)).unwrap() {
                Some((20, LevelValue::Inline(v))) => assert_eq!(v, want, "key {i}"),
                other => panic!("key {i}: {other:?}"),
            }
        }
    }
}
