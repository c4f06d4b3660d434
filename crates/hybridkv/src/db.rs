//! The public handle: `Db`, and the lifecycle of a database and its keyspaces.
//!
//! Owns: open (recovery of every keyspace, the flush of what it replayed, the runs'
//! wasted-search counts added back, the background and GC threads of each keyspace), the keyspace catalog at run time (create, open by
//! name, drop: in the order that keeps a crash from naming a keyspace without its files),
//! views across keyspaces, and close (refuse every entry point, stop the threads, seal
//! the I/O, release the directory lock). Never: holds data logic (every data operation is
//! a [`Keyspace`]'s, which `Db` dereferences to for the default keyspace).

use crate::catalog::{self, DEFAULT_KEYSPACE};
use crate::error::{Error, Result};
use crate::filename;
use crate::io::{FileSystem, Io, RealFs};
use crate::keyspace::Keyspace;
use crate::lifecycle::{spawn_threads, stop, Keyspaces, OpenKeyspace, Shared};
use crate::options::Options;
use crate::recovery::{self, Opened};
use crate::snapshot::Snapshot;
use crate::write::WriteEnv;
use parking_lot::Mutex;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

/// An open database. Cheap to clone; every clone is usable from any thread through `&self`.
/// When the last clone (and the last handle of its keyspaces) is dropped, or [`Db::close`]
/// is called, background work stops and the directory lock is released; every
/// acknowledged write is already in the log.
///
/// A `Db` is its default keyspace: every data method of [`Keyspace`] (put, get, range,
/// snapshot, flush, ...) is a method of `Db`. More keyspaces are made with
/// [`Db::create_keyspace`].
#[derive(Clone)]
pub struct Db {
    default: Keyspace,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("dir", &self.default.engine.dir)
            .finish()
    }
}

impl Deref for Db {
    type Target = Keyspace;
    fn deref(&self) -> &Keyspace {
        &self.default
    }
}

