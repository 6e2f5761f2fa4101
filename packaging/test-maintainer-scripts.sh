#!/usr/bin/env bash
# Runs the Debian maintainer scripts and the RPM scriptlets against stub
# commands, with and without a running systemd, and checks what they would
# do: user creation (systemd-sysusers, else adduser / useradd), the data
# directory, enable / start on install, restart on upgrade, stop on removal,
# rm -rf /var/lib/pollster only on purge, and that each one exits 0.
#
# Every command the scripts run is a stub that only logs (PATH holds nothing
# else), and each run is in a private mount namespace with tmpfs over /run,
# /var/lib and /usr/lib/sysusers.d, so nothing on this machine changes and
# /run/systemd/system can be made to exist or not. Needs root (unshare -m);
# called by packaging/ci-test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! unshare -m true 2>/dev/null; then
  echo "SKIP: unshare -m is not permitted here: maintainer scripts not exercised"
  exit 0
fi

work="$(mktemp -d /tmp/pollster-scripts.XXXXXX)"
trap 'rm -rf "$work"' EXIT
stubs="$work/stubs"
stubs_nosysusers="$work/stubs-nosysusers"
mkdir -p "$stubs" "$stubs_nosysusers"

# A stub logs its command line. getent answers from a marker that the
# user-creating stubs leave; dpkg-statoverride --list answers from
# STUB_OVERRIDE; deb-systemd-helper was-enabled says yes (as on a fresh
# install).
for c in systemctl deb-systemd-helper deb-systemd-invoke systemd-sysusers adduser useradd groupadd \
  getent install dpkg-statoverride rm rmdir; do
  cat >"$stubs/$c" <<EOF
#!/bin/sh
echo "$c \$*" >>"\$STUB_LOG"
case "$c \$1 \$2" in
  "getent passwd "*|"getent group "*) [ -e "\$STUB_STATE/user" ] ;;
  "dpkg-statoverride --list "*) [ -n "\$STUB_OVERRIDE" ] ;;
  systemd-sysusers*|adduser*|useradd*) : >"\$STUB_STATE/user" ;;
esac
EOF
  chmod 0755 "$stubs/$c"
  [ "$c" = systemd-sysusers ] || cp "$stubs/$c" "$stubs_nosysusers/$c"
done

checks=0
# run NAME SYSTEMD(up|down) SYSUSERS(yes|no) USER(exists|missing) SCRIPT ARGS...
run() {
  local name=$1 systemd=$2 sysusers=$3 user=$4
  shift 4
  log="$work/$name.log"
  : >"$log"
  rm -rf "$work/state" && mkdir "$work/state"
  [ "$user" = exists ] && : >"$work/state/user"
  local rc=0
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare -m /bin/sh -c '
    set -e
    mount -t tmpfs tmpfs /run
    mount -t tmpfs tmpfs /var/lib
    if [ -d /usr/lib/sysusers.d ]; then mount -t tmpfs tmpfs /usr/lib/sysusers.d; fi
    if [ "$1" = up ]; then /bin/mkdir -p /run/systemd/system; fi
    if [ "$2" = yes ] && [ -d /usr/lib/sysusers.d ]; then echo "u pollster - \"Pollster\" /var/lib/pollster" >/usr/lib/sysusers.d/pollster.conf; fi
    shift 2
    exec /usr/bin/env -i PATH="$STUB_PATH" STUB_LOG="$STUB_LOG" STUB_STATE="$STUB_STATE" STUB_OVERRIDE="$STUB_OVERRIDE" /bin/sh "$@"
  ' sh "$systemd" "$sysusers" "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    echo "FAILED: $name: $* exited $rc" >&2
    cat "$log" >&2
    exit 1
  fi
  echo "-- $name: $*  (systemd $systemd, systemd-sysusers: $sysusers, user $user)"
  sed 's/^/   /' "$log"
}
export STUB_LOG STUB_STATE STUB_PATH STUB_OVERRIDE=""
prepare() { STUB_LOG="$work/$1.log"; STUB_STATE="$work/state"; STUB_PATH=$stubs; [ "$3" = yes ] || STUB_PATH=$stubs_nosysusers; }

