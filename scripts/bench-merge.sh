#!/usr/bin/env bash
# Read-modify-write as merge (issue 19): YCSB F with its read-modify-write as a 16-byte
# field patch folded by the engine's merge operator (the same operator in hybridkv and
# RocksDB), beside F as get-then-put, on the SD mix and on the L mix (KDSep's update-heavy
# case: small deltas on large values, zipfian). One engine at a time, same binary, same
# machine; results appended to docs/bench/merge.jsonl (or $BENCH_MERGE_RESULTS).
# hybridkv runs twice: as it is, and with KDSep's delta separation (hybridkv-kdsep).
# Between the two F runs, an update-heavy run (scripts/workloads/update-heavy.properties:
# 90% read-modify-writes as merges, 10% reads, zipfian).
#
# Usage: ./scripts/bench-merge.sh [records] [ops]      (defaults: 4000000 2000000)
set -euo pipefail
cd "$(dirname "$0")/.."
records="${1:-4000000}"
ops="${2:-2000000}"
results="${BENCH_MERGE_RESULTS:-docs/bench/merge.jsonl}"
root="${BENCH_MERGE_DIR:-bench-merge}"
bin=$(BENCH_BUILD_ONLY=1 ./scripts/bench.sh)
engines="${BENCH_MERGE_ENGINES:-hybridkv hybridkv-kdsep rocksdb}"
mixes="${BENCH_MERGE_MIXES:-SD L}"
for mix in $mixes; do
  for engine in $engines; do
    db="$root/db-$mix"
    rm -rf "$db/$engine"
    common=(--config paper --records "$records" --mix "$mix" --engines "$engine" --db "$db"
      --results "$results" --no-progress)
    echo "== $engine $mix: load" >&2
    "$bin" bench --phase load --workload a "${common[@]}" --label "merge-$records"
    echo "== $engine $mix: Run F, read-modify-write as merge" >&2
    "$bin" bench --phase run --workload f --ops "$ops" --rmw merge "${common[@]}" --label "f-merge-$records"
    echo "== $engine $mix: update-heavy (90% read-modify-write as merge, 10% reads)" >&2
    "$bin" bench --phase run --workload-file scripts/workloads/update-heavy.properties --ops "$ops" --rmw merge "${common[@]}" --label "u-merge-$records"
    echo "== $engine $mix: Run F, read-modify-write as get-then-put" >&2
    "$bin" bench --phase run --workload f --ops "$ops" --rmw read-write "${common[@]}" --label "f-getput-$records"
    rm -rf "$db/$engine"
  done
done
