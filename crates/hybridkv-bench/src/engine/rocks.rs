//! RocksDB (every pair in place) and its integrated BlobDB (every value in blob files,
//! blob GC on), through the `rocksdb` crate.

use super::{common_options, show_bytes, Engine, EngineConfig, EngineOptions, ScanCount};
use crate::error::{BenchError, Result};
use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Options, WaitForCompactOptions, WriteOptions, DB,
};
use serde_json::json;
use std::path::Path;

/// BlobDB's garbage collection relocates blobs from the oldest this-fraction of blob
/// files during compaction (the paper set BlobDB's GC to scan 30% of the log).
const BLOB_GC_AGE_CUTOFF: f64 = 0.3;

/// An open RocksDB database.
pub(crate) struct RocksEngine {
    name: &'static str,
    db: DB,
    write: WriteOptions,
    blob: bool,
    config: EngineConfig,
    // Kept alive for as long as the database uses it.
    _cache: Cache,
}

impl RocksEngine {
    pub(crate) fn open(blob: bool, dir: &Path, config: &EngineConfig) -> Result<Self> {
        let name = if blob { "blobdb" } else { "rocksdb" };
        let cache = Cache::new_lru_cache(usize::try_from(config.cache_bytes).unwrap_or(usize::MAX));
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        if config.bloom {
            table.set_bloom_filter(10.0, false);
        }
        let mut o = Options::default();
        o.create_if_missing(true);
        o.set_block_based_table_factory(&table);
        o.set_compression_type(DBCompressionType::None);
        o.set_write_buffer_size(usize::try_from(config.memtable_bytes).unwrap_or(usize::MAX));
        // hybridkv: one active memtable plus up to two waiting for their flush.
        o.set_max_write_buffer_number(3);
        let threads = i32::try_from(config.background_threads.max(1)).unwrap_or(i32::MAX);
        o.set_max_background_jobs(threads);
        o.set_use_direct_reads(config.direct_io);
        o.set_use_direct_io_for_flush_and_compaction(config.direct_io);
        o.set_keep_log_file_num(2);
        // Level sizes alike with hybridkv's (L1 about 8 memtables, then 8x per level), so
        // that a run at a given depth builds as many levels in both. RocksDB's defaults
        // (a 256 MiB base, 10x) are the same shape at a 32 MiB write buffer.
        o.set_max_bytes_for_level_base(config.memtable_bytes.saturating_mul(8));
        o.set_max_bytes_for_level_multiplier(8.0);
        o.set_target_file_size_base(config.memtable_bytes.max(1 << 20));
        if blob {
            o.set_enable_blob_files(true);
            o.set_min_blob_size(0);
            o.set_blob_file_size(config.memtable_bytes);
            o.set_blob_compression_type(DBCompressionType::None);
            o.set_enable_blob_gc(true);
            o.set_blob_gc_age_cutoff(BLOB_GC_AGE_CUTOFF);
        }
        {
            // The same field patch as hybridkv's operator, with the same partial merge.
            // Always set: a database a merge run wrote must open for any later phase.
            o.set_merge_operator(
                super::patch::NAME,
                |_key: &[u8], base: Option<&[u8]>, deltas: &rocksdb::MergeOperands| {
                    Some(super::patch::apply(base, deltas.iter()))
                },
                |_key: &[u8], _base: Option<&[u8]>, deltas: &rocksdb::MergeOperands| {
                    Some(super::patch::combine(deltas.iter()))
                },
            );
        }
        let db = DB::open(&o, dir).map_err(|e| BenchError::engine(name, e))?;
        let mut write = WriteOptions::default();
        write.set_sync(config.sync);
        write.disable_wal(false);
        Ok(RocksEngine {
            name,
            db,
            write,
            blob,
            config: config.clone(),
            _cache: cache,
        })
    }

    fn err(&self, e: rocksdb::Error) -> BenchError {
        BenchError::engine(self.name, e)
    }
}

