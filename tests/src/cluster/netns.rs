//! Namespaces. With more than one node (or NETNS=1) a "ctl" network namespace holds a
//! bridge 10.201.0.1/24 plus munged/MariaDB/slurmdbd/slurmctld, and node K gets its own
//! namespace with a veth into that bridge (10.201.0.(10+K)). No address is added to the
//! host namespace, so clients run inside the ctl namespace (the `DIR/bin` wrappers enter
//! it). Names are derived from the directory, so two clusters coexist (same subnet, but
//! separate namespaces). Every slurmd also has a private mount and UTS namespace
//! (ci/cluster-lib/node-start.sh), recorded in `run/mntns`.

use std::fs;
use std::process::Command;

use super::config::SUBNET;
use super::procs::{Records, state_start};
use super::{Error, Layout};

/// Runs `ip ARGS`; an error with its output when it fails.
fn ip(args: &[&str]) -> Result<(), Error> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::Setup(format!("ip: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Setup(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The ctl namespace with its bridge, and one namespace per node with a veth into it.
pub fn create(layout: &Layout, nodes: usize) -> Result<(), Error> {
    let ctl = layout.ctl_netns();
    ip(&["netns", "add", &ctl])?;
    ip(&["-n", &ctl, "link", "set", "lo", "up"])?;
    ip(&["-n", &ctl, "link", "add", "br0", "type", "bridge"])?;
    ip(&[
        "-n",
        &ctl,
        "addr",
        "add",
        &format!("{SUBNET}.1/24"),
        "dev",
        "br0",
    ])?;
    ip(&["-n", &ctl, "link", "set", "br0", "up"])?;
    for k in 1..=nodes {
        let node = format!("{}-n{k}", layout.ns_prefix);
        let veth = format!("v{k}");
        ip(&["netns", "add", &node])?;
        ip(&["-n", &node, "link", "set", "lo", "up"])?;
        // the pair is made inside the namespaces directly: no host-side names
        ip(&[
            "-n", &ctl, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
            &node,
        ])?;
        ip(&["-n", &ctl, "link", "set", &veth, "master", "br0", "up"])?;
        let addr = format!("{SUBNET}.{}/24", 10 + k);
        ip(&["-n", &node, "addr", "add", &addr, "dev", "eth0"])?;
        ip(&["-n", &node, "link", "set", "eth0", "up"])?;
    }
    Ok(())
}

/// `nsenter --net=... --` for a program that must run in the ctl namespace (empty without
/// namespaces).
pub fn ctl_prefix(layout: &Layout, netns: bool) -> Vec<String> {
    if netns {
        vec![
            "nsenter".into(),
            format!("--net=/run/netns/{}", layout.ctl_netns()),
            "--".into(),
        ]
    } else {
        Vec::new()
    }
}

/// The same for node `k`'s namespace.
pub fn node_prefix(layout: &Layout, netns: bool, k: usize) -> Vec<String> {
    if netns {
        vec![
            "nsenter".into(),
            format!("--net=/run/netns/{}-n{k}", layout.ns_prefix),
            "--".into(),
        ]
    } else {
        Vec::new()
    }
}

/// Removes this cluster's network namespaces: everything still inside them is its own.
pub fn remove(layout: &Layout) {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let prefix = format!("{}-", layout.ns_prefix);
    for ns in list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
    {
        let pids = Command::new("ip")
            .args(["netns", "pids", ns])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let pids: Vec<i32> = pids
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if !pids.is_empty() {
            eprintln!("cluster: killing leftover processes in netns {ns}: {pids:?}");
            for pid in pids {
                // SAFETY: kill(2) has no memory preconditions; the process is in our namespace.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if ip(&["netns", "del", ns]).is_err() {
            eprintln!("cluster: could not delete netns {ns}");
        }
    }
}

/// Kills processes that are in one of this cluster's node mount namespaces and started
/// after the earliest node supervisor did: only needed when a supervisor itself was killed
/// hard and its slurmstepds got re-parented elsewhere.
pub fn sweep_mount_namespaces(layout: &Layout, records: &Records) {
    let Ok(namespaces) = fs::read_to_string(layout.dir.join("run/mntns")) else {
        return;
    };
    let namespaces: Vec<&str> = namespaces.lines().collect();
    let Some(since) = records
        .names()
        .iter()
        .filter(|n| n.starts_with("nodesup-"))
        .filter_map(|n| records.start_time(n))
        .min()
    else {
        return;
    };
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(ns) = fs::read_link(entry.path().join("ns/mnt")) else {
            continue;
        };
        if !namespaces.iter().any(|n| ns.as_os_str() == *n) {
            continue;
        }
        if state_start(pid).is_some_and(|(_, start)| start >= since) {
            let comm = fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            eprintln!(
                "cluster: killing leftover pid {pid} ({}) of a node namespace",
                comm.trim()
            );
            // SAFETY: kill(2) has no memory preconditions; the process is in our namespace.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}
