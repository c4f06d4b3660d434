#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for SECONDS each (default 30), one after another,
# and prints how many inputs each one executed.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Installs cargo-fuzz if it is missing. Uses the installed toolchain with
# RUSTC_BOOTSTRAP=1 (cargo-fuzz passes nightly-only flags such as -Zsanitizer=address).
# New inputs libFuzzer finds go to fuzz/corpus-work/<target>/ (ignored by git); the
# committed seeds in fuzz/corpus/<target>/ are only read. Crashes land in
# fuzz/artifacts/<target>/ and make the script exit non-zero.
set -euo pipefail

secs="${1:-30}"
shift || true
cd "$(dirname "$0")/../fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz
fi

export RUSTC_BOOTSTRAP=1
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi

mkdir -p logs
failed=()
declare -A execs
for t in "${targets[@]}"; do
    mkdir -p "corpus-work/$t" "corpus/$t"
    log="logs/$t.log"
    echo "== $t (${secs}s)" >&2
    status=0
    cargo fuzz run "$t" "corpus-work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=60 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    n=$(grep -a -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    execs[$t]="${n:-?}"
    if [ "$status" -ne 0 ]; then
        failed+=("$t")
        echo "   FAILED (exit $status); see fuzz/$log and fuzz/artifacts/$t/" >&2
        tail -n 30 "$log" >&2
    fi
done

echo
printf '%-16s %s\n' target executions
for t in "${targets[@]}"; do
    printf '%-16s %s\n' "$t" "${execs[$t]}"
done
if [ "${#failed[@]}" -ne 0 ]; then
    echo "failed: ${failed[*]}" >&2
    exit 1
fi
