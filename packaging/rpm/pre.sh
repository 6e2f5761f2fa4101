# %pre for pollster. $1 is the number of pollster packages installed after
# this transaction: 1 = install, 2 = upgrade.
# The pollster user is made before the files are laid down, so the config
# can be installed root:pollster 0640.
if ! getent passwd pollster >/dev/null; then
	if command -v systemd-sysusers >/dev/null 2>&1; then
		# The same line as /usr/lib/sysusers.d/pollster.conf, which is not
		# on disk yet.
		echo 'u pollster - "Pollster" /var/lib/pollster' |
			systemd-sysusers --replace=/usr/lib/sysusers.d/pollster.conf - || :
	fi
	if ! getent passwd pollster >/dev/null; then
		getent group pollster >/dev/null || groupadd -r pollster
		useradd -r -g pollster -d /var/lib/pollster -M -s /sbin/nologin -c Pollster pollster
	fi
fi
exit 0
