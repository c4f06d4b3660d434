//! [`SimFs`]: an in-memory [`FileSystem`] that simulates power loss, process crashes, I/O
//! errors and a full disk, for tests of the engine and of code built on it. The model is
//! documented on [`SimFs`].

use super::{DirLock, FileSystem, ReadableFile, WritableFile, IO_ALIGN};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes a writer buffers before handing them to the simulated OS (as `RealFs`).
const WRITE_CHUNK: usize = 256 << 10;
/// The unit a power loss tears ([`CrashKind::TornSector`]).
pub const SECTOR_SIZE: usize = 512;

/// What a crash leaves behind ([`SimFs::crash_image`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashKind {
    /// Power loss: every byte not made durable by `sync_data` is lost.
    DropUnsynced,
    /// Power loss: each file keeps a random prefix (from `seed` and its path) of its
    /// unsynced bytes, from none to all of them.
    KeepPrefix {
        /// Seed of the choice.
        seed: u64,
    },
    /// Power loss: each file with unsynced bytes keeps a random prefix of them (at least
    /// one byte), and the unsynced bytes of the last 512-byte sector it keeps are garbage
    /// (a sector torn while being written).
    TornSector {
        /// Seed of the cut and of the garbage.
        seed: u64,
    },
    /// The process dies, the machine does not: everything handed to the OS survives, and
    /// so do unsynced creates, renames and deletes. Durability is unchanged, so a power
    /// loss later (a crash image of the image) still drops what was never synced. Data
    /// still buffered in a writer is lost.
    ProcessCrash,
}

impl CrashKind {
    /// Whether this kind models a power loss (as opposed to a process crash).
    pub fn is_power_loss(self) -> bool {
        !matches!(self, CrashKind::ProcessCrash)
    }
}

/// How long an injected fault lasts ([`SimFs::fail_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Only that operation fails.
    Once,
    /// That operation and every later one fail (a device that stopped answering).
    FromThenOn,
}

/// One change to the simulated disk, as recorded in a [`SimHistory`].
#[derive(Debug, Clone)]
enum Mutation {
    CreateDir(PathBuf),
    /// An empty directory deleted: with it go the names a crash would still have shown
    /// inside it (deleted files whose removal was not yet durable).
    RemoveDir(PathBuf),
    Create {
        path: PathBuf,
        node: u64,
    },
    Write {
        node: u64,
        offset: u64,
        data: Vec<u8>,
    },
    SyncData {
        node: u64,
    },
    SyncDir(PathBuf),
    /// A second name for a file (a hard link): both names share one node.
    Link {
        from: PathBuf,
        to: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    Remove(PathBuf),
    Truncate {
        node: u64,
        len: u64,
    },
    PunchHole {
        node: u64,
        offset: u64,
        len: u64,
    },
}

/// One file's bytes.
#[derive(Debug, Clone, Default)]
struct Node {
    /// Bytes handed to the OS.
    data: Vec<u8>,
    /// `data[..synced]` is durable.
    synced: usize,
    /// Punched ranges `[start, end)`, sorted and disjoint.
    holes: Vec<(u64, u64)>,
}

impl Node {
    fn allocated(&self) -> u64 {
        let punched: u64 = self.holes.iter().map(|(s, e)| e - s).sum();
        (self.data.len() as u64).saturating_sub(punched)
    }

    /// Removes `[start, end)` from the holes (written bytes are allocated again).
    fn fill_holes(&mut self, start: u64, end: u64) {
        let mut out = Vec::with_capacity(self.holes.len() + 1);
        for &(s, e) in &self.holes {
            if e <= start || s >= end {
                out.push((s, e));
                continue;
            }
            if s < start {
                out.push((s, start));
            }
            if e > end {
                out.push((end, e));
            }
        }
        self.holes = out;
    }

    fn add_hole(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        self.fill_holes(start, end);
        self.holes.push((start, end));
        self.holes.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.holes.len());
        for &(s, e) in &self.holes {
            match merged.last_mut() {
                Some(last) if last.1 >= s => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.holes = merged;
    }

    fn clip_holes(&mut self) {
        let len = self.data.len() as u64;
        self.holes.retain(|(s, _)| *s < len);
        for h in &mut self.holes {
            h.1 = h.1.min(len);
        }
    }
}

/// The persistent part of the simulation: files and both namespaces.
#[derive(Debug, Clone, Default)]
struct Disk {
    nodes: BTreeMap<u64, Node>,
    next_node: u64,
    live: BTreeMap<PathBuf, u64>,
    durable: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
}

fn in_dir(path: &Path, dir: &Path) -> bool {
    path.parent() == Some(dir)
}

impl Disk {
    /// Applies one mutation (already validated).
    fn apply(&mut self, m: &Mutation) {
        match m {
            Mutation::CreateDir(path) => {
                for a in path.ancestors() {
                    self.dirs.insert(a.to_path_buf());
                }
            }
            Mutation::RemoveDir(path) => {
                self.dirs.remove(path);
                self.durable.retain(|p, _| !p.starts_with(path));
            }
            Mutation::Create { path, node } => {
                self.nodes.insert(*node, Node::default());
                self.next_node = self.next_node.max(node + 1);
                self.live.insert(path.clone(), *node);
            }
            Mutation::Write { node, offset, data } => {
                if let Some(n) = self.nodes.get_mut(node) {
                    let start = usize::try_from(*offset).unwrap_or(usize::MAX);
                    let end = start.saturating_add(data.len());
                    if n.data.len() < end {
                        n.data.resize(end, 0);
                    }
                    if let Some(dst) = n.data.get_mut(start..end) {
                        dst.copy_from_slice(data);
                    }
                    n.fill_holes(*offset, end as u64);
                }
            }
            Mutation::SyncData { node } => {
                if let Some(n) = self.nodes.get_mut(node) {
                    n.synced = n.data.len();
                }
            }
            Mutation::SyncDir(dir) => {
                self.durable.retain(|p, _| !in_dir(p, dir));
                for (p, id) in &self.live {
                    if in_dir(p, dir) {
                        self.durable.insert(p.clone(), *id);
                    }
                }
            }
            Mutation::Link { from, to } => {
                if let Some(&id) = self.live.get(from) {
                    self.live.insert(to.clone(), id);
                }
            }
            Mutation::Rename { from, to } => {
                if let Some(id) = self.live.remove(from) {
                    self.live.insert(to.clone(), id);
                }
            }
            Mutation::Remove(path) => {
                self.live.remove(path);
            }
            Mutation::Truncate { node, len } => {
                if let Some(n) = self.nodes.get_mut(node) {
                    n.data
                        .resize(usize::try_from(*len).unwrap_or(usize::MAX), 0);
                    n.synced = n.data.len();
                    n.clip_holes();
                }
            }
            Mutation::PunchHole { node, offset, len } => {
                if let Some(n) = self.nodes.get_mut(node) {
                    let flen = n.data.len() as u64;
                    let end = offset.saturating_add(*len).min(flen);
                    if *offset < end {
                        let (s, e) = (*offset as usize, end as usize);
                        if let Some(r) = n.data.get_mut(s..e) {
                            r.fill(0);
                        }
                        n.add_hole(*offset, end);
                    }
                }
            }
        }
    }

