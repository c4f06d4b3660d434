#!/usr/bin/env bash
# The three read modes on one database (issue 17; docs/PERFORMANCE.md, "Three read modes"):
# loads RECORDS pairs of MIX in the paper's configuration, updates and reads them once
# (Run A, Run C) so that several levels and the transient log hold data, then runs Run C and
# Run E on a fresh copy per mode: direct (O_DIRECT), buffered (pread through the page
# cache) and mmap (--mmap-reads), alternating, ROUNDS times, under a memory limit of
# LIMIT_MIB for the whole process (0: none). The page cache is dropped before each run
# when this runs as root.
#
# usage: scripts/read-modes.sh [RECORDS=2000000] [MIX=MD] [LIMIT_MIB=400] [ROUNDS=2] [WORKDIR=./read-modes]
set -euo pipefail
cd "$(dirname "$0")/.."
records=${1:-2000000}
mix=${2:-MD}
limit=${3:-400}
rounds=${4:-2}
work=${5:-./read-modes}
bin=$(BENCH_BUILD_ONLY=1 ./scripts/bench.sh)
mkdir -p "$work"
work=$(cd "$work" && pwd)
results="$work/read-modes.jsonl"
common=(--records "$records" --mix "$mix" --config paper --engines hybridkv --results "$results")
if [ ! -d "$work/loaded" ]; then
  "$bin" bench --phase load "${common[@]}" --db "$work/loaded"
  "$bin" bench --phase run --workload a --ops "$((records / 2))" "${common[@]}" --db "$work/loaded"
  "$bin" bench --phase run --workload c --ops "$((records / 2))" "${common[@]}" --db "$work/loaded"
fi
for workload in c e; do
  ops=$((records / 10))
  [ "$workload" = e ] && ops=$((records / 100))
  for round in $(seq "$rounds"); do
    for mode in direct buffered mmap; do
      case $mode in
        direct) flags=(--direct-io on) ;;
        buffered) flags=(--direct-io off) ;;
        mmap) flags=(--direct-io off --mmap-reads) ;;
      esac
      rm -rf "$work/run"
      cp -a "$work/loaded" "$work/run"
      sync
      if [ "$(id -u)" = 0 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
      echo "== Run ${workload^^}, $mode, round $round"
      "$bin" bench --phase run --workload "$workload" --ops "$ops" "${common[@]}" "${flags[@]}" \
        --memory-limit-mib "$limit" --db "$work/run" | grep -E '^hybridkv |reads:'
    done
  done
done
rm -rf "$work/run"
echo "results appended to $results"
