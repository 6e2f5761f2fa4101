# %preun for pollster. $1: 0 = erase (stop and disable), 1 = upgrade (keep
# running; %postun restarts it).
if [ "$1" -eq 0 ] && command -v systemctl >/dev/null 2>&1; then
	systemctl --no-reload disable pollster.service >/dev/null 2>&1 || :
	if [ -d /run/systemd/system ]; then
		systemctl stop pollster.service >/dev/null 2>&1 || :
	fi
fi
exit 0
