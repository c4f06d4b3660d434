//! Engine counters and the `Stats` report.
//!
//! Owns: counting (user operations and bytes, flushes, compactions, stalls) and the
//! snapshot handed to users. Never: changes behaviour; it only counts.

use crate::io::{IoComponent, IoStatsSnapshot};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters updated by the engine.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub puts: AtomicU64,
    pub deletes: AtomicU64,
    pub gets: AtomicU64,
    pub user_bytes_written: AtomicU64,
    pub user_bytes_read: AtomicU64,
    pub commit_groups: AtomicU64,
    pub synced_commits: AtomicU64,
    pub flushes: AtomicU64,
    pub compactions: AtomicU64,
    pub compaction_entries_in: AtomicU64,
    pub dropped_shadowed: AtomicU64,
    pub dropped_tombstones: AtomicU64,
    pub write_stalls: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// One on-disk level in a report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Level number (1 = first on-disk level).
    pub level: usize,
    /// Files in the level (0 or 1: each level is one sorted run).
    pub files: usize,
    /// Bytes on disk.
    pub file_bytes: u64,
    /// Target size before the level is merged down.
    pub target_bytes: u64,
    /// Entries, tombstones included.
    pub entries: u64,
    /// Tombstones.
    pub tombstones: u64,
    /// Logical key + value bytes of live entries.
    pub kv_bytes: u64,
}

/// A snapshot of the engine's statistics (`Db::stats`).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Put operations (batch members included).
    pub puts: u64,
    /// Delete operations (batch members included).
    pub deletes: u64,
    /// Point lookups.
    pub gets: u64,
    /// Key and value bytes written by users.
    pub user_bytes_written: u64,
    /// Key and value bytes returned to users by gets.
    pub user_bytes_read: u64,
    /// Group commits (one log write each).
    pub commit_groups: u64,
    /// Group commits that fsynced the log.
    pub synced_commits: u64,
    /// Memtable flushes into L1.
    pub flushes: u64,
    /// Level-to-level compactions.
    pub compactions: u64,
    /// Entries read by flushes and compactions.
    pub compaction_entries_in: u64,
    /// Older versions dropped by merges.
    pub dropped_shadowed: u64,
    /// Tombstones dropped at the bottom level.
    pub dropped_tombstones: u64,
    /// Times a writer waited for a flush to make room.
    pub write_stalls: u64,
    /// Bytes in the active and immutable memtables.
    pub memtable_bytes: u64,
    /// Immutable memtables waiting for their flush.
    pub immutable_memtables: usize,
    /// Bytes held by the node cache.
    pub cache_bytes: u64,
    /// Bytes of small-log files on disk.
    pub wal_file_bytes: u64,
    /// Per-level sizes.
    pub levels: Vec<LevelStats>,
    /// Bytes read and written per I/O component.
    pub io: IoStatsSnapshot,
}

impl Stats {
    pub(crate) fn fill_counters(&mut self, c: &Counters) {
        self.puts = Counters::get(&c.puts);
        self.deletes = Counters::get(&c.deletes);
        self.gets = Counters::get(&c.gets);
        self.user_bytes_written = Counters::get(&c.user_bytes_written);
        self.user_bytes_read = Counters::get(&c.user_bytes_read);
        self.commit_groups = Counters::get(&c.commit_groups);
        self.synced_commits = Counters::get(&c.synced_commits);
        self.flushes = Counters::get(&c.flushes);
        self.compactions = Counters::get(&c.compactions);
        self.compaction_entries_in = Counters::get(&c.compaction_entries_in);
        self.dropped_shadowed = Counters::get(&c.dropped_shadowed);
        self.dropped_tombstones = Counters::get(&c.dropped_tombstones);
        self.write_stalls = Counters::get(&c.write_stalls);
    }

    /// Bytes written by the engine (all components) per user byte written.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            return 0.0;
        }
        self.io.total_written() as f64 / self.user_bytes_written as f64
    }

    /// Bytes of level files on disk.
    pub fn level_file_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.file_bytes).sum()
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "operations: {} puts, {} deletes, {} gets",
            self.puts, self.deletes, self.gets
        )?;
        writeln!(
            f,
            "user bytes: {:.1} MiB written, {:.1} MiB read",
            mib(self.user_bytes_written),
            mib(self.user_bytes_read)
        )?;
        writeln!(
            f,
            "commits: {} groups ({} synced); flushes {}; compactions {}; write stalls {}",
            self.commit_groups,
            self.synced_commits,
            self.flushes,
            self.compactions,
            self.write_stalls
        )?;
        writeln!(
            f,
            "merges: {} entries in, {} shadowed versions dropped, {} tombstones dropped",
            self.compaction_entries_in, self.dropped_shadowed, self.dropped_tombstones
        )?;
        writeln!(
            f,
            "memory: memtables {:.1} MiB ({} immutable), cache {:.1} MiB",
            mib(self.memtable_bytes),
            self.immutable_memtables,
            mib(self.cache_bytes)
        )?;
        writeln!(f, "small log on disk: {:.1} MiB", mib(self.wal_file_bytes))?;
        for l in &self.levels {
            writeln!(
                f,
                "L{}: {} file, {:.1} MiB on disk (target {:.1} MiB), {} entries ({} tombstones), {:.1} MiB live kv",
                l.level,
                l.files,
                mib(l.file_bytes),
                mib(l.target_bytes),
                l.entries,
                l.tombstones,
                mib(l.kv_bytes)
            )?;
        }
        write!(f, "I/O written:")?;
        for c in IoComponent::ALL {
            write!(f, " {} {:.1} MiB;", c.name(), mib(self.io.written_by(c)))?;
        }
        writeln!(f)?;
        write!(f, "I/O read:")?;
        for c in IoComponent::ALL {
            write!(f, " {} {:.1} MiB;", c.name(), mib(self.io.read_by(c)))?;
        }
        writeln!(f)?;
        write!(f, "write amplification: {:.2}", self.write_amplification())
    }
}
