//! The small log (WAL), shared by every keyspace of a database: a new file at each
//! memtable switch of any keyspace, `NNNNNNNN.wal`.
//!
//! Layout (FORMAT.md, "Small log"): a 16-byte file header, then records
//! `[payload_len u32][first_lsn u64][count u32][header_crc u32][payload_crc u32][payload]`.
//! The header CRC covers the first 16 bytes of the record header, the payload CRC the
//! payload, so a reader can tell a damaged length from a damaged payload.
//!
//! Replay rule: a record that fails its checks ends replay cleanly when no valid record
//! follows it in its file (a torn tail, which is then cut off, and every later log file
//! is discarded: a memtable switch does not sync the log it leaves, so any log may be
//! torn by a power loss, and nothing after the first tear was ever synced); a bad record
//! followed by a valid one is `Error::Corruption` with the file and offset.

use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::format::{crc32c, Decoder};
use crate::io::{Io, IoComponent, WritableFile};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"HKVSLOG\0";
/// Format version of small-log files.
pub(crate) const VERSION: u32 = 1;
const FILE_HEADER: usize = 16;
const RECORD_HEADER: usize = 24;

/// File name of small-log file `id`.
pub(crate) fn file_name(id: u64) -> String {
    FileKind::SmallLog.name(id)
}

fn file_header() -> [u8; FILE_HEADER] {
    let mut h = [0u8; FILE_HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Appends records to one small-log file.
pub(crate) struct SmallLogWriter {
    id: u64,
    file: Box<dyn WritableFile>,
    buf: Vec<u8>,
    /// Bytes of the file made durable so far.
    synced: u64,
    /// Cut to its records by [`SmallLogWriter::finish`] and not synced since: the cut is
    /// not durable yet (a power loss could bring back a reserved tail of zeros, which
    /// replay reads as a torn tail).
    cut_unsynced: bool,
}

impl SmallLogWriter {
    /// Creates log file `id` in `dir` and makes its creation durable. The header is synced
    /// before the directory: a file whose name survives a power loss has its header (a
    /// torn header in a log that is no longer the newest would refuse the open).
    pub(crate) fn create(io: &Io, dir: &Path, id: u64) -> Result<Self> {
        let mut file = io.create(&dir.join(file_name(id)), IoComponent::Wal)?;
        file.append(&file_header())?;
        file.sync_data()?;
        io.fs().sync_dir(dir)?;
        let synced = file.len();
        Ok(SmallLogWriter {
            id,
            file,
            buf: Vec::with_capacity(256 << 10),
            synced,
            cut_unsynced: false,
        })
    }

    /// The file id of this log.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Encodes one record into the pending group (tests and fuzzing write records
    /// directly; the commit path uses [`SmallLogWriter::add_prefixed`]).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn add(&mut self, first_lsn: u64, count: u32, payload: &[u8]) {
        self.add_prefixed(first_lsn, count, &[], payload);
    }

    /// Encodes one record whose payload is `prefix` then `rest` (a keyspace switch before
    /// a caller's batch), without joining them first.
    pub(crate) fn add_prefixed(&mut self, first_lsn: u64, count: u32, prefix: &[u8], rest: &[u8]) {
        let len = prefix.len() + rest.len();
        let mut h = [0u8; RECORD_HEADER];
        h[..4].copy_from_slice(&(len as u32).to_le_bytes());
        h[4..12].copy_from_slice(&first_lsn.to_le_bytes());
        h[12..16].copy_from_slice(&count.to_le_bytes());
        let hcrc = crc32c(&h[..16]);
        h[16..20].copy_from_slice(&hcrc.to_le_bytes());
        let crc = if prefix.is_empty() {
            crc32c(rest)
        } else {
            crate::format::crc32c_append(crc32c(prefix), rest)
        };
        h[20..24].copy_from_slice(&crc.to_le_bytes());
        self.buf.extend_from_slice(&h);
        self.buf.extend_from_slice(prefix);
        self.buf.extend_from_slice(rest);
    }

    /// Writes the pending group in one append and hands it to the OS; with `sync`, also
    /// makes it durable.
    pub(crate) fn commit(&mut self, sync: bool) -> Result<()> {
        let result = self.file.append(&self.buf).and_then(|()| self.file.flush());
        self.buf.clear();
        if self.buf.capacity() > 4 << 20 {
            self.buf.shrink_to(256 << 10);
        }
        result?;
        if sync {
            self.sync()?;
        }
        Ok(())
    }

    /// Makes everything written durable (an older log, before a newer one is synced).
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.file.sync_data()?;
        self.synced = self.file.len();
        self.cut_unsynced = false;
        Ok(())
    }

    /// Whether records were handed to the OS (or are pending) since the last sync, or the
    /// file was cut by [`SmallLogWriter::finish`] since.
    pub(crate) fn has_unsynced(&self) -> bool {
        !self.buf.is_empty() || self.file.len() > self.synced || self.cut_unsynced
    }

    /// Bytes of the log's records (and header) handed to the OS: where the log ends. The
    /// file may be longer while it is appended to through a memory map (a reserved tail
    /// of zeros).
    pub(crate) fn len(&self) -> u64 {
        self.file.len()
    }

    /// Ends the log at its last record (a memtable switch leaves it): a log appended to
    /// through a memory map gives back its reserved tail, so that once a newer log
    /// follows, replay does not read that tail as a tear. No more records may be added.
    /// Not durable until [`SmallLogWriter::sync`] (which a synced commit into a newer log
    /// makes first).
    pub(crate) fn finish(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            return Err(Error::Internal(format!(
                "small log {} finished with an uncommitted group",
                self.id
            )));
        }
        self.file.finish()?;
        self.cut_unsynced = true;
        Ok(())
    }
}

