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
# (cargo build --release --bin pollster --bin pollster-fleet).
# Prints, per run: polls in the window, instructions, instructions per poll.
# KEEP=1 keeps the callgrind files (for callgrind_annotate) and says where.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
rules=${2:-10}
warmup=${3:-20}
window=${4:-20}
bin=target/release
dir=$(mktemp -d)
fleet_pid=
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  [ -n "$fleet_pid" ] && kill "$fleet_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "kept: $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT

"$bin/pollster-fleet" --count "$n" --mix healthy=100 --bind 127.0.0.1:0 --threads 1 --body json 2>"$dir/fleet.log" &
fleet_pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's|^listening on http://||p' "$dir/fleet.log" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "the fleet did not start" >&2; exit 1; }
hits() { curl -sf "http://$addr/_control/stats" | sed -n 's/.*"total_hits":\([0-9]*\).*/\1/p'; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "| value rules | polls | Ir | Ir per poll |"
echo "|---:|---:|---:|---:|"
for r in 0 "$rules"; do
  run="$dir/run$r"
  mkdir -p "$run"
  cfg="$run/pollster.toml"
  {
    printf '[server]\nlisten = "127.0.0.1:%s"\nmetrics_listen = "127.0.0.1:%s"\ndata_dir = "%s/data"\n\n' \
      "$(port)" "$(port)" "$run"
    printf '[adaptive]\nenabled = false\n\n[scheduler]\nworkers = 64\n\n'
    printf '[[types]]\nname = "bench"\n[[types.groups]]\nname = "probe"\npriority = 1\nfloor = "1s"\n'
    for v in $(seq 0 $((r - 1))); do
      [ "$r" -eq 0 ] && break
      printf '\n[[types.groups.values]]\nmetric = "bench_status_%s"\nvalue = "/status"\n' "$v"
      printf 'labels = { name = "/instance" }\nmap = { ok = 1 }\n'
    done
    for i in $(seq 0 $((n - 1))); do
      name=$(printf 'inst-%04d' "$i")
      printf '\n[[instances]]\nname = "%s"\ntype = "bench"\nurl = "http://%s/i/%s"\ntimeout = "5s"\n' "$name" "$addr" "$name"
    done
  } >"$cfg"
  RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$run/cg.out" \
    "$bin/pollster" serve --config "$cfg" >/dev/null 2>"$run/valgrind.log" &
  serve_pid=$!
  sleep "$warmup"
  callgrind_control -z "$serve_pid" >/dev/null 2>&1
  h0=$(hits)
  sleep "$window"
  h1=$(hits)
  callgrind_control -d "$serve_pid" >/dev/null 2>&1
  kill "$serve_pid"
  wait "$serve_pid" 2>/dev/null || true
  serve_pid=
  # The dump after zeroing holds the window's instructions.
  dump=$(ls "$run"/cg.out.* | sort | tail -1)
  ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$dump" | head -1)
  polls=$((h1 - h0))
  echo "| $r | $polls | $ir | $((ir / polls)) |"
done
