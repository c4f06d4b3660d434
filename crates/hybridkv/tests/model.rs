//! Model-based test: random sequences of writes (merges with the `Append` operator among
//! them), reads, flushes, compactions, GC passes and
//! reopens, and read-only opens beside the writer, every read checked against a `BTreeMap`
//! that holds what the database must hold. A second keyspace ("side", with other
//! placement options) has its own model: writes to it alone, batches across both
//! keyspaces, its own flushes, views of both at one point, and drops (then a new, empty
//! "side"); every full check, reopen, read-only open and checkpoint covers it too.
//!
//! Two drivers share one harness: a proptest property (shrinks a failure to a minimal
//! sequence; `PROPTEST_CASES` raises the case count) and a deterministic long run driven by
//! a seeded xorshift generator (depth: thousands of operations, many flushes and merges).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use hybridkv::{
    Append, Db, Error, Keyspace, MediumMergeLevel, Options, Placement, WriteBatch, WriteOptions,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Bound;
use std::time::Duration;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Keys chosen to sit on prefix and ordering edges (empty-suffix, 0x00, 0xff).
const EDGE_KEYS: &[&[u8]] = &[
    b"\x00",
    b"a",
    b"a\x00",
    b"a\xff",
    b"a\xff\xff",
    b"ab",
    b"b",
    b"k",
    b"k1",
    b"\xff",
    b"\xff\xff",
];
/// Size of the small key space (edge keys plus `k00`..).
const KEY_SPACE: u8 = 48;
/// Keys written by bulk operations (`z00000`..).
const BULK_SPACE: u16 = 4000;

fn key(i: u8) -> Vec<u8> {
    match EDGE_KEYS.get(i as usize) {
        Some(k) => k.to_vec(),
        None => format!("k{:02}", i as usize - EDGE_KEYS.len()).into_bytes(),
    }
}

fn bulk_key(i: u16) -> Vec<u8> {
    format!("z{i:05}").into_bytes()
}

/// A value of `len` bytes that depends on `tag` (a unique write id), so a stale or
/// misplaced value never compares equal to the expected one (for lengths of 2 or more).
fn value(tag: u64, len: usize) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Length of bulk value `i` of a bulk operation with `seed`: mostly small and medium, now
/// and then large.
fn bulk_len(seed: u8, i: u16) -> usize {
    let h = u32::from(i).wrapping_mul(2_654_435_761) ^ u32::from(seed).wrapping_mul(40503);
    if h % 97 == 0 {
        1500 + (h % 3000) as usize
    } else {
        (h % 301) as usize
    }
}

#[derive(Debug, Clone)]
enum BatchEntry {
    Put {
        key: u8,
        len: usize,
    },
    Delete {
        key: u8,
    },
    Merge {
        key: u8,
        len: usize,
    },
    /// Deletes the small keys `key(start)..key(end)` (bounds in key order may be
    /// inverted: the batch is then refused whole).
    DeleteRange {
        start: u8,
        end: u8,
    },
}

/// What a batch entry does to the model, applied in order once the batch is written.
enum Effect {
    Put(Vec<u8>, Vec<u8>),
    Merge(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Range(Vec<u8>, Vec<u8>),
}

/// The model's side of `Append`: the operand appended to the value (or the value itself).
fn append(model: &mut Model, key: Vec<u8>, operand: &[u8]) {
    model.entry(key).or_default().extend_from_slice(operand);
}

#[derive(Debug, Clone)]
enum Op {
    Put {
        key: u8,
        len: usize,
        sync: bool,
    },
    Delete {
        key: u8,
    },
    /// A delta: `len` bytes appended by the merge operator.
    Merge {
        key: u8,
        len: usize,
    },
    Batch(Vec<BatchEntry>),
    /// Puts `count` bulk keys from `start` (wide key space: makes flushes and merges real).
    Bulk {
        start: u16,
        count: u16,
        seed: u8,
    },
    /// Appends `len` bytes (a delta) to every `step`-th bulk key from `start`.
    BulkMerge {
        start: u16,
        count: u16,
        step: u16,
        len: u16,
    },
    /// `delete_range(start, end)`: one write; refused when `start > end`.
    DeleteRange {
        start: Vec<u8>,
        end: Vec<u8>,
    },
    /// `delete_prefix(prefix)`: one write.
    DeletePrefix {
        prefix: Vec<u8>,
    },
    /// Deletes every `step`-th bulk key from `start`.
    BulkDelete {
        start: u16,
        count: u16,
        step: u16,
    },
    Get {
        key: Vec<u8>,
    },
    Range {
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    },
    Prefix {
        prefix: Vec<u8>,
    },
    /// A range scan that takes `take` pairs, then seeks to `to` (before, inside or past
    /// the range) and reads the rest.
    Seek {
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        take: u8,
        to: Vec<u8>,
    },
    /// Walks a range from both ends: takes `front` items from the front, moves the back
    /// to `to` (`seek_back`), then alternates `next_back` and `next` until both ends are
    /// done; pairs, or keys only with `keys`. The ends must meet without repeating or
    /// skipping a key.
    BothEnds {
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        front: u8,
        to: Vec<u8>,
        keys: bool,
    },
    Flush,
    Compact,
    Gc,
    Reopen {
        close: bool,
    },
    /// A read-only open beside the writer: it must see the model and refuse writes.
    ReadOnly,
    /// Takes a snapshot, remembered with a copy of the model at that moment (the three
    /// newest are kept).
    Snapshot,
    /// Reads through one of the held snapshots: a get and a prefix scan must match the
    /// model as it was when the snapshot was taken.
    SnapshotRead {
        which: u8,
        key: Vec<u8>,
        prefix: Vec<u8>,
    },
    /// Takes a checkpoint: opened at once, it must equal the model; a write to it stays
    /// there; it is opened and checked again after each later reopen of the source (which
    /// went on writing, merging and collecting meanwhile).
    Checkpoint,
    /// A write to the "side" keyspace alone: 0 put, 1 delete, 2 merge.
    SideWrite {
        key: u8,
        len: usize,
        kind: u8,
    },
    /// One batch across both keyspaces (`true`: the entry goes to "side").
    CrossBatch(Vec<(bool, BatchEntry)>),
    /// A get and a range scan (forward and backward) of "side".
    SideRead {
        key: Vec<u8>,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    },
    /// Flushes "side" alone.
    SideFlush,
    /// Snapshots of both keyspaces at one point, each checked against its model.
    CrossView,
    /// Drops "side" and creates it again (empty).
    DropSide,
}

/// The second keyspace's name.
const SIDE: &str = "side";

/// The database configuration of one case.
#[derive(Debug, Clone, Copy)]
struct Config {
    placement: Placement,
    merge_level: MediumMergeLevel,
    max_levels: usize,
    cache: bool,
    /// Level indexes pinned in memory (PinK) or descended through the cache.
    pin: bool,
    threads: usize,
    /// Deltas a flush cannot fold go to delta buckets (KDSep), collected at 4 KiB.
    delta_separation: bool,
    /// `Options::leaf_size`: 4 KiB (RocksDB's block) or the default 8 KiB.
    leaf_size: usize,
    /// `Options::merge_bytes_per_wasted_search`: off, the default, 4 KiB (a few dozen
    /// wasted searches pay for merging L1's runs into one) or the most (about every wasted
    /// search makes its level due, so merges run between the gets). From 4 KiB the case's
    /// files have no Bloom filters, which would spare most searches.
    lookup_merges: u64,
}

impl Config {
    fn options(&self) -> Options {
        Options {
            memtable_size: 64 << 10,
            growth_factor: 4,
            max_levels: self.max_levels,
            cache_bytes: if self.cache { 4 << 20 } else { 0 },
            pinned_index_bytes: if self.pin { 16 << 20 } else { 0 },
            background_threads: self.threads,
            placement: self.placement,
            medium_merge_level: self.merge_level,
            large_segment_size: 64 << 10,
            merge_operator: Some(std::sync::Arc::new(Append)),
            delta_separation: self.delta_separation,
            delta_bucket_size: 4 << 10,
            leaf_size: self.leaf_size,
            merge_bytes_per_wasted_search: self.lookup_merges,
            bloom_bits_per_key: if self.lookup_merges >= 4096 { 0 } else { 10 },
            // GC passes come from `Op::Gc` only, so a case replays identically.
            gc_interval: Duration::from_secs(3600),
            ..Options::default()
        }
    }

