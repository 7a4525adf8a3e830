#!/bin/sh
# install.sh [PLUGIN_DIR]: builds the plugins for the Slurm whose headers are at
# SLURM_INCLUDE_DIR (default SLURM_PREFIX/include if SLURM_PREFIX is set, else
# /usr/include) and copies each as
# PLUGIN_DIR/acct_gather_energy_<name>.so, the file name Slurm's loader looks for.
# PLUGIN_DIR defaults to that Slurm's plugin directory (the one holding
# acct_gather_energy_none.so). Set SLURM_EXPECTED_VERSION=X.Y.Z to refuse a build whose
# headers are not of the release your daemons run. The senergy report tool (linked to that
# Slurm's libslurm) goes to BIN_DIR (default /usr/local/bin).
set -eu
cd "$(dirname "$0")/.."
include=${SLURM_INCLUDE_DIR:-${SLURM_PREFIX:+$SLURM_PREFIX/include}}
include=${include:-/usr/include}
plugin_dir=${1:-}
if [ -z "$plugin_dir" ]; then
    prefix=$(dirname "$include")
    for d in "$prefix/lib/$(sh ci/multiarch.sh)/slurm-wlm" "$prefix/lib/slurm" "$prefix/lib64/slurm"; do
        if [ -e "$d/acct_gather_energy_none.so" ]; then plugin_dir=$d; break; fi
    done
    [ -n "$plugin_dir" ] || { echo "install.sh: no Slurm plugin directory found under $prefix; give one: ci/install.sh /path/to/PluginDir" >&2; exit 1; }
fi
target=${CARGO_TARGET_DIR:-target}
cargo build --release -p acct-gather-energy-rust-rapl -p acct-gather-energy-rust-ipmi \
    -p acct-gather-energy-rust-variorum -p acct-gather-energy-rust-variorum-sampler -p senergy
for lib in "$target"/release/libacct_gather_energy_*.so; do
    name=$(basename "$lib" | sed 's/^lib//')
    install -m 0755 "$lib" "$plugin_dir/$name"
    echo "installed $plugin_dir/$name"
done
# rust_variorum runs Variorum in this helper, found beside its plugin
install -m 0755 "$target/release/acct_gather_energy_rust_variorum_sampler" "$plugin_dir/"
echo "installed $plugin_dir/acct_gather_energy_rust_variorum_sampler"
bin_dir=${BIN_DIR:-/usr/local/bin}
install -m 0755 "$target/release/senergy" "$bin_dir/senergy"
echo "installed $bin_dir/senergy"
# (slurm_version.h has no version string in 22.05 or 24.11: spell out the number)
n=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$include/slurm/slurm_version.h")
printf 'built for Slurm %d.%02d.%d: the daemons must run exactly this release\n' \
    $((n >> 16)) $(((n >> 8) & 255)) $((n & 255))
