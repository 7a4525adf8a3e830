mod dashboard;

use super::*;
use crate::attribution::StepId;
use crate::attribution::holders::ObservedDevice;
use crate::ledger::{Observation, ObservedJob, ObservedStep, Split};
use std::time::{Instant, SystemTime};

/// `EnergyMetricsOwners=no`: no series names a user or an account.
#[test]
fn without_owners_no_series_says_who_runs_a_job() {
    let text = render(&ledger(3), None, &who());
    assert!(text.contains("slurm_energy_job_joules_total{"), "{text}");
    for absent in ["slurm_energy_job_info", "user=", "account="] {
        assert!(!text.contains(absent), "{absent} in\n{text}");
    }
}

/// A node-mode ledger with job 7 (extern, batch) from the first sample and job 8, gone
/// `gone_for` seconds before the last sample.
fn ledger(gone_for: u64) -> Ledger {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let job = |id: u32, steps: &[StepId]| ObservedJob {
        job: id,
        counters: None,
        steps: steps
            .iter()
            .map(|&id| ObservedStep {
                id,
                usage_ns: None,
                started: Some(w0),
                holds: vec![],
            })
            .collect(),
    };
    let mut ledger = Ledger::default();
    let last = 2 + gone_for;
    for secs in 0..=last {
        let mut jobs = vec![job(7, &[StepId::EXTERN, StepId::BATCH])];
        if secs <= 2 {
            jobs.push(job(8, &[StepId(0)]));
        }
        let obs = Observation {
            unowned_cpu_ns: 0,
            at: t0 + Duration::from_secs(secs),
            wall: w0 + Duration::from_secs(secs),
            node_uj: secs * 250_000_000,
            settled: true,
            jobs,
            parts: vec![],
            counts: vec![],
            devices: vec![],
            watts: None,
        };
        ledger.update(&obs, Split::Node);
    }
    ledger
}

/// A devices-mode ledger: job 7 holds GPUs 0 (at 300 W, used) and 1 (at 70 W, unused) for
/// `secs` seconds.
fn gpu_ledger(secs: u64) -> Ledger {
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let job = ObservedJob {
        job: 7,
        counters: None,
        steps: vec![ObservedStep {
            id: StepId(0),
            usage_ns: None,
            started: Some(w0),
            holds: vec![(0, 1.0), (1, 1.0)],
        }],
    };
    let mut ledger = Ledger::default();
    for s in 0..=secs {
        let device = |position, watts: u64, busy| ObservedDevice {
            position,
            energy_uj: s * watts * 1_000_000,
            busy,
            instances: vec![],
        };
        let obs = Observation {
            unowned_cpu_ns: 0,
            at: t0 + Duration::from_secs(s),
            wall: w0 + Duration::from_secs(s),
            node_uj: s * 370_000_000,
            settled: true,
            jobs: vec![job.clone()],
            parts: vec![],
            counts: vec![],
            devices: vec![device(0, 300, vec![(Some(7), 50.0)]), device(1, 70, vec![])],
            watts: None,
        };
        ledger.update(&obs, Split::Devices { idle_watts: None });
    }
    ledger
}

