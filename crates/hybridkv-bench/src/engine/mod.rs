//! The [`Engine`] adapter trait and the engines the benchmark can run.
//!
//! Every engine is opened with the same [`EngineConfig`]: cache size, memtable size,
//! background threads, compression off, write-ahead log on without an fsync per write,
//! Bloom filters off unless asked for, and direct I/O for reads and for flush/compaction
//! where the engine has it. Each adapter reports the options it actually set
//! ([`Engine::options`]); they are printed and recorded with every result.

mod fjall_engine;
mod harness;
mod hybrid;
pub mod patch;
#[cfg(feature = "rocksdb")]
mod rocks;

use crate::error::{BenchError, Result};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// Pairs and bytes returned by a scan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanCount {
    /// Pairs returned.
    pub pairs: u64,
    /// Key and value bytes returned.
    pub bytes: u64,
}

/// The options an engine runs with, as (name, value) text, in a stable order.
pub type EngineOptions = BTreeMap<String, String>;

/// One engine under test, open on one directory. Dropping it closes the engine: its
/// background threads have stopped when the drop returns.
pub trait Engine: Send + Sync {
    /// Inserts a new record (load phase and YCSB inserts).
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Overwrites a record.
    fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.insert(key, value)
    }
    /// Reads a record; returns its value length, or `None` if absent.
    fn read(&self, key: &[u8]) -> Result<Option<usize>>;
    /// Reads up to `len` pairs in key order starting at `start` (inclusive), counting them.
    fn scan(&self, start: &[u8], len: usize) -> Result<ScanCount>;
    /// Reads a record, then writes `value` to it (YCSB's read-modify-write). Returns the
    /// length of the value read.
    fn read_modify_write(&self, key: &[u8], value: &[u8]) -> Result<Option<usize>> {
        let old = self.read(key)?;
        self.update(key, value)?;
        Ok(old)
    }
    /// Ends a phase: writes the memtable out and waits until the background work it
    /// caused (flushes, compactions) is done, so that the phase's cost is all counted and
    /// the next phase starts from a quiet database.
    fn finish(&self) -> Result<()>;
    /// Whether `read_modify_write` runs as a merge here (the runner then writes a field
    /// patch with [`Engine::merge`] instead of reading and rewriting the record).
    fn rmw_is_merge(&self) -> bool {
        false
    }
    /// Writes `delta` (a field patch, `patch`) for the engine's merge operator to fold.
    fn merge(&self, _key: &[u8], _delta: &[u8]) -> Result<()> {
        Err(crate::error::BenchError::Usage(
            "this engine has no merge operator: run it with --rmw read-write".into(),
        ))
    }
    /// The options this engine runs with (printed and recorded in the results).
    fn options(&self) -> EngineOptions;
    /// The engine's own counters, if it has any worth recording.
    fn stats(&self) -> Option<serde_json::Value> {
        None
    }
}

/// The settings every engine gets.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Block/node cache budget in bytes.
    pub cache_bytes: u64,
    /// Memtable (write buffer) size in bytes.
    pub memtable_bytes: u64,
    /// Direct I/O for reads and for flush/compaction output, where the engine has it.
    pub direct_io: bool,
    /// Bloom filters (10 bits per key) where the engine has them.
    pub bloom: bool,
    /// Fsync the write-ahead log on every write (`false`: writes reach the OS, no fsync).
    pub sync: bool,
    /// Background (flush/compaction) threads.
    pub background_threads: usize,
    /// YCSB's read-modify-write as a merge (a field patch folded by the engine's merge
    /// operator, `patch`) instead of a read and a rewrite.
    pub rmw_as_merge: bool,
    /// hybridkv reads level files and log segments through memory maps
    /// (`Options::mmap_reads`); the peers ignore it.
    pub mmap_reads: bool,
    /// Where hybridkv writes medium pairs in place (`Options::medium_merge_level`);
    /// `None`: the engine's default. The peers ignore it.
    pub medium_merge_level: Option<hybridkv::MediumMergeLevel>,
    /// Whether hybridkv puts what flushes and merges write into its cache
    /// (`Options::prepopulate_cache`; `None`: its default).
    pub prepopulate_cache: Option<bool>,
    /// How much a leaf read that misses hybridkv's cache reads around it while the cache
    /// has room (`Options::warm_read_bytes`; `None`: its default). The peers ignore it.
    pub warm_read_bytes: Option<u64>,
    /// Memory for hybridkv's large pointer tables (`Options::large_pointer_table_bytes`;
    /// `None`: its default). The peers ignore it.
    pub large_pointer_table_bytes: Option<u64>,
    /// Bytes of merging one wasted search of a run pays for in hybridkv
    /// (`Options::merge_bytes_per_wasted_search`; `None`: its default). The peers ignore it.
    pub merge_bytes_per_wasted_search: Option<u64>,
    /// How long hybridkv spins on a direct read's completion before it sleeps
    /// (`Options::read_spin_us`; `None`: its default). The peers ignore it.
    pub read_spin_us: Option<u32>,
    /// The garbage ratio at which hybridkv collects a large-log segment
    /// (`Options::gc_threshold`; `None`: its default). The peers ignore it.
    pub gc_threshold: Option<f64>,
    /// hybridkv's leaf size in bytes (`Options::leaf_size`; `None`: its default). The
    /// peers ignore it (RocksDB's block is 4 KiB).
    pub leaf_size: Option<usize>,
    /// Whether hybridkv reads back at open what its cache held at the last close
    /// (`Options::reload_cache`; `None`: its default). The peers ignore it.
    pub reload_cache: Option<bool>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_bytes: 64 << 20,
            memtable_bytes: 64 << 20,
            direct_io: true,
            bloom: false,
            sync: false,
            background_threads: 2,
            rmw_as_merge: false,
            mmap_reads: false,
            medium_merge_level: None,
            prepopulate_cache: None,
            warm_read_bytes: None,
            large_pointer_table_bytes: None,
            merge_bytes_per_wasted_search: None,
            read_spin_us: None,
            gc_threshold: None,
            leaf_size: None,
            reload_cache: None,
        }
    }
}

