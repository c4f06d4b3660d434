//! Range deletions: `delete_range(start, end)` and `delete_prefix(prefix)` as one record
//! each, whatever the number of keys they cover.
//!
//! Owns: what a range tombstone is (a key range and the LSN it was written at: every
//! version of a key in the range with a lower LSN is deleted, later writes are not), the
//! set of them a read or a merge applies ([`RangeTombstones::cut`]), and when a flushed
//! one may be forgotten ([`PendingTombstone`]: while a run that may still hold a version
//! it deletes is live). Never: reads or writes files, or decides which versions a merge
//! keeps beyond answering `cut`: the memtable holds the unflushed tombstones, the version
//! the flushed ones, the manifest stores those, the merge drops what they cover.

/// A deleted key range: versions of keys in `start..end` with an LSN below `lsn` are gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RangeTombstone {
    pub start: Vec<u8>,
    /// Exclusive; `None`: to the end of the key space.
    pub end: Option<Vec<u8>>,
    pub lsn: u64,
}

impl RangeTombstone {
    pub(crate) fn covers(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|e| key < e)
    }

    /// Bytes it occupies in memory (for the memtable's size).
    pub(crate) fn size(&self) -> usize {
        self.start.len() + self.end.as_ref().map_or(0, Vec::len) + 32
    }
}

/// A flushed range tombstone and the runs that may still hold versions it deletes (the
/// runs that were live when it was flushed, and the outputs of merges of those that did
/// not apply it). It is forgotten once none is left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingTombstone {
    pub tombstone: RangeTombstone,
    /// Run (level file) ids, ascending.
    pub pending: Vec<u64>,
}

/// Range tombstones a read or a merge applies. Lookups test each against the key, so
/// their number is kept small: flushed ones are forgotten once no run needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RangeTombstones(Vec<RangeTombstone>);

impl RangeTombstones {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds the tombstones of `from` written at or below `snapshot`.
    pub(crate) fn extend_visible<'a>(
        &mut self,
        from: impl IntoIterator<Item = &'a RangeTombstone>,
        snapshot: u64,
    ) {
        self.0
            .extend(from.into_iter().filter(|t| t.lsn <= snapshot).cloned());
    }

    /// The highest LSN of a tombstone covering `key`, 0 if none: every version of `key`
    /// with a lower LSN is deleted.
    pub(crate) fn cut(&self, key: &[u8]) -> u64 {
        cut_of(&self.0, key, u64::MAX)
    }

    /// The highest LSN among them (0 if none).
    pub(crate) fn max_lsn(&self) -> u64 {
        self.0.iter().map(|t| t.lsn).max().unwrap_or(0)
    }
}

/// The highest LSN at or below `snapshot` of a tombstone of `tombstones` covering `key`, 0
/// if none (the one rule every holder of tombstones answers `cut` with).
pub(crate) fn cut_of<'a>(
    tombstones: impl IntoIterator<Item = &'a RangeTombstone>,
    key: &[u8],
    snapshot: u64,
) -> u64 {
    tombstones
        .into_iter()
        .filter(|t| t.lsn <= snapshot && t.covers(key))
        .map(|t| t.lsn)
        .max()
        .unwrap_or(0)
}

