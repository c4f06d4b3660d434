//! The YCSB benchmark of hybridkv (issue #6): the Parallax paper's evaluation method at
//! the scale of one machine, with hybridkv side by side with RocksDB, RocksDB's BlobDB and
//! fjall in the same run.
//!
//! * [`engine`]: the [`Engine`] adapter trait and the engines (hybridkv in each placement
//!   mode and the MS / ML ablations; fjall with and without key-value separation; RocksDB
//!   and BlobDB behind the `rocksdb` feature).
//! * [`runner`]: one phase (load or run) of one engine: client threads driven by the
//!   `hybridkv-ycsb` generators, a progress bar, latency histograms, device bytes from
//!   `/proc/self/io`, CPU time from `getrusage`, bytes on disk, exact live bytes.
//! * [`record`]: the result of a phase, one JSON line in a results file ([`record::FIELDS`]
//!   documents every field).
//! * [`report`] and [`plot`]: the comparison table, the Markdown of docs/BENCHMARKS.md and
//!   the PNG plots.
//! * [`bench`]: a whole invocation of `hybridkv bench`, its scale presets.
//! * [`memlimit`]: the users' configuration's memory budget (a cgroup, page cache
//!   included).

pub mod bench;
pub mod engine;
pub mod error;
pub mod live;
pub mod memlimit;
pub mod plot;
pub mod record;
pub mod report;
pub mod runner;
pub mod sys;

pub use bench::{run_bench, BenchOptions, PhaseChoice, WorkloadSource};
pub use engine::{Engine, EngineConfig, EngineKind, EngineOptions, ScanCount};
pub use error::{BenchError, Result};
pub use record::{PhaseRecord, FIELDS};
pub use runner::{run_phase, Phase, PhasePlan};
