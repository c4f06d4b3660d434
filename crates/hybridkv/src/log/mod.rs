//! The logs. Today: the small log (write-ahead log) that makes every acknowledged write
//! durable before it reaches the memtable. The large (value) log and the transient log of
//! medium pairs will live here too (issue #5).
//!
//! Owns: log record framing, appending, and replay with torn-tail detection. Never:
//! decides which data is live or applies records to the memtable (the caller does).

pub(crate) mod large;
pub(crate) mod ptr;
pub(crate) mod small;
