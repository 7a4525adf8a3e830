//! The CSV form of the reports: one column per field of the JSON, under the same name, every
//! text cell neutralised against spreadsheet formulas.

use serde::Serialize;

use super::{factors_text, opt};
use crate::report::{JobReport, NodeEnergy, StepReport};
use crate::site::Tariff;
use crate::usage::{Usage, UsageRow};

/// A CSV text field as a spreadsheet will show it. Job, step, user, account and node names
/// are the job owner's or the site's text, and a spreadsheet runs a field that begins with
/// `=`, `+`, `-`, `@`, tab or carriage return as a formula, so such a field gets a leading
/// `'` (OWASP's rule against CSV injection). Numeric columns never come here: `-0.5` stays a
/// number.
pub(super) fn text(field: &str) -> String {
    if field.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{field}")
    } else {
        field.to_string()
    }
}

/// A text cell of a CSV line, written through [`text`]. The line types below hold their
/// text only as `Text`, so no text column can miss the neutralisation.
#[derive(Default)]
struct Text<T>(T);

impl<T: AsRef<str>> Serialize for Text<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&text(self.0.as_ref()))
    }
}

/// A figure with `N` decimals (CSV readers get one precision per column, where JSON gives
/// the shortest exact form); `None` is an empty cell.
#[derive(Default)]
struct Fixed<const N: usize>(Option<f64>);

impl<const N: usize> Serialize for Fixed<N> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(v) => s.serialize_str(&format!("{v:.N$}")),
            None => s.serialize_none(),
        }
    }
}

fn kwh(joules: Option<u64>) -> Fixed<9> {
    Fixed(joules.map(|e| e as f64 / crate::carbon::JOULES_PER_KWH))
}

/// Lines under a header of their fields' names, as `csv` serialises a struct. With no
/// line the header stands alone, taken from a blank line.
fn csv_text<L: Serialize + Default>(lines: impl IntoIterator<Item = L>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut any = false;
    for line in lines {
        // a line of strings and numbers written to memory cannot fail
        let _ = w.serialize(line);
        any = true;
    }
    if !any {
        let _ = w.serialize(L::default());
    }
    let all = String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default();
    if any {
        all
    } else {
        all.split_inclusive('\n')
            .next()
            .unwrap_or_default()
            .to_string()
    }
}

/// A line of `senergy job --csv`: the fields of the JSON's job ([`JobReport`]) and step
/// ([`StepReport`]) under their names, in the order docs/senergy.md gives; a step's
/// `min_node` and `max_node` objects as a name and an `_energy_j` column, `node_energy` as
/// `name:J` pairs separated by `;`. The header is these fields' names.
#[derive(Serialize, Default)]
struct JobLine<'a> {
    job_id: u32,
    id: Text<&'a str>,
    step: Text<&'a str>,
    array_job_id: Option<u32>,
    array_task_id: Option<u32>,
    name: Text<&'a str>,
    user: Text<&'a str>,
    account: Text<&'a str>,
    state: Text<&'a str>,
    running: Option<bool>,
    start: Option<i64>,
    end: Option<i64>,
    elapsed_s: u64,
    nodes: u32,
    node_list: Text<&'a str>,
    energy_j: Option<u64>,
    kwh: Fixed<9>,
    avg_watts: Fixed<3>,
    per_node_avg_j: Fixed<3>,
    max_watts: Option<u64>,
    min_node: Text<&'a str>,
    min_node_energy_j: Option<u64>,
    max_node: Text<&'a str>,
    max_node_energy_j: Option<u64>,
    node_energy: Text<String>,
    emissions_g: Fixed<6>,
    emissions_method: Text<&'a str>,
    cost: Fixed<6>,
    currency: Text<&'a str>,
    data: Text<&'a str>,
    source: Text<&'a str>,
    method: Text<&'a str>,
    // last: a reader that takes the columns by place finds the others where they were
    avg_watts_bound_pct: Fixed<3>,
    // added after it, by scope (csv cannot write a flattened struct: one column each)
    facility_energy_j: Fixed<3>,
    scope2_location_g: Fixed<6>,
    scope2_market_g: Fixed<6>,
    scope3_embodied_g: Fixed<6>,
    node_hours: Fixed<6>,
    node_class: Text<String>,
    factors: Text<String>,
    // added after them: a heterogeneous job's component
    het_job_id: Option<u32>,
    het_job_offset: Option<u32>,
    // added after them: what the job's nodes kept with it ("not recorded" where none)
    kept: Text<&'a str>,
    kept_j: Fixed<3>,
    kept_parts: Text<String>,
    kept_idle_held: Text<String>,
    kept_tampered_accounting_j: Option<u64>,
    kept_idle_held_scope2_location_g: Fixed<6>,
    kept_idle_held_scope2_market_g: Fixed<6>,
}

