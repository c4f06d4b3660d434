//! The memory reads go through: the block cache (verified level nodes, the log records
//! gets and scans read, the 4 KiB blocks of sorted transient segments, whose records are
//! checked as they are taken, and what flushes and merges put in as they write it
//! (`Options::prepopulate_cache`), bounded by one byte budget) and the budget of pinned indexes (PinK's
//! level pinning; the fences themselves live with the level files that pin them).
//!
//! Owns: a concurrent S3-FIFO cache (`quick_cache`) keyed by (keyspace, file id, offset)
//! and weighed by bytes (each entry's plus what holding it costs, [`ENTRY_OVERHEAD`]), its hit and miss counts, the pinned bytes' budget, and the rule
//! for reading around a missing leaf while the cache fills (`Options::warm_read_bytes`:
//! [`BlockCache::warm_read_bytes`]); one per
//! database, each keyspace reading through a view of it (`BlockCache::view`) that names its
//! keyspace in every key. Never: the only copy of anything (every entry can be re-read from
//! its file), and never lets an unverified node or record be used (an entry is either
//! read and checked, or the very bytes this engine wrote at that offset, or a sorted
//! segment's block as read, whose reader checks each record it takes from it). File ids (level files and log
//! segments of a keyspace share one counter) are never reused within a keyspace, so
//! entries of a deleted file can never be confused with a newer file's; they simply age out.

pub(crate) mod hints;
pub(crate) mod recent;

