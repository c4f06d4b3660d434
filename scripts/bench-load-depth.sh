#!/usr/bin/env bash
# Issue 18's figures: Load A at the paper's depth (40 million pairs, the memtable the data
# over 256: three levels or more), with 1 and with 2 client threads, hybridkv then RocksDB
# (same host, one after the other, each database deleted after its load), in the paper's
# configuration (direct I/O, Bloom filters off) or the users' (`CONFIG=users`: buffered
# I/O, Bloom filters on, the whole process under one memory limit).
#
# usage: scripts/bench-load-depth.sh [MIX=SD] [RECORDS=40000000] [THREADS="1 2"]
#        [ENGINES="hybridkv rocksdb"] [RESULTS=docs/bench/load-40m-<config>-<mix>.jsonl]
# Prints each load's table line (throughput, CPU us/op); the results file holds user and
# kernel CPU seconds per run (cpu_user_seconds, cpu_sys_seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
mix=${1:-SD}
records=${2:-40000000}
threads=${3:-1 2}
engines=${4:-hybridkv rocksdb}
config=${CONFIG:-paper}
mix_lower=$(echo "$mix" | tr '[:upper:]' '[:lower:]')
results=${5:-docs/bench/load-40m-$config-$mix_lower.jsonl}
bin=$(BENCH_BUILD_ONLY=1 ./scripts/bench.sh)
scratch=${BENCH_MATRIX_DIR:-bench-matrix}
mkdir -p "$scratch"
for t in $threads; do
  for engine in $engines; do
    db="$scratch/db-load-$config-$mix-$engine"
    rm -rf "$db"
    t0=$(date +%s)
    "$bin" bench --phase load --workload a --config "$config" --records "$records" \
      --mix "$mix" --engines "$engine" --threads "$t" --db "$db" --results "$results" \
      --label "load-depth-$records-$config-t$t" --no-progress 2>&1 | grep -E "^Load A|^hybridkv|^rocksdb"
    echo "# load $engine, $t thread(s): $(($(date +%s) - t0)) s"
    rm -rf "$db"
  done
done
echo "results appended to $results"
