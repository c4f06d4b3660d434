//! The manifest: which level files make up which level, where small-log replay starts,
//! and the highest LSN the levels hold.
//!
//! Owns: the one durable description of the database's files (runs by level, live log
//! segments with their owners and garbage, replay start, flushed LSN, next file id, the
//! flushed range tombstones some run still needs), its
//! encoding, and its store, written whole with write-new-then-rename (`MANIFEST.tmp`,
//! fsync, rename, fsync dir), so every change is atomic; [`version::Version`] and
//! [`edit::VersionEdit`]. Never: deletes files itself (callers delete what a durable
//! manifest no longer names), or is stored by any code but `VersionSet::log_and_apply`.
//! FORMAT.md, "Manifest".

pub(crate) mod edit;
pub(crate) mod version;

use crate::error::{Error, Result};
use crate::format::{crc32c, Decoder};
use crate::io::{Io, IoComponent};
use crate::log::large::SegmentKind;
use crate::range_delete::{PendingTombstone, RangeTombstone};
use std::path::Path;

const MAGIC: &[u8; 8] = b"HKVMANIF";
/// Format version of the manifest written: 3 has the payload of 2, and says that the
/// database may have keyspaces (its small log may hold their records, op 6, and a flushed
/// LSN is the last LSN of any keyspace at the flushed memtable's switch), so a build that
/// knows neither refuses it instead of replaying or deleting logs another keyspace needs.
/// Versions 1 (no range tombstones) and 2 are still read.
pub(crate) const MANIFEST_VERSION: u32 = 3;
/// The end length of a range tombstone that runs to the end of the key space.
const NO_END: u32 = u32::MAX;
const HEADER: usize = 20;

/// The durable state the manifest records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ManifestState {
    /// Every file id below this was allocated already.
    pub next_file_id: u64,
    /// Small-log files with a smaller id hold only flushed data.
    pub log_min_id: u64,
    /// Highest LSN held by the levels.
    pub flushed_lsn: u64,
    /// (level number starting at 1, file id, file length) per run: levels in order, the
    /// runs of a level newest first.
    pub levels: Vec<(u32, u64, u64)>,
    /// Live log segments.
    pub segments: Vec<SegmentRecord>,
    /// Flushed range tombstones, oldest first, with the runs that may still need them.
    pub range_tombstones: Vec<PendingTombstone>,
}

/// How a segment's kind is written in the manifest (FORMAT.md, "Manifest").
const KIND_LARGE: u8 = 1;
const KIND_TRANSIENT: u8 = 2;

pub(crate) fn kind_code(kind: SegmentKind) -> u8 {
    match kind {
        SegmentKind::Large => KIND_LARGE,
        SegmentKind::Transient => KIND_TRANSIENT,
    }
}

pub(crate) fn kind_of(code: u8) -> Option<SegmentKind> {
    match code {
        KIND_LARGE => Some(SegmentKind::Large),
        KIND_TRANSIENT => Some(SegmentKind::Transient),
        _ => None,
    }
}

/// One live log segment as the manifest records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentRecord {
    pub id: u64,
    /// Large-log or transient segment.
    pub kind: SegmentKind,
    /// Transient segments: id of the level file (run) whose pointers use it (0 for large).
    pub owner: u64,
    /// Large segments: bytes of records known to be garbage.
    pub garbage: u64,
}

