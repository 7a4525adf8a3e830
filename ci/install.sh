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
# yourself, install with sudo: without cargo on its PATH it installs what was built. The
# release is read from the built plugins themselves: a build for another release than
# the headers' (SLURM_EXPECTED_VERSION) is refused, nothing installed.
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
# The release each built plugin carries (its plugin_version, which Slurm's loader
# compares with its own), read from the file: what was built, whatever this shell's
# headers and SLURM_EXPECTED_VERSION say. Needs readelf (binutils).
built_for() {
    value=$(readelf -W --dyn-syms "$1" | awk '$8 == "plugin_version" { print $2; exit }')
    [ -n "$value" ] || return 1
    # the file offset of that address: its section's offset plus the distance into it
    offset=$(readelf -W -S "$1" | awk -v v="$value" '
        function hex(s,   i, n, c) { n = 0; s = tolower(s)
            for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)) - 1; n = n * 16 + c }
            return n }
        { sub(/^ *\[ *[0-9]+\]/, "") }
        NF >= 6 && $2 != "NOBITS" { a = hex($3); o = hex($4); z = hex($5); x = hex(v)
            if (a > 0 && x >= a && x < a + z) { printf "%d\n", x - a + o; exit } }')
    [ -n "$offset" ] || return 1
    n=$(od -An -tu4 -j "$offset" -N4 "$1" | tr -d ' ')
    printf '%d.%02d.%d' $((n >> 16)) $(((n >> 8) & 255)) $((n & 255))
}
for lib in "$target"/release/libacct_gather_energy_*.so; do
    built=$(built_for "$lib") || {
        echo "install.sh: cannot read the release $lib was built for (is readelf installed?)" >&2
        exit 1
    }
    if [ "$built" != "$slurm_release" ]; then
        echo "install.sh: $lib is built for Slurm $built, not $slurm_release (the headers in $include):" \
            "rebuild for $slurm_release (as yourself: cargo build --release with SLURM_INCLUDE_DIR or" \
            "SLURM_PREFIX set for it), or install into the Slurm of $built; nothing installed" >&2
        exit 1
    fi
done
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
echo "built for Slurm $slurm_release (read from the plugins): the daemons must run exactly this release"
