#!/usr/bin/env bash
# Issue 17's "the same with Bloom filters on": the paper's configuration (direct I/O, the
# cache a fifth of the data up to 2 GiB) with Bloom filters on for every engine, at the
# paper's depth: Load A, Run A, Run B and Run C (OPS operations each) and Run E (OPS / 10),
# one engine after the other on the same host (BENCH_INTERLEAVE=1: taking turns, below),
# each database deleted after its runs.
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
# One engine's whole sequence (load, Run A, B, C, E), then the other's, each database
# deleted after its runs. BENCH_INTERLEAVE=1 lets the engines take turns phase by phase
# instead (every load, then Run A of each, Run B of each, ..., the order reversed from one
# phase to the next; both databases on disk at once, about 25 GB at 40M pairs). Not the
# default: in three runs with turns, hybridkv's Run A (after RocksDB's load and Run A) ran
# 11.2-14.0 Kops/s at a mean read latency of 131-162 us, against 35.5 Kops/s and 48 us one
# engine after the other, at the same device reads per get, and a sync with 30 idle seconds
# before each phase did not change it. The likely cause: this virtual disk is a file on its
# host, which answers offsets it holds in its own cache (recently read or written) faster,
# and RocksDB's load, moving about 14 device bytes per byte it loads, pushes out what
# hybridkv's load left there. One engine after the other, each runs after its own load.
run_phase() { # engine phase workload ops
  local engine=$1 phase=$2 w=$3 n=$4 t0
  local db="$scratch/db-bloom-$bloom-$mix-$engine"
  local common=(--config paper "${bloom_flag[@]}" --records "$records" --mix "$mix" --engines "$engine"
    --db "$db" --results "$results" --label "$label")
  # shellcheck disable=SC2206 # BENCH_EXTRA is a list of flags
  common+=(${BENCH_EXTRA:-})
  t0=$(date +%s)
  if [ "$phase" = load ]; then
    rm -rf "$db"
    "$bin" bench --phase load --workload a "${common[@]}"
  else
    "$bin" bench --phase run --workload "$w" --ops "$n" "${common[@]}"
  fi
  echo "# $phase $w $engine: $(($(date +%s) - t0)) s"
}
ops_of() { if [ "$1" = e ]; then echo $((ops / 10)); else echo "$ops"; fi; }
read -r -a order <<<"$engines"
if [ "${BENCH_INTERLEAVE:-0}" = 1 ]; then
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
