#!/bin/sh
# in-root.sh ROOT SCRATCH CMD...: runs CMD chrooted in ROOT, in private mount and PID
# namespaces (nothing it mounts is seen outside; whatever it starts dies with it), with
# /proc, a /dev of its own and the machine's resolv.conf inside. SCRATCH set: ROOT is only read, the
# lower layer of an overlay whose upper layer is SCRATCH/upper, so that successive calls
# with one SCRATCH see each other's changes and ROOT (bookworm-root.sh's cache) never
# changes; SCRATCH/repo, where it exists, is /srv/repo inside (read only). SCRATCH empty:
# ROOT itself is written (what bookworm-root.sh does while it builds ROOT).
set -eu
[ $# -ge 3 ] || {
    echo "usage: in-root.sh ROOT SCRATCH CMD..." >&2
    exit 2
}
if [ -z "${IN_ROOT_INSIDE:-}" ]; then
    IN_ROOT_INSIDE=1 exec unshare --mount --pid --fork --propagation private -- "$0" "$@"
fi
root=$1
scratch=$2
shift 2
if [ -n "$scratch" ]; then
    mkdir -p "$scratch/upper" "$scratch/work" "$scratch/root"
    mount -t overlay energy-root -o "lowerdir=$root,upperdir=$scratch/upper,workdir=$scratch/work" "$scratch/root"
    root=$scratch/root
    if [ -d "$scratch/repo" ]; then
        mkdir -p "$root/srv/repo"
        mount --bind -o ro "$scratch/repo" "$root/srv/repo"
    fi
fi
mount -t proc proc "$root/proc"
# a /dev of its own: the few devices apt and dpkg use, and a private devpts; not the
# machine's /dev, whose /dev/log would carry the root's syslog lines into the machine's log
mount -t tmpfs -o mode=0755 energy-dev "$root/dev"
for node in null zero full random urandom tty; do
    touch "$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
done
mkdir "$root/dev/pts"
mount -t devpts -o newinstance,ptmxmode=0666 energy-devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
cp /etc/resolv.conf "$root/etc/resolv.conf"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
