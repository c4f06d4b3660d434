//! The memtable's ordered index: a skip list of versions whose nodes live in an arena.
//!
//! Owns: the nodes (header, tower of next pointers, key bytes) and, apart from them, their
//! tails (the value bytes), carved from large chunks that are freed together when the list
//! is dropped, so an insert allocates nothing of its own and a flushed memtable is freed in
//! a few calls (not one `free` per version from a background thread, contending with the
//! writer's `malloc`s). Tails live in chunks of their own so that the nodes a search steps
//! through lie densely (a 40 MiB memtable of SD pairs holds about 10 MiB of nodes, which
//! the processor's last-level cache can mostly keep);
//! the order (key ascending, then LSN descending); any number of inserting threads (the
//! commit group's writers insert their own versions) beside any number of lock-free
//! readers.
//! Never: removes or changes a node once it is linked (readers hold plain references into
//! the arena for as long as they borrow the list), or interprets the value bytes.
//!
//! Concurrency, as in LevelDB's skip list with RocksDB's concurrent inserts: a node is
//! written in full (its arena space carved under a short lock), then linked bottom level
//! first, each link a `Release` compare-and-swap of the predecessor's next pointer (a
//! failed swap means another insert got there first: step forward and retry); a reader
//! loads next pointers with `Acquire`, so a node it reaches is fully written. Nodes are
//! never unlinked, so neither a reader nor an inserter ever meets freed memory.
//!
//! A key written again starts from where its last write linked (`spots`): the nodes
//! before its versions at the four bottom levels, checked against the probe and walked
//! forward a few steps, stand in for the search from the top.

mod spots;

use crate::prefetch::prefetch;
use parking_lot::Mutex;
use spots::{SpotTable, LEVELS as SPOT_LEVELS};
use std::cmp::Ordering;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering as AtomicOrdering};

/// The tallest tower (2^24 nodes before towers run short: no memtable comes near).
const MAX_HEIGHT: usize = 24;

/// One node in two gets a level more. With the search's prefetch of the level below (see
/// `find`) a step's cache misses overlap, and more, shorter steps won: 400,000 inserts of
/// YCSB keys into a 40 MiB list took 0.94 us each against 1.08 us with LevelDB's one in
/// four (1.41 us before the prefetch), for 5 bytes more tower per node.
const BRANCHING: u32 = 2;

/// Bytes of a node before its tower (see [`Node`]).
const HEADER: usize = std::mem::size_of::<Node>();
// The tower follows the header: the header's size keeps it aligned, and a node starts on
// a `u64` of its chunk.
const _: () = assert!(HEADER.is_multiple_of(std::mem::align_of::<AtomicPtr<Node>>()));
const _: () = assert!(std::mem::align_of::<Node>() <= std::mem::align_of::<u64>());

/// What a version is, beside its bytes (the memtable's `Slot`).
pub(super) type Tag = u8;

/// A node's fixed part; its tower (`height` pointers) and then its key bytes follow it in
/// the arena, its tail bytes lie in a tail chunk.
#[repr(C)]
struct Node {
    /// The first 16 key bytes, big-endian, zero-padded: most comparisons end here, on the
    /// node's first cache line.
    prefix: [u64; 2],
    lsn: u64,
    /// Where the tail bytes start, in the tail arena (dangling when there are none).
    tail: *const u8,
    key_len: u32,
    tail_len: u32,
    height: u8,
    tag: Tag,
}

/// The last node before a key's versions at each level, as a search saw it
/// ([`VersionList::locate`]): an insert of a version of that key into the same list may
/// start its links there. Nodes are never unlinked or moved, so these stay before the key
/// for as long as the list lives; whoever holds a spot must keep its list alive and hand
/// it to no other list (`Memtable`'s `InsertHint` holds both).
pub(super) struct Spot {
    prev: [*const Node; MAX_HEIGHT],
    /// How many bottom levels of `prev` were found (all of them after a search from the
    /// top; four when the spot came from the list's remembered spots): a version with a
    /// taller tower searches.
    levels: usize,
}

/// Steps a remembered spot may be walked forward at one level before the search from the
/// top is cheaper (a step is a cache miss, as a level of the search is).
const SPOT_WALK_LIMIT: usize = 16;

/// A version found in the list, valid while the list is borrowed. It holds a raw pointer
/// (with the arena chunk's provenance: the tower and bytes lie past the `Node` header, out
/// of reach of a `&Node`).
#[derive(Clone, Copy)]
pub(super) struct Entry<'a> {
    node: NonNull<Node>,
    _list: std::marker::PhantomData<&'a VersionList>,
}

// SAFETY: an entry reads a linked node, which never changes again (its tower only through
// atomics) and lives as long as the list the entry borrows.
unsafe impl Send for Entry<'_> {}
// SAFETY: as above.
unsafe impl Sync for Entry<'_> {}

impl Entry<'_> {
    fn at(node: NonNull<Node>) -> Self {
        Entry {
            node,
            _list: std::marker::PhantomData,
        }
    }
}

impl std::fmt::Debug for Entry<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &self.key())
            .field("lsn", &self.lsn())
            .field("tag", &self.tag())
            .finish()
    }
}

/// The first 16 bytes of `key`, zero-padded, as two big-endian halves.
fn prefix_of(key: &[u8]) -> [u64; 2] {
    let mut head = [0u8; 16];
    let n = key.len().min(16);
    if let (Some(dst), Some(src)) = (head.get_mut(..n), key.get(..n)) {
        dst.copy_from_slice(src);
    }
    let (hi, lo) = head.split_at(8);
    [
        u64::from_be_bytes(hi.try_into().unwrap_or_default()),
        u64::from_be_bytes(lo.try_into().unwrap_or_default()),
    ]
}

/// A position to search for: a key and an LSN (the newest version of the key at or below
/// `lsn` is the first one at or after the probe).
#[derive(Clone, Copy)]
pub(super) struct Probe<'k> {
    prefix: [u64; 2],
    key: &'k [u8],
    lsn: u64,
}

impl<'k> Probe<'k> {
    pub(super) fn new(key: &'k [u8], lsn: u64) -> Self {
        Probe {
            prefix: prefix_of(key),
            key,
            lsn,
        }
    }
}

/// The tower's level `i` of node `n`.
///
/// # Safety
/// `n` must point at a node built by [`VersionList::write_node`] (with the provenance of
/// its arena chunk) that lives for `'a`, and `i` must be below its height.
unsafe fn next_of<'a>(n: *const Node, i: usize) -> &'a AtomicPtr<Node> {
    // SAFETY: the tower follows the header, `height` pointers long, 8-aligned (the header's
    // size is a multiple of 8), initialized when the node was written.
    unsafe {
        &*(n as *const u8)
            .add(HEADER)
            .cast::<AtomicPtr<Node>>()
            .add(i)
    }
}