/// `label:J` pairs separated by `;`, as `node_energy`.
fn pairs(figures: &Option<std::collections::BTreeMap<String, f64>>) -> Text<String> {
    let each: Vec<String> = figures
        .iter()
        .flatten()
        .map(|(label, j)| format!("{label}:{j}"))
        .collect();
    Text(each.join(";"))
}

impl<'a> JobLine<'a> {
    /// The job's line: `step` and the step-only columns empty.
    fn job(j: &'a JobReport, currency: &'a str, factors: &str) -> Self {
        JobLine {
            job_id: j.job_id,
            id: Text(&j.id),
            array_job_id: j.array_job_id,
            array_task_id: j.array_task_id,
            het_job_id: j.het_job_id,
            het_job_offset: j.het_job_offset,
            name: Text(&j.name),
            user: Text(&j.user),
            account: Text(&j.account),
            state: Text(j.state),
            running: Some(j.running),
            start: j.start,
            end: j.end,
            elapsed_s: j.elapsed_s,
            nodes: j.nodes,
            node_list: Text(&j.node_list),
            energy_j: j.energy_j,
            kwh: Fixed(j.kwh),
            avg_watts: Fixed(j.avg_watts),
            per_node_avg_j: Fixed(j.per_node_avg_j),
            emissions_g: Fixed(j.emissions_g),
            emissions_method: Text(j.emissions_method.unwrap_or_default()),
            cost: Fixed(j.cost),
            currency: Text(currency),
            data: Text(j.data.as_str()),
            source: Text(&j.source),
            method: Text(&j.method),
            avg_watts_bound_pct: Fixed(j.avg_watts_bound_pct),
            facility_energy_j: Fixed(j.emissions.facility_energy_j),
            scope2_location_g: Fixed(j.emissions.scope2_location_g),
            scope2_market_g: Fixed(j.emissions.scope2_market_g),
            scope3_embodied_g: Fixed(j.emissions.scope3_embodied_g),
            node_hours: Fixed(j.emissions.node_hours),
            node_class: Text(j.emissions.node_class.clone().unwrap_or_default()),
            factors: Text(factors.to_string()),
            kept: Text(if j.kept.recorded {
                "recorded"
            } else {
                "not recorded"
            }),
            kept_j: Fixed(j.kept.joules),
            kept_parts: pairs(&j.kept.parts),
            kept_idle_held: pairs(&j.kept.idle_held),
            kept_tampered_accounting_j: j.kept.tampered.map(|t| t.accounting_j),
            kept_idle_held_scope2_location_g: Fixed(j.kept.idle_held_scope2_location_g),
            kept_idle_held_scope2_market_g: Fixed(j.kept.idle_held_scope2_market_g),
            ..JobLine::default()
        }
    }

    /// A step's line: the step's own figures beside its job's identity (`job_id`, `id`,
    /// array ids, `user`, `account`); the job-only columns empty.
    fn step(j: &'a JobReport, s: &'a StepReport, factors: &str) -> Self {
        let node = |n: &'a Option<NodeEnergy>| {
            (
                Text(n.as_ref().map(|n| n.name.as_str()).unwrap_or_default()),
                n.as_ref().and_then(|n| n.energy_j),
            )
        };
        let (min_node, min_node_energy_j) = node(&s.min_node);
        let (max_node, max_node_energy_j) = node(&s.max_node);
        let node_energy: Vec<String> = s
            .node_energy
            .iter()
            .map(|n| format!("{}:{}", n.name, opt(n.energy_j)))
            .collect();
        JobLine {
            job_id: j.job_id,
            id: Text(&j.id),
            step: Text(&s.step),
            array_job_id: j.array_job_id,
            array_task_id: j.array_task_id,
            het_job_id: j.het_job_id,
            het_job_offset: j.het_job_offset,
            name: Text(&s.name),
            user: Text(&j.user),
            account: Text(&j.account),
            state: Text(s.state),
            elapsed_s: s.elapsed_s,
            nodes: s.nodes,
            node_list: Text(&s.node_list),
            energy_j: s.energy_j,
            kwh: kwh(s.energy_j),
            avg_watts: Fixed(s.avg_watts),
            per_node_avg_j: Fixed(s.per_node_avg_j),
            max_watts: s.max_watts,
            min_node,
            min_node_energy_j,
            max_node,
            max_node_energy_j,
            // the cell begins with the first node's name
            node_energy: Text(node_energy.join(";")),
            emissions_g: Fixed(s.emissions_g),
            data: Text(s.data.as_str()),
            source: Text(&s.source),
            method: Text(&s.method),
            avg_watts_bound_pct: Fixed(s.avg_watts_bound_pct),
            facility_energy_j: Fixed(s.emissions.facility_energy_j),
            scope2_location_g: Fixed(s.emissions.scope2_location_g),
            scope2_market_g: Fixed(s.emissions.scope2_market_g),
            scope3_embodied_g: Fixed(s.emissions.scope3_embodied_g),
            node_hours: Fixed(s.emissions.node_hours),
            node_class: Text(s.emissions.node_class.clone().unwrap_or_default()),
            factors: Text(factors.to_string()),
            ..JobLine::default()
        }
    }
}

