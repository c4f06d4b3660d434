#!/usr/bin/env bash
# The main job (README's first command): builds `hybridkv` with RocksDB and BlobDB as peers
# and runs the YCSB benchmark. Extra arguments go to `hybridkv bench` (see
# `hybridkv bench --help`); with none it runs the default: Load A then Run A on the SD mix
# with hybridkv, RocksDB, BlobDB, fjall and fjall with key-value separation, then prints the
# comparison.
#
# On a fresh machine it installs the Rust toolchain and clang/libclang (the rocksdb crate's
# bindgen needs them). RocksDB's C++ is compiled once, in release mode with
# `-C target-cpu=native` (hardware CRC32C) and without compression libraries, into its own
# target directory (default: ../target-rocksdb next to the repository; override with
# HYBRIDKV_ROCKSDB_TARGET_DIR), so it never locks or invalidates target/.
#
# BENCH_BUILD_ONLY=1 builds and prints the binary's path instead of running it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

note() { echo "bench.sh: $*" >&2; }

if ! command -v cargo >/dev/null 2>&1; then
  note "installing the Rust toolchain (rustup, minimal profile)"
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >&2
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi

have_libclang() {
  ldconfig -p 2>/dev/null | grep -qE 'libclang(-[0-9]+)?\.so' ||
    ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1
}
if ! command -v clang >/dev/null 2>&1 || ! have_libclang; then
  note "installing clang and libclang-dev: the rocksdb crate generates its bindings with bindgen, which needs libclang"
  sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update >&2
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y clang libclang-dev >&2
fi

target_dir="${HYBRIDKV_ROCKSDB_TARGET_DIR:-$(cd "$repo/.." && pwd)/target-rocksdb}"
bin="$target_dir/release/hybridkv"
export RUSTFLAGS="-C target-cpu=native"
if [ ! -x "$bin" ]; then
  note "first build with RocksDB: compiling RocksDB's C++ takes 15-25 minutes on a 2-core machine (once; later builds reuse it)"
fi
CARGO_TARGET_DIR="$target_dir" cargo build --release -p hybridkv-cli --features rocksdb >&2

if [ "${BENCH_BUILD_ONLY:-0}" = 1 ]; then
  echo "$bin"
  exit 0
fi
exec "$bin" bench "$@"