/// The engines the benchmark knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineKind {
    /// hybridkv, hybrid placement (the design under test).
    Hybridkv,
    /// hybridkv with every pair in place (`Placement::InPlace`).
    HybridkvInPlace,
    /// hybridkv with every value in the log (`Placement::AllLog`).
    HybridkvAllLog,
    /// Parallax-MS: medium folded into small (both thresholds 1024).
    HybridkvMs,
    /// Parallax-ML: medium folded into large (both thresholds 120).
    HybridkvMl,
    /// hybridkv with KDSep's delta separation (`Options::delta_separation`): deltas a
    /// flush cannot fold go to hashed delta buckets.
    HybridkvKdsep,
    /// RocksDB, every pair in place.
    RocksDb,
    /// RocksDB's integrated BlobDB: every value in blob files, blob GC on.
    BlobDb,
    /// fjall, values in place.
    Fjall,
    /// fjall with key-value separation (blob files) for large values.
    FjallKv,
    /// No engine: writes dropped, reads miss. Measures the benchmark's own cost per
    /// operation; only when named (`--engines harness`).
    Harness,
}

impl EngineKind {
    /// Every engine, in report order.
    pub const ALL: [EngineKind; 11] = [
        EngineKind::Hybridkv,
        EngineKind::HybridkvInPlace,
        EngineKind::HybridkvAllLog,
        EngineKind::HybridkvMs,
        EngineKind::HybridkvMl,
        EngineKind::HybridkvKdsep,
        EngineKind::RocksDb,
        EngineKind::BlobDb,
        EngineKind::Fjall,
        EngineKind::FjallKv,
        EngineKind::Harness,
    ];

    /// The peers hybridkv is compared with, in report order.
    pub const PEERS: [EngineKind; 4] = [
        EngineKind::RocksDb,
        EngineKind::BlobDb,
        EngineKind::Fjall,
        EngineKind::FjallKv,
    ];

