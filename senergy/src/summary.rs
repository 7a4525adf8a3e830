//! `senergy job --summary`: a few lines a user reads at a job's end, in a terminal, an
//! epilog's output or the job's end e-mail ([`crate::mail`]): its energy, its emissions by
//! scope, its cost. A job array or a heterogeneous job is one summary, its totals first,
//! then a line per element or component. A figure accounting lacks is "not recorded",
//! never 0: a summary that said 0 J would tell a user their job was free.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::carbon::JOULES_PER_KWH;
use crate::output::{amount, duration, shown};
use crate::report::JobReport;
use crate::site::Tariff;

const NOT_RECORDED: &str = "not recorded";

/// The reports' summaries, an array's elements and a het job's components each under
/// their whole, in the order first met.
pub fn text(jobs: &[JobReport], tariff: &Tariff) -> String {
    let mut groups: Vec<(Whole, Vec<&JobReport>)> = Vec::new();
    for job in jobs {
        let whole = Whole::of(job);
        match groups.iter_mut().find(|(w, _)| *w == whole) {
            Some((_, members)) => members.push(job),
            None => groups.push((whole, vec![job])),
        }
    }
    let mut t = String::new();
    for (whole, members) in &groups {
        match (whole, members.as_slice()) {
            (Whole::Job(_), [job]) => {
                let _ = writeln!(t, "Job {} {}", job.id, about(job));
                figures(&mut t, members, tariff);
            }
            (Whole::Job(id), _) | (Whole::Array(id), _) | (Whole::Het(id), _) => {
                let kind = match whole {
                    Whole::Het(_) => "Heterogeneous job",
                    _ => "Job array",
                };
                let _ = writeln!(
                    t,
                    "{kind} {id} ({}): {} {}",
                    shown(&members[0].name),
                    members.len(),
                    if matches!(whole, Whole::Het(_)) {
                        "components"
                    } else {
                        "elements"
                    }
                );
                figures(&mut t, members, tariff);
                for m in members {
                    let _ = writeln!(t, "  {}: {}; {}", m.id, about(m), element(m, tariff));
                }
            }
        }
    }
    if let Some(factors) =
        crate::scopes::stamp_text(&tariff.stamp, tariff.factors(), &tariff.classes)
    {
        let _ = writeln!(t, "factors: {}", shown(&factors));
    }
    t
}

/// What a summary rolls up: an array's elements, a het job's components, or a job alone.
#[derive(Debug, PartialEq)]
enum Whole {
    Job(u32),
    Array(u32),
    Het(u32),
}

impl Whole {
    fn of(job: &JobReport) -> Whole {
        match (job.array_job_id, job.het_job_id) {
            (Some(array), _) => Whole::Array(array),
            (None, Some(het)) => Whole::Het(het),
            (None, None) => Whole::Job(job.job_id),
        }
    }
}

/// `(name) COMPLETED, 2 nodes n[1-2], 00:01:00`.
fn about(job: &JobReport) -> String {
    format!(
        "({}) {}, {} node{} {}, {}",
        shown(&job.name),
        job.state,
        job.nodes,
        if job.nodes == 1 { "" } else { "s" },
        shown(&job.node_list),
        duration(job.elapsed_s)
    )
}

/// The sum of the members' figures, and the ids of those without one; `None` where none
/// has one.
fn total<'a>(
    members: &[&'a JobReport],
    figure: impl Fn(&JobReport) -> Option<f64>,
) -> (Option<f64>, Vec<&'a str>) {
    let known: Vec<f64> = members.iter().filter_map(|m| figure(m)).collect();
    let missing = members
        .iter()
        .filter(|m| figure(m).is_none())
        .map(|m| m.id.as_str())
        .collect();
    ((!known.is_empty()).then(|| known.iter().sum()), missing)
}

/// A total in words: `2.50 gCO2e`, with the members it lacks, or "not recorded".
fn shown_total(
    members: &[&JobReport],
    figure: impl Fn(&JobReport) -> Option<f64>,
    unit: impl Fn(f64) -> String,
) -> String {
    match total(members, figure) {
        (None, _) => NOT_RECORDED.into(),
        (Some(v), missing) if missing.is_empty() => unit(v),
        (Some(v), missing) => format!("{} ({NOT_RECORDED} for {})", unit(v), missing.join(", ")),
    }
}

fn energy_text(joules: f64) -> String {
    format!("{:.6} kWh ({joules:.0} J)", joules / JOULES_PER_KWH)
}

fn grams(g: f64) -> String {
    format!("{} gCO2e", amount(g, 2))
}

