#!/bin/sh
# build-slurm.sh VERSION: provides Slurm VERSION (e.g. 24.11.5) built from the upstream
# tarball of Debian's source package slurm-wlm, installed under
#   ${SLURM_CACHE:-/var/cache/rust-energy-slurm}/slurm-VERSION
# and prints that prefix as the last line on stdout (progress goes to stderr). An install
# that completed earlier (its stamp file is written last) is reused at once.
# build-slurm.sh --source VERSION: only fetches and checks that source tarball and prints
# its path (what ci/slurm-layout.sh measures: a cached install has no source tree).
#
# The source comes from the Debian mirror this machine already uses, through apt with a
# private sources list and lists directory (nothing under /etc or /var/lib/apt is
# written): `apt-get source --download-only slurm-wlm=DEBVERSION` from a deb-src line for
# SLURM_DEB_SUITE; where the mirror serves the .orig.tar.gz but not the .dsc, the tarball
# is fetched from the pool with curl. Either way its SHA-256 is checked against the
# (signed) Sources index; the tarball and that SHA-256 are kept under SLURM_CACHE/sources
# and checked again at each later use.
#
# Environment (all optional):
#   SLURM_CACHE=/var/cache/rust-energy-slurm   where installs and build logs are kept
#   SLURM_DEB_MIRROR=     Debian mirror URL (default: the one in /etc/apt/sources.list*)
#   SLURM_DEB_SUITE=trixie          suite whose Sources list has VERSION
#   SLURM_DEB_VERSION=    Debian version of slurm-wlm (default: the newest VERSION-N there)
#   SLURM_TARBALL=        a Slurm VERSION source tarball to use instead of downloading
#                         (Debian has no 26.05: CI uses ../shared/slurm/slurm-26.05.3.tar.gz,
#                         cut from the upstream tag slurm-26-05-3-1; elsewhere take
#                         https://download.schedmd.com/slurm/slurm-26.05.3.tar.bz2 or
#                         https://github.com/SchedMD/slurm/archive/refs/tags/slurm-26-05-3-1.tar.gz)
#   SLURM_TARBALL_SHA256= its SHA-256, checked before use; known for the tarballs CI uses
#                         (below), required for any other
#   SLURM_BUILD_JOBS=     make -j (default: number of CPUs)
#   SLURM_CFLAGS=-O1 -g0 -pipe   the C compiler's flags
#   SLURM_NVML_H=         NVIDIA's nvml.h (PyPI's nvidia-nvml-dev wheel ships it): the build
#                         also has gpu/nvml, auth/slurm (libjwt-dev, libjson-c-dev) and cgroup/v2
#                         (libdbus-1-dev, libbpf-dev), and fails where any is missing. Use it with its own
#                         SLURM_CACHE (tests/hardware/slurm_on_a_real_gpu.py's bundle does).
#
# Build dependencies (build-essential, pkg-config, libmunge-dev, libmariadb-dev,
# libcurl4-openssl-dev for the influxdb profile plugin, libdbus-1-dev for cgroup/v2, curl) are
# installed with apt-get when missing and running as root; package scripts are kept from
# starting services. The build takes 2-4 minutes on 2 cores (shared libraries only).
set -eu

log() { echo "build-slurm.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { echo "usage: ci/build-slurm.sh [--source] VERSION   (e.g. 24.11.5)" >&2; exit 2; }

# ---- the source tarball
# The first deb URI of this machine's own suite (not -security/-updates), from one-line
# .list files or deb822 .sources files.
host_mirror() {
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk -v s="$codename" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            if ($(i + 1) == s) { print $i; exit } }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v s="$codename" '
            function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " s " ") && enabled != "no" && uris != "") { split(uris, u, " "); print u[1] }
                               types = suites = uris = enabled = "" }
            /^[ \t]*$/ { flush(); next }
            /^#/ { next }
            { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
              if (key == "types") types = $0; else if (key == "suites") suites = $0
              else if (key == "uris") uris = $0; else if (key == "enabled") enabled = tolower($0) }
            END { flush() }' "$f"
    done
}

