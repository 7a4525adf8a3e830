#!/bin/sh
# reversion.sh VERSION OUT DEB...: each DEB rebuilt into OUT as version VERSION, its files
# and scripts untouched: what a later build of the same packages presents to apt (a Debian
# security update, a new upstream release). The packages of one source pin one another
# exactly (slurmd: `slurm-wlm-basic-plugins (= 22.05.8-4+deb12u3)`): every relation naming
# the old version names VERSION instead, so the set installs together as the real one does.
set -eu
[ $# -ge 3 ] || {
    echo "usage: reversion.sh VERSION OUT DEB..." >&2
    exit 2
}
version=$1
out=$2
shift 2
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/reversion.XXXXXX")
trap 'rm -rf "$work"' EXIT
for deb in "$@"; do
    rm -rf "$work/pkg"
    dpkg-deb -R "$deb" "$work/pkg"
    old=$(dpkg-deb -f "$deb" Version)
    name=$(dpkg-deb -f "$deb" Package)
    arch=$(dpkg-deb -f "$deb" Architecture)
    # Version: and every "(= OLD)", "(>= OLD)", "(<< OLD)" in the relation fields; the old
    # version's dots are literal to sed (a plus sign is literal in a basic expression)
    old_re=$(printf '%s\n' "$old" | sed 's/[.*[^$\\]/\\&/g')
    sed -i -e "s/^Version: .*/Version: $version/" \
        -e "/^\(Depends\|Pre-Depends\|Recommends\|Suggests\|Breaks\|Conflicts\|Replaces\|Provides\):/s/\([(=<> ]\)$old_re)/\1$version)/g" \
        "$work/pkg/DEBIAN/control"
    # no compression: these packages live for one test
    dpkg-deb -Znone -b "$work/pkg" "$out/${name}_${version}_$arch.deb" >/dev/null
done
