//! Delta bucket collection and split.
//!
//! Owns: rewriting one bucket: its records are read, those no bucket list of the current
//! version stands for are dropped (a newer base, tombstone or range tombstone removed the
//! list, or a compaction folded the deltas into a value), the records of one key that one
//! list stands for are combined into one record (partially merged where the operator
//! can), and the result goes to one new segment, or to two buckets split by the next hash
//! bit when it is still over half of `Options::delta_bucket_size`. Never: installs the
//! table it builds (the caller does, in the flush thread, which is the only writer of
//! bucket tables), deletes a segment (the replaced ones go when the last reader of an older
//! table drops them, so snapshots keep reading what they saw), or decides liveness by
//! itself (the caller's `live` walks the levels).

use super::{BucketSlot, BucketStore, BucketTable, OpenSegment, MAX_BUCKET_BITS};
use crate::delta::MergeOperator;
use crate::error::Result;
use crate::format::key_hash;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one collection did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Collected {
    /// Records read.
    pub records_in: u64,
    /// Records written.
    pub records_out: u64,
    /// Committed bytes before and after.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Whether the bucket was split in two.
    pub split: bool,
}

/// A key whose deltas, combined, still hold at least this many operands (the operator
/// has no partial merge) or this many bytes is named for a fold into its base (KDSep).
pub(crate) const FOLD_OPERANDS: usize = 16;
pub(crate) const FOLD_BYTES: usize = 4096;

/// One record to write: key, LSN range, open operand list.
type Pending = (Vec<u8>, u64, u64, Vec<u8>);
/// One record read: LSN range, open operand list.
type Found = (u64, u64, Vec<u8>);
/// The LSN ranges of each key's bucket lists in the current version, in the keys' order.
pub(crate) type LiveRanges<'a> = &'a mut dyn FnMut(&[&[u8]]) -> Result<Vec<Vec<(u64, u64)>>>;

/// Collects bucket `slot` of `table` (see the module comment). `live(keys)` gives, for
/// each key the bucket holds (asked all at once, so that the walk can batch its reads),
/// the LSN ranges of its bucket lists in the current version (any order; empty when no
/// list stands for the key's records any more). Returns the table with the bucket
/// replaced, ready for an install.
/// Also returns the keys whose deltas grew past [`FOLD_OPERANDS`] or [`FOLD_BYTES`].
pub(crate) fn collect(
    store: &Arc<BucketStore>,
    table: &BucketTable,
    slot: usize,
    size: u64,
    op: Option<&dyn MergeOperator>,
    live: LiveRanges<'_>,
    new_id: &dyn Fn() -> u64,
) -> Result<(BucketTable, Collected, Vec<Vec<u8>>)> {
    let mut done = Collected::default();
    let Some(old) = table.slots.get(slot) else {
        return Ok((table.clone(), done, Vec::new()));
    };
    let mut grown: Vec<Vec<u8>> = Vec::new();
    done.bytes_in = old.bytes();
    let mut by_key: BTreeMap<Vec<u8>, Vec<Found>> = BTreeMap::new();
    for (seg, committed) in &old.segments {
        seg.scan(*committed, |_, rec| {
            done.records_in += 1;
            by_key
                .entry(rec.key.to_vec())
                .or_default()
                .push((rec.lo, rec.hi, rec.list.to_vec()));
            Ok(())
        })?;
    }
    let keys: Vec<&[u8]> = by_key.keys().map(Vec::as_slice).collect();
    let live_ranges = live(&keys)?;
    drop(keys);
    if live_ranges.len() != by_key.len() {
        return Err(crate::error::Error::Internal(format!(
            "bucket liveness answered {} of {} keys",
            live_ranges.len(),
            by_key.len()
        )));
    }
    let mut out: Vec<Pending> = Vec::new();
    for ((key, mut records), ranges) in by_key.into_iter().zip(live_ranges) {
        if ranges.is_empty() {
            continue;
        }
        records.sort_by_key(|r| r.0);
        for (rlo, rhi) in ranges {
            let inside: Vec<&Found> = records
                .iter()
                .filter(|(lo, hi, _)| *lo >= rlo && *hi <= rhi)
                .collect();
            let (Some(first), Some(last)) = (inside.first(), inside.last()) else {
                continue;
            };
            let (lo, hi) = (first.0, inside.iter().map(|r| r.1).max().unwrap_or(last.1));
            let list = if inside.len() == 1 {
                first.2.clone()
            } else {
                let mut operands: Vec<&[u8]> = Vec::new();
                for r in &inside {
                    operands.extend(crate::delta::operands_of(&key, &r.2)?);
                }
                let list = crate::delta::open_list(&operands);
                match op {
                    Some(op) => crate::delta::fold_partial(op, &key, list)?,
                    None => list,
                }
            };
            let operands = crate::delta::operands_of(&key, &list)?.len();
            if (operands >= FOLD_OPERANDS || list.len() >= FOLD_BYTES) && grown.last() != Some(&key)
            {
                grown.push(key.clone());
            }
            out.push((key.clone(), lo, hi, list));
        }
    }
    done.records_out = out.len() as u64;
    let out_bytes: u64 = out
        .iter()
        .map(|(k, _, _, l)| (super::RECORD_HEADER + super::BODY_FIXED + k.len() + l.len()) as u64)
        .sum();
    let (depth, prefix) = (old.depth, old.prefix);
    let split = out_bytes > size / 2 && depth < MAX_BUCKET_BITS;
    let new_slots = if split {
        let bit = 63 - u32::from(depth);
        let (low, high): (Vec<Pending>, Vec<Pending>) = out
            .into_iter()
            .partition(|(k, _, _, _)| key_hash(k) >> bit & 1 == 0);
        vec![
            write_slot(store, depth + 1, prefix << 1, &low, new_id)?,
            write_slot(store, depth + 1, prefix << 1 | 1, &high, new_id)?,
        ]
    } else {
        vec![write_slot(store, depth, prefix, &out, new_id)?]
    };
    done.split = split;
    done.bytes_out = new_slots.iter().map(BucketSlot::bytes).sum();
    if new_slots.iter().any(|s| !s.segments.is_empty()) {
        store.io.fs().sync_dir(&store.dir)?;
    }
    // The replaced bucket's open segment is never appended to again.
    store.open.lock().remove(&(depth, prefix));
    let mut next = table.clone();
    next.slots.splice(slot..=slot, new_slots);
    Ok((next, done, grown))
}

/// A bucket holding `records` in one new, synced segment (none if there are none).
fn write_slot(
    store: &Arc<BucketStore>,
    depth: u8,
    prefix: u64,
    records: &[Pending],
    new_id: &dyn Fn() -> u64,
) -> Result<BucketSlot> {
    let mut slot = BucketSlot {
        depth,
        prefix,
        segments: Vec::new(),
    };
    if records.is_empty() {
        return Ok(slot);
    }
    let OpenSegment { segment, mut file } = store.create_segment(new_id())?;
    // Deleted on drop until an install names it (`BucketTable::installed`).
    segment.mark_obsolete();
    let mut buf = Vec::new();
    for (key, lo, hi, list) in records {
        buf.clear();
        super::encode_record(key, *lo, *hi, list, &mut buf);
        let offset = file.len();
        file.append(&buf)?;
        segment.note(key_hash(key), offset, buf.len());
    }
    file.sync_data()?;
    let len = file.len();
    slot.segments.push((segment, len));
    Ok(slot)
}
