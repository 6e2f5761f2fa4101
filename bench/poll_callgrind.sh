#!/usr/bin/env bash
# Instructions per poll (callgrind) of `pollster serve` with INSTANCES tasks
# at INTERVAL, against one pollster-fleet answering the Prometheus text
# format (the side-by-side benchmark's bytes), and of the raw hyper loop
# (examples/floor) on the same targets. Instruction counts do not move with
# the other load on the machine, unlike wall-clock CPU (examples/compare.rs).
#
#   bench/poll_callgrind.sh [INSTANCES=150] [INTERVAL=1s] [WARMUP_S=20] [WINDOW_S=20] [CLIENTS=pollster,floor]
#
# Keep INSTANCES / INTERVAL near 100-200 polls/s: under valgrind a client
# runs 30-50 times slower. To see whether a poll's cost grows with the
# fleet (issue #29, goal 2), hold the rate and grow the fleet:
#   bench/poll_callgrind.sh 1000 10s 60 30 pollster
#   bench/poll_callgrind.sh 10000 100s 240 30 pollster
#   bench/poll_callgrind.sh 100000 1000s 1200 30 pollster
# The warm-up should pass one interval, so that the window holds steady
# polls, not each task's first.
#
# Needs valgrind and curl, and the release binaries (cargo build --release
# --bin pollster --bin pollster-fleet --example floor); BIN=DIR takes them
# from DIR instead of target/release. Prints, per client: polls in the
# window, instructions, instructions per poll, and for Pollster where they
# went, per poll (inclusive, from callgrind_annotate): the poll's own task
# (request, answer, completion), the dispatcher, the group commit, and the
# periodic re-plan (`reconcile`), which walks the whole fleet and so, at a
# fixed rate, costs more per poll the larger the fleet. KEEP=1 keeps the
# callgrind files (for callgrind_annotate) and says where.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-150}
interval=${2:-1s}
warmup=${3:-20}
window=${4:-20}
clients=${5:-pollster,floor}
bin=${BIN:-target/release}
dir=$(mktemp -d)
fleet_pid=
client_pid=
cleanup() {
  [ -n "$client_pid" ] && kill "$client_pid" 2>/dev/null || true
  [ -n "$fleet_pid" ] && kill "$fleet_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "kept: $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT

"$bin/pollster-fleet" --count "$n" --mix healthy=100 --bind 127.0.0.1:0 --threads 1 --body prometheus 2>"$dir/fleet.log" &
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

# The inclusive instructions of function $2 (its full path, which ends the
# line, optionally followed by its object) in dump $1: the largest of its
# entries (callgrind lists a function once per source file it was inlined
# from; the largest is the whole).
inclusive() {
  callgrind_annotate --inclusive=yes "$1" 2>/dev/null | grep -E ":$2( \\[[^]]*\\])?\$" |
    awk '{gsub(",", "", $1); if ($1 + 0 > max) max = $1 + 0} END {print max + 0}'
}
per_poll() { local v; v=$(inclusive "$1" "$2"); echo $(( ${v:-0} / $3 )); }

echo "| client | tasks | interval | polls | Ir | Ir per poll | poll task | dispatcher | group commit | re-plan |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for client in ${clients//,/ }; do
  run="$dir/$client"
  mkdir -p "$run"
  case "$client" in
    pollster)
      cfg="$run/pollster.toml"
      {
        printf '[server]\nlisten = "127.0.0.1:%s"\nmetrics_listen = "127.0.0.1:%s"\ndata_dir = "%s/data"\n\n' \
          "$(port)" "$(port)" "$run"
        printf '[adaptive]\nenabled = false\n\n[scheduler]\nworkers = 64\n\n'
        printf '[[types]]\nname = "bench"\n[[types.groups]]\nname = "probe"\npriority = 1\nfloor = "%s"\n' "$interval"
        for i in $(seq 0 $((n - 1))); do
          name=$(printf 'inst-%04d' "$i")
          printf '\n[[instances]]\nname = "%s"\ntype = "bench"\nurl = "http://%s/i/%s"\ntimeout = "5s"\n' "$name" "$addr" "$name"
        done
      } >"$cfg"
      RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$run/cg.out" \
        "$bin/pollster" serve --config "$cfg" >/dev/null 2>"$run/valgrind.log" &
      ;;
    floor)
      valgrind --tool=callgrind --callgrind-out-file="$run/cg.out" \
        "$bin/examples/floor" --base "http://$addr" --instances "$n" --interval "$interval" \
        --warmup 1h --seconds 1 >/dev/null 2>"$run/valgrind.log" &
      ;;
    *)
      echo "unknown client $client (pollster, floor)" >&2
      exit 2
      ;;
  esac
  client_pid=$!
  sleep "$warmup"
  callgrind_control -z "$client_pid" >/dev/null 2>&1
  h0=$(hits)
  sleep "$window"
  h1=$(hits)
  callgrind_control -d "$client_pid" >/dev/null 2>&1
  kill "$client_pid"
  wait "$client_pid" 2>/dev/null || true
  client_pid=
  # The dump after zeroing holds the window's instructions.
  dump=$(ls "$run"/cg.out.* | sort | tail -1)
  ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$dump" | head -1)
  polls=$((h1 - h0))
  if [ "$client" = pollster ]; then
    loop='pollster::engine::loops::dispatch_loop::\{\{closure\}\}'
    parts="$(per_poll "$dump" "$loop::\\{\\{closure\\}\\}" "$polls") | $(per_poll "$dump" "$loop" "$polls") | \
$(per_poll "$dump" 'pollster::store::records::<impl pollster::store::Store>::write_tasks_with_events' "$polls") | \
$(per_poll "$dump" 'pollster::engine::Shared::reconcile' "$polls")"
  else
    parts="— | — | — | —"
  fi
  echo "| $client | $n | $interval | $polls | $ir | $((ir / polls)) | $parts |"
done
