//! Medium pairs at merges: written to a transient segment when a flush lands above the
//! merge level, read back and written in place when a merge reaches it (Parallax §3.3).
//!
//! Every transient segment is sorted (a flush writes it in key order), so a merge that
//! walks a level in key order reads each segment front to back: one sequential pass per
//! segment through a small window, never a random 4 KiB read per pair.

use crate::cache::{BlockCache, ENTRY_OVERHEAD};
use crate::error::{Error, Result};
use crate::log::large::SegmentSet;
use crate::log::large::{SegmentWriter, RECORD_HEADER};
use crate::log::ptr::LogPtr;
use crate::log::readahead::SegmentReadahead;

/// Read size per transient segment during a merge.
const WINDOW: usize = 256 << 10;

/// First read size per segment for the medium bases a merge above the merge level folds:
/// only keys with deltas have theirs read, so reads may be sparse; the window grows to
/// [`WINDOW`] while they stay sequential.
const BASE_WINDOW_MIN: usize = 16 << 10;

/// Segments whose base windows are kept at once (the least recently refilled is
/// dropped): at most `BASE_WINDOWS x WINDOW` = 16 MiB of buffers, whatever the number of
/// transient segments the merged runs point into.
const BASE_WINDOWS: usize = 64;

/// Reads medium values in key order during a merge: through a window per sorted
/// transient segment.
pub(crate) struct TransientReader<'a> {
    segments: &'a SegmentSet,
    readahead: SegmentReadahead,
}

impl<'a> TransientReader<'a> {
    /// For a merge at the merge level, which reads every medium value of its inputs: a
    /// fixed 256 KiB window per segment (the segments are the inputs' own).
    pub(crate) fn new(segments: &'a SegmentSet) -> Self {
        TransientReader {
            segments,
            readahead: SegmentReadahead::new(WINDOW, WINDOW, usize::MAX),
        }
    }

    /// For the medium bases a merge above the merge level folds deltas into: windows
    /// from 16 KiB growing to 256 KiB while reads stay sequential, for at most 64
    /// segments at once.
    pub(crate) fn for_bases(segments: &'a SegmentSet) -> Self {
        TransientReader {
            segments,
            readahead: SegmentReadahead::new(BASE_WINDOW_MIN, WINDOW, BASE_WINDOWS),
        }
    }

    /// The value of the record at `ptr`, which must hold `key`.
    pub(crate) fn read(&mut self, key: &[u8], ptr: LogPtr) -> Result<Vec<u8>> {
        self.readahead.read(self.segments, key, ptr)
    }

    /// Bytes of medium values read back.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.readahead.bytes_read
    }

    /// Medium values read back.
    pub(crate) fn values(&self) -> u64 {
        self.readahead.values
    }
}

/// Where a flush writes medium values: a transient segment created on first use.
pub(crate) struct TransientSink<'a> {
    create: &'a dyn Fn() -> Result<SegmentWriter>,
    pub writer: Option<SegmentWriter>,
    pub values: u64,
    /// Where each record appended is also kept (a flush's values: just written, the
    /// likeliest to be read), and the bytes it may still keep there.
    cache: Option<(&'a BlockCache, u64)>,
}

impl<'a> TransientSink<'a> {
    pub(crate) fn new(create: &'a dyn Fn() -> Result<SegmentWriter>) -> Self {
        TransientSink {
            create,
            writer: None,
            values: 0,
            cache: None,
        }
    }

    /// Also keeps the records appended in `cache`, as a read of them would, while they fit
    /// in `limit` bytes in all.
    pub(crate) fn with_cache(mut self, cache: &'a BlockCache, limit: u64) -> Self {
        self.cache = cache.enabled().then_some((cache, limit));
        self
    }

    /// Appends a medium pair; returns its pointer.
    pub(crate) fn append(&mut self, key: &[u8], value: &[u8], lsn: u64) -> Result<LogPtr> {
        if self.writer.is_none() {
            self.writer = Some((self.create)()?);
        }
        self.values += 1;
        let Some(w) = self.writer.as_mut() else {
            return Err(Error::Closed);
        };
        // What the cache charges for the record (its bytes and the entry's overhead).
        let len = (RECORD_HEADER + key.len() + value.len()) as u64 + ENTRY_OVERHEAD;
        match &mut self.cache {
            Some((cache, left)) if *left >= len => {
                *left -= len;
                w.append_cached(key, value, lsn, cache)
            }
            _ => w.append(key, value, lsn),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{Io, RealFs};
    use crate::log::large::SegmentKind;
    use std::sync::Arc;

    #[test]
    fn a_sink_keeps_the_records_it_appends_while_they_fit_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let cache = BlockCache::new(1 << 20);
        let create = || SegmentWriter::create(&io, dir.path(), SegmentKind::Transient, 7);
        let value = [5u8; 300];
        let record = (RECORD_HEADER + 6 + value.len()) as u64;
        // Room for three records and most of a fourth, as the cache charges them.
        let charge = record + ENTRY_OVERHEAD;
        let mut sink = TransientSink::new(&create).with_cache(&cache, 4 * charge - 1);
        let ptrs: Vec<LogPtr> = (0..10)
            .map(|i| {
                sink.append(format!("key{i:03}").as_bytes(), &value, i + 1)
                    .unwrap()
            })
            .collect();
        assert_eq!(sink.values, 10);
        for (i, p) in ptrs.iter().enumerate() {
            assert_eq!(p.len as u64, record);
            let kept = cache.get(7, p.offset);
            assert_eq!(kept.is_some(), i < 3, "record {i}");
            if let Some(rec) = kept {
                assert_eq!(rec.len() as u64, record);
                assert!(rec.ends_with(&value));
            }
        }
        // Without a cache: nothing kept, the same pointers.
        let create = || SegmentWriter::create(&io, dir.path(), SegmentKind::Transient, 8);
        let mut sink = TransientSink::new(&create);
        let p = sink.append(b"key000", &value, 1).unwrap();
        assert_eq!((p.offset, p.len), (ptrs[0].offset, ptrs[0].len));
        assert!(cache.get(8, p.offset).is_none());
    }
}
