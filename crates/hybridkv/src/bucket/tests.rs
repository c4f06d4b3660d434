//! Unit tests of the delta buckets: the record format, the table check, a store on the
//! real file system (flushes, committed lengths, reopen, damage) and `resolve`.

use super::*;
use crate::delta::{self, BASE_PTR_BYTES};
use crate::io::RealFs;
use std::sync::atomic::AtomicU64;

/// The encoding of one record.
fn record(key: &[u8], lo: u64, hi: u64, list: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_record(key, lo, hi, list, &mut out);
    out
}

/// A record of `body` with a correct header (checksum and length), whatever the body
/// holds: the checks behind the checksum are what a test of it exercises.
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut out = crc32c(body).to_le_bytes().to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// A record body laid out by hand: `[key_len u32][lo u64][hi u64][key][list]`.
fn body(key_len: u32, lo: u64, hi: u64, key: &[u8], list: &[u8]) -> Vec<u8> {
    let mut b = key_len.to_le_bytes().to_vec();
    b.extend_from_slice(&lo.to_le_bytes());
    b.extend_from_slice(&hi.to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(list);
    b
}

fn refused(bytes: &[u8]) -> &'static str {
    match decode_record(bytes) {
        Ok((rec, n)) => panic!("accepted {rec:?} ({n} bytes) from {bytes:?}"),
        Err(what) => what,
    }
}

/// A deterministic pseudo-random sequence (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A record to write: key, lo, hi, operands.
type Case<'a> = (&'a [u8], u64, u64, Vec<&'a [u8]>);

#[test]
fn records_round_trip_back_to_back() {
    let big = vec![0xabu8; 3000];
    let cases: Vec<Case<'_>> = vec![
        (b"alpha", 1, 1, vec![b"x"]),
        (b"", 0, 0, vec![b""]),
        (b"beta", 5, 9, vec![b"one", b"", b"three"]),
        (&big, 7, u64::MAX, vec![&big, b"z"]),
        (b"\x00\xff", u64::MAX, u64::MAX, vec![b"last"]),
    ];
    let mut segment = Vec::new();
    for (key, lo, hi, ops) in &cases {
        encode_record(key, *lo, *hi, &delta::open_list(ops), &mut segment);
    }
    let mut at = 0;
    for (key, lo, hi, ops) in &cases {
        let (rec, n) = decode_record(&segment[at..]).unwrap();
        assert_eq!(rec.key, *key);
        assert_eq!((rec.lo, rec.hi), (*lo, *hi));
        assert_eq!(rec.list, delta::open_list(ops));
        assert_eq!(delta::decode(rec.list).unwrap().operands, *ops);
        assert_eq!(n, RECORD_HEADER + BODY_FIXED + key.len() + rec.list.len());
        // The encoding is canonical: the decoded parts give the same bytes.
        assert_eq!(
            record(rec.key, rec.lo, rec.hi, rec.list),
            segment[at..at + n]
        );
        at += n;
    }
    assert_eq!(at, segment.len());
    // An empty operand list encodes, but is no record: a flush never writes one.
    assert_eq!(
        refused(&record(b"k", 1, 2, &delta::open_list(&[]))),
        "record operand list is malformed"
    );
}

#[test]
fn every_truncation_and_every_flipped_byte_is_refused() {
    let good = record(b"key", 3, 8, &delta::open_list(&[b"abc", b"de"]));
    assert!(decode_record(&good).is_ok());
    for cut in 0..good.len() {
        refused(&good[..cut]);
    }
    for i in 0..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = good.clone();
            bad[i] ^= bit;
            refused(&bad);
        }
    }
    // Bytes after a record are the next record's: the first still decodes alone.
    let mut two = good.clone();
    two.extend_from_slice(&[1, 2, 3]);
    assert_eq!(decode_record(&two).unwrap().1, good.len());
}