    /// The "side" keyspace's options: another placement than the default keyspace's.
    fn side_options(&self) -> Options {
        Options {
            placement: match self.placement {
                Placement::Hybrid => Placement::AllLog,
                Placement::InPlace | Placement::AllLog => Placement::Hybrid,
            },
            max_levels: 3,
            ..self.options()
        }
    }
}

fn describe(v: &[u8]) -> String {
    if v.len() <= 24 {
        format!("{v:?}")
    } else {
        format!("{} bytes starting {:?}", v.len(), &v[..16])
    }
}

fn describe_opt(v: Option<&Vec<u8>>) -> String {
    v.map_or_else(|| "None".to_string(), |v| describe(v))
}

/// Compares a scan's output with the expected pairs; describes the first difference.
fn diff_pairs(got: &[(Vec<u8>, Vec<u8>)], want: &[(&Vec<u8>, &Vec<u8>)]) -> Option<String> {
    for (i, pair) in got.iter().zip(want.iter()).enumerate() {
        let ((gk, gv), (wk, wv)) = pair;
        if gk != *wk {
            return Some(format!(
                "item {i}: got key {}, expected key {}",
                describe(gk),
                describe(wk)
            ));
        }
        if gv != *wv {
            return Some(format!(
                "item {i} (key {}): got value {}, expected {}",
                describe(gk),
                describe(gv),
                describe(wv)
            ));
        }
    }
    if got.len() != want.len() {
        let mut m = format!("got {} items, expected {}", got.len(), want.len());
        if let Some((k, _)) = got.get(want.len()) {
            let _ = write!(m, "; first extra key {}", describe(k));
        }
        if let Some((k, _)) = want.get(got.len()) {
            let _ = write!(m, "; first missing key {}", describe(k));
        }
        return Some(m);
    }
    None
}

/// Whether a range's start lies after its end (the iterators refuse it).
fn inverted(start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    matches!(
        (start, end),
        (
            Bound::Included(s) | Bound::Excluded(s),
            Bound::Included(e) | Bound::Excluded(e)
        ) if s > e
    )
}

/// A key, and its value when the iterator yields pairs.
type EndItem = (Vec<u8>, Option<Vec<u8>>);

/// A pair iterator or a key iterator, walked from either end.
enum Ends {
    Pairs(hybridkv::DbIterator),
    Keys(hybridkv::KeyIterator),
}

impl Ends {
    /// The next key (and value, for pairs) from the front or the back.
    fn step(&mut self, back: bool) -> Option<Result<EndItem, Error>> {
        match self {
            Ends::Pairs(it) => {
                let item = if back { it.next_back() } else { it.next() };
                item.map(|r| r.map(|(k, v)| (k, Some(v))))
            }
            Ends::Keys(it) => {
                let item = if back { it.next_back() } else { it.next() };
                item.map(|r| r.map(|k| (k, None)))
            }
        }
    }

    fn seek_back(&mut self, to: &[u8]) {
        match self {
            Ends::Pairs(it) => it.seek_back(to),
            Ends::Keys(it) => it.seek_back(to),
        }
    }
}

/// What a double-ended iterator must yield, from the model's pairs of its range: the
/// front takes keys ascending, the back descending, neither at or past the last key the
/// other took; an end that found nothing stays done until it is moved.
struct ModelEnds<'a> {
    pairs: Vec<(&'a Vec<u8>, &'a Vec<u8>)>,
    /// The front's next pair.
    front: usize,
    /// The back's next pair is the one before this.
    back: usize,
    front_last: Option<&'a Vec<u8>>,
    back_last: Option<&'a Vec<u8>>,
    front_done: bool,
    back_done: bool,
}

impl<'a> ModelEnds<'a> {
    fn new(pairs: Vec<(&'a Vec<u8>, &'a Vec<u8>)>) -> Self {
        let back = pairs.len();
        ModelEnds {
            pairs,
            front: 0,
            back,
            front_last: None,
            back_last: None,
            front_done: false,
            back_done: false,
        }
    }

    fn step(&mut self, back: bool) -> Option<(&'a Vec<u8>, &'a Vec<u8>)> {
        if back {
            if self.back_done {
                return None;
            }
            let pair = self
                .back
                .checked_sub(1)
                .and_then(|i| self.pairs.get(i))
                .copied();
            match pair {
                Some((k, v)) if self.front_last.is_none_or(|f| k > f) => {
                    self.back -= 1;
                    self.back_last = Some(k);
                    Some((k, v))
                }
                _ => {
                    self.back_done = true;
                    None
                }
            }
        } else {
            if self.front_done {
                return None;
            }
            match self.pairs.get(self.front).copied() {
                Some((k, v)) if self.back_last.is_none_or(|b| k < b) => {
                    self.front += 1;
                    self.front_last = Some(k);
                    Some((k, v))
                }
                _ => {
                    self.front_done = true;
                    None
                }
            }
        }
    }

    /// `seek_back(to)`: the back starts again at the last key at or before `to`, and the
    /// front, no longer bounded by what the back yielded, may go on from its last key.
    fn seek_back(&mut self, to: &[u8]) {
        self.back = self.pairs.partition_point(|(k, _)| k.as_slice() <= to);
        self.back_last = None;
        self.back_done = false;
        self.front_done = false;
    }
}

/// A range read backward through `ks` must give `model`'s pairs of the range, last first.
fn reverse_check(
    model: &Model,
    ks: &Keyspace,
    start: &Bound<Vec<u8>>,
    end: &Bound<Vec<u8>>,
    what: &str,
) -> Result<(), String> {
    let mut back = Vec::new();
    for item in ks.range::<Vec<u8>, _>((start.clone(), end.clone())).rev() {
        back.push(item.map_err(|e| format!("{what}: error {e}"))?);
    }
    let mut want: Vec<_> = model
        .iter()
        .filter(|(k, _)| in_range(k, start, end))
        .collect();
    want.reverse();
    match diff_pairs(&back, &want) {
        Some(d) => Err(format!("{what}: {d}")),
        None => Ok(()),
    }
}

/// What a batch entry does to `model`, once the batch was written.
fn apply_effect(model: &mut Model, effect: Effect) {
    match effect {
        Effect::Put(k, v) => {
            model.insert(k, v);
        }
        Effect::Merge(k, d) => append(model, k, &d),
        Effect::Delete(k) => {
            model.remove(&k);
        }
        Effect::Range(start, end) => model.retain(|k, _| *k < start || *k >= end),
    }
}

fn in_range(k: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    let after_start = match start {
        Bound::Included(s) => k >= s.as_slice(),
        Bound::Excluded(s) => k > s.as_slice(),
        Bound::Unbounded => true,
    };
    let before_end = match end {
        Bound::Included(e) => k <= e.as_slice(),
        Bound::Excluded(e) => k < e.as_slice(),
        Bound::Unbounded => true,
    };
    after_start && before_end
}

