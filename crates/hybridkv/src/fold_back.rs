//! Fold-back (KDSep's fold of deltas into their base, on reads, and when a bucket
//! collection finds a key's deltas grown past a threshold): a get that folded deltas
//! read from level files writes the value it computed back as a put, so that later reads
//! of the key stop at the memtable and the next merges drop the deltas instead of carrying
//! them down the levels.
//!
//! Owns: deciding, holding its keyspace's slot of the write path, whether the value a get computed at
//! its snapshot is still the key's value (no version of the key newer than the snapshot),
//! and committing it through the one commit path. Never: waits for the slot or for room
//! in the memtable (it is an optimization: skipped when either is busy), changes a value
//! (the put holds exactly what a get returns at that moment), or fails the read.

use crate::engine::Engine;
use crate::write::batch::BatchOp;
use crate::write::CommitRecord;

impl Engine {
    /// Writes `value` back as the put of `key` if nothing wrote the key after `seen` (the
    /// LSN of the get's snapshot). Errors are logged, not returned: the read succeeded.
    /// Returns whether the put was committed.
    pub(crate) fn fold_back(&self, key: &[u8], value: &[u8], seen: u64) -> bool {
        let Some(mut held) = self.writes.try_hold(self.keyspace) else {
            return false;
        };
        // A close may have finished on another handle since the get began.
        if self.check_open().is_err()
            || self.check_poison().is_err()
            || held
                .mem(self.keyspace)
                .is_none_or(|m| m.size() >= self.opts.memtable_size)
        {
            return false;
        }
        // With the keyspace's slot held no commit into it runs: the state captured now
        // holds every write of `key`.
        let (sv, _) = self.snapshot();
        match crate::read::newest_lsn(&sv, key) {
            Ok(Some(lsn)) if lsn <= seen => {}
            Ok(_) => return false, // written since (or gone): the get's value is not the newest
            Err(e) => {
                log::warn!("{}: fold-back of a read skipped: {e}", self.dir.display());
                return false;
            }
        }
        drop(sv);
        let record = CommitRecord {
            ops: smallvec::smallvec![BatchOp::Put(key, value)],
            payload: None,
            relocation: false,
            cache_large: true,
            keyspace: self.keyspace,
            hint: None,
        };
        match self.writes.commit(&mut held, &[record], false) {
            Ok(_) => true,
            // The commit poisoned the engine: later writes report it.
            Err(e) => {
                log::warn!("{}: fold-back of a read failed: {e}", self.dir.display());
                false
            }
        }
    }

    /// KDSep's fold of a key's deltas into its base once they grow past a threshold (a
    /// bucket collection names such keys): the key's value read now and written back as
    /// a put, as a read's fold-back does (skipped when the keyspace is busy; the next
    /// collection names the key again). Returns whether it was written.
    pub(crate) fn fold_grown_deltas(&self, key: &[u8]) -> bool {
        let (sv, lsn) = self.snapshot();
        match crate::snapshot::get_noting_folds(self, &sv, lsn, key, true) {
            Ok((Some(v), _)) => {
                drop(sv);
                self.fold_back(key, &v, lsn)
            }
            Ok((None, _)) => false,
            Err(e) => {
                log::warn!("{}: folding grown deltas skipped: {e}", self.dir.display());
                false
            }
        }
    }
}
