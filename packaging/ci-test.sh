#!/usr/bin/env bash
# Packaging checks, run by .ci/run after the tests (or by hand, as root).
#
#  1. Static: promtool check/test rules, the dashboard's JSON and PromQL, the
#     shipped config against `pollster check-config`, maintainer scripts,
#     the unit's systemd-analyze score.
#  2. Builds the .deb and .rpm once (packaging/build.sh), inspects the .rpm
#     (files, config files, scriptlets) and runs lintian on the .deb.
#  3. Installs the .deb with dpkg -i, starts the installed binary exactly as
#     pollster.service would (same user, config, working directory, umask)
#     since CI has no running systemd, checks /healthz, /metrics and the
#     first-run page, stops it with SIGTERM (exit 0); creates an API token and
#     edits the config, upgrades in place to a higher version of the same
#     binary, and checks the database, the token and the edited config
#     survived; then dpkg -r keeps /var/lib/pollster and dpkg -P removes it.
#
# Step 3 installs a package on this machine and needs root (or sudo -n);
# without either it is skipped with a message. A pollster package already
# installed is purged first only under CI=true or POLLSTER_CI_PURGE=1
# (purging deletes /var/lib/pollster).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

t_start=$SECONDS
t_stage=$SECONDS
timings=()
stage() {
  if [ -n "${stage_name:-}" ]; then
    timings+=("$(printf '%5ss  %s' "$((SECONDS - t_stage))" "$stage_name")")
  fi
  stage_name="$*"
  t_stage=$SECONDS
  echo
  echo "== $*"
}
fail() {
  echo "ci-test: FAILED: $*" >&2
  exit 1
}
passed=0
ok() {
  passed=$((passed + 1))
  echo "ok: $*"
}
skip() { echo "SKIP: $*"; }

work="$(mktemp -d /tmp/pollster-pkg-ci.XXXXXX)"
chmod 0755 "$work"
server_pid=""
server_log=""
installed_by_us=0

# ---------------------------------------------------------------- privileges
SUDO=()
can_install=1
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    can_install=0
  fi
fi
as_root() { "${SUDO[@]}" "$@"; }

