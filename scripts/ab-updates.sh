#!/bin/bash
# Alternating runs of Run A's updates (issue 18's "CPU per update") for several hybridkv
# binaries: each binary loads its own database of RECORDS pairs of MIX (paper
# configuration), then runs 2 million operations of scripts/workloads/update-only.properties
# (YCSB A's zipfian keys, every operation an update) on it.
# usage: scripts/ab-updates.sh ROUNDS RECORDS MIX BIN... ; each BIN a `hybridkv` CLI binary
# (e.g. built at two commits with `cargo build --release -p hybridkv-cli` and copied).
# Prints each update run's table line (CPU us/op); appends every load and run to
# ab-updates.jsonl in the current directory (engine_stats hold GC and compaction figures).
set -euo pipefail
R=$1; N=$2; MIX=$3; shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
DB=$(mktemp -d)
trap 'rm -rf "$DB"' EXIT
for r in $(seq 1 "$R"); do
  for B in "$@"; do
    rm -rf "$DB/db"
    common=(--config paper --records "$N" --mix "$MIX" --engines hybridkv --db "$DB/db" --no-progress --results ab-updates.jsonl)
    "$B" bench --phase load --workload a "${common[@]}" > /dev/null 2>&1
    echo -n "$(basename "$B") round $r: "
    "$B" bench --phase run --workload-file "$HERE/workloads/update-only.properties" --ops 2000000 "${common[@]}" 2>&1 | grep -E "^Run "
  done
done