    /// Drops nodes nothing refers to any more.
    fn prune(&mut self, open: &BTreeMap<u64, usize>) {
        let used: BTreeSet<u64> = self
            .live
            .values()
            .chain(self.durable.values())
            .chain(open.keys())
            .copied()
            .collect();
        self.nodes.retain(|id, _| used.contains(id));
    }

    fn used_bytes(&self) -> u64 {
        let ids: BTreeSet<u64> = self.live.values().copied().collect();
        ids.iter()
            .filter_map(|id| self.nodes.get(id))
            .map(Node::allocated)
            .sum()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.as_os_str().is_empty() || self.dirs.contains(path)
    }

    /// The disk as a crash of `kind` would leave it.
    fn crash_image(&self, kind: CrashKind) -> Disk {
        if kind == CrashKind::ProcessCrash {
            let mut d = self.clone();
            d.prune(&BTreeMap::new());
            return d;
        }
        let mut out = Disk {
            dirs: self.dirs.clone(),
            ..Disk::default()
        };
        let mut renumber: BTreeMap<u64, u64> = BTreeMap::new();
        for (path, old) in &self.durable {
            let id = match renumber.get(old) {
                Some(&id) => id,
                None => {
                    let id = out.next_node;
                    out.next_node += 1;
                    renumber.insert(*old, id);
                    let node = self
                        .nodes
                        .get(old)
                        .map(|n| survivor(n, kind, path))
                        .unwrap_or_default();
                    out.nodes.insert(id, node);
                    id
                }
            };
            out.live.insert(path.clone(), id);
            out.durable.insert(path.clone(), id);
        }
        out
    }
}

/// splitmix64: a small seeded generator for crash images.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, path: &Path) -> Rng {
        // FNV-1a of the path, so every file gets its own stream.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in path.as_os_str().as_encoded_bytes() {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(seed ^ h)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What of `node` a power loss of `kind` leaves (all of it durable afterwards).
fn survivor(node: &Node, kind: CrashKind, path: &Path) -> Node {
    let synced = node.synced.min(node.data.len());
    let unsynced = node.data.len() - synced;
    let mut data = node.data.clone();
    match kind {
        CrashKind::DropUnsynced | CrashKind::ProcessCrash => data.truncate(synced),
        CrashKind::KeepPrefix { seed } => {
            let keep = synced + Rng::new(seed, path).below(unsynced + 1);
            data.truncate(keep);
        }
        CrashKind::TornSector { seed } => {
            if unsynced > 0 {
                let mut rng = Rng::new(seed, path);
                let keep = synced + 1 + rng.below(unsynced);
                data.truncate(keep);
                let sector = (keep - 1) / SECTOR_SIZE * SECTOR_SIZE;
                if let Some(torn) = data.get_mut(sector.max(synced)..keep) {
                    for b in torn {
                        *b = rng.next() as u8;
                    }
                }
            }
        }
    }
    let mut n = Node {
        synced: data.len(),
        data,
        holes: node.holes.clone(),
    };
    n.clip_holes();
    n
}

/// Faults and quota.
#[derive(Debug, Default)]
struct Faults {
    once: BTreeSet<u64>,
    from: Option<u64>,
    quota: Option<u64>,
    injected: u64,
    quota_hits: u64,
}

/// Everything behind the lock.
#[derive(Debug, Default)]
struct Inner {
    disk: Disk,
    ops: u64,
    mutations: u64,
    faults: Faults,
    locks: BTreeSet<PathBuf>,
    /// Open handles per node (keep unlinked files readable).
    open: BTreeMap<u64, usize>,
    history: Option<Vec<Mutation>>,
}

impl Inner {
    /// Numbers the next operation; `Some(error)` if a fault is placed on it.
    fn next_op(&mut self, op: &'static str, path: &Path) -> Option<Error> {
        let n = self.ops;
        self.ops += 1;
        let hit = self.faults.from.is_some_and(|k| n >= k) || self.faults.once.remove(&n);
        if !hit {
            return None;
        }
        self.faults.injected += 1;
        Some(Error::io(
            op,
            path,
            std::io::Error::other(format!("injected I/O fault at operation {n}")),
        ))
    }

