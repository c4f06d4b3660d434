//! Engine counters and the `Stats` report.
//!
//! Owns: counting (user operations and bytes, flushes, compactions, stalls, GC, the
//! transient log) and the snapshot handed to users. Never: changes behaviour; it only
//! counts.

use crate::io::{IoComponent, IoStatsSnapshot};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters updated by the engine.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub puts: AtomicU64,
    pub deletes: AtomicU64,
    pub merges: AtomicU64,
    pub range_deletes: AtomicU64,
    pub dropped_by_range: AtomicU64,
    pub deltas_folded: AtomicU64,
    pub reads_folded_back: AtomicU64,
    pub gets: AtomicU64,
    /// Gets by the read calls they made: none, one, two, three or more.
    pub gets_by_reads: [AtomicU64; 4],
    pub scans: AtomicU64,
    pub user_bytes_written: AtomicU64,
    pub user_bytes_read: AtomicU64,
    pub commit_groups: AtomicU64,
    pub synced_commits: AtomicU64,
    pub flushes: AtomicU64,
    pub compactions: AtomicU64,
    pub merges_within_l1: AtomicU64,
    pub compaction_entries_in: AtomicU64,
    pub dropped_shadowed: AtomicU64,
    pub dropped_tombstones: AtomicU64,
    pub write_stalls: AtomicU64,
    pub large_bytes_written: AtomicU64,
    pub gc_passes: AtomicU64,
    pub gc_segments_freed: AtomicU64,
    pub gc_bytes_freed: AtomicU64,
    pub gc_entries_checked: AtomicU64,
    pub gc_entries_relocated: AtomicU64,
    pub gc_bytes_relocated: AtomicU64,
    pub gc_errors: AtomicU64,
    pub transient_segments_created: AtomicU64,
    pub transient_segments_freed: AtomicU64,
    pub medium_values_logged: AtomicU64,
    pub medium_values_merged: AtomicU64,
    pub medium_bytes_merged: AtomicU64,
    pub space_limit_runs: AtomicU64,
    pub bucket_records_written: AtomicU64,
    pub bucket_gc_passes: AtomicU64,
    pub bucket_splits: AtomicU64,
    pub bucket_records_dropped: AtomicU64,
    pub bucket_keys_folded: AtomicU64,
    pub search_counts_rejected: AtomicU64,
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
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Level number (1 = first on-disk level).
    pub level: usize,
    /// Sorted runs (files) in the level: L1 holds up to `growth_factor` runs, one per
    /// flush; deeper levels hold at most one.
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
    /// Bytes of the level's Bloom filters, held in memory.
    pub filter_bytes: u64,
    /// Bytes of the level's pinned indexes (leaf fences), held in memory.
    pub pinned_bytes: u64,
    /// Bytes of the level's pinned large pointer tables, held in memory.
    pub large_pointer_bytes: u64,
    /// Clients' gets that searched one of the level's current runs and did not find their
    /// key there, and clients' scans that positioned a cursor in one and took no pair from
    /// it, since those runs were written: this process's count, plus what earlier writable
    /// processes counted up to their clean close (saved in `SEARCH_COUNTS` and added back
    /// at a writable open; a read-only open starts at zero, a crash loses what was counted
    /// since the last clean close) (`Options::merge_bytes_per_wasted_search`).
    pub wasted_searches: u64,
}

