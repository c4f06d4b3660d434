//! Opening a database (`Engine::open`): validate the directory, take the lock, load the
//! manifest, open the level files, sweep orphans, cut torn tails, and replay the small log
//! in LSN order from where the last flush left off.
//!
//! Owns: deciding, from what is on disk after any crash, the durable prefix to recover and
//! the engine state that holds it. Never: runs after the engine is open (later installs go
//! through `VersionSet::log_and_apply`, by way of `Engine::install`), or accepts a write
//! before what it recovered is durable.

use crate::cache::BlockCache;
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
use crate::stats::Counters;
use crate::version_set::{Recovered, SegmentMeta, SuperVersion, VersionSet};
use crate::write::batch::{decode_ops, BatchOp};
use crate::write::{replay_ops, LogState, WritePath};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::path::Path;
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

impl Engine {
    /// Opens the database in `dir`. `read_only`: the caller's `Io` keeps every change in
    /// memory, and a writer may be changing the directory while this reads it, so a commit
    /// whose large value this open cannot see (a segment started after the directory was
    /// listed, a value past the end of what was read) ends the replayed prefix instead of
    /// being an error.
    pub(crate) fn open(dir: &Path, opts: Options, io: Io, read_only: bool) -> Result<Arc<Engine>> {
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
        if !read_only {
            // Flushes and merges fold deltas: a writable open needs the operator the
            // database was written with (a read-only open reports a delta when it meets one).
            let stored = crate::options_file::stored_merge_operator(&io, dir);
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
        let lock = io.fs().lock(&dir.join(filename::LOCK))?;

        // A new database gets its first manifest from the version set, once it exists,
        // before any new file is created.
        let (state, fresh) = match ManifestState::load(&io, dir)? {
            Some(s) => (s, false),
            None => (
                ManifestState {
                    next_file_id: 1,
                    ..ManifestState::default()
                },
                true,
            ),
        };
        let cache = Arc::new(BlockCache::with_pinning(
            opts.cache_bytes,
            opts.pinned_index_bytes as u64,
        ));
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
            let file = LevelFile::open(&io, dir, id, Arc::clone(&cache))?;
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
        let live = LiveFiles::from_manifest(&state);
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
            let segment = SegmentFile::open(&io, dir, kind, id)?.with_cache(Arc::clone(&cache));
            segments.insert(id, Arc::new(segment));
        }
        // A segment registered in the manifest whose file was never created held nothing.
        // A read-only open beside a writer cannot tell that from a segment the writer freed
        // (and deleted) after this open loaded the manifest, whose pointers the loaded
        // levels may still hold: a freeing install changes the manifest, so a named segment
        // that is missing while the manifest changed fails this open (to be tried again).
        if read_only && !fresh {
            if let Some(id) = live.named_segments().find(|id| !segments.contains_key(id)) {
                if ManifestState::load(&io, dir)?.as_ref() != Some(&state) {
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
                    let reopened = SegmentFile::open(&io, dir, SegmentKind::Large, id)?
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

        // Replay the small log, oldest file first; LSNs must rise.
        let mem = Arc::new(Memtable::new());
        let mut last_lsn = state.flushed_lsn;
        let logs = small::list(&io, dir, state.log_min_id)?;
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
            let replay = small::replay_file(&io, path, is_newest)?;
            let mut cut = replay.torn_at;
            for rec in replay.records {
                let ops = decode_ops(&rec.payload, rec.count).ok_or_else(|| {
                    Error::corruption(path, rec.offset, "small-log record holds a malformed batch")
                })?;
                if rec.first_lsn <= state.flushed_lsn {
                    continue; // already in the levels
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
                let value_lost = large_tail.as_ref().is_some_and(|tail| {
                    ops.iter().any(|op| match op {
                        BatchOp::PutLarge(k, p) if p.segment == tail.id => match tail.damaged_len {
                            Some(len) => p.offset.saturating_add(u64::from(p.len)) > len,
                            None => tail
                                .records
                                .get(&p.offset)
                                .is_none_or(|(len, key)| *len != p.len || key.as_slice() != *k),
                        },
                        _ => false,
                    })
                });
                // A read-only open beside a writer: a segment started after the directory
                // was listed holds values this open cannot read, so its first commit ends
                // the prefix this open sees. Only a segment newer than the manifest counts:
                // one older that is missing was freed by GC, and its values that the log
                // still holds are dead, shadowed by commits further on (the relocations and
                // newer writes GC made durable before freeing it), which must be replayed.
                let unseen_segment = read_only
                    && ops.iter().any(|op| {
                        matches!(op, BatchOp::PutLarge(_, p)
                            if p.segment >= state.next_file_id
                                && !segments.contains_key(&p.segment))
                    });
                if unseen_segment || (read_only && value_lost) {
                    cut = Some(rec.offset);
                    break;
                }
                if value_lost {
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
                last_lsn = replay_ops(&mem, rec.first_lsn, ops, opts.merge_operator.as_deref());
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
            io.fs().sync_dir(dir)?;
        }

        let version = Arc::new(version);
        let versions = VersionSet::new(
            io.clone(),
            dir.to_path_buf(),
            Recovered {
                version: Arc::clone(&version),
                log_min_id: state.log_min_id,
                flushed_lsn: state.flushed_lsn,
                segments: segment_meta,
                levels: opts.max_levels + 2,
                sv: SuperVersion {
                    mem: Arc::clone(&mem),
                    imms: Vec::new(),
                    version,
                    segments: Arc::new(segments),
                },
                visible: last_lsn,
                next_file_id: max_id + 1,
            },
        );
        if fresh {
            let mut vs = versions.lock();
            versions.log_and_apply(&mut vs, &VersionEdit::default(), None)?;
        }
        let writer = SmallLogWriter::create(&io, dir, versions.alloc_file_id())?;
        if !read_only {
            // The options this database was last opened with, for tools that open it
            // later (`Db::stored_options`): stored once the open succeeded, so options
            // the database refuses are never recorded.
            crate::options_file::store_if_changed(&io, dir, &opts)?;
        }
        let engine = Engine {
            dir: dir.to_path_buf(),
            io,
            cache,
            writes: WritePath::new(
                LogState {
                    writer,
                    unsynced: Vec::new(),
                    large: None,
                    mem,
                    next_lsn: last_lsn.saturating_add(1),
                },
                state.log_min_id,
            ),
            versions,
            bg: Mutex::new(BgState::default()),
            bg_cv: Condvar::new(),
            poison: Mutex::new(None),
            poisoned: AtomicBool::new(false),
            counters: Counters::default(),
            dir_lock: Mutex::new(Some(lock)),
            gc_lock: Mutex::new(()),
            closed: AtomicBool::new(false),
            opts,
        };
        Ok(Arc::new(engine))
    }
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