#[test]
fn structural_damage_behind_a_good_checksum_is_refused() {
    let ok = delta::open_list(&[b"d"]);
    // The helpers lay out what `encode_record` does.
    assert_eq!(sealed(&body(1, 2, 4, b"k", &ok)), record(b"k", 2, 4, &ok));
    assert!(decode_record(&sealed(&body(1, 2, 4, b"k", &ok))).is_ok());

    let cases: Vec<(Vec<u8>, &str)> = vec![
        (sealed(&[0; BODY_FIXED - 1]), "shorter than its fixed part"),
        (sealed(&body(1, 2, 4, b"k", &[])), "malformed"),
        (
            sealed(&body(100, 2, 4, b"k", &ok)),
            "key runs past its body",
        ),
        (
            sealed(&body(u32::MAX, 2, 4, b"k", &ok)),
            "key runs past its body",
        ),
        (sealed(&body(1, 5, 4, b"k", &ok)), "reversed"),
        (sealed(&body(1, u64::MAX, 0, b"k", &ok)), "reversed"),
        (
            sealed(&body(
                1,
                2,
                4,
                b"k",
                &delta::close(b"k", None, &ok).unwrap(),
            )),
            "malformed",
        ),
        (
            sealed(&body(
                1,
                2,
                4,
                b"k",
                &delta::close(b"k", Some(b"base"), &ok).unwrap(),
            )),
            "malformed",
        ),
        (
            sealed(&body(
                1,
                2,
                4,
                b"k",
                &delta::close_over_ptr(b"k", &[1; BASE_PTR_BYTES], &ok).unwrap(),
            )),
            "malformed",
        ),
        (
            sealed(&body(1, 2, 4, b"k", &delta::bucket_list(false, None, 2, 4))),
            "malformed",
        ),
        (
            sealed(&body(
                1,
                2,
                4,
                b"k",
                &delta::bucket_list(true, Some(&[1; BASE_PTR_BYTES]), 2, 4),
            )),
            "malformed",
        ),
        // A list with a byte after its last operand.
        (
            sealed(&body(1, 2, 4, b"k", &[ok.as_slice(), &[0]].concat())),
            "malformed",
        ),
    ];
    for (bytes, what) in cases {
        let got = refused(&bytes);
        assert!(got.contains(what), "expected {what:?}, got {got:?}");
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let good = record(
        b"some key",
        10,
        20,
        &delta::open_list(&[b"abc", b"", b"xyz"]),
    );
    let mut accepted = 0;
    for round in 0..20_000 {
        let bytes = match round % 3 {
            // Noise.
            0 => (0..rng.below(80))
                .map(|_| rng.next() as u8)
                .collect::<Vec<u8>>(),
            // A good record with a few bytes changed, or cut.
            1 => {
                let mut b = good.clone();
                for _ in 0..=rng.below(3) {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] = rng.next() as u8;
                }
                b.truncate(rng.below(b.len() as u64 + 1) as usize);
                b
            }
            // A good record's body changed, then sealed again: past the checksum.
            _ => {
                let mut b = good[RECORD_HEADER..].to_vec();
                for _ in 0..=rng.below(3) {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] = rng.next() as u8;
                }
                sealed(&b)
            }
        };
        if let Ok((rec, n)) = decode_record(&bytes) {
            accepted += 1;
            assert!(n <= bytes.len());
            assert_eq!(record(rec.key, rec.lo, rec.hi, rec.list), bytes[..n]);
        }
    }
    // Some resealed mutations (of an operand's bytes, say) are still records.
    assert!(accepted > 0);
}

fn meta(depth: u8, prefix: u64) -> BucketMeta {
    BucketMeta {
        depth,
        prefix,
        segments: Vec::new(),
    }
}

