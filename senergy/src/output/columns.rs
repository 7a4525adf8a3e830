//! The columns of a job's line, each named once, as sacct's `fields[]`: its name (the CSV's
//! header, `--format`, the key of the list's JSON), its heading and width in the list's
//! table, how the table shows it, and its cell. `senergy job --csv`, and the list in each
//! of its forms, read this table and nothing else: a column added here is in all of them,
//! and one cannot be added to one form alone.

use std::collections::BTreeMap;
use std::fmt::Display;

use super::opt;
use crate::report::{JobReport, NodeEnergy, StepReport};
use crate::scopes::Scopes;

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

/// `label:J` pairs separated by `;`, as `node_energy`; the text before [`text`].
pub(super) fn pairs(figures: Option<&BTreeMap<String, f64>>) -> String {
    let each: Vec<String> = figures
        .into_iter()
        .flatten()
        .map(|(label, j)| format!("{label}:{j}"))
        .collect();
    each.join(";")
}

/// A cell as the CSV writes it, empty where the line has no figure. Made only by its
/// constructors, so that no text cell misses [`text`].
pub(super) struct Cell(String);

impl Cell {
    fn text(field: &str) -> Cell {
        Cell(text(field))
    }

    /// A count, an id or a flag as Rust writes it.
    fn figure(value: Option<impl Display>) -> Cell {
        Cell(opt(value))
    }

    /// A figure with `decimals` decimals: CSV readers get one precision per column, where
    /// JSON gives the shortest exact form.
    fn fixed(value: Option<f64>, decimals: usize) -> Cell {
        Cell(value.map(|v| format!("{v:.decimals$}")).unwrap_or_default())
    }

    fn pairs(figures: Option<&BTreeMap<String, f64>>) -> Cell {
        Cell::text(&pairs(figures))
    }

    pub(super) fn into_string(self) -> String {
        self.0
    }
}

/// A line of `senergy job --csv`: a job's, or one of its steps' with its job's identity
/// (`job_id`, `id`, array and het ids, `user`, `account`).
#[derive(Clone, Copy)]
pub(super) struct Line<'a> {
    pub job: &'a JobReport,
    /// `None` on the job's own line.
    pub step: Option<&'a StepReport>,
    /// Shown on the job's line only: a step has no cost of its own.
    pub currency: &'a str,
    /// The factors the figures used, in one line ([`super::factors_text`]).
    pub factors: &'a str,
}

