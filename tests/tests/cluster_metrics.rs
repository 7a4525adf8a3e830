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
/// Two packages: RAPL's domains are a job's parts (the dashboard's part panel); one
/// package is the node itself, and has none.
const SIM: &str = "--vendor amd --packages 2 --cpus 2";
/// Prometheus's scrape interval in the job test: a job's series appears once slurmd has
/// seen its slurmstepd (a second or two, 3 s or more on a loaded 2-core machine).
const SCRAPE_SECS: u32 = 5;

/// The series of the dashboard's idle-held panel, which node mode does not write.
const IDLE_HELD: &str = "slurm_energy_job_idle_held_joules_total";

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
    // the panels, those in a collapsed row (Energy by user) included; a row has no query
    let panels = dashboard["panels"].as_array().expect("panels");
    let inner = panels
        .iter()
        .flat_map(|p| p["panels"].as_array().into_iter().flatten());
    for panel in panels.iter().chain(inner) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = fill(target["expr"].as_str().expect("expr"));
            let found = prom.query(&expr);
            println!("{}: {expr}: {found:?}", panel["title"]);
            // idle-held energy is written in shared and device modes only: in node mode
            // every job is charged the whole node, and none of it is another's idle share
            if expr.contains(IDLE_HELD) && prom.query(IDLE_HELD).is_empty() {
                assert!(found.is_empty(), "panel {}: {found:?}", panel["title"]);
                continue;
            }
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
/// for the job and its steps are sacct's, `increase()` over the job's run too where
/// Prometheus's rule extrapolates back to the counter's zero (and over the series always
/// its rise exactly: no reset, no dip); the
/// owner's info series names the submitting user; the dashboard's queries return data.
#[test]
fn prometheus_scrapes_each_jobs_energy_as_sacct_shows_it() {
    let Some(tmp) = root_test_dir("prometheus_scrapes_each_jobs_energy_as_sacct_shows_it") else {
        return;
    };
    let textfile = Prometheus::textfile_dir(&tmp.path().join("prometheus"));
    let file = textfile.join("slurm_energy.prom");
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
    let prom = Prometheus::start(
        &tmp.path().join("prometheus"),
        cluster.client_prefix(),
        SCRAPE_SECS,
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
    // The series appears holding the energy since the job began: the part before its
    // first sample (before slurmd saw the job's slurmstepd and Prometheus next scraped)
    // is in that sample, and increase() over the job's run counts it only by
    // extrapolating from the first sample to the job's start, which Prometheus does
    // where the gap is under 1.1 scrape intervals (else half an interval at most).
    let (first_time, first) = samples[0];
    let (end, _) = *samples
        .iter()
        .find(|(_, v)| *v == last)
        .expect("the final figure");
    // a range that ends on a sample is not extrapolated at its end
    let increase_over = |start: f64| {
        let range_ms = ((end - start) * 1000.0).round();
        let found = prom.query_at(&format!("increase({series}[{range_ms}ms])"), Some(end));
        assert_eq!(found.len(), 1, "{found:?}");
        found[0].value
    };
    // from the first sample to the final figure: the counter's rise exactly (a reset or
    // a dip would add to it: Prometheus reads a fall as a reset to 0)
    assert_close(
        "increase() from the series' first sample to its final figure",
        increase_over(first_time),
        last - first,
        0.001,
    );
    let start: f64 = cluster
        .run(&[
            "env",
            "SLURM_TIME_FORMAT=%s",
            "sacct",
            "-X",
            "-n",
            "-P",
            "-o",
            "Start",
            "-j",
            &job.to_string(),
        ])
        .trim()
        .parse()
        .expect("the job's start in Unix seconds");
    let gap = first_time - start;
    println!(
        "the series' first sample came {gap:.1} s after the job's start, holding {first:.1} J \
         ({:.1}% of the job)",
        100.0 * first / sacct
    );
    let over_run = increase_over(start);
    // Prometheus's rule (extrapolatedRate): from the first sample back towards the range's
    // start it extrapolates at the average rate, no further than where the counter would
    // reach 0, in full if that is under 1.1 average sample intervals, else half of one.
    // The job's power rises, so the extrapolation to 0 gives back the first sample's
    // figure: increase() over the run is sacct's where that holds.
    let run: Vec<f64> = samples
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| *t <= end)
        .collect();
    let sampled = end - first_time;
    let average_interval = sampled / (run.len() - 1) as f64;
    let to_zero = sampled * first / (last - first);
    let extrapolated = gap.min(to_zero);
    println!(
        "Prometheus extrapolates {extrapolated:.2} s back (to the counter's zero: {to_zero:.2} s) \
         against 1.1 average intervals, {:.2} s",
        1.1 * average_interval
    );
    // (a margin for the sample times' rounding to milliseconds)
    if extrapolated < 1.1 * average_interval - 0.05 {
        assert_close("increase() over the job's run", over_run, sacct, 0.01);
    } else {
        println!("increase() over the job's run: {over_run:.1} J (half an interval extrapolated)");
        assert!(
            over_run >= last - first && over_run <= sacct * 1.01,
            "increase() over the job's run: {over_run} J, outside the rise {} J .. sacct {sacct} J",
            last - first
        );
    }
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
    drop(prom);
    drop(cluster);
    assert!(!file.exists(), "{} left behind", file.display());
}

