# slurm-target.sh (sourced by install.sh and package.sh): the Slurm a build is for.
# Sets
#   include        its headers: SLURM_INCLUDE_DIR, else SLURM_PREFIX/include, else /usr/include
#                  (the same rule as slurm-bindings/build.rs)
#   slurm_release  X.Y.Z, from SLURM_VERSION_NUMBER in slurm/slurm_version.h
#   plugin_dir     its plugin directory (the one under the headers' prefix that holds
#                  libslurmfull.so), unless plugin_dir or SLURM_PLUGIN_DIR is set
# (and, from ci/slurm-release.sh, the functions that tell and check releases)
. ci/slurm-release.sh
include=${SLURM_INCLUDE_DIR:-${SLURM_PREFIX:+$SLURM_PREFIX/include}}
include=${include:-/usr/include}
# (slurm_version.h has no version string in 22.05 or 24.11: spell out the number)
n=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$include/slurm/slurm_version.h" 2>/dev/null || true)
case $n in
0x* | 0X*) slurm_release=$(slurm_release_of_number "$n") ;;
*)
    echo "$(basename "$0"): no SLURM_VERSION_NUMBER in $include/slurm/slurm_version.h; set SLURM_INCLUDE_DIR or SLURM_PREFIX" >&2
    exit 1
    ;;
esac
plugin_dir=${plugin_dir:-${SLURM_PLUGIN_DIR:-}}
if [ -z "$plugin_dir" ]; then
    prefix=$(dirname "$include")
    for d in "$prefix/lib/$(sh "$(dirname "$0")/multiarch.sh")/slurm-wlm" "$prefix/lib/slurm" \
        "$prefix/lib64/slurm"; do
        if [ -e "$d/libslurmfull.so" ]; then plugin_dir=$d; break; fi
    done
    [ -n "${plugin_dir:-}" ] || {
        echo "$(basename "$0"): no Slurm plugin directory (with libslurmfull.so) under $prefix" >&2
        exit 1
    }
fi