    /// Starts an operation: numbers it and fails it if a fault is placed on it.
    fn begin(&mut self, op: &'static str, path: &Path) -> Result<()> {
        match self.next_op(op, path) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn mutate(&mut self, m: Mutation) {
        self.disk.apply(&m);
        self.mutations += 1;
        let prune = matches!(
            m,
            Mutation::Create { .. }
                | Mutation::SyncDir(_)
                | Mutation::Rename { .. }
                | Mutation::Link { .. }
                | Mutation::Remove(_)
                | Mutation::RemoveDir(_)
        );
        if let Some(h) = self.history.as_mut() {
            h.push(m);
        }
        if prune {
            self.disk.prune(&self.open);
        }
    }

    /// Fails with `StorageFull` if `growth` more bytes would exceed the quota.
    fn reserve(&mut self, growth: u64, path: &Path) -> Result<()> {
        let Some(quota) = self.faults.quota else {
            return Ok(());
        };
        if growth == 0 || self.disk.used_bytes().saturating_add(growth) <= quota {
            return Ok(());
        }
        self.faults.quota_hits += 1;
        Err(Error::io(
            "write",
            path,
            std::io::Error::new(
                ErrorKind::StorageFull,
                format!("no space left on device (SimFs quota of {quota} bytes)"),
            ),
        ))
    }

    fn file(&self, path: &Path, op: &'static str) -> Result<u64> {
        self.disk
            .live
            .get(path)
            .copied()
            .ok_or_else(|| Error::io(op, path, ErrorKind::NotFound.into()))
    }

    fn node(&self, path: &Path, op: &'static str) -> Result<&Node> {
        let id = self.file(path, op)?;
        self.disk
            .nodes
            .get(&id)
            .ok_or_else(|| Error::io(op, path, ErrorKind::NotFound.into()))
    }

    fn check_parent(&self, path: &Path, op: &'static str) -> Result<()> {
        match path.parent() {
            Some(p) if !self.disk.is_dir(p) => Err(Error::io(op, path, ErrorKind::NotFound.into())),
            _ => Ok(()),
        }
    }

    fn create_node(&mut self, path: &Path) -> u64 {
        let node = self.disk.next_node;
        self.mutate(Mutation::Create {
            path: path.to_path_buf(),
            node,
        });
        node
    }

    fn release(&mut self, node: u64) {
        if let Some(c) = self.open.get_mut(&node) {
            *c -= 1;
            if *c == 0 {
                self.open.remove(&node);
                self.disk.prune(&self.open);
            }
        }
    }
}

type Shared = Arc<Mutex<Inner>>;

/// An in-memory file system for tests: crash images, fault injection, a byte quota.
/// Cheap to clone; clones share one disk.
///
/// ```
/// use hybridkv::io::{CrashKind, SimFs};
/// use hybridkv::{Db, Options, WriteOptions};
/// use std::sync::Arc;
/// # fn main() -> hybridkv::Result<()> {
/// let fs = SimFs::new();
/// {
///     let db = Db::open_with_fs("/db", Options::default(), Arc::new(fs.clone()))?;
///     db.put_opt("a", "durable", &WriteOptions { sync: true })?;
///     db.put("b", "acknowledged, not synced")?;
///     // Power fails here: build the disk as it would come back.
///     let image = fs.crash_image(CrashKind::DropUnsynced);
///     drop(db);
///     let db = Db::open_with_fs("/db", Options::default(), Arc::new(image))?;
///     assert_eq!(db.get("a")?.as_deref(), Some(&b"durable"[..]));
/// }
/// # Ok(()) }
/// ```
///
/// # The model
///
/// - **Files** are nodes (inodes) that directory entries name. Every file keeps the bytes
///   handed to the "operating system" (its *written* bytes) and how many of them are
///   *durable*: `WritableFile::sync_data` makes every written byte durable. Writers buffer
///   appends in user space like [`super::RealFs`] (in 256 KiB chunks; `flush` hands the rest
///   over), so a process crash loses what is still buffered. Files are modelled as
///   append-only: the durable bytes are a prefix of the written bytes (a positional
///   overwrite inside that prefix, which the engine never does, counts as durable at once).
///   `truncate` is durable at once (it syncs, like `RealFs`); so is `punch_hole`, which zeroes
///   the range and keeps the length.
/// - **Names**: creates, renames, hard links and deletes change the *live* namespace at once and the
///   *durable* namespace only when `sync_dir` is called on their directory. A file removed
///   or replaced in the live namespace keeps its bytes while the durable namespace or an
///   open handle still refers to it. Directories (`create_dir_all`) are durable at once.
/// - **Locks** work like `flock`: a second [`FileSystem::lock`] of the same path fails with
///   `Error::Locked` until the first guard is dropped. Crash images hold no locks.
/// - **Space**: [`FileSystem::allocated_len`] is the file length minus the punched ranges
///   not written since. The quota ([`SimFs::set_quota`]) counts the allocated bytes of the
///   files the live namespace names (an unlinked file still open counts no more).
/// - **Operations**: every call (each `FileSystem` method, each `append`, `flush`,
///   `sync_data` and `read_exact_at`; not `len`) gets the next operation number
///   ([`SimFs::op_count`]); faults are placed by that number ([`SimFs::fail_at`]). Calls
///   that change what a crash could leave (a write reaching the OS, a sync, a namespace
///   change, a truncate, a hole) are *mutations*, counted by [`SimFs::mutation_count`]; a
///   file system made by [`SimFs::recording`] keeps them all ([`SimFs::history`]) so a test
///   can rebuild the disk as it was after any prefix of them ([`SimReplay`]).
///
/// # Crash images
///
/// [`SimFs::crash_image`] builds a fresh, independent file system holding what would be
/// found after a crash at this moment; see [`CrashKind`]. For the three power-loss kinds,
/// unsynced creates, renames and deletes are reverted (the durable namespace is what
/// comes back) and every byte of the image is durable. A [`CrashKind::ProcessCrash`] image
/// keeps the live namespace and every written byte, *with* their durability unchanged, so
/// a later power loss on the image still loses what was never synced.
#[derive(Clone)]
pub struct SimFs {
    inner: Shared,
}

impl Default for SimFs {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SimFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock();
        f.debug_struct("SimFs")
            .field("files", &g.disk.live.len())
            .field("ops", &g.ops)
            .field("mutations", &g.mutations)
            .finish()
    }
}

impl SimFs {
    /// An empty file system (holding only the root directory).
    pub fn new() -> SimFs {
        Self::from_disk(Disk::default(), false)
    }