/// One replayed record.
// `pub`, not `pub(crate)`: `hybridkv::fuzzing` re-exports it (the module stays private).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Where the record starts in its file.
    pub offset: u64,
    /// LSN of the batch's first operation.
    pub first_lsn: u64,
    /// Operations in the batch.
    pub count: u32,
    /// The batch payload.
    pub payload: Vec<u8>,
}

enum Parsed {
    Ok(Record, usize),
    Bad(&'static str),
}

fn parse_at(data: &[u8], pos: usize) -> Parsed {
    let Some(rest) = data.get(pos..) else {
        return Parsed::Bad("record header past end of file");
    };
    let mut d = Decoder::new(rest);
    let (Some(len), Some(lsn), Some(count), Some(hcrc), Some(pcrc)) =
        (d.u32(), d.u64(), d.u32(), d.u32(), d.u32())
    else {
        return Parsed::Bad("truncated record header");
    };
    if rest.get(..16).map(crc32c) != Some(hcrc) {
        return Parsed::Bad("record header checksum mismatch");
    }
    let Some(payload) = d.bytes(len as usize) else {
        return Parsed::Bad("record payload past end of file");
    };
    if crc32c(payload) != pcrc {
        return Parsed::Bad("record payload checksum mismatch");
    }
    Parsed::Ok(
        Record {
            offset: pos as u64,
            first_lsn: lsn,
            count,
            payload: payload.to_vec(),
        },
        RECORD_HEADER + len as usize,
    )
}

/// What replaying one file found.
// `pub`, not `pub(crate)`: `hybridkv::fuzzing` re-exports it (the module stays private).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The valid records, in file order.
    pub records: Vec<Record>,
    /// Offset where a torn tail starts, if one was found.
    pub torn_at: Option<u64>,
}

/// Whether a valid record starts anywhere from `from` on. Zeros to the end (the space a
/// memory-mapped log reserved ahead) hold none: not searched offset by offset.
fn valid_record_from(data: &[u8], from: usize) -> bool {
    let rest = data.get(from..).unwrap_or_default();
    !rest.iter().all(|&b| b == 0)
        && (from..data.len()).any(|p| matches!(parse_at(data, p), Parsed::Ok(..)))
}