/// A snapshot of the engine's statistics (`Db::stats`).
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Put operations (batch members included).
    pub puts: u64,
    /// Delete operations (batch members included).
    pub deletes: u64,
    /// Merge operations (deltas written with `Db::merge`, batch members included).
    pub merges: u64,
    /// Range deletions (`Db::delete_range`, `Db::delete_prefix`, batch members included).
    pub range_deletes: u64,
    /// Range tombstones readers still apply (in memtables, and flushed ones that some run
    /// may still need).
    pub range_tombstones: u64,
    /// Versions flushes and compactions dropped because a range tombstone deleted them.
    pub dropped_by_range: u64,
    /// Keys whose deltas a flush, compaction or GC relocation folded into a value.
    pub deltas_folded: u64,
    /// Gets that wrote the value they folded from level files back as a put
    /// (`Options::fold_on_read`).
    pub reads_folded_back: u64,
    /// Point lookups.
    pub gets: u64,
    /// Gets by the read calls they made themselves, on their own thread (level nodes, log
    /// records, delta bucket records; a warm read of a leaf's neighbours counts one; a
    /// call that failed is not counted; a get a merge operator makes inside another get
    /// counts in both): none, one, two, three or more. Reads other threads make
    /// meanwhile (background work, other gets, scans) are not a get's. With `direct_io`
    /// each call is a device read; through the page cache some are served from memory.
    pub gets_by_reads: [u64; 4],
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
    /// Merges of level runs: level-to-level compactions, and merges of L1's runs into one
    /// (`merges_within_l1`).
    pub compactions: u64,
    /// Merges of L1's runs into one run of L1, which the searches clients wasted in those
    /// runs paid for (`Options::merge_bytes_per_wasted_search`); counted in `compactions`
    /// too.
    pub merges_within_l1: u64,
    /// Entries read by flushes and compactions.
    pub compaction_entries_in: u64,
    /// Older versions dropped by merges.
    pub dropped_shadowed: u64,
    /// Tombstones dropped at the bottom level.
    pub dropped_tombstones: u64,
    /// Times a writer waited for a flush to make room.
    pub write_stalls: u64,
    /// Bytes in the active and immutable memtables (keys, values and 48 bytes per version:
    /// the size a memtable switches at).
    pub memtable_bytes: u64,
    /// Bytes the active and immutable memtables' skip lists hold in their arenas (nodes,
    /// and the unused end of each one's last chunk): the memory `memtable_bytes` estimates.
    pub memtable_arena_bytes: u64,
    /// Immutable memtables waiting for their flush.
    pub immutable_memtables: usize,
    /// Bytes of the active and immutable memtables' key filters (beside `memtable_bytes`:
    /// 1/48th of `memtable_size` each, rounded up to a power of two).
    pub memtable_filter_bytes: u64,
    /// Bytes of the active and immutable memtables' spot tables (beside `memtable_bytes`:
    /// where keys written more than once were last linked, so that the next write of such
    /// a key skips the skip list's search; 40 bytes per slot, a slot per 256 to 512 bytes
    /// of `memtable_size`).
    pub memtable_spot_bytes: u64,
    /// Memory held by the node cache: each entry's bytes and what holding it costs
    /// (144 bytes per entry), the figure `Options::cache_bytes` bounds.
    pub cache_bytes: u64,
    /// Node-cache lookups that found their node.
    pub cache_hits: u64,
    /// Node-cache lookups that did not (the node was then read from its file).
    pub cache_misses: u64,
    /// Bytes of pinned level indexes (`Options::pinned_index_bytes`), beside the cache.
    pub pinned_index_bytes: u64,
    /// Reads of a missing leaf, or of a missing transient-log record's block, that read
    /// their neighbours with them while the cache had room (`Options::warm_read_bytes`).
    pub warm_reads: u64,
    /// Neighbouring leaves and transient-segment blocks (4 KiB, the last of a segment
    /// shorter) those reads put into the cache.
    pub warm_neighbours: u64,
    /// Gets of a large pair whose leaf was not cached that read the value's record at once,
    /// named by the level file's pinned large pointer table (`Options::
    /// large_pointer_table_bytes`), without reading the leaf.
    pub large_pointer_reads: u64,
    /// Records such a table named that the get did not take: the record held another key
    /// (a fingerprint the key shares with a large pair of the file), or could not be read,
    /// was damaged or too long to guess at; the get then read the leaf.
    pub large_pointer_misses: u64,
    /// Bytes of pinned large pointer tables (`Options::large_pointer_table_bytes`).
    pub large_pointer_table_bytes: u64,
    /// Cache entries this keyspace read back at open from the entries the cache held at
    /// the last close (`Options::reload_cache`).
    pub cache_reloaded: u64,
    /// Bytes those reloads read from their files (spans of nodes and records, and the
    /// gaps of at most 4 KiB between them read with them); counted in the I/O
    /// components of the files read, too.
    pub cache_reload_bytes: u64,
    /// Hint files found damaged or of an unknown version at open and ignored (the
    /// default keyspace's count; nothing was reloaded from them).
    pub cache_hints_rejected: u64,
    /// Wasted-search count files (`SEARCH_COUNTS`) found damaged, of an unknown version or
    /// unreadable at open and ignored (the default keyspace's count; their runs' counts
    /// started again from zero).
    pub search_counts_rejected: u64,
    /// Iterators opened (`Db::iter`, `Db::scan`, ...).
    pub scans: u64,
    /// Bytes of small-log files on disk (the database's one small log, shared by its
    /// keyspaces: counted in the default keyspace's statistics, 0 in the others'), with
    /// the space the log being appended to reserved ahead (`mmap_log_writes`: up to 1 MiB).
    pub wal_file_bytes: u64,
    /// Bytes of large-log records appended by user writes.
    pub large_bytes_written: u64,
    /// Large-log segments on disk.
    pub large_log_segments: u64,
    /// Bytes of large-log segment files on disk.
    pub large_log_file_bytes: u64,
    /// Bytes of large-log records known to be garbage (not yet collected).
    pub large_log_garbage_bytes: u64,
    /// Garbage-collection passes run (those an error cut short too).
    pub gc_passes: u64,
    /// Segments freed by garbage collection.
    pub gc_segments_freed: u64,
    /// Segment bytes freed by garbage collection.
    pub gc_bytes_freed: u64,
    /// Records garbage collection read and checked against the index.
    pub gc_entries_checked: u64,
    /// Live records garbage collection re-appended.
    pub gc_entries_relocated: u64,
    /// Bytes garbage collection re-appended.
    pub gc_bytes_relocated: u64,
    /// Passes of the GC thread that stopped on an error (a `Db::gc` caller gets the error
    /// instead), and victims left where they were because they were damaged.
    pub gc_errors: u64,
    /// Transient-log segments created by flushes.
    pub transient_segments_created: u64,
    /// Transient-log segments freed whole at the merge level.
    pub transient_segments_freed: u64,
    /// Transient-log segments on disk (waiting for their merge).
    pub transient_segments: u64,
    /// Bytes of transient-log segment files on disk.
    pub transient_log_file_bytes: u64,
    /// Medium pairs written to the transient log by flushes.
    pub medium_values_logged: u64,
    /// Medium pairs read back from the transient log and written in place.
    pub medium_values_merged: u64,
    /// Bytes of transient-log records read back at merges.
    pub medium_bytes_merged: u64,
    /// Times `space_amp_limit` triggered a full merge and GC.
    pub space_limit_runs: u64,
    /// Records flushes wrote into delta buckets (`Options::delta_separation`).
    pub delta_bucket_records_written: u64,
    /// Delta bucket collections (dead records dropped, each key's records combined).
    pub delta_bucket_gc_passes: u64,
    /// Delta buckets split in two by a collection.
    pub delta_bucket_splits: u64,
    /// Records delta bucket collections dropped (dead) or combined into others.
    pub delta_bucket_records_dropped: u64,
    /// Keys whose deltas a collection found grown past the threshold and folded into
    /// their base (written back as a put).
    pub delta_bucket_keys_folded: u64,
    /// Delta buckets.
    pub delta_buckets: usize,
    /// Committed bytes of the delta buckets' segments.
    pub delta_bucket_bytes: u64,
    /// Record locations in the delta buckets' in-memory index (about 40 bytes each).
    pub delta_bucket_index_entries: u64,
    /// Per-level sizes.
    pub levels: Vec<LevelStats>,
    /// Bytes read and written per I/O component.
    pub io: IoStatsSnapshot,
}