    /// The name used on the command line and in results.
    pub const fn name(self) -> &'static str {
        match self {
            EngineKind::Hybridkv => "hybridkv",
            EngineKind::HybridkvInPlace => "hybridkv-inplace",
            EngineKind::HybridkvAllLog => "hybridkv-alllog",
            EngineKind::HybridkvMs => "hybridkv-ms",
            EngineKind::HybridkvMl => "hybridkv-ml",
            EngineKind::HybridkvKdsep => "hybridkv-kdsep",
            EngineKind::RocksDb => "rocksdb",
            EngineKind::BlobDb => "blobdb",
            EngineKind::Fjall => "fjall",
            EngineKind::FjallKv => "fjall-kv",
            EngineKind::Harness => "harness",
        }
    }

    /// Parses a name (case-insensitive).
    pub fn from_name(name: &str) -> Option<EngineKind> {
        let name = name.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this binary can run the engine (RocksDB and BlobDB need the `rocksdb`
    /// feature).
    pub const fn is_built(self) -> bool {
        cfg!(feature = "rocksdb") || !matches!(self, EngineKind::RocksDb | EngineKind::BlobDb)
    }

    /// The engines `hybridkv bench` runs when none are named: hybridkv and every peer
    /// that is built.
    pub fn default_set() -> Vec<EngineKind> {
        std::iter::once(EngineKind::Hybridkv)
            .chain(Self::PEERS)
            .filter(|k| k.is_built())
            .collect()
    }

    /// Parses a comma-separated list: engine names, `default` (hybridkv and the built
    /// peers) or `all` (every built engine).
    pub fn parse_list(list: &str) -> Result<Vec<EngineKind>> {
        let mut out: Vec<EngineKind> = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let add: Vec<EngineKind> = match item.to_ascii_lowercase().as_str() {
                // Every engine, not the harness (no engine; it is named when wanted).
                "all" => Self::ALL
                    .into_iter()
                    .filter(|k| k.is_built() && *k != EngineKind::Harness)
                    .collect(),
                "default" => Self::default_set(),
                _ => {
                    let kind = Self::from_name(item).ok_or_else(|| {
                        BenchError::Usage(format!(
                            "unknown engine {item:?}: expected one of {}, default or all",
                            Self::ALL.map(EngineKind::name).join(", ")
                        ))
                    })?;
                    if !kind.is_built() {
                        return Err(BenchError::Usage(format!(
                            "engine {item} is not built into this binary: build with \
                             `--features rocksdb` (./scripts/bench.sh does)"
                        )));
                    }
                    vec![kind]
                }
            };
            for k in add {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
        if out.is_empty() {
            return Err(BenchError::Usage("no engine named".into()));
        }
        Ok(out)
    }

    /// Opens (creating if needed) this engine's database in `dir`.
    pub fn open(self, dir: &Path, config: &EngineConfig) -> Result<Box<dyn Engine>> {
        match self {
            EngineKind::Hybridkv
            | EngineKind::HybridkvInPlace
            | EngineKind::HybridkvAllLog
            | EngineKind::HybridkvMs
            | EngineKind::HybridkvMl
            | EngineKind::HybridkvKdsep => {
                Ok(Box::new(hybrid::HybridEngine::open(self, dir, config)?))
            }
            EngineKind::Harness => Ok(Box::new(harness::HarnessEngine::open(dir, config)?)),
            EngineKind::Fjall | EngineKind::FjallKv => Ok(Box::new(
                fjall_engine::FjallEngine::open(self == EngineKind::FjallKv, dir, config)?,
            )),
            #[cfg(feature = "rocksdb")]
            EngineKind::RocksDb | EngineKind::BlobDb => Ok(Box::new(rocks::RocksEngine::open(
                self == EngineKind::BlobDb,
                dir,
                config,
            )?)),
            #[cfg(not(feature = "rocksdb"))]
            EngineKind::RocksDb | EngineKind::BlobDb => Err(BenchError::Usage(format!(
                "engine {} is not built into this binary: build with `--features rocksdb`",
                self.name()
            ))),
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Formats a byte count for option descriptions (`64 MiB`, `1500 B`).
pub(crate) fn show_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// Options every adapter records the same way.
pub(crate) fn common_options(config: &EngineConfig) -> EngineOptions {
    let mut o = EngineOptions::new();
    o.insert("cache".into(), show_bytes(config.cache_bytes));
    o.insert("memtable".into(), show_bytes(config.memtable_bytes));
    o.insert(
        "background_threads".into(),
        config.background_threads.to_string(),
    );
    o.insert(
        "wal".into(),
        if config.sync {
            "on, fsync per write".into()
        } else {
            "on, no fsync per write (writes reach the OS)".into()
        },
    );
    if config.rmw_as_merge {
        o.insert(
            "read_modify_write".into(),
            format!(
                "as a merge: a field patch of up to {} bytes folded by {}",
                patch::PATCH_BYTES,
                patch::NAME
            ),
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in EngineKind::ALL {
            assert_eq!(EngineKind::from_name(k.name()), Some(k));
            assert_eq!(EngineKind::from_name(&k.name().to_uppercase()), Some(k));
        }
        assert_eq!(EngineKind::from_name("leveldb"), None);
    }

    #[test]
    fn parses_lists() {
        let l = EngineKind::parse_list("hybridkv, fjall,hybridkv").unwrap();
        assert_eq!(l, vec![EngineKind::Hybridkv, EngineKind::Fjall]);
        assert!(EngineKind::parse_list("nope").is_err());
        assert!(EngineKind::parse_list(" , ").is_err());
        let d = EngineKind::parse_list("default").unwrap();
        assert_eq!(d[0], EngineKind::Hybridkv);
        assert!(d.contains(&EngineKind::Fjall));
        assert_eq!(
            d.contains(&EngineKind::RocksDb),
            cfg!(feature = "rocksdb"),
            "rocksdb is in the default set exactly when it is built"
        );
        let all = EngineKind::parse_list("all").unwrap();
        assert!(all.len() >= 7);
        // The harness is no engine: only when named.
        assert!(!all.contains(&EngineKind::Harness));
        assert!(!d.contains(&EngineKind::Harness));
        assert_eq!(
            EngineKind::parse_list("harness").unwrap(),
            vec![EngineKind::Harness]
        );
    }

    #[test]
    fn byte_display() {
        assert_eq!(show_bytes(64 << 20), "64 MiB");
        assert_eq!(show_bytes(8192), "8 KiB");
        assert_eq!(show_bytes(1500), "1500 B");
    }
}
