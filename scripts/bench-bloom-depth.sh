#!/usr/bin/env bash
# Issue 17's "the same with Bloom filters on": the paper's configuration (direct I/O, the
# cache a fifth of the data up to 2 GiB) with Bloom filters on for every engine, at the
# paper's depth: Load A, Run A, Run B and Run C (OPS operations each) and Run E (OPS / 10),
# one engine after the other on the same host, each database deleted after its runs.
#
# usage: scripts/bench-bloom-depth.sh [MIX=SD] [RECORDS=40000000] [OPS=2000000]
#        [ENGINES="hybridkv rocksdb"] [RESULTS=docs/bench/bloom-40m-<mix>.jsonl]
# BENCH_BLOOM=off runs the same with Bloom filters off (the paper's own configuration;
# results default to docs/bench/depth-40m-<mix>.jsonl). BENCH_EXTRA adds flags to every
# bench command (e.g. BENCH_EXTRA="--medium-merge-level second-to-last").
set -euo pipefail
cd "$(dirname "$0")/.."
mix=${1:-SD}
records=${2:-40000000}
ops=${3:-2000000}
engines=${4:-hybridkv rocksdb}
mix_lower=$(echo "$mix" | tr '[:upper:]' '[:lower:]')
bloom=${BENCH_BLOOM:-on}
if [ "$bloom" = off ]; then
  bloom_flag=()
  label="depth-$records-paper"
  results=${5:-docs/bench/depth-40m-$mix_lower.jsonl}
else
  bloom_flag=(--bloom)
  label="depth-$records-paper-bloom"
  results=${5:-docs/bench/bloom-40m-$mix_lower.jsonl}
fi
bin=$(BENCH_BUILD_ONLY=1 ./scripts/bench.sh)
scratch=${BENCH_MATRIX_DIR:-bench-matrix}
mkdir -p "$scratch"
for engine in $engines; do
  db="$scratch/db-bloom-$bloom-$mix-$engine"
  rm -rf "$db"
  common=(--config paper "${bloom_flag[@]}" --records "$records" --mix "$mix" --engines "$engine"
    --db "$db" --results "$results" --label "$label")
  # shellcheck disable=SC2206 # BENCH_EXTRA is a list of flags
  common+=(${BENCH_EXTRA:-})
  t0=$(date +%s)
  "$bin" bench --phase load --workload a "${common[@]}"
  echo "# load $engine: $(($(date +%s) - t0)) s"
  for w in a b c e; do
    n=$ops
    if [ "$w" = e ]; then n=$((ops / 10)); fi
    t0=$(date +%s)
    "$bin" bench --phase run --workload "$w" --ops "$n" "${common[@]}"
    echo "# run $w $engine: $(($(date +%s) - t0)) s"
  done
  rm -rf "$db"
done
echo "results appended to $results"
