//! Engine options, their documented defaults, and their validation.
//!
//! Owns: the tunables a user can set and the checks that reject bad ones at `open`
//! (with `Error::InvalidArgument` naming the option). Never: behaviour; other modules read
//! these values.

use crate::error::{Error, Result};
use crate::placement::{Category, Placement};
use std::time::Duration;

/// Largest key accepted, in bytes: small enough that one entry with the longest key (and
/// its slot, LSN and log pointer) fits a 4 KiB leaf, the smallest `leaf_size`. Databases
/// written before 2026-11-29 may hold keys up to 4096 bytes; they read as before, and
/// keep `leaf_size` at 8 KiB or more (a merge into 4 KiB leaves that meets such a key
/// stops with `Error::InvalidArgument` naming it).
pub const MAX_KEY_SIZE: usize = 4000;
/// Largest value accepted, in bytes (16 MiB, inclusive).
pub const MAX_VALUE_SIZE: usize = 16 << 20;

/// Options for [`crate::Db::open`]. Every field has a documented default (`Options::default()`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Create the directory and an empty database if none exists. Default `true`.
    /// With `false`, opening a directory that holds no hybridkv database is an error.
    pub create_if_missing: bool,
    /// Bytes of key-value data the in-memory L0 (memtable) holds before it is switched to
    /// immutable and flushed. Default 64 MiB. Range 64 KiB ..= 4 GiB.
    pub memtable_size: usize,
    /// How many full memtables may wait for their flush before writers are slowed down.
    /// Default 2. Range 1 ..= 16.
    pub max_immutable_memtables: usize,
    /// Size ratio between consecutive levels: L1 holds up to `growth_factor` runs (one per
    /// flush) or `memtable_size * growth_factor` bytes, and each level below is
    /// `growth_factor` times what the level above holds when it is merged down.
    /// Default 8 (the paper's value). Range 2 ..= 64.
    pub growth_factor: u32,
    /// Merges driven by lookups (LevelDB's seek compaction, weighed against the merge's
    /// size): a client's get that searches a leaf of a run and does not find its key there
    /// wasted that search (from the cache or the device alike; a run whose Bloom filter
    /// rules the key out, or whose pinned index puts the key below its first key, is not
    /// searched and counts nothing), and so did a client's scan that positioned a cursor
    /// in a run (a leaf searched for its start) and took no pair from it (a range has no
    /// filter: Bloom filters spare scans nothing); the engine's own lookups and walks
    /// (GC's, `check`'s, space accounting's) count nothing. A level is due for a merge
    /// into the next once its runs' wasted searches times this many bytes reach the bytes
    /// the merge rewrites (the level, and the next level's files),
    /// provided the merge leaves fewer runs to search (not a lone run over an empty
    /// level); so a read-heavy phase that pays for L1's runs on every get merges them
    /// after it has spent about what the merge costs, however few writes come. L1's runs
    /// are merged into one run of L1 instead once their waste reaches what rewriting them
    /// alone costs (`Stats::merges_within_l1`): a get then searches one run of L1, not one
    /// per run, without L2 being rewritten. At 40
    /// million SD pairs right after a load (seven L1 runs, Bloom filters off), a 2M-get Run C merged L1 into
    /// L2 (530 MB) on the way and ran 1.26x faster than with this off; the next Run C, on
    /// one L1-less tree, 1.56x (`docs/PERFORMANCE.md`, thirtieth round). Counts go with a
    /// run when it is merged away, and outlive the process: a clean close saves them
    /// (`SEARCH_COUNTS`) and the next writable open adds them back, so a merge the gets of
    /// several processes paid for runs (a crash loses what was counted since the last
    /// clean close); they are counted with this option `0` too. `Stats`
    /// reports them per level (`LevelStats::wasted_searches`). Default 256: there a search
    /// in vain of a cached leaf cost a get about 1.9 us, and the merge at most about 18 ns
    /// of processor time per byte it wrote, so one search was worth at least about 100
    /// bytes; the default weighs the client's time more, since the merge runs beside it
    /// on a background thread. `0` turns lookup-driven merges off. Range 0 ..= 1 MiB. A
    /// keyspace's setting (like `growth_factor`), stored with it.
    pub merge_bytes_per_wasted_search: u64,
    /// Number of on-disk levels (L1..=Lmax). Default 7. Range 2 ..= 12.
    pub max_levels: usize,
    /// Leaf node size in bytes (paper: 8 KiB). Default 4096. A multiple of 4096 in
    /// 4 KiB ..= 1 MiB. A point lookup that misses the cache reads one leaf, so smaller
    /// leaves read fewer bytes per get (4 KiB matches RocksDB's default block) at the
    /// cost of twice the pinned fences (`pinned_index_bytes`) and of values over about a
    /// third of a 4 KiB leaf (instead of a quarter of a larger one) going out of line.
    pub leaf_size: usize,
    /// Index node size in bytes (paper: 12 KiB). Default 12288. A multiple of 4096 in
    /// 12 KiB ..= 1 MiB; an index node must hold at least two maximum-size pivots.
    pub index_node_size: usize,
    /// Byte budget of the node cache. Default 256 MiB. `0` disables caching. Each entry
    /// is charged its bytes and 144 bytes more, what holding it costs in memory, so the
    /// budget bounds the memory the cache takes (small records cost nearly double their
    /// bytes). One cache
    /// serves every keyspace of a database: the options `Db::open` is given decide it (a
    /// keyspace's own setting is replaced by the database's, as is `pinned_index_bytes`).
    pub cache_bytes: usize,
    /// Put what flushes and merges write into the node cache as they write it, so that
    /// the gets after one do not read from the device what they found cached before it
    /// (RocksDB's `prepopulate_block_cache`, extended to merges): a flush caches the
    /// leaves of its run and the medium records it logs (just written: the keys likeliest
    /// to be read), up to an eighth of `cache_bytes` each (as the cache charges them: their
    /// bytes and 144 bytes per entry); a merge caches each leaf that
    /// holds a key it read from a leaf the cache held in a run below L1 (one a get, a
    /// scan, or a lookup of GC or of a flush had read). Flushed leaves do not count, so a
    /// merge of L1 does not cache everything it writes. A put's large value is cached as
    /// it is appended to the large log when a get read its key lately (one of about the
    /// last 65,536 keys read: a read after an update of a hot key would otherwise read the
    /// new value back from the device; a load, or an update of a key nobody reads, caches
    /// nothing). Default `true`.
    pub prepopulate_cache: bool,
    /// Read level files and log segments (unless `mmap_reads`), and write
    /// flush/compaction output, with `O_DIRECT`, bypassing the page cache so that device traffic can be measured (log
    /// appends stay buffered and are made durable by fsync). Default `false` (some file
    /// systems, e.g. tmpfs, reject `O_DIRECT`; `open` then fails with `Error::Io`).
    pub direct_io: bool,
    /// Read level files and log segments through memory maps (Kreon's mode): a read copies
    /// out of the mapping and the kernel reads missing pages on the fault, so a read that
    /// hits the page cache costs no system call; batched scan reads ask the kernel to
    /// fault their pages in ahead (`madvise(WILLNEED)`). Writes are unchanged (with
    /// `direct_io`, flush and compaction output is still written with `O_DIRECT`). Mapped
    /// pages count as page cache, outside `cache_bytes`. One trade: a device error met
    /// while reading a mapped page stops the process (`SIGBUS`) instead of returning
    /// `Error::Io`, as with every memory-mapped store. Not used by
    /// [`Db::open_read_only`](crate::Db::open_read_only) (a writer beside it may cut a torn
    /// log tail it has mapped). Default `false`. `docs/PERFORMANCE.md` compares the three
    /// read modes.
    pub mmap_reads: bool,
    /// With `direct_io`, how long (in microseconds) a thread waiting on a device read of a
    /// level file or log segment spins on the read's completion before it sleeps in the
    /// kernel: the read goes through the thread's `io_uring` and the thread polls its
    /// completion queue. On a virtual machine whose idle processors halt, a thread that
    /// sleeps on a read waits for the hypervisor to wake its processor too (on this
    /// project's 2-core machine an 8 KiB read took 86 us slept on, 58 us spun on), so
    /// a get that reads from the device returns sooner, for more processor time: the
    /// spinning thread is busy for the whole read. At most half the processors spin at
    /// once (at least one); a read that finds them all spinning sleeps. Each thread spins
    /// only where it pays: it sleeps at once while its recent reads outlast the spin, or
    /// while a read slept on takes at most an eighth longer than one spun on (it measures
    /// both ways, one wait in 32 taking the way it would not), as on machines whose
    /// processors wake at once (on the project's later machine spinning bought nothing
    /// and doubled the processor time per get). `0` sleeps at
    /// once, as a plain `pread` does. Default 200 (a device read's 99th percentile on
    /// this machine is about 150 us). Range 0 ..= 100,000. Ignored without `direct_io`
    /// and with `mmap_reads`. `docs/PERFORMANCE.md` gives its figures.
    pub read_spin_us: u32,
    /// Append to the small log (the write-ahead log) and to the large log through memory
    /// maps: a commit's record and its large values are copied into the page cache with
    /// no system call (a `pwrite` of a 60-byte record costs about 0.75 us of kernel time
    /// on this project's machine, the copy 0.05 us), and they reach the operating system
    /// as a `pwrite` would, so a crash of the process loses no acknowledged write; `sync`
    /// still ends in `fdatasync`. Each log file reserves its space ahead (`fallocate`,
    /// 4 KiB first, doubling up to 1 MiB steps),
    /// so on a file system that allocates blocks there (ext4, xfs) a full disk is an
    /// `Error::Io` at that step, not a fault inside the mapping; on copy-on-write file
    /// systems (btrfs, ZFS, bcachefs), where a reservation is no such promise, and where
    /// `fallocate` or a writable shared mapping is not supported, the log is written with
    /// buffered `pwrite`s instead. A memtable switch cuts the small log it leaves to its
    /// records, a full large-log segment is cut before the next starts, and a crash
    /// leaves a tail of zeros that the next open reads as the log's end and cuts. The trade every memory-mapped store makes: a device error met when
    /// the kernel must read a page of the log back in (the last, partly written page,
    /// after it was written back and evicted), or another process cutting the log file
    /// while it is open, stops the process (`SIGBUS`) instead of returning an error.
    /// Default `true`; `false` writes the log with a `pwrite` per commit group.
    pub mmap_log_writes: bool,
    /// Threads that run flushes and compactions. Default 2. Range 1 ..= 64.
    pub background_threads: usize,
    /// Default durability of writes made without explicit `WriteOptions`: `true` makes every
    /// write fsync the log before it is acknowledged. Default `false`.
    pub sync: bool,
    /// Where values are stored: `Hybrid` (default), `InPlace` or `AllLog`.
    pub placement: Placement,
    /// Pairs (key + value bytes) smaller than this are *small* and stay in place.
    /// Default 120 (see `placement` for the derivation). Setting it equal to
    /// `large_threshold` folds medium into small (the paper's Parallax-MS).
    pub small_threshold: usize,
    /// Pairs of at least this many bytes are *large* and go to the large log. Default 1024.
    /// Setting it equal to `small_threshold` folds medium into large (Parallax-ML).
    pub large_threshold: usize,
    /// Size at which a large-log segment is closed and a new one started. Default 2 MiB.
    /// Range 64 KiB ..= 1 GiB.
    pub large_segment_size: usize,
    /// A large-log segment is collected once this fraction of its bytes is garbage.
    /// Default 0.10. Range (0, 1].
    pub gc_threshold: f64,
    /// How often the garbage collector wakes on its own. Default 1 s.
    pub gc_interval: Duration,
    /// Where medium pairs leave the transient log and are written in place: the last
    /// level (default) or the one above it (less transient-log space, more rewriting).
    pub medium_merge_level: MediumMergeLevel,
    /// Keep bytes on disk under this multiple of the live data: when the garbage
    /// collector's periodic check (every 10 `gc_interval`s; it scans every key) finds more,
    /// it merges every level down and collects every log segment holding garbage.
    /// `None` (default) leaves space to the normal merge and GC thresholds. At least 1.1.
    pub space_amp_limit: Option<f64>,
    /// Bits per key of the Bloom filter each level file carries (kept in memory while the
    /// file is open: `bits / 8` bytes per key): a point lookup skips a run whose filter
    /// rules its key out, without reading a node. 10 (about 1% false positives) by
    /// default; 0 writes no filter. Range 0 ..= 30. Files written without one are still
    /// read (they are searched).
    pub bloom_bits_per_key: u32,
    /// Memory for pinned level indexes (PinK's level pinning), beside the node cache: each
    /// level file, as it opens, keeps the first key and offset of every leaf in memory
    /// while this budget has room (about 40 bytes per 8 KiB leaf with 24-byte keys: 0.5%
    /// of the level data), so a point lookup finds its leaf in each run with one binary
    /// search and no index-node reads, and skips a run whose first key is above its key.
    /// Files that do not fit read their index through the node cache. Default 256 MiB
    /// (every level of about 50 GB of level data); `0` turns pinning off. `Stats::
    /// pinned_index_bytes` reports the bytes held.
    pub pinned_index_bytes: usize,
    /// Memory for large pointer tables, beside the pinned indexes. While it is not 0,
    /// level files are written with a table of their large pairs' log pointers, keyed by a
    /// 32-bit fingerprint of the key (16 bytes per large pair in the file), and each file
    /// keeps its table in memory at open while this budget has room (16.5 bytes per large
    /// pair). A get of a large pair whose leaf is not cached then reads the value's record
    /// at once and takes it when the record holds its key: one device read instead of two
    /// (the leaf, then the record). A merge holds its output's table in memory until the
    /// file is finished (32 bytes per large pair at its peak, while it encodes). Default 256 MiB (the
    /// tables of about 16 million large pairs); `0` writes no table and pins none (files
    /// written with one are then read as without). `Stats::large_pointer_table_bytes`
    /// reports the bytes held, `Stats::large_pointer_reads` the gets they served.
    pub large_pointer_table_bytes: usize,
    /// While the node cache has room (a fresh process, a restart: a cold cache), a leaf
    /// read that misses reads this many bytes of the leaves around it in its run (the
    /// pinned fences' group of `warm_read_bytes / leaf_size` leaves holding it, those back
    /// to back with it) in one device read and caches them; a medium value's record that
    /// misses in a transient segment (sorted by key, cached in 4 KiB blocks) is read with
    /// the blocks after its own, up to this many bytes. A device read costs about
    /// the same processor time whatever its size up to tens of KiB (50 us for 8 KiB,
    /// 65 us for 64 KiB on this project's 2-core virtual machine, most of it the device
    /// notification and the wait), and a process that starts with a cold cache over
    /// levels that fit in it reads nearly every leaf once: a group read pays that cost
    /// once per group. Once one more group would fill the cache past its share (the
    /// first time it would: reads around a leaf are for a cold cache), a miss reads its
    /// leaf alone, and the rest fills with what reads ask for. The share is the budget
    /// over the open level files' node bytes, between a half and fifteen sixteenths:
    /// when the cache can hold most of the levels, nearly every neighbour is read before
    /// it is evicted (at 40M SD pairs, levels 1.14 times the cache, groups until 15/16
    /// full made 14-16% fewer device reads per get than until half full); when the
    /// levels are several times the cache, most neighbours are evicted unread and cost
    /// their bytes for nothing (at 40M MD pairs, 1.9 times the cache, 15/16 read 2.25 KiB
    /// per get, a half 1.90 KiB at 3% more device reads).
    /// Files without a pinned index read their leaves alone, a transient record's miss
    /// its own block (or two, for a record across a block's end), and large-log records
    /// (in write order) are read alone. `Stats::warm_reads` and `warm_neighbours` count
    /// the reads and the neighbours (leaves, blocks) they cached. Default 64 KiB; `0`
    /// turns it off. At most 4 MiB. A database's setting (like `cache_bytes`).
    pub warm_read_bytes: usize,
    /// A warm restart: at a clean close the database records which entries its node
    /// cache holds (their files, offsets and lengths, not their bytes) in the file
    /// `CACHE_HINTS`, and the next open starts a thread that reads them back into the
    /// cache (adjacent ones in one device read, 16 reads at a time), so that a restarted
    /// process serves the working set of the last one from memory within seconds instead
    /// of one device read per miss. Each entry is checked as a read would check it;
    /// entries of files no longer live are skipped; the reload stops once the cache has
    /// a sixteenth of its budget free, and never evicts what reads bring in meanwhile
    /// (while it runs, a miss reads its leaf alone, without `warm_read_bytes`' group).
    /// The hint file is advice: one that is missing, damaged or stale costs nothing but
    /// the reload (`Stats::cache_hints_rejected`); `Stats::cache_reloaded` and
    /// `cache_reload_bytes` count what was read back, and `Db::wait_for_cache_reload`
    /// waits for it. Not for read-only opens, which neither read nor write hints.
    /// Default off: at 40M MD pairs, phase after phase, it made no get faster and scans
    /// slower (the entries of the last phase take the room a cold cache would fill with
    /// the new phase's own group reads; `docs/PERFORMANCE.md`, twenty-third round). No
    /// effect without a cache. A database's setting (like `cache_bytes`).
    pub reload_cache: bool,
    /// The operator that folds deltas written with `Db::merge` (or `WriteBatch::merge`)
    /// into values: on reads, and at flushes, compactions and GC relocations. `None`
    /// (default): `merge` is refused, and reading a key that holds deltas fails with
    /// `Error::InvalidArgument`. A database that holds deltas must be opened with the same
    /// operator each time (its name is stored in the `OPTIONS` file). Ready operators:
    /// [`crate::CounterAdd`], [`crate::Append`], [`crate::Max`].
    pub merge_operator: Option<std::sync::Arc<dyn crate::delta::MergeOperator>>,
    /// A get that folds deltas read from level files (with their base, or at the bottom)
    /// writes the folded value back as a put, unless the key was written since (KDSep's
    /// fold of deltas into their base): later reads of the key stop at the memtable, and
    /// its deltas are dropped by the next merges instead of being carried down the levels.
    /// The write-back never waits: it is skipped when another write holds the log or the
    /// memtable is full. Default `true`.
    pub fold_on_read: bool,
    /// KDSep's delta separation: a flush writes the deltas it cannot fold (their base is
    /// in an older run, or is a large value) into the key's *delta bucket* (a log of its
    /// own, hashed by key) instead of into the run, which gets a 20-to-40-byte stand-in
    /// with their LSN range. Compactions then move the stand-in, never the deltas, and a
    /// read of the key's deltas is one bucket read whatever the number of levels they
    /// came down through. Buckets are collected (their dead records dropped, each key's
    /// records combined) and split as they grow (`delta_bucket_size`). A database that
    /// has buckets reads them whatever this option says later. Default `false`.
    pub delta_separation: bool,
    /// Bytes of records a delta bucket may hold before it is collected; a bucket still
    /// over half of this after collection splits in two. Default 4 MiB (4 KiB ..= 1 GiB).
    pub delta_bucket_size: u64,
}

