# Sourced by the callgrind scripts (bench/poll_callgrind.sh,
# bench/values_callgrind.sh): a scratch directory removed on exit
# (kept with KEEP=1), one pollster-fleet of $n healthy instances answering
# in format $1 (json or prometheus), and helpers. Expects $n and $bin, and
# sets $dir, $addr and $fleet_pid; the script puts the PID of the client it
# measures in $client_pid, which is killed on exit too.
# shellcheck shell=bash
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

"$bin/pollster-fleet" --count "$n" --mix healthy=100 --bind 127.0.0.1:0 --threads 1 --body "$1" 2>"$dir/fleet.log" &
fleet_pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's|^listening on http://||p' "$dir/fleet.log" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "the fleet did not start" >&2; exit 1; }
# Requests the fleet has answered.
hits() { curl -sf "http://$addr/_control/stats" | sed -n 's/.*"total_hits":\([0-9]*\).*/\1/p'; }
# A free loopback port.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# After $warmup seconds, zeroes the counters of the callgrind client
# $client_pid, counts the fleet's polls over $window seconds, dumps and
# stops the client. Sets $polls, $ir (the window's instructions) and $dump
# (the file, among $1/cg.out.*, that holds them).
measure() {
  local h0 h1
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
  dump=$(ls "$1"/cg.out.* | sort | tail -1)
  ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$dump" | head -1)
  polls=$((h1 - h0))
}
# A Pollster config on stdout for run directory $1: one type whose one
# group polls at floor $2 (priority 1, adaptive polling off), the text $3
# inside that group (value rules), and the fleet's $n instances.
pollster_config() {
  printf '[server]\nlisten = "127.0.0.1:%s"\nmetrics_listen = "127.0.0.1:%s"\ndata_dir = "%s/data"\n\n' \
    "$(port)" "$(port)" "$1"
  printf '[adaptive]\nenabled = false\n\n[scheduler]\nworkers = 64\n\n'
  printf '[[types]]\nname = "bench"\n[[types.groups]]\nname = "probe"\npriority = 1\nfloor = "%s"\n' "$2"
  printf '%s' "${3:-}"
  local i name
  for i in $(seq 0 $((n - 1))); do
    name=$(printf 'inst-%04d' "$i")
    printf '\n[[instances]]\nname = "%s"\ntype = "bench"\nurl = "http://%s/i/%s"\ntimeout = "5s"\n' "$name" "$addr" "$name"
  done
}
