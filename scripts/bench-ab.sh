#!/usr/bin/env bash
# A/B of two hybridkv builds on the same data: one load (by the second build), copied, then
# each run phase by both builds, each on its own copy, the order alternating from one
# workload to the next. Both copies start from the same bytes, so the two builds' figures
# differ by what the builds do, not by what a load happened to leave (merges pending,
# runs in L1); the device's mood still moves both, so quote ratios of one invocation.
#
# usage: scripts/bench-ab.sh BIN_A BIN_B [MIX=SD] [RECORDS=40000000] [OPS=2000000]
#        [WORKLOADS="a b c"]
# BIN_A, BIN_B: `hybridkv` binaries (e.g. copies of what `BENCH_BUILD_ONLY=1
# ./scripts/bench.sh` printed at two commits). BENCH_EXTRA adds flags to every bench
# command (e.g. "--bloom"); BENCH_AB_DIR (default bench-ab) holds the databases (two
# copies: about 22 GB at 40M SD pairs) and the results, ab-a.jsonl and ab-b.jsonl.
set -euo pipefail
a=${1:?usage: scripts/bench-ab.sh BIN_A BIN_B [MIX] [RECORDS] [OPS] [WORKLOADS]}
b=${2:?usage: scripts/bench-ab.sh BIN_A BIN_B [MIX] [RECORDS] [OPS] [WORKLOADS]}
mix=${3:-SD}
records=${4:-40000000}
ops=${5:-2000000}
workloads=${6:-a b c}
dir=${BENCH_AB_DIR:-bench-ab}
mkdir -p "$dir"
# shellcheck disable=SC2206 # BENCH_EXTRA is a list of flags
common=(--config paper --records "$records" --mix "$mix" --engines hybridkv ${BENCH_EXTRA:-})
rm -rf "$dir/db-a" "$dir/db-b"
t0=$(date +%s)
"$b" bench --phase load --workload a "${common[@]}" --db "$dir/db-b" \
  --results "$dir/ab-load.jsonl" --label ab-load
cp -a "$dir/db-b" "$dir/db-a"
echo "# load and copy: $(($(date +%s) - t0)) s"
first=a
for w in $workloads; do
  if [ "$first" = a ]; then order="a b"; first=b; else order="b a"; first=a; fi
  for who in $order; do
    if [ "$who" = a ]; then bin=$a; else bin=$b; fi
    n=$ops
    if [ "$w" = e ]; then n=$((ops / 10)); fi
    t0=$(date +%s)
    "$bin" bench --phase run --workload "$w" --ops "$n" "${common[@]}" --db "$dir/db-$who" \
      --results "$dir/ab-$who.jsonl" --label "ab-$who"
    echo "# run $w by $who ($bin): $(($(date +%s) - t0)) s"
  done
done
rm -rf "$dir/db-a" "$dir/db-b"
echo "# results: $dir/ab-a.jsonl and $dir/ab-b.jsonl (throughput_kops, cpu_us_per_op, device_reads, engine_stats)"
