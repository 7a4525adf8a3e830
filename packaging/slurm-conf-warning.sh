# slurm-conf-warning.sh (copied into the .deb's prerm by ci/package.sh and into the RPM's
# %preun by the spec): the warning a removal of the plugins gives while a slurm.conf still
# names one of them. Slurm's daemons load AcctGatherEnergyType's plugin at start (slurmd
# and slurmctld alike) and fail without it; the removal goes on (an admin may remove the
# package first and edit slurm.conf next), but says so on the terminal and in syslog.
# POSIX sh, grep and sed only (dpkg's Essential set; every RPM system's base).

# warn_if_slurm_conf_names_rust PROGRAM PLUGIN_DIR: for every slurm.conf found (SLURM_CONF,
# /etc/slurm, Debian's old /etc/slurm-llnl, PREFIX/etc of a Slurm installed from source in
# PREFIX/lib*/..., and the copies configless slurmds keep) and the files it includes, each
# line that sets AcctGatherEnergyType to a rust_* plugin is named, with its file and line,
# on stderr and through logger (syslog, the journal). Paths are under DPKG_ROOT where set
# (dpkg --root). Always succeeds.
warn_if_slurm_conf_names_rust() {
    _cw_root=${DPKG_ROOT:-}
    _cw_found=""
    for _cw_conf in ${SLURM_CONF:-} /etc/slurm/slurm.conf /etc/slurm-llnl/slurm.conf \
        "${2%/lib*/*}/etc/slurm.conf" /run/slurm/conf/slurm.conf \
        /var/spool/slurmd/conf-cache/slurm.conf /var/lib/slurm/slurmd/conf-cache/slurm.conf; do
        [ -f "$_cw_root$_cw_conf" ] || continue
        # the file and those it includes (`Include FILE`, FILE relative to its directory)
        _cw_files="$_cw_conf $(sed -n 's/^[[:space:]]*[Ii][Nn][Cc][Ll][Uu][Dd][Ee][[:space:]]\{1,\}\([^[:space:]#]\{1,\}\).*/\1/p' \
            "$_cw_root$_cw_conf" 2>/dev/null | sed "s|^\([^/]\)|${_cw_conf%/*}/\1|")"
        for _cw_file in $_cw_files; do
            [ -f "$_cw_root$_cw_file" ] || continue
            # slurm.conf's keys are case-insensitive; what follows a # is a comment
            _cw_lines=$(grep -n -i '^[[:space:]]*AcctGatherEnergyType[[:space:]]*=[^#]*rust_' "$_cw_root$_cw_file" 2>/dev/null |
                sed 's/[[:space:]]*#.*//')
            [ -n "$_cw_lines" ] || continue
            _cw_found="$_cw_found$(printf '%s\n' "$_cw_lines" | sed "s|^\([0-9]*\):[[:space:]]*|  $_cw_file line \1: |")
"
        done
    done
    [ -n "$_cw_found" ] || return 0
    _cw_message="$1: WARNING: slurm.conf names a plugin that this removal deletes:
$_cw_found$1: slurmd and slurmctld cannot load that plugin once it is gone: they will fail to
$1: start (and to reconfigure) with this slurm.conf. Set AcctGatherEnergyType=acct_gather_energy/none
$1: (or remove the line) in the file named above, on every node and the controller, and
$1: restart slurmctld and the slurmds (docs/operations.md, \"Turning it off, and removing it\")."
    printf '%s\n%s\n%s\n' "******************************************************************************" \
        "$_cw_message" "******************************************************************************" >&2
    if command -v logger >/dev/null 2>&1; then
        printf '%s\n' "$_cw_message" | logger -t "$1" -p daemon.warning 2>/dev/null || true
    fi
    return 0
}