#[test]
fn a_table_must_cover_every_hash_once_in_order() {
    let full = |depth: u8| {
        (0..1u64 << depth)
            .map(|p| meta(depth, p))
            .collect::<Vec<_>>()
    };
    assert!(BucketMeta::valid_table(&[]));
    assert!(BucketMeta::valid_table(&[meta(0, 0)]));
    assert!(BucketMeta::valid_table(&full(INITIAL_BUCKET_BITS)));
    assert_eq!(full(INITIAL_BUCKET_BITS).len(), 8);
    assert!(BucketMeta::valid_table(&[
        meta(1, 0),
        meta(2, 2),
        meta(2, 3)
    ]));
    assert!(BucketMeta::valid_table(&[
        meta(2, 0),
        meta(2, 1),
        meta(1, 1)
    ]));
    assert!(BucketMeta::valid_table(&[
        meta(1, 0),
        meta(3, 4),
        meta(3, 5),
        meta(2, 3)
    ]));
    assert!(BucketMeta::valid_table(&full(MAX_BUCKET_BITS)));

    for (table, what) in [
        (vec![meta(1, 0)], "half the hashes"),
        (vec![meta(1, 1)], "the other half"),
        (vec![meta(1, 0), meta(2, 3)], "a gap"),
        (
            vec![meta(2, 0), meta(2, 2), meta(2, 3)],
            "a gap at the start",
        ),
        (
            vec![meta(1, 0), meta(2, 1), meta(2, 2), meta(2, 3)],
            "an overlap",
        ),
        (vec![meta(1, 0), meta(1, 0), meta(1, 1)], "a repeat"),
        (vec![meta(0, 0), meta(0, 0)], "a repeat of everything"),
        (vec![meta(1, 1), meta(1, 0)], "out of order"),
        (
            vec![meta(1, 0), meta(2, 3), meta(2, 2)],
            "out of order at depth 2",
        ),
        (
            vec![meta(1, 0), meta(1, 3)],
            "a prefix wider than its depth",
        ),
        (vec![meta(0, 1)], "a prefix at depth 0"),
        (vec![meta(1, 0), meta(1, 1), meta(1, 0)], "past the end"),
        (vec![meta(200, 0)], "an absurd depth"),
    ] {
        assert!(!BucketMeta::valid_table(&table), "{what}: {table:?}");
    }
    // Deeper than any split makes, though complete.
    assert!(!BucketMeta::valid_table(&full(MAX_BUCKET_BITS + 1)));
    let mut deep = vec![meta(1, 0)];
    deep.extend(
        (0..1u64 << MAX_BUCKET_BITS).map(|p| meta(MAX_BUCKET_BITS + 1, (1 << MAX_BUCKET_BITS) + p)),
    );
    assert!(!BucketMeta::valid_table(&deep));
}

// ---------------------------------------------------------------------------------------
// A store on the real file system.

fn real_io() -> Io {
    Io::new(Arc::new(RealFs), false)
}

/// A store over `dir` with no buckets yet (what a manifest without a table opens).
fn new_store(io: &Io, dir: &Path) -> Arc<BucketStore> {
    let (store, table) = BucketStore::open(io, dir, &[], true).unwrap();
    assert!(table.slots.is_empty());
    store
}

fn bucket_of(key: &[u8]) -> u64 {
    key_hash(key) >> (64 - u32::from(INITIAL_BUCKET_BITS))
}

/// Keys `a` and `b` in one bucket of a new table, `c` in another.
fn three_keys() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let keys: Vec<Vec<u8>> = (0..64).map(|i| format!("key-{i}").into_bytes()).collect();
    let a = keys[0].clone();
    let b = keys[1..]
        .iter()
        .find(|k| bucket_of(k) == bucket_of(&a))
        .unwrap()
        .clone();
    let c = keys[1..]
        .iter()
        .find(|k| bucket_of(k) != bucket_of(&a))
        .unwrap()
        .clone();
    (a, b, c)
}

/// A key in a bucket none of `keys` is in.
fn key_elsewhere(keys: &[&[u8]]) -> Vec<u8> {
    (0..1000)
        .map(|i| format!("other-{i}").into_bytes())
        .find(|k| keys.iter().all(|o| bucket_of(o) != bucket_of(k)))
        .unwrap()
}

fn ops(xs: &[&str]) -> Vec<u8> {
    let v: Vec<&[u8]> = xs.iter().map(|x| x.as_bytes()).collect();
    delta::open_list(&v)
}

/// What `read_operands` gives: (lo, list) of each record in range, oldest first.
fn reads(table: &BucketTable, key: &[u8], lo: u64, hi: u64) -> Vec<(u64, Vec<u8>)> {
    table.read_operands(key, lo, hi).unwrap()
}

fn los(table: &BucketTable, key: &[u8], lo: u64, hi: u64) -> Vec<u64> {
    reads(table, key, lo, hi)
        .into_iter()
        .map(|(l, _)| l)
        .collect()
}

fn slot_for<'t>(table: &'t BucketTable, key: &[u8]) -> &'t BucketSlot {
    &table.slots[table.slot_of(key_hash(key)).unwrap()]
}

