#!/usr/bin/env bash
# The main job (README's first command): builds the release binary and runs the
# load-and-read demo on a temporary database. Extra arguments go to `hybridkv demo`
# (e.g. `--pairs 5000000` for the scale run).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
cargo build --release -p hybridkv-cli
exec ./target/release/hybridkv demo "$@"
