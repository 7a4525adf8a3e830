//! `senergy check` on the nodes of a private cluster: a healthy node (its watts against
//! the simulator's), and broken ones: a node without RAPL, a plugin built for another
//! release, shared mode without Slurm's job cgroups, a stopped slurmd.

use energy_tests as support;

use std::fs;
use std::path::Path;
use std::process::Output;
use std::thread::sleep;
use std::time::Duration;

use object::{Object, ObjectSection, ObjectSymbol};
use serde_json::Value;
use support::check::{Tools, entry, said};
use support::cluster::{Cluster, ClusterSpec};
use support::*;

const RAPL: &str = "acct_gather_energy/rust_rapl";
const PLUGIN_FILE: &str = "acct_gather_energy_rust_rapl.so";
/// The stand-in BMC's wall power (tests/standins/ipmitool): RAPL's 250 W are 62.5% of it.
const BMC_WATTS: u32 = 400;

/// `senergy check ARGS` on node `k` with the stand-in tools and a BMC drawing [`BMC_WATTS`].
fn check_on(cluster: &Cluster, k: usize, args: &[&str]) -> Output {
    let bmc = [("STANDIN_BMC_WATTS", BMC_WATTS.to_string())];
    support::check::check_on(cluster, k, args, &Tools::Standins(&bmc))
}

/// The FAIL lines of a check's text: `(check, detail)`.
fn failures(out: &Output) -> Vec<(String, String)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("FAIL")?.trim_start();
            let (check, detail) = rest.split_once(' ')?;
            Some((check.to_string(), detail.trim().to_string()))
        })
        .collect()
}

/// Where `plugin_version` lies in the file: its offset and the release it holds.
fn version_at(data: &[u8]) -> (usize, u32) {
    let file = object::File::parse(data).expect("ELF");
    let symbol = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok("plugin_version"))
        .expect("plugin_version");
    let section = file
        .section_by_index(symbol.section_index().expect("in a section"))
        .expect("section");
    let (start, _) = section.file_range().expect("in the file");
    let offset = (start + symbol.address() - section.address()) as usize;
    let word: [u8; 4] = data[offset..offset + 4].try_into().expect("4 bytes");
    (offset, u32::from_le_bytes(word))
}

/// Replaces `path` by a copy of `data` (a new file renamed over it: the daemons that
/// mapped the old one keep it whole).
fn replace(path: &Path, data: &[u8]) {
    let tmp = path.with_extension("so.new");
    fs::write(&tmp, data).expect("write plugin copy");
    fs::rename(&tmp, path).expect("rename plugin copy");
}

