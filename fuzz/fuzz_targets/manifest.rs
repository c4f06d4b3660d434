//! The manifest (`docs/FORMAT.md`, "Manifest").
//!
//! Input: `[flags u8][manifest bytes]`. Bit 0 rewrites the payload checksum first.
//! Properties: no panic, allocation in proportion to the input (run and segment counts are
//! checked against the payload before anything is reserved); an accepted manifest
//! re-encodes to exactly its bytes; a manifest derived from the input, encoded, decodes to
//! itself whenever it satisfies the format's rules, and is rejected otherwise.
#![no_main]

use hybridkv::fuzzing::{
    decode_manifest, encode_manifest, Manifest, ManifestRangeTombstone, ManifestSegment,
    MANIFEST_VERSION,
};
use hybridkv_fuzz::{bounded, fix_manifest};
use libfuzzer_sys::fuzz_target;

fn valid(m: &Manifest) -> bool {
    let ids_ok = |id: u64| id < m.next_file_id;
    m.levels.windows(2).all(|w| w[0].0 <= w[1].0)
        && m.levels
            .iter()
            .all(|&(l, id, _)| (1..=64).contains(&l) && ids_ok(id))
        && m.levels
            .iter()
            .enumerate()
            .all(|(i, a)| m.levels[..i].iter().all(|b| b.1 != a.1))
        && m.segments
            .iter()
            .all(|s| matches!(s.kind, 1 | 2) && ids_ok(s.id))
        && m.segments
            .iter()
            .enumerate()
            .all(|(i, a)| m.segments[..i].iter().all(|b| b.id != a.id))
        && m.range_tombstones.iter().all(|t| {
            !t.pending.is_empty()
                && t.pending.windows(2).all(|w| w[0] < w[1])
                && t.pending.iter().all(|&id| ids_ok(id))
                && t.end.as_ref().is_none_or(|e| e.len() < u32::MAX as usize)
        })
}

fuzz_target!(|input: &[u8]| {
    let Some((&flags, rest)) = input.split_first() else {
        return;
    };
    let mut data = rest.to_vec();
    if flags & 1 != 0 {
        fix_manifest(&mut data);
    }
    if let Ok(m) = bounded("decode_manifest", data.len(), 4, 1024, || {
        decode_manifest(&data)
    }) {
        assert!(
            valid(&m),
            "accepted a manifest that breaks the format's rules: {m:?}"
        );
        // An older manifest (version 1 without range tombstones, version 2) is rewritten in
        // the newest version.
        if m.version == MANIFEST_VERSION {
            assert_eq!(encode_manifest(&m), data, "encode(decode(x)) != x");
        }
    }

    // decode(encode(m)) == m for manifests derived from the input.
    let b = |i: usize| u64::from(rest.get(i).copied().unwrap_or(0));
    let mut m = Manifest {
        next_file_id: b(0) + b(1) * 256,
        log_min_id: b(2),
        flushed_lsn: b(3) << 20,
        version: MANIFEST_VERSION,
        ..Manifest::default()
    };
    for c in rest.chunks(4).skip(1) {
        let x = |j: usize| u64::from(c.get(j).copied().unwrap_or(0));
        if x(0) % 4 == 3 {
            // Pending runs in the order given: out-of-order or repeated ids are refused.
            m.range_tombstones.push(ManifestRangeTombstone {
                lsn: x(1) << 8,
                start: vec![c.first().copied().unwrap_or(0); (x(2) % 5) as usize],
                end: (x(3) & 1 == 1).then(|| vec![0xff; (x(3) % 7) as usize]),
                pending: (0..x(2) % 3).map(|i| x(3) + i * x(1)).collect(),
            });
        } else if x(0) & 1 == 0 {
            m.levels.push(((x(1) % 70) as u32, x(2), x(3) * 4096));
        } else {
            m.segments.push(ManifestSegment {
                id: x(2),
                // A code the manifest cannot hold is written as a large segment by the
                // encoder: only the two real codes here (arbitrary codes reach the decoder
                // through the raw input above).
                kind: 1 + (x(1) % 2) as u8,
                owner: x(3),
                garbage: x(1) * 99,
            });
        }
    }
    let enc = encode_manifest(&m);
    match decode_manifest(&enc) {
        Ok(d) => {
            assert!(valid(&m), "accepted an invalid manifest {m:?}");
            assert_eq!(d, m);
        }
        Err(e) => {
            assert!(!valid(&m), "rejected a valid manifest {m:?}: {e}");
            assert!(e.is_corruption());
        }
    }
});