/// The key of node `n`.
///
/// # Safety
/// As [`next_of`].
unsafe fn key_of<'a>(n: *const Node) -> &'a [u8] {
    // SAFETY: the key follows the tower inside the node's words, written in full before
    // the node was linked, never changed after.
    unsafe {
        let height = usize::from((*n).height);
        let start = (n as *const u8).add(HEADER + height * std::mem::size_of::<AtomicPtr<Node>>());
        std::slice::from_raw_parts(start, (*n).key_len as usize)
    }
}

/// The tail of node `n`.
///
/// # Safety
/// As [`next_of`].
unsafe fn tail_of<'a>(n: *const Node) -> &'a [u8] {
    // SAFETY: the tail was written in full in the tail arena before the node was linked,
    // never changed after; an empty tail's pointer is dangling but aligned.
    unsafe { std::slice::from_raw_parts((*n).tail, (*n).tail_len as usize) }
}

/// Orders node `n` against a probe: key ascending, then LSN descending.
///
/// # Safety
/// As [`next_of`].
unsafe fn cmp_probe(n: *const Node, p: &Probe<'_>) -> Ordering {
    // SAFETY: the caller's promise; the header's fields are read in place.
    unsafe {
        (*n).prefix
            .cmp(&p.prefix)
            .then_with(|| key_of(n).cmp(p.key))
            .then(p.lsn.cmp(&(*n).lsn))
    }
}

impl<'a> Entry<'a> {
    pub(super) fn key(&self) -> &'a [u8] {
        // SAFETY: a linked node of the list `'a` borrows.
        unsafe { key_of(self.node.as_ptr()) }
    }

    pub(super) fn lsn(&self) -> u64 {
        // SAFETY: as above.
        unsafe { (*self.node.as_ptr()).lsn }
    }

    pub(super) fn tag(&self) -> Tag {
        // SAFETY: as above.
        unsafe { (*self.node.as_ptr()).tag }
    }

    /// The bytes stored after the key (a value, an operand, an encoded pointer).
    pub(super) fn tail(&self) -> &'a [u8] {
        let n = self.node.as_ptr();
        // SAFETY: as above.
        unsafe { tail_of(n) }
    }

    /// For a walk that will read the next versions after working on this one: asks the
    /// processor to bring in the next version's tail and the first two cache lines (header,
    /// tower, key) of the one after it. Nodes and tails lie in insertion order, so each step
    /// of an in-order walk is otherwise two cache misses; the next node's header, which
    /// says where its tail is, was asked for one step ago. A hint: changes nothing the
    /// program computes.
    pub(super) fn prefetch_next(&self) {
        // SAFETY: a linked node of the list `'a` borrows; every node has height >= 1.
        // Acquire, as in `next`: the node's header is read below.
        let p = unsafe { next_of(self.node.as_ptr(), 0) }.load(AtomicOrdering::Acquire);
        if p.is_null() {
            return;
        }
        // SAFETY: `p` is a linked node of the same list: its header and tower were written
        // before it was linked.
        let (tail, after) = unsafe { ((*p).tail, next_of(p, 0).load(AtomicOrdering::Relaxed)) };
        prefetch(tail.cast::<Node>());
        prefetch(after);
        prefetch(after.cast::<u8>().wrapping_add(64).cast::<Node>());
    }

    /// The next version in order.
    pub(super) fn next(&self) -> Option<Entry<'a>> {
        // SAFETY: a linked node of the list `'a` borrows; every node has height >= 1.
        let p = unsafe { next_of(self.node.as_ptr(), 0) }.load(AtomicOrdering::Acquire);
        NonNull::new(p).map(Entry::at)
    }
}

/// The writer's state.
struct Writer {
    /// Free bytes left in the tail arena's current chunk, and where they start.
    tail_free: usize,
    tail_cursor: *mut u8,
    /// Chunks nodes and tails are carved from (`u64`s: 8-byte alignment), as raw pointers
    /// (from `Box::leak`: moving a `Box` would assert uniqueness over memory the nodes'
    /// pointers still use); freed when the writer drops, with the list.
    chunks: Vec<NonNull<[u64]>>,
    /// Free `u64`s left at the end of the current node chunk, and where they start.
    free: usize,
    cursor: *mut u64,
    /// Words of the next chunk: the first is 16 KiB, each next one twice the last up to
    /// the list's chunk size (a memtable that stays small holds little).
    next_chunk: usize,
    /// xorshift state for tower heights.
    rng: u64,
    /// Bytes of every chunk.
    arena_bytes: usize,
}

impl Writer {
    /// A new zeroed chunk for `words` words: the next chunk size, or exactly `words` when
    /// they are more than a quarter of it (a big node or tail gets a chunk of its own, and
    /// the current chunk's free end stays for the next small one). Returns its start and
    /// its size in words.
    fn new_chunk(&mut self, words: usize, chunk_words: usize) -> (*mut u64, usize) {
        let chunk = self.next_chunk.min(chunk_words);
        let size = if words > chunk / 4 { words } else { chunk };
        if size == chunk {
            self.next_chunk = (chunk * 2).min(chunk_words);
        }
        let chunk = NonNull::from(Box::leak(vec![0u64; size].into_boxed_slice()));
        self.arena_bytes += size * 8;
        self.chunks.push(chunk);
        (chunk.as_ptr() as *mut u64, size)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        for chunk in self.chunks.drain(..) {
            // SAFETY: each chunk came from `Box::leak` of a boxed slice and is freed once,
            // here, when the list (whose nodes point into it) is dropped.
            drop(unsafe { Box::from_raw(chunk.as_ptr()) });
        }
    }
}

/// The skip list. `Send` and `Sync`: see the module comment.
pub(super) struct VersionList {
    /// A node with the tallest tower and no key, before every other.
    head: NonNull<Node>,
    /// The tallest tower in use (readers start there).
    height: AtomicUsize,
    len: AtomicUsize,
    /// Bytes of arena chunks (read without the writer's lock).
    arena_bytes: AtomicUsize,
    chunk_words: usize,
    /// The arena and the tower-height generator (held only to carve a node).
    writer: Mutex<Writer>,
    /// Where keys written more than once were last linked (see `spots`).
    spots: SpotTable<Node>,
}

