#!/bin/sh
# install.sh [PLUGIN_DIR]: builds the plugins for the Slurm whose headers are at
# SLURM_INCLUDE_DIR (default /usr/include) and copies each as
# PLUGIN_DIR/acct_gather_energy_<name>.so, the file name Slurm's loader looks for.
# PLUGIN_DIR defaults to that Slurm's plugin directory (the one holding
# acct_gather_energy_none.so). Set SLURM_EXPECTED_VERSION=X.Y.Z to refuse a build whose
# headers are not of the release your daemons run.
set -eu
cd "$(dirname "$0")/.."
include=${SLURM_INCLUDE_DIR:-/usr/include}
plugin_dir=${1:-}
if [ -z "$plugin_dir" ]; then
    prefix=$(dirname "$include")
    for d in "$prefix/lib/x86_64-linux-gnu/slurm-wlm" "$prefix/lib/slurm" "$prefix/lib64/slurm" \
             "$prefix/lib/aarch64-linux-gnu/slurm-wlm"; do
        if [ -e "$d/acct_gather_energy_none.so" ]; then plugin_dir=$d; break; fi
    done
    [ -n "$plugin_dir" ] || { echo "install.sh: no Slurm plugin directory found under $prefix; give one: ci/install.sh /path/to/PluginDir" >&2; exit 1; }
fi
target=${CARGO_TARGET_DIR:-target}
cargo build --release -p acct-gather-energy-rust-rapl
for lib in "$target"/release/libacct_gather_energy_*.so; do
    name=$(basename "$lib" | sed 's/^lib//')
    install -m 0755 "$lib" "$plugin_dir/$name"
    echo "installed $plugin_dir/$name"
done
grep -h 'define SLURM_VERSION_STRING' "$include/slurm/slurm_version.h" | sed 's/.*"\(.*\)"/built for Slurm \1: the daemons must run exactly this release/'