fn ids_of(slot: &BucketSlot) -> Vec<u64> {
    slot.segments.iter().map(|(s, _)| s.id()).collect()
}

#[test]
fn flushes_append_and_reads_see_only_committed_records_in_range() {
    let dir = tempfile::tempdir().unwrap();
    let io = real_io();
    let next = AtomicU64::new(100);
    let new_id = || next.fetch_add(1, Ordering::SeqCst);
    let store = new_store(&io, dir.path());
    let (a, b, c) = three_keys();
    let d = key_elsewhere(&[&a, &c]);

    // An empty table gets 2^INITIAL_BUCKET_BITS buckets.
    let none = BucketTable::default();
    assert!(none.slots.is_empty());
    let mut f = store.begin_flush(&none, &new_id);
    assert_eq!(f.table.slots.len(), 1 << INITIAL_BUCKET_BITS);
    for (i, s) in f.table.slots.iter().enumerate() {
        assert_eq!((s.depth, s.prefix), (INITIAL_BUCKET_BITS, i as u64));
        assert!(s.segments.is_empty());
    }
    assert!(BucketMeta::valid_table(&f.table.meta()));
    let before = f.table.clone();
    // Out of LSN order on purpose: reads sort by `lo`.
    f.append(&a, 5, 6, &ops(&["a5", "a6"])).unwrap();
    f.append(&b, 3, 4, &ops(&["b3"])).unwrap();
    f.append(&a, 1, 2, &ops(&["a1"])).unwrap();
    f.append(&c, 7, 7, &ops(&["c7"])).unwrap();
    f.append(&a, 10, 10, &ops(&["a10"])).unwrap();
    assert_eq!(f.records(), 5);
    // Appended but not finished: no table vouches for them.
    assert!(reads(&before, &a, 0, u64::MAX).is_empty());
    let t1 = f.finish().unwrap().unwrap();
    // As an install does: the segments it names stay on disk.
    t1.installed();
    drop(f);
    assert!(reads(&before, &a, 0, u64::MAX).is_empty());
    assert!(reads(&before, &c, 0, u64::MAX).is_empty());
    assert_eq!(store.indexed(), 5);
    assert_eq!(t1.slots.len(), 8);
    assert!(BucketMeta::valid_table(&t1.meta()));
    assert_eq!(ids_of(slot_for(&t1, &a)).len(), 1);
    assert_eq!(ids_of(slot_for(&t1, &c)).len(), 1);
    assert_ne!(ids_of(slot_for(&t1, &a)), ids_of(slot_for(&t1, &c)));
    assert_eq!(t1.segments().count(), 2);
    let seg_a = ids_of(slot_for(&t1, &a))[0];
    let committed_a = slot_for(&t1, &a).segments[0].1;
    assert_eq!(
        committed_a,
        std::fs::metadata(dir.path().join(file_name(seg_a)))
            .unwrap()
            .len()
    );

    assert_eq!(
        reads(&t1, &a, 0, u64::MAX),
        vec![
            (1, ops(&["a1"])),
            (5, ops(&["a5", "a6"])),
            (10, ops(&["a10"]))
        ]
    );
    assert_eq!(los(&t1, &a, 1, 6), [1, 5]);
    assert_eq!(los(&t1, &a, 2, 10), [5, 10]);
    assert_eq!(los(&t1, &a, 1, 5), [1]);
    assert_eq!(los(&t1, &a, 6, 9), Vec::<u64>::new());
    assert_eq!(los(&t1, &a, 10, 10), [10]);
    // Same bucket, other key: only its own records.
    assert_eq!(reads(&t1, &b, 0, u64::MAX), vec![(3, ops(&["b3"]))]);
    assert_eq!(reads(&t1, &c, 0, u64::MAX), vec![(7, ops(&["c7"]))]);
    assert!(reads(&t1, &d, 0, u64::MAX).is_empty());
    assert!(reads(&t1, b"never written", 0, u64::MAX).is_empty());
    // A table naming the same segments at committed length 0 sees nothing.
    let mut zero = t1.clone();
    for s in &mut zero.slots {
        for (_, c) in &mut s.segments {
            *c = 0;
        }
    }
    assert!(reads(&zero, &a, 0, u64::MAX).is_empty());
    assert!(reads(&zero, &c, 0, u64::MAX).is_empty());
    // No bucket covers the key of a table with no buckets.
    assert!(matches!(
        none.read_operands(&a, 0, u64::MAX),
        Err(Error::Internal(_))
    ));

    // A second flush appends to the same segment.
    let mut f = store.begin_flush(&t1, &new_id);
    f.append(&a, 20, 21, &ops(&["a20", "a21"])).unwrap();
    assert_eq!(los(&t1, &a, 0, u64::MAX), [1, 5, 10]);
    let t2 = f.finish().unwrap().unwrap();
    // As an install does: the segments it names stay on disk.
    t2.installed();
    drop(f);
    assert_eq!(ids_of(slot_for(&t2, &a)), [seg_a]);
    let committed_a2 = slot_for(&t2, &a).segments[0].1;
    assert!(committed_a2 > committed_a);
    assert_eq!(los(&t2, &a, 0, u64::MAX), [1, 5, 10, 20]);
    assert_eq!(los(&t1, &a, 0, u64::MAX), [1, 5, 10]);
    // Untouched buckets keep their segments and lengths.
    assert_eq!(
        slot_for(&t2, &c).segments[0].1,
        slot_for(&t1, &c).segments[0].1
    );
    let seg_c = ids_of(slot_for(&t2, &c))[0];

    // A flush with nothing appended changes nothing.
    let mut f = store.begin_flush(&t2, &new_id);
    assert!(f.finish().unwrap().is_none());
    drop(f);

    // A flush dropped without `finish`: older tables read as before, the segment it
    // created in an empty bucket is deleted, and the bucket it appended to gets a new
    // segment at the next flush.
    let id_before = next.load(Ordering::SeqCst);
    let mut f = store.begin_flush(&t2, &new_id);
    f.append(&a, 30, 31, &ops(&["a30"])).unwrap();
    f.append(&d, 32, 32, &ops(&["d32"])).unwrap();
    assert_eq!(next.load(Ordering::SeqCst), id_before + 1);
    assert!(dir.path().join(file_name(id_before)).exists());
    drop(f);
    assert!(!dir.path().join(file_name(id_before)).exists());
    assert_eq!(los(&t2, &a, 0, u64::MAX), [1, 5, 10, 20]);
    assert!(reads(&t2, &d, 0, u64::MAX).is_empty());

    let mut f = store.begin_flush(&t2, &new_id);
    f.append(&a, 40, 41, &ops(&["a40"])).unwrap();
    f.append(&c, 42, 42, &ops(&["c42"])).unwrap();
    let t3 = f.finish().unwrap().unwrap();
    // As an install does: the segments it names stay on disk.
    t3.installed();
    drop(f);
    let a_ids = ids_of(slot_for(&t3, &a));
    assert_eq!(a_ids.len(), 2);
    assert_eq!(a_ids[0], seg_a);
    assert!(a_ids[1] > id_before, "{a_ids:?}");
    assert_eq!(slot_for(&t3, &a).segments[0].1, committed_a2);
    // The bucket the dropped flush did not touch still appends to its segment.
    assert_eq!(ids_of(slot_for(&t3, &c)), [seg_c]);
    assert_eq!(los(&t3, &a, 0, u64::MAX), [1, 5, 10, 20, 40]);
    assert_eq!(los(&t3, &a, 11, u64::MAX), [20, 40]);
    assert_eq!(los(&t3, &c, 0, u64::MAX), [7, 42]);
    assert_eq!(los(&t3, &b, 0, u64::MAX), [3]);
    assert_eq!(los(&t2, &a, 0, u64::MAX), [1, 5, 10, 20]);
}