impl Db {
    /// Opens (or creates, with `create_if_missing`) the database in `path`, with every
    /// keyspace it has (each with the options it was created with, and the I/O mode and
    /// merge operator of `options`).
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        Self::open_with_fs(path, options, Arc::new(RealFs))
    }

    /// Opens the database through a caller-supplied file system (for tests that simulate
    /// crashes or inject faults).
    pub fn open_with_fs(
        path: impl AsRef<Path>,
        options: Options,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Db> {
        let io = Io::new(fs, options.direct_io)
            .with_mapped_reads(options.mmap_reads)
            .with_read_spin_us(options.read_spin_us)
            .with_mapped_log_writes(options.mmap_log_writes);
        let opened = recovery::open_database(path.as_ref(), options.clone(), io.clone(), false)?;
        for e in &opened.engines {
            e.flush_replayed()?;
        }
        // Before any merge can be picked: the searches runs wasted before the last close.
        crate::search_counts::restore(&io, path.as_ref(), &opened.engines);
        let shared = Self::share(opened, io, path.as_ref(), options);
        *shared.root_threads.lock() = spawn_threads(&shared.root)?;
        {
            let mut spaces = shared.spaces.lock();
            for k in spaces.open.values_mut() {
                k.threads = spawn_threads(&k.engine)?;
            }
            let engines = std::iter::once(Arc::clone(&shared.root))
                .chain(spaces.open.values().map(|k| Arc::clone(&k.engine)))
                .collect();
            if let Some((thread, done)) = crate::reload::start(&shared.io, &shared.dir, engines) {
                *shared.reload_thread.lock() = Some(thread);
                *shared.reload_done.lock() = done;
            }
        }
        Ok(Db {
            default: Keyspace {
                engine: Arc::clone(&shared.root),
                shared,
                name: Arc::from(DEFAULT_KEYSPACE),
                read_only: false,
            },
        })
    }

    fn share(opened: Opened, io: Io, dir: &Path, opts: Options) -> Arc<Shared> {
        let Opened {
            engines,
            catalog,
            writes,
        } = opened;
        let mut engines = engines.into_iter();
        // `open_database` returns the default keyspace first.
        let root = engines.next();
        let open = engines
            .map(|engine| {
                (
                    engine.keyspace,
                    OpenKeyspace {
                        engine,
                        threads: Vec::new(),
                    },
                )
            })
            .collect();
        Arc::new(Shared {
            root: root
                .unwrap_or_else(|| unreachable!("open_database returns the default keyspace")),
            writes,
            io,
            dir: dir.to_path_buf(),
            opts,
            root_threads: Mutex::new(Vec::new()),
            reload_thread: Mutex::new(None),
            reload_done: Mutex::new(Arc::new(crate::reload::ReloadDone::ended())),
            spaces: Mutex::new(Keyspaces { catalog, open }),
        })
    }

    /// Opens an existing database for reading only, beside a process that may be writing
    /// it: no lock is taken and nothing on disk changes. Recovery runs as usual (what the
    /// small log holds is replayed, a torn tail is cut), but every change it makes stays
    /// in memory. The handle reads the database as it was when it opened; files that the
    /// writer deletes later may make a read fail with `Error::Io`, so a long-lived
    /// reader should reopen. Writes, `flush`, `compact`, `compact_all` and `gc` fail with
    /// `Error::ReadOnly`; no background thread runs. Its keyspaces are read through
    /// [`Db::keyspace`].
    pub fn open_read_only(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        Self::open_read_only_with_fs(path, options, Arc::new(RealFs))
    }

    /// [`Db::open_read_only`] through a caller-supplied file system.
    pub fn open_read_only_with_fs(
        path: impl AsRef<Path>,
        options: Options,
        fs: Arc<dyn FileSystem>,
    ) -> Result<Db> {
        let options = Options {
            create_if_missing: false,
            ..options
        };
        let dir = path.as_ref();
        // A writer may install a flush, compaction or GC pass while this open reads, and
        // delete a file the manifest it loaded names before the open reached it: the open
        // then fails (the file is missing), and is tried again if the manifest changed
        // meanwhile. An open that succeeds holds every file it needs open, and what it
        // replays ends at anything it could not see (a gap in LSNs, a segment started
        // after it listed the directory), so it sees a prefix of the writer's commits.
        // A view is taken as of the open only if the manifest did not change while it
        // read; else it is tried again, and after `ATTEMPTS` tries of a writer installing
        // faster than the open reads, the last successful one is kept (a prefix of the
        // writer's commits, possibly without its newest).
        const ATTEMPTS: usize = 20;
        let mut attempt = 0;
        let mut last: Option<(Opened, Io)> = None;
        let (opened, io) = loop {
            attempt += 1;
            let before = state_bytes(fs.as_ref(), dir);
            let io = Io::read_only(Arc::clone(&fs), options.direct_io)
                .with_read_spin_us(options.read_spin_us);
            let opened = recovery::open_database(dir, options.clone(), io.clone(), true);
            let changed = state_bytes(fs.as_ref(), dir) != before;
            match opened {
                Ok(o) if !changed || attempt >= ATTEMPTS => break (o, io),
                Ok(o) => last = Some((o, io)),
                Err(e) if !changed || attempt >= ATTEMPTS => match last.take() {
                    Some(o) => break o,
                    None => return Err(e),
                },
                Err(_) => {}
            }
        };
        let shared = Self::share(opened, io, dir, options);
        Ok(Db {
            default: Keyspace {
                engine: Arc::clone(&shared.root),
                shared,
                name: Arc::from(DEFAULT_KEYSPACE),
                read_only: true,
            },
        })
    }

    /// Creates keyspace `name` with `options` (its placement thresholds, memtable and
    /// level sizes, background threads; the I/O mode, the merge operator, the block cache
    /// and the pinned-index budget are the database's) and returns its handle. Durable when this returns: the keyspace is
    /// there at every later open. `Error::InvalidArgument` if it exists already or the
    /// name is empty, longer than 255 bytes, or `"default"`.
    pub fn create_keyspace(&self, name: &str, options: Options) -> Result<Keyspace> {
        self.check_writable()?;
        catalog::check_name(name)?;
        let shared = &self.default.shared;
        let opts = recovery::keyspace_options(options, &shared.opts);
        opts.validate()?;
        let mut spaces = shared.spaces.lock();
        if spaces.catalog.by_name.contains_key(name) {
            return Err(Error::InvalidArgument(format!(
                "keyspace {name:?} exists already"
            )));
        }
        let id = spaces.catalog.next_id;
        let next_id = id.checked_add(1).ok_or_else(|| {
            Error::InvalidArgument("every keyspace id was used (the catalog is full)".into())
        })?;
        let kdir = filename::keyspace_dir(&shared.dir, id);
        // A directory left by a create cut short (an error, a crash) holds nothing named.
        if shared.io.fs().kind(&kdir)?.is_some() {
            recovery::remove_keyspace_dir(&shared.io, &kdir)?;
        }
        let engine = {
            // Under `log`, no commit runs: the keyspace starts at the current small-log
            // file, and no record before its creation can name it.
            let mut log = shared.writes.lock();
            let start = shared.writes.current_log();
            recovery::create_keyspace_dir(&shared.io, &kdir, &opts, start)?;
            let engine = recovery::open_created_keyspace(
                id,
                &kdir,
                opts,
                &shared.io,
                &shared.root.cache,
                &shared.writes,
                log.next_lsn.saturating_sub(1),
            )?;
            let env: Arc<dyn WriteEnv> = Arc::clone(&engine) as Arc<dyn WriteEnv>;
            let mem = Arc::clone(&engine.snapshot().0.mem);
            shared.writes.register(&mut log, &env, mem, start.id);
            engine
        };
        let mut catalog = spaces.catalog.clone();
        catalog.by_name.insert(name.to_string(), id);
        catalog.next_id = next_id;
        // The threads before the catalog: once the catalog names the keyspace, nothing
        // may fail that would unregister it (its replay start would stop holding the
        // small log back while its manifest still counts on it).
        let threads = match spawn_threads(&engine) {
            Ok(t) => t,
            Err(e) => {
                // Threads already started see the stop and end.
                stop(&engine);
                shared.writes.unregister(&mut shared.writes.lock(), id);
                return Err(e);
            }
        };
        if let Err(e) = catalog.store(&shared.io, &shared.dir) {
            // The catalog does not name it: its directory is swept at the next open.
            stop(&engine);
            for t in threads {
                let _ = t.join();
            }
            shared.writes.unregister(&mut shared.writes.lock(), id);
            return Err(e);
        }
        spaces.catalog = catalog;
        spaces.open.insert(
            id,
            OpenKeyspace {
                engine: Arc::clone(&engine),
                threads,
            },
        );
        log::info!(
            "{}: created keyspace {name:?} (id {id})",
            shared.dir.display()
        );
        Ok(Keyspace {
            engine,
            shared: Arc::clone(shared),
            name: Arc::from(name),
            read_only: false,
        })
    }

    /// The handle of keyspace `name` (`"default"`: the database's own). `Error::InvalidArgument`
    /// if the database has no such keyspace.
    pub fn keyspace(&self, name: &str) -> Result<Keyspace> {
        self.default.engine.check_open()?;
        if name == DEFAULT_KEYSPACE {
            return Ok(self.default.clone());
        }
        let shared = &self.default.shared;
        let spaces = shared.spaces.lock();
        let engine = spaces
            .catalog
            .by_name
            .get(name)
            .and_then(|id| spaces.open.get(id))
            .map(|k| Arc::clone(&k.engine))
            .ok_or_else(|| Error::InvalidArgument(format!("no keyspace named {name:?}")))?;
        Ok(Keyspace {
            engine,
            shared: Arc::clone(shared),
            name: Arc::from(name),
            read_only: self.default.read_only,
        })
    }

    /// The names of the database's keyspaces (not `"default"`), in order.
    pub fn keyspace_names(&self) -> Vec<String> {
        let spaces = self.default.shared.spaces.lock();
        spaces.catalog.by_name.keys().cloned().collect()
    }

    /// Drops keyspace `name`: its handles fail with `Error::Closed` from now on, its
    /// background work stops, and its files are deleted (their space comes back now).
    /// Durable when this returns. `Error::InvalidArgument` if there is no such keyspace
    /// (the default one cannot be dropped).
    pub fn drop_keyspace(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        let shared = &self.default.shared;
        let mut spaces = shared.spaces.lock();
        let id = *spaces
            .catalog
            .by_name
            .get(name)
            .ok_or_else(|| Error::InvalidArgument(format!("no keyspace named {name:?}")))?;
        let mut catalog = spaces.catalog.clone();
        catalog.by_name.remove(name);
        if let Some(k) = spaces.open.get_mut(&id) {
            // Its handles fail from now on and its background work stops; it stays
            // registered (its replay start holds the small log back) until the catalog
            // no longer names it.
            stop(&k.engine);
            for t in k.threads.drain(..) {
                let _ = t.join();
            }
            // A GC pass a user thread started on it (`Keyspace::gc`) ends first: it may
            // still write to the directory about to be deleted.
            drop(k.engine.gc_lock.lock());
        }
        // The catalog first: a crash after it leaves a directory no keyspace names, which
        // the next open deletes; a crash before it leaves the keyspace whole. Should the
        // store fail, the keyspace stays named and registered (closed until the next open).
        catalog.store(&shared.io, &shared.dir)?;
        spaces.catalog = catalog;
        spaces.open.remove(&id);
        // Commits naming it fail from now on; it no longer holds small-log files.
        shared.writes.unregister(&mut shared.writes.lock(), id);
        let kdir = filename::keyspace_dir(&shared.dir, id);
        recovery::remove_keyspace_dir(&shared.io, &kdir)?;
        if let Some(parent) = kdir.parent() {
            shared.io.fs().sync_dir(parent)?;
        }
        log::info!(
            "{}: dropped keyspace {name:?} (id {id})",
            shared.dir.display()
        );
        Ok(())
    }

    /// Snapshots of several keyspaces at one point: each sees every write (and every part
    /// of every batch across keyspaces) acknowledged before this call and none after.
    pub fn consistent_snapshots(&self, keyspaces: &[&Keyspace]) -> Result<Vec<Snapshot>> {
        self.default.engine.check_open()?;
        let shared = &self.default.shared;
        for k in keyspaces {
            k.engine.check_open()?;
            if !Arc::ptr_eq(&k.shared, shared) {
                return Err(Error::InvalidArgument(format!(
                    "keyspace {:?} belongs to another database",
                    k.name()
                )));
            }
        }
        // With their slots held no commit into them runs: every keyspace's captured state
        // holds every committed write, and no part of a batch is visible anywhere without
        // the rest.
        let ids: Vec<u32> = keyspaces.iter().map(|k| k.id()).collect();
        let _no_commits = shared.writes.hold(&ids)?;
        Ok(keyspaces
            .iter()
            .map(|k| Snapshot::capture(&k.engine))
            .collect())
    }

    /// Makes a consistent copy of the database in `dir` (a new directory; its parents are
    /// created), usable as a backup and opened like any database. It holds every write
    /// acknowledged before this call and none that started after it returned; writes
    /// may go on meanwhile. Immutable files (level runs, sealed log segments) are hard
    /// links, so `dir` must be on the same file system and costs little space until the
    /// source moves on; the small log and the log segment being appended to are copied.
    /// Durable when this returns; a checkpoint cut short (a crash, an error) has no
    /// `MANIFEST` and does not open as a database. Every keyspace is copied, at the same
    /// point (a batch across keyspaces is in the copy whole or not at all).
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<crate::CheckpointReport> {
        self.check_writable()?;
        self.default.engine.check_poison()?;
        let shared = &self.default.shared;
        // The keyspaces stay as they are while the copy is made.
        let spaces = shared.spaces.lock();
        let others: Vec<Arc<crate::engine::Engine>> = spaces
            .open
            .values()
            .map(|k| Arc::clone(&k.engine))
            .collect();
        crate::checkpoint::checkpoint(&shared.root, &others, &spaces.catalog, dir.as_ref())
    }

    /// The options the database in `path` was last opened with for writing (stored in its
    /// `OPTIONS` file at every open whose options changed), with `create_if_missing`
    /// false; `None` if the directory has no options file (a database made before this
    /// file existed, or no database). Reads only: takes no lock, changes nothing.
    pub fn stored_options(path: impl AsRef<Path>) -> Result<Option<Options>> {
        let io = Io::new(Arc::new(RealFs), false);
        Ok(
            crate::options_file::load(&io, path.as_ref())?.map(|o| Options {
                create_if_missing: false,
                ..o
            }),
        )
    }

    /// Stops background work and releases the directory. Every entry point of the other
    /// clones of this handle (and of its keyspaces' handles) fails with `Error::Closed`
    /// afterwards (an iterator created before may still read), and nothing of this
    /// instance changes the directory again.
    ///
    /// The last step cuts each log being appended to back to its records (a log appended
    /// to through a memory map reserved space past them). If a cut fails, the database is
    /// closed all the same and the first such failure is returned (`Error::Io` naming the
    /// file): every acknowledged write is still in the logs, and the next open cuts the
    /// tail of zeros left behind. Dropping the last handle instead only logs it.
    pub fn close(self) -> Result<()> {
        self.default.shared.shutdown()
    }

    /// Blocks until the cache's reload started at open (`Options::reload_cache`) has
    /// ended: every entry the last close named that was still live and had room is in the
    /// cache. Returns at once when no reload runs (none started, it ended, or the
    /// database was closed). Reads need not wait: they are served meanwhile.
    pub fn wait_for_cache_reload(&self) {
        let done = Arc::clone(&self.default.shared.reload_done.lock());
        done.wait();
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.default.shared.dir
    }
}

