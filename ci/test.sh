#!/bin/bash
# test.sh: the whole test suite, as CI runs it. Installs what it needs when run as root on
# Debian 12, checks format, then for each Slurm release builds the plugins and tests them:
#   22.05  Debian 12's Slurm 22.05.8 (packages), target dir ${CARGO_TARGET_DIR:-target}
#   23.02  Slurm 23.02.7, from ${SLURM_TARBALL_DIR:-../shared/slurm}/slurm-23.02.7.tar.gz
#   23.11  Slurm 23.11.4 (Ubuntu 24.04 LTS's), from .../slurm-23.11.4.tar.gz
#   24.05  Slurm 24.05.8, from .../slurm-24.05.8.tar.gz
#   24.11  Slurm 24.11.5, from the upstream tarball of Debian 13's source package
#   25.05  Slurm 25.05.8, from ${SLURM_TARBALL_DIR:-../shared/slurm}/slurm-25.05.8.tar.gz
#   25.11  Slurm 25.11.7, from ${SLURM_TARBALL_DIR:-../shared/slurm}/slurm-25.11.7.tar.gz
#   26.05  Slurm 26.05.3, from ${SLURM_TARBALL_DIR:-../shared/slurm}/slurm-26.05.3.tar.gz
#   26.11  SchedMD's 26.11 pre-release (master of 2026-08-20, META 26.11.0-0rc1), from
#          ${SLURM_TARBALL_DIR:-../shared/slurm}/slurm-26.11.0-0rc1.tar.gz
# Those built from source are built by ci/build-slurm.sh (cached; it says where else to get
# the tarballs), each into target dir ${CARGO_TARGET_DIR:-target}-X.Y.Z.
#
# SLURM_VERSIONS picks the releases (default all nine, e.g. SLURM_VERSIONS=22.05 for a
# quick local run; a full X.Y.Z builds that release). Each release runs at one of three
# tiers, the first that names it:
#   all      the releases in SLURM_FULL (default: the oldest and the newest release of
#            SLURM_VERSIONS that is not a pre-release): every test, with clippy and the unit tests
#            (release-independent logic, so once per full pass); ONCE_TESTS (below)
#            on the first of them only;
#   loader   the releases in SLURM_LOADER_ONLY (default 23.02, 24.05 and 25.05: series no
#            supported distribution ships, older than the newest three): the build, the package, and each plugin loaded
#            and driven by that release's own loader (LOADER_TESTS below), no cluster;
#   release  the others: what depends on the release: the build, the package, the loader
#            and export tests, and one cluster test per plugin, senergy and the package
#            (RELEASE_TESTS below).
# SLURM_FULL=none or SLURM_LOADER_ONLY=none empties that tier.
#
# Time (2 cores): the work is in two lanes. The build lane builds each release in turn
# (Slurm from source in the background at nice 19 from the start, then cargo, at nice 19
# but for the first release's, which every test waits for; each release's cargo builds
# compile every crate once: the package's and the tests' builds reuse them);
# the test lane runs a release's tests as soon as its build is done, while the build lane
# goes on with the next release: the tests mostly wait on Slurm jobs and simulators. The
# build lane also runs the lints and docs of the every-test tier once its tests have
# started, and the loader tier's tests (no cluster, a minute each) after each such build.
# Within a release, ci/run-tests.py runs the tests side by side (TEST_JOBS, default 4: each
# cluster claims its own ports and job ids; the release tier RELEASE_TEST_JOBS, default 6).
# Each pass's time and the total are printed.
#
# The site-node tier (tests/tests/site_node.rs): Debian nodes in VMs under qemu's TCG,
# Debian's own Slurm started by its units, this project's .deb installed with apt: Debian 12
# (Slurm 22.05.8: the 22.05.8 build's .deb) and Debian 13 (Slurm 24.11.5: the 24.11.5
# build's, packaged for Debian's plugin directory). Their disks (ci/site-node/build-image.sh,
# cached under /var/cache/rust-energy-slurm/site-node) are built in the background from the
# start; each VM runs as a pass of its own, one after the other, beside the test lane, once
# its .deb is built and 22.05.8's tests are done (SITE_NODE=0 leaves them out).
#
# Every pass runs even if an earlier one failed; the exit status says whether all passed.
# The loader and cluster tests need root; elsewhere they fail loudly unless
# ENERGY_TESTS_ALLOW_SKIP=1. Arguments are test-name filters (libtest's).
set -eu
cd "$(dirname "$0")/.."
t_start=$(date +%s)
[ "$(id -u)" = 0 ] && sh ci/deps.sh
[ -x "$HOME/.cargo/bin/cargo" ] && PATH="$HOME/.cargo/bin:$PATH"
base_target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
tarball_dir=${SLURM_TARBALL_DIR:-../shared/slurm}