/// Writes some records through a store and returns the table's manifest description
/// with what each key reads.
/// Each key with what `read_operands` gives for it.
type Reads = Vec<(Vec<u8>, Vec<(u64, Vec<u8>)>)>;

fn written(dir: &Path) -> (Vec<BucketMeta>, Reads) {
    let io = real_io();
    let next = AtomicU64::new(1);
    let new_id = || next.fetch_add(1, Ordering::SeqCst);
    let store = new_store(&io, dir);
    let (a, b, c) = three_keys();
    let mut f = store.begin_flush(&BucketTable::default(), &new_id);
    f.append(&a, 1, 2, &ops(&["a1", "a2"])).unwrap();
    f.append(&b, 3, 3, &ops(&["b3"])).unwrap();
    f.append(&c, 4, 4, &ops(&["c4"])).unwrap();
    let t1 = f.finish().unwrap().unwrap();
    // As an install does: the segments it names stay on disk.
    t1.installed();
    drop(f);
    let mut f = store.begin_flush(&t1, &new_id);
    f.append(&a, 5, 5, &ops(&["a5"])).unwrap();
    let t2 = f.finish().unwrap().unwrap();
    // As an install does: the segments it names stay on disk.
    t2.installed();
    drop(f);
    let want = [a, b, c]
        .into_iter()
        .map(|k| {
            let r = reads(&t2, &k, 0, u64::MAX);
            (k, r)
        })
        .collect::<Vec<_>>();
    assert_eq!(want[0].1.len(), 2);
    (t2.meta(), want)
}