/// The database under test, its model, and a counter that makes every written value unique.
struct Harness {
    dir: tempfile::TempDir,
    opts: Options,
    db: Option<Db>,
    model: Model,
    tag: u64,
    /// Background work done by every `Db` instance so far (counters restart at open).
    totals: Totals,
    /// Snapshots held, each with the model as it was when it was taken, oldest first.
    snapshots: Vec<(hybridkv::Snapshot, Model)>,
    /// Where checkpoints go.
    checkpoints: tempfile::TempDir,
    /// The newest checkpoint and what it must hold (default keyspace, "side").
    checkpoint: Option<(std::path::PathBuf, Model, Model)>,
    /// The "side" keyspace of the open database, and what it must hold.
    side: Option<Keyspace>,
    side_model: Model,
    side_opts: Options,
}

/// Work counted over the whole run, to show the run exercised what it claims to.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    flushes: u64,
    compactions: u64,
    merges_within_l1: u64,
    reopens: u64,
    read_only_opens: u64,
    snapshot_reads: u64,
    checkpoints: u64,
    gc_segments_freed: u64,
    medium_values_merged: u64,
    merges: u64,
    /// Keys whose deltas a flush, compaction or GC folded into a value.
    deltas_folded: u64,
    /// Records flushes wrote into delta buckets, and bucket collections.
    bucket_records: u64,
    bucket_collections: u64,
    side_writes: u64,
    cross_batches: u64,
    side_drops: u64,
}

impl Harness {
    fn new(config: Config) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let opts = config.options();
        let db = Db::open(dir.path(), opts.clone()).map_err(|e| format!("open: {e}"))?;
        let side_opts = config.side_options();
        let side = db
            .create_keyspace(SIDE, side_opts.clone())
            .map_err(|e| format!("create keyspace: {e}"))?;
        Ok(Harness {
            dir,
            opts,
            side: Some(side),
            side_model: Model::new(),
            side_opts,
            db: Some(db),
            model: Model::new(),
            tag: 0,
            totals: Totals::default(),
            snapshots: Vec::new(),
            checkpoints: tempfile::tempdir().map_err(|e| e.to_string())?,
            checkpoint: None,
        })
    }

    fn db(&self) -> Result<&Db, String> {
        self.db
            .as_ref()
            .ok_or_else(|| "database not open".to_string())
    }

    fn side(&self) -> Result<&Keyspace, String> {
        self.side
            .as_ref()
            .ok_or_else(|| "side keyspace not open".to_string())
    }

    fn add_stats(&mut self) -> Result<(), String> {
        let all = [self.db()?.stats(), self.side()?.stats()];
        for s in all {
            let s = s.map_err(|e| format!("stats: {e}"))?;
            self.totals.flushes += s.flushes;
            self.totals.compactions += s.compactions;
            self.totals.merges_within_l1 += s.merges_within_l1;
            self.totals.gc_segments_freed += s.gc_segments_freed;
            self.totals.medium_values_merged += s.medium_values_merged;
            self.totals.merges += s.merges;
            self.totals.deltas_folded += s.deltas_folded;
            self.totals.bucket_records += s.delta_bucket_records_written;
            self.totals.bucket_collections += s.delta_bucket_gc_passes;
        }
        Ok(())
    }

    fn next_value(&mut self, len: usize) -> Vec<u8> {
        self.tag += 1;
        value(self.tag, len)
    }

    fn scan_check(
        &self,
        what: &str,
        iter: hybridkv::DbIterator,
        keep: impl Fn(&[u8]) -> bool,
    ) -> Result<(), String> {
        scan_check_model(&self.model, what, iter, keep)
    }

    /// Every pair by scan, every model key by get, and a few absent keys, in both
    /// keyspaces.
    fn full_check(&self, what: &str) -> Result<(), String> {
        self.check_db(self.db()?, what)
    }

    /// [`Self::full_check`] on any handle of this database.
    fn check_db(&self, db: &Db, what: &str) -> Result<(), String> {
        check_db_model(&self.model, db, what)?;
        let side = db
            .keyspace(SIDE)
            .map_err(|e| format!("{what}: keyspace {SIDE}: {e}"))?;
        check_db_model(&self.side_model, &side, &format!("{what}, keyspace {SIDE}"))
    }
}

fn scan_check_model(
    model: &Model,
    what: &str,
    iter: hybridkv::DbIterator,
    keep: impl Fn(&[u8]) -> bool,
) -> Result<(), String> {
    let mut got = Vec::new();
    for item in iter {
        got.push(item.map_err(|e| format!("{what}: error {e}"))?);
    }
    let want: Vec<_> = model.iter().filter(|(k, _)| keep(k)).collect();
    match diff_pairs(&got, &want) {
        Some(d) => Err(format!("{what}: {d}")),
        None => Ok(()),
    }
}

/// Every pair of `model` by scan, every model key by get, and a few absent keys.
fn check_db_model(model: &Model, db: &Keyspace, what: &str) -> Result<(), String> {
    scan_check_model(model, &format!("{what}: full scan"), db.iter(), |_| true)?;
    for (k, v) in model {
        let got = db
            .get(k)
            .map_err(|e| format!("{what}: get {}: {e}", describe(k)))?;
        if got.as_ref() != Some(v) {
            return Err(format!(
                "{what}: get {}: got {}, expected {}",
                describe(k),
                describe_opt(got.as_ref()),
                describe(v)
            ));
        }
    }
    for i in 0..KEY_SPACE {
        let k = key(i);
        if !model.contains_key(&k) {
            let got = db
                .get(&k)
                .map_err(|e| format!("{what}: get {}: {e}", describe(&k)))?;
            if got.is_some() {
                return Err(format!(
                    "{what}: deleted/never-written key {} returned {}",
                    describe(&k),
                    describe_opt(got.as_ref())
                ));
            }
        }
    }
    Ok(())
}

