//! The level format: each on-disk level is one sorted run stored as a B+-tree built
//! bottom-up (Parallax §3.2, Kreon), in one file.
//!
//! Owns: the byte layout of leaves, index nodes, overflow blobs and the footer, writing a
//! level file from sorted entries ([`builder::LevelBuilder`]) and reading it back
//! ([`reader::LevelFile`]: point lookups, cursors, compaction scans), and the file's Bloom
//! filter ([`filter`]). Never: decides which
//! entries to keep or which files are live (the merge, the compaction worker and the
//! version set do; a file marked obsolete deletes itself when its last reader drops it).

pub(crate) mod builder;
pub(crate) mod filter;
pub(crate) mod footer;
pub(crate) mod node;
pub(crate) mod reader;

pub(crate) use builder::{EntryValue, LevelBuilder, LevelMeta};
pub(crate) use reader::{LevelCursor, LevelEntry, LevelFile, LevelValue};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::NodeCache;
    use crate::io::{Io, IoComponent, RealFs};
    use std::ops::Bound;
    use std::sync::Arc;

    type Entry = (Vec<u8>, u64, Option<Vec<u8>>);

    fn build(dir: &std::path::Path, id: u64, entries: &[Entry]) -> Arc<LevelFile> {
        build_with_bloom(dir, id, entries, 0)
    }

    fn build_with_bloom(
        dir: &std::path::Path,
        id: u64,
        entries: &[Entry],
        bits: u32,
    ) -> Arc<LevelFile> {
        let io = Io::new(Arc::new(RealFs), false);
        let f = io
            .create(&dir.join(reader::file_name(id)), IoComponent::Flush)
            .unwrap();
        let mut b = LevelBuilder::new(f, 8192, 12288).with_bloom(bits, entries.len() as u64);
        for (k, lsn, v) in entries {
            let ev = v
                .as_deref()
                .map_or(EntryValue::Tombstone, EntryValue::Bytes);
            b.add(k, *lsn, ev).unwrap();
        }
        let meta = b.finish().unwrap();
        assert_eq!(meta.entries, entries.len() as u64);
        Arc::new(LevelFile::open(&io, dir, id, Arc::new(NodeCache::new(1 << 20))).unwrap())
    }

    fn opt(v: LevelValue) -> Option<Vec<u8>> {
        match v {
            LevelValue::Inline(b) => Some(b),
            LevelValue::Tombstone => None,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn bytes(lf: &LevelFile, v: LevelValue) -> Option<Vec<u8>> {
        opt(lf.load_overflow(v).unwrap())
    }

    fn key(i: u32) -> Vec<u8> {
        format!("user{:08}", i.wrapping_mul(2654435761) % 1_000_000_007).into_bytes()
    }

    fn sample(n: u32) -> Vec<Entry> {
        let mut v: Vec<_> = (0..n)
            .map(|i| {
                let val = match i % 50 {
                    0 => Some(vec![(i % 251) as u8; 40_000]), // overflow blob
                    7 => None,                                // tombstone
                    _ => Some(vec![(i % 251) as u8; (i % 300) as usize]),
                };
                (key(i), u64::from(i) + 1, val)
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|a, b| a.0 == b.0);
        v
    }

    #[test]
    fn get_finds_every_entry_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(20_000);
        let lf = build(dir.path(), 1, &entries);
        for (k, lsn, v) in &entries {
            let (got_lsn, got) = lf.get(k).unwrap().unwrap();
            assert_eq!(got_lsn, *lsn);
            assert_eq!(bytes(&lf, got), *v);
        }
        assert!(lf.get(b"absent").unwrap().is_none());
        assert!(lf.get(b"zzzzzzzzzzzzzzzz").unwrap().is_none());
        assert!(lf.get(b"").unwrap().is_none());
    }

    #[test]
    fn a_bloom_filter_skips_absent_keys_without_reading_a_node() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(20_000);
        let lf = build_with_bloom(dir.path(), 5, &entries, 10);
        assert!(
            lf.filter_bytes() >= 20_000 * 10 / 8,
            "{}",
            lf.filter_bytes()
        );
        // Every key is still found, tombstones included.
        for (k, lsn, v) in &entries {
            let (got_lsn, got) = lf.get(k).unwrap().unwrap();
            assert_eq!((got_lsn, bytes(&lf, got)), (*lsn, v.clone()));
        }
        // The scanner stops before the filter unit.
        let mut s = lf.scanner(IoComponent::Compaction).unwrap();
        let mut n = 0;
        while s.next_entry().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, entries.len());
        // Absent keys: with no node cache, every lookup that passes the filter reads the
        // root at least; about 1% pass, and without a filter all would.
        let io = Io::new(Arc::new(RealFs), false);
        let reads = |lf: &LevelFile| {
            let before = io.stats().snapshot().read_by(IoComponent::LevelRead);
            for i in 0..2_000u32 {
                assert!(lf.get(format!("absent{i}").as_bytes()).unwrap().is_none());
            }
            io.stats().snapshot().read_by(IoComponent::LevelRead) - before
        };
        let filtered = LevelFile::open(&io, dir.path(), 5, Arc::new(NodeCache::new(0))).unwrap();
        let plain_lf = build(dir.path(), 6, &entries);
        drop(plain_lf);
        let plain = LevelFile::open(&io, dir.path(), 6, Arc::new(NodeCache::new(0))).unwrap();
        assert_eq!(plain.filter_bytes(), 0);
        let (with, without) = (reads(&filtered), reads(&plain));
        assert!(
            with * 20 < without,
            "bytes read for 2000 absent keys: {with} with the filter, {without} without"
        );
    }

    #[test]
    fn a_damaged_filter_fails_the_open_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(3000);
        let lf = build_with_bloom(dir.path(), 7, &entries, 10);
        let path = lf.path().to_path_buf();
        drop(lf);
        let mut data = std::fs::read(&path).unwrap();
        let n = data.len();
        let footer = footer::Footer::decode(&data[n - footer::FOOTER_SIZE..])
            .ok()
            .unwrap();
        assert!(footer.filter_offset > 0);
        data[footer.filter_offset as usize + 40] ^= 0x10; // a bit of the filter
        std::fs::write(&path, &data).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        match LevelFile::open(&io, dir.path(), 7, Arc::new(NodeCache::new(0))) {
            Err(crate::Error::Corruption { file, offset, what }) => {
                assert_eq!(file, path);
                assert_eq!(offset, footer.filter_offset);
                assert!(what.contains("filter checksum"), "{what}");
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn a_version_1_file_without_a_filter_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(2000);
        let lf = build(dir.path(), 8, &entries);
        let path = lf.path().to_path_buf();
        drop(lf);
        // Rewrite the footer as version 1 wrote it: version 1, bytes 72.. zero.
        let mut data = std::fs::read(&path).unwrap();
        let n = data.len();
        let f = &mut data[n - footer::FOOTER_SIZE..];
        f[8..12].copy_from_slice(&1u32.to_le_bytes());
        f[72..124].fill(0);
        let crc = crate::format::crc32c(&f[..124]);
        f[124..].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &data).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let lf = LevelFile::open(&io, dir.path(), 8, Arc::new(NodeCache::new(0))).unwrap();
        assert_eq!(lf.filter_bytes(), 0);
        for (k, lsn, _) in &entries {
            assert_eq!(lf.get(k).unwrap().unwrap().0, *lsn);
        }
    }

    #[test]
    fn cursor_and_scanner_walk_everything_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(20_000);
        let lf = build(dir.path(), 2, &entries);
        let mut c = lf.cursor();
        c.seek(Bound::Unbounded).unwrap();
        let mut n = 0;
        while let Some((k, lsn, v)) = c.next_entry().unwrap() {
            assert_eq!(k, entries[n].0);
            assert_eq!(lsn, entries[n].1);
            assert_eq!(bytes(&lf, v), entries[n].2);
            n += 1;
        }
        assert_eq!(n, entries.len());
        let mut s = lf.scanner(IoComponent::Compaction).unwrap();
        let mut m = 0;
        while let Some((k, _, v)) = s.next_entry().unwrap() {
            assert_eq!(k, entries[m].0);
            assert_eq!(opt(s.load_overflow(v).unwrap()), entries[m].2);
            m += 1;
        }
        assert_eq!(m, entries.len());
        // Seeks land on the first key at or after the target.
        for probe in [0usize, 1, 777, entries.len() - 1] {
            let target = &entries[probe].0;
            c.seek(Bound::Included(target)).unwrap();
            assert_eq!(&c.next_entry().unwrap().unwrap().0, target);
            c.seek(Bound::Excluded(target)).unwrap();
            assert_eq!(
                c.next_entry().unwrap().map(|e| e.0),
                entries.get(probe + 1).map(|e| e.0.clone())
            );
        }
    }

    #[test]
    fn max_size_keys_and_huge_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut entries: Vec<_> = (0..40u8)
            .map(|i| {
                let mut k = vec![i; crate::options::MAX_KEY_SIZE];
                k[0] = i;
                (
                    k,
                    u64::from(i) + 1,
                    Some(vec![i; if i % 9 == 0 { 3 << 20 } else { 10 }]),
                )
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let lf = build(dir.path(), 3, &entries);
        for (k, _, v) in &entries {
            let (_, got) = lf.get(k).unwrap().unwrap();
            assert_eq!(bytes(&lf, got), *v);
        }
    }

    #[test]
    fn corrupted_node_is_reported_with_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        // No overflow blobs: the file is leaves and index nodes only, so byte 16484 lies in
        // the third node, a leaf (index nodes come after hundreds of leaves).
        let entries: Vec<_> = sample(3000)
            .into_iter()
            .filter(|e| e.2.as_ref().is_none_or(|v| v.len() < 1000))
            .collect();
        let lf = build(dir.path(), 4, &entries);
        let path = lf.path().to_path_buf();
        drop(lf);
        let mut data = std::fs::read(&path).unwrap();
        data[8192 * 2 + 100] ^= 0xff; // inside some node
        std::fs::write(&path, &data).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let lf =
            Arc::new(LevelFile::open(&io, dir.path(), 4, Arc::new(NodeCache::new(0))).unwrap());
        let mut errors = 0;
        for (k, _, _) in &entries {
            match lf
                .get(k)
                .and_then(|o| o.map(|(_, v)| lf.load_overflow(v)).transpose())
            {
                Ok(_) => {}
                Err(crate::Error::Corruption { file, .. }) => {
                    assert_eq!(file, path);
                    errors += 1;
                }
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        assert!(errors > 0, "the damaged node was never reported");
        let mut s = lf.scanner(IoComponent::Compaction).unwrap();
        let mut res = Ok(None);
        for _ in 0..=entries.len() {
            res = s.next_entry();
            if !matches!(res, Ok(Some(_))) {
                break;
            }
        }
        assert!(matches!(res, Err(crate::Error::Corruption { .. })));
    }
}
