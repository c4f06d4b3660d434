//! The level format: each on-disk level is one sorted run stored as a B+-tree built
//! bottom-up (Parallax §3.2, Kreon), in one file.
//!
//! Owns: the byte layout of leaves, index nodes, overflow blobs and the footer, writing a
//! level file from sorted entries ([`builder::LevelBuilder`]) and reading it back
//! ([`reader::LevelFile`]: point lookups, cursors, compaction scans), the file's Bloom
//! filter ([`filter`]) and its large pointer table ([`large_pointers`]). Never: decides which
//! entries to keep or which files are live (the merge, the compaction worker and the
//! version set do; a file marked obsolete deletes itself when its last reader drops it).

pub(crate) mod builder;
pub(crate) mod filter;
pub(crate) mod footer;
pub(crate) mod large_pointers;
pub(crate) mod node;
pub(crate) mod pinned;
pub(crate) mod reader;

pub(crate) use builder::{EntryValue, LevelBuilder, LevelMeta};
pub(crate) use reader::{LevelCursor, LevelEntry, LevelFile, LevelValue, Probe};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::BlockCache;
    use crate::error::Error;
    use crate::io::{Io, IoComponent, RealFs};
    use crate::log::ptr::LogPtr;
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
        build_sized(dir, id, entries, bits, 8192)
    }

    fn build_sized(
        dir: &std::path::Path,
        id: u64,
        entries: &[Entry],
        bits: u32,
        leaf_size: usize,
    ) -> Arc<LevelFile> {
        let io = Io::new(Arc::new(RealFs), false);
        let f = io
            .create(&dir.join(reader::file_name(id)), IoComponent::Flush)
            .unwrap();
        let mut b = LevelBuilder::new(f, leaf_size, 12288).with_bloom(bits, entries.len() as u64);
        for (k, lsn, v) in entries {
            let ev = v
                .as_deref()
                .map_or(EntryValue::Tombstone, EntryValue::Bytes);
            b.add(k, *lsn, ev).unwrap();
        }
        let meta = b.finish().unwrap();
        assert_eq!(meta.entries, entries.len() as u64);
        Arc::new(LevelFile::open(&io, dir, id, Arc::new(BlockCache::new(1 << 20))).unwrap())
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

    /// A cursor from the start and a scanner each yield exactly `entries`, in order.
    fn walk_in_order(lf: &Arc<LevelFile>, entries: &[Entry]) {
        let mut c = lf.cursor();
        c.seek(Bound::Unbounded).unwrap();
        let mut n = 0;
        while let Some((k, lsn, v)) = c.next_entry().unwrap() {
            assert_eq!((&k, lsn), (&entries[n].0, entries[n].1));
            assert_eq!(bytes(lf, v), entries[n].2);
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
    fn a_deleted_file_takes_its_cached_leaves_out_of_the_cache_and_a_closed_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        // Indexes pinned (the default): the leaves' offsets are in memory.
        let cache = Arc::new(BlockCache::with_pinning(64 << 20, 16 << 20));
        let entries: Vec<Entry> = (0..5000u32)
            .map(|i| (format!("key{i:06}").into_bytes(), 1, Some(vec![7u8; 100])))
            .collect();
        let open = |id: u64| {
            let f = io
                .create(&dir.path().join(reader::file_name(id)), IoComponent::Flush)
                .unwrap();
            let mut b = LevelBuilder::new(f, 8192, 12288);
            for (k, lsn, v) in &entries {
                b.add(k, *lsn, EntryValue::Bytes(v.as_deref().unwrap()))
                    .unwrap();
            }
            b.finish().unwrap();
            LevelFile::open(&io, dir.path(), id, Arc::clone(&cache)).unwrap()
        };
        let (kept, deleted) = (open(1), open(2));
        for (k, _, _) in &entries {
            assert!(kept.get(k).unwrap().is_some());
            assert!(deleted.get(k).unwrap().is_some());
        }
        let both = cache.used_bytes();
        assert!(both > 2 * 5000 * 100, "{both} bytes cached");
        drop(kept); // closed, not deleted: its leaves may serve a reopen's reads
        assert_eq!(cache.used_bytes(), both);
        deleted.mark_obsolete();
        drop(deleted);
        assert!(!dir.path().join(reader::file_name(2)).exists());
        let left = cache.used_bytes();
        assert!(left * 2 <= both + both / 50, "{left} of {both} bytes left");
        assert!(left * 2 + both / 50 >= both, "{left} of {both} bytes left");
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
        let filtered = LevelFile::open(&io, dir.path(), 5, Arc::new(BlockCache::new(0))).unwrap();
        let plain_lf = build(dir.path(), 6, &entries);
        drop(plain_lf);
        let plain = LevelFile::open(&io, dir.path(), 6, Arc::new(BlockCache::new(0))).unwrap();
        assert_eq!(plain.filter_bytes(), 0);
        let (with, without) = (reads(&filtered), reads(&plain));
        assert!(
            with * 20 < without,
            "bytes read for 2000 absent keys: {with} with the filter, {without} without"
        );
    }

    /// A level file's bytes and its decoded footer.
    fn read_with_footer(path: &std::path::Path) -> (Vec<u8>, footer::Footer) {
        let data = std::fs::read(path).unwrap();
        let footer = footer::Footer::decode(&data[data.len() - footer::FOOTER_SIZE..])
            .ok()
            .unwrap();
        (data, footer)
    }

    #[test]
    fn a_damaged_filter_fails_the_open_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(3000);
        let lf = build_with_bloom(dir.path(), 7, &entries, 10);
        let path = lf.path().to_path_buf();
        drop(lf);
        let (mut data, footer) = read_with_footer(&path);
        assert!(footer.filter_offset > 0);
        data[footer.filter_offset as usize + 40] ^= 0x10; // a bit of the filter
        std::fs::write(&path, &data).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        match LevelFile::open(&io, dir.path(), 7, Arc::new(BlockCache::new(0))) {
            Err(crate::Error::Corruption { file, offset, what }) => {
                assert_eq!(file, path);
                assert_eq!(offset, footer.filter_offset);
                assert!(what.contains("filter checksum"), "{what}");
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn a_filter_of_a_newer_version_is_unsupported_not_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let lf = build_with_bloom(dir.path(), 9, &sample(500), 10);
        let path = lf.path().to_path_buf();
        drop(lf);
        let (mut data, footer) = read_with_footer(&path);
        let at = footer.filter_offset as usize;
        let end = at + footer.filter_len as usize;
        // Version 3, with a checksum that matches it (a newer build's unit).
        data[at + 1] = 3;
        let crc = crate::format::crc32c_append(
            crate::format::crc32c(&data[at..at + 8]),
            &data[at + filter::FILTER_HEADER..end],
        );
        data[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &data).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        match LevelFile::open(&io, dir.path(), 9, Arc::new(BlockCache::new(0))) {
            Err(crate::Error::UnsupportedVersion {
                file,
                found,
                supported,
            }) => {
                assert_eq!((file, found, supported), (path, 3, 2));
            }
            other => panic!("expected an unsupported version, got {other:?}"),
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
        let lf = LevelFile::open(&io, dir.path(), 8, Arc::new(BlockCache::new(0))).unwrap();
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
        walk_in_order(&lf, &entries);
        let mut c = lf.cursor();
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
    fn four_kib_leaves_hold_every_entry_kind_and_answer_gets_and_scans() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(20_000);
        let small = build_sized(dir.path(), 5, &entries, 0, 4096);
        let large = build_sized(dir.path(), 6, &entries, 0, 8192);
        // Half the leaf: about twice the leaves for the same entries.
        assert!(
            small.node_bytes() > large.node_bytes() && small.file_len() > large.file_len() / 2,
            "{} vs {} node bytes",
            small.node_bytes(),
            large.node_bytes()
        );
        for (k, _, v) in &entries {
            let (_, got) = small.get(k).unwrap().unwrap();
            assert_eq!(bytes(&small, got), *v);
        }
        for i in 20_000..21_000u32 {
            let k = key(i);
            if entries
                .binary_search_by(|e| e.0.as_slice().cmp(&k))
                .is_err()
            {
                assert!(small.get(&k).unwrap().is_none());
            }
        }
        walk_in_order(&small, &entries);
    }

    #[test]
    fn a_four_kib_leaf_keeps_a_medium_value_inline_and_holds_the_longest_key_of_any_kind() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let f = io
            .create(&dir.path().join(reader::file_name(7)), IoComponent::Flush)
            .unwrap();
        let mut b = LevelBuilder::new(f, 4096, 12288);
        // A 1 KiB value (the default large_threshold) with a YCSB-sized key stays inline.
        b.add(
            b"a-short-key-of-24-bytes!",
            9,
            EntryValue::Bytes(&[5u8; 1024]),
        )
        .unwrap();
        // The longest key, with the largest log pointer (the longest varints), the
        // largest LSN, an overflow value, a tombstone and a value that just overflows.
        let long = |c: u8| {
            let mut k = vec![c; crate::options::MAX_KEY_SIZE];
            k[0] = b'b';
            k
        };
        let worst = LogPtr {
            segment: u64::MAX,
            offset: u64::MAX,
            len: u32::MAX,
        };
        b.add(&long(1), u64::MAX, EntryValue::Medium(worst))
            .unwrap();
        b.add(&long(2), u64::MAX, EntryValue::Large(worst)).unwrap();
        b.add(&long(3), u64::MAX, EntryValue::Tombstone).unwrap();
        b.add(&long(4), u64::MAX, EntryValue::Bytes(&[6u8; 2000]))
            .unwrap();
        b.add(&long(5), u64::MAX, EntryValue::Deltas(&[7u8; 20]))
            .unwrap();
        b.finish().unwrap();
        let lf = LevelFile::open(&io, dir.path(), 7, Arc::new(BlockCache::new(1 << 20))).unwrap();
        assert_eq!(
            lf.get(b"a-short-key-of-24-bytes!").unwrap().unwrap().1,
            LevelValue::Inline(vec![5u8; 1024])
        );
        assert_eq!(
            lf.get(&long(1)).unwrap().unwrap().1,
            LevelValue::Medium(worst)
        );
        assert_eq!(
            lf.get(&long(2)).unwrap().unwrap().1,
            LevelValue::Large(worst)
        );
        assert_eq!(lf.get(&long(3)).unwrap().unwrap().1, LevelValue::Tombstone);
        let (lsn, v) = lf.get(&long(4)).unwrap().unwrap();
        assert_eq!(lsn, u64::MAX);
        assert!(matches!(v, LevelValue::Overflow { len: 2000, .. }), "{v:?}");
        assert_eq!(bytes(&lf, v), Some(vec![6u8; 2000]));
        assert!(lf.get(&long(5)).unwrap().unwrap().1.is_deltas());
    }

    #[test]
    fn a_key_too_long_for_the_leaf_size_is_an_error_naming_it_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        // Keys of 4096 bytes were accepted before MAX_KEY_SIZE was lowered.
        let old = vec![b'k'; 4096];
        for (leaf, fits) in [(4096, false), (8192, true)] {
            let f = io
                .create(
                    &dir.path().join(reader::file_name(leaf as u64)),
                    IoComponent::Flush,
                )
                .unwrap();
            let mut b = LevelBuilder::new(f, leaf, 12288);
            b.add(b"a", 1, EntryValue::Bytes(b"v")).unwrap();
            let got = b.add(
                &old,
                2,
                EntryValue::Large(LogPtr {
                    segment: 1 << 40,
                    offset: 1 << 40,
                    len: 1 << 20,
                }),
            );
            match got {
                Ok(()) => assert!(fits, "a 4096-byte key went into a {leaf}-byte leaf"),
                Err(Error::InvalidArgument(m)) => {
                    assert!(!fits, "{m}");
                    assert!(
                        m.contains("4096 bytes") && m.contains("leaf_size 8192"),
                        "{m}"
                    );
                }
                Err(e) => panic!("{e}"),
            }
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
            Arc::new(LevelFile::open(&io, dir.path(), 4, Arc::new(BlockCache::new(0))).unwrap());
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

    /// Small pairs, sorted: no overflow blob between the leaves.
    fn small_pairs(n: u32) -> Vec<Entry> {
        let mut v: Vec<Entry> = (0..n)
            .map(|i| (key(i), u64::from(i) + 1, Some(vec![(i % 251) as u8; 50])))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|a, b| a.0 == b.0);
        v
    }

    /// The offset and keys of every leaf of the level file at `path`, read from its bytes.
    fn leaves_of(path: &std::path::Path) -> Vec<(u64, Vec<u8>, Vec<Vec<u8>>)> {
        let data = std::fs::read(path).unwrap();
        let mut out = Vec::new();
        let mut pos = 0usize;
        // The last aligned block is the footer.
        while pos + crate::io::IO_ALIGN < data.len() {
            match data[pos] {
                node::NODE_LEAF => {
                    let bytes = data[pos..pos + 8192].to_vec();
                    let view = node::NodeView::new(&bytes, node::NODE_LEAF).unwrap();
                    let keys = (0..view.count())
                        .map(|i| view.leaf_entry(i).unwrap().key.to_vec())
                        .collect();
                    out.push((pos as u64, bytes, keys));
                    pos += 8192;
                }
                node::NODE_INDEX => pos += 12288,
                k => panic!("unexpected node kind {k} at {pos}"),
            }
        }
        out
    }

    #[test]
    fn a_builder_caches_the_leaves_it_writes_as_a_read_would_or_the_marked_ones() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let entries = small_pairs(5_000);
        let cache = Arc::new(BlockCache::new(16 << 20));
        // File 3 may cache three leaves and a bit.
        for (id, all, limit) in [
            (1u64, true, u64::MAX),
            (2, false, u64::MAX),
            (3, true, 3 * (8192 + crate::cache::ENTRY_OVERHEAD) + 100),
        ] {
            let path = dir.path().join(reader::file_name(id));
            let f = io.create(&path, IoComponent::Flush).unwrap();
            let mut b = LevelBuilder::new(f, 8192, 12288).with_cache_fill(
                Arc::clone(&cache),
                id,
                all,
                limit,
            );
            let mut hot = Vec::new();
            for (n, (k, lsn, v)) in entries.iter().enumerate() {
                b.add(k, *lsn, EntryValue::Bytes(v.as_deref().unwrap()))
                    .unwrap();
                if n % 1_000 == 999 {
                    b.mark_leaf_hot();
                    hot.push(k.clone());
                }
            }
            b.finish().unwrap();
            let leaves = leaves_of(&path);
            assert!(leaves.len() > 20, "{} leaves", leaves.len());
            let mut cached = 0;
            for (j, (offset, bytes, keys)) in leaves.iter().enumerate() {
                let wanted = (all || keys.iter().any(|k| hot.contains(k))) && (id != 3 || j < 3);
                match cache.get(id, *offset) {
                    Some(c) => {
                        assert!(
                            wanted,
                            "file {id}: leaf at {offset} cached, holds no hot key"
                        );
                        assert_eq!(&c[..], &bytes[..], "file {id}: leaf at {offset}");
                        cached += 1;
                    }
                    None => assert!(!wanted, "file {id}: leaf at {offset} not cached"),
                }
            }
            let expected = match id {
                1 => leaves.len(),
                2 => hot.len(),
                _ => 3,
            };
            assert_eq!(cached, expected, "file {id}");
            // The cached leaves answer gets: no node is read for any key.
            let lf = LevelFile::open(&io, dir.path(), id, Arc::clone(&cache)).unwrap();
            if id == 1 {
                let before = io.stats().snapshot().read_by(IoComponent::LevelRead);
                for (k, lsn, _) in entries.iter().step_by(7) {
                    assert_eq!(lf.get(k).unwrap().map(|(l, _)| l), Some(*lsn));
                }
                let root_and_index = io.stats().snapshot().read_by(IoComponent::LevelRead) - before;
                assert!(root_and_index <= 12288 * 8, "{root_and_index} bytes read");
            }
        }
    }

    #[test]
    fn a_scanner_reports_the_entries_of_cached_leaves_one_entry_behind() {
        let dir = tempfile::tempdir().unwrap();
        let entries = small_pairs(5_000);
        let lf = build(dir.path(), 3, &entries);
        let leaves = leaves_of(&dir.path().join(reader::file_name(3)));
        assert!(leaves.len() > 10);
        // Reading one key of leaves 2 and 7 caches them.
        for j in [2, 7] {
            lf.get(&leaves[j].2[0]).unwrap().unwrap();
        }
        let in_cached: Vec<&Vec<u8>> = [2, 7].iter().flat_map(|&j| &leaves[j].2).collect();
        for noting in [true, false] {
            let s = lf.scanner(IoComponent::Compaction).unwrap();
            let mut s = if noting { s.noting_cached_leaves() } else { s };
            // As a merge reads it: the entry written is the one before the last yielded.
            let mut previous: Option<Vec<u8>> = None;
            let mut reported = Vec::new();
            while let Some((k, _, _)) = s.next_entry().unwrap() {
                if let Some(p) = previous.take() {
                    if s.entry_was_cached() {
                        reported.push(p);
                    }
                }
                previous = Some(k);
            }
            if !noting {
                assert!(reported.is_empty());
                continue;
            }
            for k in &in_cached {
                // The last key of the file is never the entry before another.
                assert!(
                    reported.contains(k),
                    "{:?} not reported",
                    String::from_utf8_lossy(k)
                );
            }
            // Beyond them, at most the key before each cached leaf.
            let extra = reported.iter().filter(|k| !in_cached.contains(k)).count();
            assert!(
                extra <= 2,
                "{extra} entries reported outside the cached leaves"
            );
        }
    }

    fn open_pinned(dir: &std::path::Path, id: u64, io: &Io, cache: usize) -> Arc<LevelFile> {
        open_pinned_cached(dir, id, io, cache).0
    }

    #[test]
    fn a_pinned_file_answers_gets_and_seeks_like_an_unpinned_one() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(150_000);
        let plain = build(dir.path(), 9, &entries);
        assert_eq!(plain.pinned_bytes(), 0);
        let io = Io::new(Arc::new(RealFs), false);
        let pinned = open_pinned(dir.path(), 9, &io, 1 << 20);
        let leaves = pinned.footer().leaves;
        // Several index nodes under the root, so the fence walk crosses node boundaries.
        assert!(
            pinned.footer().height >= 3,
            "{leaves} leaves, height {}",
            pinned.footer().height
        );
        assert!(
            pinned.pinned_bytes() >= leaves * 12,
            "{}",
            pinned.pinned_bytes()
        );
        for (k, lsn, v) in &entries {
            let (got_lsn, got) = pinned.get(k).unwrap().unwrap();
            assert_eq!((got_lsn, bytes(&pinned, got)), (*lsn, v.clone()));
        }
        // Absent keys, below, between and above the file's keys.
        for probe in [&b""[..], b"a", b"user", b"user00000000x", b"user5", b"zzz"] {
            assert_eq!(
                pinned.get(probe).unwrap().map(|e| e.0),
                plain.get(probe).unwrap().map(|e| e.0),
                "{probe:?}"
            );
        }
        // Seeks to every 97th key, to keys just before them, and unbounded, then a few
        // steps: the same entries in the same order.
        let mut targets: Vec<Vec<u8>> = entries.iter().step_by(97).map(|e| e.0.clone()).collect();
        targets.extend(entries.iter().step_by(389).map(|e| {
            let mut k = e.0.clone();
            k.pop();
            k
        }));
        targets.push(b"zzz".to_vec());
        let walk = |lf: &Arc<LevelFile>, from: Bound<&[u8]>| {
            let mut c = lf.cursor();
            c.seek(from).unwrap();
            (0..70)
                .map_while(|_| c.next_entry().unwrap().map(|e| (e.0, e.1)))
                .collect::<Vec<_>>()
        };
        for t in &targets {
            for from in [Bound::Included(&t[..]), Bound::Excluded(&t[..])] {
                assert_eq!(walk(&pinned, from), walk(&plain, from), "{from:?}");
            }
        }
        let mut all = pinned.cursor();
        all.seek(Bound::Unbounded).unwrap();
        let mut n = 0;
        while let Some((k, _, _)) = all.next_entry().unwrap() {
            assert_eq!(k, entries[n].0);
            n += 1;
        }
        assert_eq!(n, entries.len());
    }

    /// Walks `lf` backward from `to`: up to `max` (key, LSN) pairs.
    fn walk_back(lf: &Arc<LevelFile>, to: Bound<&[u8]>, max: usize) -> Vec<(Vec<u8>, u64)> {
        let mut c = lf.cursor();
        c.seek_back(to).unwrap();
        (0..max)
            .map_while(|_| c.next_entry().unwrap().map(|e| (e.0, e.1)))
            .collect()
    }

    /// What a backward walk from `to` must give: the entries at or before it, last first.
    fn expected_back(entries: &[Entry], to: Bound<&[u8]>, max: usize) -> Vec<(Vec<u8>, u64)> {
        entries
            .iter()
            .rev()
            .filter(|e| match to {
                Bound::Included(k) => e.0.as_slice() <= k,
                Bound::Excluded(k) => e.0.as_slice() < k,
                Bound::Unbounded => true,
            })
            .take(max)
            .map(|e| (e.0.clone(), e.1))
            .collect()
    }

    #[test]
    fn a_cursor_walks_backward_from_any_key_pinned_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(150_000);
        let plain = build(dir.path(), 12, &entries);
        let io = Io::new(Arc::new(RealFs), false);
        let pinned = open_pinned(dir.path(), 12, &io, 1 << 20);
        assert!(
            plain.footer().height >= 3,
            "height {}",
            plain.footer().height
        );
        // The whole file, last entry first, both ways.
        for lf in [&plain, &pinned] {
            let all = walk_back(lf, Bound::Unbounded, usize::MAX);
            assert_eq!(all, expected_back(&entries, Bound::Unbounded, usize::MAX));
        }
        // From every 89th key, from keys just past and just before them, and from keys
        // outside the file's range: across leaf and index-node boundaries.
        let mut targets: Vec<Vec<u8>> = entries.iter().step_by(89).map(|e| e.0.clone()).collect();
        targets.extend(entries.iter().step_by(401).flat_map(|e| {
            let mut shorter = e.0.clone();
            shorter.pop();
            let mut longer = e.0.clone();
            longer.push(0);
            [shorter, longer]
        }));
        targets.extend([b"".to_vec(), b"a".to_vec(), b"zzz".to_vec()]);
        for t in &targets {
            for to in [Bound::Included(&t[..]), Bound::Excluded(&t[..])] {
                let want = expected_back(&entries, to, 300);
                assert_eq!(walk_back(&plain, to, 300), want, "unpinned, {to:?}");
                assert_eq!(walk_back(&pinned, to, 300), want, "pinned, {to:?}");
            }
        }
        // A cursor turned around: forward after a backward walk and back again.
        let mut c = plain.cursor();
        c.seek_back(Bound::Included(&entries[500].0)).unwrap();
        assert_eq!(
            c.next_entry().unwrap().map(|e| e.0),
            Some(entries[500].0.clone())
        );
        c.seek(Bound::Included(&entries[500].0)).unwrap();
        c.next_entry().unwrap();
        assert_eq!(
            c.next_entry().unwrap().map(|e| e.0),
            Some(entries[501].0.clone())
        );
    }

    #[test]
    fn a_damaged_leaf_met_walking_backward_is_reported_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        // No overflow blobs: the file starts with its first leaf.
        let entries: Vec<_> = sample(20_000)
            .into_iter()
            .filter(|e| e.2.as_ref().is_none_or(|v| v.len() < 1000))
            .collect();
        let lf = build(dir.path(), 13, &entries);
        let path = lf.path().to_path_buf();
        let leaves = lf.footer().leaves;
        assert!(leaves > 4, "{leaves} leaves");
        drop(lf);
        // Damage the first leaf (offset 0): a walk from the end reaches it last.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[100] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let lf =
            Arc::new(LevelFile::open(&io, dir.path(), 13, Arc::new(BlockCache::new(0))).unwrap());
        let mut c = lf.cursor();
        c.seek_back(Bound::Unbounded).unwrap();
        let mut walked = 0;
        let err = loop {
            match c.next_entry() {
                Ok(Some(_)) => walked += 1,
                Ok(None) => panic!("walked {walked} entries past a damaged leaf"),
                Err(e) => break e,
            }
        };
        assert!(walked > 0);
        match err {
            crate::Error::Corruption { offset, .. } => assert_eq!(offset, 0),
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    /// [`open_pinned`], with the cache it reads through.
    fn open_pinned_cached(
        dir: &std::path::Path,
        id: u64,
        io: &Io,
        cache: usize,
    ) -> (Arc<LevelFile>, Arc<BlockCache>) {
        let cache = Arc::new(BlockCache::with_pinning(cache, 1 << 30));
        let lf = LevelFile::open(io, dir, id, Arc::clone(&cache)).unwrap();
        (Arc::new(lf), cache)
    }

    /// Level-file reads of `io` so far.
    fn level_reads(io: &Io) -> usize {
        io.stats().snapshot().read_ops_by(IoComponent::LevelRead) as usize
    }

    /// A forward walk from `from` over up to `max` entries: their keys.
    fn walk_forward(lf: &Arc<LevelFile>, from: Bound<&[u8]>, max: usize) -> Vec<Vec<u8>> {
        let mut c = lf.cursor();
        c.seek(from).unwrap();
        (0..max)
            .map_while(|_| c.next_entry().unwrap().map(|e| e.0))
            .collect()
    }

    #[test]
    fn a_forward_walk_reads_ahead_doubling_and_caches_only_the_leaves_it_entered() {
        let dir = tempfile::tempdir().unwrap();
        // Small pairs only: the leaves lie back to back from offset 0.
        let entries = small_pairs(60_000);
        drop(build(dir.path(), 21, &entries));
        let leaves = leaves_of(&dir.path().join(reader::file_name(21)));
        let n = leaves.len();
        assert!(n > 300, "{n} leaves");
        let per_leaf = |i: usize| leaves[i].2.len();
        let io = Io::new(Arc::new(RealFs), false);

        // No cache at all (so no group reads): the whole walk, one read for the first
        // leaf, then 2, 4, 8, 16 and 32 leaves (256 KiB of 8 KiB leaves) a read.
        let lf = open_pinned(dir.path(), 21, &io, 0);
        let before = level_reads(&io);
        let all = walk_forward(&lf, Bound::Unbounded, usize::MAX);
        let expected: Vec<Vec<u8>> = entries.iter().map(|e| e.0.clone()).collect();
        assert_eq!(all, expected);
        let reads = level_reads(&io) - before;
        // Index nodes written between leaves end a read-ahead early: at most one more
        // read each.
        let gaps = leaves
            .windows(2)
            .filter(|w| w[0].0 + 8192 != w[1].0)
            .count();
        let left = n - 1 - (2 + 4 + 8 + 16);
        let fewest = 1 + 4 + left.div_ceil(32);
        assert!(
            (fewest..=fewest + gaps).contains(&reads),
            "{reads} reads of {n} leaves with {gaps} gaps"
        );

        // A walk over three leaves from a key in the tenth, to the last entry but one of
        // the twelfth (taking the last steps onto the next leaf): the seek reads one leaf,
        // the first step two (the second is taken from the read-ahead).
        let mid = per_leaf(10) / 2;
        let from = leaves[10].2[mid].clone();
        let want = per_leaf(10) - mid + per_leaf(11) + per_leaf(12) - 1;
        let before = level_reads(&io);
        let got = walk_forward(&lf, Bound::Included(&from), want);
        assert_eq!(got.len(), want);
        assert_eq!(got.last(), leaves[12].2.iter().rev().nth(1));
        assert_eq!(level_reads(&io) - before, 2);
        drop(lf);

        // With a cache (no group reads): a walk on to the first entry of leaf 13 caches
        // leaves 10..=13 and none of those read ahead past them (14..17 are read with 13
        // and not entered); a second walk reads nothing.
        let (lf, cache) = open_pinned_cached(dir.path(), 21, &io, 64 << 20);
        let want = want + 2;
        let got = walk_forward(&lf, Bound::Included(&from), want);
        assert_eq!(got.last().map(Vec::as_slice), Some(&leaves[13].2[0][..]));
        for (i, (offset, _, _)) in leaves.iter().enumerate().take(20) {
            assert_eq!(
                cache.contains(lf.id(), *offset),
                (10..=13).contains(&i),
                "leaf {i}"
            );
        }
        let before = level_reads(&io);
        assert_eq!(walk_forward(&lf, Bound::Included(&from), want), got);
        assert_eq!(level_reads(&io) - before, 0);

        // A read-ahead stops at a leaf the cache holds: from leaf 8, the step to leaf 9
        // reads leaf 9 alone (leaf 10 is cached), and walks on through the cache: two
        // reads of one leaf each.
        let from = leaves[8].2[0].clone();
        let before = level_reads(&io);
        let bytes = io.stats().snapshot().read_by(IoComponent::LevelRead);
        let got = walk_forward(&lf, Bound::Included(&from), per_leaf(8) + per_leaf(9) + 1);
        assert_eq!(got.first(), Some(&from));
        assert_eq!(level_reads(&io) - before, 2);
        assert_eq!(
            io.stats().snapshot().read_by(IoComponent::LevelRead) - bytes,
            2 * 8192
        );
    }

    #[test]
    fn a_damaged_leaf_inside_a_read_ahead_is_reported_with_its_offset_after_the_ones_before() {
        let dir = tempfile::tempdir().unwrap();
        let entries = small_pairs(30_000);
        drop(build(dir.path(), 22, &entries));
        let path = dir.path().join(reader::file_name(22));
        let leaves = leaves_of(&path);
        // Leaf 5 lies inside the third read (leaves 3..7: 1, then 1..3, then 3..7).
        let (bad_at, _, _) = leaves[5];
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[bad_at as usize + 100] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        for cache in [0, 64 << 20] {
            let (lf, cached) = open_pinned_cached(dir.path(), 22, &io, cache);
            let reads = level_reads(&io);
            let mut c = lf.cursor();
            c.seek(Bound::Unbounded).unwrap();
            let mut keys = Vec::new();
            let err = loop {
                match c.next_entry() {
                    Ok(Some(e)) => keys.push(e.0),
                    Ok(None) => panic!("walked {} entries past a damaged leaf", keys.len()),
                    Err(e) => break e,
                }
            };
            // The entries of leaves 0..5 came back in order, but for the last of leaf 4,
            // which goes with the error (the step past it reads leaf 5), and the error
            // names leaf 5.
            let mut before: Vec<Vec<u8>> = leaves[..5].iter().flat_map(|l| l.2.clone()).collect();
            before.pop();
            assert_eq!(
                (keys.len(), keys.first(), keys.last()),
                (before.len(), before.first(), before.last()),
                "cache {cache}"
            );
            assert!(keys == before, "cache {cache}");
            // Leaf 0, leaves 1..3, leaves 3..7, then leaf 5 alone: the damaged leaf held
            // in the read-ahead is read again alone at once, not through another one.
            assert_eq!(level_reads(&io) - reads, 4, "cache {cache}");
            match err {
                crate::Error::Corruption { offset, .. } => assert_eq!(offset, bad_at),
                other => panic!("expected corruption, got {other:?}"),
            }
            // The damaged leaf was not cached; the good ones read with it were not either
            // until entered.
            assert!(!cached.contains(lf.id(), bad_at));
            assert!(!cached.contains(lf.id(), leaves[6].0));
        }
    }

    #[test]
    fn a_pinned_lookup_reads_one_leaf_and_none_below_the_first_key() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(20_000);
        let plain = build(dir.path(), 10, &entries);
        drop(plain);
        let io = Io::new(Arc::new(RealFs), false);
        let pinned = open_pinned(dir.path(), 10, &io, 0);
        let unpinned = LevelFile::open(&io, dir.path(), 10, Arc::new(BlockCache::new(0))).unwrap();
        let height = u64::from(pinned.footer().height);
        assert!(height >= 2, "height {height}");
        let read_ops = |lf: &LevelFile, keys: &[Vec<u8>]| {
            let before = io.stats().snapshot().read_ops_by(IoComponent::LevelRead);
            for k in keys {
                lf.get(k).unwrap();
            }
            io.stats().snapshot().read_ops_by(IoComponent::LevelRead) - before
        };
        // Keys held in place (no overflow blob to read on top of the leaf).
        let keys: Vec<Vec<u8>> = entries
            .iter()
            .filter(|e| e.2.as_ref().is_none_or(|v| v.len() < 1000))
            .take(500)
            .map(|e| e.0.clone())
            .collect();
        let n = keys.len() as u64;
        assert_eq!(read_ops(&pinned, &keys), n, "one leaf per lookup");
        assert_eq!(read_ops(&unpinned, &keys), n * height, "root to leaf");
        assert_eq!(read_ops(&pinned, &[b"a".to_vec(), b"user".to_vec()]), 0);
    }

    #[test]
    fn a_damaged_index_is_not_pinned_and_lookups_still_report_it() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(20_000);
        let lf = build(dir.path(), 11, &entries);
        let (path, root) = (lf.path().to_path_buf(), lf.footer().root);
        assert!(lf.footer().height >= 2);
        drop(lf);
        let mut data = std::fs::read(&path).unwrap();
        data[root as usize + 100] ^= 0x01;
        std::fs::write(&path, &data).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let lf = open_pinned(dir.path(), 11, &io, 1 << 20);
        assert_eq!(lf.pinned_bytes(), 0);
        match lf.get(&entries[10].0) {
            Err(crate::Error::Corruption { file, offset, .. }) => {
                assert_eq!((file, offset), (path, root));
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn an_index_naming_fewer_leaves_than_the_footer_is_not_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(20_000);
        let lf = build(dir.path(), 14, &entries);
        let path = lf.path().to_path_buf();
        drop(lf);
        // The footer (checksum and all) claims one leaf more than the index names.
        let mut data = std::fs::read(&path).unwrap();
        let n = data.len();
        let f = &mut data[n - footer::FOOTER_SIZE..];
        let leaves = u64::from_le_bytes(f[48..56].try_into().unwrap());
        f[48..56].copy_from_slice(&(leaves + 1).to_le_bytes());
        let crc = crate::format::crc32c(&f[..124]);
        f[124..].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &data).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let lf = open_pinned(dir.path(), 14, &io, 1 << 20);
        assert_eq!(lf.pinned_bytes(), 0, "the fences must not be trusted");
        // Lookups descend the tree instead, and still find every key.
        for (k, lsn, _) in entries.iter().step_by(7) {
            assert_eq!(lf.get(k).unwrap().unwrap().0, *lsn);
        }
    }

    #[test]
    fn files_past_the_pinning_budget_read_through_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let entries = sample(20_000);
        drop(build(dir.path(), 12, &entries));
        drop(build(dir.path(), 13, &entries));
        let io = Io::new(Arc::new(RealFs), false);
        let probe = open_pinned(dir.path(), 12, &io, 0);
        let one = probe.pinned_bytes();
        drop(probe);
        // Room for one file's fences, not two.
        let cache = Arc::new(BlockCache::with_pinning(1 << 20, one + one / 2));
        let a = LevelFile::open(&io, dir.path(), 12, Arc::clone(&cache)).unwrap();
        let b = LevelFile::open(&io, dir.path(), 13, Arc::clone(&cache)).unwrap();
        assert_eq!((a.pinned_bytes(), b.pinned_bytes()), (one, 0));
        assert_eq!(cache.pins().used(), one);
        for (k, lsn, _) in entries.iter().step_by(13) {
            assert_eq!(b.get(k).unwrap().unwrap().0, *lsn);
        }
        // Both open files' nodes count as levels the cache is weighed against, pinned
        // or not.
        assert_eq!(cache.level_bytes(), a.node_bytes() + b.node_bytes());
        let b_nodes = b.node_bytes();
        drop(a);
        assert_eq!(
            cache.pins().used(),
            0,
            "a dropped file gives its bytes back"
        );
        assert_eq!(cache.level_bytes(), b_nodes);
        drop(b);
        assert_eq!(cache.level_bytes(), 0);
    }

    /// A file of large pairs (and a few small ones) with a large pointer table, with or
    /// without a filter unit before it.
    fn build_large(dir: &std::path::Path, id: u64, bits: u32, n: u64) -> (Arc<LevelFile>, u64) {
        let io = Io::new(Arc::new(RealFs), false);
        let f = io
            .create(&dir.join(reader::file_name(id)), IoComponent::Flush)
            .unwrap();
        let mut b = LevelBuilder::new(f, 4096, 12288)
            .with_bloom(bits, n)
            .with_large_pointers(true);
        for i in 0..n {
            let key = format!("key{i:06}");
            if i % 4 == 3 {
                b.add(key.as_bytes(), i, EntryValue::Bytes(b"small"))
                    .unwrap();
            } else {
                b.add(key.as_bytes(), i, EntryValue::Large(large_ptr(i)))
                    .unwrap();
            }
        }
        let meta = b.finish().unwrap();
        let cache = Arc::new(BlockCache::with_pinning(1 << 20, 64 << 20));
        (
            Arc::new(LevelFile::open(&io, dir, id, cache).unwrap()),
            meta.file_len,
        )
    }

    fn large_ptr(i: u64) -> LogPtr {
        LogPtr {
            segment: 3,
            offset: 16 + 1100 * i,
            len: 1028,
        }
    }

    #[test]
    fn a_large_pointer_table_names_each_large_pair_and_ends_the_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let n = 3000;
        for (id, bits) in [(1, 0), (2, 10)] {
            let (lf, file_len) = build_large(dir.path(), id, bits, n);
            let at = lf.large_pointers_offset();
            assert!(at > 0 && at % 4096 == 0);
            assert_eq!(lf.filter_offset() > 0, bits > 0);
            if bits > 0 {
                assert!(lf.filter_offset() < at, "the filter unit comes first");
            }
            let first_unit = if bits > 0 { lf.filter_offset() } else { at };
            assert_eq!(
                lf.node_bytes(),
                first_unit,
                "the nodes end at the first unit"
            );
            assert!(at < file_len - 4096);
            // The compaction scanner stops at the first unit that is not a node.
            let mut s = lf.scanner(IoComponent::Compaction).unwrap();
            let mut seen = 0;
            while let Some((key, lsn, v)) = s.next_entry().unwrap() {
                assert_eq!(key, format!("key{lsn:06}").into_bytes());
                if lsn % 4 == 3 {
                    assert_eq!(v, LevelValue::Inline(b"small".to_vec()));
                } else {
                    assert_eq!(v, LevelValue::Large(large_ptr(lsn)));
                }
                seen += 1;
            }
            assert_eq!(seen, n);
            // Every large pair's pointer is in the pinned table, and a client's search
            // whose leaf is not cached (none is yet: the scanner does not cache) is
            // offered it; a search without guessing reads the leaf.
            let record = |key: &[u8]| match lf.search(key, true).unwrap() {
                Probe::Record(p) => Some(p),
                Probe::Entry(_) => None,
            };
            for i in (0..n).filter(|i| i % 4 != 3) {
                let key = format!("key{i:06}");
                assert_eq!(record(key.as_bytes()), Some(large_ptr(i)), "key {i}");
            }
            // A small pair is answered from its leaf (read now, and cached).
            for i in (0..n).filter(|i| i % 4 == 3).step_by(50) {
                let key = format!("key{i:06}");
                assert!(matches!(
                    lf.search(key.as_bytes(), true).unwrap(),
                    Probe::Entry(Some((lsn, LevelValue::Inline(v)))) if lsn == i && v == b"small"
                ));
            }
            assert!(matches!(
                lf.search(b"key000002", false).unwrap(),
                Probe::Entry(Some((2, LevelValue::Large(p)))) if p == large_ptr(2)
            ));
            assert!(lf.large_pointer_bytes() >= 16 * (n - n / 4));
            // Once the leaf is cached, the get reads it instead.
            assert_eq!(
                lf.get(b"key000000").unwrap(),
                Some((0, LevelValue::Large(large_ptr(0))))
            );
            assert!(matches!(
                lf.search(b"key000000", true).unwrap(),
                Probe::Entry(Some((0, LevelValue::Large(p)))) if p == large_ptr(0)
            ));
        }
    }

    #[test]
    fn a_damaged_large_pointer_table_is_not_pinned_and_the_file_reads_its_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let (lf, _) = build_large(dir.path(), 1, 0, 500);
        let at = lf.large_pointers_offset() as usize;
        assert!(matches!(
            lf.search(b"key000001", true).unwrap(),
            Probe::Record(_)
        ));
        drop(lf);
        let path = dir.path().join(reader::file_name(1));
        let mut data = std::fs::read(&path).unwrap();
        data[at + 40] ^= 0x10;
        std::fs::write(&path, &data).unwrap();
        let io = Io::new(Arc::new(RealFs), false);
        let cache = Arc::new(BlockCache::with_pinning(1 << 20, 64 << 20));
        let lf = LevelFile::open(&io, dir.path(), 1, Arc::clone(&cache)).unwrap();
        assert!(lf.pinned_bytes() > 0, "the fences are pinned");
        assert_eq!(lf.large_pointer_bytes(), 0);
        assert_eq!(cache.table_pins().used(), 0);
        assert!(matches!(
            lf.search(b"key000001", true).unwrap(),
            Probe::Entry(Some((1, _)))
        ));
        assert_eq!(
            lf.get(b"key000001").unwrap(),
            Some((1, LevelValue::Large(large_ptr(1))))
        );
        // The stored bytes are still there for `check` to compare.
        assert_eq!(
            lf.large_pointers_unit().unwrap().map(|u| u[40]),
            Some(data[at + 40])
        );
    }
}
