//! `Snapshot`: reads as of one moment, for as long as the handle lives, and the read entry
//! points `Db` and `Snapshot` share (a get, a range at a captured view).
//!
//! Owns: a captured `SuperVersion` (memtables, level runs and log segments of that moment)
//! with its visible LSN, and the checks and counts every user read goes through. The
//! files the view needs stay on disk while it lives: replaced runs and freed segments are
//! deleted when their last holder drops them, and `Db::space` lists them as waiting for
//! deletion. Never: writes, or keeps the database open: a closed database refuses a
//! snapshot's reads with `Error::Closed`, and dropping the last `Db` handle closes it even
//! while snapshots live.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::options::check_key;
use crate::read::iter::{DbIterator, KeyIterator};
use crate::read::SuperVersion;
use crate::stats::Counters;
use crate::value::Value;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

/// A consistent, read-only view of the database as of the moment `Db::snapshot` was
/// called: gets and scans through it see every write acknowledged before that moment and
/// none after, whatever flushes, compactions and garbage collection do meanwhile.
#[derive(Clone)]
pub struct Snapshot {
    engine: Arc<Engine>,
    sv: Arc<SuperVersion>,
    lsn: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("sequence", &self.lsn)
            .finish()
    }
}

impl Snapshot {
    /// The view of `engine` now.
    pub(crate) fn capture(engine: &Arc<Engine>) -> Self {
        let (sv, lsn) = engine.snapshot();
        Snapshot {
            engine: Arc::clone(engine),
            sv,
            lsn,
        }
    }

    /// The sequence number of the last write the snapshot sees.
    pub fn sequence(&self) -> u64 {
        self.lsn
    }

    /// The value `key` had when the snapshot was taken.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        Ok(self.get_value(key)?.map(Value::into_vec))
    }

    /// [`Snapshot::get`] as a [`Value`]: a value read from a log comes without a copy.
    pub fn get_value(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        // A snapshot's read never writes back (its value may be old): nothing it reads is
        // read for the last time.
        get_noting_folds(&self.engine, &self.sv, self.lsn, key.as_ref(), false).map(|(v, _)| v)
    }

    /// Pairs whose keys fall in `range`, in key order, as of the snapshot.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> DbIterator {
        range_at(&self.engine, &self.sv, self.lsn, range)
    }

    /// Pairs whose keys start with `prefix`, in key order, as of the snapshot.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> DbIterator {
        let (start, end) = prefix_bounds(prefix.as_ref());
        self.range::<Vec<u8>, _>((start, end))
    }

    /// Every pair, in key order, as of the snapshot.
    pub fn iter(&self) -> DbIterator {
        self.range::<&[u8], _>(..)
    }

    /// Keys in `range`, in key order, as of the snapshot (values are never read).
    pub fn keys<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> KeyIterator {
        KeyIterator(self.range(range))
    }
}

/// A user's get at a captured view (checked, counted), and whether the value folded
/// deltas read from level files. `folds_back`: the caller writes such a value back
/// (`Engine::fold_back`), so a log base it folds that the cache does not hold is read
/// without being cached (`SegmentFile::read_passing`); one the cache holds stays there.
pub(crate) fn get_noting_folds(
    engine: &Engine,
    sv: &SuperVersion,
    lsn: u64,
    key: &[u8],
    folds_back: bool,
) -> Result<(Option<Value>, bool)> {
    engine.check_open()?;
    check_key(key)?;
    let reads_before = crate::io::thread_read_calls();
    let (v, folded) = crate::read::get(
        sv,
        engine.opts.merge_operator.as_ref(),
        lsn,
        key,
        folds_back,
    )?;
    let c = &engine.counters;
    Counters::add(&c.gets, 1);
    let reads = crate::io::thread_read_calls().wrapping_sub(reads_before);
    let bucket = usize::try_from(reads).map_or(3, |r| r.min(3));
    if let Some(n) = c.gets_by_reads.get(bucket) {
        Counters::add(n, 1);
    }
    // Only `prepopulate_cache` asks which keys were read (`BlockCache::read_lately`).
    if engine.opts.prepopulate_cache {
        engine.cache.note_read(crate::format::key_hash(key));
    }
    if let Some(v) = &v {
        Counters::add(&c.user_bytes_read, (key.len() + v.len()) as u64);
    }
    Ok((v, folded))
}

/// A user's range at a captured view. An invalid range (start after end) yields one
/// `Error::InvalidArgument`.
pub(crate) fn range_at<K: AsRef<[u8]>, R: RangeBounds<K>>(
    engine: &Engine,
    sv: &SuperVersion,
    lsn: u64,
    range: R,
) -> DbIterator {
    if let Err(e) = engine.check_open() {
        return DbIterator::failed(e);
    }
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    let (start, end) = (own(range.start_bound()), own(range.end_bound()));
    if let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) =
        (&start, &end)
    {
        if s > e {
            return DbIterator::failed(Error::InvalidArgument(
                "range start is after its end".into(),
            ));
        }
    }
    Counters::add(&engine.counters.scans, 1);
    DbIterator::new(sv.clone(), lsn, start, end, crate::read::Asker::Client)
        .with_operator(engine.opts.merge_operator.clone())
}

/// The bounds of the keys starting with `prefix`.
pub(crate) fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let start = Bound::Included(prefix.to_vec());
    match crate::range_delete::prefix_end(prefix) {
        Some(end) => (start, Bound::Excluded(end)),
        None => (start, Bound::Unbounded),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_bounds_cover_exactly_the_prefixed_keys() {
        assert_eq!(
            prefix_bounds(b"ab"),
            (
                Bound::Included(b"ab".to_vec()),
                Bound::Excluded(b"ac".to_vec())
            )
        );
        assert_eq!(
            prefix_bounds(b"a\xff"),
            (
                Bound::Included(b"a\xff".to_vec()),
                Bound::Excluded(b"b".to_vec())
            )
        );
        assert_eq!(
            prefix_bounds(b"\xff\xff"),
            (Bound::Included(b"\xff\xff".to_vec()), Bound::Unbounded)
        );
        assert_eq!(
            prefix_bounds(b""),
            (Bound::Included(Vec::new()), Bound::Unbounded)
        );
    }
}
