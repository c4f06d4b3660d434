//! Write-batch payloads (`docs/FORMAT.md`, "Batch payload"), the decoder the small-log
//! replay and the commit path use.
//!
//! Input: `[count u32][payload]` decoded as is; any accepted payload re-encodes to exactly
//! the same bytes; the decoder allocates in proportion to the payload, never to `count`.
//! Then the same bytes read as puts and deletes built through `WriteBatch` must decode
//! back to themselves.
#![no_main]

use hybridkv::fuzzing::{decode_batch, encode_batch, roundtrip_batch, Op};
use hybridkv_fuzz::bounded;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, payload)) = data.split_first_chunk::<4>() else {
        return;
    };
    let count = u32::from_le_bytes(*head);
    let decoded = bounded("decode_batch", payload.len(), 16, 1024, || {
        decode_batch(payload, count)
    });
    if let Ok(ops) = &decoded {
        // Keyspace switches are not operations: they take no LSN and are not counted.
        let counted = ops.iter().filter(|op| !matches!(op, Op::Keyspace(_))).count();
        assert_eq!(counted, count as usize);
        assert_eq!(encode_batch(ops), payload, "encode(decode(x)) != x");
    }

    // decode(encode(v)) == v for batches built through the public builder.
    let mut ops = Vec::new();
    let mut rest = payload;
    while let [k, v, tail @ ..] = rest {
        let key = vec![*k; usize::from(*k % 16) + 1];
        let value = (v % 4 != 0).then(|| vec![*v; usize::from(*v) * 3]);
        ops.push((key, value));
        rest = tail;
    }
    let want: Vec<Op> = ops
        .iter()
        .map(|(k, v)| match v {
            Some(v) => Op::Put(k.clone(), v.clone()),
            None => Op::Delete(k.clone()),
        })
        .collect();
    assert_eq!(roundtrip_batch(&ops).expect("builder output decodes"), want);
    assert_eq!(
        decode_batch(&encode_batch(&want), want.len() as u32).expect("decodes"),
        want
    );
});
