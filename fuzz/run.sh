#!/usr/bin/env bash
# Build every fuzz target and run each for SECONDS_PER_TARGET seconds
# (default 20); fail if any input crashes a target (a panic, an invariant
# that does not hold, a hang of more than 10 s on one input, or running out
# of memory).
#
#   bash fuzz/run.sh [SECONDS_PER_TARGET]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`) and only the stable
# toolchain: the targets are built without a sanitizer, which is what needs
# nightly. FUZZ_BUILD=release builds them optimised (slower to build, many
# times more executions per second: use it for long runs by hand); the
# default, `dev`, builds in a few minutes, which suits CI.
#
# Each target starts from its seeds in fuzz/corpus/TARGET/ and adds what it
# finds to fuzz/target/corpus/TARGET/ (kept between runs, not committed). A
# crashing input is saved under fuzz/artifacts/TARGET/; replay it with
#   cargo fuzz run --sanitizer none TARGET fuzz/artifacts/TARGET/crash-...
set -euo pipefail

seconds="${1:-20}"
build="${FUZZ_BUILD:-dev}"
fuzz_dir="$(cd "$(dirname "$0")" && pwd)"
cd "$fuzz_dir"

case "$build" in
  dev) profile=(--dev) ;;
  release) profile=(--release) ;;
  *) echo "FUZZ_BUILD must be dev or release, not $build" >&2; exit 2 ;;
esac
# The targets' own workspace, with their own target dir: the main crate's
# builds and CARGO_TARGET_DIR are never touched.
unset CARGO_TARGET_DIR
flags=(--sanitizer none "${profile[@]}" --target-dir "$fuzz_dir/target")

# Like --locked: refuse to run if Cargo.lock would have to change.
cargo metadata --locked --format-version 1 >/dev/null

echo "building the fuzz targets ($build)"
cargo fuzz build "${flags[@]}"

failed=()
mkdir -p target/logs
for target in $(cargo fuzz list); do
  mkdir -p "target/corpus/$target" "corpus/$target"
  log="target/logs/$target.log"
  if cargo fuzz run "${flags[@]}" "$target" "target/corpus/$target" "corpus/$target" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)"
    echo "$target: ok: ${done_line:-(no DONE line)}"
  else
    echo "$target: FAILED; the panic and the end of $log:"
    grep -m 1 -A 4 'panicked at' "$log" || true
    echo "..."
    tail -n 25 "$log"
    failed+=("$target")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets that failed: ${failed[*]}" >&2
  exit 1
fi
