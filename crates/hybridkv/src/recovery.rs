//! Opening a database (`open_database`): validate the directory, take the lock, read the
//! keyspace catalog, load each keyspace's manifest, open its level files, sweep orphans,
//! cut torn tails, and replay the shared small log in LSN order from where the oldest
//! keyspace's last flush left off, each operation into its own keyspace.
//!
//! Owns: deciding, from what is on disk after any crash, the durable prefix to recover and
//! the engine state that holds it; and, at run time, making a new keyspace's directory
//! and removing a dropped one's. Never: runs after the engine is open (later installs go
//! through `VersionSet::log_and_apply`, by way of `Engine::install`), or accepts a write
//! before what it recovered is durable.

use crate::bucket::BucketStore;
use crate::cache::BlockCache;
use crate::catalog::Catalog;
use crate::engine::{BgState, Engine};
use crate::error::{Error, Result};
use crate::filename::{self, DbFile, FileKind};
use crate::io::{Io, IoComponent};
use crate::level::LevelFile;
use crate::log::large::{self, RecordIndex, SegmentFile, SegmentKind, SegmentTail};
use crate::log::small::{self, SmallLogWriter};
use crate::manifest::edit::VersionEdit;
use crate::manifest::version::Version;
use crate::manifest::ManifestState;
use crate::memtable::Memtable;
use crate::obsolete::{LiveFiles, Verdict};
use crate::options::Options;
use crate::options_file;
use crate::stats::Counters;
use crate::version_set::{Recovered, SegmentMeta, SuperVersion, VersionSet};
use crate::write::batch::{decode_ops, BatchOp};
use crate::write::{replay_op, WriteEnv, WritePath};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The newest large segment as recovery found it.
struct LargeTail {
    id: u64,
    /// Its valid records (before any damage).
    records: RecordIndex,
    /// The file's length if a damaged record was found with a valid one after it.
    damaged_len: Option<u64>,
}

/// One keyspace as recovery found it on disk, before the small log is replayed.
struct Loaded {
    keyspace: u32,
    dir: PathBuf,
    opts: Options,
    state: ManifestState,
    fresh: bool,
    cache: Arc<BlockCache>,
    version: Version,
    segments: BTreeMap<u64, Arc<SegmentFile>>,
    segment_meta: BTreeMap<u64, SegmentMeta>,
    large_tail: Option<LargeTail>,
    max_id: u64,
    /// What replay puts back.
    mem: Arc<Memtable>,
    /// The delta buckets' store (index, open segments).
    buckets: Arc<BucketStore>,
}

/// An open database: each keyspace's engine (the default one first) and the write path
/// they share.
pub(crate) struct Opened {
    pub engines: Vec<Arc<Engine>>,
    pub catalog: Catalog,
    pub writes: Arc<WritePath>,
}