full_release() {
    case $1 in
    22.05) echo 22.05.8 ;;
    23.02) echo 23.02.7 ;;
    23.11) echo 23.11.4 ;;
    24.05) echo 24.05.8 ;;
    24.11) echo 24.11.5 ;;
    25.05) echo 25.05.8 ;;
    25.11) echo 25.11.7 ;;
    26.05) echo 26.05.3 ;;
    26.11) echo 26.11.0-0rc1 ;;
    *) echo "$1" ;;
    esac
}
versions=""
for r in $(echo "${SLURM_VERSIONS:-22.05 23.02 23.11 24.05 24.11 25.05 25.11 26.05 26.11}" | tr ',' ' '); do
    r=$(full_release "$r")
    echo "$r" | grep -Eqx '[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z]+)?' || {
        echo "test.sh: unknown Slurm release $r in SLURM_VERSIONS (22.05, 23.02, 23.11, 24.05, 24.11, 25.05, 25.11, 26.05, 26.11 or X.Y.Z[-PRE])" >&2
        exit 2
    }
    versions="$versions $r"
done
sorted=$(echo $versions | tr ' ' '\n' | sort -V)
# the newest release that is not a pre-release (26.11.0-0rc1): it runs every test and
# builds the RPM, whose Version cannot carry a pre-release's dash
newest_release=$(echo "$sorted" | grep -v -- - | tail -n 1)
[ -n "$newest_release" ] || newest_release=$(echo "$sorted" | tail -n 1)
full=""
for r in $(echo "${SLURM_FULL:-$(echo "$sorted" | head -n 1) $newest_release}" | tr ',' ' '); do
    full="$full $(full_release "$r")"
done
is_full() { case " $full " in *" $1 "*) return 0 ;; esac; return 1; }
loader_only=""
for r in $(echo "${SLURM_LOADER_ONLY:-23.02 24.05 25.05}" | tr ',' ' '); do
    loader_only="$loader_only $(full_release "$r")"
done
# tier RELEASE: all, loader or release (above); SLURM_FULL wins over SLURM_LOADER_ONLY
tier() {
    if is_full "$1"; then
        echo all
    else
        case " $loader_only " in *" $1 "*) echo loader ;; *) echo release ;; esac
    fi
}
# the order of the passes, longest test work first (the test lane's): every test, then the
# release tier, then the loader tier; by release within a tier
order=$(for want in all release loader; do
    for r in $sorted; do if [ "$(tier "$r")" = "$want" ]; then echo "$r"; fi; done
done)

