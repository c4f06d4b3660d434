//! The node cache's warm restart (`Options::reload_cache`): at a clean close the entries
//! the cache holds are named in the hint file (`CACHE_HINTS`, `cache::hints`); at the
//! next open a thread reads them back, so that a restarted process finds the working set
//! of the last one in memory within seconds.
//!
//! Owns: when the hint file is written (the first close of a writable open, before the
//! I/O is sealed) and read (a writable open), which named entries are still wanted (their
//! file live in its keyspace's current state), the order of the reload (file by file, as
//! the hint file lists them) and when it stops (the cache's room, a close), and waiting
//! for it ([`ReloadDone`]). Never: fails an open or a close (the hint file is advice),
//! evicts an entry to make room, or caches an entry unchecked (each file's own reload
//! checks its entries as its reads do: `LevelFile::reload_nodes`,
//! `SegmentFile::reload_entries`).

use crate::cache::hints;
use crate::engine::Engine;
use crate::error::Error;
use crate::filename::CACHE_HINTS;
use crate::io::{Io, IoComponent};
use parking_lot::{Condvar, Mutex};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Whether the reload started at open has ended, for `Db::wait_for_cache_reload`.
#[derive(Debug, Default)]
pub(crate) struct ReloadDone {
    done: Mutex<bool>,
    cv: Condvar,
}

impl ReloadDone {
    /// Already ended: no reload was started.
    pub(crate) fn ended() -> Self {
        ReloadDone {
            done: Mutex::new(true),
            cv: Condvar::new(),
        }
    }

    fn end(&self) {
        *self.done.lock() = true;
        self.cv.notify_all();
    }

    /// Blocks until the reload has ended.
    pub(crate) fn wait(&self) {
        let mut done = self.done.lock();
        while !*done {
            self.cv.wait(&mut done);
        }
    }
}

/// Names every entry the cache holds in the hint file, replacing the last one; with
/// `Options::reload_cache` off or no cache, nothing. A failure is logged, not returned:
/// nothing depends on the file.
pub(crate) fn write_hints(io: &Io, dir: &Path, root: &Engine) {
    if !root.opts.reload_cache || !root.cache.enabled() {
        return;
    }
    let data = hints::encode(root.cache.hinted_entries());
    if let Err(e) = io.write_atomic(dir, CACHE_HINTS, &data, IoComponent::CacheHints) {
        log::warn!("cache hints not written: {e}");
    }
}

/// Starts the thread that reads back what the hint file in `dir` names into the cache of
/// `engines` (the default keyspace's first), and returns it with what tells when it
/// ended; `None` when `Options::reload_cache` is off, there is no cache, or the thread
/// cannot start.
pub(crate) fn start(
    io: &Io,
    dir: &Path,
    engines: Vec<Arc<Engine>>,
) -> Option<(JoinHandle<()>, Arc<ReloadDone>)> {
    let root = engines.first()?;
    if !root.opts.reload_cache || !root.cache.enabled() {
        return None;
    }
    let done = Arc::new(ReloadDone::default());
    let io = io.clone();
    let path = dir.join(CACHE_HINTS);
    let ended = Arc::clone(&done);
    let spawned = spawn_reload(move || {
        // Ended however the reload ends (a panic included), so no waiter hangs.
        struct EndOnDrop(Arc<ReloadDone>);
        impl Drop for EndOnDrop {
            fn drop(&mut self) {
                self.0.end();
            }
        }
        let _end = EndOnDrop(ended);
        reload(&io, &path, &engines);
    });
    match spawned {
        Ok(handle) => Some((handle, done)),
        Err(e) => {
            log::warn!("cache reload not started: {e}");
            None
        }
    }
}

/// Starts the reload's thread (a test may make it fail, as a system out of threads would).
fn spawn_reload(body: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    #[cfg(test)]
    if NO_RELOAD_THREAD.with(std::cell::Cell::get) {
        return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
    }
    std::thread::Builder::new()
        .name("hybridkv-reload".into())
        .spawn(body)
}

