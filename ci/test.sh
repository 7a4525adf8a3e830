#!/bin/sh
# test.sh: the whole test suite, as CI runs it. Installs what it needs when run as root on
# Debian 12, checks format, then for each Slurm release builds, lints and runs unit,
# loader and cluster tests:
#   22.05  Debian 12's Slurm 22.05.8 (packages), target dir ${CARGO_TARGET_DIR:-target}
#   24.11  Slurm 24.11.5 built by ci/build-slurm.sh from Debian's source package (cached),
#          target dir ${CARGO_TARGET_DIR:-target}-24.11.5
#   26.05  Slurm 26.05.3 built by ci/build-slurm.sh from the upstream tarball
#          $SLURM_26_05_TARBALL (default ../shared/slurm/slurm-26.05.3.tar.gz beside the
#          repository, where CI has it; see ci/build-slurm.sh for where to download it),
#          target dir ${CARGO_TARGET_DIR:-target}-26.05.3
# SLURM_VERSIONS picks the passes (default "22.05 24.11 26.05"; e.g. SLURM_VERSIONS=22.05
# for a quick local run); a full X.Y.Z builds that release with ci/build-slurm.sh. Every
# pass runs even if an earlier one failed; the exit status says whether all passed.
# Each pass also makes the .deb (ci/package.sh), which the package test installs.
# To keep CI within its time, the middle release (24.11) skips the cluster tests named in
# SLURM_24_11_SKIP (default below: slow ones whose subject does not depend on the release,
# each run on 22.05 and 26.05); SLURM_24_11_SKIP= runs everything there too.
# The Slurm releases built from source are built at the start, in the background at the
# lowest CPU priority (nice 19), while the first pass runs: its cluster tests mostly wait on
# jobs, so the builds use idle cores; each pass then waits for its build (build-slurm.sh
# locks per release) and finds it cached.
# The loader and cluster tests need root; elsewhere they fail loudly unless
# ENERGY_TESTS_ALLOW_SKIP=1. Arguments are passed to the test binaries.
set -eu
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] && sh ci/deps.sh
[ -x "$HOME/.cargo/bin/cargo" ] && PATH="$HOME/.cargo/bin:$PATH"
base_target=${CARGO_TARGET_DIR:-target}
versions=$(echo "${SLURM_VERSIONS:-22.05 24.11 26.05}" | tr ',' ' ')
tarball_26_05=${SLURM_26_05_TARBALL:-../shared/slurm/slurm-26.05.3.tar.gz}
skip_24_11=${SLURM_24_11_SKIP-baseline_slurm_c_rapl_plugin_on_the_same_scenario
    slow_polls_back_to_back_jobs_an_array_and_a_slurmd_restart
    three_node_job_energy_is_the_sum_of_its_nodes a_frozen_bmc_mid_job_never_slows_slurmd
    a_crashing_or_hanging_library_never_slows_slurmd
    a_counter_reading_a_wrong_constant_mid_job_costs_nothing
    at_default_settings_a_power_step_is_within_two_percent
    a_frozen_then_dead_bmc_never_blocks_and_is_bridged rust_redfish_job_energy_matches_the_truth
    rust_pm_counters_job_energy_matches_the_truth
    rust_variorum_job_energy_matches_the_truth_with_both_api_generations
    shared_node_without_contain shared_without_cgroups_says_why_and_is_node_wide
    profile_energy_samples_reach_influxdb_with_the_true_power}

# the source tarball for a release that is not in Debian's archive (exported for
# ci/build-slurm.sh), unless SLURM_TARBALL is set
use_tarball() {
    if [ "$1" = 26.05.3 ] && [ -z "${SLURM_TARBALL:-}" ]; then
        [ -r "$tarball_26_05" ] || {
            echo "test.sh: Slurm 26.05.3 needs its source tarball at $tarball_26_05 (or SLURM_26_05_TARBALL); see ci/build-slurm.sh" >&2
            return 1
        }
        SLURM_TARBALL=$(realpath "$tarball_26_05")
        export SLURM_TARBALL
    fi
}