    /// An empty file system that records every mutation, for [`SimFs::history`].
    /// The record holds every byte ever written: meant for short test workloads.
    pub fn recording() -> SimFs {
        Self::from_disk(Disk::default(), true)
    }

    fn from_disk(mut disk: Disk, record: bool) -> SimFs {
        disk.dirs.insert(PathBuf::from("/"));
        SimFs {
            inner: Arc::new(Mutex::new(Inner {
                disk,
                history: record.then(Vec::new),
                ..Inner::default()
            })),
        }
    }

    /// A fresh, independent file system holding what a crash of `kind` at this moment
    /// would leave (no faults, no quota, no locks, counters at zero).
    pub fn crash_image(&self, kind: CrashKind) -> SimFs {
        let disk = self.inner.lock().disk.crash_image(kind);
        Self::from_disk(disk, false)
    }

    /// Makes operation number `op` (see [`SimFs::op_count`]) fail with an `Error::Io`
    /// (kind `Other`): only it, or it and every later one. A failing write or sync of a
    /// file hands its buffered bytes to the OS first, then reports the failure (the bytes
    /// are written, not durable), as a failed `fsync` does.
    pub fn fail_at(&self, op: u64, mode: FailMode) {
        let mut g = self.inner.lock();
        match mode {
            FailMode::Once => {
                g.faults.once.insert(op);
            }
            FailMode::FromThenOn => {
                g.faults.from = Some(g.faults.from.map_or(op, |f| f.min(op)));
            }
        }
    }

    /// Removes every placed fault (the quota stays).
    pub fn clear_faults(&self) {
        let mut g = self.inner.lock();
        g.faults.once.clear();
        g.faults.from = None;
    }

    /// Limits the allocated bytes of all files to `quota` (`None`: unlimited). A write that
    /// would pass it fails whole with an `Error::Io` of kind `StorageFull` (ENOSPC).
    pub fn set_quota(&self, quota: Option<u64>) {
        self.inner.lock().faults.quota = quota;
    }

    /// Operations so far (the number the next one gets).
    pub fn op_count(&self) -> u64 {
        self.inner.lock().ops
    }

    /// Mutations so far (see the module documentation).
    pub fn mutation_count(&self) -> u64 {
        self.inner.lock().mutations
    }

    /// Faults injected so far by [`SimFs::fail_at`].
    pub fn faults_injected(&self) -> u64 {
        self.inner.lock().faults.injected
    }

    /// Writes refused so far for lack of space (see [`SimFs::set_quota`]).
    pub fn quota_failures(&self) -> u64 {
        self.inner.lock().faults.quota_hits
    }

    /// Allocated bytes of every file the live namespace names.
    pub fn used_bytes(&self) -> u64 {
        self.inner.lock().disk.used_bytes()
    }

    /// The current contents of the file at `path` (what a reader would see), if any.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let g = self.inner.lock();
        let id = g.disk.live.get(path)?;
        g.disk.nodes.get(id).map(|n| n.data.clone())
    }

    /// Every mutation so far, if this file system was made by [`SimFs::recording`].
    pub fn history(&self) -> Option<SimHistory> {
        let g = self.inner.lock();
        g.history.as_ref().map(|h| SimHistory {
            mutations: Arc::new(h.clone()),
        })
    }
}

/// The mutations a [`SimFs::recording`] file system went through, in order.
#[derive(Debug, Clone)]
pub struct SimHistory {
    mutations: Arc<Vec<Mutation>>,
}

impl SimHistory {
    /// Number of mutations.
    pub fn len(&self) -> usize {
        self.mutations.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.mutations.is_empty()
    }

    /// A replay positioned before the first mutation.
    pub fn replay(&self) -> SimReplay {
        SimReplay {
            history: self.clone(),
            at: 0,
            disk: Disk::default(),
        }
    }
}

/// Rebuilds the disk of a recorded run after any prefix of its mutations, moving forward.
#[derive(Debug)]
pub struct SimReplay {
    history: SimHistory,
    at: usize,
    disk: Disk,
}

impl SimReplay {
    /// Applies mutations until `k` of them are applied (at most the history's length;
    /// going back replays from the start).
    pub fn advance_to(&mut self, k: usize) {
        let k = k.min(self.history.len());
        if k < self.at {
            self.at = 0;
            self.disk = Disk::default();
        }
        for m in self.history.mutations.get(self.at..k).unwrap_or_default() {
            self.disk.apply(m);
        }
        self.at = k;
    }

    /// Mutations applied so far.
    pub fn position(&self) -> usize {
        self.at
    }

