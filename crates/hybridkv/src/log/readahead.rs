//! Read-ahead over log segments read in offset order: one window buffer per segment.
//!
//! Owns: turning many small record reads that walk a segment forwards (a transient
//! segment is sorted by key, so a merge or a scan that walks keys in order walks each
//! segment front to back) into few large reads. The window of a segment doubles while the
//! reads stay sequential, from `min` up to `max`, and falls back to `min` after a jump, so
//! a short scan pays one small read and a long one pays few large ones. Never: keeps more
//! than `max_segments` windows (the oldest is dropped), trusts a record it has not checked
//! (every record is decoded with its checksum and key check), or outlives the segment set
//! it is given (the caller passes it on every read).

use crate::error::{Error, Result};
use crate::log::large::SegmentSet;
use crate::log::large::{check_ptr_len, decode_checked, SegmentKind};
use crate::log::ptr::LogPtr;
use std::collections::HashMap;

/// One segment's window: the bytes at `start..start + buf.len()`, and the size of the next
/// read.
struct Window {
    start: u64,
    buf: Vec<u8>,
    next_len: usize,
    /// Read sequence number, to drop the least recently refilled window.
    used: u64,
}

/// Per-segment windows for reading records in offset order.
pub(crate) struct SegmentReadahead {
    windows: HashMap<u64, Window>,
    min: usize,
    max: usize,
    max_segments: usize,
    clock: u64,
    /// Bytes read from segments (whole windows).
    pub bytes_fetched: u64,
    /// Record bytes served.
    pub bytes_read: u64,
    /// Records served.
    pub values: u64,
}

impl SegmentReadahead {
    /// Windows grow from `min` to `max` bytes; at most `max_segments` are kept.
    pub(crate) fn new(min: usize, max: usize, max_segments: usize) -> Self {
        SegmentReadahead {
            windows: HashMap::new(),
            min: min.max(1),
            max: max.max(min.max(1)),
            max_segments: max_segments.max(1),
            clock: 0,
            bytes_fetched: 0,
            bytes_read: 0,
            values: 0,
        }
    }

    /// The value of the record at `ptr` in one of `segments`, which must hold `key`.
    pub(crate) fn read(
        &mut self,
        segments: &SegmentSet,
        key: &[u8],
        ptr: LogPtr,
    ) -> Result<Vec<u8>> {
        let seg = segments.get(&ptr.segment).ok_or_else(|| {
            // Only medium values (transient segments) are read through a read-ahead.
            Error::corruption(
                SegmentKind::Transient.file_name(ptr.segment),
                ptr.offset,
                "pointer to a log segment that does not exist",
            )
        })?;
        check_ptr_len(ptr, seg.path())?;
        self.clock += 1;
        let len = ptr.len as usize;
        let end = ptr.offset.saturating_add(len as u64);
        if !self.windows.contains_key(&ptr.segment) && self.windows.len() >= self.max_segments {
            let oldest = self
                .windows
                .iter()
                .min_by_key(|(_, w)| w.used)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.windows.remove(&id);
            }
        }
        let min = self.min;
        let w = self.windows.entry(ptr.segment).or_insert(Window {
            start: 0,
            buf: Vec::new(),
            next_len: min,
            used: 0,
        });
        let window_end = w.start + w.buf.len() as u64;
        if ptr.offset < w.start || end > window_end {
            // Sequential: the record starts inside or right after the current window.
            let sequential = !w.buf.is_empty() && ptr.offset >= w.start && ptr.offset <= window_end;
            w.next_len = if sequential {
                w.next_len.saturating_mul(2).min(self.max)
            } else {
                self.min
            };
            let avail = seg.len().saturating_sub(ptr.offset);
            let n = usize::try_from(avail)
                .unwrap_or(usize::MAX)
                .min(w.next_len)
                .max(len);
            w.buf.resize(n, 0);
            seg.read_into(ptr, &mut w.buf)?;
            w.start = ptr.offset;
            self.bytes_fetched += n as u64;
        }
        w.used = self.clock;
        let from = usize::try_from(ptr.offset - w.start).unwrap_or(usize::MAX);
        let bytes = w
            .buf
            .get(from..from.saturating_add(len))
            .ok_or_else(|| Error::corruption(seg.path(), ptr.offset, "window out of range"))?;
        let value = decode_checked(bytes, ptr, key, seg.path())?;
        self.bytes_read += u64::from(ptr.len);
        self.values += 1;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{Io, RealFs};
    use crate::log::large::{SegmentFile, SegmentKind, SegmentWriter};
    use std::sync::Arc;

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:06}").into_bytes()
    }

    #[test]
    fn sequential_reads_grow_the_window_and_jumps_reset_it() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let mut w = SegmentWriter::create(&io, dir.path(), SegmentKind::Transient, 3).unwrap();
        let ptrs: Vec<LogPtr> = (0..2000u32)
            .map(|i| w.append(&key(i), &[i as u8; 100], u64::from(i)).unwrap())
            .collect();
        w.commit(true).unwrap();
        let seg = SegmentFile::open(&io, dir.path(), SegmentKind::Transient, 3).unwrap();
        let mut set = SegmentSet::new();
        set.insert(3, Arc::new(seg));

        let mut ra = SegmentReadahead::new(4 << 10, 64 << 10, 4);
        for (i, p) in ptrs.iter().enumerate() {
            let v = ra.read(&set, &key(i as u32), *p).unwrap();
            assert_eq!(v, vec![i as u8; 100]);
        }
        let total: u64 = ptrs.iter().map(|p| u64::from(p.len)).sum();
        assert_eq!(ra.bytes_read, total);
        assert_eq!(ra.values, 2000);
        // Growing windows: far fewer bytes than one 4 KiB read per record, and never more
        // than the segment plus one window of overlap per refill.
        assert!(ra.bytes_fetched < total * 2, "fetched {}", ra.bytes_fetched);

        // A jump back (not sequential) still returns the right record.
        let v = ra.read(&set, &key(5), ptrs[5]).unwrap();
        assert_eq!(v, vec![5u8; 100]);
        // The wrong key is corruption naming the segment file.
        let err = ra.read(&set, &key(6), ptrs[7]).unwrap_err();
        assert!(err.is_corruption(), "{err}");
        assert!(err.to_string().contains(".tlog"), "{err}");
        // A pointer to a segment that is not in the set is corruption, not a panic.
        let missing = LogPtr {
            segment: 99,
            ..ptrs[0]
        };
        assert!(ra.read(&set, &key(0), missing).unwrap_err().is_corruption());
    }
}
