//! The metrics' text: the node's, its parts', its jobs' and steps' energy and power, and who
//! runs each job, in Prometheus's text format.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::attribution::grant::Owner;
use crate::ledger::Ledger;

/// How long a job's series stay after it left the node: two scrapes at Prometheus's
/// default interval of a minute.
pub(super) const GRACE: Duration = Duration::from_secs(120);

/// A job's step series (joules and watts) are written for this many of its steps at most,
/// those of the lowest step ids (the extern and batch steps, then the first launched): a
/// job's owner decides how many steps run at once (`srun --overlap`, MaxStepCount 40 000),
/// and a node's series must not grow with them. The job's own series count every step's
/// energy; sacct has each step's.
pub(crate) const STEP_SERIES_PER_JOB: usize = 32;

/// The labels of every series of one plugin on one node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Identity {
    /// The node's name.
    pub node: String,
    /// The plugin (`rust_rapl`).
    pub source: String,
    /// How jobs are charged (`node`, `shared`, `devices`).
    pub attribution: String,
}

/// A label value as the text format writes it: `\`, `"` and newlines escaped.
fn escaped(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// One metric family: its `# HELP` and `# TYPE` lines, then its samples.
struct Family {
    text: String,
}

impl Family {
    fn new(name: &str, kind: &str, help: &str) -> Self {
        Self {
            text: format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"),
        }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        self.text.push('{');
        for (k, (key, value)) in labels.iter().enumerate() {
            if k > 0 {
                self.text.push(',');
            }
            let _ = write!(self.text, "{key}=\"{}\"", escaped(value));
        }
        let _ = writeln!(self.text, "}} {value}");
    }
}

/// The file's text: the node's energy and power (and its parts'), and those of each job
/// and step the ledger keeps that was on the node less than [`GRACE`] ago (a job's ended
/// steps as long as the ledger keeps them: a minute at most, a few dozen per job; of
/// [`STEP_SERIES_PER_JOB`] steps of a job at most), and who
/// runs each job unless `owners` is `None` ([`OWNERS_KEY`](super::OWNERS_KEY)): then no series says it.
pub(crate) fn render(
    ledger: &Ledger,
    owners: Option<&HashMap<u32, Owner>>,
    who: &Identity,
) -> String {
    const NODE_J: &str = "slurm_energy_node_joules_total";
    const NODE_W: &str = "slurm_energy_node_watts";
    const PART_J: &str = "slurm_energy_node_part_joules_total";
    const PART_W: &str = "slurm_energy_node_part_watts";
    const JOB_J: &str = "slurm_energy_job_joules_total";
    const JOB_W: &str = "slurm_energy_job_watts";
    const JOB_PART_J: &str = "slurm_energy_job_part_joules_total";
    const JOB_IDLE_J: &str = "slurm_energy_job_idle_held_joules_total";
    const STEP_J: &str = "slurm_energy_step_joules_total";
    const STEP_W: &str = "slurm_energy_step_watts";
    const JOB_INFO: &str = "slurm_energy_job_info";
    const SAMPLED: &str = "slurm_energy_sampled_timestamp_seconds";
    let node = [("node", who.node.as_str()), ("source", who.source.as_str())];

    let mut sampled = Family::new(
        SAMPLED,
        "gauge",
        "Unix time of the sample the figures are from (how fresh they are).",
    );
    sampled.sample(
        SAMPLED,
        &[node[0], node[1], ("attribution", who.attribution.as_str())],
        ledger.sampled_at(),
    );
    let mut node_j = Family::new(
        NODE_J,
        "counter",
        "Energy the node used, in joules, continued across slurmd restarts.",
    );
    let mut node_w = Family::new(
        NODE_W,
        "gauge",
        "The node's power over the last second or more, in watts.",
    );
    let account = ledger.node();
    node_j.sample(NODE_J, &node, account.joules);
    node_w.sample(NODE_W, &node, account.watts);
    let mut part_j = Family::new(
        PART_J,
        "counter",
        "Energy of a part of the node the source measures (a package, DRAM, a GPU), in joules.",
    );
    let mut part_w = Family::new(PART_W, "gauge", "Power of a part of the node, in watts.");
    for part in ledger.parts() {
        let labels = [node[0], node[1], ("part", part.label.as_str())];
        part_j.sample(PART_J, &labels, part.joules);
        if let Some(watts) = part.watts {
            part_w.sample(PART_W, &labels, watts);
        }
    }

    let mut job_j = Family::new(
        JOB_J,
        "counter",
        "Energy charged to the job on this node since it began, in joules (its share where \
         the node or a GPU is shared): what Slurm's accounting gets.",
    );
    let mut job_w = Family::new(
        JOB_W,
        "gauge",
        "Power charged to the job on this node, in watts; 0 once it left.",
    );
    let mut job_part_j = Family::new(
        JOB_PART_J,
        "counter",
        "The job's energy on this node by part the source measures (a package, DRAM, a GPU; \
         rest: what a whole-node meter's parts do not cover), in joules: its parts add up to \
         slurm_energy_job_joules_total.",
    );
    let mut job_idle_j = Family::new(
        JOB_IDLE_J,
        "counter",
        "Energy charged to the job on this node for what it held and did not use, in joules: \
         kind=gpu, GPUs none of its processes used (attribution=devices); kind=cpu, its static \
         share over the CPU time it left unused (attribution=shared). Absent where the \
         attribution cannot tell.",
    );
    let mut step_j = Family::new(
        STEP_J,
        "counter",
        "Energy charged to the step on this node since it began, in joules.",
    );
    let mut step_w = Family::new(STEP_W, "gauge", "Power charged to the step, in watts.");
    let mut info = Family::new(
        JOB_INFO,
        "gauge",
        "Who runs the job (from Slurm's step record), always 1: join on jobid.",
    );
    let grace = GRACE.as_secs_f64();
    for job in ledger
        .jobs()
        .filter(|j| ledger.sampled_at() - j.last_seen() <= grace)
    {
        let id = job.id.to_string();
        let labels = [node[0], node[1], ("jobid", id.as_str())];
        let account = job.account();
        job_j.sample(JOB_J, &labels, account.joules);
        job_w.sample(JOB_W, &labels, account.watts);
        let breakdown = job.breakdown();
        for (part, joules) in &breakdown.parts {
            let labels = [node[0], node[1], ("jobid", id.as_str()), ("part", part)];
            job_part_j.sample(JOB_PART_J, &labels, *joules);
        }
        let idle = breakdown.idle_held;
        for (kind, joules) in [("gpu", idle.gpu), ("cpu", idle.cpu)] {
            if let Some(joules) = joules {
                let labels = [node[0], node[1], ("jobid", id.as_str()), ("kind", kind)];
                job_idle_j.sample(JOB_IDLE_J, &labels, joules);
            }
        }
        let mut steps: Vec<_> = job.steps().collect();
        // Slurm's special steps (extern, batch, interactive: ids from 0xFFFF_FFF0) first
        steps.sort_by_key(|(step, _)| (step.0 < 0xFFFF_FFF0, step.0));
        for (step, account) in steps.into_iter().take(STEP_SERIES_PER_JOB) {
            let name = step.name();
            let labels = [node[0], node[1], ("jobid", id.as_str()), ("step", &name)];
            step_j.sample(STEP_J, &labels, account.joules);
            step_w.sample(STEP_W, &labels, account.watts);
        }
        if let Some(owner) = owners.and_then(|o| o.get(&job.id)) {
            info.sample(
                JOB_INFO,
                &[
                    node[0],
                    ("jobid", id.as_str()),
                    ("user", owner.user.as_str()),
                ],
                1.0,
            );
        }
    }
    let info = owners.is_some().then_some(info);
    [
        sampled, node_j, node_w, part_j, part_w, job_j, job_w, job_part_j, job_idle_j, step_j,
        step_w,
    ]
    .iter()
    .chain(info.as_ref())
    .map(|f| f.text.as_str())
    .collect()
}

#[cfg(test)]
mod tests;