    /// What a crash of `kind` right after the applied mutations would leave.
    pub fn crash_image(&self, kind: CrashKind) -> SimFs {
        SimFs::from_disk(self.disk.crash_image(kind), false)
    }
}

struct SimWriter {
    inner: Shared,
    node: u64,
    path: PathBuf,
    direct: bool,
    /// Appended, not yet handed to the OS.
    buf: Vec<u8>,
    /// Bytes handed to the OS.
    written: u64,
}

impl SimWriter {
    /// Hands the first `n` buffered bytes to the OS.
    fn write_out(&mut self, g: &mut Inner, n: usize) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        if self.direct && !n.is_multiple_of(IO_ALIGN) {
            return Err(Error::InvalidArgument(format!(
                "direct-I/O write of {n} bytes to {} is not a multiple of {IO_ALIGN}",
                self.path.display()
            )));
        }
        let end = self.written + n as u64;
        let len = g.disk.nodes.get(&self.node).map_or(0, |x| x.data.len()) as u64;
        g.reserve(end.saturating_sub(len), &self.path)?;
        let data: Vec<u8> = self.buf.drain(..n).collect();
        g.mutate(Mutation::Write {
            node: self.node,
            offset: self.written,
            data,
        });
        self.written = end;
        Ok(())
    }
}

impl WritableFile for SimWriter {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let mut g = inner.lock();
        g.begin("write", &self.path)?;
        self.buf.extend_from_slice(data);
        if self.buf.len() >= WRITE_CHUNK {
            let n = self.buf.len() / WRITE_CHUNK * WRITE_CHUNK;
            self.write_out(&mut g, n)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let mut g = inner.lock();
        g.begin("write", &self.path)?;
        let n = self.buf.len();
        self.write_out(&mut g, n)
    }

    fn sync_data(&mut self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let mut g = inner.lock();
        let fault = g.next_op("fsync", &self.path);
        let n = self.buf.len();
        self.write_out(&mut g, n)?;
        if let Some(e) = fault {
            return Err(e);
        }
        g.mutate(Mutation::SyncData { node: self.node });
        Ok(())
    }

    fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    fn finish(&mut self) -> Result<()> {
        // Appends here are never reserved ahead: finishing is a flush.
        self.flush()
    }
}

impl Drop for SimWriter {
    fn drop(&mut self) {
        // Like `RealFs`: what is still buffered in user space is lost.
        self.inner.lock().release(self.node);
    }
}

struct SimReader {
    inner: Shared,
    node: u64,
    path: PathBuf,
    len: u64,
}

impl ReadableFile for SimReader {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("read", &self.path)?;
        let data = g
            .disk
            .nodes
            .get(&self.node)
            .map(|n| n.data.as_slice())
            .unwrap_or_default();
        super::read_from(data, offset, buf, &self.path)
    }

    fn len(&self) -> u64 {
        self.len
    }
}

impl Drop for SimReader {
    fn drop(&mut self) {
        self.inner.lock().release(self.node);
    }
}

struct SimLock {
    inner: Shared,
    path: PathBuf,
}

impl std::fmt::Debug for SimLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimLock").field("path", &self.path).finish()
    }
}

impl DirLock for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        self.inner.lock().locks.remove(&self.path);
    }
}

