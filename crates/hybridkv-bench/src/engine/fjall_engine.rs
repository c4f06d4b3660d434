//! fjall, with values in place or with key-value separation.

use super::{common_options, show_bytes, Engine, EngineConfig, EngineOptions, ScanCount};
use crate::error::{BenchError, Result};
use fjall::config::{BloomConstructionPolicy, CompressionPolicy, FilterPolicy, FilterPolicyEntry};
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// Values of at least this many bytes go to blob files in `fjall-kv`: the value size of a
/// hybridkv *large* pair (1024-byte pair threshold minus the 24-byte YCSB key), so fjall
/// separates exactly the pairs hybridkv puts in its large log. (fjall's own default,
/// 1 KiB, would separate none of the paper's 1004-byte values.)
pub(crate) const FJALL_SEPARATION_THRESHOLD: u32 = 1000;

/// How long `finish` waits for fjall's background work before giving up.
const FINISH_TIMEOUT: Duration = Duration::from_secs(3600);

/// An open fjall database with one keyspace.
pub(crate) struct FjallEngine {
    name: &'static str,
    db: Database,
    ks: Keyspace,
    kv_separation: bool,
    config: EngineConfig,
}

impl FjallEngine {
    pub(crate) fn open(kv_separation: bool, dir: &Path, config: &EngineConfig) -> Result<Self> {
        let name = if kv_separation { "fjall-kv" } else { "fjall" };
        let err = |e: fjall::Error| BenchError::engine(name, e);
        let db = Database::builder(dir)
            .cache_size(config.cache_bytes)
            .worker_threads(config.background_threads.max(1))
            .journal_compression(CompressionType::None)
            .manual_journal_persist(false)
            .open()
            .map_err(err)?;
        let memtable = config.memtable_bytes;
        let bloom = config.bloom;
        let ks = db
            .keyspace("ycsb", || {
                // Tables of a memtable's size, 8x per level: the shape of hybridkv's and
                // RocksDB's trees at the same memtable (fjall's default: 64 MiB, 10x).
                let leveled = fjall::compaction::Leveled::default()
                    .with_table_target_size(memtable.max(1 << 20))
                    .with_level_ratio_policy(vec![8.0]);
                let mut o = KeyspaceCreateOptions::default()
                    .max_memtable_size(memtable)
                    .compaction_strategy(std::sync::Arc::new(leveled))
                    .data_block_compression_policy(CompressionPolicy::all(CompressionType::None))
                    .index_block_compression_policy(CompressionPolicy::all(CompressionType::None))
                    .filter_policy(if bloom {
                        FilterPolicy::all(FilterPolicyEntry::Bloom(
                            BloomConstructionPolicy::BitsPerKey(10.0),
                        ))
                    } else {
                        FilterPolicy::disabled()
                    });
                if kv_separation {
                    o = o.with_kv_separation(Some(
                        KvSeparationOptions::default()
                            .compression(CompressionType::None)
                            .separation_threshold(FJALL_SEPARATION_THRESHOLD),
                    ));
                }
                o
            })
            .map_err(err)?;
        Ok(FjallEngine {
            name,
            db,
            ks,
            kv_separation,
            config: config.clone(),
        })
    }

    fn err(&self, e: fjall::Error) -> BenchError {
        BenchError::engine(self.name, e)
    }

    fn idle(&self) -> bool {
        self.db.outstanding_flushes() == 0 && self.db.active_compactions() == 0
    }
}

impl Engine for FjallEngine {
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.ks.insert(key, value).map_err(|e| self.err(e))
    }

    fn read(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.ks.get(key).map_err(|e| self.err(e))?.map(|v| v.len()))
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<ScanCount> {
        let mut count = ScanCount::default();
        for guard in self.ks.range::<&[u8], _>(start..).take(len) {
            let (k, v) = guard.into_inner().map_err(|e| self.err(e))?;
            count.pairs += 1;
            count.bytes += (k.len() + v.len()) as u64;
        }
        Ok(count)
    }

    fn finish(&self) -> Result<()> {
        self.ks
            .rotate_memtable_and_wait()
            .map_err(|e| self.err(e))?;
        // fjall has no "wait for compactions": poll until it has been idle for a while
        // (a finished flush may schedule a compaction a moment later).
        let start = Instant::now();
        let mut quiet = 0;
        while quiet < 5 {
            std::thread::sleep(Duration::from_millis(20));
            quiet = if self.idle() { quiet + 1 } else { 0 };
            if start.elapsed() > FINISH_TIMEOUT {
                return Err(BenchError::engine(
                    self.name,
                    "background work did not finish within an hour",
                ));
            }
        }
        Ok(())
    }

    fn options(&self) -> EngineOptions {
        let mut m = common_options(&self.config);
        m.insert(
            "engine".into(),
            "fjall 3 (crate, no default features)".into(),
        );
        m.insert(
            "direct_io".into(),
            "none (fjall has no direct I/O: reads and writes go through the page cache)".into(),
        );
        m.insert(
            "bloom".into(),
            if self.config.bloom {
                "on, 10 bits per key".into()
            } else {
                "off".into()
            },
        );
        m.insert(
            "compression".into(),
            "none (data, index, journal, blobs)".into(),
        );
        m.insert(
            "wal".into(),
            "journal on, flushed to the OS on every write (PersistMode::Buffer), no fsync".into(),
        );
        m.insert(
            "compaction".into(),
            format!(
                "leveled; table target size {} (the memtable), level ratio 8",
                show_bytes(self.config.memtable_bytes.max(1 << 20))
            ),
        );
        m.insert(
            "kv_separation".into(),
            if self.kv_separation {
                format!(
                    "on: values >= {FJALL_SEPARATION_THRESHOLD} B in blob files (64 MiB), blob GC at 25% staleness (fjall default)"
                )
            } else {
                "off: values in place".into()
            },
        );
        m
    }

    fn stats(&self) -> Option<serde_json::Value> {
        Some(json!({
            "disk_space": self.db.disk_space().ok(),
            "journal_count": self.db.journal_count(),
            "tables": self.ks.table_count(),
            "l0_tables": self.ks.l0_table_count(),
            "blob_files": self.ks.blob_file_count(),
            "fragmented_blob_bytes": self.ks.fragmented_blob_bytes(),
            "compactions_completed": self.db.compactions_completed(),
            "time_compacting_seconds": self.db.time_compacting().as_secs_f64(),
        }))
    }
}