#[cfg(test)]
thread_local! {
    /// Opens on this thread cannot start the reload's thread.
    static NO_RELOAD_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Reads the hint file at `path` and reads back, file by file, the entries it names of
/// files still live, while the cache has room and no engine is closed.
fn reload(io: &Io, path: &Path, engines: &[Arc<Engine>]) {
    let Some(root) = engines.first() else {
        return;
    };
    let data = match io.read_all(path, IoComponent::CacheHints) {
        Ok(data) => data,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return;
        }
        Err(e) => {
            log::warn!("cache hints not read: {e}");
            root.cache.note_hints_rejected();
            return;
        }
    };
    let entries = match hints::decode(&data) {
        Ok(entries) => entries,
        Err(why) => {
            log::warn!("{}: ignored: {why}", path.display());
            root.cache.note_hints_rejected();
            return;
        }
    };
    // Misses read their leaf alone meanwhile (`BlockCache::warm_read_bytes`).
    struct Reloading<'a>(&'a Engine);
    impl Drop for Reloading<'_> {
        fn drop(&mut self) {
            self.0.cache.set_reloading(false);
        }
    }
    root.cache.set_reloading(true);
    let _reloading = Reloading(root);
    let closed =
        |e: &Engine| e.closed.load(Ordering::Acquire) || root.closed.load(Ordering::Acquire);
    for group in entries.chunk_by(|a, b| (a.keyspace, a.file) == (b.keyspace, b.file)) {
        let (keyspace, file) = (group[0].keyspace, group[0].file);
        if closed(root) || !root.cache.has_room_to_reload(0) {
            break;
        }
        let Some(engine) = engines.iter().find(|e| e.keyspace == keyspace) else {
            continue;
        };
        let spans: Vec<(u64, u32)> = group.iter().map(|e| (e.tag, e.len)).collect();
        let mut go_on = || !closed(engine) && engine.cache.has_room_to_reload(0);
        // The file as the keyspace's current state holds it (none: merged away, freed).
        let (sv, _) = engine.snapshot();
        let (cached, read) = if let Some(run) = sv.version.all_runs().find(|r| r.id() == file) {
            run.reload_nodes(&spans, &mut go_on)
        } else if let Some(segment) = sv.segments.get(&file) {
            segment.reload_entries(&spans, &mut go_on)
        } else {
            (0, 0)
        };
        engine.cache.note_reloaded(cached, read);
    }
}

#[cfg(test)]
mod tests {
    use super::NO_RELOAD_THREAD;
    use crate::io::SimFs;
    use crate::{Db, Options};
    use std::sync::Arc;

    fn opts() -> Options {
        Options {
            memtable_size: 256 << 10,
            cache_bytes: 16 << 20,
            reload_cache: true,
            gc_interval: std::time::Duration::from_secs(3600),
            ..Options::default()
        }
    }

    fn key(i: u32) -> Vec<u8> {
        format!("k{:08}", i.wrapping_mul(2_654_435_761) % 100_000_007).into_bytes()
    }

    fn value(i: u32) -> Vec<u8> {
        vec![(i % 251) as u8; [20, 200, 2000][(i % 3) as usize]]
    }

    #[test]
    fn an_open_whose_reload_thread_cannot_start_serves_reads_and_closes() {
        let fs = Arc::new(SimFs::new());
        let n = 6_000;
        let db = Db::open_with_fs("/db", opts(), fs.clone()).unwrap();
        for i in 0..n {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
        for i in 0..n {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i)));
        }
        db.close().unwrap();
        assert!(fs
            .read_file(std::path::Path::new("/db/CACHE_HINTS"))
            .is_some());

        // No thread for the reload: the open succeeds without it, nothing is reloaded,
        // every read is served, and the close (which would wait for a reload) returns.
        NO_RELOAD_THREAD.with(|c| c.set(true));
        let opened = Db::open_with_fs("/db", opts(), fs.clone());
        NO_RELOAD_THREAD.with(|c| c.set(false));
        let db = opened.unwrap();
        db.wait_for_cache_reload();
        let s = db.stats().unwrap();
        assert_eq!((s.cache_reloaded, s.cache_reload_bytes), (0, 0), "{s}");
        for i in 0..n {
            assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
        }
        db.close().unwrap();

        // With a thread, the next open reloads what that close named.
        let db = Db::open_with_fs("/db", opts(), fs).unwrap();
        db.wait_for_cache_reload();
        assert!(db.stats().unwrap().cache_reloaded > 0);
        db.close().unwrap();
    }
}
