# slurm-release.sh (sourced by slurm-target.sh and install.sh; copied into the .deb's preinst by
# package.sh and into the rpm's %pre by the spec): the Slurm release of a number, of a
# plugin file, of a plugin directory's Slurm, and the check that plugins built for one release
# go only where that release loads them. POSIX sh, no other file: it runs in maintainer
# scripts, before anything of the package is unpacked, on hosts that may have no binutils
# and no slurmd (a controller, a login host): it uses only sh, od, tr, sed and expr (dpkg's
# Essential packages; coreutils and sed on RPM systems).
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

# _sr_u FILE OFFSET SIZE: the unsigned SIZE-byte integer (1, 2, 4 or 8) at OFFSET of FILE,
# decimal, in this machine's byte order (od's): plugin_release reads plugins of this machine
_sr_u() {
    od -An -v -j "$2" -N "$3" -tu"$3" "$1" 2>/dev/null | tr -d ' \n'
}

# plugin_release FILE: the release a Slurm plugin was built for, its plugin_version (what the
# loader compares), read from the file without loading it. Needs only sh, od, tr and expr
# (dpkg's Essential set; coreutils on RPM systems), no readelf: a preinst or %pre runs on a
# controller or login host without binutils. The ELF64 shared object of this machine's byte
# order (its e_type reads 3, ET_DYN, only then); the symbol plugin_version is found in the
# dynamic symbol table (.dynsym, whose names are in the section it links, .dynstr) and its
# value, an address, is read where its section puts it in the file.
plugin_release() {
    _sr_file=$1
    [ -f "$_sr_file" ] && [ "$(od -An -tx1 -N5 "$_sr_file" 2>/dev/null | tr -d ' \n')" = 7f454c4602 ] &&
        [ "$(_sr_u "$_sr_file" 16 2)" = 3 ] || return 1
    _sr_shoff=$(_sr_u "$_sr_file" 40 8)
    _sr_shentsize=$(_sr_u "$_sr_file" 58 2)
    _sr_shnum=$(_sr_u "$_sr_file" 60 2)
    [ "$_sr_shentsize" = 64 ] && [ -n "$_sr_shnum" ] && [ "$_sr_shnum" -gt 0 ] || return 1
    # the section headers' 32-bit words, 16 a section: sh_type is the second (SHT_DYNSYM, 11)
    # shellcheck disable=SC2046
    set -- $(od -An -v -j "$_sr_shoff" -N $((_sr_shnum * 64)) -tu4 "$_sr_file" 2>/dev/null)
    [ $# = $((_sr_shnum * 16)) ] || return 1
    _sr_sym=""
    _sr_i=0
    while [ $# -ge 16 ]; do
        [ "$2" = 11 ] && _sr_sym=$((_sr_shoff + _sr_i * 64))
        shift 16
        _sr_i=$((_sr_i + 1))
    done
    [ -n "$_sr_sym" ] && [ "$(_sr_u "$_sr_file" $((_sr_sym + 56)) 8)" = 24 ] || return 1
    _sr_str=$(_sr_u "$_sr_file" $((_sr_sym + 40)) 4)
    [ -n "$_sr_str" ] && [ "$_sr_str" -lt "$_sr_shnum" ] || return 1
    _sr_str=$((_sr_shoff + _sr_str * 64))
    # every place of "plugin_version" and its NUL among .dynstr's bytes (a symbol's name may
    # be the tail of a longer one's: the linker merges them), as offsets into .dynstr
    _sr_pat=" 112 108 117 103 105 110 95 118 101 114 115 105 111 110 0 "
    _sr_rest=" $(od -An -v -j "$(_sr_u "$_sr_file" $((_sr_str + 24)) 8)" \
        -N "$(_sr_u "$_sr_file" $((_sr_str + 32)) 8)" -tu1 "$_sr_file" 2>/dev/null | tr -s ' \n' '  ')"
    _sr_names=""
    _sr_at=0
    while :; do
        case $_sr_rest in *"$_sr_pat"*) ;; *) break ;; esac
        # shellcheck disable=SC2086
        set -- ${_sr_rest%%"$_sr_pat"*}
        _sr_names="$_sr_names $((_sr_at + $#)) "
        _sr_at=$((_sr_at + $# + 15))
        _sr_rest=" ${_sr_rest#*"$_sr_pat"}"
    done
    [ -n "$_sr_names" ] || return 1
    # the symbols, 24 bytes (six 32-bit words) each: st_name first; st_shndx at 6, st_value at 8
    _sr_symoff=$(_sr_u "$_sr_file" $((_sr_sym + 24)) 8)
    # shellcheck disable=SC2046
    set -- $(od -An -v -j "$_sr_symoff" -N "$(_sr_u "$_sr_file" $((_sr_sym + 32)) 8)" -tu4 "$_sr_file" 2>/dev/null)
    _sr_i=0
    _sr_value=""
    while [ $# -ge 6 ]; do
        case $_sr_names in
        *" $1 "*)
            _sr_shndx=$(_sr_u "$_sr_file" $((_sr_symoff + _sr_i * 24 + 6)) 2)
            # defined in a section of the file (not undefined, 0, nor SHN_LORESERVE and above)
            if [ -n "$_sr_shndx" ] && [ "$_sr_shndx" -gt 0 ] && [ "$_sr_shndx" -lt "$_sr_shnum" ]; then
                _sr_value=$(_sr_u "$_sr_file" $((_sr_symoff + _sr_i * 24 + 8)) 8)
                break
            fi
            ;;
        esac
        shift 6
        _sr_i=$((_sr_i + 1))
    done
    [ -n "$_sr_value" ] || return 1
    # the file offset of that address: its section's offset plus the distance into it; a
    # section with file bytes (not SHT_NOBITS, 8) that holds all four
    _sr_sec=$((_sr_shoff + _sr_shndx * 64))
    [ "$(_sr_u "$_sr_file" $((_sr_sec + 4)) 4)" != 8 ] || return 1
    _sr_addr=$(_sr_u "$_sr_file" $((_sr_sec + 16)) 8)
    _sr_size=$(_sr_u "$_sr_file" $((_sr_sec + 32)) 8)
    [ "$_sr_value" -ge "$_sr_addr" ] && [ $((_sr_value + 4)) -le $((_sr_addr + _sr_size)) ] || return 1
    _sr_number=$(_sr_u "$_sr_file" $((_sr_value - _sr_addr + $(_sr_u "$_sr_file" $((_sr_sec + 24)) 8))) 4)
    [ -n "$_sr_number" ] || return 1
    slurm_release_of_number "$_sr_number"
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
        # shellcheck disable=SC2046
        if dir_release=$(set -- $("$_sr_slurmd" -V 2>/dev/null) && slurm_release_normal "${2:-}"); then
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
        if [ "$dir_release" = "$2" ]; then
            echo "$1: $3 is Slurm $dir_release's ($dir_release_from), the plugins' release"
            return 0
        fi
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
