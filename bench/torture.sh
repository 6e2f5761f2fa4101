#!/usr/bin/env bash
# Crash torture at full size (docs/TORTURE.md): builds the release binaries,
# then runs examples/torture.rs, which SIGKILLs `pollster serve` at random
# points (100 times by default) while it polls a `pollster-fleet` of 2,000
# instances full of failing targets, and checks every restart. Prints the
# report; exits non-zero if any check failed.
#
#   bench/torture.sh                      # 100 kills, seed from the clock
#   bench/torture.sh --kills 300 --seed 42
#   bench/torture.sh --help               # every option
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked --bins --example torture
exec "$target/release/examples/torture" "$@"
