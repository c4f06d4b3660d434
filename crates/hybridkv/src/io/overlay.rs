//! [`ReadOnlyOverlay`]: the file system as a read-only open sees it.
//!
//! Owns: reading through to the real directory while every change (create, append,
//! rename, hard link, remove, truncate, punch hole) stays in memory, so that recovery can run its
//! usual steps (cut a torn tail, start a new small-log file, ...) without touching the
//! disk. A file is copied into memory the first time it is changed. No lock is taken.
//! Never: writes, syncs, renames or deletes anything on the underlying file system.

use super::{DirLock, FileSystem, ReadableFile, WritableFile};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Bytes = Arc<Mutex<Vec<u8>>>;

#[derive(Debug, Default)]
struct Changes {
    /// Files created or changed here, with their contents.
    files: BTreeMap<PathBuf, Bytes>,
    /// Files of the underlying file system removed (or renamed away) here.
    removed: BTreeSet<PathBuf>,
    /// Directories created here.
    dirs: BTreeSet<PathBuf>,
}

/// See the module documentation.
#[derive(Debug)]
pub(super) struct ReadOnlyOverlay {
    inner: Arc<dyn FileSystem>,
    changes: Mutex<Changes>,
}

fn not_found(op: &'static str, path: &Path) -> Error {
    Error::io(op, path, std::io::ErrorKind::NotFound.into())
}

impl ReadOnlyOverlay {
    /// A file this overlay changed is read from memory; any other is opened by `inner`.
    fn open_with(
        &self,
        path: &Path,
        inner: impl FnOnce() -> Result<Arc<dyn ReadableFile>>,
    ) -> Result<Arc<dyn ReadableFile>> {
        match self.local(path) {
            Some(Some(data)) => Ok(Arc::new(OverlayReader {
                path: path.to_path_buf(),
                data,
            })),
            Some(None) => Err(not_found("open", path)),
            None => inner(),
        }
    }

    pub(super) fn new(inner: Arc<dyn FileSystem>) -> Self {
        ReadOnlyOverlay {
            inner,
            changes: Mutex::new(Changes::default()),
        }
    }

    /// The in-memory copy of `path`, made from the underlying file if there is none yet.
    fn copy_up(&self, op: &'static str, path: &Path) -> Result<Bytes> {
        {
            let c = self.changes.lock();
            if let Some(b) = c.files.get(path) {
                return Ok(Arc::clone(b));
            }
            if c.removed.contains(path) {
                return Err(not_found(op, path));
            }
        }
        // The writing process may cut the file (a log's reserved tail) while it is read.
        let data = super::read_whole(
            path,
            || self.inner.open(path, false),
            || self.inner.file_len(path),
        )?;
        let bytes: Bytes = Arc::new(Mutex::new(data));
        let mut c = self.changes.lock();
        // Another thread may have copied it meanwhile: keep the first copy.
        Ok(Arc::clone(
            c.files.entry(path.to_path_buf()).or_insert(bytes),
        ))
    }

    /// Whether `path` exists here (`Some`) or only below (`None`).
    fn local(&self, path: &Path) -> Option<Option<Bytes>> {
        let c = self.changes.lock();
        if let Some(b) = c.files.get(path) {
            return Some(Some(Arc::clone(b)));
        }
        c.removed.contains(path).then_some(None)
    }
}

struct OverlayWriter {
    data: Bytes,
}

impl WritableFile for OverlayWriter {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.data.lock().extend_from_slice(data);
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    fn sync_data(&mut self) -> Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        self.data.lock().len() as u64
    }
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

struct OverlayReader {
    path: PathBuf,
    data: Bytes,
}

impl ReadableFile for OverlayReader {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        super::read_from(&self.data.lock(), offset, buf, &self.path)
    }
    fn len(&self) -> u64 {
        self.data.lock().len() as u64
    }
}

/// No lock: a read-only open runs beside the writing process.
#[derive(Debug)]
struct NoLock;