impl FileSystem for SimFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("create directory", path)?;
        if let Some(file) = path.ancestors().find(|a| g.disk.live.contains_key(*a)) {
            return Err(Error::io(
                "create directory",
                file,
                std::io::Error::new(ErrorKind::AlreadyExists, "a file is in the way"),
            ));
        }
        if !g.disk.dirs.contains(path) {
            g.mutate(Mutation::CreateDir(path.to_path_buf()));
        }
        Ok(())
    }

    fn create(&self, path: &Path, direct: bool) -> Result<Box<dyn WritableFile>> {
        let mut g = self.inner.lock();
        g.begin("create", path)?;
        g.check_parent(path, "create")?;
        if g.disk.is_dir(path) {
            return Err(Error::io(
                "create",
                path,
                std::io::Error::new(ErrorKind::IsADirectory, "is a directory"),
            ));
        }
        let node = g.create_node(path);
        *g.open.entry(node).or_insert(0) += 1;
        Ok(Box::new(SimWriter {
            inner: Arc::clone(&self.inner),
            node,
            path: path.to_path_buf(),
            direct,
            buf: Vec::new(),
            written: 0,
        }))
    }

    fn open(&self, path: &Path, _direct: bool) -> Result<Arc<dyn ReadableFile>> {
        let mut g = self.inner.lock();
        g.begin("open", path)?;
        let node = g.file(path, "open")?;
        let len = g.node(path, "open")?.data.len() as u64;
        *g.open.entry(node).or_insert(0) += 1;
        Ok(Arc::new(SimReader {
            inner: Arc::clone(&self.inner),
            node,
            path: path.to_path_buf(),
            len,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("rename", from)?;
        g.file(from, "rename")?;
        g.check_parent(to, "rename")?;
        g.mutate(Mutation::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("hard link", to)?;
        g.file(from, "hard link")?;
        g.check_parent(to, "hard link")?;
        if g.disk.live.contains_key(to) || g.disk.is_dir(to) {
            return Err(Error::io("hard link", to, ErrorKind::AlreadyExists.into()));
        }
        g.mutate(Mutation::Link {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("delete", path)?;
        g.file(path, "delete")?;
        g.mutate(Mutation::Remove(path.to_path_buf()));
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("delete directory", path)?;
        if !g.disk.dirs.contains(path) {
            return Err(Error::io(
                "delete directory",
                path,
                ErrorKind::NotFound.into(),
            ));
        }
        let occupied = g
            .disk
            .live
            .keys()
            .chain(g.disk.dirs.iter())
            .any(|p| p != path && p.starts_with(path));
        if occupied {
            return Err(Error::io(
                "delete directory",
                path,
                ErrorKind::DirectoryNotEmpty.into(),
            ));
        }
        g.mutate(Mutation::RemoveDir(path.to_path_buf()));
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut g = self.inner.lock();
        g.begin("list", dir)?;
        if !g.disk.is_dir(dir) {
            return Err(Error::io("list", dir, ErrorKind::NotFound.into()));
        }
        let names: BTreeSet<String> = g
            .disk
            .live
            .keys()
            .chain(g.disk.dirs.iter())
            .filter(|p| in_dir(p, dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        Ok(names.into_iter().collect())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("fsync directory", dir)?;
        if !g.disk.is_dir(dir) {
            return Err(Error::io(
                "fsync directory",
                dir,
                ErrorKind::NotFound.into(),
            ));
        }
        g.mutate(Mutation::SyncDir(dir.to_path_buf()));
        Ok(())
    }

    fn kind(&self, path: &Path) -> Result<Option<bool>> {
        let mut g = self.inner.lock();
        g.begin("stat", path)?;
        if g.disk.is_dir(path) {
            Ok(Some(true))
        } else {
            Ok(g.disk.live.contains_key(path).then_some(false))
        }
    }

    fn file_len(&self, path: &Path) -> Result<u64> {
        let mut g = self.inner.lock();
        g.begin("stat", path)?;
        Ok(g.node(path, "stat")?.data.len() as u64)
    }

    fn allocated_len(&self, path: &Path) -> Result<u64> {
        let mut g = self.inner.lock();
        g.begin("stat", path)?;
        Ok(g.node(path, "stat")?.allocated())
    }

    fn truncate(&self, path: &Path, len: u64) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("truncate", path)?;
        let node = g.file(path, "truncate")?;
        let old = g.node(path, "truncate")?.data.len() as u64;
        g.reserve(len.saturating_sub(old), path)?;
        g.mutate(Mutation::Truncate { node, len });
        Ok(())
    }

    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<()> {
        let mut g = self.inner.lock();
        g.begin("punch hole", path)?;
        let node = g.file(path, "punch hole")?;
        g.mutate(Mutation::PunchHole { node, offset, len });
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>> {
        let mut g = self.inner.lock();
        g.begin("create lock file", path)?;
        g.check_parent(path, "create lock file")?;
        if g.locks.contains(path) {
            return Err(Error::Locked {
                path: path.parent().unwrap_or(path).to_path_buf(),
            });
        }
        if !g.disk.live.contains_key(path) {
            g.create_node(path);
        }
        g.locks.insert(path.to_path_buf());
        Ok(Box::new(SimLock {
            inner: Arc::clone(&self.inner),
            path: path.to_path_buf(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn read(fs: &SimFs, path: &str) -> Option<Vec<u8>> {
        fs.read_file(&p(path))
    }

    /// `/d` with `a` (8 synced bytes, then 4 more flushed) and its name durable.
    fn setup() -> (SimFs, Box<dyn WritableFile>) {
        let fs = SimFs::new();
        fs.create_dir_all(&p("/d")).unwrap();
        let mut w = fs.create(&p("/d/a"), false).unwrap();
        w.append(b"durable!").unwrap();
        w.sync_data().unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        w.append(b"more").unwrap();
        w.flush().unwrap();
        (fs, w)
    }

    #[test]
    fn write_read_back_and_growth_seen_by_open_readers() {
        let (fs, mut w) = setup();
        let r = fs.open(&p("/d/a"), false).unwrap();
        assert_eq!(r.len(), 12);
        w.append(b"-tail").unwrap();
        assert_eq!(w.len(), 17);
        // Buffered in user space: not yet visible.
        assert_eq!(fs.file_len(&p("/d/a")).unwrap(), 12);
        w.flush().unwrap();
        let mut buf = [0u8; 17];
        r.read_exact_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"durable!more-tail");
        let mut past = [0u8; 2];
        match r.read_exact_at(16, &mut past) {
            Err(Error::Io { source, .. }) => assert_eq!(source.kind(), ErrorKind::UnexpectedEof),
            other => panic!("expected EOF, got {other:?}"),
        }
        assert!(fs.open(&p("/d/none"), false).is_err());
        assert_eq!(fs.list(&p("/d")).unwrap(), vec!["a".to_string()]);
        assert_eq!(fs.kind(&p("/d")).unwrap(), Some(true));
        assert_eq!(fs.kind(&p("/d/a")).unwrap(), Some(false));
        assert_eq!(fs.kind(&p("/d/b")).unwrap(), None);
    }

    #[test]
    fn a_directory_is_deleted_only_when_empty_and_takes_its_undurable_names_along() {
        let (fs, w) = setup();
        drop(w);
        match fs.remove_dir(&p("/d")) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), ErrorKind::DirectoryNotEmpty)
            }
            other => panic!("expected DirectoryNotEmpty, got {other:?}"),
        }
        // The file's deletion is not durable (no directory sync): a crash before the
        // directory went would show it again, one after must not show it inside a
        // directory that no longer exists.
        fs.remove(&p("/d/a")).unwrap();
        assert!(fs
            .crash_image(CrashKind::DropUnsynced)
            .read_file(&p("/d/a"))
            .is_some());
        fs.remove_dir(&p("/d")).unwrap();
        assert_eq!(fs.kind(&p("/d")).unwrap(), None);
        assert!(fs.list(&p("/d")).is_err());
        let after = fs.crash_image(CrashKind::DropUnsynced);
        assert_eq!(after.kind(&p("/d")).unwrap(), None);
        assert!(after.read_file(&p("/d/a")).is_none());
        match fs.remove_dir(&p("/d")) {
            Err(Error::Io { source, .. }) => assert_eq!(source.kind(), ErrorKind::NotFound),
            other => panic!("expected NotFound, got {other:?}"),
        }
    }

    #[test]
    fn big_appends_reach_the_os_in_chunks() {
        let fs = SimFs::new();
        let mut w = fs.create(&p("/big"), false).unwrap();
        w.append(&vec![7u8; WRITE_CHUNK + 10]).unwrap();
        assert_eq!(fs.file_len(&p("/big")).unwrap(), WRITE_CHUNK as u64);
        w.flush().unwrap();
        assert_eq!(fs.file_len(&p("/big")).unwrap(), WRITE_CHUNK as u64 + 10);
        let mut d = fs.create(&p("/direct"), true).unwrap();
        d.append(&[1u8; 100]).unwrap();
        assert!(matches!(d.flush(), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn power_loss_drops_unsynced_bytes_and_names() {
        let (fs, _w) = setup();
        let mut b = fs.create(&p("/d/b"), false).unwrap();
        b.append(b"new file").unwrap();
        b.sync_data().unwrap(); // data durable, name not
        let img = fs.crash_image(CrashKind::DropUnsynced);
        assert_eq!(read(&img, "/d/a").unwrap(), b"durable!");
        assert_eq!(read(&img, "/d/b"), None);
        assert_eq!(img.list(&p("/d")).unwrap(), vec!["a".to_string()]);
        fs.sync_dir(&p("/d")).unwrap();
        let img = fs.crash_image(CrashKind::DropUnsynced);
        assert_eq!(read(&img, "/d/b").unwrap(), b"new file");
        // An image is independent and fully durable.
        let again = img.crash_image(CrashKind::DropUnsynced);
        assert_eq!(read(&again, "/d/a").unwrap(), b"durable!");
    }

    #[test]
    fn unsynced_renames_and_deletes_are_reverted() {
        let (fs, _w) = setup();
        let mut t = fs.create(&p("/d/t.tmp"), false).unwrap();
        t.append(b"v2").unwrap();
        t.sync_data().unwrap();
        fs.sync_dir(&p("/d")).unwrap();
        fs.rename(&p("/d/t.tmp"), &p("/d/a")).unwrap();
        assert_eq!(read(&fs, "/d/a").unwrap(), b"v2");
        let img = fs.crash_image(CrashKind::DropUnsynced);
        assert_eq!(read(&img, "/d/a").unwrap(), b"durable!");
        assert_eq!(read(&img, "/d/t.tmp").unwrap(), b"v2");
        fs.sync_dir(&p("/d")).unwrap();
        let img = fs.crash_image(CrashKind::DropUnsynced);
        assert_eq!(read(&img, "/d/a").unwrap(), b"v2");
        assert_eq!(read(&img, "/d/t.tmp"), None);
        fs.remove(&p("/d/a")).unwrap();
        assert_eq!(read(&fs, "/d/a"), None);
        let img = fs.crash_image(CrashKind::DropUnsynced);
        assert_eq!(read(&img, "/d/a").unwrap(), b"v2");
        fs.sync_dir(&p("/d")).unwrap();
        assert_eq!(read(&fs.crash_image(CrashKind::DropUnsynced), "/d/a"), None);
    }

    #[test]
    fn keep_prefix_keeps_a_seeded_prefix_of_the_unsynced_bytes() {
        let (fs, mut w) = setup();
        w.append(&[b'x'; 3000]).unwrap();
        w.flush().unwrap();
        let full = read(&fs, "/d/a").unwrap();
        let mut lens = BTreeSet::new();
        for seed in 0..64 {
            let img = fs.crash_image(CrashKind::KeepPrefix { seed });
            let got = read(&img, "/d/a").unwrap();
            assert!(got.len() >= 8 && full.starts_with(&got), "seed {seed}");
            let same = fs.crash_image(CrashKind::KeepPrefix { seed });
            assert_eq!(read(&same, "/d/a").unwrap(), got, "deterministic");
            lens.insert(got.len());
        }
        assert!(lens.len() > 10, "prefix lengths vary: {lens:?}");
    }

    #[test]
    fn torn_sector_garbles_only_unsynced_bytes_of_the_last_sector() {
        let (fs, mut w) = setup();
        w.append(&[b'x'; 3000]).unwrap();
        w.flush().unwrap();
        let full = read(&fs, "/d/a").unwrap();
        let mut garbled = 0;
        for seed in 0..64 {
            let img = fs.crash_image(CrashKind::TornSector { seed });
            let got = read(&img, "/d/a").unwrap();
            assert!(got.len() > 8 && got.len() <= full.len());
            assert_eq!(&got[..8], b"durable!");
            let sector = (got.len() - 1) / SECTOR_SIZE * SECTOR_SIZE;
            let intact = sector.max(8);
            assert_eq!(got[..intact], full[..intact], "seed {seed}");
            if got[intact..] != full[intact..got.len()] {
                garbled += 1;
            }
        }
        assert!(garbled > 50, "{garbled}");
    }

    #[test]
    fn process_crash_keeps_everything_but_not_its_durability() {
        let (fs, mut w) = setup();
        w.append(b"buffered").unwrap(); // still in user space: lost
        fs.rename(&p("/d/a"), &p("/d/c")).unwrap();
        let img = fs.crash_image(CrashKind::ProcessCrash);
        assert_eq!(read(&img, "/d/c").unwrap(), b"durable!more");
        assert_eq!(read(&img, "/d/a"), None);
        let lost = img.crash_image(CrashKind::DropUnsynced);
        assert_eq!(read(&lost, "/d/a").unwrap(), b"durable!");
        assert_eq!(read(&lost, "/d/c"), None);
    }

    #[test]
    fn second_lock_fails_until_the_first_is_dropped() {
        let fs = SimFs::new();
        fs.create_dir_all(&p("/db")).unwrap();
        let l = fs.lock(&p("/db/LOCK")).unwrap();
        match fs.lock(&p("/db/LOCK")) {
            Err(Error::Locked { path }) => assert_eq!(path, p("/db")),
            other => panic!("expected Locked, got {other:?}"),
        }
        // A crash image holds no locks.
        assert!(fs
            .crash_image(CrashKind::ProcessCrash)
            .lock(&p("/db/LOCK"))
            .is_ok());
        drop(l);
        assert!(fs.lock(&p("/db/LOCK")).is_ok());
    }

    #[test]
    fn punch_hole_zeroes_and_frees() {
        let fs = SimFs::new();
        let mut w = fs.create(&p("/f"), false).unwrap();
        w.append(&[9u8; 10_000]).unwrap();
        w.flush().unwrap();
        fs.punch_hole(&p("/f"), 1000, 4000).unwrap();
        fs.punch_hole(&p("/f"), 3000, 4000).unwrap(); // overlaps
        assert_eq!(fs.file_len(&p("/f")).unwrap(), 10_000);
        assert_eq!(fs.allocated_len(&p("/f")).unwrap(), 10_000 - 6000);
        let data = read(&fs, "/f").unwrap();
        assert!(data[1000..7000].iter().all(|&b| b == 0));
        assert!(data[..1000].iter().chain(&data[7000..]).all(|&b| b == 9));
        assert_eq!(fs.used_bytes(), 4000);
    }

    #[test]
    fn faults_fail_the_numbered_operation_once_or_from_then_on() {
        let (fs, mut w) = setup();
        let n = fs.op_count();
        fs.fail_at(n + 1, FailMode::Once);
        w.append(b"1").unwrap();
        let err = w.append(b"2").unwrap_err();
        assert!(matches!(&err, Error::Io { source, .. } if source.kind() == ErrorKind::Other));
        w.append(b"3").unwrap();
        assert_eq!(fs.faults_injected(), 1);
        fs.fail_at(fs.op_count() + 2, FailMode::FromThenOn);
        w.flush().unwrap();
        fs.file_len(&p("/d/a")).unwrap();
        assert!(fs.file_len(&p("/d/a")).is_err());
        assert!(fs.list(&p("/d")).is_err());
        assert!(w.flush().is_err());
        fs.clear_faults();
        assert!(fs.list(&p("/d")).is_ok());
        assert_eq!(read(&fs, "/d/a").unwrap(), b"durable!more13");
    }

    #[test]
    fn a_failed_sync_leaves_the_bytes_written_but_not_durable() {
        let (fs, mut w) = setup();
        w.append(b"xyz").unwrap();
        fs.fail_at(fs.op_count(), FailMode::Once);
        assert!(w.sync_data().is_err());
        assert_eq!(read(&fs, "/d/a").unwrap(), b"durable!morexyz");
        let img = fs.crash_image(CrashKind::DropUnsynced);
        assert_eq!(read(&img, "/d/a").unwrap(), b"durable!");
    }

    #[test]
    fn quota_refuses_writes_with_storage_full_until_raised() {
        let fs = SimFs::new();
        fs.set_quota(Some(1000));
        let mut w = fs.create(&p("/f"), false).unwrap();
        w.append(&[1u8; 600]).unwrap();
        w.flush().unwrap();
        w.append(&[2u8; 600]).unwrap();
        match w.flush() {
            Err(Error::Io { source, .. }) => assert_eq!(source.kind(), ErrorKind::StorageFull),
            other => panic!("expected StorageFull, got {other:?}"),
        }
        assert_eq!(fs.file_len(&p("/f")).unwrap(), 600);
        assert_eq!(fs.quota_failures(), 1);
        fs.remove(&p("/f")).unwrap();
        assert_eq!(fs.used_bytes(), 0);
        fs.set_quota(Some(2000));
        w.flush().unwrap(); // the buffered bytes were kept
        assert_eq!(fs.used_bytes(), 0, "unlinked files do not count");
    }

    #[test]
    fn replay_rebuilds_every_intermediate_disk() {
        let fs = SimFs::recording();
        let mut snapshots = vec![fs.crash_image(CrashKind::ProcessCrash)];
        fs.create_dir_all(&p("/d")).unwrap();
        snapshots.push(fs.crash_image(CrashKind::ProcessCrash));
        let mut w = fs.create(&p("/d/a"), false).unwrap();
        snapshots.push(fs.crash_image(CrashKind::ProcessCrash));
        for i in 0..5u8 {
            w.append(&[i; 100]).unwrap();
            w.flush().unwrap();
            snapshots.push(fs.crash_image(CrashKind::ProcessCrash));
            if i % 2 == 0 {
                w.sync_data().unwrap();
                snapshots.push(fs.crash_image(CrashKind::ProcessCrash));
            }
            fs.sync_dir(&p("/d")).unwrap();
            snapshots.push(fs.crash_image(CrashKind::ProcessCrash));
        }
        fs.rename(&p("/d/a"), &p("/d/b")).unwrap();
        snapshots.push(fs.crash_image(CrashKind::ProcessCrash));
        let h = fs.history().unwrap();
        assert_eq!(h.len() as u64, fs.mutation_count());
        assert_eq!(h.len() + 1, snapshots.len());
        let mut r = h.replay();
        for (k, snap) in snapshots.iter().enumerate() {
            r.advance_to(k);
            for kind in [
                CrashKind::ProcessCrash,
                CrashKind::DropUnsynced,
                CrashKind::KeepPrefix { seed: 3 },
            ] {
                let a = r.crash_image(kind);
                let b = snap.crash_image(kind);
                for f in ["/d/a", "/d/b"] {
                    assert_eq!(read(&a, f), read(&b, f), "k {k} {kind:?} {f}");
                }
            }
        }
        r.advance_to(1);
        assert_eq!(r.position(), 1);
    }
}
