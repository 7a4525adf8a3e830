//! rust_redfish against a real Redfish server (sushy-tools' sushy-static) serving the
//! mockups of tests/redfish, loaded by Slurm's own framework: energy against the true
//! joules for each kind of resource, https with a CA file, and faults (a frozen and a
//! dead BMC, a wrong URL, garbage JSON) that never block a call or give a bogus figure.

use energy_tests as support;

use std::path::Path;
use std::thread::sleep;
use std::time::Duration;

use support::redfish::{PASSWORD, RedfishSim};
use support::*;

const REDFISH: &str = "acct_gather_energy/rust_redfish";

/// Once the plugin has its first sample, power changes every 3 s while slurmd's plugin
/// polls the BMC every 0.25 s (the driver's second update comes 18 s after it starts, so a
/// first sample delayed by up to ~5 s still leaves the schedule inside). Returns the
/// output, the log and the true joules.
fn run_schedule(sim: &RedfishSim, extra: &str, cmds: &str) -> (String, String, f64) {
    let conf = slurm_conf(&sim.dir.join("slurm"), REDFISH, &sim.acct_gather(extra));
    let mark = sim.log_mark();
    let driver = driver(None, &conf, "slurmd", cmds);
    sim.wait_until_polled(mark);
    let before = sim.truth();
    for watts in LEVELS {
        sim.set(watts);
        sleep(Duration::from_secs(3));
    }
    sim.set(0);
    let (out, err) = finish(driver);
    println!("{out}{err}");
    // after the simulator's last tick at the old power
    (out, err, sim.truth() - before)
}

const LEVELS: [u32; 4] = [320, 180, 400, 240];

/// The bound of the trapezoid of power polled every 0.25 s (plus the request) over the
/// schedule.
fn power_sampling_bound() -> f64 {
    support::power_sampling_bound(&LEVELS, 3.0, 0.26)
}

fn slurm_dir(sim: &RedfishSim) {
    std::fs::create_dir_all(sim.dir.join("slurm")).expect("mkdir");
}

const SCHEDULE: &str = "update node sleep=18000 update node config";

#[test]
fn legacy_power_resource_over_http() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = RedfishSim::start(&tmp.path().join("bmc"), "legacy", false);
    slurm_dir(&sim);
    let (out, err, truth) = run_schedule(&sim, "", SCHEDULE);
    assert_close(
        "node (legacy Power)",
        joules(&out, "node", 1),
        truth,
        power_sampling_bound(),
    );
    assert!(err.contains("PowerConsumedWatts, deprecated"), "{err}");
    assert!(err.contains("using basic authentication"), "{err}");
    assert!(!err.contains(PASSWORD) && !out.contains(PASSWORD));
    assert!(
        out.contains("config EnergyRedfishUrl=http://127.0.0.1:"),
        "{out}"
    );
}

/// The energy counter is preferred to the power beside it, over https verified with the
/// CA file.
#[test]
fn environment_metrics_energy_counter_over_https_with_a_ca_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = RedfishSim::start(&tmp.path().join("bmc"), "metrics", true);
    slurm_dir(&sim);
    let (out, err, truth) = run_schedule(&sim, "", SCHEDULE);
    // The counter is exact, but energy is brought up to each read at the last power
    // (extrapolation, on by default) and never goes back: a read between the fall to 0 W
    // and the next sample keeps up to 240 W x 0.25 s, which a real node (never at 0 W)
    // repays within a second.
    assert_close("node (EnergyJoules)", joules(&out, "node", 1), truth, 0.02);
    assert!(
        err.contains("energy counter /redfish/v1/Chassis/1/EnvironmentMetrics"),
        "{err}"
    );
}

/// Without a CA file the BMC's certificate is checked against the system's trust store
/// (here `SSL_CERT_FILE`, as openssl reads it): refused when the BMC's CA is not in it,
/// accepted when it is (a site CA installed system-wide), refused with a clear error when
/// the store is empty; `EnergyRedfishInsecure=yes` accepts it and says so in the log.
#[test]
fn https_verification_system_trust_store_and_insecure() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = RedfishSim::start(&tmp.path().join("bmc"), "metrics", true);
    slurm_dir(&sim);
    // another CA, that did not sign the BMC's certificate
    let other = tmp.path().join("other");
    let status = std::process::Command::new("sh")
        .arg(workspace().join("tests/redfish/make-certs.sh"))
        .arg(&other)
        .status()
        .expect("make-certs.sh");
    assert!(status.success());
    let bare = format!(
        "EnergyRedfishUrl={}\nEnergyRedfishFrequency=0.25\nEnergyRedfishTimeout=1\n",
        sim.url()
    );
    let conf = slurm_conf(&sim.dir.join("slurm"), REDFISH, &bare);
    let run = |store: &Path| {
        finish(driver_env(
            None,
            &conf,
            "slurmd",
            "sleep=1500 update node",
            &[("SSL_CERT_FILE", store)],
        ))
    };
    let (out, err) = run(&other.join("ca.pem"));
    assert_eq!(field(&out, "node", 0, "consumed"), "unavailable");
    assert!(err.contains("cannot connect to the power sensor"), "{err}");
    let (out, err) = run(&sim.dir.join("tls/ca.pem"));
    assert_eq!(field(&out, "node", 0, "consumed"), "0", "{err}");
    let empty = tmp.path().join("empty.pem");
    std::fs::write(&empty, "").expect("empty store");
    let (out, err) = finish(driver_env(
        None,
        &conf,
        "slurmd",
        "sleep=1500 update node",
        &[("SSL_CERT_FILE", &empty), ("SSL_CERT_DIR", tmp.path())],
    ));
    assert_eq!(field(&out, "node", 0, "consumed"), "unavailable");
    assert!(
        err.contains("no CA certificate in the system's trust store")
            && err.contains("EnergyRedfishCaFile"),
        "{err}"
    );
    let conf = slurm_conf(
        &sim.dir.join("slurm"),
        REDFISH,
        &format!("{bare}EnergyRedfishInsecure=yes\n"),
    );
    let (out, err) = finish(driver_env(
        None,
        &conf,
        "slurmd",
        "sleep=1500 update node",
        &[("SSL_CERT_FILE", &other.join("ca.pem"))],
    ));
    assert_eq!(field(&out, "node", 0, "consumed"), "0");
    assert!(
        err.contains("EnergyRedfishInsecure=yes: the BMC's certificate is not verified"),
        "{err}"
    );
}

