//! The metrics file (`EnergyMetricsFile`) in a real cluster, scraped as sites scrape it:
//! Debian's node_exporter (textfile collector) and Prometheus. A job's counter over its
//! run is sacct's figure, its steps' are sacct's steps', and every query of the Grafana
//! dashboard in conf/ returns data.

use std::fs;
use std::thread::sleep;
use std::time::Duration;

use energy_tests::cluster::{Cluster, ClusterSpec, energy_of, phase_commands};
use energy_tests::prometheus::Prometheus;
use energy_tests::{assert_close, root_test_dir, workspace};

const RAPL: &str = "acct_gather_energy/rust_rapl";
const SIM: &str = "--vendor amd --packages 1 --cpus 2";

/// Runs every query of the dashboard at `prom`, its variables set to all nodes and `job`;
/// each must return at least one finite value.
fn dashboard_queries_return_data(prom: &Prometheus, job: u32) {
    let path = workspace().join("conf/grafana/slurm-energy-dashboard.json");
    let text = fs::read_to_string(&path).expect("the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard's JSON");
    let fill = |expr: &str| {
        expr.replace("$node", ".*")
            .replace("$jobid", &job.to_string())
            .replace("$__range", "10m")
            .replace("$__rate_interval", "1m")
    };
    // the variables: label_values(SELECTOR, LABEL) is Grafana's; the selector must
    // return series with the label
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        let query = var["query"]["query"].as_str().expect("a variable's query");
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .expect("label_values(...)");
        let (selector, label) = inner.rsplit_once(',').expect("selector, label");
        let found = prom.query(&fill(selector.trim()));
        assert!(
            found.iter().any(|s| !s.label(label.trim()).is_empty()),
            "variable {}: {selector} has no series with {label}",
            var["name"]
        );
    }
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = fill(target["expr"].as_str().expect("expr"));
            let found = prom.query(&expr);
            println!("{}: {expr}: {found:?}", panel["title"]);
            assert!(
                !found.is_empty() && found.iter().all(|s| s.value.is_finite()),
                "panel {}: {expr} returned {found:?}",
                panel["title"]
            );
            queries += 1;
        }
    }
    assert!(queries >= 8, "{queries} queries");
}

/// One node, node mode, a job whose power steps from 200 to 350 W: Prometheus's figures
/// for the job and its steps are sacct's, `increase()` over the job's run included; the
/// owner's info series names the submitting user; the dashboard's queries return data.
#[test]
fn prometheus_scrapes_each_jobs_energy_as_sacct_shows_it() {
    let Some(tmp) = root_test_dir("prometheus_scrapes_each_jobs_energy_as_sacct_shows_it") else {
        return;
    };
    let prom = Prometheus::start(&tmp.path().join("prometheus"));
    let file = prom.textfile_dir.join("slurm_energy.prom");
    let cluster = Cluster::up(
        &tmp.path().join("cluster"),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyMetricsFile={}\n",
                file.display()
            ),
            sim_args: vec![Some(SIM)],
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    sim.set(&["package0=100"]);
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n{}\n",
        phase_commands(sim, "job", &[("package0=200", 12), ("package0=350", 12)])
    ));
    cluster.wait_job(job, Duration::from_secs(120));
    let rows = cluster.energy(job);
    println!("sacct: {rows:?}");
    // a few scrapes after the end
    sleep(Duration::from_secs(8));
    let series = format!("slurm_energy_job_joules_total{{jobid=\"{job}\"}}");
    let samples = prom.samples(&format!("{series}[3m]"));
    println!("{series}: {samples:?}");
    let (_, last) = *samples.last().expect("samples of the job");
    let sacct = energy_of(&rows, &job.to_string());
    assert_close("the job's last figure in Prometheus", last, sacct, 0.005);
    // increase() over the job's run, evaluated at the first scrape of its final figure
    // (Prometheus extrapolates a range's ends: a range ending between two scrapes would
    // add part of a scrape interval at the job's average power)
    let (end, _) = *samples
        .iter()
        .find(|(_, v)| *v == last)
        .expect("the final figure");
    let range = (end - samples[0].0 + 10.0).ceil();
    let increase = prom.query_at(&format!("increase({series}[{range}s])"), Some(end));
    assert_eq!(increase.len(), 1, "{increase:?}");
    assert_close(
        "increase() over the job's run",
        increase[0].value,
        sacct,
        0.01,
    );
    for step in ["batch", "extern"] {
        let expr = format!(
            "max_over_time(slurm_energy_step_joules_total{{jobid=\"{job}\",step=\"{step}\"}}[3m])"
        );
        let found = prom.query(&expr);
        assert_eq!(found.len(), 1, "{expr}: {found:?}");
        assert_close(
            &format!("step {step}"),
            found[0].value,
            energy_of(&rows, &format!("{job}.{step}")),
            0.005,
        );
        assert_eq!(found[0].label("source"), "rust_rapl");
    }
    // the node's power at the 350 W phase, as the gauge showed it
    let peak = prom.query("max_over_time(slurm_energy_node_watts[3m])");
    assert_close("the node's peak power", peak[0].value, 350.0, 0.02);
    // who ran it: the submitting user, as sacct says
    let user = cluster.run(&[
        "sacct",
        "-X",
        "-n",
        "-P",
        "-o",
        "User",
        "-j",
        &job.to_string(),
    ]);
    let info = prom.query(&format!("slurm_energy_job_info{{jobid=\"{job}\"}}"));
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0].label("user"), user.trim());
    dashboard_queries_return_data(&prom, job);
    // slurmd stops: the file goes with it, and node_exporter serves no stale figures
    drop(cluster);
    assert!(!file.exists(), "{} left behind", file.display());
}
