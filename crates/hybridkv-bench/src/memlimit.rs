//! The users' configuration's memory budget: the benchmark process in a memory cgroup of
//! its own, whose limit counts the page cache the process fills as well as its heap.
//!
//! Owns: creating a child of the cgroup this process is in (cgroup v2, or the v1 `memory`
//! hierarchy), setting its limit, moving this process into it, and evicting a database's
//! files from the page cache before a phase (pages cached by an earlier process are
//! charged to that process's cgroup, so without the eviction a run phase would read from
//! memory outside the limit). Never: changes a limit it did not create, or runs a phase
//! without the limit when one was asked for (the caller gets an error instead).

use crate::error::{BenchError, Result};
use std::path::{Path, PathBuf};

/// A memory cgroup this process joined; dropping it moves the process back and removes
/// the group.
#[derive(Debug)]
pub struct MemoryLimit {
    dir: PathBuf,
    parent: PathBuf,
    limit: u64,
    version: u8,
}

fn usage(why: String) -> BenchError {
    BenchError::Usage(format!(
        "cannot put the benchmark under a memory limit: {why}. The users' configuration \
         needs a writable memory cgroup (run as root, or with a delegated cgroup v2 subtree); \
         use --config paper, or --memory-limit-mib 0 to run without a limit (the report then \
         says so)"
    ))
}

/// The path of this process's cgroup in hierarchy `controller` ("" for v2) from the text
/// of `/proc/self/cgroup`.
pub fn own_cgroup(proc_cgroup: &str, controller: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        matches.then(|| path.to_string())
    })
}

impl MemoryLimit {
    /// Creates a cgroup limited to `limit` bytes (page cache included) below the one this
    /// process is in, and moves the process (every thread) into it.
    pub fn join(limit: u64) -> Result<MemoryLimit> {
        let text = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| usage(format!("/proc/self/cgroup: {e}")))?;
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (root, rel, version) = if v1.join("memory.limit_in_bytes").exists() {
            let rel = own_cgroup(&text, "memory")
                .ok_or_else(|| usage("no memory controller in /proc/self/cgroup".into()))?;
            (v1.to_path_buf(), rel, 1)
        } else {
            let rel = own_cgroup(&text, "")
                .ok_or_else(|| usage("no cgroup v2 entry in /proc/self/cgroup".into()))?;
            (PathBuf::from("/sys/fs/cgroup"), rel, 2)
        };
        let parent = root.join(rel.trim_start_matches('/'));
        let dir = parent.join(format!("hybridkv-bench-{}", std::process::id()));
        let fail = |what: &str, path: &Path, e: std::io::Error| {
            usage(format!("{what} {}: {e}", path.display()))
        };
        if !dir.exists() {
            std::fs::create_dir(&dir).map_err(|e| fail("create", &dir, e))?;
        }
        let group = MemoryLimit {
            dir,
            parent,
            limit,
            version,
        };
        let limit_file = group.dir.join(if version == 1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        });
        std::fs::write(&limit_file, limit.to_string())
            .map_err(|e| fail("write", &limit_file, e))?;
        if version == 2 {
            // No swapping around the limit (a missing file means no swap accounting).
            let _ = std::fs::write(group.dir.join("memory.swap.max"), "0");
        }
        let procs = group.dir.join("cgroup.procs");
        std::fs::write(&procs, std::process::id().to_string())
            .map_err(|e| fail("join", &procs, e))?;
        Ok(group)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The group's current use (page cache included), if the kernel says.
    pub fn usage_bytes(&self) -> Option<u64> {
        let file = if self.version == 1 {
            "memory.usage_in_bytes"
        } else {
            "memory.current"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Where the group lives (for the report).
    pub fn describe(&self) -> String {
        format!(
            "cgroup v{} {} (limit {} MiB, page cache included)",
            self.version,
            self.dir.display(),
            self.limit >> 20
        )
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        // Back to the parent, then the group can go (best effort: the process may be
        // exiting anyway).
        let _ = std::fs::write(
            self.parent.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Drops every file below `dir` from the page cache (`posix_fadvise(DONTNEED)`), so that
/// a phase starts with nothing of the database cached, as after a reboot. Dirty pages are
/// written first (`fdatasync`), since DONTNEED skips them.
pub fn evict_page_cache(dir: &Path) -> Result<u64> {
    use std::os::fd::AsRawFd;
    let mut evicted = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| BenchError::io("list", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| BenchError::io("list", dir, e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| BenchError::io("stat", &path, e))?;
        if kind.is_dir() {
            evicted += evict_page_cache(&path)?;
        } else if kind.is_file() {
            let file = std::fs::File::open(&path).map_err(|e| BenchError::io("open", &path, e))?;
            file.sync_data()
                .map_err(|e| BenchError::io("fdatasync", &path, e))?;
            // SAFETY: a plain system call on a descriptor this function owns.
            let rc =
                unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            if rc != 0 {
                return Err(BenchError::io(
                    "posix_fadvise(DONTNEED)",
                    &path,
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
            evicted += file.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    Ok(evicted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroup_finds_the_v1_memory_and_the_v2_entries() {
        let text = "9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/c\n0::/unified/x\n";
        assert_eq!(own_cgroup(text, "memory").as_deref(), Some("/a/b"));
        assert_eq!(own_cgroup(text, "cpuacct").as_deref(), Some("/c"));
        assert_eq!(own_cgroup(text, "").as_deref(), Some("/unified/x"));
        assert_eq!(own_cgroup("4:memory:/a\n", "").as_deref(), None);
    }

    #[test]
    fn eviction_walks_the_tree_and_counts_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a"), vec![1u8; 5000]).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![2u8; 3000]).unwrap();
        assert_eq!(evict_page_cache(dir.path()).unwrap(), 8000);
        // The data is still there (eviction drops only cached copies).
        assert_eq!(
            std::fs::read(dir.path().join("sub/b")).unwrap(),
            vec![2u8; 3000]
        );
        assert!(evict_page_cache(&dir.path().join("missing")).is_err());
    }
}
