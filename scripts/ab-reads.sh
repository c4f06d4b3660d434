#!/bin/bash
# Alternating Run C (and Run E) rounds for several hybridkv binaries (issue 17's read
# path): each binary first loads its own database of RECORDS pairs of MIX (paper
# configuration; a format change may make one binary's files unreadable to another), then
# ROUNDS times, binary after binary, runs OPS gets of YCSB C and, with RUN_E=1, OPS / 10
# scans of YCSB E on it.
# usage: scripts/ab-reads.sh ROUNDS RECORDS MIX OPS BIN... ; each BIN a `hybridkv` CLI
# binary (e.g. built at two commits with `cargo build --release -p hybridkv-cli` and
# copied). Prints per run: Kops/s, CPU us/op (user, kernel) and device reads per op;
# appends every load and run to ab-reads.jsonl in the current directory.
set -euo pipefail
R=$1; N=$2; MIX=$3; OPS=$4; shift 4
DB=$(mktemp -d)
trap 'rm -rf "$DB"' EXIT
common=(--config paper --records "$N" --mix "$MIX" --engines hybridkv --no-progress)
i=0
for B in "$@"; do
  i=$((i + 1))
  "$B" bench --phase load --workload a "${common[@]}" --db "$DB/db$i" --results ab-reads.jsonl > /dev/null 2>&1
done
workloads=c
if [ "${RUN_E:-0}" = 1 ]; then workloads="c e"; fi
for r in $(seq 1 "$R"); do
  i=0
  for B in "$@"; do
    i=$((i + 1))
    for w in $workloads; do
      n=$OPS
      if [ "$w" = e ]; then n=$((OPS / 10)); fi
      out="$DB/run.jsonl"
      rm -f "$out"
      "$B" bench --phase run --workload "$w" --ops "$n" "${common[@]}" --db "$DB/db$i" --results "$out" > /dev/null 2>&1
      cat "$out" >> ab-reads.jsonl
      python3 - "$(basename "$B")" "$r" "$out" <<'PY'
import json, sys
for line in open(sys.argv[3]):
    d = json.loads(line)
    ops = d["operations"]
    print(f"round {sys.argv[2]} {sys.argv[1]} Run {d['workload'].upper()}: "
          f"{d['throughput_kops']:.1f} Kops/s, CPU {d['cpu_us_per_op']:.2f} us/op "
          f"(user {d['cpu_user_seconds'] / ops * 1e6:.2f}, kernel {d['cpu_sys_seconds'] / ops * 1e6:.2f}), "
          f"{(d['device_reads'] or 0) / ops:.3f} device reads/op")
PY
    done
  done
done
