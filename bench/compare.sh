#!/usr/bin/env bash
# Side-by-side benchmark: Pollster, Prometheus, vmagent and a raw hyper client loop
# polling the same simulated targets at the same interval, one after the other.
#
#   bench/compare.sh [--instances N] [--interval 1s] [--warmup 15s] [--seconds 30]
#                    [--only floor,pollster,prometheus,vmagent] [--workers 64]
#   bench/compare.sh --only floor,pollster,pollster-values --values 10
#                    (Pollster again with 10 value rules; the fleet then answers JSON)
#
# Needs Debian's `prometheus` package (apt-get install prometheus) for the
# Prometheus run and `victoria-metrics` (apt-get install victoria-metrics) for
# the vmagent run. Prints a markdown table: CPU seconds per 1,000 polls, RSS,
# achieved vs configured rate and lateness, with ratios to the raw loop.
# What each column means: docs/BENCHMARKS.md, section "Side by side".
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin pollster --bin pollster-fleet --example floor --example compare
if ! command -v prometheus >/dev/null 2>&1; then
  echo "prometheus not found: apt-get install prometheus (or pass --only floor,pollster,vmagent)" >&2
fi
if ! command -v vmagent >/dev/null 2>&1; then
  echo "vmagent not found: apt-get install victoria-metrics (or pass --only floor,pollster,prometheus)" >&2
fi
echo "machine: $(nproc) cores, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" >&2
exec target/release/examples/compare "$@"