fn segment_path(dir: &Path, m: &[BucketMeta], key: &[u8]) -> (PathBuf, u64) {
    let hash = key_hash(key);
    let b = m
        .iter()
        .find(|b| hash >> (64 - u32::from(b.depth)) == b.prefix)
        .unwrap();
    let (id, committed) = b.segments[0];
    (dir.join(file_name(id)), committed)
}

#[test]
fn open_cuts_uncommitted_bytes_and_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (m, want) = written(dir.path());
    let (path, committed) = segment_path(dir.path(), &m, &want[0].0);
    // A flush that appended and never installed.
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len() as u64, committed);
    bytes.extend_from_slice(&record(&want[0].0, 9, 9, &ops(&["never"])));
    bytes.extend_from_slice(b"torn");
    std::fs::write(&path, &bytes).unwrap();

    // Read-only: the bytes stay, and are not read.
    let io = real_io();
    let (_, table) = BucketStore::open(&io, dir.path(), &m, false).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
    for (k, r) in &want {
        assert_eq!(&reads(&table, k, 0, u64::MAX), r);
    }
    drop(table);

    let (store, table) = BucketStore::open(&io, dir.path(), &m, true).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), committed);
    assert_eq!(table.meta(), m);
    assert_eq!(store.indexed(), 4);
    for (k, r) in &want {
        assert_eq!(&reads(&table, k, 0, u64::MAX), r);
    }
    // The next flush appends after the cut, in a new segment or the same.
    let next = AtomicU64::new(1000);
    let new_id = || next.fetch_add(1, Ordering::SeqCst);
    let mut f = store.begin_flush(&table, &new_id);
    f.append(&want[0].0, 9, 9, &ops(&["a9"])).unwrap();
    let t = f.finish().unwrap().unwrap();
    // As an install does: the segments it names stay on disk.
    t.installed();
    drop(f);
    let mut expect = want[0].1.clone();
    expect.push((9, ops(&["a9"])));
    assert_eq!(reads(&t, &want[0].0, 0, u64::MAX), expect);
}

