#!/bin/sh
# install.sh [PLUGIN_DIR]: builds the plugins for the Slurm whose headers are at
# SLURM_INCLUDE_DIR (default SLURM_PREFIX/include if SLURM_PREFIX is set, else
# /usr/include) and copies each as
# PLUGIN_DIR/acct_gather_energy_<name>.so, the file name Slurm's loader looks for.
# PLUGIN_DIR defaults to that Slurm's plugin directory (the one holding
# libslurmfull.so). Set SLURM_EXPECTED_VERSION=X.Y.Z to refuse a build whose
# headers are not of the release your daemons run. `senergy`, where the workspace built
# it, goes to BINDIR (default /usr/local/bin). DESTDIR=/stage puts every file under
# /stage (what ci/package.sh does) and leaves the paths themselves as they are. Build as
# yourself, install with sudo: without cargo on its PATH it installs what was built.
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
echo "built for Slurm $slurm_release: the daemons must run exactly this release"