// SAFETY: each node is written once by the thread inserting it (into arena space carved
// under `writer`, which no other node shares) before it is linked with a Release swap,
// read through Acquire loads, and never changed (but for its tower's atomics) or freed
// while the list lives; the arena chunks are owned by the list. The spot table's raw
// pointers name only the head or such linked nodes, stored with Release after an Acquire
// load reached them and read with Acquire, and die with the list.
unsafe impl Send for VersionList {}
// SAFETY: as above.
unsafe impl Sync for VersionList {}

impl std::fmt::Debug for VersionList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionList")
            .field("len", &self.len())
            .finish()
    }
}

/// Checks (in debug builds) that `at`, the first node at or after an insert's probe
/// (null: none), is not the version being inserted: versions differ in LSN.
fn debug_assert_new(at: *const Node, probe: &Probe<'_>) {
    debug_assert!(
        // SAFETY: a non-null `at` is a linked node.
        at.is_null() || unsafe { cmp_probe(at, probe) } != Ordering::Equal,
        "a version inserted twice"
    );
}

impl VersionList {
    /// An empty list for a memtable of about `budget` bytes: its arena grows in chunks of
    /// a sixteenth of that (16 KiB ..= 1 MiB), its spot table is sized for it.
    pub(super) fn for_budget(budget: usize) -> Self {
        let chunk_words = (budget / 16).clamp(16 << 10, 1 << 20) / 8;
        let mut writer = Writer {
            tail_free: 0,
            tail_cursor: ptr::null_mut(),
            chunks: Vec::new(),
            free: 0,
            cursor: ptr::null_mut(),
            next_chunk: (16 << 10) / 8,
            rng: 0x2545_F491_4F6C_DD1D,
            arena_bytes: 0,
        };
        let head = Self::alloc_node(&mut writer, chunk_words, &[], &[], 0, 0, MAX_HEIGHT);
        VersionList {
            head,
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            arena_bytes: AtomicUsize::new(writer.arena_bytes),
            chunk_words,
            writer: Mutex::new(writer),
            spots: SpotTable::for_budget(budget),
        }
    }

    /// Bytes of the spot table (beside the arena).
    pub(super) fn spot_bytes(&self) -> usize {
        self.spots.bytes()
    }

    /// Versions held.
    pub(super) fn len(&self) -> usize {
        self.len.load(AtomicOrdering::Acquire)
    }

