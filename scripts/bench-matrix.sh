#!/usr/bin/env bash
# The benchmark matrix behind docs/BENCHMARKS.md, at the paper's depth: for the value mixes
# SD and MD, YCSB Load A then Run A, C and E on one database per engine (hybridkv, RocksDB,
# BlobDB, fjall, fjall with key-value separation), in two configurations:
#   paper  direct I/O, a fixed cache (a fifth of the data, at most 2 GiB), Bloom filters off;
#   users  buffered I/O, Bloom filters on, the whole process under one memory limit that
#          includes the page cache (a cgroup; needs root or a delegated cgroup);
# then the placement ablation (hybrid, all in place, all in the log, Parallax-MS, -ML) on SD
# and MD, Load A / Run A, paper configuration. Every engine gets the same memtable: the
# data over 256 (at most 64 MiB), so every tree is three levels deep or more.
# Then it draws the plots and writes docs/BENCHMARKS.md.
#
# usage: scripts/bench-matrix.sh [RECORDS [OPS]]
#   RECORDS  records loaded per mix (default 40000000, the paper's depth: 10 GB of SD
#            pairs; many hours on a 2-core machine)
#   OPS      operations per run phase (default RECORDS/10; Run E, whose scans read up to
#            100 pairs each, runs OPS/10)
# environment:
#   BENCH_ENGINES      engines of the main matrix, space-separated (default: hybridkv and
#                      every built peer); one at a time, its database deleted after its
#                      runs, so the disk holds one engine's data at a time
#   BENCH_CONFIGS      configurations (default: "paper users")
#   BENCH_MIXES        value mixes (default: "SD MD")
#   BENCH_MATRIX_DIR   scratch directory for the databases (default: bench-matrix)
#   BENCH_NO_ROCKSDB=1 build without RocksDB/BlobDB (fast build; fewer peers)
#   BENCH_ABLATION_OPS operations of the ablation's Run A (default OPS)
#   BENCH_NO_ABLATION=1 skip the ablation
#   BENCH_NO_MATRIX=1  skip the main matrix (run only the ablation)
#   BENCH_ABLATION_ENGINES placements of the ablation (default: hybridkv hybridkv-inplace
#                      hybridkv-alllog hybridkv-ms hybridkv-ml)
#   BENCH_APPEND=1     append to the results instead of starting them anew (build the matrix
#                      in pieces, e.g. one configuration per invocation; the report covers
#                      every result in the file)
set -euo pipefail
cd "$(dirname "$0")/.."

records="${1:-40000000}"
ops="${2:-$((records / 10))}"
scan_ops=$((ops / 10))
if [ "$scan_ops" -lt 1 ]; then scan_ops=1; fi
if [ "${BENCH_NO_ROCKSDB:-0}" = 1 ]; then
  engines="${BENCH_ENGINES:-hybridkv fjall fjall-kv}"
else
  engines="${BENCH_ENGINES:-hybridkv rocksdb blobdb fjall fjall-kv}"
fi
configs="${BENCH_CONFIGS:-paper users}"
mixes="${BENCH_MIXES:-SD MD}"
scratch="${BENCH_MATRIX_DIR:-bench-matrix}"
docs=docs/bench
results="$docs/results.jsonl"
label="depth-$records"

if [ "${BENCH_NO_ROCKSDB:-0}" = 1 ]; then
  cargo build --release -p hybridkv-cli >&2
  bin=target/release/hybridkv
else
  bin=$(BENCH_BUILD_ONLY=1 ./scripts/bench.sh)
fi

mkdir -p "$scratch" "$docs"
commands="$docs/commands.txt"
# The list of invocations behind the results file (docs/bench/invocations.txt, whose lines
# a person may annotate): this one is written before it runs, with every setting that
# shapes it, so the list never describes results that are gone and a run that dies leaves
# its line beside its partial rows. Without BENCH_APPEND=1 it starts the list anew.
invocations="$docs/invocations.txt"
settings=""
for v in BENCH_APPEND BENCH_NO_ABLATION BENCH_NO_MATRIX BENCH_NO_ROCKSDB BENCH_ABLATION_ENGINES \
  BENCH_ABLATION_OPS BENCH_MATRIX_DIR BENCH_CONFIGS BENCH_MIXES BENCH_ENGINES; do
  if [ -n "${!v+x}" ]; then settings+="$v='${!v}' "; fi
