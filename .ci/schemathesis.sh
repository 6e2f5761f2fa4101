#!/usr/bin/env bash
# Property-based tests of the JSON API against its own OpenAPI document.
#
# What it does: installs a pinned schemathesis from PyPI into a venv under
# target/, builds the debug `pollster` binary, starts the appliance on
# loopback with a fresh data directory, a few provisioned instances (healthy,
# dead-lettered, failing) and an API token made with
# `pollster admin create-token`, then runs `schemathesis run` on
# /api/openapi.json with every check schemathesis has (what `--checks all`
# selects: no 5xx, documented status codes, content types, headers and
# response schemas, invalid input refused with a 4xx, valid input accepted,
# 405 with `Allow` for other methods, auth not ignored, deleted resources
# gone, ...) in all its phases (examples, coverage, fuzzing, and stateful
# sequences that follow the document's links). Any failure fails the script,
# and so does a panic in the appliance's log. .ci/schemathesis.toml holds the
# few per-operation exceptions, each with its reason.
#
# The appliance and schemathesis run in a network namespace of their own
# (`unshare --net`, root only) with nothing but loopback: schemathesis adds
# instances and sink URLs made of random data, and the appliance polls and
# posts to whatever it is given, so nothing may leave the machine.
#
# Destructive operations are all exercised: schemathesis deletes and
# replaces instances, retries and discards dead-letter entries, changes the
# monitoring settings, budgets and sink to odd (valid) values. The API has no
# route that revokes a token or changes the password, so the run keeps its
# credentials to the end.
#
# No operation is excluded. The config's instances (one healthy, two that
# are in the dead-letter queue before the run starts) give the listing,
# retry, discard and enable operations real tasks to work on.
#
# By hand (from the repository root; root for the network namespace):
#   bash .ci/schemathesis.sh                      # the CI run
#   MAX_EXAMPLES=500 MAX_TIME=900 bash .ci/schemathesis.sh   # a longer run
#   SEED=1234 bash .ci/schemathesis.sh            # replay one run
#   bash .ci/schemathesis.sh --include-operation-id putMonitoringSettings
# Extra arguments go to `schemathesis run`. MAX_EXAMPLES is the number of
# generated cases per operation and phase (default 100); MAX_TIME, if set,
# is a time budget in seconds for the whole run. Reports (JUnit, NDJSON
# events) and the appliance's log land in target/schemathesis/.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
MAX_EXAMPLES=${MAX_EXAMPLES:-100}
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
WORK=$TARGET/schemathesis
VENV=$TARGET/schemathesis-venv
API=127.0.0.1:7655
METRICS=127.0.0.1:9091

# Inside the namespace: start the appliance, run schemathesis, stop it.
if [ "${1:-}" = "--inside-netns" ]; then
  shift
  ip link set lo up
  "$TARGET/debug/pollster" serve --config "$WORK/pollster.toml" >"$WORK/pollster.log" 2>&1 &
  pid=$!
  trap 'kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
  trap 'exit 130' INT TERM
  token=$(cat "$WORK/token")
  # Ready, and both failing instances in the dead-letter queue (within 30 s).
  settled() {
    "$VENV/bin/python" - "http://$API" "$token" <<'PY' 2>/dev/null
import json, sys, urllib.request
base, token = sys.argv[1], sys.argv[2]
urllib.request.urlopen(base + "/readyz", timeout=2)
req = urllib.request.Request(base + "/api/monitoring/scheduler/dead-letter",
                             headers={"Authorization": "Bearer " + token})
sys.exit(0 if json.load(urllib.request.urlopen(req, timeout=2))["count"] >= 2 else 1)
PY
  }
  for _ in $(seq 1 300); do
    settled && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  settled || { cat "$WORK/pollster.log" >&2; echo "pollster did not become ready with its dead-letter entries" >&2; exit 1; }

  args=(
    run "http://$API/api/openapi.json"
    --url "http://$API"
    --header "Authorization: Bearer $token"
    --max-examples "$MAX_EXAMPLES"
    --workers 2
    --request-timeout 15
    --generation-database none
    --report junit,ndjson --report-dir "$WORK/report"
    --no-color
  )
  [ -n "${SEED:-}" ] && args+=(--seed "$SEED")
  [ -n "${MAX_TIME:-}" ] && args+=(--max-time "$MAX_TIME")
  status=0
  # From inside $WORK, so what schemathesis and hypothesis write stays there.
  config=$(realpath .ci/schemathesis.toml)
  (cd "$WORK" && "$VENV/bin/schemathesis" --config-file "$config" "${args[@]}" "$@") || status=$?
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "pollster died during the run; its log:" >&2
    tail -50 "$WORK/pollster.log" >&2
    status=1
  fi
  if grep -n "panicked" "$WORK/pollster.log" >&2; then
    echo "pollster panicked during the run" >&2
    status=1
  fi
  exit "$status"
fi

command -v unshare >/dev/null && command -v ip >/dev/null || {
  echo "schemathesis.sh needs unshare (util-linux) and ip (iproute2)" >&2
  exit 1
}
unshare --net true || {
  echo "schemathesis.sh runs the appliance in a network namespace of its own: run it as root" >&2
  exit 1
}

echo "-- schemathesis $SCHEMATHESIS_VERSION in $VENV"
if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -qx "schemathesis, version $SCHEMATHESIS_VERSION"; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

echo "-- cargo build --bin pollster"
cargo build --locked --bin pollster

rm -rf "$WORK"
mkdir -p "$WORK/data"
cat >"$WORK/pollster.toml" <<EOF
[server]
listen = "$API"
metrics_listen = "$METRICS"
data_dir = "$WORK/data"

[failure]
backoff_initial = "200ms"
backoff_max = "2s"
dead_letter_after = 2

[[budgets]]
name = "shared"
requests_per_second = 5.0
shared_fraction = 0.8

# The appliance's own liveness page: polled successfully.
[[instances]]
name = "self"
type = "http"
url = "http://$API/healthz"
budget = "shared"
labels = { critical = "true" }

# A route that needs a token: 401, a permanent failure, dead-lettered at once.
[[instances]]
name = "needs-token"
type = "http"
url = "http://$API/api/monitoring/scheduler/health"

# Nothing listens on port 9 of loopback: transient failures, breaker, dead letter.
[[instances]]
name = "refused"
type = "http"
url = "http://127.0.0.1:9/"
timeout = "1s"
EOF
"$TARGET/debug/pollster" admin create-token --data-dir "$WORK/data" --name schemathesis >"$WORK/token"

echo "-- schemathesis run (max $MAX_EXAMPLES examples per operation)"
exec unshare --net -- bash .ci/schemathesis.sh --inside-netns "$@"