    /// Whether it holds no version.
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of the arena (nodes, tails and the current chunks' unused ends).
    pub(super) fn arena_bytes(&self) -> usize {
        self.arena_bytes.load(AtomicOrdering::Relaxed)
    }

    /// Carves a node from the arena and writes it in full (tower all null).
    fn alloc_node(
        w: &mut Writer,
        chunk_words: usize,
        key: &[u8],
        tail: &[u8],
        lsn: u64,
        tag: Tag,
        height: usize,
    ) -> NonNull<Node> {
        let tail_at = Self::alloc_tail(w, chunk_words, tail);
        let tower = height * std::mem::size_of::<AtomicPtr<Node>>();
        let bytes = HEADER + tower + key.len();
        let words = bytes.div_ceil(8);
        if words > w.free {
            let (start, size) = w.new_chunk(words, chunk_words);
            if size != words {
                w.cursor = start;
                w.free = size;
            } else {
                return Self::write_node(start, key, tail_at, tail.len(), lsn, tag, height);
            }
        }
        let at = w.cursor;
        // SAFETY: `words <= free`, so the node fits in the chunk after `cursor`.
        w.cursor = unsafe { w.cursor.add(words) };
        w.free -= words;
        Self::write_node(at, key, tail_at, tail.len(), lsn, tag, height)
    }

    /// Copies `tail` into the tail arena (a chunk of its own when it is big) and returns
    /// where it starts.
    fn alloc_tail(w: &mut Writer, chunk_words: usize, tail: &[u8]) -> *const u8 {
        if tail.is_empty() {
            return NonNull::<u8>::dangling().as_ptr();
        }
        let at = if tail.len() > w.tail_free {
            let words = tail.len().div_ceil(8);
            let (start, size) = w.new_chunk(words, chunk_words);
            let start = start as *mut u8;
            if size != words {
                // SAFETY: the chunk is `size * 8 >= tail.len()` bytes.
                w.tail_cursor = unsafe { start.add(tail.len()) };
                w.tail_free = size * 8 - tail.len();
            }
            start
        } else {
            let at = w.tail_cursor;
            // SAFETY: `tail.len() <= tail_free`.
            w.tail_cursor = unsafe { at.add(tail.len()) };
            w.tail_free -= tail.len();
            at
        };
        // SAFETY: `at` has `tail.len()` bytes of a chunk no node refers to yet.
        unsafe { ptr::copy_nonoverlapping(tail.as_ptr(), at, tail.len()) };
        at
    }

    /// Writes a node at `at` (enough zeroed, 8-aligned words for it).
    fn write_node(
        at: *mut u64,
        key: &[u8],
        tail: *const u8,
        tail_len: usize,
        lsn: u64,
        tag: Tag,
        height: usize,
    ) -> NonNull<Node> {
        let node = at as *mut Node;
        // SAFETY: `at` is 8-aligned (a `u64` slot), the words were sized for the header,
        // the tower and the bytes, nothing else refers to them yet, and a zeroed tower is
        // a tower of null pointers.
        unsafe {
            node.write(Node {
                prefix: prefix_of(key),
                lsn,
                tail,
                key_len: key.len() as u32,
                tail_len: tail_len as u32,
                height: height as u8,
                tag,
            });
            let bytes =
                (at as *mut u8).add(HEADER + height * std::mem::size_of::<AtomicPtr<Node>>());
            ptr::copy_nonoverlapping(key.as_ptr(), bytes, key.len());
            NonNull::new_unchecked(node)
        }
    }

    fn random_height(w: &mut Writer) -> usize {
        let mut h = 1;
        while h < MAX_HEIGHT {
            w.rng ^= w.rng << 13;
            w.rng ^= w.rng >> 7;
            w.rng ^= w.rng << 17;
            if !((w.rng & 0xffff) as u32).is_multiple_of(BRANCHING) {
                break;
            }
            h += 1;
        }
        h
    }

    /// The last node before `probe` at each level (`prev`), searching from the top, and
    /// the first node at or after the probe as the search saw it (null: none). That node
    /// is returned as seen, not read again from `prev[0]`: an insert meanwhile may have
    /// linked a node between them that is still before the probe.
    fn find(&self, probe: &Probe<'_>, prev: &mut [*const Node; MAX_HEIGHT]) -> *mut Node {
        let mut x: *const Node = self.head.as_ptr();
        let mut at_or_after: *mut Node = ptr::null_mut();
        let top = self.height.load(AtomicOrdering::Relaxed);
        for level in (0..top).rev() {
            loop {
                // SAFETY: `x` is the head or a linked node, with a tower at least `level + 1`
                // tall (the head is the tallest; a node met at a level has that level).
                let next = unsafe { next_of(x, level) }.load(AtomicOrdering::Acquire);
                if let Some(below) = level.checked_sub(1) {
                    // Where the search goes if it stops before `next`: fetched while `next`
                    // is (a cache miss each, in a memtable bigger than the caches; together
                    // they take the time of one).
                    // SAFETY: as above, `below < level`.
                    prefetch(unsafe { next_of(x, below) }.load(AtomicOrdering::Relaxed));
                }
                // SAFETY: a non-null next pointer is a linked node.
                if next.is_null() || unsafe { cmp_probe(next, probe) } != Ordering::Less {
                    at_or_after = next;
                    break;
                }
                x = next;
            }
            if let Some(p) = prev.get_mut(level) {
                *p = x;
            }
        }
        at_or_after
    }

    /// Where `key`'s versions start, found now for an insert later ([`Spot`]): the
    /// search, the insert's costly part, runs before its LSN is known (while its writer
    /// waits for its turn to commit).
    pub(super) fn locate(&self, key: &[u8]) -> Spot {
        let mut prev = self.head_everywhere();
        self.find(&Probe::new(key, u64::MAX), &mut prev);
        Spot {
            prev,
            levels: MAX_HEIGHT,
        }
    }

    /// Predecessors at every level before a search: the head.
    fn head_everywhere(&self) -> [*const Node; MAX_HEIGHT] {
        [self.head.as_ptr() as *const Node; MAX_HEIGHT]
    }

    /// Whether the spot table holds a spot for the key of `hash` (tests).
    #[cfg(test)]
    pub(super) fn remembers(&self, hash: u64) -> bool {
        self.spots.get(hash).is_some()
    }

    /// Whether `p` (null, the head or a linked node of this list) is a node an insert or
    /// seek of `probe` may start from: not null, and the head or before the probe.
    fn starts_before(&self, p: *const Node, probe: &Probe<'_>) -> bool {
        // SAFETY: a non-null `p` is the head or a linked node of this list (spots hold
        // nothing else), so it may be read.
        !p.is_null()
            && (ptr::eq(p, self.head.as_ptr()) || unsafe { cmp_probe(p, probe) } == Ordering::Less)
    }

    /// From `p` (the head or a node linked at `level`), the last node before `probe` at
    /// `level`, within [`SPOT_WALK_LIMIT`] steps; `None` when `p` is not before the probe
    /// (a stale or foreign remembered spot) or the walk is longer. Also returns the first
    /// node at or after the probe (null: none).
    fn walk_from(
        &self,
        p: *const Node,
        level: usize,
        probe: &Probe<'_>,
    ) -> Option<(*const Node, *mut Node)> {
        if !self.starts_before(p, probe) {
            return None;
        }
        let mut x = p;
        for _ in 0..=SPOT_WALK_LIMIT {
            // SAFETY: as above; each node stepped to along `level` is linked there.
            let next = unsafe { next_of(x, level) }.load(AtomicOrdering::Acquire);
            // SAFETY: a non-null next pointer is a linked node.
            if next.is_null() || unsafe { cmp_probe(next, probe) } != Ordering::Less {
                return Some((x, next));
            }
            x = next;
        }
        None
    }

    /// The remembered spot of the key of `hash`, walked forward to `probe` at its
    /// levels, and the first node at or after the probe; `None` when there is none or it
    /// does not lead to the probe within a few steps.
    fn remembered(&self, hash: u64, probe: &Probe<'_>) -> Option<(Spot, *mut Node)> {
        let starts = self.spots.get(hash)?;
        let mut prev = self.head_everywhere();
        let mut at = ptr::null_mut();
        for (level, &start) in starts.iter().enumerate().rev() {
            let (before, after) = self.walk_from(start, level, probe)?;
            prev[level] = before;
            at = after;
        }
        Some((
            Spot {
                prev,
                levels: SPOT_LEVELS,
            },
            at,
        ))
    }

    /// Inserts a version; any number of threads may insert at once. Versions of one
    /// key differ in LSN (the commit path gives every operation its own), so every insert
    /// is new. Lengths fit in 32 bits: keys are at most `MAX_KEY_SIZE` (4 KiB), values at
    /// most `MAX_VALUE_SIZE` (16 MiB), folded values `MAX_FOLDED_VALUE`.
    ///
    /// The search runs without a lock; the writer's lock covers only carving the node
    /// from the arena; each level is linked by a compare-and-swap of the predecessor's
    /// next pointer, from the bottom level up. A swap fails when another insert linked a
    /// node after the same predecessor meanwhile: the insert steps forward from there
    /// and tries again (nodes are never unlinked, so a predecessor stays valid).
    ///
    /// `remember` (the key's hash, for a key the memtable may hold already) looks the
    /// key's spot up in the spot table first and leaves where this version was linked
    /// there.
    pub(super) fn insert(
        &self,
        key: &[u8],
        remember: Option<u64>,
        lsn: u64,
        tag: Tag,
        tail: &[u8],
        spot: Option<&Spot>,
    ) {
        debug_assert!(u32::try_from(key.len()).is_ok() && u32::try_from(tail.len()).is_ok());
        let probe = Probe::new(key, lsn);
        // Carved first: the tower's height says how many levels of a spot it needs.
        let (node, height) = {
            let mut w = self.writer.lock();
            let height = Self::random_height(&mut w);
            let node = Self::alloc_node(&mut w, self.chunk_words, key, tail, lsn, tag, height);
            self.arena_bytes
                .store(w.arena_bytes, AtomicOrdering::Relaxed);
            (node, height)
        };
        // A located spot is this key's (its memtable and key hash matched): its bottom node,
        // at or after every node above it, must still be before the probe, which a rare
        // hash collision with another key would break.
        let hinted = spot
            .filter(|s| height <= s.levels && self.starts_before(s.prev[0], &probe))
            .map(|s| s.prev);
        // A taller tower needs more levels than a slot remembers: it searches.
        let remembered = || {
            let hash = remember.filter(|_| height <= SPOT_LEVELS)?;
            let (s, at) = self.remembered(hash, &probe)?;
            debug_assert_new(at, &probe);
            Some(s.prev)
        };
        let from = hinted.or_else(remembered);
        let prev = match from {
            // Every node before the key then is before the new version now; the links
            // below step over what was inserted since.
            Some(prev) => prev,
            None => {
                let mut prev = self.head_everywhere();
                let at_or_after = self.find(&probe, &mut prev);
                debug_assert_new(at_or_after, &probe);
                prev
            }
        };
        // The node each bottom level was linked after: the key's spot from now on.
        let mut linked_after = [ptr::null_mut::<Node>(); SPOT_LEVELS];
        for (i, slot) in linked_after.iter_mut().enumerate() {
            *slot = prev[i] as *mut Node;
        }
        // Levels above the search's top start at the head (`prev` holds it there). Readers
        // that see the new height before the links find null there and go down a level.
        self.height.fetch_max(height, AtomicOrdering::Relaxed);
        for (i, &start) in prev.iter().enumerate().take(height) {
            let mut p = start;
            loop {
                // SAFETY: `p` is the head or a linked node met at level `i` (so its tower
                // is above `i`); so is every node stepped to along level `i`.
                let link = unsafe { next_of(p, i) };
                let after = link.load(AtomicOrdering::Acquire);
                // SAFETY: a non-null next pointer is a linked node.
                if !after.is_null() && unsafe { cmp_probe(after, &probe) } == Ordering::Less {
                    // Linked after the search looked, and still before the new node.
                    p = after;
                    continue;
                }
                // SAFETY: `node` is written in full and `height` tall; its level-`i`
                // pointer is set before the Release swap that links it at that level.
                unsafe { next_of(node.as_ptr(), i) }.store(after, AtomicOrdering::Relaxed);
                if link
                    .compare_exchange(
                        after,
                        node.as_ptr(),
                        AtomicOrdering::Release,
                        AtomicOrdering::Relaxed,
                    )
                    .is_ok()
                {
                    if let Some(slot) = linked_after.get_mut(i) {
                        *slot = p as *mut Node;
                    }
                    break;
                }
            }
        }
        self.len.fetch_add(1, AtomicOrdering::Release);
        if let Some(h) = remember {
            // Below the new version's height its predecessors; above it, what the search
            // or the spot said (still before the key).
            self.spots.remember(h, linked_after);
        }
    }

    /// The version after `p` (the head or a linked node) at level 0.
    fn after(&self, p: *const Node) -> Option<Entry<'_>> {
        // SAFETY: `p` is the head or a linked node; every tower has level 0.
        let next = unsafe { next_of(p, 0) }.load(AtomicOrdering::Acquire);
        NonNull::new(next).map(Entry::at)
    }

