//! The write path: batches, group commit into the logs, and the memtable.
//!
//! Owns: the `log` mutex ([`LogState`]: the small log shared by every keyspace, the next
//! LSN, each keyspace's large-log segment being appended to), each keyspace's slot (its
//! active memtable under a mutex of its own, and its commit queue: [`Held`]), assigning
//! LSNs, classifying each put (small /
//! medium / large), appending large values to the large log and every batch's commit
//! record to the small log before acknowledging, inserting into the memtable (holding only
//! the slots, so commits into different keyspaces insert in parallel; a commit group
//! inserts after giving its slot to the next group: [`Pipeline`]), publishing the
//! snapshot LSN in LSN order, switching a full memtable to immutable, slowing writers
//! (never failing them) while flushes catch up, and making every committed write durable
//! on request ([`WritePath::make_durable`]). A commit is three steps, each written once:
//! the log step ([`WritePath::log_records`]), the memtable step
//! ([`WritePath::insert_staged`]) and the publication ([`WritePath::publish`]); the one
//! commit function [`WritePath::commit`] runs them holding the slots (GC's relocations,
//! fold-backs, batches naming several keyspaces), a commit group runs them passing its
//! slot on after the first, and recovery's replay uses the same memtable step
//! ([`replay_op`]).
//! Never: reads levels or writes level files; knows the engine only through [`WriteEnv`].
//!
//! A batch commits atomically through its one small-log record. A large value is written
//! once, to the large log; the small-log record carries only its key and pointer
//! (`OP_PUT_LARGE`), so a crash between the two writes leaves an unreferenced large-log
//! record (garbage) and never half a batch.

pub(crate) mod batch;
pub(crate) mod commit;

use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::io::Io;
use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};
use crate::log::ptr::LogPtr;
use crate::log::small::{self, SmallLogWriter};
use crate::memtable::{InsertHint, MemValue, Memtable};
use crate::options::Options;
use crate::placement::Category;
use crate::range_delete::RangeTombstone;
use crate::stats::Counters;
use crate::version_set::VersionSet;
use batch::{decode_ops, encode_op, encode_put_large, BatchOp, WriteBatch};
use commit::{CommitQueue, Lead, Request};
use parking_lot::lock_api::ArcMutexGuard;
use parking_lot::{Mutex, MutexGuard, RawMutex, RwLock};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// What the write path needs from one keyspace of the engine (implemented by `Engine`).
pub(crate) trait WriteEnv: Send + Sync {
    /// The keyspace this is (0: the default one, whose directory is the database's).
    fn keyspace(&self) -> u32;
    fn opts(&self) -> &Options;
    fn io(&self) -> &Io;
    /// The keyspace's directory (its levels and large log).
    fn dir(&self) -> &Path;
    fn versions(&self) -> &VersionSet;
    fn counters(&self) -> &Counters;
    /// The block cache new log segments keep the records gets and scans read in.
    fn cache(&self) -> &Arc<BlockCache>;
    /// `Error::Poisoned` once a write or background job failed.
    fn check_poison(&self) -> Result<()>;
    /// Refuses every later write.
    fn set_poison(&self, why: &Error);
    /// Whether the database is shutting down.
    fn is_shutdown(&self) -> bool;
    /// Wakes the background threads (a memtable waits for its flush) and waits a little
    /// for one of them to finish something; `Error::Closed` once shutting down.
    fn wait_for_background(&self) -> Result<()>;
    /// Wakes the background threads.
    fn wake_background(&self);
}

/// A keyspace as the commit path holds it.
type EnvRef = Weak<dyn WriteEnv>;

/// One keyspace's part of the state under the `log` mutex.
pub(crate) struct SpaceLog {
    env: EnvRef,
    /// The large-log segment being appended to (opened on the first large write).
    pub large: Option<SegmentWriter>,
}

/// Whether a large value appended by a commit goes into the node cache too.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LargeFill {
    /// Always (a value a read computed and wrote back: the reader wants it again).
    Always,
    /// Never (GC's relocations of values the cache did not hold: old values, read no
    /// more than where they were; GC asks `Always` for those it held).
    Never,
    /// With `Options::prepopulate_cache`, if a get read the key lately
    /// (`BlockCache::read_lately`): a hot key's new value is what a zipfian read soon
    /// wants (a read after an update would otherwise read it back from the device), but
    /// the value of a key nobody reads, in a load or in an update of a cold key, would
    /// only pay the copy and push the cache's contents out.
    IfRead,
}

impl SpaceLog {
    /// Hands keyspace `id`'s large-log tail to the OS and cuts the segment to its records
    /// (a close, or the keyspace dropped). A failure is logged and returned: the next open
    /// cuts a tail left behind; a handle already sealed (a second close) has nothing to do.
    fn finish_large(&mut self, id: u32) -> Result<()> {
        match self.large.as_mut().map(SegmentWriter::finish) {
            None | Some(Ok(()) | Err(Error::Closed)) => Ok(()),
            Some(Err(e)) => {
                log::warn!("cutting the large-log segment of keyspace {id}: {e}");
                Err(e)
            }
        }
    }
}

/// One keyspace's write state outside the `log` mutex: its active memtable, under a mutex
/// of its own that a commit into the keyspace holds from before its LSNs are assigned
/// until its records are in the log (a commit group; then it inserts past the slot: see
/// [`Pipeline`]) or until its inserts are visible (every other commit), so commits into
/// different keyspaces insert in parallel; and its group-commit queue.
pub(crate) struct Slot {
    env: EnvRef,
    state: Arc<Mutex<SlotState>>,
    queue: CommitQueue,
}

/// Poisons a keyspace if dropped while its thread panics (a commit's memtable step cut
/// short: records in the log may be missing from the memtable).
struct PoisonOnPanic<'e>(&'e Arc<dyn WriteEnv>);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.set_poison(&Error::Poisoned(
                "a commit panicked while inserting into the memtable".into(),
            ));
        }
    }
}

/// What a keyspace's slot mutex guards.
pub(crate) struct SlotState {
    pub mem: Arc<Memtable>,
    /// Its commit groups past the slot, inserting into the memtable.
    pipe: Arc<Pipeline>,
    /// The last LSN of the last commit group that went past the slot (the next one
    /// publishes after it).
    last_end: u64,
}

/// A keyspace's commit groups that gave their slot up after their log step and insert
/// into the memtable meanwhile (the next group writes the log at the same time). They
/// publish in LSN order (each waits for the one before it), and whoever holds the slot
/// waits until none is left ([`Pipeline::drain`]): so a holder of the slot still finds
/// every committed write in the memtables and none half inserted.
#[derive(Default)]
struct Pipeline {
    /// Groups past the slot, not yet published.
    in_flight: AtomicUsize,
    /// The last LSN such a group published.
    published: AtomicU64,
}

impl Pipeline {
    /// Waits until no group is past the slot (the caller holds it: none can start).
    fn drain(&self) {
        Self::wait(|| self.in_flight.load(Ordering::Acquire) == 0);
    }

    /// Waits until the group that went past the slot before this one, ending at `after`,
    /// has published.
    fn wait_published(&self, after: u64) {
        Self::wait(|| self.published.load(Ordering::Acquire) >= after);
    }

    /// Waits for `ready` (a few inserts away, on another thread that holds no lock):
    /// spinning, then giving the core away.
    fn wait(ready: impl Fn() -> bool) {
        for _ in 0..100 {
            if ready() {
                return;
            }
            std::hint::spin_loop();
        }
        while !ready() {
            std::thread::yield_now();
        }
    }
}

/// A commit group past its slot: counted in its keyspace's [`Pipeline`] until it
/// publishes, or fails (an error or a panic in its inserts: it still takes its turn, so
/// its successors neither wait for it forever nor publish before the group before it).
struct InFlight {
    pipe: Arc<Pipeline>,
    /// The last LSN of the group before it, and its own.
    after: u64,
    last: u64,
}

