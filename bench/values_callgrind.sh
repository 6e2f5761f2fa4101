#!/usr/bin/env bash
# Instructions per poll of `pollster serve` without value rules and with
# RULES of them (callgrind), against one pollster-fleet answering JSON
# ({"instance":NAME,"status":"ok"}). Each rule reads /status (map ok = 1)
# with the instance name as a label, so a poll with rules parses the body
# and makes RULES samples. Instruction counts do not move with the other
# load on the machine, unlike wall-clock CPU (examples/compare.rs).
#
#   bench/values_callgrind.sh [INSTANCES=200] [RULES=10] [WARMUP_S=20] [WINDOW_S=20]
#
# Needs valgrind and curl, and the release binaries
# (cargo build --release --bin pollster --bin pollster-fleet; BIN=DIR takes
# them from DIR instead of target/release).
# Prints, per run: polls in the window, instructions, instructions per poll.
# KEEP=1 keeps the callgrind files (for callgrind_annotate) and says where.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
rules=${2:-10}
warmup=${3:-20}
window=${4:-20}
bin=${BIN:-target/release}
# shellcheck source=bench/fleet.sh
. bench/fleet.sh json

echo "| value rules | polls | Ir | Ir per poll |"
echo "|---:|---:|---:|---:|"
for r in 0 "$rules"; do
  run="$dir/run$r"
  mkdir -p "$run"
  cfg="$run/pollster.toml"
  rules_text=
  for v in $(seq 0 $((r - 1))); do
    [ "$r" -eq 0 ] && break
    rules_text+=$(printf '\n[[types.groups.values]]\nmetric = "bench_status_%s"\nvalue = "/status"\n' "$v")
    rules_text+=$'\n'$(printf 'labels = { name = "/instance" }\nmap = { ok = 1 }')$'\n'
  done
  pollster_config "$run" 1s "$rules_text" >"$cfg"
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$run/cg.out" \
    "$bin/pollster" serve --config "$cfg" >/dev/null 2>"$run/valgrind.log" &
  client_pid=$!
  measure "$run"
  echo "| $r | $polls | $ir | $((ir / polls)) |"
done
