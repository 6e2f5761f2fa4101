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
# shellcheck source=bench/fleet.sh
. bench/fleet.sh prometheus

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
      pollster_config "$run" "$interval" >"$cfg"
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
  measure "$run"
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