impl InFlight {
    /// Counts a group ending at `last` in (under the slot), after the one ending at
    /// `after`.
    fn enter(pipe: &Arc<Pipeline>, after: u64, last: u64) -> Self {
        pipe.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight {
            pipe: Arc::clone(pipe),
            after,
            last,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Its turn, in LSN order (a group that published has waited already).
        self.pipe.wait_published(self.after);
        self.pipe.published.fetch_max(self.last, Ordering::AcqRel);
        self.pipe.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The slots of the keyspaces one commit writes (or one reader needs quiet), locked in
/// ascending id order: while held, no commit into them runs or is half done (a hold waits
/// for the groups past the slot to publish), and their memtables hold every write
/// committed into them.
pub(crate) struct Held {
    /// The first slot (a commit into one keyspace holds only this: no allocation).
    first: Option<HeldSlot>,
    rest: Vec<HeldSlot>,
}

struct HeldSlot {
    id: u32,
    env: Arc<dyn WriteEnv>,
    state: ArcMutexGuard<RawMutex, SlotState>,
}

impl Held {
    fn one(slot: HeldSlot) -> Held {
        Held {
            first: Some(slot),
            rest: Vec::new(),
        }
    }

    fn push(&mut self, slot: HeldSlot) {
        match self.first {
            None => self.first = Some(slot),
            Some(_) => self.rest.push(slot),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &HeldSlot> {
        self.first.iter().chain(self.rest.iter())
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut HeldSlot> {
        self.first.iter_mut().chain(self.rest.iter_mut())
    }

    /// Keyspace `id`'s active memtable, if held.
    pub(crate) fn mem(&self, id: u32) -> Option<&Arc<Memtable>> {
        self.iter().find(|s| s.id == id).map(|s| &s.state.mem)
    }

    fn env(&self, id: u32) -> Option<&Arc<dyn WriteEnv>> {
        self.iter().find(|s| s.id == id).map(|s| &s.env)
    }
}

/// Held by whoever appends to the small log: the small log (shared by every keyspace),
/// the next LSN (one sequence for all of them), and each keyspace's large-log segment.
pub(crate) struct LogState {
    pub writer: SmallLogWriter,
    pub next_lsn: u64,
    /// Every open keyspace, by id.
    pub spaces: BTreeMap<u32, SpaceLog>,
}

impl LogState {
    /// Keyspace `id`'s part (`Error::Closed` once it is dropped or the database closed).
    pub(crate) fn space(&self, id: u32) -> Result<&SpaceLog> {
        self.spaces.get(&id).ok_or(Error::Closed)
    }

    /// A close's last step on the logs: the small log's buffered tail handed to the OS,
    /// and every log being appended to cut to its records (one appended to through a
    /// memory map gives its reserved tail back; the next open would cut it anyway). Not
    /// durable: nothing is synced. Appending after it is an error. A second close finds
    /// the handle sealed (`Error::Closed`) and does nothing. Every log is tried; the first
    /// failure is returned (each is logged), and nothing acknowledged depends on it: a
    /// tail left behind is cut by the next open.
    pub(crate) fn finish_all(&mut self) -> Result<()> {
        let mut first = match self
            .writer
            .commit(false)
            .and_then(|()| self.writer.finish())
        {
            Ok(()) | Err(Error::Closed) => Ok(()),
            Err(e) => {
                log::warn!("cutting the small log at close: {e}");
                Err(e)
            }
        };
        for (&id, space) in &mut self.spaces {
            let cut = space.finish_large(id);
            first = first.and(cut);
        }
        first
    }

    /// Makes the large-log tail of every keyspace durable.
    fn sync_large(&mut self) -> Result<()> {
        for space in self.spaces.values_mut() {
            if let Some(w) = space.large.as_mut().filter(|w| w.has_unsynced()) {
                w.commit(true)?;
            }
        }
        Ok(())
    }

    /// Refuses writes in every keyspace: a failed write to the shared small log leaves
    /// its state unknown to all of them.
    fn poison_all(&self, why: &Error) {
        for space in self.spaces.values() {
            if let Some(env) = space.env.upgrade() {
                env.set_poison(why);
            }
        }
    }
}

/// What a committed operation puts into the memtable.
enum Staged<'a> {
    /// A version of its key.
    Version(MemValue<'a>),
    /// A range tombstone from its key (the start) to this end.
    Range(Option<&'a [u8]>),
}

/// A committed operation on its way into its keyspace's memtable: the keyspace, the key,
/// the LSN, what goes in, and where its writer found the key's place before committing.
type StagedOp<'a> = (u32, &'a [u8], u64, Staged<'a>, Option<&'a InsertHint>);

/// One small-log record to commit: operations that become visible together.
pub(crate) struct CommitRecord<'a> {
    /// Puts and deletes, and switches of keyspace (`BatchOp::PutLarge` is refused:
    /// pointers are made here).
    pub ops: batch::Ops<'a>,
    /// The caller's encoded payload of `ops`, reused when no value goes to the large log.
    pub payload: Option<&'a [u8]>,
    /// Every put goes to the large log whatever its size (GC's relocations).
    pub relocation: bool,
    /// Large values appended for this record are kept in the block cache too (a
    /// fold-back: the value was just read, so it is read again soon; GC's relocations of
    /// records the cache held, which reads use). Not for user
    /// batches: a 2M-pair SD load cost 9% more CPU per insert for 5% fewer device reads
    /// in the Run A after it (PERFORMANCE.md).
    pub cache_large: bool,
    /// The keyspace of the operations before the first switch.
    pub keyspace: u32,
    /// Where the record's one operation goes in the memtable, searched before the commit
    /// ([`Memtable::locate`]; ignored for a record of several operations).
    pub hint: Option<&'a InsertHint>,
}

/// One small-log record as the commit writes it.
struct Encoded<'a> {
    first_lsn: u64,
    count: u32,
    /// A keyspace switch to write before the body (the caller's batch, reused as it is,
    /// went to a keyspace other than the default one).
    switch: Option<u32>,
    body: Cow<'a, [u8]>,
}

/// What a commit's log step wrote, for its memtable step.
struct Logged<'r> {
    staged: SmallVec<[StagedOp<'r>; 2]>,
    done: PerKeyspace,
    /// Its last LSN (0 if it holds no operation).
    last: u64,
    /// Whether an insert depends on every older write being in the memtable first (a
    /// merge folds onto the newest older version; a range tombstone joins a list kept
    /// in LSN order).
    ordered: bool,
}

/// What a commit wrote.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Committed {
    pub puts: u64,
    pub deletes: u64,
    pub merges: u64,
    pub range_deletes: u64,
    /// Key + value bytes of the operations.
    pub bytes: u64,
    /// Values appended to the large log, and their record bytes.
    pub large_values: u64,
    pub large_bytes: u64,
}

impl Committed {
    fn add(&mut self, o: &Committed) {
        self.puts += o.puts;
        self.deletes += o.deletes;
        self.merges += o.merges;
        self.range_deletes += o.range_deletes;
        self.bytes += o.bytes;
        self.large_values += o.large_values;
        self.large_bytes += o.large_bytes;
    }

    /// Adds these figures to a keyspace's counters.
    fn count_into(&self, c: &Counters) {
        Counters::add(&c.puts, self.puts);
        Counters::add(&c.deletes, self.deletes);
        Counters::add(&c.merges, self.merges);
        Counters::add(&c.range_deletes, self.range_deletes);
        Counters::add(&c.user_bytes_written, self.bytes);
        Counters::add(&c.large_bytes_written, self.large_bytes);
    }
}

/// What a commit wrote, per keyspace (no allocation for a commit into one keyspace).
#[derive(Default)]
struct PerKeyspace {
    first: Option<(u32, Committed)>,
    rest: Vec<(u32, Committed)>,
}

impl PerKeyspace {
    fn add(&mut self, ks: u32, c: &Committed) {
        match &mut self.first {
            None => self.first = Some((ks, *c)),
            Some((id, total)) if *id == ks => total.add(c),
            Some(_) => match self.rest.iter_mut().find(|(id, _)| *id == ks) {
                Some((_, total)) => total.add(c),
                None => self.rest.push((ks, *c)),
            },
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &Committed)> {
        self.first
            .iter()
            .chain(self.rest.iter())
            .map(|(id, c)| (*id, c))
    }
}

/// The small-log file being appended to and the LSN its first record has (or will have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogStart {
    pub id: u64,
    pub first_lsn: u64,
}

/// The write path's state: the `log` mutex, the group-commit queue, the keyspaces, and
/// what decides which small-log files are still needed.
pub(crate) struct WritePath {
    log: Mutex<LogState>,
    /// Where the small log lives (the database's directory).
    log_dir: PathBuf,
    io: Io,
    /// The open keyspaces' slots (their memtables and commit queues).
    slots: RwLock<BTreeMap<u32, Arc<Slot>>>,
    /// Per keyspace, the replay start its last durable manifest records: small-log files
    /// below the smallest of them hold only flushed writes.
    log_mins: Mutex<BTreeMap<u32, u64>>,
    /// The smallest of `log_mins`, published without a lock: a flush must never wait for
    /// `log`, which a stalled writer holds while it waits for that flush.
    small_log_min: AtomicU64,
    /// The current small-log file (published at each switch, read without `log`).
    current: Mutex<LogStart>,
    /// Checkpoints copying small-log files: while nonzero, none is deleted (the next flush
    /// after, or the next open, deletes what became obsolete meanwhile).
    small_log_holds: AtomicUsize,
    /// Older small-log files whose memtables are not all flushed yet and whose tails may
    /// not be durable: a memtable switch does not sync the log it leaves (a log deleted
    /// after its flush then often never reaches the device). A synced commit syncs these
    /// first, oldest first, so no synced record ever follows one a power loss can take;
    /// a flush with several keyspaces syncs those it flushed (see
    /// [`WritePath::sync_sealed_below`]). Its own lock (taken under `log`, or alone).
    sealed: Mutex<Vec<SmallLogWriter>>,
    /// Serializes deletions of obsolete small-log files (the flushes of several keyspaces
    /// may finish at once).
    deleting: Mutex<()>,
    /// Small-log files started since the open that are not deleted yet (read by the
    /// commit path to bound the small log), and their number (read without the lock).
    started: Mutex<std::collections::BTreeSet<u64>>,
    started_count: AtomicUsize,
}

/// Small-log files the oldest unflushed write may keep before its keyspace's memtable is
/// switched (so flushed) whatever its size: a keyspace written rarely must not keep every
/// file the others write after it (RocksDB's `max_total_wal_size`, counted in files, each
/// about a memtable of some keyspace).
const MAX_SMALL_LOG_FILES: usize = 16;

impl WritePath {
    /// A write path appending to `writer` (in `log_dir`), whose first record will take
    /// `next_lsn`. Keyspaces join with [`WritePath::register`].
    pub(crate) fn new(io: Io, log_dir: PathBuf, writer: SmallLogWriter, next_lsn: u64) -> Self {
        let current = LogStart {
            id: writer.id(),
            first_lsn: next_lsn,
        };
        WritePath {
            log: Mutex::new(LogState {
                writer,
                next_lsn,
                spaces: BTreeMap::new(),
            }),
            log_dir,
            io,
            slots: RwLock::new(BTreeMap::new()),
            log_mins: Mutex::new(BTreeMap::new()),
            small_log_min: AtomicU64::new(0),
            current: Mutex::new(current),
            small_log_holds: AtomicUsize::new(0),
            sealed: Mutex::new(Vec::new()),
            deleting: Mutex::new(()),
            started: Mutex::new(std::collections::BTreeSet::new()),
            started_count: AtomicUsize::new(0),
        }
    }

    /// Adds keyspace `env` with its active memtable and durable replay start. The caller
    /// holds `log` (passed in), so no commit sees half of it.
    pub(crate) fn register(
        &self,
        log: &mut LogState,
        env: &Arc<dyn WriteEnv>,
        mem: Arc<Memtable>,
        log_min: u64,
    ) {
        let id = env.keyspace();
        log.spaces.insert(
            id,
            SpaceLog {
                env: Arc::downgrade(env),
                large: None,
            },
        );
        self.slots.write().insert(
            id,
            Arc::new(Slot {
                env: Arc::downgrade(env),
                state: Arc::new(Mutex::new(SlotState {
                    mem,
                    pipe: Arc::default(),
                    last_end: 0,
                })),
                queue: CommitQueue::default(),
            }),
        );
        let mut mins = self.log_mins.lock();
        mins.insert(id, log_min);
        self.publish_min(&mins);
    }

    /// Removes keyspace `id` (dropped, or the database closing): commits that name it
    /// fail from now on, and it no longer holds small-log files back. Its large-log tail
    /// is handed to the OS first, and the segment cut to its records (a failure there
    /// leaves a tail that the next open cuts).
    pub(crate) fn unregister(&self, log: &mut LogState, id: u32) {
        if let Some(mut space) = log.spaces.remove(&id) {
            // Logged there; the next open cuts what a failed cut left.
            let _ = space.finish_large(id);
        }
        self.slots.write().remove(&id);
        let mut mins = self.log_mins.lock();
        mins.remove(&id);
        self.publish_min(&mins);
    }

    /// Records that keyspace `id`'s durable manifest now starts replay at `log_min`
    /// (ignored once it is unregistered); returns the smallest such start over every
    /// keyspace (files below it are obsolete).
    pub(crate) fn set_log_min(&self, id: u32, log_min: u64) -> u64 {
        let mut mins = self.log_mins.lock();
        if let Some(e) = mins.get_mut(&id) {
            *e = (*e).max(log_min);
        }
        self.publish_min(&mins)
    }

    fn publish_min(&self, mins: &BTreeMap<u32, u64>) -> u64 {
        let min = mins.values().copied().min().unwrap_or(0);
        self.small_log_min.store(min, Ordering::SeqCst);
        min
    }

    /// The smallest replay start of any keyspace: small-log files below it are obsolete.
    pub(crate) fn small_log_min(&self) -> u64 {
        self.small_log_min.load(Ordering::SeqCst)
    }

    /// Keyspace `id`, if open.
    pub(crate) fn env(&self, id: u32) -> Option<Arc<dyn WriteEnv>> {
        self.slots.read().get(&id).and_then(|s| s.env.upgrade())
    }

    /// How many keyspaces are open.
    pub(crate) fn keyspace_count(&self) -> usize {
        self.slots.read().len()
    }

    /// Every open keyspace.
    pub(crate) fn envs(&self) -> Vec<Arc<dyn WriteEnv>> {
        self.slots
            .read()
            .values()
            .filter_map(|s| s.env.upgrade())
            .collect()
    }

    fn slot(&self, id: u32) -> Result<Arc<Slot>> {
        self.slots.read().get(&id).cloned().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "write names keyspace {id}, which is not open in this database"
            ))
        })
    }

    /// Locks the slots of keyspaces `ids` (ascending, so two holders never wait on each
    /// other). `Error::InvalidArgument` for a keyspace that is not open.
    pub(crate) fn hold(&self, ids: &[u32]) -> Result<Held> {
        if let [id] = ids {
            return Self::hold_slot(&self.slot(*id)?, *id);
        }
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let slots: Vec<Arc<Slot>> = ids.iter().map(|&id| self.slot(id)).collect::<Result<_>>()?;
        let mut held = Held {
            first: None,
            rest: Vec::with_capacity(slots.len()),
        };
        for (id, slot) in ids.into_iter().zip(slots) {
            let env = slot.env.upgrade().ok_or(Error::Closed)?;
            let state = slot.state.lock_arc();
            state.pipe.drain();
            held.push(HeldSlot { id, env, state });
        }
        Ok(held)
    }

    /// Locks `slot` (keyspace `id`'s) and waits for the groups past it to publish.
    fn hold_slot(slot: &Arc<Slot>, id: u32) -> Result<Held> {
        let held = Self::enter_slot(slot, id)?;
        if let Some(s) = &held.first {
            s.state.pipe.drain();
        }
        Ok(held)
    }

    /// Locks `slot` for a commit group: the groups past it may still be inserting (a
    /// memtable switch waits for them: [`WritePath::rotate`]).
    fn enter_slot(slot: &Arc<Slot>, id: u32) -> Result<Held> {
        let env = slot.env.upgrade().ok_or(Error::Closed)?;
        Ok(Held::one(HeldSlot {
            id,
            env,
            state: slot.state.lock_arc(),
        }))
    }

    /// Keyspace `id`'s slot if no one holds it and no group past it is still inserting
    /// (`None` if busy or gone): never waits.
    pub(crate) fn try_hold(&self, id: u32) -> Option<Held> {
        let slot = self.slots.read().get(&id).cloned()?;
        let env = slot.env.upgrade()?;
        let state = slot.state.try_lock_arc()?;
        if state.pipe.in_flight.load(Ordering::Acquire) != 0 {
            return None;
        }
        Some(Held::one(HeldSlot { id, env, state }))
    }

    /// Every open keyspace's slot: no commit runs while held.
    pub(crate) fn hold_all(&self) -> Result<Held> {
        let ids: Vec<u32> = self.slots.read().keys().copied().collect();
        self.hold(&ids)
    }

    /// The directory of the small log.
    pub(crate) fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// Hands the pending small-log group to the OS; with `sync`, first makes every older
    /// unsynced log durable, then this one. Logs below the smallest replay start (their
    /// memtables are flushed, their files deleted) are forgotten without a sync.
    fn commit_small(&self, log: &mut LogState, sync: bool) -> Result<()> {
        {
            let min_needed = self.small_log_min();
            let mut sealed = self.sealed.lock();
            if !sealed.is_empty() {
                sealed.retain(|w| w.id() >= min_needed);
                if sync {
                    for older in sealed.iter_mut() {
                        older.sync()?;
                    }
                    sealed.clear();
                }
            }
        }
        log.writer.commit(sync)
    }

    /// Deletes the small-log files below the smallest replay start of any keyspace (they
    /// hold only flushed writes), unless a checkpoint is copying them. Takes no slot and not
    /// `log` (a writer stalled on the flush that calls this holds its slot).
    pub(crate) fn delete_obsolete_logs(&self) -> Result<()> {
        let _one_at_a_time = self.deleting.lock();
        if self.small_logs_held() {
            // The next flush after the checkpoint, or the next open, deletes them.
            return Ok(());
        }
        let min = self.small_log_min();
        for (id, path) in small::list(&self.io, &self.log_dir, 0)? {
            if id < min {
                self.io.fs().remove(&path)?;
            }
        }
        let mut started = self.started.lock();
        started.retain(|&id| id >= min);
        self.started_count.store(started.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Makes every sealed small-log file below `id` durable (without `log`). A flush of
    /// one keyspace calls it before its install when the database has several: a batch
    /// across keyspaces is one record, and once one keyspace's part is in its levels the
    /// other parts must not be lost with an unsynced log tail.
    pub(crate) fn sync_sealed_below(&self, id: u64) -> Result<()> {
        let mut sealed = self.sealed.lock();
        for w in sealed
            .iter_mut()
            .filter(|w| w.id() < id && w.has_unsynced())
        {
            w.sync()?;
        }
        Ok(())
    }

    /// Keeps small-log files from deletion while held (a checkpoint copying them).
    pub(crate) fn hold_small_logs(self: &Arc<Self>) -> SmallLogHold {
        // Under the deletion lock: no deletion is half done once the hold is taken.
        let _no_deletion = self.deleting.lock();
        self.small_log_holds.fetch_add(1, Ordering::SeqCst);
        SmallLogHold(Arc::clone(self))
    }

    /// Whether a checkpoint holds the small-log files.
    pub(crate) fn small_logs_held(&self) -> bool {
        self.small_log_holds.load(Ordering::SeqCst) > 0
    }

    /// Takes the `log` mutex (after any slot, in the lock order): no append to the small
    /// log runs while it is held (commits may still be inserting into memtables: hold
    /// their slots for that).
    pub(crate) fn lock(&self) -> MutexGuard<'_, LogState> {
        self.log.lock()
    }

    /// Seals keyspace `env`'s active memtable (unless empty) so a flush can take it;
    /// returns the last LSN committed before it.
    pub(crate) fn seal_memtable(&self, env: &dyn WriteEnv) -> Result<u64> {
        let mut held = self.hold(&[env.keyspace()])?;
        self.rotate(&mut held, env.keyspace())?;
        Ok(self.log.lock().next_lsn.saturating_sub(1))
    }

    /// The small-log file being appended to, and its first LSN.
    pub(crate) fn current_log(&self) -> LogStart {
        *self.current.lock()
    }

    /// Commits `batch` (atomically) in keyspace `env` (and the keyspaces it names) and
    /// returns once it is in the log and visible.
    pub(crate) fn write_batch(
        &self,
        env: &dyn WriteEnv,
        batch: WriteBatch,
        sync: bool,
    ) -> Result<()> {
        batch.validate()?;
        if batch.is_empty() {
            // Nothing to write, but refused as any write is after a failure or close.
            // Synced, it still keeps its promise that every write acknowledged before it
            // survives a power loss; never after a failure: a failed fsync is not retried
            // (the kernel may have dropped what it could not write and answer the next one
            // with success).
            accepts_writes(env)?;
            return if sync { self.make_durable(env) } else { Ok(()) };
        }
        // Decoded once, and only if the batch names keyspaces or holds merges (a plain
        // batch goes to its commit queue as the caller's bytes).
        let ops = if batch.names_keyspaces() || batch.has_merges() {
            Some(
                decode_ops(batch.payload(), batch.count())
                    .ok_or_else(|| Error::InvalidArgument("malformed write batch".into()))?,
            )
        } else {
            None
        };
        // The keyspaces the batch names.
        let mut named: Vec<u32> = ops
            .iter()
            .flatten()
            .filter_map(|op| match op {
                BatchOp::Keyspace(id) => Some(*id),
                _ => None,
            })
            .collect();
        named.sort_unstable();
        named.dedup();
        for &id in &named {
            let other = self.env(id).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "write batch names keyspace {id}, which is not open in this database"
                ))
            })?;
            other.check_poison()?;
        }
        if batch.has_merges() {
            // Refused here, alone: a bad operand must not fail the rest of a commit group.
            let mut space: Option<Arc<dyn WriteEnv>> = None;
            for o in ops.iter().flatten() {
                match *o {
                    BatchOp::Keyspace(id) => space = self.env(id),
                    BatchOp::Merge(k, d) => {
                        let opts = space.as_deref().map_or(env.opts(), |s| s.opts());
                        let op = crate::delta::require(opts.merge_operator.as_ref())?;
                        crate::delta::check_operand(op, k, d)?;
                    }
                    _ => {}
                }
            }
        }
        env.check_poison()?;
        let base = env.keyspace();
        if named.iter().all(|&id| id == base) {
            // One keyspace: through its commit queue (group commit), which decodes again.
            let batch_has_keyspaces = ops.is_some();
            drop(ops);
            let slot = self.slot(base)?;
            let req = Request::new(batch, sync, base);
            return slot.queue.submit_waiting(
                req,
                |group, lead| self.commit_group(&slot, base, group, lead),
                // Behind another group: a batch of one version finds its place in the
                // memtable meanwhile, so that its insert, once committed, only links.
                |req| {
                    if req.batch.count() != 1 || batch_has_keyspaces {
                        return;
                    }
                    let key = match decode_ops(req.batch.payload(), 1).as_deref() {
                        Some([BatchOp::Put(k, _) | BatchOp::Delete(k)]) => *k,
                        _ => return,
                    };
                    req.set_hint(env.versions().snapshot().0.mem.locate(key));
                },
            );
        }
        let mut ids = named;
        ids.push(base);
        ids.sort_unstable();
        ids.dedup();
        // Several: every slot held (ascending), one record of its own (its operations
        // decoded above: it names keyspaces).
        let ops =
            ops.ok_or_else(|| Error::Internal("a batch naming keyspaces not decoded".into()))?;
        let mut held = self.hold(&ids)?;
        for s in held.iter() {
            s.env.check_poison()?;
            if s.env.is_shutdown() {
                return Err(Error::Closed);
            }
        }
        self.make_room(&mut held)?;
        let record = CommitRecord {
            ops,
            payload: Some(batch.payload()),
            relocation: false,
            cache_large: false,
            keyspace: base,
            hint: None,
        };
        self.commit(&mut held, &[record], sync)?;
        let c = env.counters();
        Counters::add(&c.commit_groups, 1);
        if sync {
            Counters::add(&c.synced_commits, 1);
        }
        Ok(())
    }

    /// The group-commit leader's step for keyspace `id`: every queued batch, one record
    /// each. A batch that the keyspace refuses fails alone.
    fn commit_group(
        &self,
        slot: &Arc<Slot>,
        id: u32,
        group: &[&Request],
        lead: &Lead<'_>,
    ) -> Result<()> {
        let mut held = Self::enter_slot(slot, id)?;
        let env = Arc::clone(held.env(id).ok_or(Error::Closed)?);
        // Every batch of the group is this keyspace's: one check for all of them.
        accepts_writes(env.as_ref())?;
        let mut records: SmallVec<[CommitRecord<'_>; 1]> = SmallVec::with_capacity(group.len());
        let mut sync = false;
        for r in group {
            let Some(ops) = decode_ops(r.batch.payload(), r.batch.count()) else {
                r.fail(Error::InvalidArgument("malformed write batch".into()));
                continue;
            };
            sync |= r.sync;
            records.push(CommitRecord {
                ops,
                payload: Some(r.batch.payload()),
                relocation: false,
                cache_large: false,
                keyspace: r.keyspace,
                hint: r.hint(),
            });
        }
        if records.is_empty() {
            return Ok(());
        }
        self.make_room(&mut held)?;
        let logged = self.log_records(&held, &records, sync)?;
        let c = env.counters();
        Counters::add(&c.commit_groups, 1);
        if sync {
            Counters::add(&c.synced_commits, 1);
        }
        if logged.staged.is_empty() {
            return Ok(());
        }
        // In the log: the slot and the lead go to the next group, which writes the log
        // while this one inserts; the groups past the slot publish in LSN order.
        let (mem, in_flight, after) = {
            let Some(state) = held.first.as_mut().map(|s| &mut s.state) else {
                return Err(Error::Internal(format!("keyspace {id} not held")));
            };
            let after = std::mem::replace(&mut state.last_end, logged.last);
            let in_flight = InFlight::enter(&state.pipe, after, logged.last);
            (Arc::clone(&state.mem), in_flight, after)
        };
        drop(held);
        lead.release();
        // A panic from here on (a merge operator's, in an insert) leaves records in the
        // log that the memtable may lack: the keyspace refuses writes from then on.
        let _poison_on_panic = PoisonOnPanic(&env);
        let pipe = &in_flight.pipe;
        let merge_op = env.opts().merge_operator.as_deref();
        if logged.ordered {
            // Folds onto the newest older version, or joins the range list in LSN order:
            // every older write must be in first.
            pipe.wait_published(after);
        }
        Self::insert_staged(&logged.staged, |ks| (ks == id).then_some((&mem, merge_op)))
            .inspect_err(|e| env.set_poison(e))?;
        pipe.wait_published(after);
        Self::publish(&logged, |ks| (ks == id).then_some(&env));
        drop(in_flight);
        Ok(())
    }

    /// The one commit function, holding the slots of every keyspace the records name
    /// (`held`): the log step ([`WritePath::log_records`]), then the inserts into their
    /// memtables and each one's new visible LSN. (A commit group goes through the same
    /// steps, inserting once it gave its slot to the next group.)
    pub(crate) fn commit(
        &self,
        held: &mut Held,
        records: &[CommitRecord<'_>],
        sync: bool,
    ) -> Result<Committed> {
        let logged = self.log_records(held, records, sync)?;
        if logged.staged.is_empty() {
            return Ok(Committed::default());
        }
        let held = &*held;
        let found = |ks: u32| {
            held.mem(ks)
                .zip(held.env(ks).map(|e| e.opts().merge_operator.as_deref()))
        };
        if let Err(e) = Self::insert_staged(&logged.staged, found) {
            held.iter().for_each(|s| s.env.set_poison(&e));
            return Err(e);
        }
        Ok(Self::publish(&logged, |ks| held.env(ks)))
    }

    /// The memtable step of committed operations (in the log already): each into its
    /// keyspace's memtable (`mem_of`: with its merge operator). A keyspace without one
    /// is an internal error (the records are in the log, left out of its memtable: the
    /// caller poisons).
    fn insert_staged<'m>(
        staged: &[StagedOp<'_>],
        mem_of: impl Fn(
            u32,
        ) -> Option<(
            &'m Arc<Memtable>,
            Option<&'m dyn crate::delta::MergeOperator>,
        )>,
    ) -> Result<()> {
        let mut current: Option<(
            u32,
            &Arc<Memtable>,
            Option<&dyn crate::delta::MergeOperator>,
        )> = None;
        for &(ks, key, lsn, ref value, hint) in staged {
            if current.as_ref().is_none_or(|c| c.0 != ks) {
                let Some((mem, op)) = mem_of(ks) else {
                    return Err(Error::Internal(format!(
                        "keyspace {ks} not held after its commit"
                    )));
                };
                current = Some((ks, mem, op));
            }
            let Some((_, mem, op)) = current.as_ref() else {
                continue;
            };
            match *value {
                Staged::Version(MemValue::Delta(d)) => mem.insert_delta(key, lsn, d, *op),
                Staged::Version(v) => mem.insert_at(key, lsn, v, hint),
                Staged::Range(end) => mem.insert_range_tombstone(RangeTombstone {
                    start: key.to_vec(),
                    end: end.map(<[u8]>::to_vec),
                    lsn,
                }),
            }
        }
        Ok(())
    }

    /// Counts a commit's operations and makes them visible in each keyspace it wrote
    /// (`env_of`); returns the totals.
    fn publish<'e>(
        logged: &Logged<'_>,
        env_of: impl Fn(u32) -> Option<&'e Arc<dyn WriteEnv>>,
    ) -> Committed {
        let mut total = Committed::default();
        for (ks, d) in logged.done.iter() {
            let Some(env) = env_of(ks) else { continue };
            d.count_into(env.counters());
            env.versions().publish_visible(logged.last);
            total.add(d);
        }
        total
    }

    /// A commit's log step. Under the `log` mutex: assigns consecutive LSNs, appends
    /// large values to their keyspace's large log, then one small-log record per
    /// `records` entry (the commit point; with `sync`, every older unsynced log and every
    /// large log are made durable first). `held` must hold every keyspace the records
    /// name. A failed log write or sync poisons every keyspace: the logs may hold part of
    /// the group. Returns what goes into the memtables.
    fn log_records<'r>(
        &self,
        held: &Held,
        records: &[CommitRecord<'r>],
        sync: bool,
    ) -> Result<Logged<'r>> {
        // Everything that can refuse the records is checked before anything is appended:
        // an error after a large value reached the log would leave half a group behind.
        for rec in records {
            if u32::try_from(rec.ops.len()).is_err() {
                return Err(Error::InvalidArgument(
                    "too many operations in a batch".into(),
                ));
            }
            if rec.ops.iter().any(|op| matches!(op, BatchOp::PutLarge(..))) {
                return Err(Error::Internal(
                    "a log pointer handed to the commit path (pointers are made there)".into(),
                ));
            }
            let named = rec.ops.iter().filter_map(|op| match op {
                BatchOp::Keyspace(id) => Some(*id),
                _ => None,
            });
            for id in std::iter::once(rec.keyspace).chain(named) {
                let env = held.env(id).ok_or_else(|| {
                    Error::Internal(format!(
                        "a commit names keyspace {id} without holding its slot"
                    ))
                })?;
                env.check_poison()?;
            }
        }
        // Checked above: every keyspace the records name is held.
        let env_of = |id: u32| -> Result<&Arc<dyn WriteEnv>> {
            held.env(id)
                .ok_or_else(|| Error::Internal(format!("keyspace {id} is not held")))
        };
        let goes_large = |opts: &Options, relocation: bool, op: &BatchOp<'_>| match op {
            BatchOp::Put(k, v) => relocation || opts.classify(k.len(), v.len()) == Category::Large,
            _ => false,
        };
        let mut log = self.log.lock();
        // A keyspace dropped since its slot was taken (`unregister` needs only `log`):
        // nothing was appended, nothing is in doubt.
        if let Some(gone) = held.iter().find(|s| !log.spaces.contains_key(&s.id)) {
            log::debug!("a commit into keyspace {} met its drop", gone.id);
            return Err(Error::Closed);
        }
        let mut lsn = log.next_lsn;
        let mut done = PerKeyspace::default();
        let mut large_written = false;
        let mut staged: SmallVec<[StagedOp<'r>; 2]> = SmallVec::new();
        let mut ordered = false;
        let mut encoded: SmallVec<[Encoded<'_>; 1]> = SmallVec::with_capacity(records.len());
        for rec in records {
            let first = lsn;
            let mut ks = rec.keyspace;
            let mut env = env_of(ks)?;
            let mut reencode = rec.payload.is_none();
            let mut cur = env;
            for op in &rec.ops {
                if reencode {
                    break;
                }
                if let BatchOp::Keyspace(id) = op {
                    cur = env_of(*id)?;
                }
                reencode = goes_large(cur.opts(), rec.relocation, op);
            }
            // The record names its base keyspace (other than the default) with a switch in
            // front, unless its operations start with one of their own (a batch built
            // with `put_in` and written through a keyspace handle): two switches in a row
            // would not decode.
            let needs_switch = ks != 0 && !matches!(rec.ops.first(), Some(BatchOp::Keyspace(_)));
            let mut payload: Option<Vec<u8>> = reencode.then(|| {
                let mut p = Vec::with_capacity(64 * rec.ops.len() + 5);
                if needs_switch {
                    batch::encode_keyspace(&mut p, ks);
                }
                p
            });
            let mut here = Committed::default();
            for op in &rec.ops {
                let (key, value) = match *op {
                    BatchOp::Keyspace(id) => {
                        if let Some(p) = payload.as_mut() {
                            batch::encode_keyspace(p, id);
                        }
                        done.add(ks, &here);
                        here = Committed::default();
                        ks = id;
                        env = env_of(ks)?;
                        continue;
                    }
                    BatchOp::Put(k, v) if goes_large(env.opts(), rec.relocation, op) => {
                        let cache = if rec.cache_large {
                            LargeFill::Always
                        } else if rec.relocation {
                            LargeFill::Never
                        } else {
                            LargeFill::IfRead
                        };
                        let ptr = match Self::append_large(env.as_ref(), &mut log, k, v, lsn, cache)
                        {
                            Ok(p) => p,
                            Err(e) => {
                                log.poison_all(&e);
                                return Err(e);
                            }
                        };
                        large_written = true;
                        here.large_values += 1;
                        here.large_bytes += u64::from(ptr.len);
                        if let Some(p) = payload.as_mut() {
                            encode_put_large(p, k, ptr);
                        }
                        (k, Staged::Version(MemValue::Large(ptr)))
                    }
                    BatchOp::Put(k, v) => {
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, *op);
                        }
                        (k, Staged::Version(MemValue::Value(v)))
                    }
                    BatchOp::Delete(k) => {
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, *op);
                        }
                        (k, Staged::Version(MemValue::Tombstone))
                    }
                    BatchOp::Merge(k, d) => {
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, *op);
                        }
                        ordered = true;
                        (k, Staged::Version(MemValue::Delta(d)))
                    }
                    BatchOp::DeleteRange(start, end) => {
                        if let Some(p) = payload.as_mut() {
                            encode_op(p, *op);
                        }
                        ordered = true;
                        (start, Staged::Range(end))
                    }
                    // Refused above, before any append.
                    BatchOp::PutLarge(..) => continue,
                };
                match op {
                    BatchOp::Delete(k) => {
                        here.deletes += 1;
                        here.bytes += k.len() as u64;
                    }
                    BatchOp::Put(k, v) => {
                        here.puts += 1;
                        here.bytes += (k.len() + v.len()) as u64;
                    }
                    BatchOp::Merge(k, d) => {
                        here.merges += 1;
                        here.bytes += (k.len() + d.len()) as u64;
                    }
                    BatchOp::DeleteRange(start, end) => {
                        here.range_deletes += 1;
                        here.bytes += (start.len() + end.map_or(0, <[u8]>::len)) as u64;
                    }
                    BatchOp::PutLarge(..) | BatchOp::Keyspace(_) => {}
                }
                let hint = rec.hint.filter(|_| rec.ops.len() == 1);
                staged.push((ks, key, lsn, value, hint));
                lsn += 1;
            }
            done.add(ks, &here);
            let count = u32::try_from(lsn - first).unwrap_or(u32::MAX);
            let (prefix, body) = match (payload, rec.payload) {
                (Some(p), _) => (None, Cow::Owned(p)),
                (None, Some(p)) => (needs_switch.then_some(rec.keyspace), Cow::Borrowed(p)),
                (None, None) => (None, Cow::Borrowed(&[][..])),
            };
            encoded.push(Encoded {
                first_lsn: first,
                count,
                switch: prefix,
                body,
            });
        }
        if staged.is_empty() {
            return Ok(Logged {
                staged,
                done,
                last: 0,
                ordered,
            });
        }
        // The large logs first: the small-log record is the commit point. A synced group
        // also syncs the large values of earlier unsynced groups: its fdatasync of the
        // small log makes their records durable, so their values must be too.
        let mut result = Ok(());
        if sync {
            result = log.sync_large();
        } else if large_written {
            for space in log.spaces.values_mut() {
                if let Some(w) = space.large.as_mut().filter(|w| w.has_unsynced()) {
                    if let Err(e) = w.commit(false) {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        if result.is_ok() {
            for rec in &encoded {
                // A keyspace switch (op 6, then its id) before the caller's bytes.
                let mut switch = [batch::OP_KEYSPACE, 0, 0, 0, 0];
                let prefix: &[u8] = match rec.switch {
                    Some(id) => {
                        switch[1..].copy_from_slice(&id.to_le_bytes());
                        &switch
                    }
                    None => &[],
                };
                log.writer
                    .add_prefixed(rec.first_lsn, rec.count, prefix, &rec.body);
            }
            result = self.commit_small(&mut log, sync);
        }
        if let Err(e) = result {
            log.poison_all(&e);
            return Err(e);
        }
        log.next_lsn = lsn;
        Ok(Logged {
            staged,
            done,
            last: lsn - 1,
            ordered,
        })
    }

    /// Appends a large value to keyspace `env`'s large log, starting a new segment when
    /// the current one is full (the full one is synced first, keeping later segments from
    /// outliving it). With `cache`, the record also goes to the block cache.
    fn append_large(
        env: &dyn WriteEnv,
        log: &mut LogState,
        key: &[u8],
        value: &[u8],
        lsn: u64,
        fill: LargeFill,
    ) -> Result<LogPtr> {
        let space = log.spaces.get_mut(&env.keyspace()).ok_or(Error::Closed)?;
        let cache = match fill {
            LargeFill::Always => true,
            LargeFill::Never => false,
            LargeFill::IfRead => {
                env.opts().prepopulate_cache
                    && env.cache().read_lately(crate::format::key_hash(key))
            }
        };
        let full = space
            .large
            .as_ref()
            .is_none_or(|w| w.len() >= env.opts().large_segment_size as u64);
        if full {
            if let Some(old) = space.large.as_mut() {
                old.seal()?;
            }
            space.large = Some(new_large_segment(env)?);
        }
        match space.large.as_mut() {
            Some(w) if cache => w.append_cached(key, value, lsn, env.cache()),
            Some(w) => w.append(key, value, lsn),
            None => Err(Error::Closed),
        }
    }

    /// Makes every write committed so far durable: the large logs' unsynced tails, then
    /// every small-log file (older ones first). GC calls it before an install that frees
    /// something on the strength of those writes (a record is dead because a newer write
    /// shadows it; if that write could still be lost, so must the record not be).
    /// Refused (`Error::Poisoned`) once `env`'s keyspace has failed: nothing is synced
    /// again after a failed sync.
    pub(crate) fn make_durable(&self, env: &dyn WriteEnv) -> Result<()> {
        let mut log = self.log.lock();
        // Never after a failure: a failed fsync is not retried (the kernel may have
        // dropped the pages it could not write and answer the next sync with success, so
        // GC would free segments on the strength of writes that are gone). A failed log
        // sync poisons every keyspace under this same lock (`poison_all`), so the check
        // and the syncs below see the same state.
        env.check_poison()?;
        let small_unsynced = log.writer.has_unsynced() || !self.sealed.lock().is_empty();
        let result = log.sync_large().and_then(|()| {
            if small_unsynced {
                self.commit_small(&mut log, true)
            } else {
                Ok(())
            }
        });
        if let Err(e) = &result {
            log.poison_all(e);
        }
        result
    }

    /// Switches every full memtable of the held keyspaces to immutable, first waiting
    /// while too many of its keyspace wait for flush; and when the small log grew past
    /// `MAX_SMALL_LOG_FILES` files, the memtable of each keyspace that holds the oldest of
    /// them back (one not held is switched only if its slot is free).
    pub(crate) fn make_room(&self, held: &mut Held) -> Result<()> {
        let full: Vec<u32> = held
            .iter()
            .filter(|s| {
                // A keyspace being dropped or closed, or refusing writes, takes no more
                // room (its writes fail on their own).
                s.state.mem.size() >= s.env.opts().memtable_size
                    && !s.env.is_shutdown()
                    && s.env.check_poison().is_ok()
            })
            .map(|s| s.id)
            .collect();
        for id in full {
            let Some(env) = held.env(id).cloned() else {
                continue;
            };
            let mut stalled = false;
            while env.versions().imms_waiting() >= env.opts().max_immutable_memtables {
                env.check_poison()?;
                if !stalled {
                    stalled = true;
                    Counters::add(&env.counters().write_stalls, 1);
                    log::debug!(
                        "{}: writes wait for a flush ({} memtables waiting)",
                        env.dir().display(),
                        env.versions().imms_waiting()
                    );
                }
                env.wait_for_background()?;
            }
            self.rotate(held, id)?;
        }
        if self.started_count.load(Ordering::Relaxed) > MAX_SMALL_LOG_FILES {
            let min = self.small_log_min();
            let holding: Vec<u32> = self
                .log_mins
                .lock()
                .iter()
                .filter(|&(_, &m)| m <= min)
                .map(|(&id, _)| id)
                .collect();
            for id in holding {
                let mut other;
                let target = if held.env(id).is_some() {
                    &mut *held
                } else {
                    match self.try_hold(id) {
                        Some(h) => {
                            other = h;
                            &mut other
                        }
                        None => continue,
                    }
                };
                let (Some(env), Some(mem)) = (target.env(id).cloned(), target.mem(id)) else {
                    continue;
                };
                // Its flush is what moves the start on; one pending is enough.
                if !mem.is_empty()
                    && env.versions().imms_waiting() == 0
                    && !env.is_shutdown()
                    && env.check_poison().is_ok()
                {
                    log::debug!(
                        "{}: switching a memtable that holds {} small-log files back",
                        env.dir().display(),
                        self.started_count.load(Ordering::Relaxed)
                    );
                    self.rotate(target, id)?;
                }
            }
        }
        Ok(())
    }

    /// Seals keyspace `id`'s active memtable (its slot is in `held`) and starts a new
    /// small-log file for what comes after it.
    pub(crate) fn rotate(&self, held: &mut Held, id: u32) -> Result<()> {
        let Some(slot) = held.iter_mut().find(|s| s.id == id) else {
            return Err(Error::Internal(format!(
                "a memtable switch of keyspace {id} without its slot"
            )));
        };
        // Every group past the slot has inserted (so the memtable sealed below holds every
        // write committed into it).
        slot.state.pipe.drain();
        if slot.state.mem.is_empty() {
            return Ok(());
        }
        let env = Arc::clone(&slot.env);
        let mut log = self.log.lock();
        let root = log.space(0)?.env.upgrade().ok_or(Error::Closed)?;
        // The large logs are made durable (they are the only copy of their values, so
        // their bytes reach the device anyway): every large record a sealed log points to
        // survives a power loss. The small log is not synced here: it is deleted once the
        // memtables it holds are flushed, often before the OS writes it back, so it then
        // costs no device writes (as RocksDB's write-ahead log). It stays in `sealed`
        // until then, so that a synced commit makes it durable first, and recovery treats
        // a torn tail in any log as the end of the durable prefix (FORMAT.md, "Small log").
        let file_id = root.versions().alloc_file_id();
        // The log left behind is cut to its records first (a log appended to through a
        // memory map gives back its reserved tail), so that no tail of zeros ever sits
        // before a newer log.
        let next = log
            .sync_large()
            .and_then(|()| log.writer.finish())
            .and_then(|()| SmallLogWriter::create(&self.io, &self.log_dir, file_id));
        let writer = match next {
            Ok(w) => w,
            Err(e) => {
                log.poison_all(&e);
                return Err(e);
            }
        };
        let sealed_log = std::mem::replace(&mut log.writer, writer);
        self.sealed.lock().push(sealed_log);
        {
            let mut started = self.started.lock();
            started.insert(file_id);
            self.started_count.store(started.len(), Ordering::Relaxed);
        }
        *self.current.lock() = LogStart {
            id: file_id,
            first_lsn: log.next_lsn,
        };
        // The slot is held: every write of this keyspace with an LSN up to here is in
        // this memtable.
        let last = log.next_lsn.saturating_sub(1);
        drop(log);
        slot.state.mem.next_log_id.store(file_id, Ordering::SeqCst);
        slot.state.mem.sealed_lsn.store(last, Ordering::SeqCst);
        let fresh = Memtable::with_budget(env.opts().memtable_size);
        let sealed = std::mem::replace(&mut slot.state.mem, Arc::new(fresh));
        env.versions()
            .publish_switch(sealed, Arc::clone(&slot.state.mem));
        env.wake_background();
        Ok(())
    }
}

/// Keeps small-log files from deletion while it lives (see [`WritePath::hold_small_logs`]).
pub(crate) struct SmallLogHold(Arc<WritePath>);

impl Drop for SmallLogHold {
    fn drop(&mut self) {
        self.0.small_log_holds.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Starts a new large-log segment: registered (so every manifest from now on names it),
/// created, then made readable.
/// Whether keyspace `env` takes writes now: `Error::Closed` once it is shutting down, the
/// failure that poisoned it after one.
fn accepts_writes(env: &dyn WriteEnv) -> Result<()> {
    if env.is_shutdown() {
        return Err(Error::Closed);
    }
    env.check_poison()
}

fn new_large_segment(env: &dyn WriteEnv) -> Result<SegmentWriter> {
    let versions = env.versions();
    let id = versions.register_segment(SegmentKind::Large, 0);
    let mut writer = SegmentWriter::create(env.io(), env.dir(), SegmentKind::Large, id)?;
    let reader = match SegmentFile::open(env.io(), env.dir(), SegmentKind::Large, id) {
        Ok(r) => Arc::new(r.with_cache(Arc::clone(env.cache()))),
        Err(e) => {
            // Not used: cut to its header, so that it reads cleanly once it is not the
            // newest segment.
            let _ = writer.finish();
            return Err(e);
        }
    };
    versions.publish_segment(id, reader);
    Ok(writer)
}

/// Recovery's memtable step for one operation of a small-log record already in the log:
/// the same insertion a commit does after its log write, with pointers as logged.
pub(crate) fn replay_op(
    mem: &Memtable,
    lsn: u64,
    op: BatchOp<'_>,
    operator: Option<&dyn crate::delta::MergeOperator>,
) {
    match op {
        BatchOp::Put(k, v) => mem.insert(k, lsn, MemValue::Value(v)),
        BatchOp::Delete(k) => mem.insert(k, lsn, MemValue::Tombstone),
        BatchOp::PutLarge(k, p) => mem.insert(k, lsn, MemValue::Large(p)),
        BatchOp::Merge(k, d) => mem.insert_delta(k, lsn, d, operator),
        BatchOp::DeleteRange(start, end) => mem.insert_range_tombstone(RangeTombstone {
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
            lsn,
        }),
        BatchOp::Keyspace(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{FailMode, SimFs};
    use crate::log::small;
    use crate::version_set::Recovered;
    use std::path::PathBuf;

    const DIR: &str = "/db";

    /// The engine as the write path sees it, without the engine.
    struct TestEnv {
        opts: Options,
        io: Io,
        dir: PathBuf,
        versions: VersionSet,
        counters: Counters,
        cache: Arc<BlockCache>,
        poison: Mutex<Option<String>>,
    }

    impl WriteEnv for TestEnv {
        fn keyspace(&self) -> u32 {
            0
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
        fn cache(&self) -> &Arc<BlockCache> {
            &self.cache
        }
        fn counters(&self) -> &Counters {
            &self.counters
        }
        fn check_poison(&self) -> Result<()> {
            match &*self.poison.lock() {
                Some(why) => Err(Error::Poisoned(why.clone())),
                None => Ok(()),
            }
        }
        fn set_poison(&self, why: &Error) {
            self.poison.lock().get_or_insert_with(|| why.to_string());
        }
        fn is_shutdown(&self) -> bool {
            false
        }
        fn wait_for_background(&self) -> Result<()> {
            Ok(())
        }
        fn wake_background(&self) {}
    }

    fn setup(fs: &SimFs) -> (Arc<TestEnv>, WritePath) {
        let io = Io::new(Arc::new(fs.clone()), false);
        let dir = PathBuf::from(DIR);
        io.fs().create_dir_all(&dir).unwrap();
        let mem = Arc::new(Memtable::new());
        let versions = VersionSet::new(
            io.clone(),
            dir.clone(),
            Recovered::empty(Arc::clone(&mem), 1),
        );
        let writer = SmallLogWriter::create(&io, &dir, versions.alloc_file_id()).unwrap();
        let env = Arc::new(TestEnv {
            opts: Options::default(),
            io: io.clone(),
            dir: dir.clone(),
            versions,
            counters: Counters::default(),
            cache: Arc::new(BlockCache::new(1 << 20)),
            poison: Mutex::new(None),
        });
        let writes = WritePath::new(io, dir, writer, 1);
        let shared: Arc<dyn WriteEnv> = Arc::clone(&env) as Arc<dyn WriteEnv>;
        writes.register(&mut writes.lock(), &shared, mem, 0);
        (env, writes)
    }

    /// One logged record: its first LSN and its ops as (key, kind).
    type Logged = (u64, Vec<(Vec<u8>, &'static str)>);

    /// Every record of the small log, decoded.
    fn logged(env: &TestEnv) -> Vec<Logged> {
        let files = small::list(&env.io, &env.dir, 0).unwrap();
        let mut out = Vec::new();
        for (_, path) in files {
            for rec in small::replay_file(&env.io, &path, true).unwrap().records {
                let ops = decode_ops(&rec.payload, rec.count).unwrap();
                let ops = ops
                    .into_iter()
                    .map(|op| match op {
                        BatchOp::Put(k, _) => (k.to_vec(), "put"),
                        BatchOp::Delete(k) => (k.to_vec(), "delete"),
                        BatchOp::PutLarge(k, _) => (k.to_vec(), "put-large"),
                        BatchOp::Merge(k, _) => (k.to_vec(), "merge"),
                        BatchOp::DeleteRange(k, _) => (k.to_vec(), "delete-range"),
                        BatchOp::Keyspace(_) => (Vec::new(), "keyspace"),
                    })
                    .collect();
                out.push((rec.first_lsn, ops));
            }
        }
        out
    }

    #[test]
    fn one_commit_assigns_lsns_logs_each_record_and_inserts() {
        let fs = SimFs::new();
        let (env, writes) = setup(&fs);
        let big = vec![7u8; 3000];
        let records = [
            user_record(smallvec::smallvec![
                BatchOp::Put(b"a", b"small"),
                BatchOp::Put(b"b", &big)
            ]),
            user_record(smallvec::smallvec![BatchOp::Delete(b"a")]),
        ];
        let mut held = writes.hold(&[0]).unwrap();
        let done = writes.commit(&mut held, &records, false).unwrap();
        assert_eq!((done.puts, done.deletes, done.large_values), (2, 1, 1));
        assert_eq!(writes.lock().next_lsn, 4);
        let mem = Arc::clone(held.mem(0).unwrap());
        drop(held);
        assert_eq!(env.versions.snapshot().1, 3, "visible LSN");
        assert_eq!(
            logged(&env),
            vec![
                (
                    1,
                    vec![(b"a".to_vec(), "put"), (b"b".to_vec(), "put-large")]
                ),
                (3, vec![(b"a".to_vec(), "delete")]),
            ]
        );
        assert_eq!(mem.get(b"a", 3).map(|f| f.0), Some(3));
        assert_eq!(mem.get(b"a", 2).map(|f| f.0), Some(1));
        assert!(matches!(
            mem.get(b"b", 3).map(|f| f.1),
            Some(crate::level::LevelValue::Large(_))
        ));
    }

    #[test]
    fn a_relocation_sends_every_value_to_the_large_log() {
        let fs = SimFs::new();
        let (env, writes) = setup(&fs);
        let record = CommitRecord {
            ops: smallvec::smallvec![BatchOp::Put(b"k", b"tiny")],
            payload: None,
            relocation: true,
            cache_large: false,
            keyspace: 0,
            hint: None,
        };
        let mut held = writes.hold(&[0]).unwrap();
        let done = writes.commit(&mut held, &[record], true).unwrap();
        drop(held);
        assert_eq!(done.large_values, 1);
        assert_eq!(logged(&env), vec![(1, vec![(b"k".to_vec(), "put-large")])]);
        // Synced: the record survives a power loss.
        let img = fs.crash_image(crate::io::CrashKind::DropUnsynced);
        let io = Io::new(Arc::new(img), false);
        let (_, path) = small::list(&io, Path::new(DIR), 0).unwrap().pop().unwrap();
        assert_eq!(
            small::replay_file(&io, &path, true).unwrap().records.len(),
            1
        );
    }

    /// A user's record of `ops` into keyspace 0 (no payload, no relocation, no cache).
    fn user_record(ops: batch::Ops<'_>) -> CommitRecord<'_> {
        CommitRecord {
            ops,
            payload: None,
            relocation: false,
            cache_large: false,
            keyspace: 0,
            hint: None,
        }
    }

    /// Records of the small log that a power loss now would leave.
    fn durable_records(fs: &SimFs) -> usize {
        let img = fs.crash_image(crate::io::CrashKind::DropUnsynced);
        let io = Io::new(Arc::new(img), false);
        small::list(&io, Path::new(DIR), 0)
            .unwrap()
            .iter()
            .map(|(_, path)| small::replay_file(&io, path, true).unwrap().records.len())
            .sum()
    }

    #[test]
    fn make_durable_never_syncs_after_a_failure() {
        for failed in [false, true] {
            let fs = SimFs::new();
            let (env, writes) = setup(&fs);
            let record = user_record(smallvec::smallvec![BatchOp::Put(b"k", b"v")]);
            let mut held = writes.hold(&[0]).unwrap();
            writes.commit(&mut held, &[record], false).unwrap();
            drop(held);
            assert_eq!(durable_records(&fs), 0, "an unsynced commit is not durable");
            if failed {
                // A sync that failed may have lost pages the kernel then reports clean:
                // the next sync must not be trusted, so it is not made.
                env.set_poison(&Error::Poisoned("an earlier fsync failed".into()));
                let refused = writes.make_durable(env.as_ref());
                assert!(matches!(refused, Err(Error::Poisoned(_))), "{refused:?}");
                assert_eq!(durable_records(&fs), 0, "synced after a failure");
            } else {
                writes.make_durable(env.as_ref()).unwrap();
                assert_eq!(durable_records(&fs), 1);
            }
        }
    }

    #[test]
    fn a_record_holding_a_log_pointer_is_refused_before_anything_is_appended() {
        let fs = SimFs::new();
        let (env, writes) = setup(&fs);
        let big = vec![1u8; 3000];
        let ptr = crate::log::ptr::LogPtr {
            segment: 1,
            offset: 16,
            len: 40,
        };
        // A large put first: refused as a whole, its value must not reach the large log.
        let record = user_record(smallvec::smallvec![
            BatchOp::Put(b"a", &big),
            BatchOp::PutLarge(b"b", ptr)
        ]);
        let mut held = writes.hold(&[0]).unwrap();
        let r = writes.commit(&mut held, &[record], false);
        assert!(matches!(r, Err(Error::Internal(_))), "{r:?}");
        assert_eq!(writes.lock().next_lsn, 1);
        assert!(held.mem(0).unwrap().is_empty());
        assert!(
            writes.lock().space(0).unwrap().large.is_none(),
            "a large-log segment was started"
        );
        drop(held);
        assert!(logged(&env).is_empty());
        assert!(
            env.check_poison().is_ok(),
            "nothing was written: no need to poison"
        );
    }

    #[test]
    fn a_failed_log_write_poisons_and_applies_nothing() {
        let fs = SimFs::new();
        let (env, writes) = setup(&fs);
        fs.fail_at(fs.op_count(), FailMode::FromThenOn);
        let record = user_record(smallvec::smallvec![BatchOp::Put(b"k", b"v")]);
        let mut held = writes.hold(&[0]).unwrap();
        assert!(writes.commit(&mut held, &[record], true).is_err());
        assert_eq!(writes.lock().next_lsn, 1, "LSNs handed out");
        assert!(
            held.mem(0).unwrap().is_empty(),
            "inserted into the memtable"
        );
        drop(held);
        assert_eq!(env.versions.snapshot().1, 0, "made visible");
        assert!(matches!(env.check_poison(), Err(Error::Poisoned(_))));
    }
}
