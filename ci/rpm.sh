#!/bin/sh
# rpm.sh: builds the binary RPM of packaging/rpm/slurm-energy-rust.spec from this checkout
# (its tracked files, uncommitted changes included) for the Slurm whose headers ci/install.sh
# would use (SLURM_INCLUDE_DIR, else SLURM_PREFIX/include, else /usr/include), and prints
# the path of the .rpm (last line on stdout). Runs where rpmbuild is (Debian: the rpm
# package); where no slurm-devel is in the RPM database (Debian) the spec's
# BuildRequires are not checked. Environment: CARGO_TARGET_DIR (the RPM build uses
# $CARGO_TARGET_DIR/rpm-build), PACKAGE_OUT (default $CARGO_TARGET_DIR/rpm).
set -eu
cd "$(dirname "$0")/.."
. ci/slurm-target.sh
spec=packaging/rpm/slurm-energy-rust.spec
version=$(awk '$1 == "Version:" { print $2; exit }' "$spec")
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out=$(realpath -m "${PACKAGE_OUT:-$target/rpm}")

top=$(mktemp -d "${TMPDIR:-/tmp}/rpmbuild.XXXXXX")
trap 'rm -rf "$top"' EXIT
mkdir -p "$top/SOURCES"
tree=$(git stash create 2>/dev/null || true)
git archive --format=tar.gz --prefix="slurm-energy-rust-$version/" -o "$top/SOURCES/slurm-energy-rust-$version.tar.gz" \
    "${tree:-HEAD}"
nodeps=""
rpm -q slurm-devel >/dev/null 2>&1 || nodeps=--nodeps
# shellcheck disable=SC2086
CARGO_TARGET_DIR=$target/rpm-build rpmbuild -bb $nodeps --define "_topdir $top" \
    --define "slurm_include $include" --define "slurm_plugindir $plugin_dir" "$spec" >&2
mkdir -p "$out"
for f in "$top"/RPMS/*/*.rpm; do
    cp "$f" "$out/"
    echo "$out/$(basename "$f")"
done