# What a release that does not run everything still tests (names, libtest's substrings).
# The loader tier: each plugin loaded and driven by that release's loader (libslurmfull's
# plugin framework in energy-driver, no daemons) and its exports checked; the cluster
# tests' binaries (cluster*) are skipped there.
LOADER_TESTS=${LOADER_TESTS:-"
    loader:: plugin_exports:: gpu::node_and_step_energy_match_the_truth_for_both_vendors
    ipmi::dcmi_energy_over_rmcp_plus_matches_the_truth pm_counters:: redfish::
    variorum_sampler::every_generation_speaks_the_protocol
    hwmon::a_grace_hopper_nodes_energy_is_its_modules_with_the_other_rails_beside
    hwmon::a_sensor_that_vanishes_and_returns_is_bridged
    hwmon::a_servers_acpi_meter_on_its_device_is_the_node
    hwmon::a_node_without_a_power_meter_reports_unavailable_and_says_why"}
# The release tier: those, and each plugin measured in a cluster of that release, a shared
# node and its killed jobs (how a step's last read is known changes with the release: 25.05's
# extern step runs no task), senergy and the package.
RELEASE_TESTS=${RELEASE_TESTS:-"$LOADER_TESTS
    cluster::rust_rapl_job_energy_matches_the_truth_on_wrapping_amd_counters
    cluster_ipmi::rust_ipmi_job_energy_over_rmcp_plus_matches_the_truth
    cluster_redfish::rust_redfish_job_energy_matches_the_truth
    cluster_pm_counters::rust_pm_counters_job_energy_matches_the_truth
    cluster_variorum::rust_variorum_job_energy_matches_the_truth_with_both_api_generations
    cluster_gpu::jobs_sharing_a_gpu_node_each_get_their_own_gpu_and_stack_with_rapl
    cluster_gpu::jobs_sharing_a_gpu_by_shards_split_it_by_shares_and_use
    cluster_trust::a_forged_or_cleaned_gpu_environment_changes_no_jobs_figure
    cluster_shared::shared_node_with_contain
    cluster_lifecycle::a_hetjob_overlapping_steps_array_elements_and_killed_jobs_get_their_shares
    cluster_senergy::job_report_names_the_right_nodes_and_matches_sacct
    cluster_check::senergy_check_tells_a_healthy_node_from_broken_ones
    package::"}

# Tests the every-test tier runs on its first release only (the oldest): long, and what
# they hold (the ledger's bound over a job of 1 000 steps, a counter's bad values) is the
# same logic on every release, whose release-dependent part (the step record, the cgroup
# layout, the steps' lives, the plugin read through the loader) the other tests hold on each.
# So do a source's accuracy at its default polling and the helper process's recovery: what
# they hold is the source's poller and the helper, which no release changes (each release's
# cluster still measures every plugin in RELEASE_TESTS); the README's configuration (the
# family's keys, parsed alike by every release); and the RPM built against a slurm-devel
# layout (the spec and ci/rpm.sh; 2-3 minutes of build); and two attacks that run alone
# (a process titled as a slurmstepd: /proc and the kernel's sockets, which no release
# changes; CPU time moved out of a job: cgroups a job's owner owns, v1 before 23.02 only).
# And the static power learned from counters that step (the ledger's floor) and a GPU held
# idle (the ledger's split of the devices' energy): the ledger's logic, while which GPUs a
# step holds, the part each release changes, every release's GPU tests hold. And what a
# node's reader alone decides: the metrics file scraped and the intensity applied (the
# ledger's figures and senergy's arithmetic), each node's own BMC by its name, a shared
# node without cgroups (a log line and the node's figure) and an IPMI power step split on a
# shared node alone (the split; every release's shared node runs in RELEASE_TESTS).
# No other tier runs them.
ONCE_TESTS=${ONCE_TESTS:-"cluster_trust::a_job_of_a_thousand_steps_keeps_the_ledger_small
    cluster::a_counter_reading_a_wrong_constant_mid_job_costs_nothing
    cluster::a_counter_reading_a_wrong_constant_just_past_a_wrap_costs_nothing
    cluster_ipmi::at_default_settings_a_power_step_is_within_two_percent
    cluster_variorum::at_default_settings_a_power_step_is_within_two_percent
    cluster_variorum::a_crashing_or_hanging_library_never_slows_slurmd
    cluster_redfish::at_its_default_period_a_power_step_is_within_the_sampling_bound
    cluster_admin::the_readmes_configuration_boots_slurm_as_printed
    package::the_rpm_builds_against_slurm_devel_with_a_rustup_cargo
    cluster_trust::processes_titled_as_slurmstepds_change_no_jobs_figure
    cluster_trust::cpu_time_moved_out_of_a_job_is_still_its_owners
    cluster_power::a_constant_node_is_learned_and_its_jobs_pay_alike_whatever_the_counters_step
    cluster_gpu::a_job_holding_two_gpus_using_one_holds_the_other_idle
    cluster_conf_examples::the_rust_rapl_example_gives_each_mode_its_figure
    cluster_conf_examples::the_rust_ipmi_example_gives_each_mode_its_figure
    cluster_conf_examples::the_rust_variorum_example_gives_each_mode_its_figure
    cluster_conf_examples::the_rust_gpu_example_gives_each_mode_its_figure
    cluster_conf_examples::the_rust_pm_counters_example_gives_each_mode_its_figure
    cluster_conf_examples::the_rust_redfish_example_gives_each_mode_its_figure
    cluster_trust::gpu_use_moved_out_of_its_job_is_still_its_owners
    cluster_grant::a_grant_held_back_by_an_output_fifo_still_reaches_slurmd
    cluster_metrics::prometheus_scrapes_each_jobs_energy_as_sacct_shows_it
    cluster_metrics::senergy_applies_the_intensity_at_each_power_sample_and_plots_a_three_node_job
    cluster_redfish::each_node_reads_the_bmc_its_name_names
    cluster_shared::shared_without_cgroups_says_why_and_is_node_wide
    cluster_shared::shared_rust_ipmi_job_alone_with_a_power_step"}
first_full=$(for r in $sorted; do if is_full "$r"; then echo "$r"; fi; done | head -n 1)

slurm_tarball() {
    case $1 in
    22.05.8 | 24.11.5) ;; # Debian's packages; Debian 13's source package
    *) [ -n "${SLURM_TARBALL:-}" ] || echo "$(realpath -m "$tarball_dir/slurm-$1.tar.gz")" ;;
    esac
}

# slurm_source RELEASE: the path of RELEASE's source tarball (ci/build-slurm.sh --source:
# Debian's, kept in its cache, for 22.05.8 from Debian 12's source package)
slurm_source() {
    local tb suite=${SLURM_DEB_SUITE:-}
    tb=$(slurm_tarball "$1")
    [ "$1" != 22.05.8 ] || suite=${suite:-bookworm}
    SLURM_TARBALL=${tb:-${SLURM_TARBALL:-}} SLURM_DEB_SUITE=$suite \
        sh ci/build-slurm.sh --source "$1" | tail -n 1
}

# measure_layout RELEASE: the step-record layout ci/slurm-layout.sh measures in RELEASE's
# headers, into $logs/layout-RELEASE.txt (cached per tarball: configure runs once)
measure_layout() {
    local src
    src=$(slurm_source "$1") && [ -r "$src" ] &&
        nice -n 19 sh ci/slurm-layout.sh "$src" >"$logs/layout-$1.txt"
}

mkdir -p "$base_target"
logs=$base_target/ci-logs
rm -rf "$logs"
mkdir -p "$logs"

# ---- the disk: what is used at the start, and the peak, sampled every 10 s (disk_report)
disk_start=$(df -Pk "$base_target" | awk 'NR == 2 { print $3 }')
echo "$disk_start" >"$logs/disk-peak"
echo "== disk: $(df -Pk "$base_target" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }') GiB free on the target dir's file system at the start"
(
    while sleep 10; do
        used=$(df -Pk "$base_target" 2>/dev/null | awk 'NR == 2 { print $3 }')
        peak=$(cat "$logs/disk-peak" 2>/dev/null) || exit 0
        [ -z "$used" ] || [ "$used" -le "$peak" ] || echo "$used" >"$logs/disk-peak"
    done
) &
disk_sampler=$!

# ---- the site node's disk, in the background from the start (debootstrap: the network)
# the site nodes: Debian's suite of each, and the Slurm release Debian ships in it
site_nodes=""
if [ "${SITE_NODE:-1}" = 1 ]; then
    # (sorted is one release a line)
    case " $(echo $sorted) " in *" 22.05.8 "*) site_nodes="12" ;; esac
    case " $(echo $sorted) " in *" 24.11.5 "*) site_nodes="$site_nodes 13" ;; esac
