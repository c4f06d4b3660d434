//! The state of one keyspace of an open database (the default one, or one in `ks/<id>/`),
//! and the locks that guard it; what all keyspaces share is `lifecycle::Shared`.
//!
//! Owns: the wiring between components: the write path (`WritePath`, which sees the
//! engine only through the `WriteEnv` trait implemented here), the version set, the
//! background state, poisoning and closing, and `install` (an edit through the version
//! set, poisoning when its store fails). Never: imports the modules that add their own
//! `impl Engine` blocks: scheduling (`background`), flush/compaction
//! (`compaction::worker`), GC (`gc::job`), the write-back of folded reads (`fold_back`),
//! recovery (`recovery`), `check` and `space`.
//!
//! Lock order (code holding one of these locks takes only locks to its right): the
//! database's keyspaces table (`lifecycle::Shared::spaces`) -> `gc_lock` -> keyspace
//! slots (`write::Held`, ascending ids) -> `log` (the write path's mutex) -> `bg` ->
//! `versions` (the version set's lock) -> the readers' state inside the version set. A
//! commit holding `log` takes `versions` to register a large-log segment (and `bg` only to
//! poison); a write stall waits holding only its slots; a background thread claims work
//! holding `bg`, then `versions`; so `bg` is never taken under `versions`. `poison` is
//! taken under any of them and nothing is taken under it.

use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::io::{DirLock, Io};

use crate::manifest::edit::VersionEdit;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::stats::Counters;
use crate::version_set::{Obsolete, SuperVersion, VersionSet, VersionState};
use crate::write::batch::WriteBatch;
use crate::write::{WriteEnv, WritePath};
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Background coordination.
#[derive(Default)]
pub(crate) struct BgState {
    pub shutdown: bool,
    pub running: usize,
}

pub(crate) struct Engine {
    /// Which keyspace this is (0: the default one, in the database's directory; others
    /// in `ks/<id>/`).
    pub keyspace: u32,
    pub dir: PathBuf,
    pub opts: Options,
    pub io: Io,
    pub cache: Arc<BlockCache>,
    /// The small log and the commit path, shared by every keyspace of the database (which
    /// holds this keyspace's active memtable and large-log segment).
    pub writes: Arc<WritePath>,
    /// What is live, the manifest, and what readers see.
    pub versions: VersionSet,
    pub bg: Mutex<BgState>,
    pub bg_cv: Condvar,
    /// Set by a failed log write, fsync or background job: writes are refused.
    pub poison: Mutex<Option<String>>,
    /// Whether `poison` is set: read without the lock by every write's check.
    pub poisoned: AtomicBool,
    pub counters: Counters,
    pub dir_lock: Mutex<Option<Box<dyn DirLock>>>,
    /// Serializes garbage-collection passes, and holds the sizes of the complete large-log
    /// segments they learned.
    pub gc_lock: Mutex<crate::log::large::SegmentSizes>,
    /// Set first thing by `Db::close`: every entry point fails with `Error::Closed`.
    pub closed: AtomicBool,
    /// The delta buckets' store: their index and the segments flushes append to
    /// (`Options::delta_separation`; the table itself is in each `Version`).
    pub buckets: Arc<crate::bucket::BucketStore>,
}

impl Engine {
    /// The current super version and snapshot LSN, captured together.
    pub(crate) fn snapshot(&self) -> (Arc<SuperVersion>, u64) {
        self.versions.snapshot()
    }

    /// Refuses writes from now on, and wakes everyone waiting for background work.
    pub(crate) fn set_poison(&self, why: &Error) {
        self.record_poison(why);
        self.wake_all();
    }

    /// Refuses writes from now on, without waking anyone (safe under any lock; waiters
    /// notice within their wait timeout).
    pub(crate) fn record_poison(&self, why: &Error) {
        let mut p = self.poison.lock();
        if p.is_none() {
            log::error!("{}: refusing writes from now on: {why}", self.dir.display());
            *p = Some(why.to_string());
            self.poisoned.store(true, Ordering::Release);
        }
    }

    pub(crate) fn check_poison(&self) -> Result<()> {
        if !self.poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        match &*self.poison.lock() {
            Some(msg) => Err(Error::Poisoned(msg.clone())),
            None => Ok(()),
        }
    }

    /// `Error::Closed` once the database was closed.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Wakes background workers and anyone waiting for them.
    pub(crate) fn wake_all(&self) {
        let _g = self.bg.lock();
        self.bg_cv.notify_all();
    }

    /// Installs `edit` through the version set (stored, then applied); a failed store
    /// changes nothing in memory and poisons the engine, so no later install can build on
    /// a change whose fate on disk is unknown.
    pub(crate) fn install(
        &self,
        vs: &mut VersionState,
        edit: &VersionEdit,
        flushed: Option<&Arc<Memtable>>,
    ) -> Result<Obsolete> {
        self.versions
            .log_and_apply(vs, edit, flushed)
            .inspect_err(|e| {
                // Not `set_poison`: it takes the `bg` lock, which is never taken under
                // `versions` (a background thread claims work holding `bg`, then
                // `versions`).
                self.record_poison(e);
            })
    }
}

impl Engine {
    /// Commits `batch` atomically (see `WritePath`).
    pub(crate) fn write_batch(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        self.writes.write_batch(self, batch, sync)
    }

    /// Makes every committed write durable (see `WritePath::make_durable`).
    pub(crate) fn make_committed_durable(&self) -> Result<()> {
        self.writes.make_durable(self)
    }
}

impl WriteEnv for Engine {
    fn keyspace(&self) -> u32 {
        self.keyspace
    }
    fn opts(&self) -> &Options {
        &self.opts
    }
    fn io(&self) -> &Io {
        &self.io
    }
    fn dir(&self) -> &Path {
        &self.dir
    }
    fn versions(&self) -> &VersionSet {
        &self.versions
    }
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn cache(&self) -> &Arc<BlockCache> {
        &self.cache
    }
    fn check_poison(&self) -> Result<()> {
        Engine::check_poison(self)
    }
    fn set_poison(&self, why: &Error) {
        Engine::set_poison(self, why);
    }
    fn is_shutdown(&self) -> bool {
        // Every close and drop sets `closed` before it tells the background threads to
        // stop: an atomic read instead of the `bg` mutex on every commit.
        self.closed.load(Ordering::Acquire)
    }
    fn wait_for_background(&self) -> Result<()> {
        let mut g = self.bg.lock();
        if g.shutdown {
            return Err(Error::Closed);
        }
        self.bg_cv.notify_all();
        self.bg_cv.wait_for(&mut g, Duration::from_millis(50));
        Ok(())
    }
    fn wake_background(&self) {
        self.wake_all();
    }
}
