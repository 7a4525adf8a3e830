# slurm-release.sh (sourced by slurm-target.sh and install.sh; copied into the .deb's preinst by
# package.sh and into the rpm's %pre by the spec): the Slurm release of a number, of a
# plugin file, of a plugin directory's Slurm, and the check that plugins built for one release
# go only where that release loads them. POSIX sh, no other file: it runs in maintainer scripts.
#
# Slurm's loader (src/common/plugin.c, _verify_syms, every release 22.05 to 26.11) refuses a
# plugin unless (plugin_version & 0xffffff) == (SLURM_VERSION_NUMBER & 0xffffff): major,
# minor AND micro must match (only spank plugins get away with major.minor), so the releases
# here are compared whole, as X.Y.Z.

# slurm_release_of_number N: X.Y.Z of a SLURM_VERSION_NUMBER (0xXXYYZZ, or decimal)
slurm_release_of_number() {
    printf '%d.%02d.%d' $(($1 >> 16)) $((($1 >> 8) & 255)) $(($1 & 255))
}

# slurm_release_normal X.Y.Z[-anything]: the same release as slurm_release_of_number writes
# it (22.5.8 and 22.05.8 are one release; 26.11.0-0rc1 is 26.11.0); fails on anything else
slurm_release_normal() {
    set -- "$(printf '%s\n' "$1" | sed -n 's/^\([0-9]\{1,3\}\)\.\([0-9]\{1,3\}\)\.\([0-9]\{1,3\}\)\([^0-9].*\)\{0,1\}$/\1 \2 \3/p')"
    [ -n "$1" ] || return 1
    # shellcheck disable=SC2086
    set -- $1
    # (expr: "08" is decimal to it, octal or an error to $((...)))
    printf '%d.%02d.%d' "$(expr "$1" + 0)" "$(expr "$2" + 0)" "$(expr "$3" + 0)"
}

# plugin_release FILE: the release a Slurm plugin was built for, its plugin_version (what the
# loader compares), read from the file without loading it. Needs readelf (binutils).
plugin_release() {
    command -v readelf >/dev/null 2>&1 || return 1
    _sr_value=$(readelf -W --dyn-syms "$1" 2>/dev/null | awk '$8 == "plugin_version" { print $2; exit }')
    [ -n "$_sr_value" ] || return 1
    # the file offset of that address: its section's offset plus the distance into it
    _sr_offset=$(readelf -W -S "$1" | awk -v v="$_sr_value" '
        function hex(s,   i, n, c) { n = 0; s = tolower(s)
            for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)) - 1; n = n * 16 + c }
            return n }
        { sub(/^ *\[ *[0-9]+\]/, "") }
        NF >= 6 && $2 != "NOBITS" { a = hex($3); o = hex($4); z = hex($5); x = hex(v)
            if (a > 0 && x >= a && x < a + z) { printf "%d\n", x - a + o; exit } }')
    [ -n "$_sr_offset" ] || return 1
    slurm_release_of_number "$(od -An -tu4 -j "$_sr_offset" -N4 "$1" | tr -d ' ')"
}

# slurm_release_at DIR: sets dir_release to the release of the Slurm whose plugin directory
# DIR is (the one that holds its libslurmfull.so), and dir_release_from to where it was read. First the
# plugin_version of plugins that Slurm installed there with it (plugins every release since
# 22.05 builds, whatever its options), else `slurmd -V` of the slurmd beside it
# (PREFIX/sbin for PREFIX/lib/slurm or PREFIX/lib64/slurm, /usr/sbin for Debian's
# /usr/lib/<multiarch>/slurm-wlm). Fails where DIR is no Slurm's (no libslurmfull.so: a
# directory of one's own, whose Slurm only slurm.conf knows) or neither source answers.
slurm_release_at() {
    [ -e "$1/libslurmfull.so" ] || return 1
    for _sr_f in proctrack_pgid.so sched_backfill.so jobacct_gather_linux.so; do
        if [ -f "$1/$_sr_f" ] && dir_release=$(plugin_release "$1/$_sr_f"); then
            dir_release_from="plugin_version of $1/$_sr_f"
            return 0
        fi
    done
    for _sr_slurmd in "$1/../../sbin/slurmd" "$1/../../../sbin/slurmd"; do
        [ -x "$_sr_slurmd" ] || continue
        # "slurm 24.11.5", "slurm-wlm 22.05.8"
        if dir_release=$(slurm_release_normal "$("$_sr_slurmd" -V 2>/dev/null | awk '{ print $2; exit }')"); then
            dir_release_from="$_sr_slurmd -V"
            return 0
        fi
    done
    return 1
}

# check_slurm_release PROGRAM BUILT DIR: succeeds if plugins built for Slurm BUILT (X.Y.Z) may
# go into DIR, the plugin directory of the Slurm that will load them: that Slurm's release
# (slurm_release_at) and SLURM_EXPECTED_VERSION, where set, must both be BUILT. Where DIR's
# Slurm cannot tell its release, SLURM_EXPECTED_VERSION must say it; DIR empty checks
# SLURM_EXPECTED_VERSION alone (files staged for a package, checked where it is installed).
# Otherwise says, as PROGRAM, which release to build for, and fails.
check_slurm_release() {
    _sr_rebuild="(SLURM_INCLUDE_DIR or SLURM_PREFIX naming its headers: README.md, Install); nothing installed"
    if [ -n "${SLURM_EXPECTED_VERSION:-}" ]; then
        _sr_expected=$(slurm_release_normal "$SLURM_EXPECTED_VERSION") || {
            echo "$1: SLURM_EXPECTED_VERSION=$SLURM_EXPECTED_VERSION is not a release (X.Y.Z); nothing installed" >&2
            return 1
        }
        if [ "$_sr_expected" != "$2" ]; then
            echo "$1: the plugins were built for Slurm $2, but SLURM_EXPECTED_VERSION=$SLURM_EXPECTED_VERSION:" \
                "build them for $_sr_expected $_sr_rebuild" >&2
            return 1
        fi
    fi
    [ -n "$3" ] || return 0
    if slurm_release_at "$3"; then
        [ "$dir_release" = "$2" ] && return 0
        echo "$1: the plugins were built for Slurm $2, but $3 is Slurm $dir_release's ($dir_release_from)," \
            "whose loader takes only plugins built for $dir_release: build them for $dir_release $_sr_rebuild" >&2
        return 1
    fi
    [ -n "${SLURM_EXPECTED_VERSION:-}" ] && return 0
    echo "$1: cannot tell which Slurm release loads plugins from $3 (no libslurmfull.so with" \
        "Slurm's own plugins or a slurmd beside it): set SLURM_EXPECTED_VERSION to the release its" \
        "slurmd runs (slurmd -V); the plugins were built for Slurm $2; nothing installed" >&2
    return 1
}
