#!/bin/sh
# with-deb.sh DEB SCRATCH CMD...: installs DEB with `dpkg -i` in a private mount namespace
# and runs CMD there; what CMD starts in the background (a test cluster's daemons) keeps
# that namespace. dpkg's database and every directory the package writes into are
# overlays whose upper layers live in SCRATCH, so the machine's own files and dpkg state
# never change: when the last process of the namespace exits, the install is gone.
set -eu
[ $# -ge 3 ] || { echo "usage: with-deb.sh DEB SCRATCH CMD..." >&2; exit 2; }
deb=$(realpath -- "$1")
scratch=$2
shift 2
mkdir -p "$scratch"
scratch=$(realpath -- "$scratch")

if [ -z "${WITH_DEB_INSIDE:-}" ]; then
    WITH_DEB_INSIDE=1 exec unshare --mount --propagation private -- "$0" "$deb" "$scratch" "$@"
fi

# the directories that receive files (dpkg-deb -c: "./usr/lib/.../x.so"), each as its
# deepest ancestor that exists here (nothing is created outside SCRATCH), and dpkg's state
deepest() {
    d=$1
    while [ ! -d "$d" ]; do d=$(dirname "$d"); done
    echo "$d"
}
dirs=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\.\//, "/", $6); sub(/\/[^\/]*$/, "", $6); print $6 }' |
    sort -u | while read -r d; do deepest "$d"; done | sort -u)
n=0
for d in /var/lib/dpkg $dirs; do
    n=$((n + 1))
    mkdir "$scratch/upper$n" "$scratch/work$n"
    mount -t overlay "overlay$n" -o "lowerdir=$d,upperdir=$scratch/upper$n,workdir=$scratch/work$n" "$d"
done
dpkg --log="$scratch/dpkg.log" -i "$deb" >"$scratch/dpkg.out" 2>&1 || {
    cat "$scratch/dpkg.out" >&2
    exit 1
}
cat "$scratch/dpkg.out" >&2
exec "$@"
