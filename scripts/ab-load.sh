#!/bin/bash
# Alternating Load A runs of several hybridkv binaries (A/B comparisons of the write path).
# usage: scripts/ab-load.sh ROUNDS RECORDS MIX BIN... ; each BIN a `hybridkv` CLI binary
# (e.g. built at two commits with `cargo build --release -p hybridkv-cli` and copied).
# Prints each run's table line; appends every run to ab-load.jsonl (cpu_user_seconds,
# cpu_sys_seconds, cpu_us_per_op per run) in the current directory. CONFIG=users runs the
# users' configuration (buffered I/O, Bloom filters, a memory limit) instead of the paper's;
# THREADS=2 loads with two client threads (default 1).
set -euo pipefail
R=$1; N=$2; MIX=$3; shift 3
DB=$(mktemp -d)
trap 'rm -rf "$DB"' EXIT
for r in $(seq 1 "$R"); do
  for B in "$@"; do
    rm -rf "$DB/db"
    echo -n "$(basename "$B") round $r: "
    "$B" bench --phase load --records "$N" --mix "$MIX" --config "${CONFIG:-paper}" --engines hybridkv --threads "${THREADS:-1}" \
      --db "$DB/db" --no-progress --results ab-load.jsonl 2>&1 | grep -E "^Load A"
  done
done