impl Harness {
    fn apply(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Put { key: k, len, sync } => {
                let (k, v) = (key(*k), self.next_value(*len));
                let r = if *sync {
                    self.db()?.put_opt(&k, &v, &WriteOptions { sync: true })
                } else {
                    self.db()?.put(&k, &v)
                };
                r.map_err(|e| format!("put: {e}"))?;
                self.model.insert(k, v);
            }
            Op::Delete { key: k } => {
                let k = key(*k);
                self.db()?.delete(&k).map_err(|e| format!("delete: {e}"))?;
                self.model.remove(&k);
            }
            Op::Merge { key: k, len } => {
                let (k, d) = (key(*k), self.next_value(*len));
                self.db()?
                    .merge(&k, &d)
                    .map_err(|e| format!("merge: {e}"))?;
                append(&mut self.model, k, &d);
            }
            Op::BulkMerge {
                start,
                count,
                step,
                len,
            } => {
                let end = start.saturating_add(*count).min(BULK_SPACE);
                for i in (*start..end).step_by(usize::from((*step).max(1))) {
                    let (k, d) = (bulk_key(i), self.next_value(usize::from(*len)));
                    self.db()?
                        .merge(&k, &d)
                        .map_err(|e| format!("bulk merge: {e}"))?;
                    append(&mut self.model, k, &d);
                }
            }
            Op::Batch(entries) => {
                let mut b = WriteBatch::new();
                let mut effects = Vec::new();
                let mut inverted = false;
                for e in entries {
                    match e {
                        BatchEntry::Put { key: k, len } => {
                            let (k, v) = (key(*k), self.next_value(*len));
                            b.put(&k, &v);
                            effects.push(Effect::Put(k, v));
                        }
                        BatchEntry::Delete { key: k } => {
                            let k = key(*k);
                            b.delete(&k);
                            effects.push(Effect::Delete(k));
                        }
                        BatchEntry::Merge { key: k, len } => {
                            let (k, d) = (key(*k), self.next_value(*len));
                            b.merge(&k, &d);
                            effects.push(Effect::Merge(k, d));
                        }
                        BatchEntry::DeleteRange { start, end } => {
                            let (start, end) = (key(*start), key(*end));
                            b.delete_range(&start, &end);
                            inverted |= start > end;
                            effects.push(Effect::Range(start, end));
                        }
                    }
                }
                match self.db()?.write(b) {
                    Err(Error::InvalidArgument(_)) if inverted => return Ok(()),
                    Err(e) => return Err(format!("batch: {e}")),
                    Ok(()) if inverted => {
                        return Err("a batch with an inverted range was accepted".into())
                    }
                    Ok(()) => {}
                }
                // In order: a write after a range deletion in the same batch survives it.
                for effect in effects {
                    apply_effect(&mut self.model, effect);
                }
            }
            Op::DeleteRange { start, end } => match self.db()?.delete_range(start, end) {
                Err(Error::InvalidArgument(_)) if start > end => {}
                Err(e) => return Err(format!("delete_range: {e}")),
                Ok(()) if start > end => {
                    return Err(format!(
                        "delete_range({}, {}) with start after end was accepted",
                        describe(start),
                        describe(end)
                    ))
                }
                Ok(()) => self.model.retain(|k, _| k < start || k >= end),
            },
            Op::DeletePrefix { prefix } => {
                self.db()?
                    .delete_prefix(prefix)
                    .map_err(|e| format!("delete_prefix: {e}"))?;
                self.model.retain(|k, _| !k.starts_with(prefix));
            }
            Op::Bulk { start, count, seed } => {
                let end = start.saturating_add(*count).min(BULK_SPACE);
                for i in *start..end {
                    let (k, v) = (bulk_key(i), self.next_value(bulk_len(*seed, i)));
                    self.db()?
                        .put(&k, &v)
                        .map_err(|e| format!("bulk put: {e}"))?;
                    self.model.insert(k, v);
                }
            }
            Op::BulkDelete { start, count, step } => {
                let end = start.saturating_add(*count).min(BULK_SPACE);
                for i in (*start..end).step_by(usize::from((*step).max(1))) {
                    let k = bulk_key(i);
                    self.db()?
                        .delete(&k)
                        .map_err(|e| format!("bulk delete: {e}"))?;
                    self.model.remove(&k);
                }
            }
            Op::Get { key: k } => {
                // Through `get_value` (the handle that does not copy); `get` is that value
                // made a `Vec`, and every full check reads each key through it. A read
                // that wrote its value back (fold-back) is followed by a second one, which
                // finds the value written back (its record kept in the cache).
                let folded_back = || -> Result<u64, String> {
                    Ok(self
                        .db()?
                        .stats()
                        .map_err(|e| format!("stats: {e}"))?
                        .reads_folded_back)
                };
                let before = folded_back()?;
                let mut reads = 0;
                while reads < 2 {
                    reads += 1;
                    let got = self
                        .db()?
                        .get_value(k)
                        .map_err(|e| format!("get_value {}: {e}", describe(k)))?;
                    let want = self.model.get(k);
                    if got.as_deref() != want.map(Vec::as_slice) {
                        return Err(format!(
                            "get_value {} (read {reads}): got {}, expected {}",
                            describe(k),
                            describe_opt(got.map(|v| v.into_vec()).as_ref()),
                            describe_opt(want)
                        ));
                    }
                    if folded_back()? == before {
                        break;
                    }
                }
            }
            Op::Range { start, end } => {
                let invalid = inverted(start, end);
                let iter = self.db()?.range::<Vec<u8>, _>((start.clone(), end.clone()));
                if invalid {
                    let items: Vec<_> = iter.collect();
                    let ok = items.len() == 1
                        && matches!(items.first(), Some(Err(Error::InvalidArgument(_))));
                    if !ok {
                        return Err(format!(
                            "range with start after end: expected one InvalidArgument, got {} items: {:?}",
                            items.len(),
                            items.iter().map(|r| r.as_ref().map(|(k, _)| describe(k))).collect::<Vec<_>>()
                        ));
                    }
                } else {
                    self.scan_check("range", iter, |k| in_range(k, start, end))?;
                    // Backward: the same pairs in reverse order.
                    reverse_check(&self.model, self.db()?, start, end, "reverse range")?;
                    // Lazily: every key and value length, every other value read.
                    let want: Vec<_> = self
                        .model
                        .iter()
                        .filter(|(k, _)| in_range(k, start, end))
                        .collect();
                    let lazy = self
                        .db()?
                        .range::<Vec<u8>, _>((start.clone(), end.clone()))
                        .lazy();
                    let mut n = 0;
                    for (i, item) in lazy.enumerate() {
                        let pair = item.map_err(|e| format!("lazy range: error {e}"))?;
                        let Some((k, v)) = want.get(i) else {
                            return Err(format!("lazy range: extra key {}", describe(pair.key())));
                        };
                        if pair.key() != k.as_slice() || pair.value_len() != v.len() as u64 {
                            return Err(format!(
                                "lazy range item {i}: got {} ({} bytes), expected {} ({} bytes)",
                                describe(pair.key()),
                                pair.value_len(),
                                describe(k),
                                v.len()
                            ));
                        }
                        if i % 2 == 0 {
                            let got = pair.value().map_err(|e| format!("lazy value: {e}"))?;
                            if got != **v {
                                return Err(format!("lazy value of {}: wrong bytes", describe(k)));
                            }
                        }
                        n += 1;
                    }
                    if n != want.len() {
                        return Err(format!("lazy range: {n} pairs, expected {}", want.len()));
                    }
                    // As views of the records read: the same pairs.
                    let viewed: Vec<(Vec<u8>, Vec<u8>)> = self
                        .db()?
                        .range::<Vec<u8>, _>((start.clone(), end.clone()))
                        .values()
                        .map(|r| r.map(|(k, v)| (k, v.as_slice().to_vec())))
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("range of values: error {e}"))?;
                    if let Some(d) = diff_pairs(&viewed, &want) {
                        return Err(format!("range of values: {d}"));
                    }
                }
            }
            Op::Seek {
                start,
                end,
                take,
                to,
            } => {
                if inverted(start, end) {
                    return Ok(());
                }
                let mut iter = self.db()?.range::<Vec<u8>, _>((start.clone(), end.clone()));
                let mut got = Vec::new();
                for item in iter.by_ref().take(usize::from(*take)) {
                    got.push(item.map_err(|e| format!("seek: error before the seek {e}"))?);
                }
                let want: Vec<_> = self
                    .model
                    .iter()
                    .filter(|(k, _)| in_range(k, start, end))
                    .take(usize::from(*take))
                    .collect();
                if let Some(d) = diff_pairs(&got, &want) {
                    return Err(format!("seek: before the seek: {d}"));
                }
                iter.seek(to);
                self.scan_check("seek: after the seek", iter, |k| {
                    in_range(k, start, end) && k >= to.as_slice()
                })?;
            }
            Op::BothEnds {
                start,
                end,
                front,
                to,
                keys,
            } => {
                if inverted(start, end) {
                    return Ok(());
                }
                let range = (start.clone(), end.clone());
                let mut real = if *keys {
                    Ends::Keys(self.db()?.keys::<Vec<u8>, _>(range))
                } else {
                    Ends::Pairs(self.db()?.range::<Vec<u8>, _>(range))
                };
                let mut model = ModelEnds::new(
                    self.model
                        .iter()
                        .filter(|(k, _)| in_range(k, start, end))
                        .collect(),
                );
                let step = |real: &mut Ends, model: &mut ModelEnds, back: bool, call: usize| {
                    let got = real
                        .step(back)
                        .transpose()
                        .map_err(|e| format!("both ends, call {call}: error {e}"))?;
                    let want = model.step(back);
                    let side = if back { "next_back" } else { "next" };
                    match (&got, want) {
                        (None, None) => Ok(false),
                        (Some((gk, gv)), Some((wk, wv)))
                            if gk == wk && gv.as_ref().is_none_or(|v| v == wv) =>
                        {
                            Ok(true)
                        }
                        _ => Err(format!(
                            "both ends, call {call} ({side}): got {:?}, expected {:?}",
                            got.as_ref().map(|(k, _)| describe(k)),
                            want.map(|(k, _)| describe(k))
                        )),
                    }
                };
                let mut call = 0;
                for _ in 0..*front {
                    call += 1;
                    step(&mut real, &mut model, false, call)?;
                }
                real.seek_back(to);
                model.seek_back(to);
                loop {
                    call += 2;
                    let back = step(&mut real, &mut model, true, call - 1)?;
                    let forward = step(&mut real, &mut model, false, call)?;
                    if !back && !forward {
                        break;
                    }
                }
                // The ends met; moving the back lets the front go on past that point.
                real.seek_back(to);
                model.seek_back(to);
                loop {
                    call += 1;
                    if !step(&mut real, &mut model, false, call)? {
                        break;
                    }
                }
            }
            Op::Prefix { prefix } => {
                // A length hint that is sometimes short of the pairs there are, so the scan
                // goes on past it: the pairs must not change.
                let iter = self.db()?.prefix(prefix).expect_pairs(prefix.len() * 3 + 1);
                self.scan_check("prefix", iter, |k| k.starts_with(prefix))?;
            }
            Op::Flush => self.db()?.flush().map_err(|e| format!("flush: {e}"))?,
            Op::Compact => self.db()?.compact().map_err(|e| format!("compact: {e}"))?,
            Op::Gc => {
                self.db()?.gc().map_err(|e| format!("gc: {e}"))?;
            }
            Op::Reopen { close } => {
                self.add_stats()?;
                self.totals.reopens += 1;
                // A keyspace's handle keeps the database open too.
                self.side = None;
                let db = self.db.take().ok_or("database not open")?;
                if *close {
                    db.close().map_err(|e| format!("close: {e}"))?;
                } else {
                    drop(db);
                }
                // A snapshot never keeps the database open: closing (or dropping the last
                // handle) happened above although snapshots were held, and their reads
                // are now refused.
                for (snap, _) in self.snapshots.drain(..) {
                    match snap.get(b"k") {
                        Err(hybridkv::Error::Closed) => {}
                        other => {
                            return Err(format!("snapshot get after close: {other:?}"));
                        }
                    }
                }
                self.side = None;
                let db = Db::open(self.dir.path(), self.opts.clone())
                    .map_err(|e| format!("reopen: {e}"))?;
                self.side = Some(db.keyspace(SIDE).map_err(|e| format!("reopen: {e}"))?);
                self.db = Some(db);
                self.full_check("after reopen")?;
                if let Some((path, then, side_then)) = &self.checkpoint {
                    // The source wrote, merged and collected since: the checkpoint's
                    // linked files must not have changed under it.
                    let ckpt = Db::open(path, self.opts.clone())
                        .map_err(|e| format!("reopen checkpoint: {e}"))?;
                    check_db_model(then, &ckpt, "checkpoint, reopened later")?;
                    let side = ckpt.keyspace(SIDE).map_err(|e| e.to_string())?;
                    check_db_model(side_then, &side, "checkpoint's side, reopened later")?;
                    drop(side);
                    ckpt.close().map_err(|e| format!("close checkpoint: {e}"))?;
                }
            }
            Op::Checkpoint => {
                self.totals.checkpoints += 1;
                let path = self
                    .checkpoints
                    .path()
                    .join(format!("ckpt-{}", self.totals.checkpoints));
                let report = self
                    .db()?
                    .checkpoint(&path)
                    .map_err(|e| format!("checkpoint: {e}"))?;
                let opts = Options {
                    create_if_missing: false,
                    ..self.opts.clone()
                };
                let ckpt = Db::open(&path, opts).map_err(|e| format!("open checkpoint: {e}"))?;
                self.check_db(&ckpt, "checkpoint")
                    .map_err(|e| format!("{e} ({report:?})"))?;
                // A write to the checkpoint stays in it: the source's next check (key 0
                // is in its key space) would see it otherwise.
                let mut then = self.model.clone();
                let (k, v) = (key(0), b"written to the checkpoint".to_vec());
                ckpt.put(&k, &v)
                    .map_err(|e| format!("put to checkpoint: {e}"))?;
                then.insert(k, v);
                ckpt.close().map_err(|e| format!("close checkpoint: {e}"))?;
                let side_then = self.side_model.clone();
                if let Some((old, _, _)) = self.checkpoint.replace((path, then, side_then)) {
                    let _ = std::fs::remove_dir_all(old);
                }
            }
            Op::Snapshot => {
                let snap = self
                    .db()?
                    .snapshot()
                    .map_err(|e| format!("snapshot: {e}"))?;
                self.snapshots.push((snap, self.model.clone()));
                if self.snapshots.len() > 3 {
                    self.snapshots.remove(0);
                }
            }
            Op::SnapshotRead { which, key, prefix } => {
                let Some((snap, then)) = self
                    .snapshots
                    .get(usize::from(*which) % self.snapshots.len().max(1))
                else {
                    return Ok(());
                };
                self.totals.snapshot_reads += 1;
                // `Snapshot::get` is this value made a `Vec`.
                let got = snap
                    .get_value(key)
                    .map_err(|e| format!("snapshot get_value: {e}"))?
                    .map(|v| v.into_vec());
                if got.as_ref() != then.get(key) {
                    return Err(format!(
                        "snapshot {} get {}: got {}, expected {}",
                        snap.sequence(),
                        describe(key),
                        describe_opt(got.as_ref()),
                        describe_opt(then.get(key))
                    ));
                }
                let mut pairs = Vec::new();
                for item in snap.prefix(prefix) {
                    pairs.push(item.map_err(|e| format!("snapshot prefix scan: {e}"))?);
                }
                let want: Vec<_> = then.iter().filter(|(k, _)| k.starts_with(prefix)).collect();
                if let Some(d) = diff_pairs(&pairs, &want) {
                    return Err(format!("snapshot {} prefix scan: {d}", snap.sequence()));
                }
            }
            Op::ReadOnly => {
                self.totals.read_only_opens += 1;
                let ro = Db::open_read_only(self.dir.path(), self.opts.clone())
                    .map_err(|e| format!("read-only open: {e}"))?;
                self.check_db(&ro, "read-only open beside the writer")?;
                match ro.put(b"ro", b"x") {
                    Err(hybridkv::Error::ReadOnly) => {}
                    other => return Err(format!("put on a read-only handle: {other:?}")),
                }
            }
            Op::SideWrite { key: k, len, kind } => {
                self.totals.side_writes += 1;
                let k = key(*k);
                match kind % 3 {
                    0 => {
                        let v = self.next_value(*len);
                        self.side()?
                            .put(&k, &v)
                            .map_err(|e| format!("side put: {e}"))?;
                        self.side_model.insert(k, v);
                    }
                    1 => {
                        self.side()?
                            .delete(&k)
                            .map_err(|e| format!("side delete: {e}"))?;
                        self.side_model.remove(&k);
                    }
                    _ => {
                        let d = self.next_value(*len % 64);
                        self.side()?
                            .merge(&k, &d)
                            .map_err(|e| format!("side merge: {e}"))?;
                        append(&mut self.side_model, k, &d);
                    }
                }
            }
            Op::CrossBatch(entries) => {
                self.totals.cross_batches += 1;
                let mut b = WriteBatch::new();
                let mut effects = Vec::new();
                let mut inverted = false;
                let (main, side): (Keyspace, Keyspace) =
                    ((**self.db()?).clone(), self.side()?.clone());
                for (to_side, e) in entries {
                    let ks: &Keyspace = if *to_side { &side } else { &main };
                    let effect = match e {
                        BatchEntry::Put { key: k, len } => {
                            let (k, v) = (key(*k), self.next_value(*len));
                            b.put_in(ks, &k, &v);
                            Effect::Put(k, v)
                        }
                        BatchEntry::Delete { key: k } => {
                            let k = key(*k);
                            b.delete_in(ks, &k);
                            Effect::Delete(k)
                        }
                        BatchEntry::Merge { key: k, len } => {
                            let (k, d) = (key(*k), self.next_value(*len));
                            b.merge_in(ks, &k, &d);
                            Effect::Merge(k, d)
                        }
                        BatchEntry::DeleteRange { start, end } => {
                            let (start, end) = (key(*start), key(*end));
                            b.delete_range_in(ks, &start, &end);
                            inverted |= start > end;
                            Effect::Range(start, end)
                        }
                    };
                    effects.push((*to_side, effect));
                }
                // Written through either handle: every entry names its keyspace.
                let through = if entries.len() % 2 == 0 { &side } else { &main };
                match through.write(b) {
                    Err(Error::InvalidArgument(_)) if inverted => return Ok(()),
                    Err(e) => return Err(format!("cross batch: {e}")),
                    Ok(()) if inverted => {
                        return Err("a batch with an inverted range was accepted".into())
                    }
                    Ok(()) => {}
                }
                for (to_side, effect) in effects {
                    let model = if to_side {
                        &mut self.side_model
                    } else {
                        &mut self.model
                    };
                    apply_effect(model, effect);
                }
            }
            Op::SideRead { key: k, start, end } => {
                let got = self.side()?.get(k).map_err(|e| format!("side get: {e}"))?;
                if got.as_ref() != self.side_model.get(k) {
                    return Err(format!(
                        "side get {}: got {}, expected {}",
                        describe(k),
                        describe_opt(got.as_ref()),
                        describe_opt(self.side_model.get(k))
                    ));
                }
                if !inverted(start, end) {
                    let iter = self
                        .side()?
                        .range::<Vec<u8>, _>((start.clone(), end.clone()));
                    scan_check_model(&self.side_model, "side range", iter, |k| {
                        in_range(k, start, end)
                    })?;
                    reverse_check(
                        &self.side_model,
                        self.side()?,
                        start,
                        end,
                        "side reverse range",
                    )?;
                }
            }
            Op::SideFlush => self
                .side()?
                .flush()
                .map_err(|e| format!("side flush: {e}"))?,
            Op::CrossView => {
                let (main, side) = (self.db()?, self.side()?);
                let views = main
                    .consistent_snapshots(&[main, side])
                    .map_err(|e| format!("consistent snapshots: {e}"))?;
                for (view, model, what) in [
                    (&views[0], &self.model, "view of default"),
                    (&views[1], &self.side_model, "view of side"),
                ] {
                    scan_check_model(model, what, view.iter(), |_| true)?;
                }
            }
            Op::DropSide => {
                self.totals.side_drops += 1;
                let old = self.side.take().ok_or("side keyspace not open")?;
                self.db()?
                    .drop_keyspace(SIDE)
                    .map_err(|e| format!("drop keyspace: {e}"))?;
                match old.get(b"k") {
                    Err(Error::Closed) => {}
                    other => return Err(format!("get on a dropped keyspace: {other:?}")),
                }
                let side = self
                    .db()?
                    .create_keyspace(SIDE, self.side_opts.clone())
                    .map_err(|e| format!("create keyspace again: {e}"))?;
                self.side = Some(side);
                self.side_model.clear();
                // The snapshots and checkpoint taken before keep the keyspace as it was;
                // only the checkpoint is checked again, and it is a copy of its own.
            }
        }
        Ok(())
    }

    /// Applies every op, then checks everything; the error names the failing op.
    fn run(config: Config, ops: &[Op]) -> Result<Totals, String> {
        let mut h = Harness::new(config)?;
        for (i, op) in ops.iter().enumerate() {
            h.apply(op).map_err(|e| format!("op #{i} {op:?}: {e}"))?;
        }
        h.full_check("final")?;
        h.db()?.flush().map_err(|e| format!("final flush: {e}"))?;
        h.db()?
            .compact()
            .map_err(|e| format!("final compact: {e}"))?;
        h.full_check("final, after flush and compact")?;
        h.add_stats()?;
        Ok(h.totals)
    }
}

