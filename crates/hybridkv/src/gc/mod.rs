//! Garbage collection of the large log (Parallax §3.1; Titan/Badger-style discard counts).
//!
//! Owns: choosing segments whose garbage ratio reached `gc_threshold` ([`planner`], no
//! I/O; the segments' sizes, each complete one asked of the file system once,
//! `log::large::SegmentSizes`) and collecting them ([`job`]): read the segment once, keep the records the index
//! still points at, re-append those through the write path (holding the keyspace's slot, only if
//! the index still points at the old copy, so a newer write is never replaced), make the
//! relocation and every other committed write durable, drop the segment from the manifest,
//! then delete the file once no reader holds it; and the `space_amp_limit` enforcement.
//! Never: edits level files; the old pointers stay in the levels, shadowed by the
//! relocated versions, until compaction drops them.

pub(crate) mod job;
pub(crate) mod planner;

pub use job::GcReport;
