#!/bin/sh
# slurm-layout.sh [--rust] SOURCE: measures, in Slurm's own headers, the internal layout
# slurm-bindings/src/internal.rs reads slurmstepd's step record through, and prints it.
# SOURCE is a Slurm source tree or tarball. The tree is configured (config.h and the
# generated slurm/*.h; nothing is built) and a small C file is compiled, not run, against
# it: each `offsetof`/`sizeof`/macro value comes out of the compiler's assembly, so what is
# printed is what slurmstepd itself was compiled with on this machine's ABI (64-bit Linux).
#
# Output, one `key=value` a line: `release` (META's Version[-Release]) and `version_number`
# (SLURM_VERSION_NUMBER), then the fields of internal.rs's StepRecordLayout under their Rust
# names, then the constants and sizes internal.rs keeps for every release (list_t,
# bitstr_t, its other hand mirrors of internal types and enums). With
# --rust, the entry of internal.rs's MEASURED_LAYOUTS for that release instead: adding a
# release to the table is pasting it there.
#
# A tarball's output is cached under ${SLURM_CACHE:-/var/cache/rust-energy-slurm}/layouts,
# keyed by the SHA-256 of the tarball and of this script (configure takes 30-60 s);
# a tree is measured each time (configured out of tree in a temporary directory, unless it
# already has a config.h).
#
# Environment: SLURM_CACHE as above; CC (default cc); SLURM_LAYOUT_CONFIGURE_FLAGS, extra
# ./configure arguments.
set -eu