done
this="# ${settings}./scripts/bench-matrix.sh $records $ops   (started $(date -u '+%Y-%m-%d %H:%M') UTC at $(git rev-parse --short HEAD 2>/dev/null || echo 'an unknown commit'))"
if [ "${BENCH_APPEND:-0}" != 1 ]; then
  : >"$results"
  : >"$commands"
  echo "$this" >"$invocations"
else
  echo "$this" >>"$invocations"
fi
started=$(date +%s)

# Runs `hybridkv ARGS...` and records the command (as a user would type it) with the time
# it took.
hk() {
  local t0=$(date +%s)
  "$bin" "$@"
  echo "hybridkv $*   # $(( $(date +%s) - t0 )) s" >>"$commands"
}

if [ "${BENCH_NO_MATRIX:-0}" = 1 ]; then configs=""; fi
for config in $configs; do
  for mix in $mixes; do
    for engine in $engines; do
      db="$scratch/db-$config-$mix"
      rm -rf "$db"
      common=(--config "$config" --records "$records" --mix "$mix" --engines "$engine" --db "$db"
        --results "$results" --label "$label-$config")
      hk bench --phase load --workload a "${common[@]}"
      for w in a c e; do
        n=$ops
        if [ "$w" = e ]; then n=$scan_ops; fi
        hk bench --phase run --workload "$w" --ops "$n" "${common[@]}"
      done
      rm -rf "$db"
    done
  done
done

# Placement ablation (paper Figure 26): hybrid placement against all-in-place, all-in-log,
# Parallax-MS and Parallax-ML, Load A / Run A on SD and MD, at the same depth.
ablation_ops="${BENCH_ABLATION_OPS:-$ops}"
if [ "${BENCH_NO_ABLATION:-0}" != 1 ]; then
  for mix in $mixes; do
    # One placement at a time, its database deleted after its runs: five databases of
    # 40 million pairs do not fit on the disk together.
    for variant in ${BENCH_ABLATION_ENGINES:-hybridkv hybridkv-inplace hybridkv-alllog hybridkv-ms hybridkv-ml}; do
      db="$scratch/db-ablation-$mix"
      rm -rf "$db"
      hk bench --phase all --workload a --ops "$ablation_ops" --mix "$mix" \
        --engines "$variant" --db "$db" \
        --records "$records" --results "$results" --label "ablation-$records"
      rm -rf "$db"
    done
  done
fi

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
  echo "# the invocations behind the results file (this last one took $((elapsed / 60)) min), commands below, each with its time; a later row of the same engine, mix, phase, workload and label replaces an earlier one:"
  cat "$invocations"
  echo "# which runs, with hybridkv = the binary ./scripts/bench.sh builds:"
  sed -e "s|$scratch/|bench-matrix/|g" "$commands"
  echo "hybridkv bench plot --results $results --out $docs"
  echo "hybridkv bench report --results $results --plots bench --machine machine.txt --commands commands.txt --notes $docs/notes.md > docs/BENCHMARKS.md"
} >"$scratch/commands-doc.txt"

"$bin" bench plot --results "$results" --out "$docs"
banner=""
if [ "$records" -lt 40000000 ]; then
  banner="Small-scale run: $records records per mix and $ops operations per run phase (the full matrix loads 40,000,000, the paper's depth). Reproduce the full run with \`./scripts/bench-matrix.sh\` (many hours on this 2-core machine)."
fi
notes=()
if [ -f "$docs/notes.md" ]; then notes=(--notes "$docs/notes.md"); fi
"$bin" bench report --results "$results" --plots bench --machine "$machine" \
  --commands "$scratch/commands-doc.txt" ${banner:+--banner "$banner"} "${notes[@]}" >docs/BENCHMARKS.md
echo "wrote docs/BENCHMARKS.md and the plots in $docs (results: $results; took $((elapsed / 60)) min)"
