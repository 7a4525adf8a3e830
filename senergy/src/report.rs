//! Per job and step: energy, power, the min and max node (CAPMC's energy statistics),
//! data presence, emissions and cost. Everything here decides; nothing touches Slurm.

use serde::Serialize;

use crate::carbon::JOULES_PER_KWH;
use crate::emissions::{self, Method, Spent};
use crate::presence::Presence;
use crate::record::{
    BATCH_STEP, EXTERN_STEP, INTERACTIVE_STEP, JobRow, PENDING_STEP, StepRow, StepUsage, step_name,
};
use crate::scopes::{self, Scopes};
use crate::site::Tariff;
use crate::tres::{self, ENERGY};
use slurm_energy_logic::hostlist;

/// `job_states` (`slurm.h`) as sacct names them.
fn state_name(state: u32) -> &'static str {
    use slurm_sys::job_states;
    match state {
        job_states::JOB_PENDING => "PENDING",
        job_states::JOB_RUNNING => "RUNNING",
        job_states::JOB_SUSPENDED => "SUSPENDED",
        job_states::JOB_COMPLETE => "COMPLETED",
        job_states::JOB_CANCELLED => "CANCELLED",
        job_states::JOB_FAILED => "FAILED",
        job_states::JOB_TIMEOUT => "TIMEOUT",
        job_states::JOB_NODE_FAIL => "NODE_FAIL",
        job_states::JOB_PREEMPTED => "PREEMPTED",
        job_states::JOB_BOOT_FAIL => "BOOT_FAIL",
        job_states::JOB_DEADLINE => "DEADLINE",
        job_states::JOB_OOM => "OUT_OF_MEMORY",
        _ => "UNKNOWN",
    }
}