/// Both chassis summed, or the one named.
#[test]
fn two_chassis_summed_or_one_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = RedfishSim::start(&tmp.path().join("bmc"), "two-chassis", false);
    slurm_dir(&sim);
    let (out, err, truth) = run_schedule(&sim, "", SCHEDULE);
    let bound = power_sampling_bound();
    assert_close("node (two chassis)", joules(&out, "node", 1), truth, bound);
    assert!(
        err.contains("/redfish/v1/Chassis/1: power")
            && err.contains("/redfish/v1/Chassis/GPU: power"),
        "{err}"
    );
    let (out, _, truth) = run_schedule(&sim, "EnergyRedfishChassis=GPU\n", SCHEDULE);
    assert_close(
        "node (chassis GPU)",
        joules(&out, "node", 1),
        truth / 2.0,
        bound,
    );
}

/// The BMC freezes (SIGSTOP) for 4 s, then dies for 3 s and comes back: every call
/// returns at once, the gaps are bridged, the log says what happened.
#[test]
fn a_frozen_then_dead_bmc_never_blocks_and_is_bridged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut sim = RedfishSim::start(&tmp.path().join("bmc"), "metrics", false);
    slurm_dir(&sim);
    let conf = slurm_conf(&sim.dir.join("slurm"), REDFISH, &sim.acct_gather(""));
    let mark = sim.log_mark();
    let driver = driver(None, &conf, "slurmd", "update node probe=160 update node");
    sim.wait_until_polled(mark);
    let before = sim.truth();
    sim.set(300);
    sleep(Duration::from_secs(2));
    sim.freeze();
    sleep(Duration::from_secs(4));
    sim.kill_server();
    sleep(Duration::from_secs(3));
    sim.start_server();
    sleep(Duration::from_secs(3));
    sim.set(0);
    let (out, err) = finish(driver);
    println!("{out}{err}");
    let truth = sim.truth() - before;
    let slowest: u64 = field(&out, "probe", 0, "slowest_us").parse().expect("µs");
    assert!(slowest < CALL_NEVER_WAITS_US, "a call took {slowest} µs");
    // the counter itself bridges the outage exactly; as in the test above, up to 240 W x
    // 0.25 s of extrapolation is kept at the final fall to 0 W (0.02-0.29% in 4 runs, once
    // more on 26.05)
    assert_close(
        "node across the outage",
        joules(&out, "node", 1),
        truth,
        0.02,
    );
    assert!(err.contains("reading power failed"), "{err}");
    assert!(err.contains("power readings are back"), "{err}");
}

#[test]
fn a_wrong_url_or_garbage_json_is_unavailable_and_logged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sim = RedfishSim::start(&tmp.path().join("bmc"), "legacy", false);
    slurm_dir(&sim);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let conf = slurm_conf(
        &sim.dir.join("slurm"),
        REDFISH,
        &format!("EnergyRedfishUrl=http://127.0.0.1:{closed}\nEnergyRedfishFrequency=0.25\n"),
    );
    let (out, err) = finish(driver(None, &conf, "slurmd", "sleep=1000 update node"));
    assert_eq!(field(&out, "node", 0, "consumed"), "unavailable");
    assert!(err.contains(&format!("127.0.0.1:{closed}")), "{err}");
    std::fs::write(
        sim.dir.join("mockup/Chassis/index.json"),
        "{\"Members\": [garbage",
    )
    .expect("garbage");
    let conf = slurm_conf(&sim.dir.join("slurm"), REDFISH, &sim.acct_gather(""));
    let (out, err) = finish(driver(None, &conf, "slurmd", "sleep=1000 update node"));
    assert_eq!(field(&out, "node", 0, "consumed"), "unavailable");
    assert!(err.contains("not JSON"), "{err}");
    let conf = slurm_conf(&sim.dir.join("slurm"), REDFISH, "EnergyRedfishUrl=bmc-n1\n");
    let (_, err) = finish(driver(None, &conf, "slurmd", "update node"));
    assert!(err.contains("invalid EnergyRedfishUrl=bmc-n1"), "{err}");
}
