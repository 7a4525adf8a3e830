#!/bin/sh
# build-image.sh [SUITE]: the site node's base disk (tests/tests/site_node.rs): a Debian SUITE
# (default bookworm: Slurm 22.05.8) from the package registry, as a site installs a node:
# its own kernel (linux-image-amd64), systemd as PID 1, and Debian's slurmd, slurmctld,
# slurmdbd, slurm-client, munge and MariaDB from apt, their units enabled as the packages
# enable them and nothing configured (the test's payload configures Slurm as a site does).
# Prints the directory holding disk.img (ext4, the root file system), vmlinuz and
# initrd.img (the only line on stdout).
#
# Cached under ${SITE_NODE_CACHE:-/var/cache/rust-energy-slurm/site-node}/SUITE-KEY, KEY a
# hash of this script and its inputs: CI pays debootstrap once per change of them. Needs
# root (debootstrap, chroot), debootstrap and mkfs.ext4 (e2fsprogs >= 1.43, for -d).
# Package scripts run in a chroot in a private mount namespace, kept from starting daemons
# by a refusing policy-rc.d; nothing outside the cache directory is changed.
set -eu
suite=${1:-bookworm}
mirror=${SITE_NODE_MIRROR:-http://deb.debian.org/debian}
# the minimal system a node boots, then what a site installs on a node that is its own
# controller and accounting host; fonts-dejavu-core is the energy package's Recommends and
# prometheus-node-exporter makes the directory the README's EnergyMetricsFile writes into
base=systemd-sysv,linux-image-amd64,udev,kmod,iproute2,dbus,procps,e2fsprogs
site="slurmd slurmctld slurmdbd slurm-client munge mariadb-server fonts-dejavu-core prometheus-node-exporter"
# what the energy package's Depends add to those (senergy links libslurm, which Debian's
# daemons and client do not pull): downloaded into apt's cache, not installed, so that apt
# in the VM (no network) resolves the package's Depends itself as it would from a mirror
case $suite in
bookworm) fetched="libslurm38" ;; # Slurm 22.05.8
trixie) fetched="libslurm42" ;;   # Slurm 24.11.5
*) echo "build-image.sh: no site node for Debian $suite (bookworm, trixie)" >&2; exit 2 ;;
esac
key=$({ cat "$0"; echo "$suite $mirror $base $site $fetched"; } | sha256sum | cut -c1-16)
cache_root=${SITE_NODE_CACHE:-/var/cache/rust-energy-slurm/site-node}
cache=$cache_root/$suite-$key
if [ -r "$cache/disk.img" ] && [ -r "$cache/vmlinuz" ] && [ -r "$cache/initrd.img" ]; then
    echo "$cache"
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "build-image.sh: needs root (debootstrap) to build $cache" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "build-image.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
mkdir -p "$cache_root"
work=$(mktemp -d "$cache_root/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
t0=$(date +%s)
echo "== site node: debootstrap $suite into $root" >&2
debootstrap --variant=minbase --include="$base" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 40 "$work/debootstrap.log" >&2
    exit 1
}
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
echo "== site node: apt-get install $site (in a chroot)" >&2
# a private mount namespace: /proc, /sys and /dev/pts for the package scripts, gone with it
FETCHED=$fetched unshare -m --propagation private sh -eu -c '
    root=$1; shift
    mount -t proc proc "$root/proc"
    mount -t sysfs sys "$root/sys"
    mount --bind /dev/pts "$root/dev/pts"
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --no-install-recommends "$@"
    chroot "$root" apt-get clean
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --download-only $FETCHED
' sh "$root" $site >"$work/apt.log" 2>&1 || {
    tail -n 40 "$work/apt.log" >&2
    exit 1
}
rm -f "$root/usr/sbin/policy-rc.d"

# the node as its admin leaves it before configuring Slurm: a name, a root disk, and the
# test's payload disk (tests/tests/site_node.rs) whose entry script a oneshot runs at boot
echo sitenode1 >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tsitenode1\n' >"$root/etc/hosts"
cat >"$root/etc/fstab" <<'FSTAB'
/dev/vda / ext4 defaults 0 1
FSTAB
mkdir -p "$root/payload"
cat >"$root/etc/systemd/system/site-node-payload.service" <<'UNIT'
[Unit]
Description=the site-node test's payload (/payload/entry.sh on the second disk)
After=multi-user.target

[Service]
Type=oneshot
# the payload disk, once the kernel has it (udev's coldplug is slow under TCG); a boot
# without one (the image booted by hand) does nothing
ExecStart=/bin/sh -c 'for i in $$(seq 240); do [ -b /dev/vdb ] && break; sleep 0.5; done; \
    [ -b /dev/vdb ] || exit 0; mountpoint -q /payload || mount -o ro /dev/vdb /payload; \
    exec /payload/entry.sh'
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/site-node-payload.service \
    "$root/etc/systemd/system/multi-user.target.wants/site-node-payload.service"
# what a VM without a network or a clock of its own has no use for (each costs TCG time)
for u in apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer \
    fstrim.timer dpkg-db-backup.timer; do
    rm -f "$root/etc/systemd/system/timers.target.wants/$u"
done
echo 'root:root' | chroot "$root" chpasswd

cp -L "$root/vmlinuz" "$work/vmlinuz"
cp -L "$root/initrd.img" "$work/initrd.img"
size=$(du -sm "$root" | cut -f1)
echo "== site node: mkfs.ext4 -d ($size MB)" >&2
truncate -s $((size * 2 + 1024))M "$work/disk.img"
mkfs.ext4 -q -L sitenode -d "$root" "$work/disk.img"
rm -rf "$root"
# one image per suite: the older ones go
for old in "$cache_root/$suite"-*; do
    [ "$old" = "$cache" ] || rm -rf "$old"
done
mkdir -p "$cache"
mv "$work/disk.img" "$work/vmlinuz" "$work/initrd.img" "$cache/"
echo "== site node: built $cache in $(($(date +%s) - t0))s" >&2
echo "$cache"