/// The energy, emissions and cost lines of a whole.
fn figures(t: &mut String, members: &[&JobReport], tariff: &Tariff) {
    let energy = |j: &JobReport| j.energy_j.map(|e| e as f64);
    let _ = writeln!(t, "  energy: {}", shown_total(members, energy, energy_text));
    let scopes = scope_figures(tariff);
    if scopes.is_empty() {
        let _ = writeln!(t, "  emissions: no carbon intensity configured");
    }
    for (name, figure) in scopes {
        let _ = writeln!(t, "  {name}: {}", shown_total(members, figure, grams));
    }
    match tariff.price_per_kwh {
        Some(_) => {
            let currency = tariff.currency.clone();
            let money = move |c: f64| {
                format!("{} {currency}", amount(c, 4))
                    .trim_end()
                    .to_string()
            };
            let _ = writeln!(t, "  cost: {}", shown_total(members, |j| j.cost, money));
        }
        None => {
            let _ = writeln!(t, "  cost: no price configured");
        }
    }
    kept_figures(t, members);
    idle_held_emissions(t, members, tariff);
}

/// What the idle-held energy emitted under each Scope 2 factor the site sets
/// ([`crate::kept::Kept::with_idle_emissions`]), where a member kept its idle-held figures.
fn idle_held_emissions(t: &mut String, members: &[&JobReport], tariff: &Tariff) {
    let mut scopes: Vec<String> = Vec::new();
    let each: [(&str, bool, Figure); 2] = [
        ("scope 2, location-based", tariff.location.is_set(), |j| {
            j.kept.idle_held_scope2_location_g
        }),
        ("scope 2, market-based", tariff.market.is_set(), |j| {
            j.kept.idle_held_scope2_market_g
        }),
    ];
    for (name, set, figure) in each {
        if let (true, (Some(g), _)) = (set, total(members, figure)) {
            scopes.push(format!("{name} {}", grams(g)));
        }
    }
    if !scopes.is_empty() {
        let _ = writeln!(t, "  idle-held emissions: {}", scopes.join(", "));
    }
}

/// The parts and idle-held figures the members' nodes kept ([`crate::kept`]), each label
/// summed over the members that have it, and a warning for each member whose accounting
/// figure was changed after its end.
fn kept_figures(t: &mut String, members: &[&JobReport]) {
    let labelled = |pick: fn(&JobReport) -> Option<&BTreeMap<String, f64>>| {
        let mut sum: BTreeMap<&str, f64> = BTreeMap::new();
        for figures in members.iter().filter_map(|m| pick(m)) {
            for (label, j) in figures {
                *sum.entry(label).or_default() += j;
            }
        }
        let missing: Vec<&str> = members
            .iter()
            .filter(|m| pick(m).is_none())
            .map(|m| m.id.as_str())
            .collect();
        let each: Vec<String> = sum.iter().map(|(l, j)| format!("{l} {j:.0} J")).collect();
        match missing.len() {
            _ if each.is_empty() => NOT_RECORDED.to_string(),
            0 => each.join(", "),
            _ => format!(
                "{} ({NOT_RECORDED} for {})",
                each.join(", "),
                missing.join(", ")
            ),
        }
    };
    let _ = writeln!(t, "  parts: {}", labelled(|j| j.kept.parts.as_ref()));
    let _ = writeln!(
        t,
        "  idle-held: {}",
        labelled(|j| j.kept.idle_held.as_ref())
    );
    for m in members {
        if let Some(tampered) = m.kept.tampered {
            let _ = writeln!(
                t,
                "  WARNING: {}: accounting's energy ({} J) was changed after the job: its \
                 nodes kept {}{:.0} J, the energy above",
                m.id,
                tampered.accounting_j,
                if tampered.lower_bound {
                    "at least "
                } else {
                    ""
                },
                tampered.recorded_j
            );
        }
    }
}

type Figure = fn(&JobReport) -> Option<f64>;

/// Each scope whose factor the tariff sets, and where a report holds its figure.
fn scope_figures(tariff: &Tariff) -> Vec<(&'static str, Figure)> {
    let mut out: Vec<(&'static str, Figure)> = Vec::new();
    if tariff.location.is_set() {
        out.push(("scope 2, location-based", |j| j.emissions.scope2_location_g));
    }
    if tariff.market.is_set() {
        out.push(("scope 2, market-based", |j| j.emissions.scope2_market_g));
    }
    if !tariff.classes.is_empty() {
        out.push(("scope 3, embodied", |j| j.emissions.scope3_embodied_g));
    }
    out
}

/// An element's own figures on one line.
fn element(job: &JobReport, tariff: &Tariff) -> String {
    let mut parts = vec![format!(
        "energy {}",
        job.energy_j
            .map(|e| energy_text(e as f64))
            .unwrap_or_else(|| NOT_RECORDED.into())
    )];
    for (name, figure) in scope_figures(tariff) {
        let g = figure(job)
            .map(grams)
            .unwrap_or_else(|| NOT_RECORDED.into());
        parts.push(format!("{name} {g}"));
    }
    if tariff.price_per_kwh.is_some() {
        let c = job
            .cost
            .map(|c| {
                format!("{} {}", amount(c, 4), tariff.currency)
                    .trim_end()
                    .to_string()
            })
            .unwrap_or_else(|| NOT_RECORDED.into());
        parts.push(format!("cost {c}"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests;
