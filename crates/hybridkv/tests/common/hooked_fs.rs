//! One delegating file system for the fault tests: `HookedFs` hands every call to an inner
//! `FileSystem` (a `SimFs` or the real one) through a test's [`FsHooks`], which may fail
//! the call, hold it, record it or replace the writer it returns. A test writes only the
//! hooks it needs; the forwarding of every call lives here, once.

use hybridkv::io::{DirLock, FileSystem, ReadableFile, WritableFile};
use hybridkv::Result;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// One call, as a hook sees it: the file system's own calls, and those of the files it
/// hands out (appends and the rest on a writer, reads on a reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsCall<'a> {
    CreateDir,
    Create,
    CreateMapped,
    Open,
    OpenMapped,
    /// The call's path is the old name.
    Rename {
        to: &'a Path,
    },
    Remove,
    RemoveDir,
    /// The call's path is the existing name.
    HardLink {
        to: &'a Path,
    },
    List,
    SyncDir,
    Kind,
    FileLen,
    AllocatedLen,
    Truncate,
    PunchHole,
    Lock,
    Append,
    Flush,
    Sync,
    Finish,
    Read {
        offset: u64,
        len: usize,
    },
}

impl FsCall<'_> {
    /// A short name ("rename", "sync directory", "read"), for traces.
    pub fn name(&self) -> &'static str {
        match self {
            FsCall::CreateDir => "create directory",
            FsCall::Create => "create",
            FsCall::CreateMapped => "create mapped",
            FsCall::Open => "open",
            FsCall::OpenMapped => "open mapped",
            FsCall::Rename { .. } => "rename",
            FsCall::Remove => "remove",
            FsCall::RemoveDir => "remove directory",
            FsCall::HardLink { .. } => "hard link",
            FsCall::List => "list",
            FsCall::SyncDir => "sync directory",
            FsCall::Kind => "stat",
            FsCall::FileLen => "length",
            FsCall::AllocatedLen => "allocated length",
            FsCall::Truncate => "truncate",
            FsCall::PunchHole => "punch hole",
            FsCall::Lock => "lock",
            FsCall::Append => "append",
            FsCall::Flush => "flush",
            FsCall::Sync => "sync",
            FsCall::Finish => "finish",
            FsCall::Read { .. } => "read",
        }
    }
}

/// What a test does to the calls; every default lets the call through unchanged.
pub trait FsHooks: Send + Sync + 'static {
    /// Runs `call`, the inner file system's answer to `what` on `path`. A hook may fail
    /// the call before it runs, fail it after, wait first, or record it.
    fn around<T>(
        &self,
        what: FsCall<'_>,
        path: &Path,
        call: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let _ = (what, path);
        call()
    }

    /// The writer a create hands out, given the inner one (its calls still pass through
    /// [`FsHooks::around`]).
    fn writer(&self, path: &Path, inner: Box<dyn WritableFile>) -> Result<Box<dyn WritableFile>> {
        let _ = path;
        Ok(inner)
    }

    /// The reader an open hands out, given the inner one (its reads still pass through
    /// [`FsHooks::around`]): a test may hand out one that breaks the read contract.
    fn reader(&self, path: &Path, inner: Arc<dyn ReadableFile>) -> Arc<dyn ReadableFile> {
        let _ = path;
        inner
    }
}

/// An `Error::Io` a hook returns for an injected failure of `op` on `path`.
pub fn injected(op: &'static str, path: &Path) -> hybridkv::Error {
    hybridkv::Error::Io {
        op,
        path: path.to_path_buf(),
        source: std::io::Error::other(format!("injected failure of {op}")),
    }
}

/// An inner file system seen through hooks `H`. Clones share the hooks.
pub struct HookedFs<H> {
    inner: Arc<dyn FileSystem>,
    hooks: Arc<H>,
}

impl<H> Clone for HookedFs<H> {
    fn clone(&self) -> Self {
        HookedFs {
            inner: Arc::clone(&self.inner),
            hooks: Arc::clone(&self.hooks),
        }
    }
}

impl<H> std::fmt::Debug for HookedFs<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedFs")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<H: FsHooks> HookedFs<H> {
    pub fn new(inner: Arc<dyn FileSystem>, hooks: H) -> HookedFs<H> {
        HookedFs {
            inner,
            hooks: Arc::new(hooks),
        }
    }

    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    fn wrap_writer(
        &self,
        path: &Path,
        inner: Box<dyn WritableFile>,
    ) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(HookedWriter {
            inner: self.hooks.writer(path, inner)?,
            path: path.to_path_buf(),
            hooks: Arc::clone(&self.hooks),
        }))
    }

    fn wrap_reader(&self, path: &Path, inner: Arc<dyn ReadableFile>) -> Arc<dyn ReadableFile> {
        Arc::new(HookedReader {
            inner: self.hooks.reader(path, inner),
            path: path.to_path_buf(),
            hooks: Arc::clone(&self.hooks),
        })
    }
}

