//! Compaction: flushing an immutable memtable into a new run of L1, and merging a level
//! into the level below it.
//!
//! Owns: choosing the next merge ([`picker`], no I/O); running one merge ([`job`]: the
//! k-way merge of `crate::merge` over its sources, newest version of each key kept,
//! tombstones dropped when the output is the bottom of the tree, large-log garbage
//! counted, the output written bottom-up); medium pairs to and from the transient log
//! ([`transient`]); the flush and compaction jobs and their installs ([`worker`]),
//! including deleting the small-log files a flush made obsolete (after moving the replay
//! start of idle keyspaces: the one manifest change made on another keyspace's version
//! set, holding that keyspace's slot). Never: decides when a job runs (`background`
//! does), or changes the manifest or what readers see except through `Engine::install`
//! (or, for that replay start, the other keyspace's `VersionSet::log_and_apply`).

pub(crate) mod job;
pub(crate) mod picker;
pub(crate) mod transient;
pub(crate) mod worker;
