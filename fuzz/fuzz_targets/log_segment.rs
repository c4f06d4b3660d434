//! Large-log and transient-log segments (`docs/FORMAT.md`, "Large log"): the strict scan
//! (GC, `check`), the tolerant scan, recovery's tail scan, and reads through a pointer.
//!
//! Input: `[flags u8][segment bytes]`. Flag bit 0 rewrites every checksum first. Properties:
//! no panic, allocation in proportion to the input; a segment the strict scan accepts
//! re-encodes with the real writer to exactly its bytes (same pointers), the tolerant
//! scan and the tail scan agree with it; the tail scan's valid prefix is accepted by the
//! strict scan with the same records; every record reads back through its pointer, and a
//! pointer with a wrong key or length is corruption.
#![no_main]

use hybridkv::fuzzing::{
    decode_segment, decode_segment_record, encode_segment, read_segment_value, scan_segment_tail,
    LogPtr, SegmentTail,
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
    let strict = bounded("strict scan", n, 4, 4096, || decode_segment(&data, false));
    let tolerant = bounded("tolerant scan", n, 4, 4096, || decode_segment(&data, true));
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
