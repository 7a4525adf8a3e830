//! What a report shows of a job's kept record (`senergy job`): the figures summed over the
//! nodes that kept them, with what [`tampered`] found, in words. Apart from the record, its
//! merge and its check, so that what a report makes of it reads on its own.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{NodeRecord, Tampered, job_record, tampered};
use crate::record::{EXTERN_STEP, JobRow};
use crate::scopes::Scopes;
use crate::tres::{self, ENERGY};

/// What a report shows of the job's record: "not recorded" (never 0) where no node kept
/// one.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Kept {
    pub recorded: bool,
    /// The nodes that kept their figures, of `nodes` the job had.
    pub nodes_recorded: usize,
    /// The nodes whose parts `parts` sums (fewer than `nodes_recorded` where some kept
    /// their energy alone).
    pub nodes_with_parts: usize,
    /// Over the nodes recorded, J.
    pub joules: Option<f64>,
    pub parts: Option<BTreeMap<String, f64>>,
    pub idle_held: Option<BTreeMap<String, f64>>,
    /// Where accounting's energy is no longer what the record says.
    pub tampered: Option<Tampered>,
    /// What the idle-held energy emitted under each Scope 2 factor, gCO2e
    /// ([`Kept::with_idle_emissions`]).
    pub idle_held_scope2_location_g: Option<f64>,
    pub idle_held_scope2_market_g: Option<f64>,
    /// Each node's figures as kept.
    pub nodes: BTreeMap<String, NodeRecord>,
}

impl Kept {
    /// Sets what the idle-held energy emitted under each Scope 2 factor: the idle-held
    /// share of the job's energy `energy_j` times the job's own figure for the scope (its
    /// intensity over its run, as applied to the whole). Scope 3's embodied emissions follow
    /// the node-hours a job held, used or not: they have no idle part of their own.
    pub fn with_idle_emissions(mut self, energy_j: Option<u64>, scopes: &Scopes) -> Self {
        let share = self.idle_held.as_ref().and_then(|idle| {
            let energy = energy_j.filter(|&e| e > 0)? as f64;
            Some(idle.values().sum::<f64>() / energy)
        });
        self.idle_held_scope2_location_g = share.zip(scopes.scope2_location_g).map(|(s, g)| s * g);
        self.idle_held_scope2_market_g = share.zip(scopes.scope2_market_g).map(|(s, g)| s * g);
        self
    }
}

/// The record of the job of `row` ([`job_record`]).
pub fn kept(row: &JobRow) -> Kept {
    let Some(record) = job_record(row) else {
        return Kept::default();
    };
    let accounting_j = tres::count(&row.tres_alloc, ENERGY).and_then(tres::joules);
    let with_extern = row.steps.iter().any(|s| s.step_id == EXTERN_STEP);
    Kept {
        recorded: true,
        nodes_recorded: record.nodes.len(),
        nodes_with_parts: record.nodes_with_parts(),
        joules: Some(record.joules()),
        parts: record.summed(|n| n.parts.as_ref()),
        idle_held: record.summed(|n| n.idle_held.as_ref()),
        tampered: tampered(
            accounting_j,
            &record,
            row.alloc_nodes,
            row.elapsed_s,
            with_extern,
        ),
        nodes: record.nodes,
        ..Kept::default()
    }
}

/// `label J, ...` of some figures.
fn listed(figures: &BTreeMap<String, f64>) -> String {
    let each: Vec<String> = figures
        .iter()
        .map(|(label, j)| format!("{label} {j:.1} J"))
        .collect();
    each.join(", ")
}

/// The record in words, for a job of `nodes` nodes: a line, and a warning where
/// accounting's figure was changed after the job.
pub fn text(kept: &Kept, nodes: u32) -> Vec<String> {
    let Some(joules) = kept.joules.filter(|_| kept.recorded) else {
        return vec!["kept with the job: not recorded".into()];
    };
    let mut line = format!(
        "kept with the job: {joules:.1} J on {} of {nodes} node(s)",
        kept.nodes_recorded
    );
    let of = match kept.nodes_with_parts < kept.nodes_recorded {
        true => format!(" (of {} nodes)", kept.nodes_with_parts),
        false => String::new(),
    };
    line += &match &kept.parts {
        Some(parts) => format!("; parts{of} {}", listed(parts)),
        None => "; parts not recorded".into(),
    };
    line += &match &kept.idle_held {
        Some(idle) => format!("; idle-held {}", listed(idle)),
        None => "; idle-held not recorded".into(),
    };
    let mut lines = vec![line];
    if let Some(t) = kept.tampered {
        lines.push(if t.lower_bound {
            format!(
                "WARNING: accounting's energy ({} J) is under what {} of the job's {nodes} \
                 nodes kept at its end ({:.1} J): accounting's figure was changed after the \
                 job; its energy is at least theirs",
                t.accounting_j, kept.nodes_recorded, t.recorded_j
            )
        } else {
            format!(
                "WARNING: accounting's energy ({} J) is not what the job's nodes kept at its \
                 end ({:.1} J): accounting's figure was changed after the job",
                t.accounting_j, t.recorded_j
            )
        });
    }
    lines
}