/// Opens the database in `dir`: every keyspace, then one replay of the small log that
/// hands each operation to its keyspace. `read_only`: the caller's `Io` keeps every
/// change in memory, and a writer may be changing the directory while this reads it, so
/// a commit whose large value this open cannot see (a segment started after the directory
/// was listed, a value past the end of what was read) ends the replayed prefix instead of
/// being an error.
pub(crate) fn open_database(dir: &Path, opts: Options, io: Io, read_only: bool) -> Result<Opened> {
    prepare_dir(dir, &opts, &io)?;
    let lock = io.fs().lock(&dir.join(filename::LOCK))?;
    let catalog = Catalog::load(&io, dir)?;
    // One cache for the whole database: every keyspace reads through a view of it.
    let cache = BlockCache::configured(
        opts.cache_bytes,
        opts.pinned_index_bytes as u64,
        opts.large_pointer_table_bytes as u64,
        opts.warm_read_bytes as u64,
    );
    if !read_only {
        sweep_keyspace_dirs(&io, dir, &catalog)?;
    }
    // The other keyspaces first: the small log (in the default keyspace's directory) is
    // needed from the smallest replay start of any keyspace.
    let mut others = Vec::with_capacity(catalog.by_name.len());
    for (name, &id) in &catalog.by_name {
        let kdir = filename::keyspace_dir(dir, id);
        let stored = options_file::load(&io, &kdir)?.ok_or_else(|| {
            Error::corruption(
                kdir.join(filename::OPTIONS),
                0,
                format!("keyspace {name:?} has no options file"),
            )
        })?;
        let kopts = keyspace_options(stored, &opts);
        others.push(load_keyspace(
            id,
            &kdir,
            kopts,
            &io,
            &cache,
            read_only,
            u64::MAX,
        )?);
    }
    let floor = others
        .iter()
        .map(|k| k.state.log_min_id)
        .min()
        .unwrap_or(u64::MAX);
    let root = load_keyspace(0, dir, opts, &io, &cache, read_only, floor)?;
    let mut spaces = Vec::with_capacity(1 + others.len());
    spaces.push(root);
    spaces.extend(others);

    let last_lsn = replay(&io, dir, &mut spaces, catalog.next_id, read_only)?;

    let root_next_id = spaces[0].max_id + 1;
    let writer_id = root_next_id;
    let writer = SmallLogWriter::create(&io, dir, writer_id)?;
    let writes = Arc::new(WritePath::new(
        io.clone(),
        dir.to_path_buf(),
        writer,
        last_lsn.saturating_add(1),
    ));
    let mut engines = Vec::with_capacity(spaces.len());
    let mut lock = Some(lock);
    for (i, space) in spaces.into_iter().enumerate() {
        let next_id = if i == 0 {
            writer_id + 1
        } else {
            space.max_id + 1
        };
        let engine = assemble(
            space,
            &io,
            &writes,
            last_lsn,
            next_id,
            if i == 0 { lock.take() } else { None },
            read_only,
        )?;
        engines.push(engine);
    }
    {
        let mut log = writes.lock();
        for e in &engines {
            let env: Arc<dyn WriteEnv> = Arc::clone(e) as Arc<dyn WriteEnv>;
            let log_min = e.versions.lock().log_min_id();
            let mem = Arc::clone(&e.snapshot().0.mem);
            writes.register(&mut log, &env, mem, log_min);
        }
    }
    Ok(Opened {
        engines,
        catalog,
        writes,
    })
}

/// A keyspace's options: those stored with it (placement, sizes, thresholds), with what
/// is the database's to decide (the I/O mode, the merge operator, the one block cache, its
/// pinned-index budget and its reads around a leaf) from `db`'s.
pub(crate) fn keyspace_options(stored: Options, db: &Options) -> Options {
    Options {
        create_if_missing: false,
        direct_io: db.direct_io,
        mmap_reads: db.mmap_reads,
        mmap_log_writes: db.mmap_log_writes,
        merge_operator: db.merge_operator.clone(),
        cache_bytes: db.cache_bytes,
        pinned_index_bytes: db.pinned_index_bytes,
        warm_read_bytes: db.warm_read_bytes,
        ..stored
    }
}

/// Removes keyspace directories the catalog does not name (a create cut short before the
/// catalog named it, or a drop cut short after the catalog forgot it).
fn sweep_keyspace_dirs(io: &Io, dir: &Path, catalog: &Catalog) -> Result<()> {
    let root = dir.join(filename::KEYSPACE_DIR);
    if io.fs().kind(&root)? != Some(true) {
        return Ok(());
    }
    let named: Vec<PathBuf> = catalog
        .by_name
        .values()
        .map(|&id| filename::keyspace_dir(dir, id))
        .collect();
    let mut removed = false;
    for name in io.fs().list(&root)? {
        let path = root.join(&name);
        if !named.contains(&path) {
            log::info!(
                "{}: removing {} (no keyspace names it)",
                dir.display(),
                path.display()
            );
            remove_keyspace_dir(io, &path)?;
            removed = true;
        }
    }
    if removed {
        io.fs().sync_dir(&root)?;
    }
    Ok(())
}