impl Engine for RocksEngine {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db
            .put_opt(key, value, &self.write)
            .map_err(|e| self.err(e))
    }

    fn read(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self
            .db
            .get_pinned(key)
            .map_err(|e| self.err(e))?
            .map(|v| v.len()))
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<ScanCount> {
        let mut count = ScanCount::default();
        let mut it = self.db.raw_iterator();
        it.seek(start);
        while (count.pairs as usize) < len && it.valid() {
            let k = it.key().map_or(0, <[u8]>::len);
            let v = it.value().map_or(0, <[u8]>::len);
            count.pairs += 1;
            count.bytes += (k + v) as u64;
            it.next();
        }
        it.status().map_err(|e| self.err(e))?;
        Ok(count)
    }

    fn rmw_is_merge(&self) -> bool {
        self.config.rmw_as_merge
    }

    fn merge(&self, key: &[u8], delta: &[u8]) -> Result<()> {
        self.db
            .merge_opt(key, delta, &self.write)
            .map_err(|e| self.err(e))
    }

    fn finish(&self) -> Result<()> {
        self.db.flush().map_err(|e| self.err(e))?;
        let mut w = WaitForCompactOptions::default();
        w.set_flush(true);
        self.db.wait_for_compact(&w).map_err(|e| self.err(e))
    }

    fn options(&self) -> EngineOptions {
        let c = &self.config;
        let mut m = common_options(c);
        m.insert(
            "engine".into(),
            "RocksDB 11.8 via the rocksdb crate 0.25 (no compression libraries)".into(),
        );
        m.insert(
            "direct_io".into(),
            if c.direct_io {
                "on: use_direct_reads + use_direct_io_for_flush_and_compaction".into()
            } else {
                "off".into()
            },
        );
        m.insert(
            "bloom".into(),
            if c.bloom {
                "on, 10 bits per key (full filters)".into()
            } else {
                "off".into()
            },
        );
        m.insert("compression".into(), "none (kNoCompression)".into());
        m.insert(
            "cache".into(),
            format!("{} LRU block cache", show_bytes(c.cache_bytes)),
        );
        m.insert("max_write_buffer_number".into(), "3".into());
        m.insert(
            "compaction".into(),
            format!(
                "leveled; max_bytes_for_level_base {} (8 memtables), multiplier 8, target_file_size_base {}",
                show_bytes(c.memtable_bytes.saturating_mul(8)),
                show_bytes(c.memtable_bytes.max(1 << 20))
            ),
        );
        m.insert(
            "blob_files".into(),
            if self.blob {
                format!(
                    "on: min_blob_size 0 (every value), blob file size {}, blob GC on, age cutoff {BLOB_GC_AGE_CUTOFF}, no blob compression",
                    show_bytes(c.memtable_bytes)
                )
            } else {
                "off".into()
            },
        );
        m
    }

    fn stats(&self) -> Option<serde_json::Value> {
        let p = |name: &str| self.db.property_int_value(name).ok().flatten();
        Some(json!({
            "total_sst_files_size": p("rocksdb.total-sst-files-size"),
            "live_sst_files_size": p("rocksdb.live-sst-files-size"),
            "total_blob_file_size": p("rocksdb.total-blob-file-size"),
            "live_blob_file_size": p("rocksdb.live-blob-file-size"),
            "live_blob_file_garbage_size": p("rocksdb.live-blob-file-garbage-size"),
            "num_blob_files": p("rocksdb.num-blob-files"),
            "estimate_live_data_size": p("rocksdb.estimate-live-data-size"),
            "block_cache_usage": p("rocksdb.block-cache-usage"),
            // RocksDB's own per-level compaction table (bytes read and written by flushes
            // and compactions per level, WAL bytes): lets a reader split its device bytes
            // by component, as hybridkv's counters do.
            "stats_text": self.db.property_value("rocksdb.stats").ok().flatten(),
            // Files and bytes per level (the depth the run reached).
            "levels": (0..7)
                .filter_map(|l| {
                    let files = p(&format!("rocksdb.num-files-at-level{l}"))?;
                    (files > 0).then(|| json!({ "level": l, "files": files }))
                })
                .collect::<Vec<_>>(),
            "levelstats": self.db.property_value("rocksdb.levelstats").ok().flatten(),
        }))
    }
}