/// One row per job (`step` empty) and one per step, with the JSON's fields ([`JobLine`]).
pub fn jobs_csv(jobs: &[JobReport], tariff: &Tariff) -> String {
    let factors = factors_text(tariff);
    let factors = factors.as_str();
    csv_text(jobs.iter().flat_map(|j| {
        std::iter::once(JobLine::job(j, &tariff.currency, factors))
            .chain(j.steps.iter().map(move |s| JobLine::step(j, s, factors)))
    }))
}

/// The job lines of `jobs` (no step lines) as `senergy job --csv` writes them: the header's
/// names, and each job's cells under them. What `senergy`'s list of jobs picks its
/// columns from (`--format`), so that its table and CSV show the cells CSV has.
pub fn job_cells(jobs: &[JobReport], tariff: &Tariff) -> (Vec<String>, Vec<Vec<String>>) {
    let factors = factors_text(tariff);
    let text = csv_text(
        jobs.iter()
            .map(|j| JobLine::job(j, &tariff.currency, &factors)),
    );
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader
        .headers()
        .map(|h| h.iter().map(str::to_string).collect())
        .unwrap_or_default();
    let rows = reader
        .records()
        .filter_map(Result::ok)
        .map(|r| r.iter().map(str::to_string).collect())
        .collect();
    (header, rows)
}

/// A line of `senergy usage --csv`: a [`UsageRow`]'s fields under their names, and the
/// currency.
#[derive(Serialize, Default)]
struct UsageLine<'a> {
    account: Text<&'a str>,
    user: Text<&'a str>,
    jobs: u64,
    jobs_incomplete: u64,
    energy_j: u64,
    kwh: Fixed<9>,
    emissions_g: Fixed<6>,
    cost: Fixed<6>,
    currency: Text<&'a str>,
    facility_energy_j: Fixed<3>,
    scope2_location_g: Fixed<6>,
    scope2_market_g: Fixed<6>,
    scope3_embodied_g: Fixed<6>,
    node_hours: Fixed<6>,
    node_class: Text<String>,
    factors: Text<String>,
    // added after them: idle-held energy as the jobs' nodes kept it
    idle_held: Text<String>,
    idle_held_share_pct: Fixed<3>,
    jobs_idle_held_recorded: u64,
    idle_held_scope2_location_g: Fixed<6>,
    idle_held_scope2_market_g: Fixed<6>,
    // added after them: the jobs whose energy in accounting was changed after their end
    jobs_tampered: u64,
    tampered_accounting_j: u64,
}

impl<'a> UsageLine<'a> {
    /// `account` and `user` as given: the total's line names them `(all)`.
    fn new(
        r: &UsageRow,
        account: &'a str,
        user: &'a str,
        currency: &'a str,
        factors: &str,
    ) -> Self {
        UsageLine {
            account: Text(account),
            user: Text(user),
            jobs: r.jobs,
            jobs_incomplete: r.jobs_incomplete,
            energy_j: r.energy_j,
            kwh: Fixed(Some(r.kwh)),
            emissions_g: Fixed(r.emissions_g),
            cost: Fixed(r.cost),
            currency: Text(currency),
            facility_energy_j: Fixed(r.emissions.facility_energy_j),
            scope2_location_g: Fixed(r.emissions.scope2_location_g),
            scope2_market_g: Fixed(r.emissions.scope2_market_g),
            scope3_embodied_g: Fixed(r.emissions.scope3_embodied_g),
            node_hours: Fixed(r.emissions.node_hours),
            node_class: Text(r.emissions.node_class.clone().unwrap_or_default()),
            factors: Text(factors.to_string()),
            idle_held: pairs(&Some(r.idle_held_j.clone()).filter(|m| !m.is_empty())),
            idle_held_share_pct: Fixed(r.idle_held_share_pct),
            jobs_idle_held_recorded: r.jobs_idle_held_recorded,
            idle_held_scope2_location_g: Fixed(r.idle_held_scope2_location_g),
            idle_held_scope2_market_g: Fixed(r.idle_held_scope2_market_g),
            jobs_tampered: r.jobs_tampered,
            tampered_accounting_j: r.tampered_accounting_j,
        }
    }
}

pub fn usage_csv(usage: &Usage, tariff: &Tariff) -> String {
    let currency = tariff.currency.as_str();
    let factors = factors_text(tariff);
    csv_text(
        usage
            .rows
            .iter()
            .map(|r| UsageLine::new(r, &r.account, &r.user, currency, &factors))
            .chain([UsageLine::new(
                &usage.total,
                "(all)",
                "(all)",
                currency,
                &factors,
            )]),
    )
}