/// The level at which medium pairs are merged in place (`Options::medium_merge_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MediumMergeLevel {
    /// The last level of the tree (Parallax's default).
    #[default]
    Last,
    /// The level above the last.
    SecondToLast,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            memtable_size: 64 << 20,
            max_immutable_memtables: 2,
            growth_factor: 8,
            merge_bytes_per_wasted_search: 256,
            max_levels: 7,
            leaf_size: 4096,
            index_node_size: 12288,
            cache_bytes: 256 << 20,
            direct_io: false,
            mmap_reads: false,
            read_spin_us: 200,
            mmap_log_writes: true,
            background_threads: 2,
            sync: false,
            placement: Placement::Hybrid,
            small_threshold: 120,
            large_threshold: 1024,
            large_segment_size: 2 << 20,
            gc_threshold: 0.10,
            gc_interval: Duration::from_secs(1),
            medium_merge_level: MediumMergeLevel::Last,
            prepopulate_cache: true,
            space_amp_limit: None,
            bloom_bits_per_key: 10,
            pinned_index_bytes: 256 << 20,
            large_pointer_table_bytes: 256 << 20,
            warm_read_bytes: 64 << 10,
            reload_cache: false,
            merge_operator: None,
            fold_on_read: true,
            delta_separation: false,
            delta_bucket_size: 4 << 20,
        }
    }
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(what()))
    }
}