    /// The first version.
    pub(super) fn first(&self) -> Option<Entry<'_>> {
        self.after(self.head.as_ptr())
    }

    /// The first version at or after `probe`.
    pub(super) fn seek(&self, probe: &Probe<'_>) -> Option<Entry<'_>> {
        let mut prev = self.head_everywhere();
        NonNull::new(self.find(probe, &mut prev)).map(Entry::at)
    }

    /// [`VersionList::seek`] of a probe of the key of `hash`, from the key's
    /// remembered spot when it leads there, else from the top.
    pub(super) fn seek_remembered(&self, probe: &Probe<'_>, hash: u64) -> Option<Entry<'_>> {
        match self.remembered(hash, probe) {
            Some((_, at)) => NonNull::new(at).map(Entry::at),
            None => self.seek(probe),
        }
    }

    /// [`VersionList::seek`], and where a version at `probe` goes ([`Spot`]): an insert
    /// of that version right after (a delta, once its base is looked at) then only links.
    /// Starts from the remembered spot of the key of `remember` when it leads there.
    pub(super) fn seek_spot(
        &self,
        probe: &Probe<'_>,
        remember: Option<u64>,
    ) -> (Option<Entry<'_>>, Spot) {
        if let Some((spot, at)) = remember.and_then(|h| self.remembered(h, probe)) {
            return (NonNull::new(at).map(Entry::at), spot);
        }
        let mut prev = self.head_everywhere();
        let at = NonNull::new(self.find(probe, &mut prev)).map(Entry::at);
        (
            at,
            Spot {
                prev,
                levels: MAX_HEIGHT,
            },
        )
    }

    /// The last version before `probe` (`None`: every version is at or after it).
    pub(super) fn seek_before(&self, probe: &Probe<'_>) -> Option<Entry<'_>> {
        let mut prev = self.head_everywhere();
        self.find(probe, &mut prev);
        let p = prev[0];
        if ptr::eq(p, self.head.as_ptr()) {
            return None;
        }
        NonNull::new(p as *mut Node).map(Entry::at)
    }

    /// The last version.
    pub(super) fn last(&self) -> Option<Entry<'_>> {
        let mut x: *const Node = self.head.as_ptr();
        let top = self.height.load(AtomicOrdering::Relaxed);
        for level in (0..top).rev() {
            loop {
                // SAFETY: as in `find`.
                let next = unsafe { next_of(x, level) }.load(AtomicOrdering::Acquire);
                if next.is_null() {
                    break;
                }
                x = next;
            }
        }
        if ptr::eq(x, self.head.as_ptr()) {
            return None;
        }
        NonNull::new(x as *mut Node).map(Entry::at)
    }

    /// The version before `e` (a search from the top: O(log n)).
    pub(super) fn before(&self, e: &Entry<'_>) -> Option<Entry<'_>> {
        // SAFETY: `e` is a linked node of this list.
        let prefix = unsafe { (*e.node.as_ptr()).prefix };
        self.seek_before(&Probe {
            prefix,
            key: e.key(),
            lsn: e.lsn(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Arc;

    fn rand(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    /// The model's order: key ascending, LSN descending.
    fn model_key(key: &[u8], lsn: u64) -> (Vec<u8>, std::cmp::Reverse<u64>) {
        (key.to_vec(), std::cmp::Reverse(lsn))
    }

    #[test]
    fn walks_seeks_and_steps_back_like_an_ordered_set() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        // Smaller under Miri (`cargo +nightly miri test -p hybridkv --lib skiplist`).
        let (rounds, max_len) = if cfg!(miri) { (3, 80) } else { (40, 600) };
        for round in 0..rounds {
            // Tiny chunks, so that nodes straddle none and big nodes get chunks of their own.
            let list = VersionList::for_budget(256 << 10);
            let mut model = BTreeSet::new();
            let n = rand(&mut seed) % max_len;
            for lsn in 1..=n {
                // Keys over a tiny alphabet with zeros, of 0..40 bytes (prefix ties, zero
                // padding), tails of 0..100 bytes, now and then one of 20 KiB.
                let len = (rand(&mut seed) % 41) as usize;
                let key: Vec<u8> = (0..len)
                    .map(|_| [0u8, 1, 0xff][(rand(&mut seed) % 3) as usize])
                    .collect();
                let tail_len = if rand(&mut seed).is_multiple_of(50) {
                    20_000
                } else {
                    (rand(&mut seed) % 100) as usize
                };
                let tail = vec![(lsn % 251) as u8; tail_len];
                list.insert(&key, None, lsn, (lsn % 4) as u8, &tail, None);
                model.insert((model_key(&key, lsn), tail_len));
            }
            assert_eq!(list.len(), model.len());
            // Forward walk.
            let mut walked = Vec::new();
            let mut e = list.first();
            while let Some(x) = e {
                assert_eq!(x.tag(), (x.lsn() % 4) as u8);
                assert!(x.tail().iter().all(|&b| b == (x.lsn() % 251) as u8));
                walked.push((model_key(x.key(), x.lsn()), x.tail().len()));
                e = x.next();
            }
            let want: Vec<_> = model.iter().cloned().collect();
            assert_eq!(walked, want, "round {round}");
            // Backward walk.
            let mut back = Vec::new();
            let mut e = list.last();
            while let Some(x) = e {
                back.push((model_key(x.key(), x.lsn()), x.tail().len()));
                e = list.before(&x);
            }
            back.reverse();
            assert_eq!(back, want, "round {round} backward");
            // Seeks at random probes.
            for _ in 0..if cfg!(miri) { 10 } else { 50 } {
                let len = (rand(&mut seed) % 41) as usize;
                let key: Vec<u8> = (0..len)
                    .map(|_| [0u8, 1, 0xff][(rand(&mut seed) % 3) as usize])
                    .collect();
                let lsn = rand(&mut seed) % (n + 2);
                let p = model_key(&key, lsn);
                let got = list
                    .seek(&Probe::new(&key, lsn))
                    .map(|x| model_key(x.key(), x.lsn()));
                let exp = model.range((p.clone(), 0)..).next().map(|(k, _)| k.clone());
                assert_eq!(got, exp);
                let got = list
                    .seek_before(&Probe::new(&key, lsn))
                    .map(|x| model_key(x.key(), x.lsn()));
                let exp = model.range(..(p, 0)).next_back().map(|(k, _)| k.clone());
                assert_eq!(got, exp);
            }
        }
    }

    #[test]
    fn an_empty_list_has_no_entries() {
        let list = VersionList::for_budget(0);
        assert!(list.is_empty());
        assert!(list.first().is_none());
        assert!(list.last().is_none());
        assert!(list.seek(&Probe::new(b"a", 1)).is_none());
        assert!(list.seek_before(&Probe::new(b"a", 1)).is_none());
        assert!(list.arena_bytes() >= 16 << 10);
    }

    #[test]
    fn readers_beside_the_writer_see_sorted_whole_versions() {
        // One writer inserting, two readers walking and seeking at the same time: every
        // version a reader meets is whole (its tail matches its LSN) and in order. (No
        // assumption about how the threads are scheduled: each reader checks whatever
        // it sees, however much of the insert sequence that is.)
        let list = Arc::new(VersionList::for_budget(1 << 20));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (list, done) = (Arc::clone(&list), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut seed = 77 + r;
                    let mut passes = 0u64;
                    loop {
                        let finished = done.load(AtomicOrdering::Acquire);
                        let mut prev: Option<(Vec<u8>, std::cmp::Reverse<u64>)> = None;
                        let mut e = list.first();
                        while let Some(x) = e {
                            let k = model_key(x.key(), x.lsn());
                            assert!(x.tail().len() == (x.lsn() % 64) as usize);
                            assert!(x.tail().iter().all(|&b| b == x.lsn() as u8));
                            if let Some(p) = &prev {
                                assert!(*p < k, "out of order");
                            }
                            prev = Some(k);
                            e = x.next();
                        }
                        let key = (rand(&mut seed) % 5000).to_be_bytes();
                        if let Some(x) = list.seek(&Probe::new(&key, u64::MAX)) {
                            assert!(x.key() >= &key[..]);
                        }
                        passes += 1;
                        if finished {
                            return passes;
                        }
                    }
                })
            })
            .collect();
        let mut seed = 5u64;
        let inserts = if cfg!(miri) { 300 } else { 20_000u64 };
        for lsn in 1..=inserts {
            let key = (rand(&mut seed) % 5000).to_be_bytes();
            let tail = vec![lsn as u8; (lsn % 64) as usize];
            list.insert(&key, None, lsn, 0, &tail, None);
        }
        done.store(true, AtomicOrdering::Release);
        for r in readers {
            assert!(r.join().unwrap() >= 1);
        }
        assert_eq!(list.len() as u64, inserts);
    }

    #[test]
    fn an_insert_from_a_spot_located_earlier_lands_in_order() {
        // Spots located, then many versions inserted (other keys, and newer and older
        // versions of the located keys), then the located versions inserted from their
        // spots: the list is in order and every version is found.
        let list = VersionList::for_budget(64 << 10);
        let mut seed = 11u64;
        let n = if cfg!(miri) { 40 } else { 2000u64 };
        let mut model = std::collections::BTreeSet::new();
        let mut lsn = 0u64;
        let mut next_lsn = || {
            lsn += 1;
            lsn
        };
        for _ in 0..n {
            let key = (rand(&mut seed) % 300).to_be_bytes();
            let l = next_lsn();
            list.insert(&key, None, l, 0, &[], None);
            model.insert(model_key(&key, l));
        }
        let keys: Vec<[u8; 8]> = (0..n / 10)
            .map(|_| (rand(&mut seed) % 300).to_be_bytes())
            .collect();
        let spots: Vec<Spot> = keys.iter().map(|k| list.locate(k)).collect();
        // LSNs for the located versions, taken now; newer versions of every key land
        // before them.
        let theirs: Vec<u64> = keys.iter().map(|_| next_lsn()).collect();
        for _ in 0..n {
            let key = (rand(&mut seed) % 300).to_be_bytes();
            let l = next_lsn();
            list.insert(&key, None, l, 0, &[], None);
            model.insert(model_key(&key, l));
        }
        for ((key, spot), l) in keys.iter().zip(&spots).zip(&theirs) {
            list.insert(key, None, *l, 1, &[], Some(spot));
            model.insert(model_key(key, *l));
        }
        let mut got = Vec::new();
        let mut e = list.first();
        while let Some(x) = e {
            got.push(model_key(x.key(), x.lsn()));
            e = x.next();
        }
        assert_eq!(got, model.into_iter().collect::<Vec<_>>());
        for (key, l) in keys.iter().zip(&theirs) {
            let e = list.seek(&Probe::new(key, *l)).expect("inserted");
            assert_eq!((e.key(), e.lsn(), e.tag()), (&key[..], *l, 1));
        }
    }

    /// Every version of `list` in order.
    fn walk(list: &VersionList) -> Vec<(Vec<u8>, std::cmp::Reverse<u64>)> {
        let mut got = Vec::new();
        let mut e = list.first();
        while let Some(x) = e {
            got.push(model_key(x.key(), x.lsn()));
            e = x.next();
        }
        got
    }

    #[test]
    fn versions_linked_from_remembered_spots_land_in_order_whatever_the_hash() {
        // Hot keys written again and again beside keys written once, each write of a hot
        // key through the spot table; the hash is the real one, one shared by every key
        // (each key finds another key's spot), or the key's last byte mod 4 (all four land
        // in one slot and make two tags, so keys meet spots of other keys there too).
        // The list stays in the model's order, and seeks from remembered spots find what
        // seeks from the top find.
        let hashes: [fn(&[u8]) -> u64; 3] = [
            crate::format::key_hash,
            |_| 0x5bd1_e995,
            |k| u64::from(k.last().copied().unwrap_or(0) % 4),
        ];
        for (round, hash) in hashes.into_iter().enumerate() {
            let list = VersionList::for_budget(64 << 10);
            let mut model = BTreeSet::new();
            let mut seed = 0x2545_F491_4F6C_DD1D ^ round as u64;
            let n = if cfg!(miri) { 200 } else { 20_000u64 };
            for lsn in 1..=n {
                let r = rand(&mut seed);
                // Keys 0..40 are hot; the others are written about once.
                let key = if r.is_multiple_of(3) {
                    (r % 40).to_be_bytes()
                } else {
                    (40 + r % 1_000_000).to_be_bytes()
                };
                let again = r.is_multiple_of(3).then(|| hash(&key));
                if r.is_multiple_of(7) {
                    let (_, spot) = list.seek_spot(&Probe::new(&key, lsn), again);
                    list.insert(&key, again, lsn, 2, &[], Some(&spot));
                } else {
                    list.insert(&key, again, lsn, 0, &[], None);
                }
                model.insert(model_key(&key, lsn));
            }
            assert_eq!(walk(&list), model.iter().cloned().collect::<Vec<_>>());
            let seeks = if cfg!(miri) { 60 } else { 2_000u64 };
            for i in 0..seeks {
                let key = (i % 50).to_be_bytes();
                let probe = Probe::new(&key, rand(&mut seed) % (n + 2));
                let want = list.seek(&probe).map(|e| (e.key().to_vec(), e.lsn()));
                let got = list
                    .seek_remembered(&probe, hash(&key))
                    .map(|e| (e.key().to_vec(), e.lsn()));
                assert_eq!(got, want, "round {round}, key {i}");
                let (spotted, _) = list.seek_spot(&probe, Some(hash(&key)));
                assert_eq!(spotted.map(|e| (e.key().to_vec(), e.lsn())), want);
            }
        }
    }

    #[test]
    fn a_spot_located_for_another_key_after_the_probe_is_not_started_from() {
        // What a 64-bit key-hash collision would hand an insert: a spot located for a key
        // that sorts after the one inserted. The insert must not start there (it would
        // link the version after nodes above it), and searches instead.
        let list = VersionList::for_budget(64 << 10);
        let mut model = BTreeSet::new();
        for i in 0..200u64 {
            let key = (i * 2).to_be_bytes();
            list.insert(&key, None, i + 1, 0, &[], None);
            model.insert(model_key(&key, i + 1));
        }
        let spot = list.locate(&300u64.to_be_bytes());
        for (lsn, k) in [(1_000u64, 7u64), (1_001, 151), (1_002, 299)] {
            let key = k.to_be_bytes();
            list.insert(&key, None, lsn, 0, &[], Some(&spot));
            model.insert(model_key(&key, lsn));
        }
        assert_eq!(walk(&list), model.iter().cloned().collect::<Vec<_>>());
    }

    #[test]
    fn a_hot_key_is_found_from_its_remembered_spot() {
        // With the real hash and keys spread over the table, a key written twice has its
        // spot remembered, and the spot leads straight to the key's newest version.
        let list = VersionList::for_budget(1 << 20);
        for i in 0..1_000u64 {
            list.insert(&(i * 2).to_be_bytes(), None, i + 1, 0, &[], None);
        }
        let key = 500u64.to_be_bytes();
        let hash = crate::format::key_hash(&key);
        list.insert(&key, Some(hash), 5_000, 0, &[], None);
        list.insert(&key, Some(hash), 5_001, 0, &[], None);
        let (spot, at) = list
            .remembered(hash, &Probe::new(&key, u64::MAX))
            .expect("remembered");
        assert_eq!(spot.levels, SPOT_LEVELS);
        // `at` is a linked node of `list`.
        let at = Entry::at(NonNull::new(at).expect("the key's newest version"));
        assert_eq!((at.key(), at.lsn()), (&key[..], 5_001));
        // SAFETY: `prev[0]` is a linked node of `list`: the version before the key's.
        assert_eq!(unsafe { key_of(spot.prev[0]) }, &498u64.to_be_bytes()[..]);
        // An insert not asked to remember its key leaves the table alone (the memtable
        // asks only for keys its filter says it holds: `memtable` tests that rule).
        let once = 1_001u64.to_be_bytes();
        list.insert(&once, None, 6_000, 0, &[], None);
        assert!(list
            .remembered(crate::format::key_hash(&once), &Probe::new(&once, u64::MAX))
            .is_none());
    }

    #[test]
    fn concurrent_writers_of_hot_keys_through_remembered_spots_leave_every_version_once() {
        // Four threads write versions of the same twelve keys (their remembered spots
        // refreshed by each other's writes) beside keys of their own, while a reader seeks
        // the hot keys from their spots: every seek lands at or after its probe, and at the
        // end every version is there once, in order, and seeks from spots find what seeks
        // from the top find. With the real hash and with one hash for every key (each key
        // then meets the others' spots). Nothing assumes how the threads are scheduled.
        let hashes: [fn(&[u8]) -> u64; 2] = [crate::format::key_hash, |_| 0x5bd1_e995];
        for hash in hashes {
            let list = Arc::new(VersionList::for_budget(256 << 10));
            let per = if cfg!(miri) { 50u64 } else { 10_000 };
            let threads: Vec<_> = (0..4u64)
                .map(|t| {
                    let list = Arc::clone(&list);
                    std::thread::spawn(move || {
                        let mut seed = 77 + t;
                        for i in 0..per {
                            let lsn = i * 4 + t + 1;
                            let r = rand(&mut seed);
                            if r.is_multiple_of(2) {
                                let key = (r % 12).to_be_bytes();
                                list.insert(&key, Some(hash(&key)), lsn, 0, &[], None);
                            } else {
                                let key = (1_000 + r % 100_000).to_be_bytes();
                                list.insert(&key, None, lsn, 0, &[], None);
                            }
                        }
                    })
                })
                .collect();
            let reader = {
                let list = Arc::clone(&list);
                std::thread::spawn(move || {
                    let mut seed = 5u64;
                    for _ in 0..per {
                        let r = rand(&mut seed);
                        let key = (r % 12).to_be_bytes();
                        let probe = Probe::new(&key, r % (4 * per + 2));
                        if let Some(e) = list.seek_remembered(&probe, hash(&key)) {
                            let (k, l) = (e.key(), e.lsn());
                            assert!(
                                k > &key[..] || (k == &key[..] && l <= probe.lsn),
                                "a seek from a spot landed before its probe"
                            );
                        }
                    }
                })
            };
            for t in threads {
                t.join().unwrap();
            }
            reader.join().unwrap();
            let got = walk(&list);
            assert_eq!(got.len() as u64, 4 * per);
            assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order or twice");
            for k in 0..12u64 {
                let key = k.to_be_bytes();
                for lsn in [0, per, 2 * per, 4 * per + 1] {
                    let probe = Probe::new(&key, lsn);
                    let want = list.seek(&probe).map(|e| (e.key().to_vec(), e.lsn()));
                    let got = list
                        .seek_remembered(&probe, hash(&key))
                        .map(|e| (e.key().to_vec(), e.lsn()));
                    assert_eq!(got, want);
                }
            }
        }
    }

    #[test]
    fn concurrent_inserters_and_a_reader_leave_every_version_once_in_order() {
        // Three threads insert interleaved LSNs over a small key range (so their swaps
        // race on the same predecessors) while a reader walks: at the end every version
        // is there once, whole and in order. Nothing assumes how the threads are
        // scheduled: the final walk checks whatever order the inserts ran in.
        let list = Arc::new(VersionList::for_budget(256 << 10));
        let per = if cfg!(miri) { 60u64 } else { 20_000 };
        let writers = 3u64;
        let key_of = |lsn: u64| (lsn.wrapping_mul(2_654_435_761) % 97).to_be_bytes();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (list, done) = (Arc::clone(&list), Arc::clone(&done));
            std::thread::spawn(move || loop {
                let finished = done.load(AtomicOrdering::Acquire);
                let mut prev: Option<(Vec<u8>, std::cmp::Reverse<u64>)> = None;
                let mut e = list.first();
                while let Some(x) = e {
                    let k = model_key(x.key(), x.lsn());
                    assert!(x.tail().iter().all(|&b| b == x.lsn() as u8));
                    if let Some(p) = &prev {
                        assert!(*p < k, "out of order");
                    }
                    prev = Some(k);
                    e = x.next();
                }
                if finished {
                    return;
                }
            })
        };
        let threads: Vec<_> = (0..writers)
            .map(|t| {
                let list = Arc::clone(&list);
                std::thread::spawn(move || {
                    // Writers 0 and 1 insert from a spot located one insert earlier
                    // (the other threads insert meanwhile); writer 2 searches.
                    let mut located: Option<(u64, Spot)> = None;
                    for i in 0..=per {
                        let lsn = 1 + i * writers + t;
                        let next = (t < 2 && i < per).then(|| (lsn, list.locate(&key_of(lsn))));
                        if let Some((l, spot)) = located.take() {
                            let tail = vec![l as u8; (l % 40) as usize];
                            list.insert(&key_of(l), None, l, 0, &tail, Some(&spot));
                        } else if t == 2 && i < per {
                            let tail = vec![lsn as u8; (lsn % 40) as usize];
                            list.insert(&key_of(lsn), None, lsn, 0, &tail, None);
                        }
                        located = next;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        done.store(true, AtomicOrdering::Release);
        reader.join().unwrap();
        let total = per * writers;
        assert_eq!(list.len() as u64, total);
        let mut want: Vec<_> = (1..=total).map(|l| model_key(&key_of(l), l)).collect();
        want.sort();
        let mut got = Vec::new();
        let mut e = list.first();
        while let Some(x) = e {
            assert_eq!(x.tail().len() as u64, x.lsn() % 40);
            got.push(model_key(x.key(), x.lsn()));
            e = x.next();
        }
        assert_eq!(got, want);
        // Every version is found by a seek too (the upper levels link it where it
        // belongs).
        for lsn in (1..=total).step_by(7) {
            let key = key_of(lsn);
            let e = list.seek(&Probe::new(&key, lsn)).expect("inserted");
            assert_eq!((e.key(), e.lsn()), (&key[..], lsn));
        }
    }

    #[test]
    fn a_reader_finds_every_version_published_before_it_looked() {
        // The writer publishes, after each insert, the LSN it inserted (Release); a reader
        // that loaded it (Acquire) must find that version and every older one by a seek,
        // and step back from it to a smaller one. Keys are 20 bytes sharing their first 16,
        // so the full-key comparison decides. Nothing assumes how threads are scheduled:
        // each check covers whatever was published when the reader looked.
        fn key_of(lsn: u64) -> Vec<u8> {
            format!("{:020}", lsn.wrapping_mul(2_654_435_761) % 3000).into_bytes()
        }
        let list = Arc::new(VersionList::for_budget(1 << 20));
        let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let inserts = if cfg!(miri) { 200 } else { 20_000u64 };
        let reader = {
            let (list, acked) = (Arc::clone(&list), Arc::clone(&acked));
            std::thread::spawn(move || {
                let mut seed = 99u64;
                let mut checks = 0u64;
                loop {
                    let upto = acked.load(AtomicOrdering::Acquire);
                    if upto > 0 {
                        let lsn = 1 + rand(&mut seed) % upto;
                        let key = key_of(lsn);
                        let e = list
                            .seek(&Probe::new(&key, lsn))
                            .expect("published version");
                        assert_eq!((e.key(), e.lsn()), (&key[..], lsn));
                        if let Some(b) = list.before(&e) {
                            assert!(model_key(b.key(), b.lsn()) < model_key(&key, lsn));
                        }
                        checks += 1;
                    }
                    if upto == inserts {
                        return checks;
                    }
                }
            })
        };
        for lsn in 1..=inserts {
            list.insert(&key_of(lsn), None, lsn, 0, &[], None);
            acked.store(lsn, AtomicOrdering::Release);
        }
        assert!(reader.join().unwrap() >= 1);
    }
}
