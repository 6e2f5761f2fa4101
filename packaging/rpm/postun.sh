# %postun for pollster. $1: 0 = erased, 1 = upgraded (restart on the new
# binary). Erasing keeps /var/lib/pollster (the database), and an edited
# /etc/pollster/pollster.toml is kept as pollster.toml.rpmsave; delete them
# by hand to remove every trace.
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || :
	if [ "$1" -ge 1 ]; then
		systemctl try-restart pollster.service >/dev/null 2>&1 || :
	fi
fi
exit 0