impl Options {
    /// The size class of a pair of `key_len + value_len` bytes under these options.
    pub(crate) fn classify(&self, key_len: usize, value_len: usize) -> Category {
        self.placement.classify(
            self.small_threshold,
            self.large_threshold,
            key_len,
            value_len,
        )
    }

    /// Checks every option; the error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        check((64 << 10..=4 << 30).contains(&self.memtable_size), || {
            format!(
                "memtable_size = {} (must be 64 KiB ..= 4 GiB)",
                self.memtable_size
            )
        })?;
        check((1..=16).contains(&self.max_immutable_memtables), || {
            format!(
                "max_immutable_memtables = {} (must be 1 ..= 16)",
                self.max_immutable_memtables
            )
        })?;
        check(self.merge_bytes_per_wasted_search <= 1 << 20, || {
            format!(
                "merge_bytes_per_wasted_search = {} (must be 0 ..= 1 MiB)",
                self.merge_bytes_per_wasted_search
            )
        })?;
        check(
            (4 << 10..=1 << 30).contains(&self.delta_bucket_size),
            || {
                format!(
                    "delta_bucket_size = {} (must be 4 KiB ..= 1 GiB)",
                    self.delta_bucket_size
                )
            },
        )?;
        check((2..=64).contains(&self.growth_factor), || {
            format!("growth_factor = {} (must be 2 ..= 64)", self.growth_factor)
        })?;
        check((2..=12).contains(&self.max_levels), || {
            format!("max_levels = {} (must be 2 ..= 12)", self.max_levels)
        })?;
        check(
            (4 << 10..=1 << 20).contains(&self.leaf_size) && self.leaf_size.is_multiple_of(4096),
            || {
                format!(
                    "leaf_size = {} (must be a multiple of 4096 in 4 KiB ..= 1 MiB)",
                    self.leaf_size
                )
            },
        )?;
        check(
            (12 << 10..=1 << 20).contains(&self.index_node_size)
                && self.index_node_size.is_multiple_of(4096),
            || {
                format!(
                    "index_node_size = {} (must be a multiple of 4096 in 12 KiB ..= 1 MiB)",
                    self.index_node_size
                )
            },
        )?;
        check((1..=64).contains(&self.background_threads), || {
            format!(
                "background_threads = {} (must be 1 ..= 64)",
                self.background_threads
            )
        })?;
        check(
            (64 << 10..=1 << 30).contains(&self.large_segment_size),
            || {
                format!(
                    "large_segment_size = {} (must be 64 KiB ..= 1 GiB)",
                    self.large_segment_size
                )
            },
        )?;
        // Written so that NaN fails too.
        check(self.gc_threshold > 0.0 && self.gc_threshold <= 1.0, || {
            format!("gc_threshold = {} (must be in (0, 1])", self.gc_threshold)
        })?;
        check(self.small_threshold <= self.large_threshold, || {
            format!(
                "small_threshold = {} is above large_threshold = {}",
                self.small_threshold, self.large_threshold
            )
        })?;
        check(!self.gc_interval.is_zero(), || {
            "gc_interval must not be zero".to_string()
        })?;
        check(self.bloom_bits_per_key <= 30, || {
            format!(
                "bloom_bits_per_key = {} (must be 0 ..= 30)",
                self.bloom_bits_per_key
            )
        })?;
        check(self.read_spin_us <= 100_000, || {
            format!(
                "read_spin_us = {} (must be 0 ..= 100000)",
                self.read_spin_us
            )
        })?;
        check(self.warm_read_bytes <= 4 << 20, || {
            format!(
                "warm_read_bytes = {} (must be 0 ..= 4 MiB)",
                self.warm_read_bytes
            )
        })?;
        Ok(())
    }
}