has() { grep -qxF -- "$1" "$log" || { echo "FAILED: expected: $1" >&2; exit 1; }; checks=$((checks + 1)); }
hasnt() { if grep -q -- "$1" "$log"; then echo "FAILED: unexpected: $1" >&2; exit 1; fi; checks=$((checks + 1)); }
t() { prepare "$@"; run "$@"; }

D=packaging/debian
echo "== Debian maintainer scripts"
t deb-install up yes missing $D/postinst configure ""
has "systemd-sysusers pollster.conf"
hasnt "adduser"
has "install -d -m 0750 -o pollster -g pollster /var/lib/pollster"
has "dpkg-statoverride --update --add root pollster 0640 /etc/pollster/pollster.toml"
has "deb-systemd-helper enable pollster.service"
has "systemctl --system daemon-reload"
has "deb-systemd-invoke start pollster.service"

t deb-install-container down no missing $D/postinst configure ""
has "adduser --quiet --system --group --home /var/lib/pollster --no-create-home --gecos Pollster pollster"
has "install -d -m 0750 -o pollster -g pollster /var/lib/pollster"
has "deb-systemd-helper enable pollster.service"
hasnt "systemctl"
hasnt "deb-systemd-invoke"

t deb-upgrade up yes exists $D/postinst configure 0.1.0
hasnt "systemd-sysusers"
hasnt "adduser"
has "deb-systemd-invoke restart pollster.service"
hasnt "deb-systemd-invoke start"

t deb-upgrade-container down yes exists $D/postinst configure 0.1.0
hasnt "systemctl"
hasnt "deb-systemd-invoke"

t deb-prerm-upgrade up yes exists $D/prerm upgrade 0.1.1
hasnt "stop"
t deb-prerm-remove up yes exists $D/prerm remove
has "deb-systemd-invoke stop pollster.service"
t deb-prerm-remove-container down yes exists $D/prerm remove
hasnt "stop"

t deb-postrm-remove up yes exists $D/postrm remove
has "deb-systemd-helper mask pollster.service"
hasnt "rm "
t deb-postrm-upgrade up yes exists $D/postrm upgrade 0.1.1
hasnt "rm "
hasnt "mask"
STUB_OVERRIDE=1
t deb-postrm-purge down yes exists $D/postrm purge
STUB_OVERRIDE=""
has "rm -rf /var/lib/pollster"
has "dpkg-statoverride --remove /etc/pollster/pollster.toml"
has "deb-systemd-helper purge pollster.service"
hasnt "systemctl"

R=packaging/rpm
echo "== RPM scriptlets (\$1 = packages installed after the transaction)"
t rpm-pre-install up yes missing $R/pre.sh 1
has "systemd-sysusers --replace=/usr/lib/sysusers.d/pollster.conf -"
hasnt "useradd"
t rpm-pre-install-nosysusers down no missing $R/pre.sh 1
has "groupadd -r pollster"
has "useradd -r -g pollster -d /var/lib/pollster -M -s /sbin/nologin -c Pollster pollster"
t rpm-pre-upgrade up yes exists $R/pre.sh 2
hasnt "useradd"
hasnt "systemd-sysusers"

t rpm-post-install up yes exists $R/post.sh 1
has "install -d -m 0750 -o pollster -g pollster /var/lib/pollster"
has "systemctl enable pollster.service"
has "systemctl start pollster.service"
t rpm-post-install-container down yes exists $R/post.sh 1
has "systemctl enable pollster.service"
hasnt "systemctl start"
hasnt "daemon-reload"
t rpm-post-upgrade up yes exists $R/post.sh 2
hasnt "enable"
hasnt "start"

t rpm-preun-erase up yes exists $R/preun.sh 0
has "systemctl --no-reload disable pollster.service"
has "systemctl stop pollster.service"
t rpm-preun-upgrade up yes exists $R/preun.sh 1
hasnt "systemctl"

t rpm-postun-upgrade up yes exists $R/postun.sh 1
has "systemctl try-restart pollster.service"
t rpm-postun-erase up yes exists $R/postun.sh 0
hasnt "try-restart"
hasnt "rm "
t rpm-postun-upgrade-container down yes exists $R/postun.sh 1
hasnt "systemctl"

echo "maintainer scripts: $checks expectations met"
