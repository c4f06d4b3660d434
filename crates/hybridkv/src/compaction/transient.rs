//! Medium pairs at merges: written to a transient segment when a flush lands above the
//! merge level, read back and written in place when a merge reaches it (Parallax §3.3).
//!
//! Every transient segment is sorted (a flush writes it in key order), so a merge that
//! walks a level in key order reads each segment front to back: one sequential pass per
//! segment through a small window, never a random 4 KiB read per pair.

use crate::error::{Error, Result};
use crate::log::large::{decode_checked, SegmentWriter};
use crate::log::ptr::LogPtr;
use crate::read::SegmentSet;
use std::collections::HashMap;

/// Read size per transient segment during a merge.
const WINDOW: usize = 256 << 10;

/// Reads medium values in key order during a merge at the merge level.
pub(crate) struct TransientReader<'a> {
    segments: &'a SegmentSet,
    windows: HashMap<u64, (u64, Vec<u8>)>,
    /// Bytes of medium values read back.
    pub bytes_read: u64,
    pub values: u64,
}

impl<'a> TransientReader<'a> {
    pub(crate) fn new(segments: &'a SegmentSet) -> Self {
        TransientReader {
            segments,
            windows: HashMap::new(),
            bytes_read: 0,
            values: 0,
        }
    }

    /// The value of the record at `ptr`, which must hold `key`.
    pub(crate) fn read(&mut self, key: &[u8], ptr: LogPtr) -> Result<Vec<u8>> {
        let seg = self.segments.get(&ptr.segment).ok_or_else(|| {
            Error::corruption(
                crate::log::large::SegmentKind::Transient.file_name(ptr.segment),
                ptr.offset,
                "pointer to a transient segment that does not exist",
            )
        })?;
        let (start, buf) = self.windows.entry(ptr.segment).or_insert((0, Vec::new()));
        let len = ptr.len as usize;
        let end = ptr.offset.saturating_add(len as u64);
        if ptr.offset < *start || end > *start + buf.len() as u64 {
            let avail = seg.len().saturating_sub(ptr.offset);
            let n = usize::try_from(avail.min(WINDOW as u64))
                .unwrap_or(WINDOW)
                .max(len);
            buf.resize(n, 0);
            seg.read_into(ptr, buf)?;
            *start = ptr.offset;
        }
        let from = usize::try_from(ptr.offset - *start).unwrap_or(usize::MAX);
        let bytes = buf.get(from..from.saturating_add(len)).ok_or_else(|| {
            Error::corruption(
                crate::log::large::SegmentKind::Transient.file_name(ptr.segment),
                ptr.offset,
                "window out of range",
            )
        })?;
        let value = decode_checked(
            bytes,
            ptr,
            key,
            std::path::Path::new(&crate::log::large::SegmentKind::Transient.file_name(ptr.segment)),
        )?;
        self.bytes_read += u64::from(ptr.len);
        self.values += 1;
        Ok(value)
    }
}

/// Where a flush writes medium values: a transient segment created on first use.
pub(crate) struct TransientSink<'a> {
    create: &'a dyn Fn() -> Result<SegmentWriter>,
    pub writer: Option<SegmentWriter>,
    pub values: u64,
}

impl<'a> TransientSink<'a> {
    pub(crate) fn new(create: &'a dyn Fn() -> Result<SegmentWriter>) -> Self {
        TransientSink {
            create,
            writer: None,
            values: 0,
        }
    }

    /// Appends a medium pair; returns its pointer.
    pub(crate) fn append(&mut self, key: &[u8], value: &[u8], lsn: u64) -> Result<LogPtr> {
        if self.writer.is_none() {
            self.writer = Some((self.create)()?);
        }
        self.values += 1;
        match self.writer.as_mut() {
            Some(w) => w.append(key, value, lsn),
            None => Err(Error::Closed),
        }
    }
}