/// Per-write options.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Fsync the log before acknowledging, so the write survives power loss
    /// (not only a process crash), and with it every write acknowledged before it.
    /// Default `false`.
    pub sync: bool,
}

/// Checks a key against the documented limits.
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("key is empty".into()));
    }
    if key.len() > MAX_KEY_SIZE {
        return Err(Error::InvalidArgument(format!(
            "key is {} bytes, the maximum is {MAX_KEY_SIZE}",
            key.len()
        )));
    }
    Ok(())
}

/// Checks a value against the documented limits.
pub(crate) fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_SIZE {
        return Err(Error::InvalidArgument(format!(
            "value is {} bytes, the maximum is {MAX_VALUE_SIZE}",
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fold_is_bounded_like_a_put() {
        assert_eq!(crate::delta::MAX_FOLDED_VALUE, MAX_VALUE_SIZE);
    }

    #[test]
    fn defaults_are_valid() {
        Options::default().validate().unwrap();
    }

    #[test]
    fn bad_options_name_the_option() {
        let cases: Vec<(Options, &str)> = vec![
            (
                Options {
                    memtable_size: 10,
                    ..Options::default()
                },
                "memtable_size",
            ),
            (
                Options {
                    growth_factor: 1,
                    ..Options::default()
                },
                "growth_factor",
            ),
            (
                Options {
                    leaf_size: 5000,
                    ..Options::default()
                },
                "leaf_size",
            ),
            (
                Options {
                    merge_bytes_per_wasted_search: (1 << 20) + 1,
                    ..Options::default()
                },
                "merge_bytes_per_wasted_search",
            ),
            (
                Options {
                    index_node_size: 8192,
                    ..Options::default()
                },
                "index_node_size",
            ),
            (
                Options {
                    background_threads: 0,
                    ..Options::default()
                },
                "background_threads",
            ),
            (
                Options {
                    max_levels: 1,
                    ..Options::default()
                },
                "max_levels",
            ),
            (
                Options {
                    max_immutable_memtables: 0,
                    ..Options::default()
                },
                "max_immutable_memtables",
            ),
            (
                Options {
                    small_threshold: 2000,
                    ..Options::default()
                },
                "small_threshold",
            ),
            (
                Options {
                    large_segment_size: 10,
                    ..Options::default()
                },
                "large_segment_size",
            ),
            (
                Options {
                    gc_threshold: f64::NAN,
                    ..Options::default()
                },
                "gc_threshold",
            ),
            (
                Options {
                    bloom_bits_per_key: 31,
                    ..Options::default()
                },
                "bloom_bits_per_key",
            ),
            (
                Options {
                    read_spin_us: 100_001,
                    ..Options::default()
                },
                "read_spin_us",
            ),
            (
                Options {
                    warm_read_bytes: (4 << 20) + 1,
                    ..Options::default()
                },
                "warm_read_bytes",
            ),
            (
                Options {
                    gc_interval: Duration::ZERO,
                    ..Options::default()
                },
                "gc_interval",
            ),
        ];
        for (opts, name) in cases {
            let err = opts.validate().unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument(m) if m.contains(name)),
                "{err}"
            );
        }
    }

    #[test]
    fn key_and_value_limits() {
        assert!(check_key(b"").is_err());
        assert!(check_key(&[1u8; MAX_KEY_SIZE]).is_ok());
        assert!(check_key(&[1u8; MAX_KEY_SIZE + 1]).is_err());
        assert!(check_value(&vec![0u8; MAX_VALUE_SIZE]).is_ok());
        assert!(check_value(&vec![0u8; MAX_VALUE_SIZE + 1]).is_err());
    }
}