impl DirLock for NoLock {}

impl FileSystem for ReadOnlyOverlay {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut c = self.changes.lock();
        // A directory removed in this view and made again is there again.
        let removed_here = c.removed.remove(path);
        if removed_here || self.inner.kind(path)?.is_none() {
            c.dirs.insert(path.to_path_buf());
        }
        Ok(())
    }
    fn create(&self, path: &Path, _direct: bool) -> Result<Box<dyn WritableFile>> {
        let data: Bytes = Arc::new(Mutex::new(Vec::new()));
        let mut c = self.changes.lock();
        c.files.insert(path.to_path_buf(), Arc::clone(&data));
        c.removed.remove(path);
        Ok(Box::new(OverlayWriter { data }))
    }
    fn open(&self, path: &Path, direct: bool) -> Result<Arc<dyn ReadableFile>> {
        self.open_with(path, || self.inner.open(path, direct))
    }
    fn open_mapped(&self, path: &Path) -> Result<Arc<dyn ReadableFile>> {
        self.open_with(path, || self.inner.open_mapped(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let data = self.copy_up("rename", from)?;
        let mut c = self.changes.lock();
        c.files.remove(from);
        c.removed.insert(from.to_path_buf());
        c.files.insert(to.to_path_buf(), data);
        c.removed.remove(to);
        Ok(())
    }
    fn remove(&self, path: &Path) -> Result<()> {
        // No check that it exists: a writer beside this open may delete a file that no
        // manifest names (an obsolete run its readers let go of) at any moment, and the
        // open's sweep of such a file must not fail because the writer was first.
        let mut c = self.changes.lock();
        c.files.remove(path);
        c.removed.insert(path.to_path_buf());
        Ok(())
    }
    fn remove_dir(&self, path: &Path) -> Result<()> {
        // Kept in memory like every change of a read-only open (which never drops a
        // keyspace): the directory is gone from this open's view only, and only if it
        // is there and empty in that view, as a real removal demands.
        if self.kind(path)? != Some(true) {
            return Err(not_found("delete directory", path));
        }
        if !self.list(path)?.is_empty() {
            return Err(Error::io(
                "delete directory",
                path,
                std::io::ErrorKind::DirectoryNotEmpty.into(),
            ));
        }
        let mut c = self.changes.lock();
        c.dirs.remove(path);
        c.removed.insert(path.to_path_buf());
        Ok(())
    }
    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        // The second name shares the bytes, as a link does.
        let data = self.copy_up("hard link", from)?;
        let mut c = self.changes.lock();
        c.files.insert(to.to_path_buf(), data);
        c.removed.remove(to);
        Ok(())
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let below = match self.inner.kind(dir)? {
            Some(true) => self.inner.list(dir)?,
            _ => Vec::new(),
        };
        let c = self.changes.lock();
        let mut names: BTreeSet<String> = below
            .into_iter()
            .filter(|n| !c.removed.contains(&dir.join(n)))
            .collect();
        for path in c.files.keys() {
            if path.parent() == Some(dir) {
                if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                    names.insert(name.to_string());
                }
            }
        }
        Ok(names.into_iter().collect())
    }
    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }
    fn kind(&self, path: &Path) -> Result<Option<bool>> {
        match self.local(path) {
            Some(Some(_)) => return Ok(Some(false)),
            Some(None) => return Ok(None),
            None => {}
        }
        if self.changes.lock().dirs.contains(path) {
            return Ok(Some(true));
        }
        self.inner.kind(path)
    }
    fn file_len(&self, path: &Path) -> Result<u64> {
        match self.local(path) {
            Some(Some(data)) => Ok(data.lock().len() as u64),
            Some(None) => Err(not_found("stat", path)),
            None => self.inner.file_len(path),
        }
    }
    fn allocated_len(&self, path: &Path) -> Result<u64> {
        match self.local(path) {
            Some(Some(data)) => Ok(data.lock().len() as u64),
            Some(None) => Err(not_found("stat", path)),
            None => self.inner.allocated_len(path),
        }
    }
    fn truncate(&self, path: &Path, len: u64) -> Result<()> {
        let data = self.copy_up("truncate", path)?;
        let len = usize::try_from(len)
            .map_err(|_| Error::InvalidArgument(format!("truncate {} to {len}", path.display())))?;
        let mut d = data.lock();
        if len < d.len() {
            d.truncate(len);
        }
        Ok(())
    }
    fn punch_hole(&self, path: &Path, offset: u64, len: u64) -> Result<()> {
        let data = self.copy_up("punch hole", path)?;
        let mut d = data.lock();
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(d.len());
        let end = usize::try_from(offset.saturating_add(len))
            .unwrap_or(usize::MAX)
            .min(d.len());
        if let Some(range) = d.get_mut(start..end) {
            range.fill(0);
        }
        Ok(())
    }
    fn lock(&self, _path: &Path) -> Result<Box<dyn DirLock>> {
        Ok(Box::new(NoLock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealFs;

    #[test]
    fn changes_stay_in_memory_and_reads_see_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a"), b"hello world").unwrap();
        std::fs::write(d.join("b"), b"bee").unwrap();
        let before: Vec<_> = std::fs::read_dir(d).unwrap().collect();
        let o = ReadOnlyOverlay::new(Arc::new(RealFs));

        o.truncate(&d.join("a"), 5).unwrap();
        o.remove(&d.join("b")).unwrap();
        let mut w = o.create(&d.join("c"), false).unwrap();
        w.append(b"new").unwrap();
        w.sync_data().unwrap();
        o.rename(&d.join("c"), &d.join("d")).unwrap();
        let _lock = o.lock(&d.join("LOCK")).unwrap();

        // Seen through the overlay.
        assert_eq!(o.list(d).unwrap(), vec!["a".to_string(), "d".to_string()]);
        assert_eq!(o.file_len(&d.join("a")).unwrap(), 5);
        let mut buf = [0u8; 5];
        o.open(&d.join("a"), false)
            .unwrap()
            .read_exact_at(0, &mut buf)
            .unwrap();
        assert_eq!(&buf, b"hello");
        assert!(o.open(&d.join("b"), false).is_err());
        assert_eq!(o.kind(&d.join("d")).unwrap(), Some(false));
        assert_eq!(o.kind(&d.join("b")).unwrap(), None);

        // The disk is as it was.
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"hello world");
        assert_eq!(std::fs::read(d.join("b")).unwrap(), b"bee");
        assert!(!d.join("c").exists() && !d.join("d").exists());
        assert!(!d.join("LOCK").exists());
        assert_eq!(std::fs::read_dir(d).unwrap().count(), before.len());
    }

    #[test]
    fn a_directory_is_removed_from_the_view_only_when_empty_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("ks");
        std::fs::create_dir(&sub).unwrap();
        std::fs::write(sub.join("f"), b"x").unwrap();
        let o = ReadOnlyOverlay::new(Arc::new(RealFs));
        let kind_of = |e: Error| match e {
            Error::Io { source, .. } => source.kind(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            kind_of(o.remove_dir(&sub).unwrap_err()),
            std::io::ErrorKind::DirectoryNotEmpty
        );
        assert_eq!(
            kind_of(o.remove_dir(&dir.path().join("none")).unwrap_err()),
            std::io::ErrorKind::NotFound
        );
        o.remove(&sub.join("f")).unwrap();
        o.remove_dir(&sub).unwrap();
        assert_eq!(o.kind(&sub).unwrap(), None);
        // Made again, it is there again (and empty).
        o.create_dir_all(&sub).unwrap();
        assert_eq!(o.kind(&sub).unwrap(), Some(true));
        assert!(o.list(&sub).unwrap().is_empty());
        // The disk is as it was.
        assert!(sub.join("f").exists());
    }
}
