//! Large-log and transient-log segments (`docs/FORMAT.md`, "Large log"): the strict scan
//! (GC, `check`), the tolerant scan, recovery's tail scan, and reads through a pointer.
//!
//! Input: `[flags u8][segment bytes]`. Flag bit 0 rewrites every checksum first. Properties:
//! no panic, allocation in proportion to the input; a segment the strict scan accepts
//! re-encodes with the real writer to exactly its bytes (same pointers), the tolerant
//! scan and the tail scan agree with it; the tail scan's valid prefix is accepted by the
//! strict scan with the same records; every record reads back through its pointer, and a
//! pointer with a wrong key or length is corruption. Read as a transient segment through a
//! cache, by scan batches (spans read and cached in whole blocks) and by gets (each miss
//! reading its block), every record of a clean segment reads its value and a wrong key
//! or length is corruption; of any segment, every value either path returns is what the
//! record's own bytes decode to.
#![no_main]

use hybridkv::fuzzing::{
    decode_segment, decode_segment_record, encode_segment, read_segment_value,
    read_transient_values, scan_segment_tail, LogPtr, SegmentTail,
};
use hybridkv_fuzz::{bounded, fix_segment};
use libfuzzer_sys::fuzz_target;

const MAX_RECORD: usize = 20 + hybridkv::MAX_KEY_SIZE + hybridkv::MAX_VALUE_SIZE;

fuzz_target!(|input: &[u8]| {
    let Some((&flags, rest)) = input.split_first() else {
        return;
    };
    let mut data = rest.to_vec();
    if flags & 1 != 0 {
        fix_segment(&mut data);
    }
    let n = data.len();
    // A record of 20 bytes (empty key and value) decodes into an 80-byte entry (pointer and
    // record), and the list of them doubles as it grows: up to 8 bytes per input byte.
    let strict = bounded("strict scan", n, 8, 4096, || decode_segment(&data, false));
    let tolerant = bounded("tolerant scan", n, 8, 4096, || decode_segment(&data, true));
    let tail = bounded("tail scan", n, 4, 4096, || scan_segment_tail(&data));

    if let Ok(recs) = &strict {
        assert_eq!(
            tolerant.as_ref().ok(),
            Some(recs),
            "tolerant scan disagrees"
        );
        let SegmentTail::Valid { end, records } = &tail else {
            panic!("tail scan of a clean segment: {tail:?}");
        };
        assert_eq!(*end as usize, n);
        assert_eq!(records.len(), recs.len());
        let input: Vec<_> = recs
            .iter()
            .map(|(_, r)| (r.key.clone(), r.value.clone(), r.lsn))
            .collect();
        let (bytes, ptrs) = encode_segment(&input).expect("encode");
        assert_eq!(bytes, data, "encode(decode(x)) != x");
        for ((ptr, r), p) in recs.iter().zip(&ptrs) {
            assert_eq!(ptr, p);
            let (o, l) = (p.offset as usize, p.len as usize);
            let buf = &data[o..o + l];
            assert_eq!(
                decode_segment_record(buf, *p, &r.key).expect("read"),
                r.value
            );
            assert_eq!(
                read_segment_value(&data, *p, &r.key).expect("read"),
                r.value
            );
            let mut other = r.key.clone();
            other.push(0);
            assert!(decode_segment_record(buf, *p, &other)
                .expect_err("wrong key")
                .is_corruption());
            if l > 20 {
                let short = LogPtr {
                    len: p.len - 1,
                    ..*p
                };
                assert!(decode_segment_record(&buf[..l - 1], short, &r.key).is_err());
            }
        }
    }
    // Reads through the cache of a transient segment: scan batches (whole blocks cached)
    // and gets agree, each record of a clean segment reads its own value, and a pointer
    // with a key one byte longer, or a length one byte shorter, is refused by both.
    if let Ok(recs) = &strict {
        let mut reads = Vec::new();
        let mut want = Vec::new();
        for (p, r) in recs.iter().rev() {
            reads.push((*p, r.key.clone()));
            want.push(Some(r.value.clone()));
            let mut other = r.key.clone();
            other.push(0);
            reads.push((*p, other));
            want.push(None);
            if let Some((_, head)) = r.key.split_last() {
                reads.push((*p, head.to_vec()));
                want.push(None);
            }
            if p.len > 20 {
                let short = LogPtr {
                    len: p.len - 1,
                    ..*p
                };
                reads.push((short, r.key.clone()));
                want.push(None);
            }
        }
        let (scanned, alone) = read_transient_values(&data, &reads).expect("open");
        for (i, ((s, a), w)) in scanned.iter().zip(&alone).zip(&want).enumerate() {
            let p = reads[i].0;
            match w {
                Some(v) => {
                    assert_eq!(s.as_ref().ok(), Some(v), "scan read {i} of {p:?}");
                    assert_eq!(a.as_ref().ok(), Some(v), "get {i} of {p:?}");
                }
                None => assert!(
                    s.as_ref().is_err_and(|e| e.is_corruption())
                        && a.as_ref().is_err_and(|e| e.is_corruption()),
                    "read {i} of {p:?}: {s:?}, {a:?}"
                ),
            }
        }
    }
    // Of any segment (damaged ones included), through the records the tolerant scan
    // finds: a value either path returns is what the record's own bytes decode to.
    if let Ok(recs) = &tolerant {
        let reads: Vec<(LogPtr, Vec<u8>)> =
            recs.iter().take(64).map(|(p, r)| (*p, r.key.clone())).collect();
        let (scanned, alone) = read_transient_values(&data, &reads).expect("open");
        for ((p, key), (s, a)) in reads.iter().zip(scanned.iter().zip(&alone)) {
            let (o, l) = (p.offset as usize, p.len as usize);
            let own = data.get(o..o + l).map(|b| decode_segment_record(b, *p, key));
            for got in [s, a] {
                if let Ok(v) = got {
                    match &own {
                        Some(Ok(want)) => assert_eq!(v, want, "{p:?}"),
                        other => panic!("{p:?} read {v:?}, its bytes decode to {other:?}"),
                    }
                }
            }
        }
    }
    if let SegmentTail::Valid { end, records } = &tail {
        let prefix =
            decode_segment(&data[..*end as usize], false).expect("the tail scan's valid prefix");
        assert_eq!(prefix.len(), records.len());
        for ((p, r), (off, (len, key))) in prefix.iter().zip(records) {
            assert_eq!((p.offset, p.len, &r.key), (*off, *len, key));
        }
    }
    if let Ok(t) = &tolerant {
        for (p, r) in t {
            let _ = read_segment_value(&data, *p, &r.key).expect("tolerant record reads");
        }
    }

    // Arbitrary pointers into the bytes: reads must fail cleanly and allocate no more than
    // the largest record the format allows (header + 4 KiB key + 16 MiB value).
    if n >= 20 {
        let p = LogPtr {
            segment: 1,
            offset: u64::from(u32::from_le_bytes(data[..4].try_into().unwrap_or_default()))
                % (n as u64 + 8),
            len: u32::from_le_bytes(data[4..8].try_into().unwrap_or_default()),
        };
        let _ = bounded("pointer read", n, 4, MAX_RECORD, || {
            read_segment_value(&data, p, &data[8..12])
        });
    }
});
