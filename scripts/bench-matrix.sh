#!/usr/bin/env bash
# The benchmark matrix behind docs/BENCHMARKS.md: for the value mixes S, SD and MD, Load A
# then Run A, B, C, D, E, F on one database per engine (hybridkv, RocksDB, BlobDB, fjall,
# fjall with key-value separation), plus the placement ablation (all in place, all in the
# log, Parallax-MS, -ML) on SD and MD Load A / Run A. Every engine gets a cache of a fifth of the
# loaded data and a memtable of a sixteenth of it (1-64 MiB; `hybridkv bench` defaults).
# Then it draws the plots and writes docs/BENCHMARKS.md.
#
# usage: scripts/bench-matrix.sh [RECORDS [OPS]]
#   RECORDS  records loaded per mix (default 4000000: several hours on a 2-core machine)
#   OPS      operations per run phase (default RECORDS/4; Run E, whose scans read up to
#            100 pairs each, runs OPS/10)
# environment:
#   BENCH_ENGINES      engines of the main matrix (default: `default` = all built peers)
#   BENCH_MATRIX_DIR   scratch directory for the databases (default: bench-matrix)
#   BENCH_NO_ROCKSDB=1 build without RocksDB/BlobDB (fast build; fewer peers)
#   BENCH_ABLATION_OPS operations of the ablation's Run A (default RECORDS)
set -euo pipefail
cd "$(dirname "$0")/.."

records="${1:-4000000}"
ops="${2:-$((records / 4))}"
scan_ops=$((ops / 10))
if [ "$scan_ops" -lt 1 ]; then scan_ops=1; fi
engines="${BENCH_ENGINES:-default}"
scratch="${BENCH_MATRIX_DIR:-bench-matrix}"
docs=docs/bench
results="$docs/results.jsonl"
label="matrix-$records"

if [ "${BENCH_NO_ROCKSDB:-0}" = 1 ]; then
  cargo build --release -p hybridkv-cli >&2
  bin=target/release/hybridkv
else
  bin=$(BENCH_BUILD_ONLY=1 ./scripts/bench.sh)
fi

mkdir -p "$scratch" "$docs"
: >"$results"
commands="$scratch/commands.txt"
: >"$commands"
started=$(date +%s)

# Runs `hybridkv ARGS...` and records the command (as a user would type it).
hk() {
  echo "hybridkv $*" >>"$commands"
  "$bin" "$@"
}

common=(--records "$records" --results "$results" --label "$label")
for mix in S SD MD; do
  db="$scratch/db-$mix"
  rm -rf "$db"
  hk bench --phase load --workload a --mix "$mix" --engines "$engines" --db "$db" "${common[@]}"
  for w in a b c d e f; do
    n=$ops
    if [ "$w" = e ]; then n=$scan_ops; fi
    hk bench --phase run --workload "$w" --ops "$n" --mix "$mix" --engines "$engines" --db "$db" "${common[@]}"
  done
  rm -rf "$db"
done

# Placement ablation (issue #5; paper Figure 26): hybrid placement against all-in-place,
# all-in-log, Parallax-MS and Parallax-ML, Load A / Run A on SD and MD, in one run, under
# its own label. As in the paper, Run A lasts long enough for the garbage collector to work
# through most of the logs (here: as many operations as records); a shorter run ends before
# the log-heavy modes pay for the garbage they leave.
ablation_ops="${BENCH_ABLATION_OPS:-$records}"
for mix in SD MD; do
  db="$scratch/db-ablation-$mix"
  rm -rf "$db"
  hk bench --phase all --workload a --ops "$ablation_ops" --mix "$mix" \
    --engines hybridkv,hybridkv-inplace,hybridkv-alllog,hybridkv-ms,hybridkv-ml --db "$db" \
    --records "$records" --results "$results" --label "ablation-$records"
  rm -rf "$db"
done

elapsed=$(( $(date +%s) - started ))
machine="$scratch/machine.txt"
{
  echo "\$ nproc"; nproc
  echo "\$ lscpu | grep -vE '^(Flags|Vulnerability)'"; (lscpu 2>/dev/null || echo "(lscpu not available)") | grep -vE '^(Flags|Vulnerability)'
  echo "\$ free -h"; free -h 2>/dev/null || echo "(free not available)"
  echo "\$ uname -r"; uname -r
  echo "\$ df -h ."; df -h . 2>/dev/null || true
} >"$machine"
{
  echo "# reproduce: ./scripts/bench-matrix.sh $records $ops   (took $((elapsed / 60)) min here)"
  echo "# which runs, with hybridkv = the binary ./scripts/bench.sh builds:"
  sed -e "s|$scratch/|bench-matrix/|g" "$commands"
  echo "hybridkv bench plot --results $results --out $docs"
  echo "hybridkv bench report --results $results --plots bench --machine machine.txt --commands commands.txt --notes $docs/notes.md > docs/BENCHMARKS.md"
} >"$scratch/commands-doc.txt"

"$bin" bench plot --results "$results" --out "$docs"
banner=""
if [ "$records" -lt 4000000 ]; then
  banner="Small-scale run: $records records per mix and $ops operations per run phase (the full matrix loads 4,000,000). The figures show the method and the direction of the results, not their size at scale: reproduce the full run with \`./scripts/bench-matrix.sh\` (several hours on this 2-core machine)."
fi
notes=()
if [ -f "$docs/notes.md" ]; then notes=(--notes "$docs/notes.md"); fi
"$bin" bench report --results "$results" --plots bench --machine "$machine" \
  --commands "$scratch/commands-doc.txt" ${banner:+--banner "$banner"} "${notes[@]}" >docs/BENCHMARKS.md
echo "wrote docs/BENCHMARKS.md and the plots in $docs (results: $results; took $((elapsed / 60)) min)"