fi
site_suite() { case $1 in 12) echo bookworm ;; 13) echo trixie ;; esac; }
site_release() { case $1 in 12) echo 22.05.8 ;; 13) echo 24.11.5 ;; esac; }
if [ -n "$site_nodes" ]; then
    (
        for n in $site_nodes; do
            t1=$(date +%s)
            nice -n 19 sh ci/site-node/build-image.sh "$(site_suite "$n")" \
                >"$logs/site-node-$n-image.log" 2>&1
            echo "$? $(($(date +%s) - t1))" >"$logs/site-node-$n-image.done"
        done
    ) &
fi

# ---- the Slurm builds, in the background from the start, in the order of the passes
(
    for release in $order; do
        # the layout first: the test lane's first release needs it at once
        measure_layout "$release" >"$logs/layout-$release.log" 2>&1 || true
        [ "$release" = 22.05.8 ] && continue
        tb=$(slurm_tarball "$release")
        if [ -n "$tb" ] && [ ! -r "$tb" ]; then
            echo "test.sh: Slurm $release needs its source tarball at $tb (see ci/build-slurm.sh)" \
                >"$logs/build-slurm-$release.log"
            continue
        fi
        SLURM_TARBALL=${tb:-${SLURM_TARBALL:-}} nice -n 19 sh ci/build-slurm.sh "$release" \
            >"$logs/build-slurm-$release.log" 2>&1 || true
    done
) &

echo "== format"
cargo fmt --all -- --check
echo "== no import cycle across modules (ci/module-cycles.py)"
python3 ci/module-cycles.py
echo "== no file over 600 lines of code, inline tests included (ci/code-size.py)"
python3 ci/code-size.py --check 600
echo "== the figures of README.md and docs/, each on the source page its block links, after its self-test"
python3 ci/check-figures.py