impl<'a> Line<'a> {
    /// The job's line, then each of its steps'.
    pub(super) fn with_steps(
        job: &'a JobReport,
        currency: &'a str,
        factors: &'a str,
    ) -> impl Iterator<Item = Line<'a>> {
        let line = Line {
            job,
            step: None,
            currency,
            factors,
        };
        let steps = job.steps.iter().map(move |s| Line {
            step: Some(s),
            ..line
        });
        std::iter::once(line).chain(steps)
    }

    /// The figure of the run the line is of: the job's, or its step's.
    fn run<T>(
        &self,
        job: impl FnOnce(&'a JobReport) -> T,
        step: impl FnOnce(&'a StepReport) -> T,
    ) -> T {
        match self.step {
            Some(s) => step(s),
            None => job(self.job),
        }
    }

    /// A figure of the job alone, empty on its steps' lines.
    fn job_only<T>(&self, f: impl FnOnce(&'a JobReport) -> Option<T>) -> Option<T> {
        self.step.is_none().then(|| f(self.job)).flatten()
    }

    /// A job-only text cell.
    fn job_text(&self, f: impl FnOnce(&'a JobReport) -> &'a str) -> Cell {
        Cell::text(self.job_only(|j| Some(f(j))).unwrap_or_default())
    }

    fn scopes(&self) -> &'a Scopes {
        self.run(|j| &j.emissions, |s| &s.emissions)
    }

    /// A step's `min_node` or `max_node`; none on the job's line.
    fn node(
        &self,
        f: impl FnOnce(&'a StepReport) -> &'a Option<NodeEnergy>,
    ) -> Option<&'a NodeEnergy> {
        self.step.and_then(|s| f(s).as_ref())
    }
}

/// How the list's table shows a column's cell.
#[derive(Clone, Copy)]
pub(super) enum Shown {
    /// As the CSV has it, its control characters escaped ([`super::shown`]).
    Text,
    /// Unix seconds as a local date.
    Time,
    /// Seconds as sacct writes a duration.
    Duration,
}

/// One column of a job's line.
pub(super) struct Column {
    /// In the CSV's header, in `--format`, and the key of the list's JSON.
    pub name: &'static str,
    /// Above the column in the list's table.
    pub heading: &'static str,
    /// The column's width in the list's table, at least its heading's: sacct's way, fixed,
    /// so that each page of jobs is written as it is read (a longer cell pushes its line's
    /// next cells along); cells are left-aligned.
    pub width: usize,
    pub shown: Shown,
    /// The line's cell, as the CSV writes it (the list's table and JSON show that text).
    pub cell: fn(&Line) -> Cell,
}

const fn col(
    name: &'static str,
    heading: &'static str,
    width: usize,
    cell: fn(&Line) -> Cell,
) -> Column {
    Column {
        name,
        heading,
        width,
        shown: Shown::Text,
        cell,
    }
}

impl Column {
    const fn shown(self, shown: Shown) -> Column {
        Column { shown, ..self }
    }
}

/// The column named `name`, as `--format` names it.
pub(super) fn column(name: &str) -> Option<&'static Column> {
    COLUMNS.iter().find(|c| c.name == name)
}

/// Every column, in the CSV's order (docs/senergy.md's): a column is added at the end, so that
/// a reader that takes the columns by place finds the others where they were.
pub(super) static COLUMNS: &[Column] = &[
    col("job_id", "JOB_ID", 8, |l| Cell::figure(Some(l.job.job_id))),
    col("id", "ID", 12, |l| Cell::text(&l.job.id)),
    col("step", "STEP", 8, |l| {
        Cell::text(l.step.map_or("", |s| &s.step))
    }),
    col("array_job_id", "ARRAY_JOB_ID", 12, |l| {
        Cell::figure(l.job.array_job_id)
    }),
    col("array_task_id", "ARRAY_TASK_ID", 13, |l| {
        Cell::figure(l.job.array_task_id)
    }),
    col("name", "NAME", 16, |l| {
        Cell::text(l.run(|j| &j.name, |s| &s.name))
    }),
    col("user", "USER", 10, |l| Cell::text(&l.job.user)),
    col("account", "ACCOUNT", 12, |l| Cell::text(&l.job.account)),
    col("state", "STATE", 10, |l| {
        Cell::text(l.run(|j| j.state, |s| s.state))
    }),
    col("running", "RUNNING", 8, |l| {
        Cell::figure(l.job_only(|j| Some(j.running)))
    }),
    col("start", "START", 19, |l| {
        Cell::figure(l.job_only(|j| j.start))
    })
    .shown(Shown::Time),
    col("end", "END", 19, |l| Cell::figure(l.job_only(|j| j.end))).shown(Shown::Time),
    col("elapsed_s", "ELAPSED_S", 10, |l| {
        Cell::figure(Some(l.run(|j| j.elapsed_s, |s| s.elapsed_s)))
    })
    .shown(Shown::Duration),
    col("nodes", "NODES", 8, |l| {
        Cell::figure(Some(l.run(|j| j.nodes, |s| s.nodes)))
    }),
    col("node_list", "NODE_LIST", 16, |l| {
        Cell::text(l.run(|j| &j.node_list, |s| &s.node_list))
    }),
    col("energy_j", "ENERGY_J", 12, |l| {
        Cell::figure(l.run(|j| j.energy_j, |s| s.energy_j))
    }),
    col("kwh", "KWH", 12, |l| {
        let step = |s: &StepReport| s.energy_j.map(|e| e as f64 / crate::carbon::JOULES_PER_KWH);
        Cell::fixed(l.run(|j| j.kwh, step), 9)
    }),
    col("avg_watts", "AVG_WATTS", 10, |l| {
        Cell::fixed(l.run(|j| j.avg_watts, |s| s.avg_watts), 3)
    }),
    col("per_node_avg_j", "PER_NODE_AVG_J", 14, |l| {
        Cell::fixed(l.run(|j| j.per_node_avg_j, |s| s.per_node_avg_j), 3)
    }),
    col("max_watts", "MAX_WATTS", 9, |l| {
        Cell::figure(l.step.and_then(|s| s.max_watts))
    }),
    col("min_node", "MIN_NODE", 8, |l| {
        Cell::text(l.node(|s| &s.min_node).map_or("", |n| &n.name))
    }),
    col("min_node_energy_j", "MIN_NODE_ENERGY_J", 17, |l| {
        Cell::figure(l.node(|s| &s.min_node).and_then(|n| n.energy_j))
    }),
    col("max_node", "MAX_NODE", 8, |l| {
        Cell::text(l.node(|s| &s.max_node).map_or("", |n| &n.name))
    }),
    col("max_node_energy_j", "MAX_NODE_ENERGY_J", 17, |l| {
        Cell::figure(l.node(|s| &s.max_node).and_then(|n| n.energy_j))
    }),
    // a step's every node as `name:J` pairs separated by `;`
    col("node_energy", "NODE_ENERGY", 11, |l| {
        let each = l.step.into_iter().flat_map(|s| &s.node_energy);
        let each: Vec<String> = each
            .map(|n| format!("{}:{}", n.name, opt(n.energy_j)))
            .collect();
        Cell::text(&each.join(";"))
    }),
    col("emissions_g", "EMISSIONS_G", 12, |l| {
        Cell::fixed(l.run(|j| j.emissions_g, |s| s.emissions_g), 6)
    }),
    col("emissions_method", "EMISSIONS_METHOD", 16, |l| {
        l.job_text(|j| j.emissions_method.unwrap_or_default())
    }),
    col("cost", "COST", 10, |l| {
        Cell::fixed(l.job_only(|j| j.cost), 6)
    }),
    col("currency", "CURRENCY", 8, |l| l.job_text(|_| l.currency)),
    col("data", "DATA", 8, |l| {
        Cell::text(l.run(|j| j.data, |s| s.data).as_str())
    }),
    col("source", "SOURCE", 16, |l| {
        Cell::text(l.run(|j| &j.source, |s| &s.source))
    }),
    col("method", "METHOD", 16, |l| {
        Cell::text(l.run(|j| &j.method, |s| &s.method))
    }),
    col("avg_watts_bound_pct", "AVG_WATTS_BOUND_PCT", 19, |l| {
        Cell::fixed(
            l.run(|j| j.avg_watts_bound_pct, |s| s.avg_watts_bound_pct),
            3,
        )
    }),
    // by scope, the emissions object's fields each a column
    col("facility_energy_j", "FACILITY_ENERGY_J", 17, |l| {
        Cell::fixed(l.scopes().facility_energy_j, 3)
    }),
    col("scope2_location_g", "SCOPE2_LOCATION_G", 17, |l| {
        Cell::fixed(l.scopes().scope2_location_g, 6)
    }),
    col("scope2_market_g", "SCOPE2_MARKET_G", 15, |l| {
        Cell::fixed(l.scopes().scope2_market_g, 6)
    }),
    col("scope3_embodied_g", "SCOPE3_EMBODIED_G", 17, |l| {
        Cell::fixed(l.scopes().scope3_embodied_g, 6)
    }),
    col("node_hours", "NODE_HOURS", 10, |l| {
        Cell::fixed(l.scopes().node_hours, 6)
    }),
    col("node_class", "NODE_CLASS", 10, |l| {
        Cell::text(l.scopes().node_class.as_deref().unwrap_or_default())
    }),
    col("factors", "FACTORS", 8, |l| Cell::text(l.factors)),
    // a heterogeneous job's component
    col("het_job_id", "HET_JOB_ID", 10, |l| {
        Cell::figure(l.job.het_job_id)
    }),
    col("het_job_offset", "HET_JOB_OFFSET", 14, |l| {
        Cell::figure(l.job.het_job_offset)
    }),
    // what the job's nodes kept with it
    col("kept", "KEPT", 12, |l| {
        l.job_text(|j| match j.kept.recorded {
            true => "recorded",
            false => "not recorded",
        })
    }),
    col("kept_j", "KEPT_J", 8, |l| {
        Cell::fixed(l.job_only(|j| j.kept.joules), 3)
    }),
    col("kept_parts", "KEPT_PARTS", 10, |l| {
        Cell::pairs(l.job_only(|j| j.kept.parts.as_ref()))
    }),
    col("kept_idle_held", "KEPT_IDLE_HELD", 14, |l| {
        Cell::pairs(l.job_only(|j| j.kept.idle_held.as_ref()))
    }),
    col(
        "kept_tampered_accounting_j",
        "KEPT_TAMPERED_ACCOUNTING_J",
        26,
        |l| Cell::figure(l.job_only(|j| j.kept.tampered.map(|t| t.accounting_j))),
    ),
    col(
        "kept_idle_held_scope2_location_g",
        "KEPT_IDLE_HELD_SCOPE2_LOCATION_G",
        32,
        |l| Cell::fixed(l.job_only(|j| j.kept.idle_held_scope2_location_g), 6),
    ),
    col(
        "kept_idle_held_scope2_market_g",
        "KEPT_IDLE_HELD_SCOPE2_MARKET_G",
        30,
        |l| Cell::fixed(l.job_only(|j| j.kept.idle_held_scope2_market_g), 6),
    ),
];

#[cfg(test)]
mod tests;
