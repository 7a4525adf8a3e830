//! `senergy check` (and `--compare`) run on a cluster node, in its namespaces, as root: with
//! the host's own tools, or with the stand-in readers of `tests/standins/` first on PATH.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::cluster::Cluster;
use crate::senergy;

/// Which tools the check's readers find.
pub enum Tools<'a> {
    /// The host's own (the real `ipmitool`, and no GPU tool here).
    Host,
    /// `tests/standins/` first on PATH, driven by these `STANDIN_*` variables (a stand-in
    /// whose variables are unset answers as its tool does without the hardware).
    Standins(&'a [(&'a str, String)]),
}

/// `senergy check ARGS` on node `k`.
pub fn check_on(cluster: &Cluster, k: usize, args: &[&str], tools: &Tools) -> Output {
    let prefix = cluster.node_prefix(k);
    let mut command = Command::new(&prefix[0]);
    command
        .args(&prefix[1..])
        .arg(senergy())
        .arg("check")
        .args(args);
    if let Tools::Standins(vars) = tools {
        let standins = Path::new(env!("CARGO_MANIFEST_DIR")).join("standins");
        let path = format!(
            "{}:{}",
            standins.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        command.env("PATH", path);
        command.envs(vars.iter().map(|(k, v)| (k, v)));
    }
    let out = command.output().expect("run senergy check");
    println!("senergy check {} on n{k}: {}", args.join(" "), said(&out));
    out
}

pub fn said(out: &Output) -> String {
    format!(
        "status {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `senergy check --compare SECS --json` on node `k`: its exit status and `compare` object.
pub fn compare_on(cluster: &Cluster, k: usize, secs: u32, tools: &Tools) -> (Option<i32>, Value) {
    let out = check_on(
        cluster,
        k,
        &["--compare", &secs.to_string(), "--json"],
        tools,
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", said(&out)));
    (out.status.code(), report["compare"].clone())
}

/// The compare object's entry of `list` (`readers`, `pairs`, `slurmd`) whose `key` is `name`.
pub fn entry(compare: &Value, list: &str, key: &str, name: &str) -> Value {
    compare[list]
        .as_array()
        .and_then(|r| r.iter().find(|r| r[key] == name))
        .unwrap_or_else(|| panic!("no {list} entry {key}={name} in {compare:#}"))
        .clone()
}

/// Asserts that `plugin`'s pair was compared with `verdict` (`agree`, `differ`) against
/// `reader`, whose average power over the window is within 2% of `watts`; the pair.
pub fn assert_pair(
    compare: &Value,
    plugin: &str,
    reader: &str,
    watts: f64,
    verdict: &str,
) -> Value {
    let pair = entry(compare, "pairs", "plugin", plugin);
    assert_eq!(pair["verdict"], verdict, "{compare:#}");
    assert_eq!(pair["readers"], serde_json::json!([reader]), "{compare:#}");
    let read = entry(compare, "readers", "reader", reader);
    assert_eq!(read["status"], "read", "{compare:#}");
    crate::assert_close(
        &format!("--compare: {reader}'s watts"),
        read["watts"].as_f64().expect("watts"),
        watts,
        0.02,
    );
    assert_eq!(compare["agrees"], verdict == "agree", "{compare:#}");
    pair
}
