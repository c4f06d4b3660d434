//! hybridkv in each placement mode, and the paper's Parallax-MS / -ML ablations.

use super::{
    common_options, show_bytes, Engine, EngineConfig, EngineKind, EngineOptions, ScanCount,
};
use crate::error::{BenchError, Result};
use hybridkv::io::IoComponent;
use hybridkv::{Db, Options, Placement};
use serde_json::json;
use std::path::Path;

/// An open hybridkv database.
pub(crate) struct HybridEngine {
    name: &'static str,
    db: Db,
    options: Options,
    bloom_asked: bool,
    rmw_as_merge: bool,
}

impl HybridEngine {
    /// The engine options for `kind` under the common settings.
    pub(crate) fn engine_options(kind: EngineKind, config: &EngineConfig) -> Options {
        let mut o = Options {
            cache_bytes: usize::try_from(config.cache_bytes).unwrap_or(usize::MAX),
            memtable_size: usize::try_from(config.memtable_bytes).unwrap_or(usize::MAX),
            direct_io: config.direct_io,
            mmap_reads: config.mmap_reads,
            sync: config.sync,
            background_threads: config.background_threads,
            bloom_bits_per_key: if config.bloom { 10 } else { 0 },
            // Always set: a database a merge run wrote must open for any later phase.
            merge_operator: Some(std::sync::Arc::new(super::patch::FieldPatch)),
            ..Options::default()
        };
        if let Some(level) = config.medium_merge_level {
            o.medium_merge_level = level;
        }
        if let Some(fill) = config.prepopulate_cache {
            o.prepopulate_cache = fill;
        }
        if let Some(bytes) = config.warm_read_bytes {
            o.warm_read_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        if let Some(bytes) = config.large_pointer_table_bytes {
            o.large_pointer_table_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        if let Some(bytes) = config.merge_bytes_per_wasted_search {
            o.merge_bytes_per_wasted_search = bytes;
        }
        if let Some(micros) = config.read_spin_us {
            o.read_spin_us = micros;
        }
        if let Some(ratio) = config.gc_threshold {
            o.gc_threshold = ratio;
        }
        if let Some(bytes) = config.leaf_size {
            o.leaf_size = bytes;
        }
        if let Some(reload) = config.reload_cache {
            o.reload_cache = reload;
        }
        match kind {
            EngineKind::HybridkvInPlace => o.placement = Placement::InPlace,
            EngineKind::HybridkvAllLog => o.placement = Placement::AllLog,
            EngineKind::HybridkvMs => {
                o.small_threshold = 1024;
                o.large_threshold = 1024;
            }
            EngineKind::HybridkvMl => {
                o.small_threshold = 120;
                o.large_threshold = 120;
            }
            EngineKind::HybridkvKdsep => o.delta_separation = true,
            _ => {}
        }
        o
    }

    pub(crate) fn open(kind: EngineKind, dir: &Path, config: &EngineConfig) -> Result<Self> {
        let options = Self::engine_options(kind, config);
        let db = Db::open(dir, options.clone()).map_err(|e| BenchError::engine(kind.name(), e))?;
        Ok(HybridEngine {
            name: kind.name(),
            db,
            options,
            bloom_asked: config.bloom,
            rmw_as_merge: config.rmw_as_merge,
        })
    }

    fn err(&self, e: hybridkv::Error) -> BenchError {
        BenchError::engine(self.name, e)
    }
}

impl Engine for HybridEngine {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.put(key, value).map_err(|e| self.err(e))
    }

    /// `get_value`: the value is a view of the cached record, not a copy (issue 17).
    fn read(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self
            .db
            .get_value(key)
            .map_err(|e| self.err(e))?
            .map(|v| v.len()))
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<ScanCount> {
        let mut count = ScanCount::default();
        // The scan's length is known: its large values are read in one batch, and handed
        // out as views of the records read (`values`: no copy into a `Vec` per value).
        for pair in self
            .db
            .range::<&[u8], _>(start..)
            .expect_pairs(len)
            .values()
            .take(len)
        {
            let (k, v) = pair.map_err(|e| self.err(e))?;
            count.pairs += 1;
            count.bytes += (k.len() + v.len()) as u64;
        }
        Ok(count)
    }

    fn rmw_is_merge(&self) -> bool {
        self.rmw_as_merge
    }

    fn merge(&self, key: &[u8], delta: &[u8]) -> Result<()> {
        self.db.merge(key, delta).map_err(|e| self.err(e))
    }

    fn finish(&self) -> Result<()> {
        self.db.flush().map_err(|e| self.err(e))?;
        self.db.compact().map_err(|e| self.err(e))
    }

    fn options(&self) -> EngineOptions {
        let o = &self.options;
        let mut m = common_options(&EngineConfig {
            cache_bytes: o.cache_bytes as u64,
            memtable_bytes: o.memtable_size as u64,
            direct_io: o.direct_io,
            bloom: self.bloom_asked,
            sync: o.sync,
            background_threads: o.background_threads,
            rmw_as_merge: self.rmw_as_merge,
            mmap_reads: o.mmap_reads,
            medium_merge_level: Some(o.medium_merge_level),
            prepopulate_cache: Some(o.prepopulate_cache),
            warm_read_bytes: Some(o.warm_read_bytes as u64),
            large_pointer_table_bytes: Some(o.large_pointer_table_bytes as u64),
            merge_bytes_per_wasted_search: Some(o.merge_bytes_per_wasted_search),
            read_spin_us: Some(o.read_spin_us),
            gc_threshold: Some(o.gc_threshold),
            leaf_size: Some(o.leaf_size),
            reload_cache: Some(o.reload_cache),
        });
        m.insert(
            "engine".into(),
            format!("hybridkv {}", env!("CARGO_PKG_VERSION")),
        );
        m.insert("placement".into(), format!("{:?}", o.placement));
        m.insert(
            "thresholds".into(),
            format!(
                "small < {} B <= medium < {} B <= large (key + value)",
                o.small_threshold, o.large_threshold
            ),
        );
        m.insert(
            "direct_io".into(),
            match (o.direct_io, o.mmap_reads) {
                (true, false) => "on: level-file writes (flush/compaction output), every level and log-segment read; log appends not direct".into(),
                (true, true) => "on for level-file writes (flush/compaction output); reads memory-mapped".into(),
                (false, _) => "off".into(),
            },
        );
        m.insert(
            "log_appends".into(),
            if o.mmap_log_writes {
                "small and large logs memory-mapped (a copy into the page cache per commit group)"
            } else {
                "buffered (a pwrite per commit group)"
            }
            .into(),
        );
        m.insert(
            "read_mode".into(),
            match (o.direct_io, o.mmap_reads) {
                (_, true) => "mmap (level files and log segments)",
                (true, false) => "direct",
                (false, false) => "buffered",
            }
            .into(),
        );
        m.insert(
            "bloom".into(),
            if o.bloom_bits_per_key > 0 {
                format!(
                    "on, {} bits per key (one filter per level file, in memory)",
                    o.bloom_bits_per_key
                )
            } else {
                "off".into()
            },
        );
        m.insert("compression".into(), "none (not implemented)".into());
        m.insert(
            "nodes".into(),
            format!(
                "leaf {}, index {}",
                show_bytes(o.leaf_size as u64),
                show_bytes(o.index_node_size as u64)
            ),
        );
        m.insert("growth_factor".into(), o.growth_factor.to_string());
        m.insert(
            "max_immutable_memtables".into(),
            o.max_immutable_memtables.to_string(),
        );
        m.insert(
            "large_log_gc".into(),
            format!(
                "segment {}, collect at {:.0}% garbage, every {:?}",
                show_bytes(o.large_segment_size as u64),
                o.gc_threshold * 100.0,
                o.gc_interval
            ),
        );
        m.insert(
            "medium_merge_level".into(),
            format!("{:?}", o.medium_merge_level),
        );
        m.insert(
            "prepopulate_cache".into(),
            if o.prepopulate_cache {
                "on: flushed leaves and medium records, merged leaves of cached regions"
            } else {
                "off"
            }
            .into(),
        );
        m.insert(
            "reload_cache".into(),
            if o.reload_cache {
                "on: what the cache held at the last close is read back at open".into()
            } else {
                "off".into()
            },
        );
        m.insert(
            "large_pointer_table_bytes".into(),
            if o.large_pointer_table_bytes == 0 {
                "off".into()
            } else {
                format!(
                    "{}: a get of a large pair whose leaf is not cached reads only its record",
                    show_bytes(o.large_pointer_table_bytes as u64)
                )
            },
        );
        m.insert(
            "warm_read_bytes".into(),
            if o.warm_read_bytes == 0 {
                "off".into()
            } else {
                format!(
                    "{}: a leaf miss reads its neighbours with it while the cache has room",
                    show_bytes(o.warm_read_bytes as u64)
                )
            },
        );
        m.insert(
            "lookup_merges".into(),
            if o.merge_bytes_per_wasted_search == 0 {
                "off".into()
            } else {
                format!(
                    "a level merges once its runs' wasted searches x {} B reach what the merge rewrites",
                    o.merge_bytes_per_wasted_search
                )
            },
        );
        m.insert(
            "read_spin_us".into(),
            if o.read_spin_us == 0 || !o.direct_io || o.mmap_reads {
                "off: a thread sleeps on each device read".into()
            } else {
                format!(
                    "{} us: a thread spins on a direct read's completion before sleeping (while a slept read takes over an eighth longer)",
                    o.read_spin_us
                )
            },
        );
        m
    }

    fn stats(&self) -> Option<serde_json::Value> {
        let s = self.db.stats().ok()?;
        let per = |f: &dyn Fn(IoComponent) -> u64| {
            IoComponent::ALL
                .iter()
                .map(|&c| (c.name().to_string(), json!(f(c))))
                .collect::<serde_json::Map<_, _>>()
        };
        // Beside the rest: one more key in the `json!` below passes its recursion limit.
        let mut v = json!({
            "bytes_written": per(&|c| s.io.written_by(c)),
            "bytes_read": per(&|c| s.io.read_by(c)),
            "read_ops": per(&|c| s.io.read_ops_by(c)),
            "gets": s.gets,
            "scans": s.scans,
            "lookup_reads": s.lookup_reads(),
            "cache_hits": s.cache_hits,
            "cache_misses": s.cache_misses,
            "warm_reads": s.warm_reads,
            "warm_neighbours": s.warm_neighbours,
            "cache_reload": {
                "entries": s.cache_reloaded,
                "bytes": s.cache_reload_bytes,
                "hints_rejected": s.cache_hints_rejected
            },
            "pinned_index_bytes": s.pinned_index_bytes,
            "memtable_spot_bytes": s.memtable_spot_bytes,
            // Bloom filters are held in memory outside the cache: the level files' and
            // the memtables' key filters.
            "filter_bytes": s.levels.iter().map(|l| l.filter_bytes).sum::<u64>()
                + s.memtable_filter_bytes,
            // The active memtable and the immutable ones awaiting their flush, at most.
            "memtable_budget_bytes": (self.options.memtable_size as u64)
                .saturating_mul(self.options.max_immutable_memtables as u64 + 1),
            "syncs": per(&|c| s.io.syncs_by(c)),
            "user_bytes_written": s.user_bytes_written,
            "user_bytes_read": s.user_bytes_read,
            "write_amplification": s.write_amplification(),
            "flushes": s.flushes,
            "compactions": s.compactions,
            "write_stalls": s.write_stalls,
            "commit_groups": s.commit_groups,
            "level_file_bytes": s.level_file_bytes(),
            "large_log_file_bytes": s.large_log_file_bytes,
            "large_log_garbage_bytes": s.large_log_garbage_bytes,
            "transient_log_file_bytes": s.transient_log_file_bytes,
            "medium_values_logged": s.medium_values_logged,
            "medium_values_merged": s.medium_values_merged,
            "gc_passes": s.gc_passes,
            "gc_segments_freed": s.gc_segments_freed,
            "gc_bytes_freed": s.gc_bytes_freed,
            "gc_entries_checked": s.gc_entries_checked,
            "gc_bytes_relocated": s.gc_bytes_relocated,
            "levels": s.levels.iter().map(|l| json!({
                "level": l.level, "runs": l.files, "file_bytes": l.file_bytes, "entries": l.entries, "wasted_searches": l.wasted_searches
            })).collect::<Vec<_>>(),
        });
        v["merges_within_l1"] = json!(s.merges_within_l1);
        // Gets that read a large value without its leaf, guesses not taken, and the
        // tables' pinned bytes (`Options::large_pointer_table_bytes`).
        v["large_pointer_reads"] = json!([s.large_pointer_reads, s.large_pointer_misses]);
        v["large_pointer_table_bytes"] = json!(s.large_pointer_table_bytes);
        // Microseconds the reading threads waited per component (direct I/O: the
        // device latency each read saw).
        v["read_us"] = json!(per(&|c| s.io.read_nanos_by(c) / 1000));
        // The read calls `read_us` timed (a batch's reads are counted, not timed).
        v["timed_reads"] = json!(per(&|c| s.io.timed_reads_by(c)));
        // Gets by the read calls each made: none, one, two, three or more.
        v["gets_by_reads"] = json!(s.gets_by_reads);
        Some(v)
    }
}
