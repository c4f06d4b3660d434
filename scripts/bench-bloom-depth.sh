#!/usr/bin/env bash
# Issue 17's "the same with Bloom filters on": the paper's configuration (direct I/O, the
# cache a fifth of the data up to 2 GiB) with Bloom filters on for every engine, at the
# paper's depth: Load A, Run A, Run B and Run C (OPS operations each) and Run E (OPS / 10),
# the engines taking turns phase by phase on the same host (below), each database deleted
# after its runs.
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
# The engines take turns phase by phase (every load, then Run A of each, Run B of each, ...,
# the order reversed from one phase to the next), so that each phase's ratio compares runs
# minutes apart: this host's device speed drifts by tens of percent within an hour, and
# one engine's whole sequence after the other's let the drift decide ratios (the 40M MD
# Bloom-on run at ca58a2b: RocksDB's gets ran 1.3-1.8x faster than an hour before at the
# same device reads per get). Both databases exist at once: about 25 GB at 40M pairs.
# BENCH_INTERLEAVE=0 runs one engine's whole sequence after the other's, as before.
run_phase() { # engine phase workload ops
  local engine=$1 phase=$2 w=$3 n=$4 t0
  local db="$scratch/db-bloom-$bloom-$mix-$engine"
  local common=(--config paper "${bloom_flag[@]}" --records "$records" --mix "$mix" --engines "$engine"
    --db "$db" --results "$results" --label "$label")
  # shellcheck disable=SC2206 # BENCH_EXTRA is a list of flags
  common+=(${BENCH_EXTRA:-})
  settle
  t0=$(date +%s)
  if [ "$phase" = load ]; then
    rm -rf "$db"
    "$bin" bench --phase load --workload a "${common[@]}"
  else
    "$bin" bench --phase run --workload "$w" --ops "$n" "${common[@]}"
  fi
  echo "# $phase $w $engine: $(($(date +%s) - t0)) s"
}
# Before each phase the page cache's dirty pages are written out and the device is left
# idle for BENCH_SETTLE seconds (default 30), outside the measured time. Why (a suspicion,
# not a measurement): this virtual disk is a file on its host, which may go on writing what
# a phase wrote after the phase's process has exited; in two runs with turns and no pause,
# hybridkv's Run A, started right after RocksDB's (whose merges wrote 10 bytes per byte of
# the run), read at a third of its speed of the run before (mean read latency 162 us
# against 48, at the same reads per get).
settle() { sync; sleep "${BENCH_SETTLE:-30}"; }
ops_of() { if [ "$1" = e ]; then echo $((ops / 10)); else echo "$ops"; fi; }
read -r -a order <<<"$engines"
if [ "${BENCH_INTERLEAVE:-1}" = 1 ]; then
  for engine in "${order[@]}"; do run_phase "$engine" load a 0; done
  for w in a b c e; do
    mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
    for engine in "${order[@]}"; do run_phase "$engine" run "$w" "$(ops_of "$w")"; done
  done
  for engine in "${order[@]}"; do rm -rf "$scratch/db-bloom-$bloom-$mix-$engine"; done
else
  for engine in "${order[@]}"; do
    run_phase "$engine" load a 0
    for w in a b c e; do run_phase "$engine" run "$w" "$(ops_of "$w")"; done
    rm -rf "$scratch/db-bloom-$bloom-$mix-$engine"
  done
fi
echo "results appended to $results"