/// What an install does to the flushed range tombstones (the rule for forgetting them):
/// runs `removed` leave every pending list; a merge's outputs (`added`) join the list of
/// each tombstone it did not apply (LSN above `applied_through`) whose pending runs it
/// merged; tombstones a flush moves from its memtable (`flushed`) start pending on every
/// run then `live` except the flush's own outputs (which applied them); those left with
/// no pending run are forgotten. Range tombstones are installed in LSN order (flushes run
/// oldest memtable first), so a merge applied exactly those at or below `applied_through`.
pub(crate) fn carry_pending(
    tombstones: &mut Vec<PendingTombstone>,
    removed: &[u64],
    added: &[u64],
    applied_through: u64,
    flushed: &[RangeTombstone],
    live: &[u64],
) {
    for p in tombstones.iter_mut() {
        let merged = p.pending.iter().any(|id| removed.contains(id));
        p.pending.retain(|id| !removed.contains(id));
        if merged && p.tombstone.lsn > applied_through {
            p.pending.extend_from_slice(added);
            p.pending.sort_unstable();
            p.pending.dedup();
        }
    }
    if !flushed.is_empty() {
        let mut pending: Vec<u64> = live
            .iter()
            .copied()
            .filter(|id| !added.contains(id))
            .collect();
        pending.sort_unstable();
        pending.dedup();
        tombstones.extend(flushed.iter().map(|t| PendingTombstone {
            tombstone: t.clone(),
            pending: pending.clone(),
        }));
    }
    tombstones.retain(|p| !p.pending.is_empty());
}

/// The first key after every key that starts with `prefix`; `None` when there is none
/// (the prefix is empty or all `0xff` bytes: its keys run to the end of the key space).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(start: &[u8], end: Option<&[u8]>, lsn: u64) -> RangeTombstone {
        RangeTombstone {
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
            lsn,
        }
    }

    #[test]
    fn cut_is_the_newest_covering_tombstone() {
        let mut set = RangeTombstones::default();
        let all = [
            t(b"b", Some(b"d"), 10),
            t(b"c", None, 20),
            t(b"a", Some(b"b"), 30),
            t(b"", None, 99),
        ];
        set.extend_visible(&all, 50);
        assert_eq!(set.len(), 3);
        assert_eq!(set.cut(b""), 0);
        assert_eq!(set.cut(b"a"), 30);
        assert_eq!(set.cut(b"b"), 10); // "a".."b" excludes "b"
        assert_eq!(set.cut(b"c"), 20);
        assert_eq!(set.cut(b"d"), 20); // "b".."d" excludes "d", "c".. does not
        assert_eq!(set.cut(b"\xff\xff"), 20);
        assert_eq!(set.max_lsn(), 30);
    }

    #[test]
    fn a_flushed_tombstone_is_forgotten_once_no_run_may_hold_what_it_deletes() {
        let mut set = Vec::new();
        // Flushed into run 10 while runs 3 and 5 are live: pending on 3 and 5.
        carry_pending(&mut set, &[], &[10], 7, &[t(b"a", None, 7)], &[10, 3, 5]);
        assert_eq!(set.len(), 1);
        assert_eq!(set[0].pending, vec![3, 5]);
        // A merge that started before the flush (applied nothing past LSN 6) merges 3
        // into 11: 11 may hold deleted versions.
        carry_pending(&mut set, &[3], &[11], 6, &[], &[]);
        assert_eq!(set[0].pending, vec![5, 11]);
        // A merge that applied it rewrites 5 and 11 into 12: nothing pending, forgotten.
        carry_pending(&mut set, &[5, 11], &[12], 7, &[], &[]);
        assert!(set.is_empty());
        // Flushed with no older run live: nothing to wait for.
        carry_pending(&mut set, &[], &[13], 9, &[t(b"b", Some(b"c"), 9)], &[13]);
        assert!(set.is_empty());
        // A merge of runs that are not pending leaves the list alone.
        carry_pending(
            &mut set,
            &[],
            &[20],
            30,
            &[t(b"x", None, 30)],
            &[20, 14, 15],
        );
        carry_pending(&mut set, &[16], &[17], 0, &[], &[]);
        assert_eq!(set[0].pending, vec![14, 15]);
    }

    #[test]
    fn prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
        let p = t(b"a\xff", prefix_end(b"a\xff").as_deref(), 1);
        assert!(p.covers(b"a\xff") && p.covers(b"a\xff\xff\xff") && p.covers(b"a\xff\x00"));
        assert!(!p.covers(b"a\xfe\xff") && !p.covers(b"b"));
    }
}