/// Issue 44: a job's energy by part and what it held idle, where the ledger knows them;
/// no idle series where it does not (node mode).
#[test]
fn the_file_has_each_jobs_parts_and_idle_held_energy() {
    let text = render(&gpu_ledger(3), None, &who());
    let node = r#"node="n1",source="rust_rapl",jobid="7""#;
    for line in [
        format!("slurm_energy_job_part_joules_total{{{node},part=\"gpu0\"}} 900"),
        format!("slurm_energy_job_part_joules_total{{{node},part=\"gpu1\"}} 210"),
        format!("slurm_energy_job_idle_held_joules_total{{{node},kind=\"gpu\"}} 210"),
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    assert!(!text.contains("kind=\"cpu\""), "{text}");
    let text = render(&ledger(3), None, &who());
    assert!(
        !text.contains("slurm_energy_job_idle_held_joules_total{"),
        "{text}"
    );
}

fn who() -> Identity {
    Identity {
        node: "n1".into(),
        source: "rust_rapl".into(),
        attribution: "node".into(),
    }
}

#[test]
fn the_file_has_the_node_its_jobs_and_steps_and_who_runs_them() {
    let owners = HashMap::from([(
        7,
        Owner {
            user: "al\"ice".into(),
        },
    )]);
    let text = render(&ledger(3), Some(&owners), &who());
    let node = r#"node="n1",source="rust_rapl""#;
    for line in [
        "# TYPE slurm_energy_node_joules_total counter".to_string(),
        format!("slurm_energy_node_joules_total{{{node}}} 1250"),
        format!("slurm_energy_node_watts{{{node}}} 250"),
        format!("slurm_energy_job_joules_total{{{node},jobid=\"7\"}} 1250"),
        format!("slurm_energy_job_watts{{{node},jobid=\"7\"}} 250"),
        format!("slurm_energy_step_joules_total{{{node},jobid=\"7\",step=\"batch\"}} 1250"),
        format!("slurm_energy_step_joules_total{{{node},jobid=\"7\",step=\"extern\"}} 1250"),
        // job 8 left 3 s ago: still there, with its final figure and no power
        format!("slurm_energy_job_joules_total{{{node},jobid=\"8\"}} 500"),
        format!("slurm_energy_job_watts{{{node},jobid=\"8\"}} 0"),
        format!("slurm_energy_step_joules_total{{{node},jobid=\"8\",step=\"0\"}} 500"),
        "slurm_energy_job_info{node=\"n1\",jobid=\"7\",user=\"al\\\"ice\"} 1".to_string(),
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    // each family once, its HELP and TYPE before its samples
    for family in ["slurm_energy_job_joules_total", "slurm_energy_job_info"] {
        let help = format!("# HELP {family} ");
        assert_eq!(text.matches(&help).count(), 1, "{text}");
        let first = text.find(&format!("\n{family}{{")).expect("a sample");
        assert!(text.find(&help).expect("help") < first);
    }
}

#[test]
fn a_finished_jobs_series_go_after_the_grace_period() {
    let gone = GRACE.as_secs() + 2;
    let text = render(&ledger(gone), Some(&HashMap::new()), &who());
    assert!(text.contains("jobid=\"7\""), "{text}");
    assert!(!text.contains("jobid=\"8\""), "{text}");
}

/// What one node's file holds at most with 256 jobs present, each with 16 parts (the most a
/// ledger keeps), both idle kinds and 202 steps running (`srun --overlap`: how many is a job
/// owner's to choose): a bound that no job's steps raise. Per job, 3 series (joules, watts,
/// who), 16 parts, 2 idle kinds and 2 for each of [`STEP_SERIES_PER_JOB`] steps; per node, 3
/// and 2 per part. Before, every step of every job had its two series: 87 040 more here.
#[test]
fn a_nodes_series_are_bounded_whatever_its_jobs_steps() {
    const JOBS: u32 = 256;
    const STEPS: u32 = 200;
    const PARTS: usize = 16;
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut ledger = Ledger::default();
    let mut owners = HashMap::new();
    for secs in 0..3u64 {
        let jobs = (1..=JOBS)
            .map(|id| ObservedJob {
                job: id,
                counters: None,
                steps: [StepId::EXTERN, StepId::BATCH]
                    .into_iter()
                    .chain((0..STEPS).map(StepId))
                    .map(|id| ObservedStep {
                        id,
                        usage_ns: None,
                        started: Some(w0),
                        holds: vec![],
                    })
                    .collect(),
            })
            .collect();
        let obs = Observation {
            unowned_cpu_ns: 0,
            at: t0 + Duration::from_secs(secs),
            wall: w0 + Duration::from_secs(secs),
            node_uj: secs * 250_000_000,
            settled: true,
            jobs,
            parts: (0..PARTS)
                .map(|k| crate::ledger::Part {
                    label: format!("part{k}"),
                    joules: secs as f64,
                    watts: Some(1.0),
                })
                .collect(),
            counts: vec![],
            devices: vec![],
            watts: None,
        };
        ledger.update(&obs, Split::Node);
    }
    for id in 1..=JOBS {
        owners.insert(
            id,
            Owner {
                user: "alice".into(),
            },
        );
    }
    let text = render(&ledger, Some(&owners), &who());
    let series = text.lines().filter(|l| !l.starts_with('#')).count();
    let per_job = 3 + PARTS + 2 + 2 * STEP_SERIES_PER_JOB;
    let bound = 3 + 2 * PARTS + JOBS as usize * per_job;
    assert!(series <= bound, "{series} series for a bound of {bound}");
    // the extern and batch steps, then steps 0 to 29: the job's first
    let job1_steps: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("slurm_energy_step_joules_total{") && l.contains("jobid=\"1\""))
        .collect();
    assert_eq!(job1_steps.len(), STEP_SERIES_PER_JOB);
    for step in ["extern", "batch", "0", "29"] {
        let label = format!("step=\"{step}\"");
        assert!(job1_steps.iter().any(|l| l.contains(&label)), "{step}");
    }
    assert!(!job1_steps.iter().any(|l| l.contains("step=\"30\"")));
    println!("{series} series at {JOBS} jobs of {STEPS} steps and {PARTS} parts (bound {bound})");
}
