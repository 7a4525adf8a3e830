#!/bin/sh
# package.sh: builds a .deb of the plugins for one Slurm release and prints its absolute path (the
# only line on stdout). The Slurm is the one ci/install.sh builds for: SLURM_INCLUDE_DIR, else
# SLURM_PREFIX/include, else /usr/include (Debian's 22.05.8 from libslurm-dev).
#
# The package, slurm-energy-rust_<version>+slurm<X.Y.Z>_<arch>.deb, holds
#   <Slurm's plugin dir>/acct_gather_energy_rust_*.so and the Variorum sampler helper
#   /usr/bin/senergy                       where the workspace built it (target/release)
#   /usr/share/doc/slurm-energy-rust/      README.md, copyright, docs/, examples/ (conf/, the Grafana dashboard in grafana/)
# Slurm's loader refuses a plugin built for any other release (micro included), and takes
# one of any build of that release, so `Depends` admits exactly the upstream release of the
# package that owns the plugin directory it installs into, at any revision: Debian's
# `slurm-wlm-basic-plugins (>= 22.05.8), slurm-wlm-basic-plugins (<< 22.05.9~)` (Debian's
# security updates, 22.05.8-4+deb12uN, keep it installed; 22.05.9 needs the package built
# for 22.05.9), or whatever dpkg package owns that directory's libslurmfull.so (e.g.
# SchedMD's slurm-smd), its epoch kept. A Slurm
# installed from source (no dpkg package owns it) cannot be pinned: the package then
# depends on no Slurm package, says so in its description, and carries the release in its
# version. SLURM_DEB_DEPENDS=... replaces the computed Slurm dependency. Its preinst asks the
# Slurm of that directory its release (ci/slurm-release.sh, as ci/install.sh does: the
# plugin_version of Slurm's own plugins, read with sh and od, no binutils) and installs
# nothing unless it is the plugins' (SLURM_EXPECTED_VERSION stands in where that Slurm
# cannot tell). Its prerm warns, naming file and line, where a removal leaves a slurm.conf
# naming a rust_* plugin (packaging/slurm-conf-warning.sh); the removal goes on.
#
# Environment: SLURM_INCLUDE_DIR, SLURM_PREFIX, SLURM_EXPECTED_VERSION (as ci/install.sh),
# CARGO_TARGET_DIR, PACKAGE_OUT (directory of the .deb, default $CARGO_TARGET_DIR/debian).
# Needs dpkg-deb and dpkg-shlibdeps (dpkg-dev).
set -eu
cd "$(dirname "$0")/.."
. ci/slurm-target.sh
name=slurm-energy-rust
target=${CARGO_TARGET_DIR:-target}
out=$(realpath -m "${PACKAGE_OUT:-$target/debian}")
crate_version=$(awk '/^\[workspace.package\]/ { p = 1; next } /^\[/ { p = 0 }
    p && $1 == "version" { gsub(/"/, "", $3); print $3; exit }' Cargo.toml)
arch=$(dpkg --print-architecture)
version=$crate_version+slurm$slurm_release

stage=$(mktemp -d "${TMPDIR:-/tmp}/package-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/root
# the package is named and pinned for the headers' release: plugins built for another are
# refused (install.sh reads their release from them)
if [ -n "${SLURM_EXPECTED_VERSION:-}" ] && [ "$(slurm_release_normal "$SLURM_EXPECTED_VERSION")" != "$slurm_release" ]; then
    echo "package.sh: the headers in $include are Slurm $slurm_release, not SLURM_EXPECTED_VERSION=$SLURM_EXPECTED_VERSION" >&2
    exit 1
fi
SLURM_EXPECTED_VERSION=$slurm_release DESTDIR=$root BINDIR=/usr/bin sh ci/install.sh "$plugin_dir" >&2

doc=$root/usr/share/doc/$name
mkdir -p "$doc/examples"
install -m 0644 README.md "$doc/"
# the README, senergy --help and the examples point into docs/
mkdir -p "$doc/docs"
cp -R docs/. "$doc/docs/"
cp -R conf/. "$doc/examples/"
find "$doc/examples" "$doc/docs" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
cat >"$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: $name
Files: *
License: GPL-2.0-or-later
 On Debian systems the full text is in /usr/share/common-licenses/GPL-2.
EOF

# ---- Depends: the Slurm release (any revision), and the shared libraries the binaries need
owner=$(dpkg-query -S "$plugin_dir/libslurmfull.so" 2>/dev/null | cut -d: -f1 | head -n 1 || true)
if [ -n "${SLURM_DEB_DEPENDS:-}" ]; then
    slurm_dep=$SLURM_DEB_DEPENDS
    note="Built for Slurm $slurm_release ($SLURM_DEB_DEPENDS)."
elif [ -n "$owner" ]; then
    owner_version=$(dpkg-query -W -f='${Version}' "$owner")
    # [epoch:]upstream[-revision]: the upstream release must be the headers' (22.05.8,
    # 22.05.8+dfsg); the revision is the distribution's (4+deb12u3, a security update's u4)
    epoch=$(printf '%s\n' "$owner_version" | sed -n 's/^\([0-9]*\):.*/\1:/p')
    upstream=$(printf '%s\n' "${owner_version#"$epoch"}" | sed 's/-[^-]*$//')
    if [ "$(slurm_release_normal "$upstream" || true)" != "$slurm_release" ]; then
        echo "package.sh: $owner $owner_version owns $plugin_dir, but the headers in $include are Slurm $slurm_release" >&2
        exit 1
    fi
    # any revision of that upstream release, none of another: >= X.Y.Z admits every
    # X.Y.Z-r and X.Y.Z+repack-r, << X.Y.(Z+1)~ sorts below X.Y.(Z+1) and its pre-releases
    # (dpkg orders ~ before anything); the upstream as the owner spells it, epoch included
    owner_release=$(printf '%s\n' "$upstream" | sed 's/^\([0-9]*\.[0-9]*\.[0-9]*\).*/\1/')
    next=${owner_release%.*}.$(expr "${owner_release##*.}" + 1)
    slurm_dep="$owner (>= $epoch$owner_release), $owner (<< $epoch$next~)"
    note="Built for Slurm $slurm_release ($owner $owner_release, built against $owner_version; any revision of that release) and loaded by no other release."
else
    slurm_dep=""
    note="Built for Slurm $slurm_release installed from source in $(dirname "$plugin_dir"), which no package provides: install only where slurmd runs exactly that release."
fi
mkdir -p "$stage/debian"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$name" "$name" >"$stage/debian/control"
# dpkg-shlibdeps turns the NEEDED entries into package dependencies (libc6, libgcc-s1).
# The plugins link no Slurm library; senergy's libslurm, where it links one, is found in
# that Slurm's library directories and comes with the pinned Slurm (a from-source Slurm's
# has no package: --ignore-missing-info).
(cd "$stage" && find root -type f \( -name '*.so' -o -perm -u+x \) -exec \
    dpkg-shlibdeps --ignore-missing-info -l"$plugin_dir" -l"$(dirname "$plugin_dir")" -O {} +) \
    >"$stage/shlibs" 2>"$stage/shlibs.err" || {
    cat "$stage/shlibs.err" >&2
    exit 1
}
shlib_deps=$(sed -n 's/^shlibs:Depends=//p' "$stage/shlibs")
depends=${slurm_dep:+$slurm_dep, }$shlib_deps

mkdir -p "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: $arch
Maintainer: Slurm energy plugins in Rust <root@localhost>
Section: admin
Priority: optional
Depends: $depends
Recommends: fonts-dejavu-core
Installed-Size: $(du -sk "$root" | cut -f1)
Description: Slurm acct_gather_energy plugins in Rust (RAPL, IPMI, Variorum, Redfish, Cray, hwmon, GPU)
 acct_gather_energy/rust_rapl, rust_ipmi, rust_variorum, rust_redfish,
 rust_pm_counters, rust_hwmon and rust_gpu for slurmd and slurmstepd, so that sacct,
 sstat and scontrol show node energy and power.
 .
 $note
 Example slurm.conf and acct_gather.conf snippets are in
 /usr/share/doc/$name/examples.
EOF
# preinst: the Slurm whose plugin directory receives the plugins is asked its release before
# anything is unpacked (Depends cannot pin a Slurm installed from source, and a pinned one
# may have been replaced by hand); the check is ci/slurm-release.sh's, as install.sh's,
# which reads the release from that Slurm's own plugins with sh and od alone (no readelf:
# a controller or login host has no binutils, and no slurmd). Where the package pins its
# Slurm (Depends) and that Slurm is not unpacked yet (`dpkg -i` of this package first; apt
# unpacks the dependency first), there is nothing to ask: dpkg configures the package only
# beside the release its Depends admit.
{
    printf '#!/bin/sh\n# slurm-energy-rust preinst, written by ci/package.sh\nset -e\n'
    cat ci/slurm-release.sh
    printf 'dir="${DPKG_ROOT:-}%s"\n' "$plugin_dir"
    printf 'case "$1" in\ninstall | upgrade)\n'
    if [ -n "$slurm_dep" ]; then
        printf '    if [ ! -e "$dir/libslurmfull.so" ] && [ -z "${SLURM_EXPECTED_VERSION:-}" ]; then\n'
        printf '        echo "%s: no Slurm in $dir yet: dpkg configures this package only beside %s"\n' "$name" "$slurm_dep"
        printf '        exit 0\n    fi\n'
    fi
    printf '    check_slurm_release %s %s "$dir"\n    ;;\nesac\n' "$name" "$slurm_release"
} >"$root/DEBIAN/preinst"
# prerm: a removal (not an upgrade of this package) while a slurm.conf names a rust_* plugin
# warns, naming the file, the line and what to change, and goes on
{
    printf '#!/bin/sh\n# slurm-energy-rust prerm, written by ci/package.sh\n'
    cat packaging/slurm-conf-warning.sh
    printf 'case "$1" in\nremove | deconfigure)\n'
    printf '    warn_if_slurm_conf_names_rust %s "%s"\n    ;;\nesac\nexit 0\n' "$name" "$plugin_dir"
} >"$root/DEBIAN/prerm"
chmod 0755 "$root/DEBIAN/preinst" "$root/DEBIAN/prerm"
mkdir -p "$out"
deb=$out/${name}_${version}_$arch.deb
dpkg-deb --root-owner-group --build "$root" "$deb" >&2
# apt takes a local file only as a path (./x.deb or /x.deb): "Unsupported file" otherwise
echo "install it with: sudo apt install $(realpath --relative-to=. "$deb" | sed 's|^[^./]|./&|')" >&2
echo "$deb"