/// Reads every record of log file `path`. A bad record with no valid record after it is a
/// torn tail (`torn_at`); one followed by a valid record is corruption. `newest` says
/// whether the file may be shorter than its header (its creation was cut short).
pub(crate) fn replay_file(io: &Io, path: &Path, newest: bool) -> Result<Replay> {
    let data = io.read_all(path, IoComponent::Wal)?;
    // A crash right after creating the file can leave it shorter than its header, or (a
    // log appended to through a memory map reserves its space first) zeros where the
    // header was to go. The header is synced before any record is appended, so a valid
    // record behind a header of zeros means damage, not a creation cut short: dropping
    // the file would drop it unseen.
    let zero_header = data
        .get(..FILE_HEADER)
        .is_some_and(|h| h.iter().all(|&b| b == 0));
    if zero_header && valid_record_from(&data, FILE_HEADER) {
        return Err(Error::corruption(
            path,
            0,
            "small-log header is zeros but a record follows it",
        ));
    }
    let Some(header) = data.get(..FILE_HEADER).filter(|_| !zero_header) else {
        if newest {
            return Ok(Replay {
                records: Vec::new(),
                torn_at: Some(0),
            });
        }
        return Err(Error::corruption(
            path,
            0,
            "small-log file shorter than its header (or no header written)",
        ));
    };
    if header.get(..8) != Some(MAGIC.as_slice()) {
        return Err(Error::corruption(
            path,
            0,
            "not a small-log file (bad magic)",
        ));
    }
    let mut d = Decoder::new(header.get(8..).unwrap_or_default());
    let version = d.u32().unwrap_or(0);
    if header.get(..12).map(crc32c) != d.u32() {
        return Err(Error::corruption(
            path,
            0,
            "small-log file header checksum mismatch",
        ));
    }
    if version != VERSION {
        return Err(Error::UnsupportedVersion {
            file: path.to_path_buf(),
            found: version,
            supported: VERSION,
        });
    }
    let mut records = Vec::new();
    let mut pos = FILE_HEADER;
    while pos < data.len() {
        match parse_at(&data, pos) {
            Parsed::Ok(rec, n) => {
                records.push(rec);
                pos += n;
            }
            Parsed::Bad(_) if data.get(pos..).is_some_and(|t| t.iter().all(|&b| b == 0)) => {
                // Zeros to the end: space reserved ahead by a log appended to through a
                // memory map, never written (or written and lost with a power loss): the
                // log ends here, as at a torn tail.
                return Ok(Replay {
                    records,
                    torn_at: Some(pos as u64),
                });
            }
            Parsed::Bad(what) => {
                if !valid_record_from(&data, pos + 1) {
                    return Ok(Replay {
                        records,
                        torn_at: Some(pos as u64),
                    });
                }
                return Err(Error::corruption(path, pos as u64, what));
            }
        }
    }
    Ok(Replay {
        records,
        torn_at: None,
    })
}