cleanup() {
  local rc=$?
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    as_root kill -TERM "$server_pid" 2>/dev/null || true
    sleep 2
    as_root kill -KILL "$server_pid" 2>/dev/null || true
  fi
  if [ "$rc" != 0 ]; then
    echo
    echo "== ci-test FAILED (exit $rc) in stage: ${stage_name:-?}" >&2
    for log in "$work"/server-*.log; do
      [ -f "$log" ] || continue
      echo "---- $log" >&2
      tail -n 80 "$log" >&2 || true
    done
  fi
  if [ "$installed_by_us" = 1 ] && dpkg-query -W -f='${Status}' pollster 2>/dev/null | grep -q ' installed$\| config-files$'; then
    echo "(cleanup: purging the pollster package this run installed)"
    as_root dpkg -P pollster >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- tools
stage "tools"
need=()
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v rpm >/dev/null 2>&1 || need+=(rpm)
command -v lintian >/dev/null 2>&1 || need+=(lintian)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$can_install" = 1 ] && command -v apt-get >/dev/null 2>&1; then
    echo "apt-get install ${need[*]}"
    as_root apt-get update -qq
    as_root apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    fail "missing ${need[*]} and cannot apt-get install them"
  fi
fi
for t in curl promtool rpm lintian python3 dpkg-deb; do
  command -v "$t" >/dev/null 2>&1 || fail "$t not found"
done
have_systemd_analyze=0
command -v systemd-analyze >/dev/null 2>&1 && have_systemd_analyze=1
echo "promtool: $(promtool --version 2>&1 | head -n 1)"
echo "lintian: $(lintian --version)"
echo "rpm: $(rpm --version)"
[ "$have_systemd_analyze" = 1 ] && echo "systemd-analyze: $(systemd-analyze --version | head -n 1)"

# ---------------------------------------------------------------- static checks
stage "alert rules: promtool check rules + test rules"
promtool check rules packaging/alerts.yml
promtool test rules packaging/alerts_test.yml
for a in PollsterDown PollsterCriticalInstanceStale PollsterQueueDepthHigh PollsterPermanentErrors \
  PollsterBreakerOpen PollsterDeadLetterGrowing PollsterPoolOverBudget; do
  grep -q "alert: $a\$" packaging/alerts.yml || fail "alerts.yml has no $a"
  grep -q "alertname: $a\$" packaging/alerts_test.yml || fail "alerts_test.yml does not test $a"
done
ok "every alert of SPEC §8 is defined and unit-tested"

stage "Grafana dashboard: JSON and PromQL"
python3 - packaging/grafana-dashboard.json "$work/dashboard-rules.yml" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d.get("schemaVersion", 0) >= 36, "schemaVersion"
assert any(i.get("name") == "DS_PROMETHEUS" for i in d.get("__inputs", [])), "no DS_PROMETHEUS input"
exprs, titles = [], []
for p in d["panels"]:
    if p.get("type") == "row":
        continue
    titles.append(p["title"])
    assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
    for t in p.get("targets", []):
        e = t["expr"]
        for k, v in {"$__rate_interval": "5m", "$job": ".*", "$instance_type": ".*", "$pool": ".*"}.items():
            e = e.replace(k, v)
        assert "$" not in e, e
        exprs.append(e)
want = ["Queue depth", "Stalest instances", "Polls per second", "Errors per second by category",
        "Breakers by state", "Dead-letter tasks", "Budget utilisation", "Effective and configured budget"]
for w in want:
    assert any(t.startswith(w) for t in titles), "no panel " + w
with open(sys.argv[2], "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        f.write("      - record: dashboard:expr_%d\n        expr: %s\n" % (i, json.dumps(e)))
print("%d panels, %d queries" % (len(titles), len(exprs)))
PY
promtool check rules "$work/dashboard-rules.yml" >/dev/null || promtool check rules "$work/dashboard-rules.yml"
ok "every dashboard query parses as PromQL"

stage "the poll duration histogram, with and without [metrics] per_instance_histograms"
# No alert rule reads the histogram; every dashboard query of it sums it by
# le (and instance_type), so it gives the same answer with a series per
# task as with one per instance type and group. promtool evaluates the
# dashboard's own queries on both shapes of the same polls.
if grep -q 'poll_duration' packaging/alerts.yml; then
  fail "alerts.yml reads pollster_monitor_poll_duration_seconds: check it works without its instance label"
fi
python3 - packaging/grafana-dashboard.json "$work" <<'PY'
import json, os, re, sys
d = json.load(open(sys.argv[1]))
work = sys.argv[2]
exprs = []
for p in d["panels"]:
    for t in p.get("targets", []):
        if "poll_duration" in t["expr"]:
            e = t["expr"]
            for k, v in {"$__rate_interval": "5m", "$job": ".*", "$instance_type": ".*"}.items():
                e = e.replace(k, v)
            assert not re.search(r'\binstance\s*(=|!=|=~|!~)', e), "selects on instance: " + e
            for by in re.findall(r'by\s*\(([^)]*)\)', e):
                assert "instance" not in [l.strip() for l in by.split(",")], "groups by instance: " + e
            q = re.search(r'histogram_quantile\(\s*([0-9.]+)', e)
            assert q, "not a quantile: " + e
            exprs.append((float(q.group(1)), e))
assert exprs, "no dashboard query of the duration histogram"
with open(os.path.join(work, "duration-rules.yml"), "w") as f:
    f.write("groups:\n  - name: duration\n    rules:\n")
    for i, (_, e) in enumerate(exprs):
        # In units of 10 us, rounded: promtool compares values exactly.
        f.write("      - record: dashboard:duration_%d\n        expr: %s\n" % (i, json.dumps("round((%s) * 1e5)" % e)))
# 60 polls a minute, all between 25 and 50 ms: a quantile q is
# 0.025 + 0.025 q. Per task: two instances of 30 a minute each; without
# the label: one series of 60.
bounds = ["0.01", "0.025", "0.05", "0.1", "+Inf"]
def series(labels, per_minute):
    out = []
    for le in bounds:
        grows = 0 if le in ("0.01", "0.025") else per_minute
        out.append('      - series: \'pollster_monitor_poll_duration_seconds_bucket{job="pollster",%s,le="%s"}\'\n'
                   "        values: '0+%dx20'\n" % (labels, le, grows))
    return "".join(out)
shapes = {
    "per task": series('instance_type="http",instance="a",group="probe"', 30)
                + series('instance_type="http",instance="b",group="probe"', 30),
    "by type and group": series('instance_type="http",group="probe"', 60),
}
with open(os.path.join(work, "duration-test.yml"), "w") as f:
    f.write("rule_files: [duration-rules.yml]\nevaluation_interval: 1m\ntests:\n")
    for name, input_series in shapes.items():
        f.write("  # %s\n  - interval: 1m\n    input_series:\n%s    promql_expr_test:\n" % (name, input_series))
        for i, (q, _) in enumerate(exprs):
            f.write("      - expr: dashboard:duration_%d\n        eval_time: 10m\n        exp_samples:\n"
                    "          - labels: 'dashboard:duration_%d'\n            value: %d\n" % (i, i, round((0.025 + 0.025 * q) * 1e5)))
print("%d duration queries, checked on both shapes" % len(exprs))
PY
promtool test rules "$work/duration-test.yml"
ok "the dashboard's duration panels give the same quantiles in both modes"

stage "maintainer scripts and unit"
for s in packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm \
  packaging/rpm/pre.sh packaging/rpm/post.sh packaging/rpm/preun.sh packaging/rpm/postun.sh; do
  sh -n "$s" || fail "$s: syntax"
done
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck -s sh packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm packaging/rpm/*.sh
  shellcheck packaging/build.sh packaging/ci-test.sh packaging/test-maintainer-scripts.sh
fi
# Every systemctl call in a script runs only where systemd is up, except
# enabling (which only makes symlinks and works offline).
for s in packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm packaging/rpm/*.sh; do
  grep -q 'systemctl\|deb-systemd-invoke' "$s" || continue
  grep -q '/run/systemd/system' "$s" || fail "$s calls systemctl without a /run/systemd/system guard"
done
if [ "$have_systemd_analyze" = 1 ]; then
  if score_out="$(systemd-analyze security --offline=true packaging/pollster.service 2>&1)"; then
    score="$(printf '%s\n' "$score_out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' | tail -n 1)"
    echo "systemd-analyze security --offline=true pollster.service: exposure $score"
    printf '%s\n' "$score_out" | grep '✗' || true
    [ -n "$score" ] || fail "no exposure score in systemd-analyze output"
    python3 -c "import sys; sys.exit(0 if float('$score') <= 2.0 else 1)" ||
      fail "exposure $score is above 2.0"
    ok "systemd-analyze security: exposure $score (at most 2.0)"
  else
    skip "systemd-analyze security --offline failed here: $score_out"
  fi
else
  skip "systemd-analyze not installed"
fi

stage "maintainer scripts against stubs, with and without a running systemd"
if [ "$can_install" = 1 ]; then
  as_root packaging/test-maintainer-scripts.sh
  ok "maintainer scripts and scriptlets do what they should with and without systemd"
else
  skip "needs root for unshare -m"
fi

# ---------------------------------------------------------------- build
stage "build the packages (packaging/build.sh)"
t_build=$SECONDS
packaging/build.sh | tee "$work/build.log"
deb="$(grep '\.deb$' "$work/build.log" | tail -n 1)"
rpm_file="$(grep '\.rpm$' "$work/build.log" | tail -n 1)"
[ -f "$deb" ] || fail "no .deb built"
[ -f "$rpm_file" ] || fail "no .rpm built"
# cargo-deb deletes other versions' .debs from target/debian: keep copies.
mkdir -p "$work/pkgs"
cp "$deb" "$rpm_file" "$work/pkgs/"
deb="$work/pkgs/$(basename "$deb")"
rpm_file="$work/pkgs/$(basename "$rpm_file")"
version="$(dpkg-deb -f "$deb" Version)"
# The upgrade: the same binary packaged with the patch number raised.
upgrade_version="$(echo "$version" | awk -F. -v OFS=. '{ $NF = $NF + 1; print }')"
dpkg --compare-versions "$upgrade_version" gt "$version" || fail "bad upgrade version $upgrade_version"
packaging/build.sh --no-build --deb-only --version "$upgrade_version" | tee "$work/build-upgrade.log"
deb_upgrade="$(grep '\.deb$' "$work/build-upgrade.log" | tail -n 1)"
[ -f "$deb_upgrade" ] || fail "no upgrade .deb built"
cp "$deb_upgrade" "$work/pkgs/"
deb_upgrade="$work/pkgs/$(basename "$deb_upgrade")"
build_secs=$((SECONDS - t_build))
ls -l "$deb" "$deb_upgrade" "$rpm_file"

stage "the shipped config passes check-config"
bin="$CARGO_TARGET_DIR/release/pollster"
"$bin" check-config packaging/pollster.toml
# Every commented-out setting, uncommented, must be valid too (they are the
# defaults and examples the file documents).
sed 's/^#\([a-z[]\)/\1/' packaging/pollster.toml >"$work/uncommented.toml"
"$bin" check-config "$work/uncommented.toml"
grep -q '^data_dir = "/var/lib/pollster"$' packaging/pollster.toml || fail "config: data_dir is not /var/lib/pollster"
ok "the shipped config, and all of it uncommented, pass check-config"

stage "man page matches --help"
if command -v man >/dev/null 2>&1; then
  warnings="$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z packaging/pollster.1 2>&1 >/dev/null || true)"
  [ -z "$warnings" ] || fail "man page warnings: $warnings"
fi
sed 's/\\-/-/g' packaging/pollster.1 >"$work/man.txt"
subcommands() { "$bin" "$@" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && $1 != "help" && NF { print $1 }'; }
commands="$(subcommands) $(subcommands admin) $(subcommands admin dlq)"
[ -n "$(subcommands)" ] || fail "no commands in pollster --help"
for c in $commands; do
  grep -qw -- "$c" "$work/man.txt" || fail "pollster.1 does not document '$c'"
done
for args in serve demo plan values "admin create-token" "admin dlq list"; do
  # shellcheck disable=SC2086
  for opt in $("$bin" $args --help | grep -o -- '--[a-z-]*' | sort -u | grep -v -- '^--help$'); do
    grep -q -- "$opt" "$work/man.txt" || fail "pollster.1 does not document $args $opt"
  done
done
ok "pollster.1 documents every command and option of --help: $(tr -s ' \n' '  ' <<<"$commands")"

# ---------------------------------------------------------------- rpm
stage "rpm: contents, config files, scriptlets"
rpm -qip "$rpm_file" 2>/dev/null | sed -n '1,/^Description/p'
rpm -qlp "$rpm_file" 2>/dev/null | tee "$work/rpm-files"
for f in /usr/bin/pollster /etc/pollster/pollster.toml /usr/lib/systemd/system/pollster.service \
  /usr/lib/sysusers.d/pollster.conf /usr/share/pollster/presets/pve.toml /usr/share/pollster/presets/meraki.toml \
  /usr/share/pollster/alerts.yml /usr/share/pollster/grafana-dashboard.json /usr/share/man/man1/pollster.1; do
  grep -qx "$f" "$work/rpm-files" || fail "rpm lacks $f"
done
configs="$(rpm -qp --configfiles "$rpm_file" 2>/dev/null)"
echo "config files: $configs"
[ "$configs" = /etc/pollster/pollster.toml ] || fail "rpm config files: '$configs'"
# %config(noreplace): RPMFILE_CONFIG (1) | RPMFILE_NOREPLACE (16)
flags="$(rpm -qp --qf '[%{FILENAMES} %{FILEFLAGS}\n]' "$rpm_file" 2>/dev/null | awk '$1 == "/etc/pollster/pollster.toml" { print $2 }')"
[ $((flags & 17)) = 17 ] || fail "pollster.toml is not %config(noreplace) (flags $flags)"
owner="$(rpm -qp --qf '[%{FILENAMES} %{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME}\n]' "$rpm_file" 2>/dev/null | awk '$1 == "/etc/pollster/pollster.toml" { print $2, $3 }')"
[ "$owner" = "-rw-r----- root:pollster" ] || fail "pollster.toml in the rpm is $owner"
rpm -qpR "$rpm_file" 2>/dev/null | grep -q '^ca-certificates' || fail "rpm does not require ca-certificates"
rpm -qp --scripts "$rpm_file" 2>/dev/null >"$work/rpm-scripts"
cat "$work/rpm-scripts"
sect() { awk -v s="$1" '/^[a-z]+ scriptlet/ { on = ($0 ~ "^" s " scriptlet") } on' "$work/rpm-scripts"; }
sect preinstall | grep -q 'useradd -r' || fail "%pre does not fall back to useradd -r"
sect preinstall | grep -q 'systemd-sysusers' || fail "%pre does not use systemd-sysusers"
# shellcheck disable=SC2016 # a literal $1
sect postinstall | grep -q '"$1" -eq 1' || fail "%post does not test \$1 = 1 (install)"
sect postinstall | grep -q 'install -d -m 0750 -o pollster -g pollster /var/lib/pollster' || fail "%post does not make /var/lib/pollster"
sect postinstall | grep -q '/run/systemd/system' || fail "%post does not guard systemctl"
# shellcheck disable=SC2016
sect preuninstall | grep -q '"$1" -eq 0' || fail "%preun does not test \$1 = 0 (erase)"
# shellcheck disable=SC2016
sect postuninstall | grep -q '"$1" -ge 1' || fail "%postun does not restart on upgrade (\$1 >= 1)"
sect postuninstall | grep -q 'try-restart' || fail "%postun does not try-restart"
ok "rpm metadata and scriptlets"

# ---------------------------------------------------------------- deb, lintian
stage "deb: control, conffiles, contents"
dpkg-deb -I "$deb" control | tee "$work/control"
grep -q '^Package: pollster$' "$work/control" || fail "package name"
grep -q '^Depends:.*ca-certificates' "$work/control" || fail "deb does not depend on ca-certificates"
dpkg-deb -I "$deb" conffiles | tee "$work/conffiles"
grep -qx '/etc/pollster/pollster.toml' "$work/conffiles" || fail "pollster.toml is not a conffile"
dpkg-deb -c "$deb" | awk '{ print $1, $2, $6 }' | tee "$work/deb-files"
for f in ./usr/bin/pollster ./etc/pollster/pollster.toml ./usr/lib/systemd/system/pollster.service \
  ./usr/lib/sysusers.d/pollster.conf ./usr/share/pollster/presets/pve.toml ./usr/share/pollster/alerts.yml \
  ./usr/share/pollster/grafana-dashboard.json ./usr/share/man/man1/pollster.1.gz; do
  grep -q " $f\$" "$work/deb-files" || fail "deb lacks $f"
done
for s in postinst prerm postrm; do
  dpkg-deb -I "$deb" "$s" >/dev/null || fail "deb has no $s"
done
ok "deb control, conffiles and contents"

stage "lintian"
# Errors fail the build; warnings and info are shown.
lintian_rc=0
lintian --info --display-info --fail-on error "$deb" 2>&1 | tee "$work/lintian.log" || lintian_rc=$?
[ "$lintian_rc" = 0 ] || fail "lintian reported errors (exit $lintian_rc)"
ok "lintian: $(grep -c '^E: ' "$work/lintian.log" || true) errors, $(grep -c '^W: ' "$work/lintian.log" || true) warnings, $(grep -c '^I: ' "$work/lintian.log" || true) info"

# ---------------------------------------------------------------- install
if [ "$can_install" != 1 ]; then
  stage "install, run, upgrade, remove, purge"
  skip "not root and no passwordless sudo: the install checks need root"
  stage "done"
  printf '%s\n' "${timings[@]}"
  exit 0
fi

unit_value() { sed -n "s/^$1=//p" /usr/lib/systemd/system/pollster.service | tail -n 1; }

# Start the installed binary the way pollster.service does: its ExecStart as
# its User/Group with supplementary groups, in its WorkingDirectory, with its
# UMask and a clean environment like systemd's. stderr goes to a log (not a
# terminal, as under the journal).
start_server() { # start_server NAME
  local exec_start user group wd umask_v
  exec_start="$(unit_value ExecStart)"
  user="$(unit_value User)"
  group="$(unit_value Group)"
  wd="$(unit_value WorkingDirectory)"
  umask_v="$(unit_value UMask)"
  if [ -z "$exec_start" ] || [ -z "$user" ] || [ -z "$wd" ]; then
    fail "cannot read the unit"
  fi
  server_log="$work/server-$1.log"
  : >"$server_log"
  echo "starting: cd $wd; umask $umask_v; setpriv --reuid=$user --regid=$group --init-groups $exec_start"
  # shellcheck disable=SC2086 # ExecStart is split into words, as systemd does
  (
    cd "$wd"
    umask "$umask_v"
    exec "${SUDO[@]}" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      LANG=C.UTF-8 HOME="$wd" USER="$user" LOGNAME="$user" SHELL=/usr/sbin/nologin \
      STATE_DIRECTORY=/var/lib/pollster \
      setpriv --reuid="$user" --regid="$group" --init-groups -- $exec_start
  ) </dev/null >>"$server_log" 2>&1 &
  server_pid=$!
  local i
  for i in $(seq 1 100); do
    if curl -fsS -o /dev/null --max-time 2 http://127.0.0.1:7655/healthz 2>/dev/null; then
      echo "/healthz answered after $((i * 200)) ms (pid $server_pid)"
      return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || fail "the server exited at start"
    sleep 0.2
  done
  fail "no /healthz within 20 s"
}

stop_server() {
  local t0=$SECONDS rc=0
  as_root kill -TERM "$server_pid"
  wait "$server_pid" || rc=$?
  server_pid=""
  echo "stopped by SIGTERM in $((SECONDS - t0))s, exit code $rc"
  [ "$rc" = 0 ] || fail "the server exited $rc on SIGTERM"
  [ $((SECONDS - t0)) -le 30 ] || fail "the stop took longer than TimeoutStopSec=30"
}

http_code() { curl -sS -o "$work/body" -w '%{http_code}' --max-time 10 "$@"; }

as_pollster() { as_root setpriv --reuid=pollster --regid=pollster --init-groups -- "$@"; }

stage "install $(basename "$deb") with dpkg -i"
if dpkg-query -W -f='${Status}' pollster 2>/dev/null | grep -q ' installed$\| config-files$'; then
  if [ "${CI:-}" = true ] || [ "${POLLSTER_CI_PURGE:-}" = 1 ]; then
    echo "a pollster package is already here: purging it first"
    as_root dpkg -P pollster
  else
    fail "pollster is already installed here; purge it (dpkg -P pollster deletes /var/lib/pollster) or set POLLSTER_CI_PURGE=1"
  fi
fi
for port in 7655 9091; do
  if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/"; then
    fail "port $port is already in use"
  fi
done
installed_by_us=1
as_root dpkg -i "$deb"
dpkg-query -W -f='${Package} ${Version} ${Status}\n' pollster
getent passwd pollster || fail "no pollster user"
getent group pollster >/dev/null || fail "no pollster group"
[ "$(stat -c '%U:%G %a' /var/lib/pollster)" = "pollster:pollster 750" ] ||
  fail "/var/lib/pollster is $(stat -c '%U:%G %a' /var/lib/pollster)"
[ "$(stat -c '%U:%G %a' /etc/pollster/pollster.toml)" = "root:pollster 640" ] ||
  fail "/etc/pollster/pollster.toml is $(stat -c '%U:%G %a' /etc/pollster/pollster.toml)"
/usr/bin/pollster --version
as_pollster /usr/bin/pollster check-config /etc/pollster/pollster.toml
if [ -d /run/systemd/system ]; then
  echo "(systemd is running here: the package started pollster.service itself)"
else
  echo "(no running systemd: postinst skipped systemctl, as it should)"
fi
# Enabled on install (deb-systemd-helper makes the symlink even without a
# running systemd).
if command -v deb-systemd-helper >/dev/null 2>&1; then
  [ -L /etc/systemd/system/multi-user.target.wants/pollster.service ] || fail "pollster.service was not enabled"
  ok "pollster.service is enabled (multi-user.target.wants)"
fi

stage "systemd-analyze verify"
if [ "$have_systemd_analyze" = 1 ]; then
  if verify_out="$(systemd-analyze verify /usr/lib/systemd/system/pollster.service 2>&1)"; then
    ok "systemd-analyze verify: clean"
  elif printf '%s\n' "$verify_out" | grep -qi 'Failed to \(connect\|initialize\|set up\)\|System has not been booted\|Transport endpoint\|No such file or directory.*bus'; then
    skip "systemd-analyze verify cannot run here: $verify_out"
  else
    # Only the unit's own lines count (other units on the machine may warn).
    mine="$(printf '%s\n' "$verify_out" | grep 'pollster' || true)"
    [ -z "$mine" ] || fail "systemd-analyze verify: $mine"
    echo "systemd-analyze verify: nothing about pollster.service ($verify_out)"
  fi
else
  skip "systemd-analyze not installed"
fi

if [ -d /run/systemd/system ] && systemctl is-active --quiet pollster.service; then
  # On a machine with systemd the package started the service: use it.
  fail "systemd is running pollster.service; stop it before this test (it binds the same ports)"
fi

stage "run the installed binary as pollster.service does"
start_server first
code="$(http_code http://127.0.0.1:7655/healthz)"
[ "$code" = 200 ] || fail "/healthz: $code"
ok "/healthz 200"
code="$(http_code http://127.0.0.1:9091/metrics)"
[ "$code" = 200 ] || fail "/metrics: $code"
grep -q '^pollster_monitor_poll_queue_depth ' "$work/body" || fail "/metrics lacks pollster_monitor_poll_queue_depth"
ok "/metrics 200 with pollster_monitor_poll_queue_depth"
code="$(http_code -L http://127.0.0.1:7655/setup)"
[ "$code" = 200 ] || fail "/setup: $code"
grep -qi '<html' "$work/body" || fail "/setup is not HTML"
ok "/setup 200 with HTML"
code="$(http_code http://127.0.0.1:7655/api/monitoring/scheduler/health)"
[ "$code" = 401 ] || fail "the API without a token answered $code, not 401"
[ -f /var/lib/pollster/pollster.redb ] || fail "no /var/lib/pollster/pollster.redb"
ls -l /var/lib/pollster
[ "$(stat -c '%U' /var/lib/pollster/pollster.redb)" = pollster ] || fail "pollster.redb is not owned by pollster"
if grep -q $'\e\[' "$server_log"; then fail "the log has ANSI escapes"; fi
stop_server
echo "---- server log"
cat "$server_log"

stage "API token and an edited config before the upgrade"
token="$(as_pollster /usr/bin/pollster admin create-token --config /etc/pollster/pollster.toml --name ci)"
[ -n "$token" ] || fail "no token printed"
ok "token created as the pollster user"
inode_before="$(stat -c %i /var/lib/pollster/pollster.redb)"
# A local edit dpkg must keep: a comment and a changed value.
as_root sh -c 'echo "# ci: local edit, kept across upgrades" >>/etc/pollster/pollster.toml'
as_root sed -i 's/^#\[scheduler\]$/[scheduler]/; s/^#workers = 16$/workers = 7/' /etc/pollster/pollster.toml
as_pollster /usr/bin/pollster check-config /etc/pollster/pollster.toml
sum_before="$(as_root sha256sum /etc/pollster/pollster.toml | cut -d' ' -f1)"

stage "upgrade in place to $upgrade_version (dpkg -i --force-confold)"
as_root dpkg -i --force-confold "$deb_upgrade"
new_version="$(dpkg-query -W -f='${Version}' pollster)"
[ "$new_version" = "$upgrade_version" ] || fail "installed version is $new_version"
[ -f /var/lib/pollster/pollster.redb ] || fail "the upgrade lost pollster.redb"
[ "$(stat -c %i /var/lib/pollster/pollster.redb)" = "$inode_before" ] || fail "pollster.redb was replaced"
[ "$(as_root sha256sum /etc/pollster/pollster.toml | cut -d' ' -f1)" = "$sum_before" ] ||
  fail "the upgrade changed the edited /etc/pollster/pollster.toml"
as_root grep -q '^# ci: local edit' /etc/pollster/pollster.toml || fail "local edit lost"
[ "$(stat -c '%U:%G %a' /etc/pollster/pollster.toml)" = "root:pollster 640" ] || fail "config permissions changed"
ok "database and edited config kept"

start_server upgraded
code="$(http_code -H "Authorization: Bearer $token" http://127.0.0.1:7655/api/monitoring/scheduler/health)"
[ "$code" = 200 ] || fail "GET /api/monitoring/scheduler/health with the pre-upgrade token: $code"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "queue" in d and "deadLetter" in d, d' "$work/body" ||
  fail "health JSON: $(cat "$work/body")"
ok "token from before the upgrade works: GET /api/monitoring/scheduler/health 200"
code="$(http_code -H "Authorization: Bearer $token" http://127.0.0.1:7655/api/settings/monitoring)"
[ "$code" = 200 ] || fail "GET /api/settings/monitoring: $code"
python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["scheduler"]["workers"]; assert w == 7, w' "$work/body" ||
  fail "the edited config was not used after the upgrade: $(cat "$work/body")"
ok "the edited config is in effect (scheduler.workers = 7)"
stop_server

stage "dpkg -r keeps the database and the config"
as_root dpkg -r pollster
dpkg-query -W -f='${Status}\n' pollster | grep -q 'config-files' || fail "status after dpkg -r: $(dpkg-query -W -f='${Status}' pollster)"
[ ! -e /usr/bin/pollster ] || fail "/usr/bin/pollster is still there"
[ -f /var/lib/pollster/pollster.redb ] || fail "dpkg -r removed the database"
[ -f /etc/pollster/pollster.toml ] || fail "dpkg -r removed the config"
ok "/var/lib/pollster/pollster.redb and /etc/pollster/pollster.toml kept"

stage "dpkg -P removes them"
as_root dpkg -P pollster
installed_by_us=0
[ ! -e /var/lib/pollster ] || fail "dpkg -P left /var/lib/pollster"
[ ! -e /etc/pollster ] || fail "dpkg -P left /etc/pollster"
! dpkg-statoverride --list /etc/pollster/pollster.toml >/dev/null 2>&1 || fail "dpkg -P left the statoverride"
dpkg-query -W -f='${Status}\n' pollster 2>/dev/null | grep -q ' installed$\| config-files$' && fail "still installed"
ok "purged: /var/lib/pollster and /etc/pollster removed (the pollster system user is kept)"

stage "done"
echo "timings:"
printf '%s\n' "${timings[@]}"
echo "$(printf '%5ss' "$build_secs")  of which building the packages"
echo "$(printf '%5ss' "$((SECONDS - t_start))")  total"
echo "packaging: $passed passed, 0 failed"