log() { echo "slurm-layout.sh: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { echo "usage: ci/slurm-layout.sh [--rust] SLURM_SOURCE_TREE_OR_TARBALL" >&2; exit 2; }

rust=""
[ "${1:-}" = --rust ] && { rust=1; shift; }
[ $# -eq 1 ] || usage
source=$1
[ -e "$source" ] || die "$source does not exist"
script=$(realpath "$0")

# the Rust table entry of a key=value layout on stdin
to_rust() {
    awk -F= '
        $1 == "version_number" { v = substr($2, 3); while (length(v) < 6) v = "0" v
            printf "    (0x%s_%s_%s, StepRecordLayout {", toupper(substr(v, 1, 2)),
                toupper(substr(v, 3, 2)), toupper(substr(v, 5, 2)); next }
        $1 == "release" { release = $2; next }
        $1 !~ /^(step_|uid$|user_name$|job_|gres_)/ { next }
        { printf "%s %s: %s", sep, $1, $2; sep = "," }
        END { printf " }), // %s\n", release }'
}

emit() {
    if [ -n "$rust" ]; then to_rust <"$1"; else cat "$1"; fi
}

cache=${SLURM_CACHE:-/var/cache/rust-energy-slurm}/layouts
cached=""
if [ -f "$source" ]; then
    key=$(sha256sum "$source" | cut -c1-64)-$(sha256sum "$script" | cut -c1-12)
    cached=$cache/$key.txt
    if [ -s "$cached" ]; then
        emit "$cached"
        exit 0
    fi
    # one measurement per tarball at a time; a second caller waits and then finds it
    mkdir -p "$cache"
    exec 9>"$cache/.lock-$key"
    flock 9
    if [ -s "$cached" ]; then
        emit "$cached"
        exit 0
    fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/slurm-layout.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -f "$source" ]; then
    mkdir "$work/src"
    tar -xf "$source" -C "$work/src" --strip-components=1 || die "cannot unpack $source"
    src=$work/src
else
    src=$(realpath "$source")
fi
[ -r "$src/META" ] && [ -r "$src/src/slurmd/slurmstepd/slurmstepd_job.h" ] ||
    die "$source is not a Slurm source tree (no META or src/slurmd/slurmstepd/slurmstepd_job.h)"
# META's Version, and its Release where that is not the first (26.11.0-0rc1)
release=$(awk '$1 == "Version:" { v = $2 } $1 == "Release:" { r = $2 }
    END { print v (r != "" && r != "1" ? "-" r : "") }' "$src/META")

if [ -r "$src/config.h" ]; then
    build=$src
else
    build=$work/build
    mkdir "$build"
    log "Slurm $release: configure (log $work/configure.log, 30-60 s)"
    # shellcheck disable=SC2086 # the extra flags are words
    (cd "$build" && "$src/configure" --disable-dependency-tracking --disable-debug \
        ${SLURM_LAYOUT_CONFIGURE_FLAGS:-} >"$work/configure.log" 2>&1) ||
        { tail -n 30 "$work/configure.log" >&2; die "configure of $source failed"; }
fi
version_number=$(awk '$2 == "SLURM_VERSION_NUMBER" { print $3; exit }' \
    "$build/slurm/slurm_version.h" 2>/dev/null) ||
    true
[ -n "$version_number" ] || die "no SLURM_VERSION_NUMBER in $build/slurm/slurm_version.h"

# first_header PATH...: the first of those the tree has (headers moved between releases)
first_header() {
    for h in "$@"; do
        [ -r "$src/$h" ] && { echo "$h"; return 0; }
    done
    die "$source has none of $*"
}
# src/common up to 22.05 (the profile's as slurm_acct_gather_profile.h), src/interfaces from 23.02
gres_h=$(first_header src/interfaces/gres.h src/common/gres.h)
profile_h=$(first_header src/interfaces/acct_gather_profile.h src/common/slurm_acct_gather_profile.h)

# Each value becomes an immediate in an asm comment line of the compiler's output
# ("%c0": the bare number). A value that needs more than 31 bits (a magic) is split in
# halves: x86-64's immediates are 32-bit signed.
cat >"$work/measure.h" <<'EOF'
#include <stddef.h>
#define LAYOUT(key, val) __asm__ volatile("\n@@layout " key "=%c0" : : "i"((long)(val)))
#define LAYOUT_HEX32(key, val) __asm__ volatile("\n@@layout " key "=hex:%c0:%c1" : : \
	"i"((long)(((unsigned long)(val) >> 16) & 0xffff)), "i"((long)((val) & 0xffff)))
EOF
cat >"$work/step.c" <<EOF
#include "config.h"
#include "src/slurmd/slurmstepd/slurmstepd_job.h"
#include "$gres_h"
#include "src/common/log.h"
#include "src/common/parse_config.h"
#include "src/common/read_config.h"
#include "$profile_h"
#include "$work/measure.h"
void measure_step_record(void)
{
	LAYOUT("step_id", offsetof(stepd_step_rec_t, step_id));
	LAYOUT("step_id_job", offsetof(slurm_step_id_t, job_id));
	LAYOUT("step_id_step", offsetof(slurm_step_id_t, step_id));
	LAYOUT("uid", offsetof(stepd_step_rec_t, uid));
	LAYOUT("user_name", offsetof(stepd_step_rec_t, user_name));
	LAYOUT("job_gres_list", offsetof(stepd_step_rec_t, job_gres_list));
	LAYOUT("step_gres_list", offsetof(stepd_step_rec_t, step_gres_list));
	LAYOUT("gres_plugin_id", offsetof(gres_state_t, plugin_id));
	LAYOUT("gres_data", offsetof(gres_state_t, gres_data));
	LAYOUT("job_node_cnt", offsetof(gres_job_state_t, node_cnt));
	LAYOUT("job_bit_alloc", offsetof(gres_job_state_t, gres_bit_alloc));
	LAYOUT("job_cnt_node_alloc", offsetof(gres_job_state_t, gres_cnt_node_alloc));
	LAYOUT("step_node_cnt", offsetof(gres_step_state_t, node_cnt));
	LAYOUT("step_bit_alloc", offsetof(gres_step_state_t, gres_bit_alloc));
	LAYOUT("step_cnt_node_alloc", offsetof(gres_step_state_t, gres_cnt_node_alloc));
}
/* internal.rs's other hand mirrors of what Slurm does not install */
void measure_mirrors(void)
{
	LAYOUT("sp_options_size", sizeof(s_p_options_t));
	LAYOUT("sp_options_type", offsetof(s_p_options_t, type));
	LAYOUT("sp_string", S_P_STRING);
	LAYOUT("config_key_pair_size", sizeof(config_key_pair_t));
	LAYOUT("config_key_pair_value", offsetof(config_key_pair_t, value));
	LAYOUT("profile_dataset_size", sizeof(acct_gather_profile_dataset_t));
	LAYOUT("profile_dataset_type", offsetof(acct_gather_profile_dataset_t, type));
	LAYOUT("profile_field_uint64", PROFILE_FIELD_UINT64);
	LAYOUT("profile_no_parent", NO_PARENT);
	LAYOUT("profile_running", ACCT_GATHER_PROFILE_RUNNING);
	LAYOUT("profile_energy", ACCT_GATHER_PROFILE_ENERGY);
	LAYOUT("log_level_error", LOG_LEVEL_ERROR);
	LAYOUT("log_level_info", LOG_LEVEL_INFO);
	LAYOUT("log_level_verbose", LOG_LEVEL_VERBOSE);
	LAYOUT("log_level_debug", LOG_LEVEL_DEBUG);
	LAYOUT("log_level_debug2", LOG_LEVEL_DEBUG2);
}
EOF
# list_t and bitstr_t are private to list.c and bitstring.c: measured by compiling them
cat >"$work/list.c" <<EOF
#include "src/common/list.c"
#include "$work/measure.h"
void measure_list(void)
{
	LAYOUT_HEX32("list_magic", LIST_MAGIC);
	LAYOUT("list_head", offsetof(struct xlist, head));
	LAYOUT("list_node_data", offsetof(struct listNode, data));
	LAYOUT("list_node_next", offsetof(struct listNode, next));
}
EOF
cat >"$work/bitstr.c" <<EOF
#include "src/common/bitstring.c"
#include "$work/measure.h"
void measure_bitstr(void)
{
	LAYOUT_HEX32("bitstr_magic", BITSTR_MAGIC);
	LAYOUT("bitstr_overhead", BITSTR_OVERHEAD);
}
EOF
{
    echo "release=$release"
    echo "version_number=$version_number"
    for part in step list bitstr; do
        ${CC:-cc} -S -o - -w -I"$build" -I"$src" -I"$src/slurm" "$work/$part.c" \
            2>"$work/$part.err" >"$work/$part.s" ||
            { head -n 30 "$work/$part.err" >&2; die "Slurm $release: measuring $part failed"; }
        awk -F'[=:]' '$1 ~ /^[ \t]*@@layout / {
            sub(/^[ \t]*@@layout /, "", $1)
            if ($2 == "hex") printf "%s=0x%04x%04x\n", $1, $3, $4; else print $1 "=" $2 }' \
            "$work/$part.s"
    done
} >"$work/layout.txt"
lines=$(wc -l <"$work/layout.txt")
[ "$lines" -eq 39 ] || { cat "$work/layout.txt" >&2; die "Slurm $release: $lines lines measured, 39 expected"; }

if [ -n "$cached" ]; then
    cp "$work/layout.txt" "$cached.tmp.$$"
    mv "$cached.tmp.$$" "$cached"
fi
emit "$work/layout.txt"
