# %post for pollster. $1: 1 = first install, 2 (or more) = upgrade.
# Enables and starts the service on install; an upgrade restarts it from
# %postun, once the old package's files are gone. Safe where systemd is not
# running (containers, CI).
if [ ! -d /var/lib/pollster ]; then
	install -d -m 0750 -o pollster -g pollster /var/lib/pollster
fi
if command -v systemctl >/dev/null 2>&1; then
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload >/dev/null 2>&1 || :
	fi
	if [ "$1" -eq 1 ]; then
		# Enabling works without a running systemd (it only makes symlinks).
		systemctl enable pollster.service >/dev/null 2>&1 || :
		if [ -d /run/systemd/system ]; then
			systemctl start pollster.service >/dev/null 2>&1 || :
		fi
	fi
fi
if [ "$1" -eq 1 ]; then
	echo "pollster: open http://$(hostname 2>/dev/null):7655/setup and enter the"
	echo "pollster: setup code from /var/lib/pollster/setup-code (sudo cat /var/lib/pollster/setup-code) to create the admin."
fi
exit 0