# slurm_env RELEASE: the environment that builds and tests against RELEASE
slurm_env() {
    unset SLURM_PREFIX SLURM_INCLUDE_DIR SLURM_LIB_DIR SLURM_PLUGIN_DIR SLURM_EXPECTED_VERSION
    if [ "$1" = 22.05.8 ]; then
        # Debian's packages: headers in /usr/include, plugins and libslurmfull in the
        # default places every build script and the test clusters fall back to. The release
        # is named as ci/package.sh names it: slurm-sys's build script reads it, and a
        # change of it rebuilds every crate above slurm-sys
        export CARGO_TARGET_DIR=$base_target SLURM_EXPECTED_VERSION=22.05.8
        return 0
    fi
    local tb prefix
    tb=$(slurm_tarball "$1")
    prefix=$(SLURM_TARBALL=${tb:-${SLURM_TARBALL:-}} sh ci/build-slurm.sh "$1" | tail -n 1)
    [ -d "$prefix" ] || { echo "test.sh: ci/build-slurm.sh printed no prefix for $1" >&2; return 1; }
    # the build scripts and the tests take the headers, libslurmfull, the plugin dir
    # and the daemons from these (the test clusters read SLURM_PREFIX: tests/src/cluster)
    export SLURM_PREFIX="$prefix" SLURM_INCLUDE_DIR="$prefix/include" \
        SLURM_LIB_DIR="$prefix/lib/slurm" SLURM_PLUGIN_DIR="$prefix/lib/slurm" \
        SLURM_EXPECTED_VERSION="${1%%-*}" CARGO_TARGET_DIR="$base_target-$1"
}

# build RELEASE: the build lane's work for one release (run in a subshell)
build() {
    local release=$1 priority=19
    # the first release's build holds up every test (none runs before it) and runs at the
    # machine's priority, ahead of the Slurm builds and the site nodes' disks at nice 19;
    # the others at nice 19 too, beside the tests
    [ "$release" != "$(echo "$order" | head -n 1)" ] || priority=0
    echo "== Slurm $release: waiting for its build (log $logs/build-slurm-$release.log)"
    slurm_env "$release"
    if [ "$CARGO_TARGET_DIR" != "$base_target" ] && [ ! -d "$CARGO_TARGET_DIR/release" ] &&
        [ -d "$base_target/release" ]; then
        # the third-party crates do not depend on the release: compiled once, hard-linked
        # (cargo then rebuilds only the workspace's crates, about a third of a cold build)
        echo "== Slurm $release: target dir seeded from $base_target"
        python3 ci/seed-target.py "$base_target" "$CARGO_TARGET_DIR"
    fi
    echo "== Slurm $release: build (target dir $CARGO_TARGET_DIR)"
    # the workspace but its tests, as ci/install.sh builds it for the package: the same
    # features (the tests' crates widen some shared ones), so the package compiles nothing
    nice -n "$priority" cargo build --release --workspace --exclude energy-tests
    # what checks internal.rs's step-record layout against the headers (in the test lane)
    nice -n "$priority" cargo build --release --workspace --exclude energy-tests --example step-record-layout
    # the loader tier tests no package
    if [ "$(tier "$release")" != loader ]; then
        echo "== Slurm $release: package"
        ENERGY_TEST_DEB=$(nice -n "$priority" sh ci/package.sh)
        echo "$ENERGY_TEST_DEB" >"$logs/deb-$release"
    fi
    for n in $site_nodes; do
        [ "$(site_release "$n")" = "$release" ] && [ "$release" != 22.05.8 ] || continue
        # the same build, laid out for Debian's own Slurm of that release: its plugin
        # directory, its packages in Depends (a site building for Debian from the upstream
        # tarball); kept with the logs, as this release's target dir goes after its tests
        echo "== Slurm $release: package for Debian $n's Slurm (the site node)"
        SLURM_PLUGIN_DIR=/usr/lib/$(sh ci/multiarch.sh)/slurm-wlm \
            SLURM_DEB_DEPENDS="slurm-wlm-basic-plugins (>= $release), slurm-wlm-basic-plugins (<< ${release%.*}.$((${release##*.} + 1))~), libslurm42t64 | libslurm42" \
            PACKAGE_OUT="$logs/debian-$n" nice -n "$priority" sh ci/package.sh >"$logs/deb-site-node-$n" ||
            echo "FAILED" >"$logs/deb-site-node-$n"
    done
    # the RPM is built by package::the_rpm_builds_against_slurm_devel_with_a_rustup_cargo
    # (ONCE_TESTS): against a slurm-devel laid out as SchedMD's spec, its BuildRequires checked

    # every test binary for the every-test tier; for the others, only the binaries that
    # hold their tests (run-tests.py runs no unit-test binary there): a third of the build
    echo "== Slurm $release: test build"
    local targets
    case $(tier "$release") in
    all) targets=--workspace ;;
    release) targets=$(test_targets $RELEASE_TESTS) ;;
    loader) targets=$(test_targets $LOADER_TESTS) ;;
    esac
    nice -n "$priority" cargo test --release --no-run --message-format=json $targets \
        >"$logs/artifacts-$release.json"
}

