//! The .deb that ci/package.sh made (ci/test.sh passes its path in ENERGY_TEST_DEB),
//! installed with `dpkg -i` into the plugin directory of the Slurm under test (inside a
//! private mount namespace over overlays: the machine is left as it was), measures a job
//! in a cluster whose daemons load only the installed plugin.

use energy_tests as support;

use std::path::PathBuf;
use std::time::Duration;

use support::cluster::{Cluster, ClusterSpec, energy_of, mark, phase_commands};
use support::*;

#[test]
fn the_installed_package_measures_a_job() {
    if !root_or_skip("the_installed_package_measures_a_job") {
        return;
    }
    let deb = match std::env::var_os("ENERGY_TEST_DEB") {
        Some(deb) if !deb.is_empty() => PathBuf::from(deb),
        _ if std::env::var("ENERGY_TESTS_ALLOW_SKIP").as_deref() == Ok("1") => {
            eprintln!("SKIPPED the_installed_package_measures_a_job: ENERGY_TEST_DEB unset");
            return;
        }
        _ => panic!(
            "ENERGY_TEST_DEB must name the .deb of ci/package.sh (ci/test.sh sets it), \
             or set ENERGY_TESTS_ALLOW_SKIP=1 to skip"
        ),
    };
    // The daemons' PluginDir is Slurm's alone: the plugin they load there can only be the
    // package's, which exists inside their namespace and nowhere else.
    let installed = slurm_plugin_dir().join("acct_gather_energy_rust_rapl.so");
    assert!(
        !installed.exists(),
        "{} exists outside the test: remove it, the test must load the package's",
        installed.display()
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_rapl",
            acct_gather: "EnergyRaplSource=msr\n",
            sim_args: vec![Some("--vendor amd --packages 2 --cpus 2 --esu 20")],
            package: Some(&deb),
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    let script = format!(
        "#!/bin/sh\nsrun -n1 sh -c '{}'\n",
        phase_commands(sim, "s0", &[("package0=200 package1=150", 12)])
    );
    let job = cluster.sbatch(&script);
    cluster.wait_job(job, Duration::from_secs(120));
    let rows = cluster.energy(job);
    let truth =
        mark(sim, "s0_end").expect("mark s0_end") - mark(sim, "s0_start").expect("s0_start");
    assert_close(
        &format!("{job}.0"),
        energy_of(&rows, &format!("{job}.0")),
        truth,
        0.01,
    );
    assert!(
        !installed.exists(),
        "the install leaked out of the test's mount namespace"
    );
}
