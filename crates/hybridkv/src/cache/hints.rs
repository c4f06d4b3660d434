//! The cache hint file's format (`CACHE_HINTS`, `docs/FORMAT.md`, "Cache hint file"): which
//! entries the block cache held when the database last closed, as (keyspace, file id,
//! offset tag, length), grouped by file.
//!
//! Owns: the encoding and its checked decoding (every count and length validated against
//! the bytes left before use; the whole file under one CRC32C). Never: reads or writes a
//! file, or decides what to reload.

use crate::format::{put_varint, Decoder, SideFileError, SideFileFrame};

/// First eight bytes of a hint file.
pub(crate) const MAGIC: &[u8; 8] = b"HKVHINT\0";
/// The version this code writes and reads.
pub(crate) const VERSION: u32 = 1;
/// The longest entry a hint may name (a cached node or record is far shorter; a longer
/// length is damage, and reading it would be a waste).
pub(crate) const MAX_ENTRY_LEN: u32 = 16 << 20;

/// One cached entry named by the hint file: the cache key (keyspace, file id, tag: the
/// entry's offset in its file, with `log::large`'s block tag for a transient segment's
/// block) and the entry's length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct HintedEntry {
    pub keyspace: u32,
    pub file: u64,
    pub tag: u64,
    pub len: u32,
}

/// The frame of a hint file (magic, version, body, CRC32C).
const FRAME: SideFileFrame = SideFileFrame {
    magic: MAGIC,
    version: VERSION,
    kind: "cache hint",
};

/// Encodes `entries` (sorted and deduplicated here): the header (magic, version, group
/// count), one group per (keyspace, file) (keyspace u32, file id u64, entry count u32,
/// then per entry the tag's distance from the previous one in the group (the first from
/// 0) and the length, as varints), and the CRC32C of everything before it.
pub(crate) fn encode(mut entries: Vec<HintedEntry>) -> Vec<u8> {
    entries.sort_unstable();
    entries.dedup_by_key(|e| (e.keyspace, e.file, e.tag));
    let mut out = FRAME.start(4 + entries.len() * 5);
    let groups_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut groups = 0u32;
    let mut varint = [0u8; 10];
    for group in entries.chunk_by(|a, b| (a.keyspace, a.file) == (b.keyspace, b.file)) {
        // More than u32::MAX entries of one file cannot be cached (each weighs over 100
        // bytes); a group that large is cut rather than miscounted.
        let group = &group[..group.len().min(u32::MAX as usize)];
        groups += 1;
        out.extend_from_slice(&group[0].keyspace.to_le_bytes());
        out.extend_from_slice(&group[0].file.to_le_bytes());
        out.extend_from_slice(&(group.len() as u32).to_le_bytes());
        let mut prev = 0u64;
        for e in group {
            let n = put_varint(&mut varint, e.tag - prev);
            out.extend_from_slice(&varint[..n]);
            let n = put_varint(&mut varint, u64::from(e.len));
            out.extend_from_slice(&varint[..n]);
            prev = e.tag;
        }
        if groups == u32::MAX {
            break;
        }
    }
    out[groups_at..groups_at + 4].copy_from_slice(&groups.to_le_bytes());
    FRAME.seal(out)
}