# SHA-256 of the tarballs CI is given through SLURM_TARBALL
known_sha256() {
    case $1 in
    slurm-23.02.7.tar.gz) echo 8981d8788b35f2c3756c351df0a562315cc2f64fb51fd4fbc0e871592d8cabc0 ;;
    slurm-23.11.4.tar.gz) echo db337f4c285a1b9c05e48f4d027f4acb1c22476d4a955408011d36b28cbd7a92 ;;
    slurm-24.05.8.tar.gz) echo 5ab9e48ff0f848d7d88600f6e7610915fa8d6c70da12404c40e7312b26a59b22 ;;
    slurm-25.05.8.tar.gz) echo beac66e778b75aaab2e480065e2ff3b167da0a9aafea678c791804889108d09f ;;
    slurm-25.11.7.tar.gz) echo 6c2d6cdc6615b850996c803aa3869546c0f584e0d5e640f9bcbc5a851199c6ad ;;
    slurm-26.05.3.tar.gz) echo d41a71248d57816f873a990bcc085a79d746b69a9bbe6f2a0b64dc75536a5b51 ;;
    # SchedMD's master of 2026-08-20 (284c3b9), `git archive --prefix=slurm-26.11.0-0rc1/`
    slurm-26.11.0-0rc1.tar.gz) echo 57276bb243afda16f8b93955e92b4c66adece55cfba640f79744cfca21465cdd ;;
    esac
}