impl ManifestState {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(32 + self.levels.len() * 20);
        p.extend_from_slice(&self.next_file_id.to_le_bytes());
        p.extend_from_slice(&self.log_min_id.to_le_bytes());
        p.extend_from_slice(&self.flushed_lsn.to_le_bytes());
        p.extend_from_slice(&(self.levels.len() as u32).to_le_bytes());
        for (level, id, len) in &self.levels {
            p.extend_from_slice(&level.to_le_bytes());
            p.extend_from_slice(&id.to_le_bytes());
            p.extend_from_slice(&len.to_le_bytes());
        }
        p.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for s in &self.segments {
            p.extend_from_slice(&s.id.to_le_bytes());
            p.push(kind_code(s.kind));
            p.extend_from_slice(&s.owner.to_le_bytes());
            p.extend_from_slice(&s.garbage.to_le_bytes());
        }
        p.extend_from_slice(&(self.range_tombstones.len() as u32).to_le_bytes());
        for r in &self.range_tombstones {
            let t = &r.tombstone;
            p.extend_from_slice(&t.lsn.to_le_bytes());
            p.extend_from_slice(&(t.start.len() as u32).to_le_bytes());
            p.extend_from_slice(
                &t.end
                    .as_ref()
                    .map_or(NO_END, |e| e.len() as u32)
                    .to_le_bytes(),
            );
            p.extend_from_slice(&t.start);
            p.extend_from_slice(t.end.as_deref().unwrap_or_default());
            p.extend_from_slice(&(r.pending.len() as u32).to_le_bytes());
            for id in &r.pending {
                p.extend_from_slice(&id.to_le_bytes());
            }
        }
        let mut out = Vec::with_capacity(HEADER + p.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c(&p).to_le_bytes());
        out.extend_from_slice(&p);
        out
    }

    pub(crate) fn decode(data: &[u8], file: &Path) -> Result<Self> {
        let bad = |offset: u64, what: &str| Error::corruption(file, offset, what);
        let mut d = Decoder::new(data);
        if d.bytes(8) != Some(MAGIC.as_slice()) {
            return Err(bad(0, "not a manifest (bad magic)"));
        }
        let version = d.u32().ok_or_else(|| bad(8, "truncated header"))?;
        let len = d.u32().ok_or_else(|| bad(12, "truncated header"))? as usize;
        let crc = d.u32().ok_or_else(|| bad(16, "truncated header"))?;
        let payload = d
            .bytes(len)
            .ok_or_else(|| bad(HEADER as u64, "payload shorter than its length"))?;
        if crc32c(payload) != crc {
            return Err(bad(HEADER as u64, "manifest checksum mismatch"));
        }
        if d.remaining() != 0 {
            // Written whole and renamed into place: anything after the payload is damage.
            return Err(bad(
                (HEADER + len) as u64,
                "manifest has bytes after its payload",
            ));
        }
        if !(1..=MANIFEST_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                file: file.to_path_buf(),
                found: version,
                supported: MANIFEST_VERSION,
            });
        }
        let mut p = Decoder::new(payload);
        let short = || bad(HEADER as u64, "manifest payload truncated");
        let next_file_id = p.u64().ok_or_else(short)?;
        let log_min_id = p.u64().ok_or_else(short)?;
        let flushed_lsn = p.u64().ok_or_else(short)?;
        let n = p.u32().ok_or_else(short)? as usize;
        if n > payload.len() / 20 {
            return Err(bad(HEADER as u64, "manifest run count exceeds its payload"));
        }
        let mut levels = Vec::with_capacity(n);
        for _ in 0..n {
            let level = p.u32().ok_or_else(short)?;
            let id = p.u64().ok_or_else(short)?;
            let flen = p.u64().ok_or_else(short)?;
            let out_of_order = levels.last().is_some_and(|(l, _, _)| *l > level);
            if level == 0
                || level > 64
                || id >= next_file_id
                || out_of_order
                || levels.iter().any(|(_, i, _)| *i == id)
            {
                return Err(bad(HEADER as u64, "manifest level entry out of range"));
            }
            levels.push((level, id, flen));
        }
        let nseg = p.u32().ok_or_else(short)? as usize;
        if nseg > payload.len() / 25 {
            return Err(bad(
                HEADER as u64,
                "manifest segment count exceeds its payload",
            ));
        }
        let mut segments = Vec::with_capacity(nseg);
        for _ in 0..nseg {
            let id = p.u64().ok_or_else(short)?;
            let kind = p.u8().ok_or_else(short)?;
            let owner = p.u64().ok_or_else(short)?;
            let garbage = p.u64().ok_or_else(short)?;
            let kind = kind_of(kind);
            let Some(kind) = kind.filter(|_| {
                id < next_file_id && !segments.iter().any(|s: &SegmentRecord| s.id == id)
            }) else {
                return Err(bad(HEADER as u64, "manifest segment entry out of range"));
            };
            segments.push(SegmentRecord {
                id,
                kind,
                owner,
                garbage,
            });
        }
        let mut range_tombstones = Vec::new();
        if version >= 2 {
            let n = p.u32().ok_or_else(short)? as usize;
            // Each takes at least 24 bytes (LSN, two lengths, a pending count, one id).
            if n > payload.len() / 24 {
                return Err(bad(
                    HEADER as u64,
                    "manifest range tombstone count exceeds its payload",
                ));
            }
            for _ in 0..n {
                let lsn = p.u64().ok_or_else(short)?;
                let slen = p.u32().ok_or_else(short)? as usize;
                let elen = p.u32().ok_or_else(short)?;
                let start = p.bytes(slen).ok_or_else(short)?.to_vec();
                let end = match elen {
                    NO_END => None,
                    n => Some(p.bytes(n as usize).ok_or_else(short)?.to_vec()),
                };
                let npending = p.u32().ok_or_else(short)? as usize;
                if npending == 0 || npending > p.remaining() / 8 {
                    return Err(bad(
                        HEADER as u64,
                        "manifest range tombstone pending count out of range",
                    ));
                }
                let mut pending = Vec::with_capacity(npending);
                for _ in 0..npending {
                    let id = p.u64().ok_or_else(short)?;
                    if id >= next_file_id || pending.last().is_some_and(|&last| last >= id) {
                        return Err(bad(
                            HEADER as u64,
                            "manifest range tombstone names a run out of range",
                        ));
                    }
                    pending.push(id);
                }
                range_tombstones.push(PendingTombstone {
                    tombstone: RangeTombstone { start, end, lsn },
                    pending,
                });
            }
        }
        if p.remaining() != 0 {
            return Err(bad(HEADER as u64, "manifest payload has trailing bytes"));
        }
        Ok(ManifestState {
            next_file_id,
            log_min_id,
            flushed_lsn,
            levels,
            segments,
            range_tombstones,
        })
    }

    /// Writes this state as the new manifest, atomically and durably.
    pub(crate) fn store(&self, io: &Io, dir: &Path) -> Result<()> {
        io.write_atomic(
            dir,
            crate::filename::MANIFEST,
            &self.encode(),
            IoComponent::Manifest,
        )
    }

    /// Reads the manifest, `None` if the directory has none.
    pub(crate) fn load(io: &Io, dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(crate::filename::MANIFEST);
        if io.fs().kind(&path)?.is_none() {
            return Ok(None);
        }
        let data = io.read_all(&path, IoComponent::Manifest)?;
        Self::decode(&data, &path).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_detected() {
        let s = ManifestState {
            next_file_id: 10,
            log_min_id: 7,
            flushed_lsn: 12345,
            levels: vec![(1, 8, 4096), (1, 6, 4096), (3, 5, 8192)],
            segments: vec![
                SegmentRecord {
                    id: 2,
                    kind: SegmentKind::Large,
                    owner: 0,
                    garbage: 777,
                },
                SegmentRecord {
                    id: 9,
                    kind: SegmentKind::Transient,
                    owner: 5,
                    garbage: 0,
                },
            ],
            range_tombstones: vec![
                PendingTombstone {
                    tombstone: RangeTombstone {
                        start: b"a".to_vec(),
                        end: Some(b"k".to_vec()),
                        lsn: 12000,
                    },
                    pending: vec![5, 8],
                },
                PendingTombstone {
                    tombstone: RangeTombstone {
                        start: Vec::new(),
                        end: None,
                        lsn: 12300,
                    },
                    pending: vec![6],
                },
            ],
        };
        let bytes = s.encode();
        let p = Path::new("MANIFEST");
        assert_eq!(ManifestState::decode(&bytes, p).unwrap(), s);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(ManifestState::decode(&bad, p).is_err(), "flip at {i}");
        }
        for cut in 0..bytes.len() {
            assert!(ManifestState::decode(&bytes[..cut], p).is_err());
        }
    }

    #[test]
    fn a_range_tombstone_waiting_on_no_run_or_on_runs_out_of_order_or_range_is_corruption() {
        let with = |pending: Vec<u64>| ManifestState {
            next_file_id: 10,
            range_tombstones: vec![PendingTombstone {
                tombstone: RangeTombstone {
                    start: b"a".to_vec(),
                    end: None,
                    lsn: 5,
                },
                pending,
            }],
            ..ManifestState::default()
        };
        let p = Path::new("MANIFEST");
        assert_eq!(
            ManifestState::decode(&with(vec![3, 7]).encode(), p).unwrap(),
            with(vec![3, 7])
        );
        for (pending, what) in [
            (vec![], "pending count"),
            (vec![7, 3], "run out of range"),
            (vec![3, 3], "run out of range"),
            (vec![10], "run out of range"),
        ] {
            match ManifestState::decode(&with(pending.clone()).encode(), p) {
                Err(Error::Corruption { what: w, .. }) => {
                    assert!(w.contains(what), "{pending:?}: {w}")
                }
                other => panic!("{pending:?}: expected corruption, got {other:?}"),
            }
        }
    }

    #[test]
    fn older_manifests_are_read_and_the_newest_version_written() {
        let s = ManifestState {
            next_file_id: 10,
            log_min_id: 7,
            flushed_lsn: 99,
            levels: vec![(1, 8, 4096)],
            ..ManifestState::default()
        };
        let v3 = s.encode();
        assert_eq!(v3[8..12], 3u32.to_le_bytes());
        // Version 2: the same payload.
        let mut v2 = v3.clone();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            ManifestState::decode(&v2, Path::new("MANIFEST")).unwrap(),
            s
        );
        // Version 1: the payload without the range tombstone count (read as none).
        let mut payload = v3[HEADER..v3.len() - 4].to_vec();
        let mut v1 = MAGIC.to_vec();
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        v1.extend_from_slice(&crc32c(&payload).to_le_bytes());
        v1.append(&mut payload);
        assert_eq!(
            ManifestState::decode(&v1, Path::new("MANIFEST")).unwrap(),
            s
        );
    }

    #[test]
    fn bytes_after_the_payload_are_corruption() {
        // Found by fuzzing: a manifest followed by a stray byte decoded as if it ended
        // at its payload.
        let s = ManifestState {
            next_file_id: 1,
            ..ManifestState::default()
        };
        let mut bytes = s.encode();
        let end = bytes.len() as u64;
        bytes.push(0);
        match ManifestState::decode(&bytes, Path::new("MANIFEST")) {
            Err(Error::Corruption { offset, what, .. }) => {
                assert_eq!(offset, end);
                assert!(what.contains("after its payload"), "{what}");
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }
}
