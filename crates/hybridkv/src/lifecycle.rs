//! What every handle of one open database shares ([`Shared`]): the engine of each
//! keyspace, the write path they share, the keyspace catalog, the background threads; and
//! closing it all.
//!
//! Owns: starting a keyspace's background threads, stopping them, and the order of a close
//! (refuse every entry point, join the threads, name the cache's entries and save the
//! runs' wasted-search counts for the next open, hand the log's tail to the OS, seal the I/O, release the directory lock). Never: opens, creates or drops a keyspace (`db`
//! does), or serves a read or write.

use crate::catalog::Catalog;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::io::Io;
use crate::options::Options;
use crate::write::WritePath;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// One open keyspace other than the default: its engine and background threads.
pub(crate) struct OpenKeyspace {
    pub engine: Arc<Engine>,
    pub threads: Vec<JoinHandle<()>>,
}

/// The keyspaces: the catalog as stored, and the open engine of each.
pub(crate) struct Keyspaces {
    pub catalog: Catalog,
    pub open: BTreeMap<u32, OpenKeyspace>,
}

/// What every handle of one open database shares.
pub(crate) struct Shared {
    pub root: Arc<Engine>,
    pub writes: Arc<WritePath>,
    pub io: Io,
    pub dir: PathBuf,
    /// The options the database was opened with (a keyspace takes its I/O mode and merge
    /// operator from them).
    pub opts: Options,
    pub root_threads: Mutex<Vec<JoinHandle<()>>>,
    /// The thread reading back the cache's entries of the last close (`crate::reload`),
    /// joined at close.
    pub reload_thread: Mutex<Option<JoinHandle<()>>>,
    /// Whether that reload has ended (`Db::wait_for_cache_reload`).
    pub reload_done: Mutex<Arc<crate::reload::ReloadDone>>,
    /// Taken alone (never under another lock of the engine's).
    pub spaces: Mutex<Keyspaces>,
}

impl Shared {
    /// Closes: entry points refuse from now on, background threads stop, then the disk
    /// is sealed (changes in flight finish, later ones fail with `Error::Closed`), and only
    /// then is the directory lock released, so nothing of this instance can touch a
    /// directory another instance may open next. Idempotent. Returns the first failure
    /// to cut a log to its records (`LogState::finish_all`): closed all the same.
    pub(crate) fn shutdown(&self) -> Result<()> {
        let mut spaces = self.spaces.lock();
        let engines: Vec<Arc<Engine>> = std::iter::once(Arc::clone(&self.root))
            .chain(spaces.open.values().map(|k| Arc::clone(&k.engine)))
            .collect();
        for e in &engines {
            stop(e);
        }
        for t in self.root_threads.lock().drain(..) {
            let _ = t.join();
        }
        for k in spaces.open.values_mut() {
            for t in k.threads.drain(..) {
                let _ = t.join();
            }
        }
        if let Some(t) = self.reload_thread.lock().take() {
            let _ = t.join();
        }
        // The first close of a writable open (the one holding the directory lock) names
        // what the cache holds for the next open; a poisoned one does not.
        // It also saves the searches each run wasted, for the next open's merges
        // (`crate::search_counts`), once the background threads have stopped (a caller's
        // `compact_all` still running may replace a run meanwhile: its count is then
        // saved or dropped with it, either harmless).
        if self.root.dir_lock.lock().is_some() && !self.root.poisoned.load(Ordering::Acquire) {
            crate::reload::write_hints(&self.io, &self.dir, &self.root);
            crate::search_counts::save(&self.io, &self.dir, &engines);
        }
        // Hand the acknowledged-but-buffered tail to the OS before letting go (a write
        // acknowledged has been handed over already; this is belt and braces). The logs
        // are then cut to their records (`LogState::finish_all`), and the handle sealed
        // before `log` is let go: a commit waiting for it then meets a sealed handle
        // (`Error::Closed`), not a finished writer.
        let cut = {
            let mut log = self.writes.lock();
            let cut = log.finish_all();
            self.io.seal();
            drop(log);
            cut
        };
        self.root.dir_lock.lock().take();
        cut
    }
}

/// Makes `engine`'s entry points refuse and tells its background threads to stop.
pub(crate) fn stop(engine: &Engine) {
    engine.closed.store(true, Ordering::Release);
    let mut g = engine.bg.lock();
    g.shutdown = true;
    engine.bg_cv.notify_all();
}

impl Drop for Shared {
    fn drop(&mut self) {
        // A failed cut is logged by `finish_all`; the next open cuts what it left.
        let _ = self.shutdown();
    }
}

/// Starts `engine`'s background threads and its GC thread.
pub(crate) fn spawn_threads(engine: &Arc<Engine>) -> Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let tag = if engine.keyspace == 0 {
        String::new()
    } else {
        format!("-ks{}", engine.keyspace)
    };
    for i in 0..engine.opts.background_threads {
        let e = Arc::clone(engine);
        let handle = std::thread::Builder::new()
            .name(format!("hybridkv-bg{tag}-{i}"))
            .spawn(move || e.background_loop())
            .map_err(|err| Error::io("spawn background thread", &engine.dir, err))?;
        threads.push(handle);
    }
    let e = Arc::clone(engine);
    let handle = std::thread::Builder::new()
        .name(format!("hybridkv-gc{tag}"))
        .spawn(move || e.gc_loop())
        .map_err(|err| Error::io("spawn gc thread", &engine.dir, err))?;
    threads.push(handle);
    Ok(threads)
}