# test_targets NAME...: cargo's arguments that build the energy-tests binaries holding the
# tests NAME... (BINARY::TEST or BINARY::, libtest's substrings); a name whose binary is
# not in tests/tests fails the build
test_targets() {
    local name bin seen=" "
    echo "-p energy-tests"
    for name in "$@"; do
        bin=${name%%::*}
        [ -e "tests/tests/$bin.rs" ] || {
            echo "test.sh: the test $name names no test binary (tests/tests/$bin.rs)" >&2
            return 1
        }
        case $seen in *" $bin "*) continue ;; esac
        seen="$seen$bin "
        echo "--test $bin"
    done
}

# lint RELEASE: clippy and rustdoc over the every-test tier's releases, in the build lane
# once that release's tests have started (they need the test build, not the lints)
lint() {
    slurm_env "$1"
    echo "== Slurm $1: lints"
    nice -n 19 cargo clippy --release --workspace --all-targets -- -D warnings
    echo "== Slurm $1: docs (broken intra-doc links and rustdoc warnings)"
    RUSTDOCFLAGS="-D warnings" nice -n 19 cargo doc --release --no-deps --workspace
    echo "== Slurm $1: logic's surface (ci/logic-surface.sh)"
    nice -n 19 sh ci/logic-surface.sh --check 150
    # aarch64 (NVIDIA Grace): the workspace type-checked, once
    if [ "$1" = "$first_full" ]; then
        echo "== Slurm $1: aarch64 build check (ci/aarch64-check.sh)"
        nice -n 19 sh ci/aarch64-check.sh
    fi
}

# run_tests RELEASE [FILTER...]: the test lane's work for one release (run in a subshell)
run_tests() {
    local release=$1
    shift
    slurm_env "$release"
    # (the loader tier has none)
    ENERGY_TEST_DEB=$(cat "$logs/deb-$release" 2>/dev/null || true)
    export ENERGY_TEST_DEB
    # measured in the background from the start (ci/slurm-layout.sh; here it waits for
    # that or takes the cache), checked here so the release's build is not held up by a
    # configure of its source
    echo "== Slurm $release: internal.rs's step-record layout against the headers (ci/slurm-layout.sh)"
    measure_layout "$release"
    "$CARGO_TARGET_DIR/release/examples/step-record-layout" "$logs/layout-$release.txt"
    # the site node is a pass of its own (site_node_pass)
    set -- --artifacts "$logs/artifacts-$release.json" --times "$logs/times-$release.txt" \
        --skip site_node:: "$@"
    case $(tier "$release") in
    all)
        if [ "$release" != "$first_full" ]; then
            for t in $ONCE_TESTS; do set -- --skip "$t" "$@"; done
            echo "== Slurm $release: tests, all but those of the first release only (ONCE_TESTS)"
        else
            echo "== Slurm $release: tests, all"
        fi
        ;;
    release)
        for t in $RELEASE_TESTS; do set -- --only "$t" "$@"; done
        for t in $ONCE_TESTS; do set -- --skip "$t" "$@"; done
        # six at a time: by the time these run the build lane is done, and four of them
        # kept the machine half idle (the loader tests and most clusters wait on timers;
        # the shared node's test still runs alone)
        set -- --jobs "${RELEASE_TEST_JOBS:-6}" "$@"
        echo "== Slurm $release: tests, those that depend on the release (RELEASE_TESTS)"
        ;;
    loader)
        # --only matches substrings: redfish:: and pm_counters:: would also pick
        # cluster_redfish:: and cluster_pm_counters::; this tier starts no cluster
        for t in $LOADER_TESTS; do set -- --only "$t" "$@"; done
        set -- --skip cluster "$@"
        echo "== Slurm $release: tests, the plugins in that release's loader (LOADER_TESTS)"
        ;;
    esac
    python3 ci/run-tests.py "$@"
}