# fetch_source: sets $tarball to the checked source tarball of Slurm $version: SLURM_TARBALL,
# or Debian's upstream tarball, downloaded once into $cache/sources and checked against the
# SHA-256 recorded beside it (from the signed Sources index). Needs $work and $buildlog.
fetch_source() {
    sources=$cache/sources
    mkdir -p "$sources"
    exec 8>"$cache/.lock-source-$version"
    flock 8
    record=$sources/slurm-$version.sha256
    if [ -z "${SLURM_TARBALL:-}" ] && [ -s "$record" ] &&
        (cd "$sources" && sha256sum -c --quiet "$record" >/dev/null 2>&1); then
        tarball=$sources/$(awk '{ print $2; exit }' "$record")
        log "Slurm $version: $tarball (kept from an earlier download, SHA-256 checked)"
        exec 8>&-
        return 0
    fi
    tarball=${SLURM_TARBALL:-}
    if [ -n "$tarball" ]; then
        [ -r "$tarball" ] || die "SLURM_TARBALL=$tarball is not readable"
        sha=${SLURM_TARBALL_SHA256:-$(known_sha256 "$(basename "$tarball")")}
        [ -n "$sha" ] || die "no SHA-256 known for $tarball: set SLURM_TARBALL_SHA256 to the one its publisher gives"
        echo "$sha  $tarball" | sha256sum -c --quiet - >&2 ||
            die "$tarball does not match SHA-256 $sha"
        log "Slurm $version: $tarball (SHA-256 checked)"
    else
        mirror=${SLURM_DEB_MIRROR:-$(host_mirror | head -n 1)}
        [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list*; set SLURM_DEB_MIRROR"
        mirror=${mirror%/}
        suite=${SLURM_DEB_SUITE:-trixie}
        log "Slurm $version: source package slurm-wlm from $mirror $suite"
        mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/src"
        keyring=""
        [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] &&
            keyring="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        echo "deb-src $keyring$mirror $suite main" >"$work/apt/sources.list"
        set -- -o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null \
            -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache" \
            -o Acquire::Languages=none -o APT::Sandbox::User=root
        apt-get "$@" -q update >>"$buildlog" 2>&1 ||
            { tail -n 20 "$buildlog" >&2; die "apt-get update for $mirror $suite (deb-src) failed"; }
        apt-cache "$@" showsrc slurm-wlm >"$work/showsrc" 2>>"$buildlog" || true
        debversion=${SLURM_DEB_VERSION:-$(awk -v v="$version" '/^Version: / && index($2, v "-") == 1 { print $2 }' \
            "$work/showsrc" | sort -V | tail -n 1)}
        [ -n "$debversion" ] || die "slurm-wlm $version-* is not in $suite's Sources (has: $(awk '/^Version: / { printf "%s ", $2 }' "$work/showsrc")); set SLURM_DEB_SUITE or SLURM_TARBALL"
        # name and SHA-256 of the upstream tarball in that version's record
        awk -v d="$debversion" '
            /^Package: / { rec = ""; ver = "" }
            /^Version: / { ver = $2 }
            /^Checksums-Sha256:/ { in_sum = 1; next }
            /^[^ ]/ { in_sum = 0 }
            in_sum && ver == d && $3 ~ /\.orig\.tar\./ { print $1, $3; exit }' "$work/showsrc" >"$work/orig"
        read -r sha orig <"$work/orig" || die "no .orig.tar in the Sources record of slurm-wlm $debversion"
        dir=$(awk -v d="$debversion" '/^Version: / { ver = $2 } /^Directory: / && ver == d { print $2; exit }' "$work/showsrc")
        log "slurm-wlm $debversion: $orig"
        (cd "$work/src" && apt-get "$@" -q source --download-only "slurm-wlm=$debversion") >>"$buildlog" 2>&1 ||
            log "apt-get source did not fetch everything (see $buildlog); using the .orig tarball alone"
        if [ ! -s "$work/src/$orig" ]; then
            log "fetching $mirror/${dir:-pool/main/s/slurm-wlm}/$orig"
            curl -fsSL --retry 3 -o "$work/src/$orig" "$mirror/${dir:-pool/main/s/slurm-wlm}/$orig" ||
                die "cannot download $orig"
        fi
        echo "$sha  $work/src/$orig" | sha256sum -c --quiet - >&2 ||
            die "$orig does not match the SHA-256 of the Sources index"
        mv "$work/src/$orig" "$sources/$orig"
        echo "$sha  $orig" >"$record"
        tarball=$sources/$orig
    fi
    exec 8>&-
}

mode=build
[ "${1:-}" = --source ] && { mode=source; shift; }
[ $# -eq 1 ] || usage
version=$1
# a release (24.11.5), or a pre-release whose META names it (26.11.0-0rc1)
echo "$version" | grep -Eqx '[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z]+)?' || usage
base=${version%%-*}

cache=${SLURM_CACHE:-/var/cache/rust-energy-slurm}
if [ "$mode" = source ]; then
    mkdir -p "$cache"
    cache=$(cd "$cache" && pwd)
    buildlog=$cache/slurm-$version.source.log
    : >"$buildlog"
    sh "$(dirname "$0")/apt-install.sh" curl ca-certificates >>"$buildlog" 2>&1 ||
        { tail -n 30 "$buildlog" >&2; die "installing curl failed"; }
    work=$(mktemp -d "$cache/source-$version.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    fetch_source
    echo "$tarball"
    exit 0
fi
prefix=$cache/slurm-$version
stamp=$prefix/.build-complete
# what the tests use; a cached build that lacks any of it (an older recipe) is rebuilt
required="lib/slurm/libslurmfull.so lib/slurm/auth_munge.so lib/slurm/cred_munge.so
    lib/slurm/accounting_storage_mysql.so lib/slurm/acct_gather_energy_rapl.so
    lib/slurm/acct_gather_profile_influxdb.so sbin/slurmctld sbin/slurmd sbin/slurmdbd
    sbin/slurmstepd bin/sacct bin/scontrol include/slurm/slurm.h"
gpu_deps=""
if [ -n "${SLURM_NVML_H:-}" ]; then
    [ -r "$SLURM_NVML_H" ] || die "SLURM_NVML_H=$SLURM_NVML_H is not readable"
    # cred/slurm is part of auth_slurm.so; auth/slurm's daemons need serializer/json (json-c)
    required="$required lib/slurm/gpu_nvml.so lib/slurm/auth_slurm.so lib/slurm/serializer_json.so
        lib/slurm/cgroup_v2.so"
    gpu_deps="libjwt-dev libjson-c-dev libbpf-dev"
fi
complete() {
    [ -e "$stamp" ] || return 1
    for f in $required; do [ -e "$prefix/$f" ] || return 1; done
}
if complete; then
    echo "$prefix"
    exit 0
fi

mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
prefix=$cache/slurm-$version
stamp=$prefix/.build-complete
# one build per version at a time; a second caller waits and then finds the stamp
exec 9>"$cache/.lock-slurm-$version"
flock 9
if complete; then
    echo "$prefix"
    exit 0
fi
buildlog=$cache/slurm-$version.build.log
: >"$buildlog"
t0=$(date +%s)

# ---- build dependencies
sh "$(dirname "$0")/apt-install.sh" build-essential pkg-config libmunge-dev libmariadb-dev \
    libcurl4-openssl-dev libdbus-1-dev $gpu_deps curl ca-certificates >>"$buildlog" 2>&1 ||
    { tail -n 30 "$buildlog" >&2; die "installing the build dependencies failed"; }

work=$(mktemp -d "$cache/build-$version.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
fetch_source

# ---- configure, make, make install
mkdir -p "$work/slurm"
tar -xf "$tarball" -C "$work/slurm" --strip-components=1
cd "$work/slurm"
minor=${base#*.}
grep -Eq "^ *Major:[[:space:]]+${base%%.*}\$" META &&
    grep -Eq "^ *Minor:[[:space:]]+${minor%.*}\$" META &&
    grep -Eq "^ *Micro:[[:space:]]+${base##*.}\$" META ||
    die "$tarball is not Slurm $version (META: $(grep -E 'Major|Minor|Micro' META | tr -s ' \t\n' ' '))"
rm -rf "$prefix"
jobs=${SLURM_BUILD_JOBS:-$(nproc)}
with_nvml=""
if [ -n "${SLURM_NVML_H:-}" ]; then
    # nvml.h comes without libnvidia-ml.so (the driver brings that): configure and the link
    # of gpu_nvml.so only need a library exporting NVML's names, so one is made with every
    # function nvml.h declares, each returning NVML_ERROR_UNKNOWN. Its soname is the
    # driver's, so gpu_nvml.so loads the driver's real library on a GPU machine; the stub
    # itself is never installed.
    mkdir -p "$work/nvml/include" "$work/nvml/lib/stubs"
    cp "$SLURM_NVML_H" "$work/nvml/include/nvml.h"
    sed -n 's/.*DECLDIR[[:space:]]\{1,\}\(nvml[A-Za-z0-9_]*\)[[:space:]]*(.*/\1/p' "$SLURM_NVML_H" | sort -u |
        awk '{ print "int " $1 "(void) { return 999; }" }' >"$work/nvml/stub.c"
    [ -s "$work/nvml/stub.c" ] || die "$SLURM_NVML_H declares no NVML function"
    cc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o "$work/nvml/lib/stubs/libnvidia-ml.so" \
        "$work/nvml/stub.c" || die "cannot build the NVML link stub"
    with_nvml="--with-nvml=$work/nvml"
    log "gpu/nvml against $SLURM_NVML_H ($(wc -l <"$work/nvml/stub.c") NVML functions in the link stub)"
fi
log "configure (log: $buildlog)"
# Slurm's default build adds -ggdb3 -O1 (--enable-debug): the tests need no debug symbols,
# and -g0 makes every compile lighter. NDEBUG stays defined, as in a production build.
./configure --prefix="$prefix" --sysconfdir="$prefix/etc" --with-munge=/usr \
    --disable-static --disable-dependency-tracking --disable-debug $with_nvml \
    CFLAGS="${SLURM_CFLAGS:--O1 -g0 -pipe}" >>"$buildlog" 2>&1 ||
    { tail -n 30 "$buildlog" >&2; die "configure failed"; }
# munge is mandatory (configure fails without it); MySQL only warns: check it was found
grep -q '^#define HAVE_MYSQL 1' config.h ||
    die "configure found no MySQL/MariaDB client library (libmariadb-dev): accounting_storage/mysql would be missing"
if [ -n "${SLURM_NVML_H:-}" ]; then
    for def in HAVE_NVML:nvml.h HAVE_JWT:libjwt-dev; do
        grep -q "^#define ${def%%:*} 1" config.h || die "configure found no ${def#*:} (${def%%:*})"
    done
    grep -q 'checking for dbus-1 .*yes' "$buildlog" || die "configure found no dbus-1 (libdbus-1-dev): no cgroup/v2"
fi
log "make -j$jobs (2-4 minutes on 2 cores)"
make -j"$jobs" >>"$buildlog" 2>&1 || { tail -n 40 "$buildlog" >&2; die "make failed"; }
log "make install"
make install >>"$buildlog" 2>&1 || { tail -n 30 "$buildlog" >&2; die "make install failed"; }

for f in $required; do
    [ -e "$prefix/$f" ] || die "the install lacks $prefix/$f"
done
number=$(echo "$base" | awk -F. '{ printf "0x%02x%02x%02x", $1, $2, $3 }')
grep -Eiq "^#define SLURM_VERSION_NUMBER $number\$" "$prefix/include/slurm/slurm_version.h" ||
    die "$prefix/include/slurm/slurm_version.h is not $version ($number)"

mkdir -p "$prefix/etc"
{
    echo "version=$version"
    echo "source=${debversion:+slurm-wlm $debversion }$(basename "$tarball")"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) seconds=$(($(date +%s) - t0))"
} >"$stamp.tmp"
mv "$stamp.tmp" "$stamp"
log "Slurm $version installed in $prefix ($(($(date +%s) - t0)) s)"
echo "$prefix"
