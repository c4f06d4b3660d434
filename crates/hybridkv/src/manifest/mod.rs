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
/// Versions 1 (no range tombstones) and 2 are still read. Version 4 adds the delta bucket
/// table (`crate::bucket`); it is written only by a database that has buckets, so one that
/// never separated deltas stays readable by a build that knows version 3.
pub(crate) const MANIFEST_VERSION: u32 = 4;
/// The version written when the state has no delta buckets.
const MANIFEST_VERSION_NO_BUCKETS: u32 = 3;
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
    /// The delta buckets, in hash order (empty: delta separation never wrote any).
    pub buckets: Vec<crate::bucket::BucketMeta>,
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
        let version = if self.buckets.is_empty() {
            MANIFEST_VERSION_NO_BUCKETS
        } else {
            p.extend_from_slice(&(self.buckets.len() as u32).to_le_bytes());
            for b in &self.buckets {
                p.push(b.depth);
                p.extend_from_slice(&b.prefix.to_le_bytes());
                p.extend_from_slice(&(b.segments.len() as u32).to_le_bytes());
                for (id, committed) in &b.segments {
                    p.extend_from_slice(&id.to_le_bytes());
                    p.extend_from_slice(&committed.to_le_bytes());
                }
            }
            MANIFEST_VERSION
        };
        let mut out = Vec::with_capacity(HEADER + p.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
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
        let mut buckets = Vec::new();
        if version >= 4 {
            let n = p.u32().ok_or_else(short)? as usize;
            // Each takes at least 13 bytes (depth, prefix, segment count).
            if n > payload.len() / 13 {
                return Err(bad(
                    HEADER as u64,
                    "manifest bucket count exceeds its payload",
                ));
            }
            let mut seen = std::collections::HashSet::new();
            for _ in 0..n {
                let depth = p.u8().ok_or_else(short)?;
                let prefix = p.u64().ok_or_else(short)?;
                let nseg = p.u32().ok_or_else(short)? as usize;
                if nseg > p.remaining() / 16 {
                    return Err(bad(
                        HEADER as u64,
                        "manifest bucket segment count exceeds its payload",
                    ));
                }
                let mut segs = Vec::with_capacity(nseg);
                for _ in 0..nseg {
                    let id = p.u64().ok_or_else(short)?;
                    let committed = p.u64().ok_or_else(short)?;
                    if id >= next_file_id || !seen.insert(id) {
                        return Err(bad(
                            HEADER as u64,
                            "manifest bucket segment id out of range",
                        ));
                    }
                    segs.push((id, committed));
                }
                buckets.push(crate::bucket::BucketMeta {
                    depth,
                    prefix,
                    segments: segs,
                });
            }
            if buckets.is_empty() {
                // Written as version 3 when there are none: one encoding per state.
                return Err(bad(
                    HEADER as u64,
                    "a version 4 manifest without delta buckets",
                ));
            }
            if !crate::bucket::BucketMeta::valid_table(&buckets) {
                return Err(bad(
                    HEADER as u64,
                    "manifest bucket table does not cover every hash exactly once",
                ));
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
            buckets,
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
    use crate::bucket::BucketMeta;

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
            buckets: Vec::new(),
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

    fn bucket(depth: u8, prefix: u64, segments: &[(u64, u64)]) -> BucketMeta {
        BucketMeta {
            depth,
            prefix,
            segments: segments.to_vec(),
        }
    }

    /// A state with a delta bucket table.
    fn with_buckets(buckets: Vec<BucketMeta>) -> ManifestState {
        ManifestState {
            next_file_id: 20,
            log_min_id: 7,
            flushed_lsn: 500,
            levels: vec![(1, 8, 4096)],
            segments: vec![SegmentRecord {
                id: 2,
                kind: SegmentKind::Large,
                owner: 0,
                garbage: 0,
            }],
            buckets,
            ..ManifestState::default()
        }
    }

    /// Mixed depths, a bucket with no segment, one with two.
    fn good_buckets() -> Vec<BucketMeta> {
        vec![
            bucket(1, 0, &[(11, 4096), (12, 100)]),
            bucket(2, 2, &[]),
            bucket(2, 3, &[(19, 0)]),
        ]
    }

    /// Recomputes the payload checksum of an encoded manifest after an edit of its
    /// payload (`encode`'s header: magic 8 bytes, version, payload length, checksum).
    fn reseal(bytes: &mut [u8]) {
        let crc = crc32c(&bytes[HEADER..]);
        bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    }

    fn corruption(bytes: &[u8]) -> String {
        match ManifestState::decode(bytes, Path::new("MANIFEST")) {
            Err(Error::Corruption { what, .. }) => what,
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn a_bucket_table_is_written_as_version_4_and_only_then() {
        let p = Path::new("MANIFEST");
        let s = with_buckets(good_buckets());
        let bytes = s.encode();
        assert_eq!(bytes[8..12], 4u32.to_le_bytes());
        assert_eq!(bytes[8..12], MANIFEST_VERSION.to_le_bytes());
        assert_eq!(ManifestState::decode(&bytes, p).unwrap(), s);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(ManifestState::decode(&bad, p).is_err(), "flip at {i}");
        }
        for cut in 0..bytes.len() {
            assert!(
                ManifestState::decode(&bytes[..cut], p).is_err(),
                "cut at {cut}"
            );
        }
        // Every bucket at the deepest split.
        let deep = (0..1u64 << crate::bucket::MAX_BUCKET_BITS)
            .map(|prefix| bucket(crate::bucket::MAX_BUCKET_BITS, prefix, &[]))
            .collect();
        let s = with_buckets(deep);
        assert_eq!(ManifestState::decode(&s.encode(), p).unwrap(), s);

        // Without buckets: version 3, as before.
        let plain = with_buckets(Vec::new());
        let v3 = plain.encode();
        assert_eq!(v3[8..12], 3u32.to_le_bytes());
        assert_eq!(ManifestState::decode(&v3, p).unwrap(), plain);
        // The version-4 payload is the version-3 one followed by the bucket table.
        let v4 = with_buckets(good_buckets()).encode();
        assert_eq!(v4[HEADER..v3.len()], v3[HEADER..]);
        // A version-3 header over a payload with a bucket table: trailing bytes.
        let mut as_v3 = v4.clone();
        as_v3[8..12].copy_from_slice(&3u32.to_le_bytes());
        assert!(corruption(&as_v3).contains("trailing"));
        // A version-4 header over a version-3 payload: truncated.
        let mut as_v4 = v3.clone();
        as_v4[8..12].copy_from_slice(&4u32.to_le_bytes());
        assert!(corruption(&as_v4).contains("truncated"));
        // A version after 4 is refused as such.
        let mut v5 = v4.clone();
        v5[8..12].copy_from_slice(&5u32.to_le_bytes());
        assert!(matches!(
            ManifestState::decode(&v5, p),
            Err(Error::UnsupportedVersion { found: 5, .. })
        ));
    }

    #[test]
    fn a_bad_bucket_table_is_corruption() {
        let p = Path::new("MANIFEST");
        let deepest = crate::bucket::MAX_BUCKET_BITS;
        // `encode` does not check: each bad state encodes to a version-4 payload with a
        // good checksum, so the decoder's own checks are what refuses it.
        for (buckets, what) in [
            (
                vec![bucket(1, 0, &[(11, 1)]), bucket(2, 3, &[])],
                "cover every hash",
            ),
            (vec![bucket(1, 0, &[])], "cover every hash"),
            (
                vec![bucket(1, 1, &[]), bucket(1, 0, &[])],
                "cover every hash",
            ),
            (
                vec![bucket(1, 0, &[]), bucket(1, 0, &[]), bucket(1, 1, &[])],
                "cover every hash",
            ),
            (
                vec![bucket(1, 0, &[]), bucket(1, 3, &[])],
                "cover every hash",
            ),
            (
                vec![bucket(deepest + 1, 0, &[]), bucket(1, 1, &[])],
                "cover every hash",
            ),
            (
                vec![bucket(1, 0, &[(20, 1)]), bucket(1, 1, &[])],
                "segment id out of range",
            ),
            (
                vec![bucket(1, 0, &[(u64::MAX, 1)]), bucket(1, 1, &[])],
                "segment id out of range",
            ),
            (
                vec![bucket(1, 0, &[(11, 1), (11, 2)]), bucket(1, 1, &[])],
                "segment id out of range",
            ),
            (
                vec![bucket(1, 0, &[(11, 1)]), bucket(1, 1, &[(12, 5), (11, 1)])],
                "segment id out of range",
            ),
        ] {
            let bytes = with_buckets(buckets.clone()).encode();
            assert_eq!(bytes[8..12], 4u32.to_le_bytes());
            let w = corruption(&bytes);
            assert!(w.contains(what), "{buckets:?}: {w}");
        }

        // The same by hand, on a good table's bytes, the checksum recomputed.
        let good = with_buckets(good_buckets()).encode();
        assert!(ManifestState::decode(&good, p).is_ok());
        let mut resealed = good.clone();
        reseal(&mut resealed);
        assert_eq!(resealed, good);
        // The table ends the payload: its count, then per bucket depth, prefix, segment
        // count and (id, committed) per segment.
        let table = good.len() - (4 + (13 + 2 * 16) + 13 + (13 + 16));
        let first_id = table + 4 + 13;
        assert_eq!(good[first_id..first_id + 8], 11u64.to_le_bytes());
        // The first segment id raised to next_file_id: refused by its checksum first,
        // then, resealed, by the id check.
        let mut bad = good.clone();
        bad[first_id..first_id + 8].copy_from_slice(&20u64.to_le_bytes());
        assert!(corruption(&bad).contains("checksum"));
        reseal(&mut bad);
        assert!(corruption(&bad).contains("segment id out of range"));
        // The second segment of the first bucket named as the first.
        let mut twice = good.clone();
        twice[first_id + 16..first_id + 24].copy_from_slice(&11u64.to_le_bytes());
        reseal(&mut twice);
        assert!(corruption(&twice).contains("segment id out of range"));
        // The third bucket's prefix made 2: an overlap, then a gap.
        let third_prefix = good.len() - (16 + 4 + 8);
        assert_eq!(good[third_prefix..third_prefix + 8], 3u64.to_le_bytes());
        let mut moved = good.clone();
        moved[third_prefix..third_prefix + 8].copy_from_slice(&2u64.to_le_bytes());
        reseal(&mut moved);
        assert!(corruption(&moved).contains("cover every hash"));
        // Counts beyond what the payload holds.
        let mut many = good.clone();
        many[table..table + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        reseal(&mut many);
        assert!(corruption(&many).contains("bucket count"));
        let mut segs = good.clone();
        segs[table + 13..table + 17].copy_from_slice(&1000u32.to_le_bytes());
        reseal(&mut segs);
        assert!(corruption(&segs).contains("segment count"));
    }
}