/// Decodes a hint file, checking its magic, version and checksum first, then every group
/// and entry against the bytes left.
pub(crate) fn decode(buf: &[u8]) -> Result<Vec<HintedEntry>, SideFileError> {
    let mut d = Decoder::new(FRAME.open(buf, 4)?);
    let groups = d.u32().ok_or(SideFileError::Truncated)?;
    let mut entries = Vec::new();
    let mut last_group: Option<(u32, u64)> = None;
    for _ in 0..groups {
        let keyspace = d.u32().ok_or(SideFileError::Truncated)?;
        let file = d.u64().ok_or(SideFileError::Truncated)?;
        let count = d.u32().ok_or(SideFileError::Truncated)?;
        if last_group.is_some_and(|g| g >= (keyspace, file)) {
            return Err(SideFileError::Invalid("file groups out of order"));
        }
        last_group = Some((keyspace, file));
        // Each entry takes at least two bytes: a count past that is damage, refused before
        // anything is reserved for it.
        if (count as usize).saturating_mul(2) > d.remaining() {
            return Err(SideFileError::Truncated);
        }
        entries.reserve(count as usize);
        let mut tag = 0u64;
        for i in 0..count {
            let delta = d.varint().ok_or(SideFileError::Truncated)?;
            if i > 0 && delta == 0 {
                return Err(SideFileError::Invalid("an entry named twice"));
            }
            tag = tag
                .checked_add(delta)
                .ok_or(SideFileError::Invalid("offset overflows"))?;
            let len = d.varint().ok_or(SideFileError::Truncated)?;
            if len == 0 || len > u64::from(MAX_ENTRY_LEN) {
                return Err(SideFileError::Invalid("entry length out of range"));
            }
            entries.push(HintedEntry {
                keyspace,
                file,
                tag,
                len: len as u32,
            });
        }
    }
    if d.remaining() != 0 {
        return Err(SideFileError::Invalid("bytes after the last group"));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::crc32c;
    use crate::format::varint_len;
    use proptest::prelude::*;

    /// Bytes [`encode`] writes for one entry of a group.
    fn entry_bytes(delta: u64, len: u32) -> usize {
        varint_len(delta) + varint_len(u64::from(len))
    }

    fn e(keyspace: u32, file: u64, tag: u64, len: u32) -> HintedEntry {
        HintedEntry {
            keyspace,
            file,
            tag,
            len,
        }
    }

    #[test]
    fn entries_come_back_sorted_and_without_repeats() {
        let input = vec![
            e(1, 5, 8192, 4096),
            e(0, 9, 0, 4096),
            e(0, 9, 4096, 4096),
            e(0, 3, (1 << 63) | 4096, 4096),
            e(0, 9, 0, 4096),
            e(0, 3, 700, 1030),
        ];
        let out = decode(&encode(input)).expect("decodes");
        assert_eq!(
            out,
            vec![
                e(0, 3, 700, 1030),
                e(0, 3, (1 << 63) | 4096, 4096),
                e(0, 9, 0, 4096),
                e(0, 9, 4096, 4096),
                e(1, 5, 8192, 4096),
            ]
        );
    }

    #[test]
    fn an_empty_cache_encodes_to_a_file_of_no_groups() {
        let buf = encode(Vec::new());
        assert_eq!(buf.len(), 8 + 4 + 4 + 4);
        assert_eq!(decode(&buf), Ok(Vec::new()));
    }

    #[test]
    fn entries_of_one_file_take_a_few_bytes_each() {
        let entries: Vec<_> = (1..=1000).map(|i| e(0, 7, i * 4096, 4096)).collect();
        let buf = encode(entries);
        // Header, one group header, checksum, and per entry a 2-byte delta and length.
        assert_eq!(buf.len(), 16 + 16 + 4 + 1000 * entry_bytes(4096, 4096));
    }

    #[test]
    fn damage_anywhere_is_refused_never_misread() {
        let buf = encode(
            (0..50)
                .map(|i| e(i % 3, u64::from(i), 4096, 4096))
                .collect(),
        );
        for at in 0..buf.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = buf.clone();
                bad[at] ^= bit;
                assert!(
                    decode(&bad).is_err(),
                    "flip of bit {bit:#x} at {at} accepted"
                );
            }
        }
        for cut in 0..buf.len() {
            assert!(decode(&buf[..cut]).is_err(), "cut at {cut} accepted");
        }
    }

    /// Re-checksums `body` (without its CRC) so that the field checks, not the CRC, decide.
    fn sealed(mut body: Vec<u8>) -> Vec<u8> {
        let crc = crc32c(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    }

    fn header(version: u32, groups: u32) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&groups.to_le_bytes());
        b
    }

    fn group(b: &mut Vec<u8>, keyspace: u32, file: u64, count: u32, rest: &[u8]) {
        b.extend_from_slice(&keyspace.to_le_bytes());
        b.extend_from_slice(&file.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(rest);
    }

    #[test]
    fn impossible_fields_under_a_good_checksum_are_refused_by_name() {
        assert_eq!(
            decode(&sealed(header(2, 0))),
            Err(SideFileError::Version(2))
        );
        let mut b = header(VERSION, 1);
        group(&mut b, 0, 1, u32::MAX, &[1, 1]);
        assert_eq!(decode(&sealed(b)), Err(SideFileError::Truncated));
        let mut b = header(VERSION, 1);
        group(&mut b, 0, 1, 1, &[1, 0]);
        assert_eq!(
            decode(&sealed(b)),
            Err(SideFileError::Invalid("entry length out of range"))
        );
        let mut b = header(VERSION, 1);
        group(&mut b, 0, 1, 2, &[1, 1, 0, 1]);
        assert_eq!(
            decode(&sealed(b)),
            Err(SideFileError::Invalid("an entry named twice"))
        );
        let mut b = header(VERSION, 2);
        group(&mut b, 0, 5, 1, &[1, 1]);
        group(&mut b, 0, 5, 1, &[9, 1]);
        assert_eq!(
            decode(&sealed(b)),
            Err(SideFileError::Invalid("file groups out of order"))
        );
        let mut b = header(VERSION, 0);
        b.push(7);
        assert_eq!(
            decode(&sealed(b)),
            Err(SideFileError::Invalid("bytes after the last group"))
        );
        let mut b = header(VERSION, 1);
        let mut huge = vec![0xff; 9];
        huge.push(0x01);
        huge.push(1);
        let mut rest = vec![1, 1];
        rest.extend_from_slice(&huge);
        group(&mut b, 0, 1, 2, &rest);
        assert_eq!(
            decode(&sealed(b)),
            Err(SideFileError::Invalid("offset overflows"))
        );
        assert_eq!(decode(b"HKVHINT"), Err(SideFileError::Truncated));
        assert_eq!(
            decode(&sealed(b"NOTHINTS\x01\0\0\0\0\0\0\0".to_vec())),
            Err(SideFileError::BadMagic("cache hint"))
        );
    }

    proptest! {
        #[test]
        fn any_entries_round_trip(raw in proptest::collection::vec(
            (0u32..3, 0u64..20, any::<u64>(), 1u32..=MAX_ENTRY_LEN), 0..200)) {
            let entries: Vec<_> = raw.iter().map(|&(k, f, t, l)| e(k, f, t, l)).collect();
            let mut want = entries.clone();
            want.sort_unstable();
            want.dedup_by_key(|e| (e.keyspace, e.file, e.tag));
            prop_assert_eq!(decode(&encode(entries)), Ok(want));
        }

        #[test]
        fn any_bytes_decode_or_are_refused_without_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
            let mut b = header(VERSION, 3);
            b.extend_from_slice(&bytes);
            let _ = decode(&sealed(b));
        }
    }
}