/// Unix seconds in a file a job wrote with `date +%s.%N`.
fn time_in(path: &std::path::Path) -> f64 {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Three nodes, each with its own simulator, one metrics file each (`%n`) in the one
/// directory node_exporter reads; a job on all three whose power steps mid-job (a
/// different step on each node), and a grid intensity that doubles at another moment
/// mid-job. `senergy job --prometheus` puts the job's emissions within 1% of the truth
/// (each node's power at each moment times the intensity then; evenly over the run would
/// be off by 5%), says how, and `--plot` draws the three nodes' power with the steps.
#[test]
fn senergy_applies_the_intensity_at_each_power_sample_and_plots_a_three_node_job() {
    let Some(tmp) = root_test_dir(
        "senergy_applies_the_intensity_at_each_power_sample_and_plots_a_three_node_job",
    ) else {
        return;
    };
    let textfile = Prometheus::textfile_dir(&tmp.path().join("prometheus"));
    let cluster = Cluster::up(
        &tmp.path().join("cluster"),
        &ClusterSpec {
            nodes: 3,
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyMetricsFile={}/slurm_energy_%n.prom\n",
                textfile.display()
            ),
            sim_args: vec![Some(SIM); 3],
            ..ClusterSpec::default()
        },
    );
    // every 2 s: the power samples the emissions are computed from
    let prom = Prometheus::start(&tmp.path().join("prometheus"), cluster.client_prefix(), 2);
    // each node's power before and after its step, in watts
    let phases = [(100.0, 300.0), (200.0, 400.0), (300.0, 150.0)];
    let raplsim = energy_tests::bin("raplsim").display().to_string();
    let mut cases = String::new();
    for (n, (a, b)) in phases.iter().enumerate() {
        let d = cluster.sim(n + 1).dir.display().to_string();
        cases.push_str(&format!("n{}) D={d}; A={a}; B={b};; ", n + 1));
    }
    for n in 1..=3 {
        cluster.sim(n).set(&["all=0"]);
    }
    let job = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH -N3\nsleep 2\nsrun -N3 -n3 sh -c 'case $SLURMD_NODENAME in {cases}esac; \
         date +%s.%N >$D/t_a; {raplsim} set $D package0=$A; sleep 12; \
         date +%s.%N >$D/t_b; {raplsim} set $D package0=$B; sleep 12; \
         date +%s.%N >$D/t_c; {raplsim} set $D package0=0'\nsleep 2\n"
    ));
    cluster.wait_job(job, Duration::from_secs(180));
    let rows = cluster.energy(job);
    println!("sacct: {rows:?}");
    let times: Vec<(f64, f64, f64)> = (1..=3)
        .map(|n| {
            let d = &cluster.sim(n).dir;
            (
                time_in(&d.join("t_a")),
                time_in(&d.join("t_b")),
                time_in(&d.join("t_c")),
            )
        })
        .collect();
    // the intensity: 100 g/kWh, doubling 6 s into the first phase (on rows every 5 s)
    let switch = times[0].0 + 6.0;
    let mut csv = String::from("time,g_co2e_per_kwh\n");
    for k in -40..=40 {
        let t = switch + 5.0 * f64::from(k);
        csv.push_str(&format!("{:.0},{}\n", t, if k < 0 { 100 } else { 200 }));
    }
    // rows at whole seconds: the switch is where the row at k = 0 begins
    let switch = switch.round();
    let series = tmp.path().join("grid.csv");
    fs::write(&series, csv).expect("grid.csv");
    let intensity = |t: f64| if t < switch { 100.0 } else { 200.0 };
    // ∫ P(t) I(t) dt per node, in gCO2e: each phase cut at the switch
    let piece = |watts: f64, from: f64, to: f64| -> f64 {
        let mut grams = 0.0;
        let cut = switch.clamp(from, to);
        for (a, b) in [(from, cut), (cut, to)] {
            grams += watts * (b - a) * intensity((a + b) / 2.0) / 3.6e6;
        }
        grams
    };
    let truth: f64 = phases
        .iter()
        .zip(&times)
        .map(|(&(a, b), &(ta, tb, tc))| piece(a, ta, tb) + piece(b, tb, tc))
        .sum();
    let even_joules = energy_of(&rows, &job.to_string());
    sleep(Duration::from_secs(6));

    let url = format!("http://127.0.0.1:{}", prom.port);
    let senergy = energy_tests::senergy();
    let plot = tmp.path().join("job.svg");
    let args = [
        "job",
        &job.to_string(),
        "--json",
        "--carbon-csv",
        series.to_str().expect("path"),
        "--prometheus",
        &url,
        "--plot",
        plot.to_str().expect("path"),
    ];
    let out = cluster.client(None, &senergy, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("senergy's stderr: {stderr}");
    assert!(out.status.success(), "senergy {args:?}: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("senergy's JSON");
    let j = &report["jobs"][0];
    println!("{j:#}");
    assert_eq!(
        j["emissions_method"],
        "series, each power sample (Prometheus) at its time"
    );
    let grams = j["emissions_g"].as_f64().expect("emissions");
    let error = (grams - truth) / truth;
    println!(
        "emissions per power sample: {grams:.5} g, true {truth:.5} g ({:+.3}%)",
        error * 100.0
    );
    assert!(error.abs() < 0.01, "{grams} g for {truth} g");
    // spread evenly over the run, the same energy gives another figure
    let start = j["start"].as_f64().expect("start");
    let end = j["end"].as_f64().expect("end");
    let mean =
        (intensity(start) * (switch - start) + intensity(end) * (end - switch)) / (end - start);
    let even = even_joules / 3.6e6 * mean;
    println!("truth {truth:.4} g, per sample {grams:.4} g, evenly {even:.4} g");
    assert!(
        (even - truth).abs() > 3.0 * (grams - truth).abs(),
        "the samples do not beat an even spread"
    );
    let svg = fs::read_to_string(&plot).expect("the plot");
    for want in [
        "n1".to_string(),
        "n2".into(),
        "n3".into(),
        format!("step {job}.0"),
        format!("step {job}.batch"),
        "from Prometheus".into(),
    ] {
        assert!(svg.contains(&want), "no {want:?} in the plot");
    }
    // without Prometheus: the steps' emissions, each over its run, and bars
    let bars = tmp.path().join("bars.png");
    let args = [
        "job",
        &job.to_string(),
        "--json",
        "--carbon-csv",
        series.to_str().expect("path"),
        "--plot",
        bars.to_str().expect("path"),
    ];
    let out = cluster.client(None, &senergy, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        report["jobs"][0]["emissions_method"],
        "series, each step's energy over its run"
    );
    let png = fs::read(&bars).expect("the bars");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

/// slurm.conf hides jobs, users and usage (`PrivateData=jobs,users,usage`) and
/// acct_gather.conf leaves EnergyMetricsFileMode and EnergyMetricsOwners out: while a job
/// runs and after, the metrics file has the job's series but names no owner, is root's only
/// (0600: no EnergyMetricsFileGroup), slurmd's log says which key lets node_exporter read
/// it, and `scontrol show config` shows the values in effect and why.
#[test]
fn where_slurm_hides_jobs_the_metrics_file_names_no_owner_and_is_roots_only() {
    let Some(tmp) =
        root_test_dir("where_slurm_hides_jobs_the_metrics_file_names_no_owner_and_is_roots_only")
    else {
        return;
    };
    let textfile = tmp.path().join("textfile");
    fs::create_dir(&textfile).expect("mkdir");
    let file = textfile.join("slurm_energy.prom");
    let cluster = Cluster::up(
        &tmp.path().join("cluster"),
        &ClusterSpec {
            energy_type: RAPL,
            acct_gather: &format!(
                "EnergyRaplSource=msr\nEnergyMetricsFile={}\n",
                file.display()
            ),
            extra_conf: "PrivateData=jobs,users,usage\n",
            sim_args: vec![Some(SIM)],
            ..ClusterSpec::default()
        },
    );
    cluster.sim(1).set(&["package0=150"]);
    let job = cluster.sbatch("#!/bin/sh\nsleep 12\n");
    // the job's series appear once slurmd has seen its slurmstepd; its owner is known
    // from then on, so every text read while it runs would name them
    let series = format!("jobid=\"{job}\"");
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let mut texts = Vec::new();
    while texts.len() < 5 {
        let text = fs::read_to_string(&file).unwrap_or_default();
        if text.contains(&series) {
            texts.push(text);
        }
        assert!(
            std::time::Instant::now() < until,
            "no series of job {job} in {}:\n{}",
            file.display(),
            cluster.logs()
        );
        sleep(Duration::from_secs(1));
    }
    cluster.wait_job(job, Duration::from_secs(120));
    texts.push(fs::read_to_string(&file).expect("the metrics file"));
    for text in &texts {
        assert!(
            !text.contains("user=") && !text.contains("slurm_energy_job_info"),
            "an owner named in\n{text}"
        );
    }
    let mode = fs::metadata(&file).expect("the metrics file").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
        0o600
    );
    let log = cluster.log("slurmd-n1.log");
    let said = log
        .lines()
        .filter(|l| l.contains("readable by root only") && l.contains("EnergyMetricsFileGroup"))
        .count();
    assert_eq!(said, 1, "slurmd's log:\n{log}");
    let config = cluster.run(&["scontrol", "show", "config"]);
    for (key, value) in [
        ("EnergyMetricsFileMode", "0600 (PrivateData)"),
        ("EnergyMetricsOwners", "no (PrivateData)"),
    ] {
        let shown = config
            .lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim());
        assert_eq!(shown, Some(value), "{key} in\n{config}");
    }
}
