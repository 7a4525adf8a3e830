#!/bin/sh
# install.sh [PLUGIN_DIR]: builds the plugins for the Slurm whose headers are at
# SLURM_INCLUDE_DIR (default SLURM_PREFIX/include if SLURM_PREFIX is set, else
# /usr/include) and copies each as
# PLUGIN_DIR/acct_gather_energy_<name>.so, the file name Slurm's loader looks for.
# PLUGIN_DIR defaults to that Slurm's plugin directory (the one holding
# libslurmfull.so). `senergy`, where the workspace built
# it, goes to BINDIR (default /usr/local/bin). DESTDIR=/stage puts every file under
# /stage (what ci/package.sh does) and leaves the paths themselves as they are. Build as
# yourself, install with sudo: without cargo on its PATH it installs what was built. The
# release is read from the built plugins themselves and must be that of the Slurm whose
# plugin directory receives them (its own plugins', else `slurmd -V` beside it) and
# SLURM_EXPECTED_VERSION's where set (which stands in for a directory whose Slurm cannot
# tell): otherwise nothing is installed and the message names the release to build for.
set -eu
cd "$(dirname "$0")/.."
plugin_dir=${1:-}
. ci/slurm-target.sh
dest=${DESTDIR:-}
bindir=${BINDIR:-/usr/local/bin}
target=${CARGO_TARGET_DIR:-target}
# every plugin, its helpers and senergy: the workspace but its tests. Under sudo, whose
# PATH has no cargo (rustup installs it per user), what the user built is installed.
if command -v cargo >/dev/null 2>&1; then
    cargo build --release --workspace --exclude energy-tests
elif ls "$target"/release/libacct_gather_energy_*.so >/dev/null 2>&1; then
    echo "install.sh: no cargo on this PATH (sudo's?): installing what $target/release holds" >&2
else
    echo "install.sh: no cargo on this PATH and nothing built in $target/release: build first," \
        "as yourself: cargo build --release --workspace --exclude energy-tests" >&2
    exit 1
fi
# The release the plugins were built for, read from each file (its plugin_version, which
# Slurm's loader compares with its own): what was built, whatever this shell's headers say.
built=""
for lib in "$target"/release/libacct_gather_energy_*.so; do
    release=$(plugin_release "$lib") || {
        echo "install.sh: cannot read the release $lib was built for (no plugin_version in an ELF64 shared object of this machine: rebuild it)" >&2
        exit 1
    }
    if [ "${built:-$release}" != "$release" ]; then
        echo "install.sh: $target/release holds plugins built for Slurm $built and for $release:" \
            "rebuild them all (cargo build --release); nothing installed" >&2
        exit 1
    fi
    built=$release
done
# ...must be the release of the Slurm whose plugin directory receives them (and
# SLURM_EXPECTED_VERSION's), asked of that Slurm: under sudo nothing was built here, and
# the headers prove nothing about it. Files staged under DESTDIR for a package are checked
# by the package's own install script where they land.
receiving_slurm=$plugin_dir
[ -z "$dest" ] || receiving_slurm=""
check_slurm_release install.sh "$built" "$receiving_slurm" || exit 1
mkdir -p "$dest$plugin_dir"
for lib in "$target"/release/libacct_gather_energy_*.so; do
    name=$(basename "$lib" | sed 's/^lib//')
    install -m 0755 "$lib" "$dest$plugin_dir/$name"
    echo "installed $dest$plugin_dir/$name"
done
# rust_variorum runs Variorum in this helper, found beside its plugin
install -m 0755 "$target/release/acct_gather_energy_rust_variorum_sampler" "$dest$plugin_dir/"
echo "installed $dest$plugin_dir/acct_gather_energy_rust_variorum_sampler"
if [ -x "$target/release/senergy" ]; then
    mkdir -p "$dest$bindir"
    install -m 0755 "$target/release/senergy" "$dest$bindir/senergy"
    echo "installed $dest$bindir/senergy"
fi
echo "built for Slurm $built (read from the plugins): the daemons must run exactly this release"