struct HookedWriter<H> {
    inner: Box<dyn WritableFile>,
    path: PathBuf,
    hooks: Arc<H>,
}

impl<H: FsHooks> WritableFile for HookedWriter<H> {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let inner = &mut self.inner;
        self.hooks
            .around(FsCall::Append, &self.path, || inner.append(data))
    }
    fn flush(&mut self) -> Result<()> {
        let inner = &mut self.inner;
        self.hooks
            .around(FsCall::Flush, &self.path, || inner.flush())
    }
    fn sync_data(&mut self) -> Result<()> {
        let inner = &mut self.inner;
        self.hooks
            .around(FsCall::Sync, &self.path, || inner.sync_data())
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn finish(&mut self) -> Result<()> {
        let inner = &mut self.inner;
        self.hooks
            .around(FsCall::Finish, &self.path, || inner.finish())
    }
}

/// A reader whose every read passes through the hooks (batched reads too: it offers no
/// raw descriptor, so a batch reads it one call at a time).
struct HookedReader<H> {
    inner: Arc<dyn ReadableFile>,
    path: PathBuf,
    hooks: Arc<H>,
}

impl<H: FsHooks> ReadableFile for HookedReader<H> {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let what = FsCall::Read {
            offset,
            len: buf.len(),
        };
        self.hooks
            .around(what, &self.path, || self.inner.read_exact_at(offset, buf))
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

impl<H: FsHooks> FileSystem for HookedFs<H> {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.hooks
            .around(FsCall::CreateDir, path, || self.inner.create_dir_all(path))
    }
    fn create(&self, path: &Path, direct: bool) -> Result<Box<dyn WritableFile>> {
        let inner = self
            .hooks
            .around(FsCall::Create, path, || self.inner.create(path, direct))?;
        self.wrap_writer(path, inner)
    }
    fn create_mapped(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let inner = self.hooks.around(FsCall::CreateMapped, path, || {
            self.inner.create_mapped(path)
        })?;
        self.wrap_writer(path, inner)
    }
    fn open(&self, path: &Path, direct: bool) -> Result<Arc<dyn ReadableFile>> {
        let inner = self
            .hooks
            .around(FsCall::Open, path, || self.inner.open(path, direct))?;
        Ok(self.wrap_reader(path, inner))
    }
    fn open_mapped(&self, path: &Path) -> Result<Arc<dyn ReadableFile>> {
        let inner = self
            .hooks
            .around(FsCall::OpenMapped, path, || self.inner.open_mapped(path))?;
        Ok(self.wrap_reader(path, inner))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.hooks
            .around(FsCall::Rename { to }, from, || self.inner.rename(from, to))
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.hooks
            .around(FsCall::Remove, path, || self.inner.remove(path))
    }
    fn remove_dir(&self, path: &Path) -> Result<()> {
        self.hooks
            .around(FsCall::RemoveDir, path, || self.inner.remove_dir(path))
    }
    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        self.hooks.around(FsCall::HardLink { to }, from, || {
            self.inner.hard_link(from, to)
        })
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.hooks
            .around(FsCall::List, dir, || self.inner.list(dir))
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.hooks
            .around(FsCall::SyncDir, dir, || self.inner.sync_dir(dir))
    }
    fn kind(&self, path: &Path) -> Result<Option<bool>> {
        self.hooks
            .around(FsCall::Kind, path, || self.inner.kind(path))
    }
    fn file_len(&self, path: &Path) -> Result<u64> {
        self.hooks
            .around(FsCall::FileLen, path, || self.inner.file_len(path))
    }
    fn allocated_len(&self, path: &Path) -> Result<u64> {
        self.hooks.around(FsCall::AllocatedLen, path, || {
            self.inner.allocated_len(path)
        })
    }
    fn truncate(&self, path: &Path, len: u64) -> Result<()> {
        self.hooks
            .around(FsCall::Truncate, path, || self.inner.truncate(path, len))
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<()> {
        self.hooks.around(FsCall::PunchHole, path, || {
            self.inner.punch_hole(path, offset, len)
        })
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>> {
        self.hooks
            .around(FsCall::Lock, path, || self.inner.lock(path))
    }
}

/// Ready hooks that fail reads: of files named `*.{ext}`, of at least `min_len` bytes,
/// the next `count` of them (`u64::MAX`: all), as a device that stopped answering would.
#[derive(Debug, Default)]
pub struct FailReads {
    plan: std::sync::Mutex<ReadFaultPlan>,
}

#[derive(Debug, Default)]
struct ReadFaultPlan {
    ext: &'static str,
    min_len: usize,
    count: u64,
    failed: u64,
}

impl FailReads {
    /// Fails the next `count` reads of `*.{ext}` files of at least `min_len` bytes.
    pub fn arm(&self, ext: &'static str, min_len: usize, count: u64) {
        let mut p = self.plan.lock().unwrap();
        (p.ext, p.min_len, p.count) = (ext, min_len, count);
    }

    /// Fails nothing more.
    pub fn disarm(&self) {
        self.plan.lock().unwrap().count = 0;
    }

    /// Reads failed so far.
    pub fn failed(&self) -> u64 {
        self.plan.lock().unwrap().failed
    }
}

impl FsHooks for FailReads {
    fn around<T>(
        &self,
        what: FsCall<'_>,
        path: &Path,
        call: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if let FsCall::Read { len, .. } = what {
            let mut p = self.plan.lock().unwrap();
            if p.count > 0 && len >= p.min_len && path.extension().is_some_and(|e| e == p.ext) {
                p.count = p.count.saturating_sub(u64::from(p.count != u64::MAX));
                p.failed += 1;
                return Err(injected("read", path));
            }
        }
        call()
    }
}

/// Asserts that `answer` is an `Error::Io` naming a `*.{ext}` file: what a read that
/// [`FailReads`] failed must come back as.
pub fn assert_io_error_on<T: std::fmt::Debug>(answer: Result<T>, ext: &str) {
    match answer {
        Err(hybridkv::Error::Io { path, .. }) => {
            assert!(path.extension().is_some_and(|e| e == ext), "{path:?}")
        }
        other => panic!("a failed read of a .{ext} file answered {other:?}"),
    }
}

/// Ready hooks that fail every call named `what` (an [`FsCall::name`]: "create", "open",
/// "append", "sync", "rename", ...) on a file whose name starts with `prefix` (so its
/// temporary `.tmp` name too), counting what they failed.
pub struct FailNamed {
    prefix: &'static str,
    what: &'static str,
    failed: std::sync::atomic::AtomicU64,
}

impl FailNamed {
    pub fn new(prefix: &'static str, what: &'static str) -> FailNamed {
        FailNamed {
            prefix,
            what,
            failed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Calls failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl FsHooks for FailNamed {
    fn around<T>(
        &self,
        what: FsCall<'_>,
        path: &Path,
        call: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let named = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(self.prefix));
        if named && what.name() == self.what {
            self.failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(injected(what.name(), path));
        }
        call()
    }
}

/// Holds the first create of a level file (`.lvl`) after [`HoldLevelCreate::arm`] until
/// [`HoldLevelCreate::release`]: a flush or a merge then waits before its output exists,
/// while the test does something beside it. Hooks of their own, or a part of a test's
/// hooks that calls [`HoldLevelCreate::pause`] first.
#[derive(Default, Debug)]
pub struct HoldLevelCreate {
    state: Mutex<Hold>,
    changed: Condvar,
}

#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
enum Hold {
    #[default]
    Off,
    Armed,
    Holding,
    Released,
}

impl HoldLevelCreate {
    fn set(&self, to: Hold) {
        *self.state.lock().unwrap() = to;
        self.changed.notify_all();
    }

    /// Holds the next level-file create.
    pub fn arm(&self) {
        self.set(Hold::Armed);
    }

    /// Lets the held create (and every later one) go on.
    pub fn release(&self) {
        self.set(Hold::Released);
    }

    /// Waits until a create is held; fails the test after a minute without one.
    pub fn wait_holding(&self) {
        let state = self.state.lock().unwrap();
        let (state, timeout) = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(60), |s| *s != Hold::Holding)
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "no level file was created: {:?}",
            *state
        );
    }

    /// Waits here until released when `what` creates a level file at `path` while armed.
    pub fn pause(&self, what: FsCall<'_>, path: &Path) {
        if what != FsCall::Create || path.extension().is_none_or(|e| e != "lvl") {
            return;
        }
        let mut state = self.state.lock().unwrap();
        if *state == Hold::Armed {
            *state = Hold::Holding;
            self.changed.notify_all();
            while *state == Hold::Holding {
                state = self.changed.wait(state).unwrap();
            }
        }
    }
}

impl FsHooks for HoldLevelCreate {
    fn around<T>(
        &self,
        what: FsCall<'_>,
        path: &Path,
        call: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.pause(what, path);
        call()
    }
}
