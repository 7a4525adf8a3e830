#!/bin/sh
# bookworm-root.sh: prints the path of a minimal Debian 12 root (debootstrap --variant=minbase
# bookworm from Debian's mirror: no binutils, no slurmd), built once and kept under
# ENERGY_CHROOT_CACHE (default /var/cache/rust-energy-slurm) as the Slurm builds are. It is
# what a minimal controller or login host has, plus what apt needs to run offline later:
# its package lists (bookworm, -updates, -security, as `apt-get update` fetched them the day
# it was built, every package upgraded to them) and, downloaded but not installed, Debian's
# Slurm packages and what they and the package need (libslurm38, which senergy links;
# fonts-dejavu-core, its Recommends, which the tests leave out with --no-install-recommends
# as a minimal host does), so that apt in the package tests resolves from those lists and
# installs without the network. The tests never write into it: they mount it as the lower
# layer of an overlay (tests/package/in-root.sh).
#
# Rebuilt when KEY below changes or the directory is removed; two tests that want it at once
# wait for one build (flock). Needs debootstrap, unshare and flock; runs as root.
set -eu
key=v3
cache=${ENERGY_CHROOT_CACHE:-/var/cache/rust-energy-slurm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
dir=$cache/bookworm-minbase-$key
here=$(cd "$(dirname "$0")" && pwd)
if [ -f "$dir/ready" ]; then
    echo "$dir/root"
    exit 0
fi
mkdir -p "$cache"
exec 9>"$dir.lock"
flock 9
if [ -f "$dir/ready" ]; then
    echo "$dir/root"
    exit 0
fi
build=$dir.build
# what an earlier KEY built is no use to this one
for old in "$cache"/bookworm-minbase-*; do
    case $old in "$dir" | "$dir".*) ;; *) rm -rf "$old" ;; esac
done
rm -rf "$dir" "$build"
mkdir -p "$build"
echo "bookworm-root.sh: debootstrap --variant=minbase bookworm into $build (once)" >&2
debootstrap --variant=minbase bookworm "$build/root" "$mirror" >"$build/debootstrap.log" 2>&1 || {
    tail -n 30 "$build/debootstrap.log" >&2
    exit 1
}
root=$build/root
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
# no daemon is started by a package's script inside (invoke-rc.d and deb-systemd-invoke ask
# this first): the root shares the machine's kernel
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# the lists, and the packages downloaded for later (apt keeps them in /var/cache/apt/archives)
sh "$here/in-root.sh" "$root" "" sh -c '
    apt-get update -q &&
    apt-get full-upgrade -q -y -o Dpkg::Options::=--force-unsafe-io &&
    apt-get install -q -y --no-install-recommends --download-only slurmd slurmctld slurm-client \
        slurm-wlm-basic-plugins libslurm38 fonts-dejavu-core &&
    ! dpkg -s binutils >/dev/null 2>&1 && ! dpkg -s slurmd >/dev/null 2>&1 &&
    ! command -v readelf' >"$build/apt.log" 2>&1 || {
    tail -n 30 "$build/apt.log" >&2
    exit 1
}
mv "$build" "$dir"
touch "$dir/ready"
echo "$dir/root"