full_release() {
    case $1 in
    24.11) echo 24.11.5 ;;
    26.05) echo 26.05.3 ;;
    *) echo "$1" ;;
    esac
}

mkdir -p "$base_target"
for release in $versions; do
    release=$(full_release "$release")
    case $release in
    22.05 | 22.05.8) ;;
    *.*.*)
        echo "== Slurm $release: ci/build-slurm.sh in the background (nice 19, log $base_target/build-slurm-$release.log)"
        (use_tarball "$release" && nice -n 19 sh ci/build-slurm.sh "$release") \
            >"$base_target/build-slurm-$release.log" 2>&1 &
        # one build at a time: the next waits for this one
        wait $!
        ;;
    esac
done &

echo "== format"
cargo fmt --all -- --check

# pass RELEASE [TEST ARGS]: build, lint and test against one Slurm (run in a subshell)
pass() {
    release=$1
    shift
    unset SLURM_PREFIX SLURM_INCLUDE_DIR SLURM_LIB_DIR SLURM_PLUGIN_DIR SLURM_EXPECTED_VERSION
    case $release in
    22.05 | 22.05.8)
        # Debian's packages: headers in /usr/include, plugins and libslurmfull in the
        # default places every build script and ci/cluster.sh fall back to
        export CARGO_TARGET_DIR=$base_target
        ;;
    *.*.*)
        echo "== Slurm $release: ci/build-slurm.sh (waits for the background build)"
        use_tarball "$release"
        out=$(sh ci/build-slurm.sh "$release")
        prefix=$(echo "$out" | tail -n 1)
        [ -d "$prefix" ] || { echo "test.sh: ci/build-slurm.sh printed no prefix" >&2; exit 1; }
        # the build scripts and the tests take the headers, libslurmfull, the plugin dir
        # and the daemons from these (ci/cluster.sh reads SLURM_PREFIX)
        export SLURM_PREFIX="$prefix" SLURM_INCLUDE_DIR="$prefix/include" \
            SLURM_LIB_DIR="$prefix/lib/slurm" SLURM_PLUGIN_DIR="$prefix/lib/slurm" \
            SLURM_EXPECTED_VERSION="$release" CARGO_TARGET_DIR="$base_target-$release"
        ;;
    *)
        echo "test.sh: unknown Slurm release $release in SLURM_VERSIONS (22.05, 24.11, 26.05 or X.Y.Z)" >&2
        exit 2
        ;;
    esac
    echo "== Slurm $release: build (target dir $CARGO_TARGET_DIR)"
    cargo build --release --workspace
    echo "== Slurm $release: package"
    ENERGY_TEST_DEB=$(sh ci/package.sh)
    export ENERGY_TEST_DEB
    if [ "$release" = 26.05.3 ]; then
        echo "== Slurm $release: rpm (packaging/rpm through ci/rpm.sh)"
        sh ci/rpm.sh
    fi
    echo "== Slurm $release: lints"
    cargo clippy --release --workspace --all-targets -- -D warnings
    skips=""
    if [ "${release%.*}" = 24.11 ]; then
        for t in $skip_24_11; do skips="$skips --skip $t"; done
    fi
    echo "== Slurm $release: tests${skips:+ (skipping:$skips)}"
    # shellcheck disable=SC2086
    cargo test --release --workspace --no-fail-fast -- --test-threads=1 $skips "$@"
}

summary=""
failed=0
for release in $versions; do
    release=$(full_release "$release")
    t0=$(date +%s)
    set +e
    (
        set -e
        pass "$release" "$@"
    )
    rc=$?
    set -e
    seconds=$(($(date +%s) - t0))
    if [ "$rc" = 0 ]; then result=passed; else result="FAILED (status $rc)"; failed=1; fi
    echo "== Slurm $release: $result in ${seconds}s"
    summary="$summary
   Slurm $release: $result in ${seconds}s"
done
echo "== summary:$summary"
exit $failed
