//! How many of a run's reads are the first read of their key in that run, by size class:
//! the reads no cache filled in the same process can answer except by holding the key's
//! leaf (or block) already. Replays the benchmark's own streams for one client thread (the
//! load, for each record's size class, then the run), so the counts are those of
//! `hybridkv bench --threads 1` with the same workload, mix, record count, operation count
//! and seed. The size classes are the load's: in the benchmark, an earlier run phase's
//! updates redraw the class of the keys they wrote (from the same mix, so the shares by
//! class stay the same in expectation).
//!
//! `cargo run --release -p hybridkv-ycsb --example first_touches -- [WORKLOAD=c] [MIX=MD]
//! [RECORDS=40000000] [OPS=2000000] [SEED=1497584450]`
//!
//! `docs/PERFORMANCE.md` (thirty-eighth round) uses it to bound the device reads per get a
//! fresh process can make: at least `first-touch share x (uncached share of the leaves +
//! large share)` for hybridkv, `first-touch share x uncached share of the data` for an
//! engine that keeps values in its blocks.

use hybridkv_ycsb::{Operation, SizeClass, ValueMix, Workload};
use std::collections::HashSet;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let letter = arg(0, "c").chars().next().unwrap_or('c');
    let mix: ValueMix = arg(1, "MD").parse()?;
    let records: u64 = arg(2, "40000000").parse()?;
    let ops: u64 = arg(3, "2000000").parse()?;
    let seed: u64 = arg(4, "1497584450").parse()?;

    let workload = Workload::core(letter)?
        .with_record_count(records)
        .with_operation_count(ops)
        .with_value_mix(mix)
        .with_seed(seed);
    // Each record's size class, as the load wrote it.
    let mut class = vec![SizeClass::Small; usize::try_from(records)?];
    for op in workload.load_generator(0) {
        if let Operation::Insert { key, value } = op {
            if let Some(c) = class.get_mut(usize::try_from(key.record())?) {
                *c = value.class;
            }
        }
    }
    let mut seen = HashSet::new();
    let (mut reads, mut first) = (0u64, [0u64; 3]);
    for op in workload.run_generator(0)? {
        let record = op.key().record();
        let is_read = matches!(
            op,
            Operation::Read { .. } | Operation::ReadModifyWrite { .. }
        );
        let new = seen.insert(record);
        if is_read {
            reads += 1;
            if new {
                let c = class
                    .get(usize::try_from(record)?)
                    .copied()
                    .unwrap_or(SizeClass::Small);
                first[c as usize] += 1;
            }
        }
    }
    let share = |n: u64| n as f64 / reads.max(1) as f64;
    let all: u64 = first.iter().sum();
    println!(
        "workload {letter}, mix {mix:?}, {records} records, {ops} ops, seed {seed}: {reads} reads, \
         {all} first reads of their key ({:.3} of the reads; small {:.3}, medium {:.3}, large {:.3})",
        share(all),
        share(first[0]),
        share(first[1]),
        share(first[2]),
    );
    Ok(())
}