/// Deletes a keyspace's directory and every file in it (a keyspace directory holds no
/// subdirectory).
pub(crate) fn remove_keyspace_dir(io: &Io, path: &Path) -> Result<()> {
    for name in io.fs().list(path)? {
        io.fs().remove(&path.join(name))?;
    }
    io.fs().remove_dir(path)
}

/// Validates the directory (creating it if allowed) and that it holds a database.
fn prepare_dir(dir: &Path, opts: &Options, io: &Io) -> Result<()> {
    opts.validate()?;
    match io.fs().kind(dir)? {
        Some(true) => {}
        Some(false) => {
            return Err(Error::InvalidArgument(format!(
                "{} is a file, not a database directory",
                dir.display()
            )))
        }
        None if opts.create_if_missing => io.fs().create_dir_all(dir)?,
        None => {
            return Err(Error::InvalidArgument(format!(
                "{} does not exist (and create_if_missing is false)",
                dir.display()
            )))
        }
    }
    let names = io.fs().list(dir)?;
    let has_manifest = names.iter().any(|n| n == filename::MANIFEST);
    if !has_manifest {
        let foreign: Vec<&String> = names
            .iter()
            .filter(|n| filename::parse(n).is_none())
            .collect();
        if let Some(first) = foreign.first() {
            return Err(Error::InvalidArgument(format!(
                "{} is not a hybridkv database (it holds other files, e.g. {first})",
                dir.display()
            )));
        }
        if !filename::numbered(&names, FileKind::Level).is_empty() {
            return Err(Error::corruption(
                dir.join(filename::MANIFEST),
                0,
                "manifest missing but level files exist",
            ));
        }
        if !opts.create_if_missing {
            return Err(Error::InvalidArgument(format!(
                "{} holds no hybridkv database (and create_if_missing is false)",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Creates keyspace `id`'s directory with an empty manifest whose replay starts at
/// `start` (the small-log file being appended to, and its first LSN: the keyspace holds
/// nothing before it), and its options. Durable when this returns; the caller then names
/// it in the catalog.
pub(crate) fn create_keyspace_dir(
    io: &Io,
    dir: &Path,
    opts: &Options,
    start: crate::write::LogStart,
) -> Result<()> {
    let parent = dir.parent().unwrap_or(dir);
    let existed = io.fs().kind(parent)?.is_some();
    io.fs().create_dir_all(dir)?;
    if !existed {
        if let Some(db) = parent.parent() {
            io.fs().sync_dir(db)?;
        }
    }
    io.fs().sync_dir(parent)?;
    options_file::store_if_changed(io, dir, opts)?;
    ManifestState {
        next_file_id: 1,
        log_min_id: start.id,
        flushed_lsn: start.first_lsn.saturating_sub(1),
        ..ManifestState::default()
    }
    .store(io, dir)
}

/// Loads one keyspace's files: its manifest, level files and log segments; sweeps what
/// no durable manifest names (small-log files only at or above `small_log_floor` and the
/// manifest's own replay start count as live); cuts the torn tail of its newest large
/// segment.
fn load_keyspace(
    keyspace: u32,
    dir: &Path,
    opts: Options,
    io: &Io,
    cache: &BlockCache,
    read_only: bool,
    small_log_floor: u64,
) -> Result<Loaded> {
    opts.validate()?;
    if !read_only {
        // Flushes and merges fold deltas: a writable open needs the operator the
        // database was written with (a read-only open reports a delta when it meets one).
        let stored = crate::options_file::stored_merge_operator(io, dir);
        let given = opts
            .merge_operator
            .as_ref()
            .map(|m| m.name().escape_debug().to_string().trim().to_string());
        if let Some(stored) = stored {
            if given.as_deref() != Some(stored.as_str()) {
                return Err(Error::InvalidArgument(format!(
                    "{} was written with merge operator {stored}, but Options::merge_operator is {}",
                    dir.display(),
                    given.as_deref().unwrap_or("not set")
                )));
            }
        }
    }
    // A new database gets its first manifest from the version set, once it exists,
    // before any new file is created.
    let (state, fresh) = match ManifestState::load(io, dir)? {
        Some(s) => (s, false),
        None => (
            ManifestState {
                next_file_id: 1,
                ..ManifestState::default()
            },
            true,
        ),
    };
    let cache = Arc::new(cache.view(keyspace));
    let mut version = Version::empty(opts.max_levels);
    for &(level, id, len) in &state.levels {
        let runs = (level as usize)
            .checked_sub(1)
            .and_then(|i| version.levels.get_mut(i))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "the database has level {level} but max_levels is {}",
                    opts.max_levels
                ))
            })?;
        let file = LevelFile::open(io, dir, id, Arc::clone(&cache))?;
        if file.file_len() != len {
            return Err(Error::corruption(
                file.path(),
                file.file_len(),
                format!(
                    "level file is {} bytes, the manifest says {len}",
                    file.file_len()
                ),
            ));
        }
        runs.push(Arc::new(file));
    }
    // Flushed range tombstones, waiting only on runs that exist (a run the manifest
    // no longer names merged away; one kept waiting forever would never be forgotten).
    let runs: Vec<u64> = version.all_runs().map(|f| f.id()).collect();
    version.range_tombstones = state.range_tombstones.clone();
    for t in &mut version.range_tombstones {
        t.pending.retain(|id| runs.contains(id));
    }
    version.range_tombstones.retain(|t| !t.pending.is_empty());

    // Sweep what no durable manifest names: unfinished outputs, flushed logs, freed
    // segments, temp files (`obsolete` holds the rule).
    let live = LiveFiles::from_manifest(&state).with_small_log_floor(small_log_floor);
    let mut max_id = state.next_file_id.saturating_sub(1);
    let mut segments: BTreeMap<u64, Arc<SegmentFile>> = BTreeMap::new();
    let mut segment_meta: BTreeMap<u64, SegmentMeta> = BTreeMap::new();
    for name in io.fs().list(dir)? {
        let path = dir.join(&name);
        let Some(file) = filename::parse(&name) else {
            continue;
        };
        if let DbFile::Numbered(_, id) = file {
            max_id = max_id.max(id);
        }
        if live.verdict(file) == Verdict::Obsolete {
            io.fs().remove(&path)?;
            continue;
        }
        let (kind, id) = match file {
            DbFile::Numbered(FileKind::LargeSegment, id) => (SegmentKind::Large, id),
            DbFile::Numbered(FileKind::TransientSegment, id) => (SegmentKind::Transient, id),
            _ => continue,
        };
        // A live large segment the manifest does not name was started after it was
        // stored: it holds no garbage anyone counted.
        let meta = state.segments.iter().find(|s| s.id == id).map_or(
            SegmentMeta {
                kind: SegmentKind::Large,
                owner: 0,
                garbage: 0,
            },
            |s| SegmentMeta {
                kind: s.kind,
                owner: s.owner,
                garbage: s.garbage,
            },
        );
        segment_meta.insert(id, meta);
        let segment = SegmentFile::open(io, dir, kind, id)?.with_cache(Arc::clone(&cache));
        segments.insert(id, Arc::new(segment));
    }
    // A segment registered in the manifest whose file was never created held nothing.
    // A read-only open beside a writer cannot tell that from a segment the writer freed
    // (and deleted) after this open loaded the manifest, whose pointers the loaded
    // levels may still hold: a freeing install changes the manifest, so a named segment
    // that is missing while the manifest changed fails this open (to be tried again).
    if read_only && !fresh {
        if let Some(id) = live.named_segments().find(|id| !segments.contains_key(id)) {
            if ManifestState::load(io, dir)?.as_ref() != Some(&state) {
                let kind = state
                    .segments
                    .iter()
                    .find(|s| s.id == id)
                    .map_or(SegmentKind::Large, |s| s.kind);
                return Err(Error::io(
                    "open log segment",
                    dir.join(kind.file_name(id)),
                    std::io::ErrorKind::NotFound.into(),
                ));
            }
        }
    }

    // The newest large segment is the only one that can hold records never made durable
    // (a full segment is synced before the next starts), so after a power loss its
    // tail may be lost or torn. Cut that tail, so the file reads cleanly once it is no
    // longer the newest, and make the rest durable; replay stops at the first commit
    // record whose large value did not survive.
    let mut large_tail: Option<LargeTail> = None;
    let newest_large = segment_meta
        .iter()
        .filter(|(_, m)| m.kind == SegmentKind::Large)
        .map(|(&id, _)| id)
        .max();
    if let Some(id) = newest_large {
        let path = dir.join(SegmentKind::Large.file_name(id));
        match large::scan_tail(&io.read_all(&path, IoComponent::LargeLog)?) {
            SegmentTail::Headerless => {
                segments.remove(&id);
                segment_meta.remove(&id);
                io.fs().remove(&path)?;
            }
            SegmentTail::Valid { end, records } => {
                // `truncate` makes the kept bytes durable too.
                io.fs().truncate(&path, end)?;
                // Opened again: the handle opened above knows the old length, and a
                // file read through a memory map must never be cut shorter under an
                // open handle (`FileSystem::open_mapped`).
                let reopened = SegmentFile::open(io, dir, SegmentKind::Large, id)?
                    .with_cache(Arc::clone(&cache));
                segments.insert(id, Arc::new(reopened));
                large_tail = Some(LargeTail {
                    id,
                    records,
                    damaged_len: None,
                });
            }
            // A bad record with a valid one after it is not what losing an unsynced
            // tail leaves: it may be media damage inside synced data. Not cut, and
            // replay does not stop at a commit whose value sits in the damaged part
            // (cutting there would silently drop every later write, synced ones
            // included): reading that value reports the corruption, as `check` does.
            // Replay stops only at a commit whose value lies past the end of the file
            // (never written).
            SegmentTail::Damaged { records } => {
                let len = io.fs().file_len(&path)?;
                large_tail = Some(LargeTail {
                    id,
                    records,
                    damaged_len: Some(len),
                });
            }
        }
    }

    // The delta buckets: each segment cut to what the manifest vouches for (bytes past it
    // were appended by a flush that never installed), and indexed.
    let (buckets, table) = BucketStore::open(io, dir, &state.buckets, !read_only)?;
    version.buckets = Arc::new(table);

    let mem = Arc::new(Memtable::with_budget(opts.memtable_size));
    Ok(Loaded {
        buckets,
        keyspace,
        dir: dir.to_path_buf(),
        opts,
        state,
        fresh,
        cache,
        version,
        segments,
        segment_meta,
        large_tail,
        max_id,
        mem,
    })
}

/// Whether replaying `op` (a put of a large value into keyspace `space`) would need a
/// value the large log lost with its torn tail.
fn value_lost(space: &Loaded, op: &BatchOp<'_>) -> bool {
    let Some(tail) = space.large_tail.as_ref() else {
        return false;
    };
    match op {
        BatchOp::PutLarge(k, p) if p.segment == tail.id => match tail.damaged_len {
            Some(len) => p.offset.saturating_add(u64::from(p.len)) > len,
            None => tail
                .records
                .get(&p.offset)
                .is_none_or(|(len, key)| *len != p.len || key.as_slice() != *k),
        },
        _ => false,
    }
}

/// Replays the small log (in `log_dir`), oldest file first, from the smallest replay start
/// of any keyspace; each operation goes to its keyspace's memtable unless that keyspace's
/// levels hold it already (its LSN is at most the keyspace's flushed LSN) or the keyspace
/// is gone (dropped). LSNs must rise without gaps across the whole log. Returns the last
/// LSN in use (replayed, or flushed by any keyspace).
fn replay(
    io: &Io,
    log_dir: &Path,
    spaces: &mut [Loaded],
    next_keyspace: u32,
    read_only: bool,
) -> Result<u64> {
    let start = spaces.iter().map(|s| s.state.log_min_id).min().unwrap_or(0);
    // Every keyspace's replay start is the first record after its flushed LSN, so the
    // smallest flushed LSN is where the first file to replay begins.
    let baseline = spaces
        .iter()
        .map(|s| s.state.flushed_lsn)
        .min()
        .unwrap_or(0);
    let max_flushed = spaces
        .iter()
        .map(|s| s.state.flushed_lsn)
        .max()
        .unwrap_or(0);
    let index: BTreeMap<u32, usize> = spaces
        .iter()
        .enumerate()
        .map(|(i, s)| (s.keyspace, i))
        .collect();
    let mut last_lsn = baseline;
    let logs = small::list(io, log_dir, start)?;
    let newest = logs.last().map(|(id, _)| *id);
    // A memtable switch does not sync the log it leaves, so after a power loss any log
    // may end in a torn record. The first torn tail ends the durable prefix: later logs
    // hold only writes that were never synced (a synced commit syncs every older log
    // first), and are discarded so that no write after the hole comes back.
    let mut ended = false;
    for (id, path) in &logs {
        if ended {
            io.fs().remove(path)?;
            continue;
        }
        let is_newest = Some(*id) == newest;
        let replayed = small::replay_file(io, path, is_newest)?;
        let mut cut = replayed.torn_at;
        for rec in replayed.records {
            let ops = decode_ops(&rec.payload, rec.count).ok_or_else(|| {
                Error::corruption(path, rec.offset, "small-log record holds a malformed batch")
            })?;
            if rec.first_lsn <= baseline {
                continue; // already in the levels of every keyspace
            }
            if rec.first_lsn <= last_lsn {
                return Err(Error::corruption(
                    path,
                    rec.offset,
                    format!("LSN {} does not follow {last_lsn}", rec.first_lsn),
                ));
            }
            // A record whose LSNs would run past the largest LSN (it passed its
            // checksum, so it was written so; only a damaged writer does that).
            if rec
                .first_lsn
                .checked_add(u64::from(rec.count))
                .is_none_or(|end| end == u64::MAX)
            {
                return Err(Error::corruption(
                    path,
                    rec.offset,
                    format!("LSN {} + {} operations overflows", rec.first_lsn, rec.count),
                ));
            }
            if rec.first_lsn != last_lsn + 1 {
                // LSNs are assigned without gaps and every one goes to the small log,
                // so a gap means records were lost before this one: an older log lost
                // a clean tail at a record boundary (a switch does not sync the log it
                // leaves) while this newer one reached the disk. Like a torn tail, it
                // ends the durable prefix: nothing from here on comes back.
                cut = Some(rec.offset);
                break;
            }
            // Each operation with its keyspace (an index into `spaces`, `None` for one
            // that is gone) and LSN; those a keyspace flushed already are left out.
            let mut routed: Vec<(usize, u64, BatchOp<'_>)> = Vec::with_capacity(ops.len());
            let mut space = index.get(&0).copied();
            let mut lsn = rec.first_lsn;
            for op in ops {
                if let BatchOp::Keyspace(k) = op {
                    // A keyspace is in the catalog before anything is written to it: an
                    // id the catalog never handed out is damage (a read-only open may
                    // meet one a writer created after it read the catalog).
                    if k >= next_keyspace && !read_only {
                        return Err(Error::corruption(
                            path,
                            rec.offset,
                            format!("record names keyspace {k}, never created"),
                        ));
                    }
                    space = index.get(&k).copied();
                    continue;
                }
                if let Some(i) = space {
                    if lsn > spaces[i].state.flushed_lsn {
                        routed.push((i, lsn, op));
                    }
                }
                lsn += 1;
            }
            let lost = routed.iter().any(|(i, _, op)| value_lost(&spaces[*i], op));
            // A read-only open beside a writer: a segment started after the directory
            // was listed holds values this open cannot read, so its first commit ends
            // the prefix this open sees. Only a segment newer than the manifest counts:
            // one older that is missing was freed by GC, and its values that the log
            // still holds are dead, shadowed by commits further on (the relocations and
            // newer writes GC made durable before freeing it), which must be replayed.
            let unseen_segment = read_only
                && routed.iter().any(|(i, _, op)| {
                    matches!(op, BatchOp::PutLarge(_, p)
                        if p.segment >= spaces[*i].state.next_file_id
                            && !spaces[*i].segments.contains_key(&p.segment))
                });
            if unseen_segment || (read_only && lost) {
                cut = Some(rec.offset);
                break;
            }
            if lost {
                // Written without sync and lost with the large log's tail: this
                // commit, and everything after it, never became durable.
                if !is_newest {
                    return Err(Error::corruption(
                        path,
                        rec.offset,
                        "small-log record points past the end of the large log",
                    ));
                }
                cut = Some(rec.offset);
                break;
            }
            for (i, lsn, op) in routed {
                let space = &spaces[i];
                replay_op(&space.mem, lsn, op, space.opts.merge_operator.as_deref());
            }
            last_lsn = rec.first_lsn + u64::from(rec.count) - 1;
        }
        // Cut the torn tail so the file reads cleanly from now on. A log may hold
        // records that reached the OS but not the disk (a process crash): make them
        // durable before any new write can be synced after them.
        match cut {
            Some(0) => io.fs().remove(path)?,
            Some(at) => io.fs().truncate(path, at)?,
            None => io.fs().truncate(path, io.fs().file_len(path)?)?,
        }
        ended = cut.is_some();
    }
    if ended {
        // The discarded logs must stay gone before new writes are acknowledged.
        io.fs().sync_dir(log_dir)?;
    }
    // A keyspace's flush may have made writes durable that the log then lost (its
    // unsynced tail): their LSNs are in use.
    Ok(last_lsn.max(max_flushed))
}

/// Opens keyspace `id` just made by `create_keyspace_dir` (nothing to replay), sharing
/// `writes` and the database's `cache`; the caller registers it.
pub(crate) fn open_created_keyspace(
    id: u32,
    dir: &Path,
    opts: Options,
    io: &Io,
    cache: &BlockCache,
    writes: &Arc<WritePath>,
    visible: u64,
) -> Result<Arc<Engine>> {
    let space = load_keyspace(id, dir, opts, io, cache, false, u64::MAX)?;
    let next_file_id = space.max_id + 1;
    assemble(space, io, writes, visible, next_file_id, None, false)
}

/// Builds a keyspace's engine from what recovery found and replayed.
fn assemble(
    space: Loaded,
    io: &Io,
    writes: &Arc<WritePath>,
    visible: u64,
    next_file_id: u64,
    lock: Option<Box<dyn crate::io::DirLock>>,
    read_only: bool,
) -> Result<Arc<Engine>> {
    let version = Arc::new(space.version);
    let versions = VersionSet::new(
        io.clone(),
        space.dir.clone(),
        Recovered {
            version: Arc::clone(&version),
            log_min_id: space.state.log_min_id,
            flushed_lsn: space.state.flushed_lsn,
            segments: space.segment_meta,
            levels: space.opts.max_levels + 2,
            sv: SuperVersion {
                mem: Arc::clone(&space.mem),
                imms: Vec::new(),
                version,
                segments: Arc::new(space.segments),
            },
            visible,
            next_file_id,
        },
    );
    if space.fresh {
        let mut vs = versions.lock();
        versions.log_and_apply(&mut vs, &VersionEdit::default(), None)?;
    }
    if !read_only {
        // The options this keyspace was last opened with, for tools that open it later
        // (`Db::stored_options`): stored once the open succeeded, so options the
        // database refuses are never recorded.
        crate::options_file::store_if_changed(io, &space.dir, &space.opts)?;
    }
    Ok(Arc::new(Engine {
        keyspace: space.keyspace,
        dir: space.dir,
        io: io.clone(),
        cache: space.cache,
        writes: Arc::clone(writes),
        versions,
        bg: Mutex::new(BgState::default()),
        bg_cv: Condvar::new(),
        poison: Mutex::new(None),
        poisoned: AtomicBool::new(false),
        counters: Counters::default(),
        dir_lock: Mutex::new(lock),
        gc_lock: Mutex::new(crate::log::large::SegmentSizes::default()),
        closed: AtomicBool::new(false),
        buckets: space.buckets,
        opts: space.opts,
    }))
}

#[cfg(test)]
mod tests {
    use crate::io::{Io, RealFs};
    use crate::log::small::{self, SmallLogWriter};
    use crate::{Db, Error, Options, WriteBatch};
    use std::sync::Arc;

    /// Found by fuzzing: a small-log record with a valid checksum whose LSNs run past
    /// `u64::MAX` overflowed the replay's LSN counter (a panic in debug builds).
    #[test]
    fn a_record_whose_lsns_overflow_is_corruption_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path(), Options::default()).unwrap();
            db.put(b"k", b"v").unwrap();
        }
        let io = Io::new(Arc::new(RealFs), false);
        let newest = small::list(&io, dir.path(), 0).unwrap().last().unwrap().0;
        let mut w = SmallLogWriter::create(&io, dir.path(), newest + 1).unwrap();
        let mut b = WriteBatch::new();
        b.put("x", "y").put("z", "w");
        w.add(u64::MAX - 1, b.count(), b.payload());
        w.commit(true).unwrap();
        drop(w);
        match Db::open(dir.path(), Options::default()) {
            Err(Error::Corruption { file, offset, what }) => {
                assert!(what.contains("overflows"), "{what}");
                assert!(
                    file.to_string_lossy().ends_with(".wal"),
                    "{}",
                    file.display()
                );
                assert_eq!(
                    offset, FIRST_RECORD,
                    "the record's offset, after the file header"
                );
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    /// Offset of the first record of a small-log file: after its 16-byte header.
    const FIRST_RECORD: u64 = 16;

    /// A record (valid checksum) whose LSN does not follow the records replayed before it
    /// is corruption naming the file and the record's offset, not offset 0.
    #[test]
    fn an_lsn_out_of_order_is_corruption_at_the_record() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path(), Options::default()).unwrap();
            db.put(b"a", b"1").unwrap();
            db.put(b"b", b"2").unwrap();
        }
        let io = Io::new(Arc::new(RealFs), false);
        let newest = small::list(&io, dir.path(), 0).unwrap().last().unwrap().0;
        let mut w = SmallLogWriter::create(&io, dir.path(), newest + 1).unwrap();
        let mut b = WriteBatch::new();
        b.put("c", "3");
        w.add(1, b.count(), b.payload()); // LSN 1 again: already replayed, not flushed
        w.commit(true).unwrap();
        drop(w);
        match Db::open(dir.path(), Options::default()) {
            Err(Error::Corruption { file, offset, what }) => {
                assert!(what.contains("does not follow"), "{what}");
                assert!(
                    file.ends_with(small::file_name(newest + 1)),
                    "{}",
                    file.display()
                );
                assert_eq!(offset, FIRST_RECORD);
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }
}