fn is_running(state: u32) -> bool {
    matches!(
        state,
        slurm_sys::job_states::JOB_RUNNING | slurm_sys::job_states::JOB_SUSPENDED
    )
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeEnergy {
    pub name: String,
    /// `None`: the node reported no energy.
    pub energy_j: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    pub step: String,
    pub name: String,
    pub state: &'static str,
    pub nodes: u32,
    pub node_list: String,
    pub elapsed_s: u64,
    pub energy_j: Option<u64>,
    pub avg_watts: Option<f64>,
    pub per_node_avg_j: Option<f64>,
    /// The highest power a node reported (TRESUsageOutMax).
    pub max_watts: Option<u64>,
    pub min_node: Option<NodeEnergy>,
    pub max_node: Option<NodeEnergy>,
    /// Every node's energy, where the min, max and total determine them (3 nodes or fewer).
    pub node_energy: Vec<NodeEnergy>,
    /// Its energy over its run at the intensity then.
    pub emissions_g: Option<f64>,
    /// By scope: its energy over its run, its nodes over its elapsed time.
    pub emissions: Scopes,
    pub data: Presence,
    /// What the figure measured and how, as its job's ([`crate::measured`]).
    pub source: String,
    pub method: String,
    /// How far `avg_watts` may be from the step's true average power, in percent of it
    /// ([`average_power`]).
    pub avg_watts_bound_pct: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobReport {
    pub job_id: u32,
    /// `123_4` for array elements, `123+1` for a heterogeneous job's components (as sacct
    /// names them), else the job id.
    pub id: String,
    pub array_job_id: Option<u32>,
    pub array_task_id: Option<u32>,
    /// A heterogeneous job's component: its het job id (the leader's) and offset.
    pub het_job_id: Option<u32>,
    pub het_job_offset: Option<u32>,
    pub name: String,
    pub user: String,
    pub account: String,
    pub state: &'static str,
    /// Still running: the figures are those of its finished steps so far.
    pub running: bool,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub elapsed_s: u64,
    pub nodes: u32,
    pub node_list: String,
    pub energy_j: Option<u64>,
    pub kwh: Option<f64>,
    pub avg_watts: Option<f64>,
    pub per_node_avg_j: Option<f64>,
    pub emissions_g: Option<f64>,
    /// By GHG scope ([`crate::scopes`]).
    pub emissions: Scopes,
    /// How the emissions were found ([`Method::text`]); `None` without emissions.
    pub emissions_method: Option<&'static str>,
    pub cost: Option<f64>,
    pub data: Presence,
    /// What the meter covers and how the job's part was obtained ([`crate::measured`]);
    /// empty until [`JobReport::measured`] sets them.
    pub source: String,
    pub method: String,
    /// How far `avg_watts` may be from the job's true average power, in percent of it
    /// ([`average_power`]).
    pub avg_watts_bound_pct: Option<f64>,
    /// What the job's nodes kept with it at its end ([`crate::kept`]).
    pub kept: crate::kept::Kept,
    pub steps: Vec<StepReport>,
}

impl JobReport {
    /// Says what the job's and its steps' figures measured.
    pub fn measured(&mut self, source: String, method: String) {
        for step in &mut self.steps {
            step.source.clone_from(&source);
            step.method.clone_from(&method);
        }
        self.source = source;
        self.method = method;
    }
}

/// A run of at least this long that Slurm recorded as 0 J had no energy plugin measuring
/// it (acct_gather_energy/none leaves the figure at 0): no real node draws nothing.
const MEASURED_RUN_S: u64 = 1;

fn ratio(joules: Option<u64>, by: u64) -> Option<f64> {
    joules.filter(|_| by > 0).map(|j| j as f64 / by as f64)
}

/// The average power of a run of `elapsed_s` that used `joules`, and the bound of its
/// error in percent of it. Accounting holds a run's start and end in whole seconds, each
/// cut down (`time(NULL)`), so the run lasted `d` in `(elapsed - 1, elapsed + 1)` and its
/// true power `joules / d` lies within `avg × elapsed / (elapsed ± 1)`: within
/// `100 / (elapsed - 1)` % of `avg` either way (an 18.85 s run recorded as 18 s: 565.5 W
/// for 540 W, ± 5.9%). The bound is rounded up to 0.001 % so that it stays a bound. A run
/// of 1 s or less has no figure: it may have lasted a moment, at any power.
fn average_power(joules: Option<u64>, elapsed_s: u64) -> (Option<f64>, Option<f64>) {
    if elapsed_s <= 1 {
        return (None, None);
    }
    let avg = ratio(joules, elapsed_s);
    let bound_pct = (100_000.0 / (elapsed_s - 1) as f64).ceil() / 1000.0;
    (avg, avg.map(|_| bound_pct))
}

/// A step's node indexes (`*_nodeid`) name nodes of its own node list.
fn node_at(names: &[String], nodeid: Option<u64>) -> Option<String> {
    let index = usize::try_from(nodeid?).ok()?;
    names.get(index).cloned()
}

pub fn step_report(step: &StepRow) -> StepReport {
    let StepUsage {
        in_max,
        in_max_nodeid,
        in_min,
        in_min_nodeid,
        in_tot,
        out_max,
    } = &step.usage;
    let names = hostlist::expand(&step.nodes).unwrap_or_default();
    let raw_max = tres::count(in_max, ENERGY);
    let raw_min = tres::count(in_min, ENERGY);
    let node = |raw: Option<u64>, id: &str| {
        let nodeid = tres::count(id, ENERGY);
        raw.map(|r| {
            (
                nodeid,
                NodeEnergy {
                    name: node_at(&names, nodeid).unwrap_or_else(|| "?".into()),
                    energy_j: tres::joules(r),
                },
            )
        })
    };
    let max = node(raw_max, in_max_nodeid);
    let min = node(raw_min, in_min_nodeid);
    let every_node_known = [&max, &min]
        .iter()
        .all(|n| n.as_ref().is_none_or(|(_, n)| n.energy_j.is_some()));
    // sacct's step ConsumedEnergy; the TRES total only where no node lacks energy (a sum
    // that included NO_VAL64 wrapped around)
    let total = tres::joules(step.consumed_energy).or_else(|| {
        tres::count(in_tot, ENERGY)
            .and_then(tres::joules)
            .filter(|_| every_node_known)
    });
    // a node that reported no energy (NO_VAL64) wins the max; a 0 J run did not measure
    let unmeasured = |j: Option<u64>| j.is_none_or(|j| j == 0 && step.elapsed_s >= MEASURED_RUN_S);
    let data = match (unmeasured(total), every_node_known) {
        (false, true) => Presence::Complete,
        (true, _)
            if [&max, &min]
                .iter()
                .all(|n| n.as_ref().is_none_or(|(_, n)| unmeasured(n.energy_j))) =>
        {
            Presence::Missing
        }
        _ => Presence::Partial,
    };
    let energy_j = total.filter(|_| data != Presence::Missing);
    let nnodes = if step.nnodes > 0 {
        step.nnodes
    } else {
        names.len() as u32
    };
    let node_energy = match data {
        Presence::Complete => every_node(&names, energy_j, max.as_ref(), min.as_ref()),
        _ => Vec::new(),
    };
    let (avg_watts, avg_watts_bound_pct) = average_power(energy_j, step.elapsed_s);
    StepReport {
        step: step_name(step.step_id, step.het_comp),
        name: step.name.clone(),
        state: state_name(step.state),
        nodes: nnodes,
        node_list: step.nodes.clone(),
        elapsed_s: step.elapsed_s,
        energy_j,
        avg_watts,
        per_node_avg_j: ratio(energy_j, u64::from(nnodes)),
        max_watts: tres::count(out_max, ENERGY).and_then(tres::watts),
        min_node: min.map(|(_, n)| n),
        max_node: max.map(|(_, n)| n),
        node_energy,
        emissions_g: None,
        emissions: Scopes::default(),
        data,
        source: String::new(),
        method: String::new(),
        avg_watts_bound_pct,
    }
}

/// Every node's figure where the total, max and min leave at most one node unnamed.
fn every_node(
    names: &[String],
    total: Option<u64>,
    max: Option<&(Option<u64>, NodeEnergy)>,
    min: Option<&(Option<u64>, NodeEnergy)>,
) -> Vec<NodeEnergy> {
    let (Some(total), Some((Some(max_id), max)), Some((Some(min_id), min))) = (total, max, min)
    else {
        return Vec::new();
    };
    if names.is_empty() || names.len() > 3 {
        return Vec::new();
    }
    let mut known: Vec<Option<u64>> = vec![None; names.len()];
    for (id, n) in [(max_id, max), (min_id, min)] {
        match known.get_mut(*id as usize) {
            Some(slot) => *slot = n.energy_j,
            None => return Vec::new(),
        }
    }
    let unknown: Vec<usize> = (0..names.len()).filter(|&i| known[i].is_none()).collect();
    let named: u64 = known.iter().flatten().sum();
    match unknown.as_slice() {
        [] => {}
        [only] if total >= named => known[*only] = Some(total - named),
        // min and max on the same node: all equal when the total says so
        _ if max.energy_j == min.energy_j
            && max.energy_j.map(|j| j * names.len() as u64) == Some(total) =>
        {
            known.iter_mut().for_each(|k| *k = max.energy_j)
        }
        _ => return Vec::new(),
    }
    names
        .iter()
        .zip(known)
        .map(|(name, energy_j)| NodeEnergy {
            name: name.clone(),
            energy_j,
        })
        .collect()
}

/// Whether accounting holds the job's final energy: it has ended, every step has, and its
/// recorded energy is what slurmctld adds up from them (the extern step's, else the
/// steps' sum: [`so_far`]). At the job's end (its END mail, its epilog) slurmctld records
/// the energy of the steps ended so far; the extern step ends later, in the job's cleanup,
/// and slurmctld then records the job's energy again with it (step_mgr.c, `TRES_STR_CALC`):
/// 724 J at the END mail, 734 J a moment later, on a 22.05 cluster.
pub fn settled(job: &JobRow) -> bool {
    let recorded = tres::count(&job.tres_alloc, ENERGY).and_then(tres::joules);
    let steps: Vec<StepReport> = job.steps.iter().map(step_report).collect();
    job.end > 0
        && !is_running(job.state)
        && job.state != slurm_sys::job_states::JOB_PENDING
        && job.steps.iter().all(|s| s.end > 0 && !is_running(s.state))
        && recorded.is_some()
        && (steps.is_empty() || so_far(&steps, false).0 == recorded)
}

/// `now`: unix seconds, for the run time of a running job.
/// The job's report; `samples`: its energy counter's samples per node from Prometheus,
/// when known (emissions then follow its power).
pub fn job_report(
    job: &JobRow,
    tariff: &Tariff,
    now: i64,
    samples: Option<&[Vec<(f64, f64)>]>,
) -> JobReport {
    let steps: Vec<StepReport> = job.steps.iter().map(step_report).collect();
    let running = is_running(job.state);
    let elapsed_s = if running && job.start > 0 {
        u64::try_from(now - job.start).unwrap_or(0)
    } else {
        job.elapsed_s
    };
    let step_presence = Presence::combine(steps.iter().map(|s| s.data));
    // what slurmctld recorded at the job's end (sacct's ConsumedEnergy)
    let recorded = tres::count(&job.tres_alloc, ENERGY)
        .and_then(tres::joules)
        .filter(|&j| j > 0 || elapsed_s < MEASURED_RUN_S);
    let kept = crate::kept::kept(job);
    let (energy_j, data) = match (kept.tampered, recorded) {
        // accounting's figure was changed after the job (its owner may rewrite it from
        // 25.11): what its nodes kept is billed, a lower bound where some kept none
        (Some(t), _) => (
            Some(t.recorded_j.round() as u64),
            if t.lower_bound {
                Presence::Partial
            } else {
                Presence::Complete
            },
        ),
        (None, Some(j)) => (
            Some(j),
            match step_presence {
                Some(Presence::Complete) | None => Presence::Complete,
                Some(_) => Presence::Partial,
            },
        ),
        (None, None) => so_far(&steps, running),
    };
    let end = (job.end > 0).then_some(job.end);
    let run_end = end.unwrap_or(now);
    let spent =
        energy_j.map(|j| spent(job, j as f64, (job.start.max(0), run_end), tariff, samples));
    let emissions_g = spent
        .as_ref()
        .and_then(|(pieces, _)| emissions::emissions_g(tariff, pieces));
    let job_scopes = by_scope(
        tariff,
        spent.as_ref().map(|(pieces, _)| pieces.as_slice()),
        &job.nodes,
        job.alloc_nodes,
        elapsed_s,
    );
    let (avg_watts, avg_watts_bound_pct) = average_power(energy_j, elapsed_s);
    let mut steps = steps;
    for (report, row) in steps.iter_mut().zip(&job.steps) {
        let step_end = if row.end > 0 { row.end } else { now };
        let (start, end) = (row.start.max(0) as f64, step_end as f64);
        report.emissions_g = report
            .energy_j
            .and_then(|j| tariff.emissions_g(j as f64, start, end));
        let run = report.energy_j.map(|j| {
            [Spent {
                joules: j as f64,
                start,
                end,
            }]
        });
        report.emissions = by_scope(
            tariff,
            run.as_ref().map(|r| r.as_slice()),
            &row.nodes,
            report.nodes,
            row.elapsed_s,
        );
    }
    let shown_method = emissions_g.is_some() || job_scopes.scope2_market_g.is_some();
    let kept = kept.with_idle_emissions(energy_j, &job_scopes);
    JobReport {
        job_id: job.job_id,
        id: match (job.array, job.het) {
            (Some((array, task)), _) => format!("{array}_{task}"),
            (None, Some((het, offset))) => format!("{het}+{offset}"),
            (None, None) => job.job_id.to_string(),
        },
        array_job_id: job.array.map(|(a, _)| a),
        array_task_id: job.array.map(|(_, t)| t),
        het_job_id: job.het.map(|(h, _)| h),
        het_job_offset: job.het.map(|(_, o)| o),
        name: job.name.clone(),
        user: job.user.clone(),
        account: job.account.clone(),
        state: state_name(job.state),
        running,
        start: (job.start > 0).then_some(job.start),
        end,
        elapsed_s,
        nodes: job.alloc_nodes,
        node_list: job.nodes.clone(),
        energy_j,
        kwh: energy_j.map(|j| j as f64 / JOULES_PER_KWH),
        avg_watts,
        per_node_avg_j: ratio(energy_j, u64::from(job.alloc_nodes)),
        emissions_g,
        emissions: job_scopes,
        emissions_method: spent
            .map(|(_, method)| method)
            .filter(|_| shown_method)
            .map(Method::text),
        cost: energy_j.and_then(|j| tariff.cost(j as f64)),
        data,
        source: String::new(),
        method: String::new(),
        avg_watts_bound_pct,
        kept,
        steps,
    }
}

/// When the job's `joules` were spent over its run `(start, end)`, and how that was found:
/// from its power samples, else its srun steps, else evenly (where no factor varies over
/// time, when does not matter: [`Method::Static`]).
fn spent(
    job: &JobRow,
    joules: f64,
    (start, end): (i64, i64),
    tariff: &Tariff,
    samples: Option<&[Vec<(f64, f64)>]>,
) -> (Vec<Spent>, Method) {
    let (start, end) = (start as f64, end as f64);
    if !tariff.varies() {
        return (vec![Spent { joules, start, end }], Method::Static);
    }
    if let Some(pieces) = samples.and_then(|nodes| emissions::from_samples(joules, start, nodes)) {
        return (pieces, Method::PowerSamples);
    }
    let steps: Vec<Spent> = job
        .steps
        .iter()
        .filter(|s| {
            !matches!(
                s.step_id,
                BATCH_STEP | EXTERN_STEP | INTERACTIVE_STEP | PENDING_STEP
            )
        })
        .filter(|s| s.start > 0 && s.end >= s.start)
        .filter_map(|s| {
            Some(Spent {
                joules: tres::joules(s.consumed_energy)? as f64,
                start: s.start as f64,
                end: s.end as f64,
            })
        })
        .collect();
    let method = if steps.is_empty() {
        Method::Even
    } else {
        Method::Steps
    };
    (emissions::from_steps(joules, start, end, &steps), method)
}

/// A run's emissions by scope: Scope 2 of its energy as `spent` (`None`: unknown), Scope 3
/// of its `nodes` (a hostlist; `count` of them) over `elapsed_s`.
fn by_scope(
    tariff: &Tariff,
    spent: Option<&[Spent]>,
    nodes: &str,
    count: u32,
    elapsed_s: u64,
) -> Scopes {
    let scope2 = spent
        .map(|pieces| emissions::scope2(tariff, pieces))
        .unwrap_or_default();
    let (scope3_embodied_g, classes) = if tariff.classes.is_empty() {
        (None, Vec::new())
    } else {
        let names = hostlist::expand(nodes).unwrap_or_default();
        scopes::embodied_g(
            &tariff.classes,
            &tariff.node_features,
            &names,
            elapsed_s as f64,
        )
    };
    Scopes {
        scope3_embodied_g,
        node_hours: Some(f64::from(count) * elapsed_s as f64 / 3600.0),
        node_class: (!classes.is_empty()).then(|| classes.join(",")),
        ..scope2
    }
}

/// A job without a recorded total (still running, or ended without one): as slurmctld
/// adds it up (stepmgr.c): the extern step's energy if it has one (PrologFlags=Contain:
/// it spans the whole job), else the sum of the steps'.
fn so_far(steps: &[StepReport], running: bool) -> (Option<u64>, Presence) {
    let extern_step = steps
        .iter()
        .find(|s| s.step == step_name(EXTERN_STEP, None));
    if let Some(s) = extern_step.filter(|s| s.energy_j.is_some()) {
        return (s.energy_j, if running { Presence::Partial } else { s.data });
    }
    let known: Vec<u64> = steps.iter().filter_map(|s| s.energy_j).collect();
    if known.is_empty() {
        return (None, Presence::Missing);
    }
    let presence = match Presence::combine(steps.iter().map(|s| s.data)) {
        Some(Presence::Complete) if !running => Presence::Complete,
        _ => Presence::Partial,
    };
    (Some(known.iter().sum()), presence)
}

#[cfg(test)]
mod tests;
