//! [`SealableFs`]: the file system as one open database sees it, which can be sealed when
//! the database closes.
//!
//! Owns: refusing every change to the disk (create, append, flush, sync, rename, remove,
//! truncate, punch hole, lock) with `Error::Closed` once sealed, including through files
//! opened before. Reads still work (an iterator outliving `close` may finish reading).
//! Never: decides when to seal; `Db::close` does, before it releases the directory lock,
//! so nothing of a closed instance can touch a directory another instance may now own.

use super::{DirLock, FileSystem, ReadableFile, WritableFile};
use crate::error::{Error, Result};
use parking_lot::RwLock;
use std::path::Path;
use std::sync::Arc;

/// A file system wrapper that refuses changes once sealed.
#[derive(Debug)]
pub(super) struct SealableFs {
    inner: Arc<dyn FileSystem>,
    sealed: Seal,
}

/// Whether changes are refused. A change holds the read side for as long as it runs, so
/// sealing (the write side) waits for changes in flight: none can still be running when
/// the directory lock is released.
pub(super) type Seal = Arc<RwLock<bool>>;

impl SealableFs {
    pub(super) fn new(inner: Arc<dyn FileSystem>, sealed: Seal) -> Self {
        SealableFs { inner, sealed }
    }

    /// Runs `change` unless sealed, holding the seal's read side meanwhile.
    fn change<T>(&self, change: impl FnOnce(&dyn FileSystem) -> Result<T>) -> Result<T> {
        guarded(&self.sealed, || change(self.inner.as_ref()))
    }
}

fn guarded<T>(sealed: &RwLock<bool>, change: impl FnOnce() -> Result<T>) -> Result<T> {
    let g = sealed.read();
    if *g {
        return Err(Error::Closed);
    }
    let r = change();
    drop(g);
    r
}

/// A writer that refuses to write once its file system is sealed.
struct SealableWriter {
    inner: Box<dyn WritableFile>,
    sealed: Seal,
}

impl WritableFile for SealableWriter {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let inner = &mut self.inner;
        guarded(&self.sealed, || inner.append(data))
    }
    fn flush(&mut self) -> Result<()> {
        let inner = &mut self.inner;
        guarded(&self.sealed, || inner.flush())
    }
    fn sync_data(&mut self) -> Result<()> {
        let inner = &mut self.inner;
        guarded(&self.sealed, || inner.sync_data())
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn finish(&mut self) -> Result<()> {
        let inner = &mut self.inner;
        guarded(&self.sealed, || inner.finish())
    }
}

impl FileSystem for SealableFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.change(|fs| fs.create_dir_all(path))
    }
    fn create(&self, path: &Path, direct: bool) -> Result<Box<dyn WritableFile>> {
        let inner = self.change(|fs| fs.create(path, direct))?;
        Ok(Box::new(SealableWriter {
            inner,
            sealed: Arc::clone(&self.sealed),
        }))
    }
    fn create_mapped(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let inner = self.change(|fs| fs.create_mapped(path))?;
        Ok(Box::new(SealableWriter {
            inner,
            sealed: Arc::clone(&self.sealed),
        }))
    }
    fn open(&self, path: &Path, direct: bool) -> Result<Arc<dyn ReadableFile>> {
        self.inner.open(path, direct)
    }
    fn open_mapped(&self, path: &Path) -> Result<Arc<dyn ReadableFile>> {
        self.inner.open_mapped(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.change(|fs| fs.rename(from, to))
    }
    fn remove(&self, path: &Path) -> Result<()> {
        self.change(|fs| fs.remove(path))
    }
    fn remove_dir(&self, path: &Path) -> Result<()> {
        self.change(|fs| fs.remove_dir(path))
    }
    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        self.change(|fs| fs.hard_link(from, to))
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.change(|fs| fs.sync_dir(dir))
    }
    fn kind(&self, path: &Path) -> Result<Option<bool>> {
        self.inner.kind(path)
    }
    fn file_len(&self, path: &Path) -> Result<u64> {
        self.inner.file_len(path)
    }
    fn allocated_len(&self, path: &Path) -> Result<u64> {
        self.inner.allocated_len(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> Result<()> {
        self.change(|fs| fs.truncate(path, len))
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<()> {
        self.change(|fs| fs.punch_hole(path, offset, len))
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn DirLock>> {
        self.change(|fs| fs.lock(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::SimFs;

    #[test]
    fn sealing_refuses_every_change_but_keeps_reads() {
        let sealed: Seal = Arc::new(RwLock::new(false));
        let fs = SealableFs::new(Arc::new(SimFs::new()), Arc::clone(&sealed));
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let a = dir.join("a");
        let mut w = fs.create(&a, false).unwrap();
        w.append(b"hello").unwrap();
        w.sync_data().unwrap();
        *sealed.write() = true;
        let closed = |r: Result<()>| matches!(r, Err(Error::Closed));
        assert!(closed(w.append(b"x")));
        assert!(closed(w.flush()));
        assert!(closed(w.sync_data()));
        assert!(closed(fs.remove(&a)));
        assert!(closed(fs.rename(&a, &dir.join("b"))));
        assert!(closed(fs.truncate(&a, 0)));
        assert!(closed(fs.punch_hole(&a, 0, 1)));
        assert!(closed(fs.sync_dir(dir)));
        assert!(closed(fs.create_dir_all(&dir.join("e"))));
        assert!(matches!(
            fs.create(&dir.join("c"), false),
            Err(Error::Closed)
        ));
        assert!(matches!(fs.lock(&dir.join("LOCK")), Err(Error::Closed)));
        let r = fs.open(&a, false).unwrap();
        let mut buf = [0u8; 5];
        r.read_exact_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(fs.list(dir).unwrap(), vec!["a".to_string()]);
    }
}