pub(crate) use hints::HintedEntry;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A verified node's or record's bytes (a reference-counted handle: readers keep views of
/// it, e.g. a value inside a record, without copying).
pub(crate) type BlockBytes = bytes::Bytes;

#[derive(Clone, Copy)]
struct ByteWeighter;

/// (keyspace, file id, offset).
type Key = (u32, u64, u64);

/// What one entry costs beyond its bytes, charged to the budget with them so that the
/// budget bounds the memory the cache holds, not only its payload. Measured (a million
/// entries of 100 to 8192 bytes, each read once, anonymous memory against the bytes
/// held): 124 to 168 bytes per entry, from the cache's slot (key, handle, state), its
/// hash-table slot, the handle's shared header (allocated at its first clone) and the
/// allocator's header and rounding. Without it, a cache of 150-byte medium records held
/// 1.85 times its budget.
pub(crate) const ENTRY_OVERHEAD: u64 = 144;

impl Weighter<Key, BlockBytes> for ByteWeighter {
    fn weight(&self, _key: &Key, val: &BlockBytes) -> u64 {
        val.len() as u64 + ENTRY_OVERHEAD
    }
}

/// How far reads around a missing leaf fill a cold cache: the share of its budget the
/// levels' nodes would fill if the cache held a like share of every level file (budget
/// over the open level files' node bytes, [`BlockCache::level_bytes`]), at least
/// [`WARM_FILL_LEAST`] and at most [`WARM_FILL_MOST`] (sixteenths). The neighbours a group
/// read brings are leaves of the run next to the one a read wanted, which later reads
/// want only as often as any leaf: when the cache can hold most of the levels, nearly
/// every neighbour is read from the cache before it is evicted and spares a device read
/// of its own; when the levels are several times the cache, most are evicted unread and
/// cost their bytes for nothing. Measured (a 2M-op run in a fresh process, 2 GiB cache,
/// `docs/PERFORMANCE.md`): at 40M MD pairs (levels 1.9 times the cache; twenty-sixth
/// round) groups until the cache was 15/16 full read 2.25 KiB per get at 0.407 device
/// reads, until half full 1.90 KiB at 0.420; at 40M SD pairs (levels 1.14 times the
/// cache; thirty-sixth round) 15/16 against a half made 14-16% fewer device reads per
/// get (Run C 0.255 against 0.295) for 15-22% more bytes, still under three quarters of
/// RocksDB's.
pub(crate) const WARM_FILL_LEAST: u64 = 8;
/// See [`WARM_FILL_LEAST`]: a sixteenth is left to the misses that read a group at once
/// past the check.
pub(crate) const WARM_FILL_MOST: u64 = 15;

/// The bytes reads around a missing leaf may fill a cache of `capacity` bytes up to, over
/// levels whose open files hold `levels` bytes of nodes ([`WARM_FILL_LEAST`]).
fn warm_fill_room(capacity: u64, levels: u64) -> u64 {
    let least = capacity / 16 * WARM_FILL_LEAST;
    let most = capacity / 16 * WARM_FILL_MOST;
    if levels == 0 {
        return most;
    }
    let share = u128::from(capacity) * u128::from(capacity) / u128::from(levels);
    u64::try_from(share).unwrap_or(u64::MAX).clamp(least, most)
}

/// The memory every pinned index of one database is charged to.
#[derive(Debug)]
pub(crate) struct PinBudget {
    limit: u64,
    used: AtomicU64,
}

impl PinBudget {
    /// A budget of `limit` bytes (`0` turns pinning off).
    pub(crate) fn new(limit: u64) -> Self {
        PinBudget {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// Whether anything more may be pinned (checked before reading a file's index).
    pub(crate) fn has_room(&self) -> bool {
        self.used.load(Ordering::Relaxed) < self.limit
    }

    /// Charges `bytes` if they fit.
    pub(crate) fn try_reserve(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.limit)
            })
            .is_ok()
    }

    pub(crate) fn release(&self, bytes: u64) {
        // Every release matches an earlier reservation, so this never underflows; the
        // saturating update keeps a bug from wrapping the counter.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Bytes pinned now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

/// What every view of one database's cache shares.
struct Shared {
    cache: Option<Cache<Key, BlockBytes, ByteWeighter>>,
    pins: Arc<PinBudget>,
    /// The budget pinned large pointer tables are charged to (apart, so that a table
    /// never takes the room of another file's fences).
    table_pins: Arc<PinBudget>,
    /// `Options::warm_read_bytes` (0: off).
    warm_read_bytes: u64,
    /// The byte budget, kept here: `Cache::capacity` and `Cache::weight` visit every
    /// shard, which a check on every miss should not.
    capacity: u64,
    /// Set the first time the room check fails: from then on a miss reads its leaf
    /// alone without asking the cache's weight again (reads around a leaf are for a
    /// cold cache).
    warmed: std::sync::atomic::AtomicBool,
    /// Node bytes of the level files open now, of every keyspace
    /// ([`BlockCache::add_level_bytes`]): what reads around a leaf weigh the budget
    /// against ([`warm_fill_room`]).
    level_bytes: AtomicU64,
    /// Set while the entries of the last close are read back (the reload at open): misses
    /// then read their leaf alone, so that the room is left to the entries known to
    /// have been used rather than to a leaf's neighbours.
    reloading: std::sync::atomic::AtomicBool,
}

/// Byte-bounded cache of level nodes and log records shared by every file of one database
/// (every keyspace), with the budget their pinned indexes are charged to; this handle is
/// one keyspace's view (its own hit and miss counts).
pub(crate) struct BlockCache {
    shared: Arc<Shared>,
    keyspace: u32,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Reads that brought a missing leaf's or record's neighbours in with it, and those
    /// neighbours.
    warm_reads: AtomicU64,
    warm_neighbours: AtomicU64,
    /// Gets that read a large record a level file's pointer table named, and took it (the
    /// record held the key) or not.
    large_guesses: AtomicU64,
    large_guesses_missed: AtomicU64,
    /// Entries read back from the last close's hint file, and the bytes they hold.
    reloaded: AtomicU64,
    reloaded_bytes: AtomicU64,
    /// Hint files this view found unusable.
    hints_rejected: AtomicU64,
    /// The keys this keyspace's gets read lately.
    recent_reads: recent::RecentReads,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("bytes", &self.used_bytes())
            .finish()
    }
}

impl BlockCache {
    /// A cache holding at most `budget` bytes (`0` disables it); nothing pinned.
    #[cfg(test)]
    pub(crate) fn new(budget: usize) -> Self {
        Self::with_pinning(budget, 0)
    }

    /// A cache of `budget` bytes, and `pinned` bytes more for pinned indexes and as many
    /// for large pointer tables; no reads around a missing leaf.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn with_pinning(budget: usize, pinned: u64) -> Self {
        Self::configured(budget, pinned, pinned, 0)
    }

    /// A cache of `budget` bytes, `pinned` bytes more for pinned indexes, `tables` bytes
    /// more for pinned large pointer tables, and a leaf read that misses reading up to
    /// `warm_read_bytes` around it while the cache fills.
    pub(crate) fn configured(
        budget: usize,
        pinned: u64,
        tables: u64,
        warm_read_bytes: u64,
    ) -> Self {
        let cache = (budget > 0)
            .then(|| Cache::with_weighter((budget / 8192).max(16), budget as u64, ByteWeighter));
        let capacity = cache.as_ref().map_or(0, Cache::capacity);
        BlockCache {
            shared: Arc::new(Shared {
                cache,
                pins: Arc::new(PinBudget::new(pinned)),
                table_pins: Arc::new(PinBudget::new(tables)),
                warm_read_bytes,
                capacity,
                warmed: std::sync::atomic::AtomicBool::new(false),
                level_bytes: AtomicU64::new(0),
                reloading: std::sync::atomic::AtomicBool::new(false),
            }),
            keyspace: 0,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            warm_reads: AtomicU64::new(0),
            warm_neighbours: AtomicU64::new(0),
            large_guesses: AtomicU64::new(0),
            large_guesses_missed: AtomicU64::new(0),
            reloaded: AtomicU64::new(0),
            reloaded_bytes: AtomicU64::new(0),
            hints_rejected: AtomicU64::new(0),
            recent_reads: recent::RecentReads::new(),
        }
    }

    /// Keyspace `keyspace`'s view of this cache: the same bytes and budgets, its own keys
    /// and counts.
    pub(crate) fn view(&self, keyspace: u32) -> Self {
        BlockCache {
            shared: Arc::clone(&self.shared),
            keyspace,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            warm_reads: AtomicU64::new(0),
            warm_neighbours: AtomicU64::new(0),
            large_guesses: AtomicU64::new(0),
            large_guesses_missed: AtomicU64::new(0),
            reloaded: AtomicU64::new(0),
            reloaded_bytes: AtomicU64::new(0),
            hints_rejected: AtomicU64::new(0),
            recent_reads: recent::RecentReads::new(),
        }
    }

    pub(crate) fn get(&self, file: u64, offset: u64) -> Option<BlockBytes> {
        self.count(self.find(file, offset))
    }

    /// A get read the key whose hash (`format::key_hash`) is `hash` (a cache that holds
    /// nothing keeps no note).
    pub(crate) fn note_read(&self, hash: u64) {
        if self.enabled() {
            self.recent_reads.note(hash);
        }
    }

    /// Whether a get read the key whose hash is `hash` lately: an update's large value is
    /// then cached as it is appended.
    pub(crate) fn read_lately(&self, hash: u64) -> bool {
        self.enabled() && self.recent_reads.holds(hash)
    }

    /// [`BlockCache::get`] without counting a hit or a miss (the entry is marked used):
    /// for a lookup that may try a second entry before it knows its outcome, which it
    /// then counts once ([`BlockCache::count`]).
    pub(crate) fn find(&self, file: u64, offset: u64) -> Option<BlockBytes> {
        self.shared
            .cache
            .as_ref()
            .and_then(|c| c.get(&(self.keyspace, file, offset)))
    }

    /// Counts a lookup as a hit or a miss; returns what it found.
    pub(crate) fn count<T>(&self, found: Option<T>) -> Option<T> {
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Lookups that found their node, and lookups that did not (the node was then read).
    pub(crate) fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// How many bytes a leaf read that missed may read around the leaf now: the
    /// configured `Options::warm_read_bytes` while that much more would leave the cache
    /// holding at most its share of the budget ([`WARM_FILL_LEAST`]: between a half and
    /// fifteen sixteenths, as the budget compares with the levels' nodes); from the first
    /// time it would not, 0 for good. A cold cache (a fresh process, a restart) fills
    /// that share in a few large reads instead of one device read per leaf, and the rest
    /// with the leaves and records reads ask for (concurrent misses may each read a
    /// window past the check: the rest is their margin).
    pub(crate) fn warm_read_bytes(&self) -> u64 {
        let s = &*self.shared;
        let want = s.warm_read_bytes;
        let Some(c) = s.cache.as_ref().filter(|_| want > 0) else {
            return 0;
        };
        if s.warmed.load(Ordering::Relaxed) || s.reloading.load(Ordering::Relaxed) {
            return 0;
        }
        let room = warm_fill_room(s.capacity, self.level_bytes());
        if c.weight().saturating_add(want) <= room {
            want
        } else {
            s.warmed.store(true, Ordering::Relaxed);
            0
        }
    }

    /// Counts a read around a missing leaf or record that cached `neighbours` more (none:
    /// not counted).
    pub(crate) fn note_warm_read(&self, neighbours: u64) {
        if neighbours == 0 {
            return;
        }
        self.warm_reads.fetch_add(1, Ordering::Relaxed);
        self.warm_neighbours
            .fetch_add(neighbours, Ordering::Relaxed);
    }

    /// Counts a get that read the large record a level file's pointer table named, and
    /// took it (`hit`: the record held the key) or went on to the leaf.
    pub(crate) fn note_large_guess(&self, hit: bool) {
        let counter = if hit {
            &self.large_guesses
        } else {
            &self.large_guesses_missed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Gets that took a record a level file's pointer table named, and those whose record
    /// held another key.
    pub(crate) fn large_guesses(&self) -> (u64, u64) {
        (
            self.large_guesses.load(Ordering::Relaxed),
            self.large_guesses_missed.load(Ordering::Relaxed),
        )
    }

    /// Reads around a missing leaf or record, and the neighbours they cached.
    pub(crate) fn warm_reads_and_neighbours(&self) -> (u64, u64) {
        (
            self.warm_reads.load(Ordering::Relaxed),
            self.warm_neighbours.load(Ordering::Relaxed),
        )
    }

    /// Every entry the cache holds now, of every keyspace, as the hint file names them.
    pub(crate) fn hinted_entries(&self) -> Vec<HintedEntry> {
        let Some(c) = &self.shared.cache else {
            return Vec::new();
        };
        c.iter()
            .filter_map(|((keyspace, file, tag), bytes)| {
                Some(HintedEntry {
                    keyspace,
                    file,
                    tag,
                    len: u32::try_from(bytes.len()).ok()?,
                })
            })
            .collect()
    }

    /// Whether an entry of `len` bytes read back at open still fits with a sixteenth of
    /// the budget left free (for what reads bring in meanwhile): a reload never pushes
    /// out what the running process has read.
    pub(crate) fn has_room_to_reload(&self, len: u64) -> bool {
        let s = &*self.shared;
        let Some(c) = s.cache.as_ref() else {
            return false;
        };
        let need = len
            .saturating_add(ENTRY_OVERHEAD)
            .saturating_add(s.capacity / 16);
        s.capacity.saturating_sub(c.weight()) >= need
    }

    /// Marks the start or the end of a reload (see `Shared::reloading`).
    pub(crate) fn set_reloading(&self, on: bool) {
        self.shared.reloading.store(on, Ordering::Relaxed);
    }

    /// Counts entries read back at open, and their bytes.
    pub(crate) fn note_reloaded(&self, entries: u64, bytes: u64) {
        self.reloaded.fetch_add(entries, Ordering::Relaxed);
        self.reloaded_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts a hint file found unusable.
    pub(crate) fn note_hints_rejected(&self) {
        self.hints_rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Hint files found unusable.
    pub(crate) fn hints_rejected(&self) -> u64 {
        self.hints_rejected.load(Ordering::Relaxed)
    }

    /// Entries this keyspace read back at open, and their bytes.
    pub(crate) fn reloaded(&self) -> (u64, u64) {
        (
            self.reloaded.load(Ordering::Relaxed),
            self.reloaded_bytes.load(Ordering::Relaxed),
        )
    }

    /// The budget pinned indexes are charged to.
    pub(crate) fn pins(&self) -> &Arc<PinBudget> {
        &self.shared.pins
    }

    /// The budget pinned large pointer tables are charged to.
    pub(crate) fn table_pins(&self) -> &Arc<PinBudget> {
        &self.shared.table_pins
    }

    /// Whether the cache holds anything at all (a budget of 0 disables it).
    pub(crate) fn enabled(&self) -> bool {
        self.shared.cache.is_some()
    }

    /// Whether the node at `offset` of `file` is cached, without counting a hit or a miss
    /// or marking it used.
    pub(crate) fn contains(&self, file: u64, offset: u64) -> bool {
        self.shared
            .cache
            .as_ref()
            .is_some_and(|c| c.contains_key(&(self.keyspace, file, offset)))
    }

    /// Inserts a node read ahead of the lookup that wants it (a prefetch): counted as
    /// that lookup's miss, since the device was read for it; the lookup then counts a hit.
    pub(crate) fn insert_fetched(&self, file: u64, offset: u64, node: BlockBytes) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        self.insert(file, offset, node);
    }

    pub(crate) fn insert(&self, file: u64, offset: u64, node: BlockBytes) {
        if let Some(c) = &self.shared.cache {
            c.insert((self.keyspace, file, offset), node);
        }
    }

    /// [`BlockCache::insert`] of a node that takes the place of one in use (a merge's
    /// output leaf holding entries read from cached input leaves): inserted as already
    /// used once, so that the cache keeps it as it kept the node it replaces. A plain
    /// insert enters the cache's small probation queue (about 3% of the budget), which a
    /// merge writing thousands of such leaves at once would cycle them all through
    /// before any read could use them.
    pub(crate) fn insert_in_use(&self, file: u64, offset: u64, node: BlockBytes) {
        if let Some(c) = &self.shared.cache {
            let key = (self.keyspace, file, offset);
            c.insert(key, node);
            // Marks it used; not a reader's hit.
            let _ = c.get(&key);
        }
    }

    /// Takes the node at `offset` of `file` out of the cache if it is `len` bytes long
    /// (counted as a lookup: a hit if such a node was there; one of another length is
    /// left in place and counted a miss): for a record read for the last time.
    pub(crate) fn take(&self, file: u64, offset: u64, len: usize) -> Option<BlockBytes> {
        let found = self
            .shared
            .cache
            .as_ref()
            .and_then(|c| c.remove_if(&(self.keyspace, file, offset), |v| v.len() == len))
            .map(|(_, v)| v);
        self.count(found)
    }

    /// Drops the node at `offset` of `file` from the cache, if it is there (not counted
    /// as a lookup): a record that moved, cached again where it went.
    pub(crate) fn forget(&self, file: u64, offset: u64) {
        if let Some(c) = &self.shared.cache {
            c.remove(&(self.keyspace, file, offset));
        }
    }

    /// Counts `bytes` of level-file nodes as open (a level file at its open).
    pub(crate) fn add_level_bytes(&self, bytes: u64) {
        self.shared.level_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts `bytes` of level-file nodes as no longer open (a level file dropped).
    pub(crate) fn remove_level_bytes(&self, bytes: u64) {
        let _ = self
            .shared
            .level_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(bytes))
            });
    }

    /// Node bytes of the level files open now, of every keyspace reading through this
    /// cache.
    pub(crate) fn level_bytes(&self) -> u64 {
        self.shared.level_bytes.load(Ordering::Relaxed)
    }

    /// The byte budget (0: no cache).
    pub(crate) fn capacity(&self) -> u64 {
        self.shared.cache.as_ref().map_or(0, Cache::capacity)
    }

    /// Bytes currently held (by every keyspace).
    pub(crate) fn used_bytes(&self) -> u64 {
        self.shared.cache.as_ref().map_or(0, Cache::weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_inserted_in_use_outlasts_a_burst_of_new_nodes_and_a_plain_one_does_not() {
        let c = BlockCache::new(1 << 20);
        let node = |i: u64| bytes::Bytes::from(vec![i as u8; 1024]);
        // Twice the budget: the cache is full of nodes never read.
        for i in 0..2000 {
            c.insert(1, i * 4096, node(i));
        }
        // A merge's leaves that replace cached ones (file 2), and others (file 3).
        for i in 0..100 {
            c.insert_in_use(2, i * 4096, node(i));
            c.insert(3, i * 4096, node(i));
        }
        // Then twice the budget of new nodes, each read by no one.
        for i in 0..2000 {
            c.insert(4, i * 4096, node(i));
        }
        let kept = |file| (0..100).filter(|&i| c.contains(file, i * 4096)).count();
        assert!(kept(2) >= 90, "in use: {} of 100 kept", kept(2));
        assert!(kept(3) <= 10, "plain: {} of 100 kept", kept(3));
        // Marking a node used is not a reader's hit.
        assert_eq!(c.hits_and_misses(), (0, 0));
    }

    #[test]
    fn take_removes_only_a_node_of_the_expected_length() {
        let c = BlockCache::new(1 << 20);
        c.insert(1, 0, bytes::Bytes::from_static(b"record"));
        // Another length: not this record; left in place, a miss.
        assert!(c.take(1, 0, 5).is_none());
        assert!(c.contains(1, 0));
        assert_eq!(c.hits_and_misses(), (0, 1));
        assert_eq!(c.take(1, 0, 6).as_deref(), Some(&b"record"[..]));
        assert!(!c.contains(1, 0));
        assert_eq!(c.hits_and_misses(), (1, 1));
        assert!(c.take(1, 0, 6).is_none());
        assert_eq!(c.hits_and_misses(), (1, 2));
    }

    #[test]
    fn keyspaces_share_the_bytes_but_not_the_keys() {
        let c = BlockCache::new(1 << 20);
        let other = c.view(7);
        c.insert(1, 0, bytes::Bytes::from_static(b"default"));
        other.insert(1, 0, bytes::Bytes::from_static(b"keyspace 7"));
        assert_eq!(c.get(1, 0).as_deref(), Some(&b"default"[..]));
        assert_eq!(other.get(1, 0).as_deref(), Some(&b"keyspace 7"[..]));
        assert_eq!(c.used_bytes(), other.used_bytes());
        assert_eq!(c.used_bytes(), 17 + 2 * ENTRY_OVERHEAD);
        assert!(Arc::ptr_eq(c.pins(), other.pins()));
    }

    #[test]
    fn stays_within_budget() {
        let c = BlockCache::new(64 << 10);
        for i in 0..100u64 {
            c.insert(1, i * 8192, bytes::Bytes::from(vec![0u8; 8192]));
        }
        assert!(c.used_bytes() <= 64 << 10, "{}", c.used_bytes());
        let off = BlockCache::new(0);
        off.insert(1, 0, bytes::Bytes::from(vec![0u8; 8192]));
        assert!(off.get(1, 0).is_none());
        assert_eq!(off.hits_and_misses(), (0, 1));
    }

    #[test]
    fn hints_name_every_entry_and_a_reload_leaves_a_sixteenth_free() {
        let c = BlockCache::configured(1 << 20, 0, 0, 64 << 10);
        let other = c.view(3);
        c.insert(5, 8192, bytes::Bytes::from(vec![1u8; 4096]));
        other.insert(6, 100, bytes::Bytes::from(vec![2u8; 1030]));
        let mut named = c.hinted_entries();
        named.sort_unstable();
        let entry = |keyspace, file, tag, len| HintedEntry {
            keyspace,
            file,
            tag,
            len,
        };
        assert_eq!(named, vec![entry(0, 5, 8192, 4096), entry(3, 6, 100, 1030)]);
        // Room for an entry while a sixteenth of the budget stays free besides it.
        let free = c.capacity() - c.used_bytes();
        let most = free - c.capacity() / 16 - ENTRY_OVERHEAD;
        assert!(c.has_room_to_reload(most));
        assert!(!c.has_room_to_reload(most + 1));
        assert!(!BlockCache::new(0).has_room_to_reload(0));
        // While a reload runs, a miss reads its leaf alone; after it, groups again.
        assert_eq!(c.warm_read_bytes(), 64 << 10);
        c.set_reloading(true);
        assert_eq!(other.warm_read_bytes(), 0);
        c.set_reloading(false);
        assert_eq!(other.warm_read_bytes(), 64 << 10);
    }

    #[test]
    fn reads_around_a_leaf_only_while_the_cache_has_room() {
        let off = BlockCache::configured(1 << 20, 0, 0, 0);
        assert_eq!(off.warm_read_bytes(), 0, "not configured");
        let none = BlockCache::configured(0, 0, 0, 64 << 10);
        assert_eq!(none.warm_read_bytes(), 0, "no cache");
        // Levels twice the budget: groups fill the cache up to half its budget.
        let c = BlockCache::configured(1 << 20, 0, 0, 64 << 10);
        c.add_level_bytes(2 << 20);
        assert_eq!(c.warm_read_bytes(), 64 << 10, "empty");
        // Filling: reads around a leaf stop once a window more would fill the cache past
        // its share, and stay stopped.
        let filled_until = |c: &BlockCache, room: u64| {
            let mut stopped = false;
            for i in 0..256u64 {
                let used = c.used_bytes();
                let expect = if !stopped && used + (64 << 10) <= room {
                    64 << 10
                } else {
                    0
                };
                assert_eq!(
                    c.warm_read_bytes(),
                    expect,
                    "{used} bytes held, room {room}"
                );
                stopped |= expect == 0;
                c.insert(1, i * 8192, bytes::Bytes::from(vec![0u8; 8192]));
            }
            assert!(stopped, "{} bytes held", c.used_bytes());
        };
        filled_until(&c, (1 << 20) / 2);
        c.shared.cache.as_ref().unwrap().clear();
        assert_eq!(c.used_bytes(), 0);
        assert_eq!(
            c.warm_read_bytes(),
            0,
            "a cache that filled once is not cold again"
        );
        c.note_warm_read(0);
        c.note_warm_read(7);
        c.note_warm_read(3);
        assert_eq!(c.warm_reads_and_neighbours(), (2, 10));

        // Levels the cache can nearly hold: groups fill it up to fifteen sixteenths; the
        // count follows files opened and dropped, across keyspaces' views.
        let c = BlockCache::configured(1 << 20, 0, 0, 64 << 10);
        let other = c.view(2);
        c.add_level_bytes(3 << 20);
        other.add_level_bytes(1 << 19);
        c.remove_level_bytes(3 << 20);
        assert_eq!(c.level_bytes(), 1 << 19);
        filled_until(&c, (1 << 20) / 16 * 15);
    }

    #[test]
    fn the_share_groups_fill_follows_how_much_of_the_levels_the_budget_holds() {
        let mib = 1u64 << 20;
        let c = 1024 * mib;
        assert_eq!(warm_fill_room(c, 0), c / 16 * 15, "no levels");
        assert_eq!(warm_fill_room(c, c / 2), c / 16 * 15, "levels fit");
        assert_eq!(warm_fill_room(c, c), c / 16 * 15, "levels just fit");
        assert_eq!(warm_fill_room(c, c / 4 * 5), c * 4 / 5, "levels 1.25 times");
        assert_eq!(warm_fill_room(c, c * 3 / 2), c * 2 / 3, "levels 1.5 times");
        assert_eq!(warm_fill_room(c, 2 * c), c / 2, "levels twice");
        assert_eq!(warm_fill_room(c, 40 * c), c / 2, "levels far larger");
        assert_eq!(
            warm_fill_room(u64::MAX, 1),
            u64::MAX / 16 * 15,
            "no overflow"
        );
    }

    #[test]
    fn small_records_are_charged_what_holding_them_costs() {
        let c = BlockCache::new(1 << 20);
        for i in 0..100u64 {
            c.insert(1, i * 150, bytes::Bytes::from(vec![1u8; 150]));
        }
        assert_eq!(c.used_bytes(), 100 * (150 + ENTRY_OVERHEAD));
        // Past the budget: no more entries than the budget over each one's full charge.
        for i in 100..20_000u64 {
            c.insert(1, i * 150, bytes::Bytes::from(vec![1u8; 150]));
        }
        let held = (0..20_000u64)
            .filter(|&i| c.get(1, i * 150).is_some())
            .count() as u64;
        assert!(
            held > 0 && held <= (1 << 20) / (150 + ENTRY_OVERHEAD),
            "{held} held"
        );
        assert!(c.used_bytes() <= 1 << 20);
    }

    #[test]
    fn counts_hits_and_misses() {
        let c = BlockCache::new(64 << 10);
        assert!(c.get(1, 0).is_none());
        c.insert(1, 0, bytes::Bytes::from(vec![0u8; 8192]));
        assert!(c.get(1, 0).is_some());
        assert!(c.get(1, 0).is_some());
        assert_eq!(c.hits_and_misses(), (2, 1));
    }
}