#[test]
fn senergy_check_tells_a_healthy_node_from_broken_ones() {
    let Some(tmp) = root_test_dir("senergy_check_tells_a_healthy_node_from_broken_ones") else {
        return;
    };
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            nodes: 2,
            energy_type: RAPL,
            node_freq: 1,
            jobacct_freq: 1,
            // n2 has no RAPL at all
            sim_args: vec![Some(INTEL_SERVER), None],
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    sim.set(&["all=0"]);
    sim.set(&["package0=180", "package1=70"]);
    // a few power windows at 250 W
    sleep(Duration::from_secs(4));

    // healthy: n1 at 250 W
    let out = check_on(&cluster, 1, &["--json"]);
    assert!(out.status.success(), "healthy n1: {}", said(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["healthy"], true, "{report:#}");
    assert_eq!(report["node"], "n1");
    let detail = |check: &str| -> String {
        report["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["check"] == check))
            .and_then(|c| c["detail"].as_str())
            .unwrap_or_else(|| panic!("no {check} in {report:#}"))
            .to_string()
    };
    let watts: f64 = detail("power")
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .expect("watts first");
    // a window of a second or more over counters the simulator moves every 10 ms: within
    // a tick or two of the truth, and a loaded machine's late reads
    assert_close("senergy check: n1's watts", watts, 250.0, 0.03);
    assert!(detail("source").starts_with("rust_rapl: "), "{report:#}");
    assert!(detail("plugin").contains(PLUGIN_FILE), "{report:#}");
    let text = check_on(&cluster, 1, &[]);
    assert!(text.status.success(), "{}", said(&text));
    assert!(
        String::from_utf8_lossy(&text.stdout).ends_with("verdict: OK\n"),
        "{}",
        said(&text)
    );

    // --compare: slurmd's RAPL figure has no independent reader here (no perf PMU on
    // this machine: said, not failed), and RAPL's share of the BMC's wall power
    let out = check_on(&cluster, 1, &["--compare", "3", "--json"]);
    assert!(out.status.success(), "compare on n1: {}", said(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let compare = &report["compare"];
    let reader = |name: &str| entry(compare, "readers", "reader", name);
    assert_eq!(reader("rapl-perf")["status"], "absent", "{compare:#}");
    assert_eq!(reader("bmc")["watts"], f64::from(BMC_WATTS), "{compare:#}");
    assert_eq!(compare["pairs"][0]["plugin"], RAPL, "{compare:#}");
    assert_eq!(
        compare["pairs"][0]["verdict"], "not compared",
        "{compare:#}"
    );
    let slurmd_watts = compare["slurmd"][0]["watts"].as_f64().expect("watts");
    assert_close("--compare: slurmd's RAPL watts", slurmd_watts, 250.0, 0.03);
    let share = &compare["rapl_share_of_wall"];
    assert_eq!(share["wall_from"], "bmc", "{compare:#}");
    assert_close(
        "--compare: RAPL's share of the wall",
        share["pct"].as_f64().expect("pct"),
        62.5,
        0.03,
    );

    // broken 1: n2 has no RAPL: no ledger, slurmd's log says why, and the probe of
    // RAPL itself says it is not there
    let out = check_on(&cluster, 2, &[]);
    assert_eq!(
        out.status.code(),
        Some(6),
        "n2 without RAPL: {}",
        said(&out)
    );
    let failed = failures(&out);
    assert_eq!(failed.len(), 2, "{}", said(&out));
    assert_eq!(failed[0].0, "ledger", "{}", said(&out));
    assert!(
        failed[0].1.contains("no ledger at") && failed[0].1.contains("no energy can be measured"),
        "{}",
        said(&out)
    );
    assert_eq!(failed[1].0, "probe", "{}", said(&out));
    assert!(
        failed[1].1.contains("this node has no source it can read")
            && failed[1].1.contains("powercap"),
        "{}",
        said(&out)
    );

    // broken 2: the plugin file is one built for another release
    let plugin = tmp.path().join("plugins").join(PLUGIN_FILE);
    let original = fs::read(&plugin).expect("plugin");
    let (offset, built) = version_at(&original);
    let mut other = original.clone();
    other[offset..offset + 4].copy_from_slice(&(built + 1).to_le_bytes());
    replace(&plugin, &other);
    let out = check_on(&cluster, 1, &[]);
    replace(&plugin, &original);
    assert_eq!(
        out.status.code(),
        Some(6),
        "another release: {}",
        said(&out)
    );
    let failed = failures(&out);
    let release = |v: u32| format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff);
    assert_eq!(failed.len(), 1, "{}", said(&out));
    assert_eq!(failed[0].0, "plugin");
    assert!(
        failed[0].1.contains(&format!(
            "built for Slurm {}, slurmd here is {} (",
            release(built + 1),
            release(built)
        )),
        "{}",
        said(&out)
    );

    // broken 3: shared mode on a cluster that keeps no job cgroups
    fs::write(
        cluster.dir.join("etc/acct_gather.conf"),
        "EnergyAttribution=shared\n",
    )
    .expect("acct_gather.conf");
    let restart = cluster
        .harness("restart-slurmd")
        .arg("n1")
        .status()
        .expect("restart-slurmd");
    assert!(restart.success(), "slurmd restart failed");
    let out = check_on(&cluster, 1, &[]);
    assert_eq!(
        out.status.code(),
        Some(6),
        "shared, no cgroups: {}",
        said(&out)
    );
    let failed = failures(&out);
    assert_eq!(failed.len(), 1, "{}", said(&out));
    assert_eq!(failed[0].0, "attribution");
    assert!(
        failed[0].1.contains("ProctrackType=proctrack/cgroup")
            && failed[0].1.contains("task/cgroup"),
        "{}",
        said(&out)
    );

    // broken 4: slurmd stopped (asked from outside the node's namespaces)
    cluster.stop_slurmd("n1");
    let out = cluster.client(None, &senergy(), &["check", "--node", "n1"]);
    println!("senergy check --node n1 outside: {}", said(&out));
    assert_eq!(out.status.code(), Some(6), "slurmd stopped: {}", said(&out));
    let failed = failures(&out);
    // the release is told by the slurmd installed with the Slurm of slurm.conf: the
    // plugin is still its release's
    let checks: Vec<&str> = failed.iter().map(|(check, _)| check.as_str()).collect();
    assert_eq!(checks, ["slurmd", "attribution"], "{}", said(&out));
    assert!(
        failed[0].1.contains("no slurmd runs for node n1"),
        "{}",
        said(&out)
    );
}