impl Stats {
    pub(crate) fn fill_counters(&mut self, c: &Counters) {
        self.puts = Counters::get(&c.puts);
        self.deletes = Counters::get(&c.deletes);
        self.merges = Counters::get(&c.merges);
        self.range_deletes = Counters::get(&c.range_deletes);
        self.dropped_by_range = Counters::get(&c.dropped_by_range);
        self.deltas_folded = Counters::get(&c.deltas_folded);
        self.reads_folded_back = Counters::get(&c.reads_folded_back);
        self.gets = Counters::get(&c.gets);
        self.gets_by_reads =
            std::array::from_fn(|i| c.gets_by_reads.get(i).map_or(0, Counters::get));
        self.scans = Counters::get(&c.scans);
        self.user_bytes_written = Counters::get(&c.user_bytes_written);
        self.user_bytes_read = Counters::get(&c.user_bytes_read);
        self.commit_groups = Counters::get(&c.commit_groups);
        self.synced_commits = Counters::get(&c.synced_commits);
        self.flushes = Counters::get(&c.flushes);
        self.compactions = Counters::get(&c.compactions);
        self.merges_within_l1 = Counters::get(&c.merges_within_l1);
        self.compaction_entries_in = Counters::get(&c.compaction_entries_in);
        self.dropped_shadowed = Counters::get(&c.dropped_shadowed);
        self.dropped_tombstones = Counters::get(&c.dropped_tombstones);
        self.write_stalls = Counters::get(&c.write_stalls);
        self.large_bytes_written = Counters::get(&c.large_bytes_written);
        self.gc_passes = Counters::get(&c.gc_passes);
        self.gc_segments_freed = Counters::get(&c.gc_segments_freed);
        self.gc_bytes_freed = Counters::get(&c.gc_bytes_freed);
        self.gc_entries_checked = Counters::get(&c.gc_entries_checked);
        self.gc_entries_relocated = Counters::get(&c.gc_entries_relocated);
        self.gc_bytes_relocated = Counters::get(&c.gc_bytes_relocated);
        self.gc_errors = Counters::get(&c.gc_errors);
        self.transient_segments_created = Counters::get(&c.transient_segments_created);
        self.transient_segments_freed = Counters::get(&c.transient_segments_freed);
        self.medium_values_logged = Counters::get(&c.medium_values_logged);
        self.medium_values_merged = Counters::get(&c.medium_values_merged);
        self.medium_bytes_merged = Counters::get(&c.medium_bytes_merged);
        self.space_limit_runs = Counters::get(&c.space_limit_runs);
        self.delta_bucket_records_written = Counters::get(&c.bucket_records_written);
        self.delta_bucket_gc_passes = Counters::get(&c.bucket_gc_passes);
        self.delta_bucket_splits = Counters::get(&c.bucket_splits);
        self.delta_bucket_records_dropped = Counters::get(&c.bucket_records_dropped);
        self.delta_bucket_keys_folded = Counters::get(&c.bucket_keys_folded);
        self.search_counts_rejected = Counters::get(&c.search_counts_rejected);
    }

