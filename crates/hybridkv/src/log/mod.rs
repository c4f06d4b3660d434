//! The logs: the small log (write-ahead log) that makes every acknowledged write durable
//! before it reaches the memtable, and the segment logs (the large value log and the
//! transient log of medium pairs), with read-ahead for reads that walk a segment in order.
//!
//! Owns: log record framing, appending, and replay with torn-tail detection. Never:
//! decides which data is live or applies records to the memtable (the caller does).

pub(crate) mod large;
pub(crate) mod ptr;
pub(crate) mod readahead;
pub(crate) mod small;