// ---------------------------------------------------------------------------------------
// proptest driver

fn value_len() -> impl Strategy<Value = usize> {
    prop_oneof![30 => 0..=300usize, 1 => 301..=40_000usize]
}

fn small_key() -> impl Strategy<Value = u8> {
    0..KEY_SPACE
}

/// Keys for reads and bounds: the small space, the bulk space, or arbitrary short bytes.
fn any_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => small_key().prop_map(key),
        2 => (0..BULK_SPACE).prop_map(bulk_key),
        1 => proptest::collection::vec(any::<u8>(), 1..3),
    ]
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => any_key().prop_map(Bound::Included),
        2 => any_key().prop_map(Bound::Excluded),
    ]
}

fn prefix() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"a".to_vec()),
        Just(b"a\xff".to_vec()),
        Just(b"k".to_vec()),
        Just(b"k1".to_vec()),
        Just(b"\xff".to_vec()),
        Just(b"z0".to_vec()),
        Just(b"z001".to_vec()),
        Just(b"q".to_vec()),
    ]
}

fn batch_entry() -> impl Strategy<Value = BatchEntry> {
    prop_oneof![
        3 => (small_key(), value_len()).prop_map(|(key, len)| BatchEntry::Put { key, len }),
        1 => small_key().prop_map(|key| BatchEntry::Delete { key }),
        2 => (small_key(), 0..40usize).prop_map(|(key, len)| BatchEntry::Merge { key, len }),
        1 => (small_key(), 0..8u8, proptest::bool::weighted(0.1)).prop_map(|(start, len, inverted)| {
            // A short range of small keys, now and then inverted.
            let end = start.saturating_add(len).min(KEY_SPACE - 1);
            if inverted && end > start {
                BatchEntry::DeleteRange { start: end, end: start }
            } else {
                BatchEntry::DeleteRange { start, end }
            }
        }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (small_key(), value_len(), proptest::bool::weighted(0.03))
            .prop_map(|(key, len, sync)| Op::Put { key, len, sync }),
        10 => small_key().prop_map(|key| Op::Delete { key }),
        2 => (any_key(), any_key()).prop_map(|(start, end)| Op::DeleteRange { start, end }),
        1 => prefix().prop_map(|prefix| Op::DeletePrefix { prefix }),
        12 => (small_key(), prop_oneof![8 => 0..40usize, 1 => 40..3000usize])
            .prop_map(|(key, len)| Op::Merge { key, len }),
        1 => (0..BULK_SPACE, 1..2000u16, 1..5u16, 0..200u16)
            .prop_map(|(start, count, step, len)| Op::BulkMerge { start, count, step, len }),
        8 => proptest::collection::vec(batch_entry(), 1..8).prop_map(Op::Batch),
        2 => (0..BULK_SPACE, 1..1000u16, any::<u8>())
            .prop_map(|(start, count, seed)| Op::Bulk { start, count, seed }),
        1 => (0..BULK_SPACE, 1..2000u16, 1..5u16)
            .prop_map(|(start, count, step)| Op::BulkDelete { start, count, step }),
        20 => any_key().prop_map(|key| Op::Get { key }),
        10 => (bound(), bound()).prop_map(|(start, end)| Op::Range { start, end }),
        5 => prefix().prop_map(|prefix| Op::Prefix { prefix }),
        3 => (bound(), bound(), any::<u8>(), any_key())
            .prop_map(|(start, end, take, to)| Op::Seek { start, end, take: take % 8, to }),
        3 => (bound(), bound(), any::<u8>(), any_key(), any::<bool>()).prop_map(
            |(start, end, front, to, keys)| Op::BothEnds { start, end, front: front % 8, to, keys }
        ),
        4 => Just(Op::Flush),
        3 => Just(Op::Compact),
        2 => Just(Op::Gc),
        3 => any::<bool>().prop_map(|close| Op::Reopen { close }),
        1 => Just(Op::ReadOnly),
        2 => Just(Op::Snapshot),
        1 => Just(Op::Checkpoint),
        4 => (any::<u8>(), any_key(), prefix())
            .prop_map(|(which, key, prefix)| Op::SnapshotRead { which, key, prefix }),
        6 => (small_key(), value_len(), 0..3u8)
            .prop_map(|(key, len, kind)| Op::SideWrite { key, len, kind }),
        4 => proptest::collection::vec((any::<bool>(), batch_entry()), 1..8)
            .prop_map(Op::CrossBatch),
        3 => (any_key(), bound(), bound())
            .prop_map(|(key, start, end)| Op::SideRead { key, start, end }),
        1 => Just(Op::SideFlush),
        1 => Just(Op::CrossView),
        1 => Just(Op::DropSide),
    ]
}

fn config() -> impl Strategy<Value = Config> {
    (
        prop_oneof![
            3 => Just(Placement::Hybrid),
            1 => Just(Placement::InPlace),
            1 => Just(Placement::AllLog),
        ],
        prop_oneof![
            Just(MediumMergeLevel::Last),
            Just(MediumMergeLevel::SecondToLast)
        ],
        prop_oneof![Just(2usize), Just(3usize), Just(7usize)],
        proptest::bool::weighted(0.8),
        proptest::bool::weighted(0.5),
        1..=2usize,
        proptest::bool::weighted(0.5),
        prop_oneof![Just(4096usize), Just(8192usize)],
        prop_oneof![Just(0u64), Just(256u64), Just(1u64 << 20)],
    )
        .prop_map(
            |(
                placement,
                merge_level,
                max_levels,
                cache,
                pin,
                threads,
                delta_separation,
                leaf_size,
                lookup_merges,
            )| {
                Config {
                    placement,
                    merge_level,
                    max_levels,
                    cache,
                    pin,
                    threads,
                    delta_separation,
                    leaf_size,
                    lookup_merges,
                }
            },
        )
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2000,
        // Failing cases are saved next to this file (`model.proptest-regressions`).
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operations_match_a_btreemap_model(
        config in config(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        if let Err(e) = Harness::run(config, &ops) {
            prop_assert!(false, "{config:?}: {e}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// deterministic long run

/// xorshift64*: small, seedable, no dependencies.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
    fn value_len(&mut self) -> usize {
        if self.chance(30) {
            301 + self.below(40_000 - 300) as usize
        } else {
            self.below(301) as usize
        }
    }
    fn small_key(&mut self) -> u8 {
        self.below(u64::from(KEY_SPACE)) as u8
    }
    fn any_key(&mut self) -> Vec<u8> {
        match self.below(7) {
            0..=3 => key(self.small_key()),
            4 | 5 => bulk_key(self.below(u64::from(BULK_SPACE)) as u16),
            _ => (0..1 + self.below(2)).map(|_| self.next() as u8).collect(),
        }
    }
    fn bound(&mut self) -> Bound<Vec<u8>> {
        match self.below(5) {
            0 => Bound::Unbounded,
            1 | 2 => Bound::Included(self.any_key()),
            _ => Bound::Excluded(self.any_key()),
        }
    }

    /// An operation on the "side" keyspace.
    fn side_op(&mut self) -> Op {
        match self.below(100) {
            0..=49 => Op::SideWrite {
                key: self.small_key(),
                len: self.value_len(),
                kind: self.below(3) as u8,
            },
            50..=79 => Op::CrossBatch(
                (0..1 + self.below(6))
                    .map(|_| {
                        let to_side = self.chance(500);
                        let entry = match self.below(3) {
                            0 => BatchEntry::Delete {
                                key: self.small_key(),
                            },
                            1 => BatchEntry::Merge {
                                key: self.small_key(),
                                len: self.below(40) as usize,
                            },
                            _ => BatchEntry::Put {
                                key: self.small_key(),
                                len: self.value_len(),
                            },
                        };
                        (to_side, entry)
                    })
                    .collect(),
            ),
            80..=89 => Op::SideRead {
                key: self.any_key(),
                start: self.bound(),
                end: self.bound(),
            },
            90..=94 => Op::SideFlush,
            95..=97 => Op::CrossView,
            _ => Op::DropSide,
        }
    }

    /// One operation, with roughly the proptest mix but rarer bulk work and reopens.
    fn op(&mut self) -> Op {
        if self.chance(80) {
            return self.side_op();
        }
        match self.below(1000) {
            0..=259 => Op::Put {
                key: self.small_key(),
                len: self.value_len(),
                sync: self.chance(5),
            },
            260..=319 => Op::Merge {
                key: self.small_key(),
                len: if self.chance(50) {
                    40 + self.below(3000) as usize
                } else {
                    self.below(40) as usize
                },
            },
            320..=329 => Op::BulkMerge {
                start: self.below(u64::from(BULK_SPACE)) as u16,
                count: 1 + self.below(2000) as u16,
                step: 1 + self.below(4) as u16,
                len: self.below(200) as u16,
            },
            330..=439 => Op::Delete {
                key: self.small_key(),
            },
            440..=519 => Op::Batch(
                (0..1 + self.below(8))
                    .map(|_| {
                        if self.chance(250) {
                            BatchEntry::Delete {
                                key: self.small_key(),
                            }
                        } else if self.chance(200) {
                            BatchEntry::Merge {
                                key: self.small_key(),
                                len: self.below(40) as usize,
                            }
                        } else if self.chance(20) {
                            let start = self.small_key();
                            let end = start.saturating_add(self.below(6) as u8).min(KEY_SPACE - 1);
                            if self.chance(100) {
                                BatchEntry::DeleteRange {
                                    start: end,
                                    end: start,
                                }
                            } else {
                                BatchEntry::DeleteRange { start, end }
                            }
                        } else {
                            BatchEntry::Put {
                                key: self.small_key(),
                                len: self.value_len(),
                            }
                        }
                    })
                    .collect(),
            ),
            520..=529 => Op::Bulk {
                start: self.below(u64::from(BULK_SPACE)) as u16,
                count: 1 + self.below(1000) as u16,
                seed: self.next() as u8,
            },
            530..=534 => Op::BulkDelete {
                start: self.below(u64::from(BULK_SPACE)) as u16,
                count: 1 + self.below(2000) as u16,
                step: 1 + self.below(4) as u16,
            },
            535..=719 => Op::Get {
                key: self.any_key(),
            },
            720..=722 => {
                // Usually a short range of small or bulk keys; now and then inverted.
                let start = self.any_key();
                let mut end = start.clone();
                if self.chance(950) {
                    end.push(b'0' + self.below(10) as u8);
                    if let Some(b) = end.get_mut(start.len().saturating_sub(1)) {
                        *b = b.saturating_add(self.below(2) as u8);
                    }
                } else {
                    end = self.any_key();
                }
                Op::DeleteRange { start, end }
            }
            723..=724 => {
                let prefixes: [&[u8]; 6] = [b"a", b"a\xff", b"k1", b"z01", b"z0", b"\xff"];
                Op::DeletePrefix {
                    prefix: prefixes[self.below(6) as usize].to_vec(),
                }
            }
            725..=734 => Op::Snapshot,
            735..=754 => {
                let prefixes: [&[u8]; 4] = [b"", b"k1", b"z0", b"a"];
                Op::SnapshotRead {
                    which: self.next() as u8,
                    key: self.any_key(),
                    prefix: prefixes[self.below(4) as usize].to_vec(),
                }
            }
            755..=844 => Op::Range {
                start: self.bound(),
                end: self.bound(),
            },
            845..=854 => Op::BothEnds {
                start: self.bound(),
                end: self.bound(),
                front: self.below(8) as u8,
                to: self.any_key(),
                keys: self.chance(500),
            },
            855..=904 => {
                let prefixes: [&[u8]; 7] = [b"", b"a", b"a\xff", b"k1", b"\xff", b"z0", b"z01"];
                Op::Prefix {
                    prefix: prefixes[self.below(7) as usize].to_vec(),
                }
            }
            905..=914 => Op::Seek {
                start: self.bound(),
                end: self.bound(),
                take: self.below(8) as u8,
                to: self.any_key(),
            },
            915..=944 => Op::Flush,
            945..=969 => Op::Compact,
            970..=989 => Op::Gc,
            990..=992 => Op::ReadOnly,
            993..=994 => Op::Checkpoint,
            _ => Op::Reopen {
                close: self.chance(500),
            },
        }
    }
}

fn long_run(seed: u64, config: Config, n: usize) -> Totals {
    let mut rng = Rng::new(seed);
    let ops: Vec<Op> = (0..n).map(|_| rng.op()).collect();
    let totals = match Harness::run(config, &ops) {
        Ok(t) => t,
        Err(e) => panic!("seed {seed:#x}, {config:?}: {e}"),
    };
    println!("seed {seed:#x} {config:?}: {totals:?}");
    // The run must have exercised the machinery it is meant to check.
    assert!(totals.flushes > 10, "{totals:?}");
    assert!(totals.reopens > 0, "{totals:?}");
    assert!(totals.read_only_opens > 0, "{totals:?}");
    assert!(totals.snapshot_reads > 0, "{totals:?}");
    assert!(totals.checkpoints > 0, "{totals:?}");
    assert!(totals.merges > 0, "{totals:?}");
    assert!(totals.side_writes > 0, "{totals:?}");
    assert!(totals.cross_batches > 0, "{totals:?}");
    assert!(totals.side_drops > 0, "{totals:?}");
    totals
}

#[test]
fn deterministic_long_run_hybrid() {
    let t = long_run(
        0x5eed_0001,
        Config {
            placement: Placement::Hybrid,
            merge_level: MediumMergeLevel::Last,
            max_levels: 7,
            cache: true,
            pin: true,
            threads: 2,
            delta_separation: false,
            leaf_size: 8192,
            lookup_merges: 0,
        },
        2000,
    );
    assert!(t.compactions > 0, "{t:?}");
    assert!(t.gc_segments_freed > 0, "{t:?}");
    assert!(t.deltas_folded > 0, "{t:?}");
}

#[test]
fn deterministic_long_run_hybrid_second_to_last_three_levels() {
    let t = long_run(
        0x5eed_0002,
        Config {
            placement: Placement::Hybrid,
            merge_level: MediumMergeLevel::SecondToLast,
            max_levels: 3,
            cache: false,
            pin: false,
            threads: 1,
            delta_separation: false,
            leaf_size: 8192,
            lookup_merges: 0,
        },
        2000,
    );
    assert!(t.compactions > 0, "{t:?}");
}

#[test]
fn deterministic_long_run_with_delta_buckets() {
    let t = long_run(
        0x5eed_0006,
        Config {
            placement: Placement::Hybrid,
            merge_level: MediumMergeLevel::Last,
            max_levels: 3,
            cache: true,
            pin: true,
            threads: 2,
            delta_separation: true,
            leaf_size: 8192,
            lookup_merges: 0,
        },
        2000,
    );
    assert!(t.compactions > 0, "{t:?}");
    assert!(t.bucket_records > 0 && t.bucket_collections > 0, "{t:?}");
}

#[test]
fn deterministic_long_run_with_four_kib_leaves() {
    // In place: values of every size, from inline to overflow blobs, in 4 KiB leaves.
    for (seed, placement) in [
        (0x5eed_0007, Placement::InPlace),
        (0x5eed_0008, Placement::Hybrid),
    ] {
        let t = long_run(
            seed,
            Config {
                placement,
                merge_level: MediumMergeLevel::Last,
                max_levels: 4,
                cache: true,
                pin: true,
                threads: 2,
                delta_separation: false,
                leaf_size: 4096,
                lookup_merges: 0,
            },
            1500,
        );
        assert!(t.compactions > 0, "{t:?}");
    }
}

#[test]
fn deterministic_long_run_in_place() {
    let t = long_run(
        0x5eed_0003,
        Config {
            placement: Placement::InPlace,
            merge_level: MediumMergeLevel::Last,
            max_levels: 4,
            cache: true,
            pin: true,
            threads: 2,
            delta_separation: false,
            leaf_size: 8192,
            lookup_merges: 0,
        },
        1500,
    );
    assert!(t.compactions > 0, "{t:?}");
}

#[test]
fn deterministic_long_run_all_log() {
    // Level files hold only keys and pointers here, so they stay under L1's target: the
    // depth is in the large log (segments filled, collected and relocated).
    let t = long_run(
        0x5eed_0004,
        Config {
            placement: Placement::AllLog,
            merge_level: MediumMergeLevel::Last,
            max_levels: 4,
            cache: true,
            pin: false,
            threads: 2,
            delta_separation: false,
            leaf_size: 8192,
            lookup_merges: 0,
        },
        1500,
    );
    assert!(t.gc_segments_freed > 0, "{t:?}");
}

#[test]
fn deterministic_long_run_with_lookup_merges() {
    // Gets and scans that search L1's runs in vain pay for merging them: into one run of
    // L1 (below any run flushed meanwhile) or, with more waste, into L2.
    let t = long_run(
        0x5eed_0009,
        Config {
            placement: Placement::Hybrid,
            merge_level: MediumMergeLevel::SecondToLast,
            max_levels: 4,
            cache: true,
            pin: true,
            threads: 2,
            delta_separation: false,
            leaf_size: 4096,
            lookup_merges: 4096,
        },
        2000,
    );
    assert!(t.merges_within_l1 > 0, "{t:?}");
    assert!(t.compactions > t.merges_within_l1, "{t:?}");
}
