//! The benchmark alone: an engine that keeps nothing.
//!
//! Owns: nothing. Every write is accepted and dropped, every read and scan finds nothing.
//! A phase run against it measures what the benchmark itself costs per operation
//! (generating keys and values, timing and recording each operation): a cost included in
//! every engine's CPU per operation, which a comparison of two engines' CPU should know.
//! Never: keeps state, takes a lock, or stands in a comparison as an engine (it is left
//! out of `default` and `all`, and must be named: `--engines harness`).

use super::{common_options, Engine, EngineConfig, EngineOptions, ScanCount};
use crate::error::{BenchError, Result};
use std::hint::black_box;
use std::path::Path;

/// See the module comment.
pub(crate) struct HarnessEngine {
    config: EngineConfig,
}

impl HarnessEngine {
    /// Creates `dir` (empty: the runner measures it like any engine's database).
    pub(crate) fn open(dir: &Path, config: &EngineConfig) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io("create", dir, e))?;
        Ok(HarnessEngine {
            config: config.clone(),
        })
    }
}

impl Engine for HarnessEngine {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        // Kept opaque to the optimizer: the key and value must still be made.
        black_box((key, value));
        Ok(())
    }

    fn read(&self, key: &[u8]) -> Result<Option<usize>> {
        black_box(key);
        Ok(None)
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<ScanCount> {
        black_box((start, len));
        Ok(ScanCount::default())
    }

    fn finish(&self) -> Result<()> {
        Ok(())
    }

    fn options(&self) -> EngineOptions {
        let mut o = common_options(&self.config);
        o.insert(
            "engine".into(),
            "none: writes dropped, reads miss (the benchmark's own cost)".into(),
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let e = HarnessEngine::open(&db, &EngineConfig::default()).unwrap();
        assert!(db.is_dir());
        e.insert(b"k", b"v").unwrap();
        e.update(b"k", b"w").unwrap();
        assert_eq!(e.read(b"k").unwrap(), None);
        assert_eq!(e.scan(b"", 10).unwrap(), ScanCount::default());
        assert_eq!(e.read_modify_write(b"k", b"x").unwrap(), None);
        e.finish().unwrap();
        assert!(e.options()["engine"].starts_with("none"));
    }
}
