//! Compaction: merging a level (or the immutable memtable) into the level below it.
//!
//! Owns: choosing the next merge ([`picker`], no I/O) and running it ([`job`]): a
//! sorted two-way merge that keeps the newest version of each key, drops tombstones when
//! the output is the bottom of the tree, and writes the output level bottom-up. Never:
//! installs its result (the engine does, through a durable manifest) or deletes files.

pub(crate) mod job;
pub(crate) mod picker;
pub(crate) mod transient;
pub(crate) mod worker;
