//! hybridkv: an embeddable key-value storage engine for fast SSDs, built on the hybrid
//! key-value placement of the Parallax paper.
//!
//! ```no_run
//! use hybridkv::{Db, Options, WriteBatch};
//! # fn main() -> hybridkv::Result<()> {
//! let db = Db::open("/tmp/my-db", Options::default())?;
//! db.put("hello", "world")?;
//! assert_eq!(db.get("hello")?.as_deref(), Some(&b"world"[..]));
//! let mut batch = WriteBatch::new();
//! batch.put("a", "1").delete("hello");
//! db.write(batch)?;
//! for pair in db.prefix("a") {
//!     let (key, value) = pair?;
//!     println!("{key:?} = {value:?}");
//! }
//! # Ok(()) }
//! ```
//!
//! The architecture (one module per component) is described in `docs/ARCHITECTURE.md`,
//! every on-disk byte in `docs/FORMAT.md`.

mod background;
mod bucket;
mod cache;
mod catalog;
mod check;
mod checkpoint;
mod compaction;
mod db;
mod delta;
mod engine;
mod error;
mod filename;
mod fold_back;
mod format;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod gc;
pub mod io;
mod keyspace;
mod level;
mod lifecycle;
mod log;
mod manifest;
mod memtable;
mod merge;
mod obsolete;
mod options;
mod options_file;
mod placement;
mod prefetch;
mod range_delete;
mod read;
mod recovery;
mod reload;
mod search_counts;
mod snapshot;
mod space;
mod stats;
mod value;
mod version_set;
mod write;

pub use catalog::{DEFAULT_KEYSPACE, MAX_KEYSPACE_NAME};
pub use check::CheckReport;
pub use checkpoint::CheckpointReport;
pub use db::Db;
pub use delta::{Append, CounterAdd, Max, MergeError, MergeOperator};
pub use error::{Error, Result};
pub use gc::GcReport;
pub use keyspace::Keyspace;
pub use options::{MediumMergeLevel, Options, WriteOptions, MAX_KEY_SIZE, MAX_VALUE_SIZE};
pub use placement::{Category, Placement};
pub use read::iter::{DbIterator, KeyIterator, LazyIterator, LazyPair, ValueIterator};
pub use snapshot::Snapshot;
pub use space::{SpaceComponent, SpaceReport};
pub use stats::{LevelStats, Stats};
pub use value::Value;
pub use write::batch::{WriteBatch, MAX_BATCH_BYTES};
