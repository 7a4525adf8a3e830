#!/bin/sh
# apt-install.sh PACKAGE...: installs those of the given Debian packages that are missing.
# Needs root when something is missing. Package scripts are kept from starting system
# daemons by a refusing /usr/sbin/policy-rc.d, there only while apt runs (unless the
# machine already has one).
set -eu
need=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
done
[ -n "$need" ] || exit 0
[ "$(id -u)" = 0 ] || { echo "apt-install.sh: missing Debian packages:$need (run as root to install them)" >&2; exit 1; }
echo "== installing:$need"
added_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    added_policy=1
fi
export DEBIAN_FRONTEND=noninteractive
rc=0
# shellcheck disable=SC2086
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $need; } || rc=$?
[ -z "$added_policy" ] || rm -f /usr/sbin/policy-rc.d
exit "$rc"
