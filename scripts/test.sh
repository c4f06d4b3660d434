#!/usr/bin/env bash
# Runs every test of the workspace (the README's second command).
# Installs nothing beyond the Rust toolchain the machine already has; the RocksDB peer
# (a 15-25 minute C++ build) is deliberately not part of this command.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The fuzz targets' entry points (`hybridkv::fuzzing`) build only with this feature: keep
# them compiling with the engine (the targets themselves: ./scripts/fuzz.sh).
cargo clippy -p hybridkv --features fuzzing --all-targets -- -D warnings
cargo test --workspace
# The examples are programs that check what they show: each must run to the end.
for example in snapshot checkpoint read_only iterators merge delete_range keyspaces; do
  cargo run --quiet -p hybridkv --example "$example" >/dev/null
done