    /// Bytes written by the engine (all components) per user byte written.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            return 0.0;
        }
        self.io.total_written() as f64 / self.user_bytes_written as f64
    }

    /// Share of node-cache lookups that found their node (0 when there were none).
    pub fn cache_hit_ratio(&self) -> f64 {
        let all = self.cache_hits + self.cache_misses;
        if all == 0 {
            return 0.0;
        }
        self.cache_hits as f64 / all as f64
    }

    /// Reads that gets and scans issued: level nodes, overflow values, and values in the
    /// large and transient logs (their `read_exact_at` calls; with `direct_io` each is one
    /// device read, without it some are served by the page cache). Background work (flush,
    /// compaction, GC, merges of the transient log) is counted elsewhere.
    pub fn lookup_reads(&self) -> u64 {
        [
            IoComponent::LevelRead,
            IoComponent::LargeLog,
            IoComponent::TransientLog,
        ]
        .iter()
        .map(|&c| self.io.read_ops_by(c))
        .sum()
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
            "operations: {} puts, {} deletes, {} merges, {} range deletes, {} gets",
            self.puts, self.deletes, self.merges, self.range_deletes, self.gets
        )?;
        writeln!(
            f,
            "user bytes: {:.1} MiB written, {:.1} MiB read",
            mib(self.user_bytes_written),
            mib(self.user_bytes_read)
        )?;
        writeln!(
            f,
            "commits: {} groups ({} synced); flushes {}; compactions {} ({} within L1); write \
             stalls {}",
            self.commit_groups,
            self.synced_commits,
            self.flushes,
            self.compactions,
            self.merges_within_l1,
            self.write_stalls
        )?;
        writeln!(
            f,
            "merges: {} entries in, {} shadowed versions dropped, {} tombstones dropped, {} \
             versions deleted by {} live range tombstones dropped",
            self.compaction_entries_in,
            self.dropped_shadowed,
            self.dropped_tombstones,
            self.dropped_by_range,
            self.range_tombstones
        )?;
        writeln!(
            f,
            "memory: memtables {:.1} MiB ({:.1} MiB of arena; {} immutable; key filters {:.1} MiB, spot tables {:.1} MiB), cache {:.1} MiB, pinned indexes {:.1} MiB, large pointer tables {:.1} MiB",
            mib(self.memtable_bytes),
            mib(self.memtable_arena_bytes),
            self.immutable_memtables,
            mib(self.memtable_filter_bytes),
            mib(self.memtable_spot_bytes),
            mib(self.cache_bytes),
            mib(self.pinned_index_bytes),
            mib(self.large_pointer_table_bytes)
        )?;
        writeln!(
            f,
            "reads: {} gets ({} made no read, {} one, {} two, {} three or more), {} scans; {} lookup reads ({:.1} MiB); node cache {} hits, {} misses ({:.1}% hits); {} reads around a leaf or record cached {} more; {} large values read without their leaf ({} guesses missed)",
            self.gets,
            self.gets_by_reads[0],
            self.gets_by_reads[1],
            self.gets_by_reads[2],
            self.gets_by_reads[3],
            self.scans,
            self.lookup_reads(),
            mib(self.io.read_by(IoComponent::LevelRead)
                + self.io.read_by(IoComponent::LargeLog)
                + self.io.read_by(IoComponent::TransientLog)),
            self.cache_hits,
            self.cache_misses,
            100.0 * self.cache_hit_ratio(),
            self.warm_reads,
            self.warm_neighbours,
            self.large_pointer_reads,
            self.large_pointer_misses
        )?;
        writeln!(
            f,
            "cache reload at open: {} entries, {:.1} MiB read; {} hint files rejected",
            self.cache_reloaded,
            mib(self.cache_reload_bytes),
            self.cache_hints_rejected
        )?;
        if self.search_counts_rejected > 0 {
            writeln!(
                f,
                "wasted-search count files rejected at open: {}",
                self.search_counts_rejected
            )?;
        }
        writeln!(f, "small log on disk: {:.1} MiB", mib(self.wal_file_bytes))?;
        writeln!(
            f,
            "large log: {} segments, {:.1} MiB on disk, {:.1} MiB known garbage; {:.1} MiB appended by writes",
            self.large_log_segments,
            mib(self.large_log_file_bytes),
            mib(self.large_log_garbage_bytes),
            mib(self.large_bytes_written)
        )?;
        writeln!(
            f,
            "transient log: {} segments, {:.1} MiB on disk; {} created, {} freed; {} medium pairs logged, {} merged in place ({:.1} MiB read back)",
            self.transient_segments,
            mib(self.transient_log_file_bytes),
            self.transient_segments_created,
            self.transient_segments_freed,
            self.medium_values_logged,
            self.medium_values_merged,
            mib(self.medium_bytes_merged)
        )?;
        writeln!(
            f,
            "gc: {} passes, {} segments freed ({:.1} MiB), {} records checked, {} relocated ({:.1} MiB), {} errors",
            self.gc_passes,
            self.gc_segments_freed,
            mib(self.gc_bytes_freed),
            self.gc_entries_checked,
            self.gc_entries_relocated,
            mib(self.gc_bytes_relocated),
            self.gc_errors
        )?;
        for l in &self.levels {
            writeln!(
                f,
                "L{}: {} run(s), {:.1} MiB on disk (target {:.1} MiB), {} entries ({} tombstones), {:.1} MiB live kv",
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
        write!(f, "fdatasyncs:")?;
        for c in IoComponent::ALL {
            write!(f, " {} {};", c.name(), self.io.syncs_by(c))?;
        }
        writeln!(f)?;
        write!(f, "write amplification: {:.2}", self.write_amplification())
    }
}