# test_pass RELEASE [FILTER...]: runs RELEASE's tests and records their result and time
test_pass() {
    local release=$1 t1 rc
    t1=$(date +%s)
    set +e
    (set -e; run_tests "$@") >"$logs/tests-$release.log" 2>&1
    rc=$?
    set -e
    echo "$(($(date +%s) - t1))" >"$logs/test-seconds-$release"
    if [ "$rc" = 0 ]; then echo passed; else echo "FAILED (tests, status $rc)"; fi \
        >"$logs/result-$release"
    echo "== Slurm $release: tests $(cat "$logs/result-$release") in $(cat "$logs/test-seconds-$release")s (the output follows at the end)"
    free_target "$release"
}

# free_target RELEASE: once RELEASE's tests (and lints) are done, its own target dir goes
# (0.8 GB each; the logs are in the base's): the passes' dirs never pile up on the disk
free_target() {
    local dir=$base_target-$1 waited=0
    [ "$1" != 22.05.8 ] && [ -d "$dir" ] || return 0
    if is_full "$1"; then
        while [ ! -e "$logs/lint-result-$1" ] && [ "$waited" -lt 3600 ]; do
            sleep 5
            waited=$((waited + 5))
        done
    fi
    rm -rf "$dir"
    echo "== Slurm $1: target dir removed; $(disk_report)"
}

# disk_report: the target file system's free space, and the most this run has used of it
disk_report() {
    local used peak
    used=$(df -Pk "$base_target" | awk 'NR == 2 { print $3 }')
    peak=$(cat "$logs/disk-peak" 2>/dev/null || echo "$used")
    echo "disk: $(df -Pk "$base_target" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }') GiB free, this run's peak use $(awk -v p="$peak" -v s="$disk_start" 'BEGIN { printf "%.1f", (p - s) / 1048576 }') GiB"
}

# site_node_pass N: the site-node tier's Debian N VM (tests/tests/site_node.rs), once its
# disk and its .deb are built (22.05.8's for Debian 12, the Debian layout of 24.11.5's for
# Debian 13), with the 22.05.8 build's test binaries (the VM's Slurm is the .deb's, not the
# test build's); its result and time recorded as a release's are
site_node_pass() {
    local n=$1 t1 rc deb release
    shift
    release=$(site_release "$n")
    while [ ! -e "$logs/site-node-$n-image.done" ]; do sleep 2; done
    echo "== site node, Debian $n: its disk $(cut -d' ' -f1 "$logs/site-node-$n-image.done" | sed 's/^0$/built/;s/^[1-9].*/FAILED/') in $(cut -d' ' -f2 "$logs/site-node-$n-image.done")s (0-2 s: cached)"
    if [ "$n" = 12 ]; then
        deb=$(cat "$logs/deb-22.05.8")
    else
        # its .deb, or the release's failed build (no .deb will come)
        while [ ! -s "$logs/deb-site-node-$n" ] &&
            ! grep -qs FAILED "$logs/result-$release"; do sleep 2; done
        deb=$(cat "$logs/deb-site-node-$n" 2>/dev/null || echo FAILED)
    fi
    t1=$(date +%s)
    set +e
    (
        set -e
        [ "$deb" != FAILED ] && [ -n "$deb" ] || {
            echo "no .deb of Slurm $release for Debian $n (its build or package failed)"
            exit 1
        }
        slurm_env 22.05.8
        ENERGY_TEST_DEB=$deb
        export ENERGY_TEST_DEB
        cat "$logs/site-node-$n-image.log"
        python3 ci/run-tests.py --artifacts "$logs/artifacts-22.05.8.json" --jobs 1 \
            --only "site_node::a_debian_${n}_" "$@"
    ) >"$logs/tests-site-node-$n.log" 2>&1
    rc=$?
    set -e
    echo "$(($(date +%s) - t1))" >"$logs/test-seconds-site-node-$n"
    if [ "$rc" = 0 ]; then echo passed; else echo "FAILED (tests, status $rc)"; fi \
        >"$logs/result-site-node-$n"
    echo "== site node (Debian $n VM): $(cat "$logs/result-site-node-$n") in $(cat "$logs/test-seconds-site-node-$n")s"
}

