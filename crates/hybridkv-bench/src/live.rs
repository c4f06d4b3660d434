//! Exact live-data accounting: the runner remembers the current value size of every
//! record, so live logical bytes (and so space amplification) are exact even when
//! updates move a record between size classes.
//!
//! A write takes the record's stripe lock, writes to the engine, then stores the new
//! size, so with several threads the order of the sizes stored for one key is the order
//! in which the engine applied the writes, and the final size is the engine's.

use crate::error::{BenchError, Result};
use hybridkv_ycsb::KEY_LEN;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Number of stripe locks (a power of two).
const STRIPES: usize = 1024;

/// Current value length of every record (0 = no such record yet).
#[derive(Debug)]
pub struct LiveTracker {
    lens: Vec<AtomicU32>,
    stripes: Vec<Mutex<()>>,
}

impl LiveTracker {
    /// A tracker for records `0..capacity`, all absent.
    pub fn new(capacity: u64) -> Result<Self> {
        Self::from_lens(Vec::new(), capacity)
    }

    /// A tracker holding `lens` (record `i` has value length `lens[i]`), with room for
    /// records up to `capacity` (at least `lens.len()`).
    pub fn from_lens(lens: Vec<u32>, capacity: u64) -> Result<Self> {
        let capacity = usize::try_from(capacity)
            .map_err(|_| BenchError::Usage(format!("{capacity} records do not fit in memory")))?
            .max(lens.len());
        let mut v: Vec<AtomicU32> = lens.into_iter().map(AtomicU32::new).collect();
        v.resize_with(capacity, || AtomicU32::new(0));
        Ok(LiveTracker {
            lens: v,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        })
    }

    /// Records the tracker has room for.
    pub fn capacity(&self) -> u64 {
        self.lens.len() as u64
    }

    /// Locks `record`'s stripe: hold it across the engine write and [`LiveTracker::set`].
    pub fn lock(&self, record: u64) -> MutexGuard<'_, ()> {
        let i = (record as usize) & (STRIPES - 1);
        // A poisoned stripe only means another worker panicked while holding it; the
        // data it guards is `()`, so carry on.
        self.stripes[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores the value length of `record`.
    pub fn set(&self, record: u64, len: usize) -> Result<()> {
        let len = u32::try_from(len)
            .map_err(|_| BenchError::Usage(format!("value of {len} bytes is too long to track")))?;
        let slot = usize::try_from(record)
            .ok()
            .and_then(|i| self.lens.get(i))
            .ok_or_else(|| {
                BenchError::Usage(format!(
                    "record {record} is beyond the {} records the live-byte tracker was sized for",
                    self.lens.len()
                ))
            })?;
        slot.store(len, Ordering::Relaxed);
        Ok(())
    }

    /// The value length of `record` (0 if absent or beyond the capacity).
    pub fn get(&self, record: u64) -> u32 {
        usize::try_from(record)
            .ok()
            .and_then(|i| self.lens.get(i))
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// Records that exist.
    pub fn live_records(&self) -> u64 {
        self.lens
            .iter()
            .filter(|a| a.load(Ordering::Relaxed) > 0)
            .count() as u64
    }

    /// Live logical bytes: the sum over existing records of key length + current value
    /// length (keys are always [`KEY_LEN`] bytes).
    pub fn live_bytes(&self) -> u64 {
        self.lens
            .iter()
            .map(|a| u64::from(a.load(Ordering::Relaxed)))
            .filter(|&l| l > 0)
            .map(|l| l + KEY_LEN as u64)
            .sum()
    }

    /// The lengths of records `0..n`.
    pub fn lens(&self, n: u64) -> Vec<u32> {
        self.lens
            .iter()
            .take(usize::try_from(n).unwrap_or(usize::MAX))
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }

    /// Writes the lengths of records `0..n` to `path` (little-endian `u32`s).
    pub fn save(&self, path: &Path, n: u64) -> Result<()> {
        let bytes: Vec<u8> = self.lens(n).iter().flat_map(|l| l.to_le_bytes()).collect();
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(|e| BenchError::io("create", &tmp, e))?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| BenchError::io("write", &tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| BenchError::io("rename", path, e))
    }

    /// Reads lengths written by [`LiveTracker::save`].
    pub fn load_lens(path: &Path) -> Result<Vec<u32>> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| BenchError::io("read", path, e))?;
        if bytes.len() % 4 != 0 {
            return Err(BenchError::Usage(format!(
                "{} is damaged: {} bytes is not a whole number of records",
                path.display(),
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_bytes_follow_the_latest_size() {
        let t = LiveTracker::new(10).unwrap();
        assert_eq!(t.live_bytes(), 0);
        t.set(0, 9).unwrap();
        t.set(1, 104).unwrap();
        t.set(1, 1004).unwrap(); // an update that changes class
        assert_eq!(t.live_records(), 2);
        assert_eq!(t.live_bytes(), (24 + 9) + (24 + 1004));
        assert!(t.set(10, 9).is_err());
        assert_eq!(t.get(1), 1004);
        assert_eq!(t.get(99), 0);
    }

    #[test]
    fn saves_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.bin");
        let t = LiveTracker::new(5).unwrap();
        t.set(0, 9).unwrap();
        t.set(2, 104).unwrap();
        t.save(&path, 3).unwrap();
        let lens = LiveTracker::load_lens(&path).unwrap();
        assert_eq!(lens, vec![9, 0, 104]);
        let u = LiveTracker::from_lens(lens, 8).unwrap();
        assert_eq!(u.capacity(), 8);
        assert_eq!(u.live_bytes(), t.live_bytes());
        std::fs::write(&path, [1u8, 2, 3]).unwrap();
        assert!(LiveTracker::load_lens(&path).is_err());
    }
}