/// The bytes of a file, if it can be read.
fn file_bytes(fs: &dyn FileSystem, path: &Path) -> Option<Vec<u8>> {
    let file = fs.open(path, false).ok()?;
    let mut buf = vec![0u8; usize::try_from(file.len()).ok()?];
    file.read_exact_at(0, &mut buf).ok()?;
    Some(buf)
}

/// The bytes of every manifest (the database's and each keyspace's) and of the keyspace
/// catalog, as far as they can be read: a read-only open compares them before and after
/// it reads the rest, and tries again if a writer installed something meanwhile.
fn state_bytes(fs: &dyn FileSystem, dir: &Path) -> Vec<Option<Vec<u8>>> {
    let mut out = vec![
        file_bytes(fs, &dir.join(filename::MANIFEST)),
        file_bytes(fs, &dir.join(filename::KEYSPACES)),
    ];
    let spaces = dir.join(filename::KEYSPACE_DIR);
    if let Ok(mut names) = fs.list(&spaces) {
        names.sort();
        for name in names {
            out.push(file_bytes(fs, &spaces.join(name).join(filename::MANIFEST)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    /// A catalog whose every id was handed out refuses a new keyspace with an error, not
    /// an overflow (a panic in debug builds, a wrapped id 0 in release).
    #[test]
    fn a_full_catalog_refuses_a_new_keyspace() {
        let dir = tempfile::tempdir().unwrap();
        drop(Db::open(dir.path(), Options::default()).unwrap());
        let io = Io::new(Arc::new(RealFs), false);
        let full = Catalog {
            next_id: u32::MAX,
            ..Catalog::default()
        };
        full.store(&io, dir.path()).unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        match db.create_keyspace("one-too-many", Options::default()) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("every keyspace id"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        assert!(db.keyspace_names().is_empty());
    }
}