# the build lane in the foreground; each release's tests start when its build is done and
# the previous release's tests have ended (the test lane), except the loader tier's: they
# start no cluster and take a minute, so the build lane runs them itself after each build
# (beside the test lane, as the builds run), and the test lane ends that much sooner
prev_tests=""
for release in $order; do
    t0=$(date +%s)
    set +e
    (set -e; build "$release") 2>&1 | tee "$logs/build-$release.log"
    rc=${PIPESTATUS[0]}
    set -e
    echo "$(($(date +%s) - t0))" >"$logs/build-seconds-$release"
    if [ "$rc" != 0 ]; then
        echo "FAILED (build, status $rc)" >"$logs/result-$release"
        echo "== Slurm $release: build FAILED (status $rc); its tests do not run"
        continue
    fi
    if [ "$release" = 22.05.8 ] && [ -n "$site_nodes" ]; then
        # the VMs one after the other: each takes a core or two for minutes, so they start
        # once 22.05.8's tests are done: the tests of the first release only (ONCE_TESTS)
        # hold splits against CPU-time models that a TCG VM beside them distorts
        (
            while [ ! -e "$logs/result-22.05.8" ]; do sleep 5; done
            for n in $site_nodes; do site_node_pass "$n" "$@"; done
        ) &
    fi
    if [ "$(tier "$release")" = loader ]; then
        test_pass "$release" "$@"
        continue
    fi
    (
        [ -z "$prev_tests" ] || while kill -0 "$prev_tests" 2>/dev/null; do sleep 1; done
        test_pass "$release" "$@"
    ) &
    prev_tests=$!
    if is_full "$release"; then
        t0=$(date +%s)
        set +e
        (set -e; lint "$release") >"$logs/lint-$release.log" 2>&1
        rc=$?
        set -e
        if [ "$rc" = 0 ]; then echo passed; else echo "FAILED (lints or docs, status $rc)"; fi \
            >"$logs/lint-result-$release"
        echo "== Slurm $release: lints and docs $(cat "$logs/lint-result-$release") in $(($(date +%s) - t0))s"
        [ "$rc" = 0 ] || tail -n 60 "$logs/lint-$release.log"
    fi
done
echo "== build lane done after $(($(date +%s) - t_start))s; $(disk_report); waiting for the tests"
# every lane but the disk's sampler, which then stops
for pid in $(jobs -p); do [ "$pid" = "$disk_sampler" ] || wait "$pid" || true; done
kill "$disk_sampler" 2>/dev/null || true
wait

# seconds_of STAGE RELEASE: the recorded seconds of a release's build or tests, or ?
seconds_of() { cat "$logs/$1-seconds-$2" 2>/dev/null || echo "?"; }

# the output of releases that passed first, of those that failed last: a CI log's tail shows
# what failed
passes=$order
for n in $site_nodes; do passes="$passes site-node-$n"; done
for want in passed failed; do
    for release in $passes; do
        result=$(cat "$logs/result-$release" 2>/dev/null || echo "FAILED (no result)")
        case $want:$result in passed:passed | failed:FAILED*) ;; *) continue ;; esac
        if [ -e "$logs/tests-$release.log" ]; then
            echo "==== $(case $release in site-node*) ;; *) echo "Slurm " ;; esac)$release: test output"
            cat "$logs/tests-$release.log"
        fi
    done
done

failed=0
summary=""
for release in $order; do
    result=$(cat "$logs/result-$release" 2>/dev/null || echo "FAILED (no result)")
    case $result in passed) ;; *) failed=1 ;; esac
    if is_full "$release"; then
        lint=$(cat "$logs/lint-result-$release" 2>/dev/null || echo "FAILED (no result)")
        case $lint in passed) ;; *) failed=1 ;; esac
        result="$result; lints and docs $lint"
    fi
    summary="$summary
   Slurm $release: $result; build $(seconds_of build "$release")s, tests $(seconds_of test "$release")s ($(tier "$release") tests)"
done
for n in $site_nodes; do
    result=$(cat "$logs/result-site-node-$n" 2>/dev/null || echo "FAILED (no result)")
    case $result in passed) ;; *) failed=1 ;; esac
    summary="$summary
   site node (Debian $n VM, Slurm $(site_release "$n")): $result; VM tests $(seconds_of test "site-node-$n")s"
done
echo "== summary (total $(($(date +%s) - t_start))s; $(disk_report)):$summary"
exit $failed