#[test]
fn open_refuses_a_short_segment_and_damage_below_the_committed_length() {
    let dir = tempfile::tempdir().unwrap();
    let (m, want) = written(dir.path());
    let io = real_io();
    let (path, committed) = segment_path(dir.path(), &m, &want[0].0);

    // The manifest vouches for more bytes than the file has.
    let mut long = m.clone();
    for b in &mut long {
        for (id, c) in &mut b.segments {
            if dir.path().join(file_name(*id)) == path {
                *c += 1;
            }
        }
    }
    assert_ne!(long, m);
    for writable in [false, true] {
        match BucketStore::open(&io, dir.path(), &long, writable) {
            Err(Error::Corruption { file, what, .. }) => {
                assert_eq!(file.file_name(), path.file_name(), "{what}");
                assert!(what.contains(&(committed + 1).to_string()), "{what}");
            }
            other => panic!("expected corruption, got {:?}", other.err()),
        }
    }
    // Nothing was cut.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), committed);

    // A segment's scan (GC and `check` call it after open) refuses the same, before it
    // allocates a buffer of the length it was given, however large.
    let id = m
        .iter()
        .flat_map(|b| &b.segments)
        .map(|&(id, _)| id)
        .find(|&id| dir.path().join(file_name(id)) == path)
        .unwrap();
    let seg = BucketSegment::open(&io, dir.path(), id, &Arc::new(BucketIndex::default())).unwrap();
    let mut records = 0;
    seg.scan(committed, |_, _| {
        records += 1;
        Ok(())
    })
    .unwrap();
    assert!(records > 0);
    for past in [committed + 1, 1 << 30] {
        match seg.scan(past, |_, _| Ok(())) {
            Err(Error::Corruption { file, what, .. }) => {
                assert_eq!(file, path);
                assert!(what.contains("past the end"), "{what}");
            }
            other => panic!("committed {past}: expected corruption, got {other:?}"),
        }
    }

    // A table that does not cover every hash.
    let mut gap = m.clone();
    gap.pop();
    assert!(matches!(
        BucketStore::open(&io, dir.path(), &gap, false),
        Err(Error::Corruption { .. })
    ));

    // A byte damaged in a record below the committed length, anywhere.
    let good = std::fs::read(&path).unwrap();
    let header = SEGMENT_HEADER;
    for i in [
        0,
        9,
        header,
        header + 5,
        header + 9,
        good.len() / 2,
        good.len() - 1,
    ] {
        let mut bad = good.clone();
        bad[i] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        for writable in [false, true] {
            match BucketStore::open(&io, dir.path(), &m, writable) {
                Err(Error::Corruption { file, .. }) => {
                    assert_eq!(file.file_name(), path.file_name())
                }
                other => panic!("damage at {i}: expected corruption, got {:?}", other.err()),
            }
        }
    }
    std::fs::write(&path, &good).unwrap();
    assert!(BucketStore::open(&io, dir.path(), &m, true).is_ok());
}

#[test]
fn resolve_turns_a_bucket_list_into_an_inline_one() {
    let dir = tempfile::tempdir().unwrap();
    let io = real_io();
    let next = AtomicU64::new(1);
    let new_id = || next.fetch_add(1, Ordering::SeqCst);
    let store = new_store(&io, dir.path());
    let (a, b, _) = three_keys();
    let mut f = store.begin_flush(&BucketTable::default(), &new_id);
    f.append(&a, 1, 2, &ops(&["x", "y"])).unwrap();
    f.append(&b, 3, 3, &ops(&["other key"])).unwrap();
    f.append(&a, 4, 4, &ops(&["z"])).unwrap();
    f.append(&a, 8, 9, &ops(&["later"])).unwrap();
    let t = f.finish().unwrap().unwrap();
    // As an install does: the segments it names stay on disk.
    t.installed();
    drop(f);

    // Any other list comes back as it is.
    for list in [
        delta::single(b"v"),
        delta::open_list(&[b"p", b"q"]),
        delta::close(b"k", Some(b"base"), &delta::single(b"d")).unwrap(),
    ] {
        assert_eq!(t.resolve(&a, list.clone()).unwrap(), list);
    }

    let ptr = [7u8; BASE_PTR_BYTES];
    let got = t
        .resolve(&a, delta::bucket_list(true, Some(&ptr), 1, 5))
        .unwrap();
    let want = delta::close_over_ptr(&a, &ptr, &delta::open_list(&[b"x", b"y", b"z"])).unwrap();
    assert_eq!(got, want);
    let l = delta::decode(&got).unwrap();
    assert!(l.closed && l.bucket.is_none());
    assert_eq!(l.base_ptr, Some(&ptr[..]));
    assert_eq!(l.operands, [&b"x"[..], b"y", b"z"]);

    // Open, and closed over nothing.
    assert_eq!(
        t.resolve(&a, delta::bucket_list(false, None, 0, 100))
            .unwrap(),
        delta::open_list(&[b"x", b"y", b"z", b"later"])
    );
    let closed = t.resolve(&a, delta::bucket_list(true, None, 4, 9)).unwrap();
    let l = delta::decode(&closed).unwrap();
    assert!(l.closed && l.base.is_none() && l.base_ptr.is_none());
    assert_eq!(l.operands, [&b"z"[..], b"later"]);

    // A list whose bucket holds none of its records lost deltas: corruption, never "no
    // deltas".
    let e = t
        .resolve(&a, delta::bucket_list(false, None, 5, 7))
        .unwrap_err();
    assert!(e.is_corruption() && e.to_string().contains("5..=7"), "{e}");
}