/// Paths of the small-log files in `dir` with id >= `min_id`, oldest first.
pub(crate) fn list(io: &Io, dir: &Path, min_id: u64) -> Result<Vec<(u64, PathBuf)>> {
    let names = io.fs().list(dir)?;
    Ok(filename::numbered(&names, FileKind::SmallLog)
        .into_iter()
        .filter(|(id, _)| *id >= min_id)
        .map(|(id, name)| (id, dir.join(name)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealFs;
    use std::sync::Arc;

    fn io() -> Io {
        Io::new(Arc::new(RealFs), false)
    }

    fn write_log(dir: &Path, n: u64) -> PathBuf {
        let io = io();
        let mut w = SmallLogWriter::create(&io, dir, 1).unwrap();
        for i in 0..n {
            w.add(i * 2 + 1, 2, format!("payload-{i}").as_bytes());
            w.commit(false).unwrap();
        }
        w.sync().unwrap();
        dir.join(file_name(1))
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_log(dir.path(), 10);
        let r = replay_file(&io(), &p, true).unwrap();
        assert_eq!(r.records.len(), 10);
        assert!(r.torn_at.is_none());
        assert_eq!(r.records[3].first_lsn, 7);
        assert_eq!(r.records[3].payload, b"payload-3");
    }

    #[test]
    fn torn_tail_ends_replay_every_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_log(dir.path(), 5);
        let full = std::fs::read(&p).unwrap();
        let last_start = full.len() - (RECORD_HEADER + "payload-4".len());
        for cut in last_start + 1..full.len() {
            std::fs::write(&p, &full[..cut]).unwrap();
            let r = replay_file(&io(), &p, true).unwrap();
            assert_eq!(r.records.len(), 4, "cut at {cut}");
            assert_eq!(r.torn_at, Some(last_start as u64));
        }
    }

    #[test]
    fn corrupt_middle_record_is_corruption_with_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_log(dir.path(), 5);
        let mut data = std::fs::read(&p).unwrap();
        let second = FILE_HEADER + RECORD_HEADER + "payload-0".len();
        data[second + RECORD_HEADER + 2] ^= 0x40; // payload byte of record 1
        std::fs::write(&p, &data).unwrap();
        match replay_file(&io(), &p, true) {
            Err(Error::Corruption { offset, .. }) => assert_eq!(offset, second as u64),
            other => panic!(
                "expected corruption, got {:?}",
                other.map(|r| r.records.len())
            ),
        }
        // A bad last record is a torn tail in any file (older logs are not synced at a
        // memtable switch), so it ends replay before that record.
        let mut data = std::fs::read(&p).unwrap();
        data[second + RECORD_HEADER + 2] ^= 0x40;
        let n = data.len();
        data[n - 1] ^= 0xff;
        std::fs::write(&p, &data).unwrap();
        let r = replay_file(&io(), &p, false).unwrap();
        assert_eq!(r.records.len(), 4);
        let last_start = n - (RECORD_HEADER + "payload-4".len());
        assert_eq!(r.torn_at, Some(last_start as u64));
    }

    #[test]
    fn a_reserved_tail_of_zeros_ends_replay_and_finish_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let io = io().with_mapped_log_writes(true);
        let mut w = SmallLogWriter::create(&io, dir.path(), 1).unwrap();
        let mut end = FILE_HEADER;
        for i in 0..200u64 {
            let payload = format!("payload-{i}");
            w.add(i + 1, 1, payload.as_bytes());
            w.commit(false).unwrap();
            end += RECORD_HEADER + payload.len();
        }
        assert_eq!(w.len(), end as u64);
        let p = dir.path().join(file_name(1));
        // As a crash of the process leaves it: the records, then zeros to the reserved
        // length. Replay reads every record and ends the log where the zeros start, fast
        // (no search for a later record through the whole reserved tail).
        let on_disk = std::fs::metadata(&p).unwrap().len();
        assert!(on_disk > end as u64, "{on_disk} <= {end}");
        let r = replay_file(&io, &p, true).unwrap();
        assert_eq!(r.records.len(), 200);
        assert_eq!(r.records[199].payload, b"payload-199");
        assert_eq!(r.torn_at, Some(end as u64));
        // A torn record before the zeros ends replay at that record, as before.
        let mut data = std::fs::read(&p).unwrap();
        let last = end - (RECORD_HEADER + "payload-199".len());
        data[last + RECORD_HEADER] ^= 0x20;
        let torn = dir.path().join(file_name(2));
        std::fs::write(&torn, &data).unwrap();
        let r = replay_file(&io, &torn, false).unwrap();
        assert_eq!(r.records.len(), 199);
        assert_eq!(r.torn_at, Some(last as u64));
        // Finished (a memtable switch), the log is exactly its records, and its cut is
        // unsynced until the next sync.
        w.sync().unwrap();
        assert!(!w.has_unsynced());
        w.finish().unwrap();
        assert!(w.has_unsynced(), "the cut is not durable yet");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), end as u64);
        let r = replay_file(&io, &p, false).unwrap();
        assert_eq!((r.records.len(), r.torn_at), (200, None));
        w.sync().unwrap();
        assert!(!w.has_unsynced());
    }

    #[test]
    fn a_header_of_zeros_with_a_record_after_it_is_corruption_even_when_newest() {
        // The header is synced before any record: records behind a header of zeros were
        // not left by a crash, and dropping the file would drop them unseen.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(9));
        let mut w = SmallLogWriter::create(&io(), dir.path(), 9).unwrap();
        w.add(1, 1, b"payload");
        w.commit(true).unwrap();
        drop(w);
        let mut data = std::fs::read(&p).unwrap();
        data[..FILE_HEADER].fill(0);
        std::fs::write(&p, &data).unwrap();
        for newest in [true, false] {
            match replay_file(&io(), &p, newest) {
                Err(Error::Corruption {
                    offset: 0, what, ..
                }) => {
                    assert!(what.contains("zeros"), "{what}");
                }
                other => panic!("newest {newest}: expected corruption, got {other:?}"),
            }
        }
        // Bytes behind the zeros that hold no record: nothing is dropped unseen, so the
        // newest file stays a creation cut short, as before (the rule asks for a record,
        // as the large log's does, not for any byte).
        let mut garbage = vec![0u8; 4096];
        garbage[100..110].fill(0xA5);
        std::fs::write(&p, &garbage).unwrap();
        let r = replay_file(&io(), &p, true).unwrap();
        assert_eq!((r.records.len(), r.torn_at), (0, Some(0)));
    }

    #[test]
    fn a_log_of_zeros_is_a_creation_cut_short_when_newest_and_corruption_otherwise() {
        // A process killed after a mapped log reserved its first step and before its
        // header was copied in leaves a file of zeros.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(9));
        std::fs::write(&p, vec![0u8; 4096]).unwrap();
        let r = replay_file(&io(), &p, true).unwrap();
        assert_eq!((r.records.len(), r.torn_at), (0, Some(0)));
        match replay_file(&io(), &p, false) {
            Err(Error::Corruption { offset: 0, .. }) => {}
            other => panic!("expected corruption, got {other:?}"),
        }
    }
}
