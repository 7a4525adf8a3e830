//! A job's and a step's energy by part of the node, and the energy it was charged for what
//! it held and did not use (issue 44). Both ride on the one split of [`super::charge`]:
//! whatever an account is charged of an interval, its parts are charged the same, so a
//! job's parts add up to its joules by construction.
//!
//! The parts are what the source measures beside the node: pm_counters' `cpu`, `memory`
//! and `accelN` (whose node meter is the whole node: what they do not cover is `rest`),
//! RAPL's packages and DRAM (its hardware counts, which make its node figure: no rest), and
//! under [`Split::Devices`](super::Split::Devices) each GPU (`gpu0`, ...), whose meters are
//! the node's figure. A source that measures no parts (IPMI, Redfish) gives none: the
//! job's figure is then not split, rather than all of it called `rest`.
//!
//! Under [`Split::Shared`](super::Split::Shared) a job's share of an interval takes each
//! part in proportion: the model splits the node's energy by what jobs hold and use, and
//! the cgroups tell each job's CPU time, not which part it drew on. A job whose memory
//! traffic kept DRAM busy while another computed is given the same DRAM fraction as the
//! other: a job's own package against DRAM use is not known, only the node's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::number::optional_finite;
use super::{Ledger, Observation, Part};
use crate::source::HardwareCount;

/// The part of a whole-node meter that its parts do not cover.
pub(super) const REST: &str = "rest";

/// What an account (a job's, a step's) holds beside its joules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Breakdown {
    /// The joules of each part (`REST` included), adding up to the account's; empty
    /// where the source measures no parts.
    pub parts: BTreeMap<String, f64>,
    /// The static power of the devices it held idle.
    pub idle_held: IdleHeld,
}

/// The joules charged for what a job held and did not use; `None` where the split cannot
/// tell (never 0 for unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IdleHeld {
    /// `Split::Devices`: its part of each whole GPU it held in
    /// intervals where none of its processes used it (the vendor's per-process use). A MIG
    /// instance is not counted: NVML reports no per-process use on a MIG GPU.
    #[serde(
        default,
        deserialize_with = "optional_finite",
        skip_serializing_if = "Option::is_none"
    )]
    pub gpu: Option<f64>,
    /// `Split::Shared`: the static energy it was charged for what it
    /// held (`crate::attribution::model::static_shares`) times the fraction of its CPUs'
    /// time it did not use. Node mode gives every job the whole node, static power and all,
    /// so an idle share of it would be counted once per job: none; the devices' meters do
    /// not measure CPUs: none.
    #[serde(
        default,
        deserialize_with = "optional_finite",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu: Option<f64>,
}

impl IdleHeld {
    /// Neither figure is known (not written).
    pub(super) fn is_unknown(&self) -> bool {
        self.gpu.is_none() && self.cpu.is_none()
    }

    /// Adds `joules` to a figure known from now on.
    pub(super) fn add(figure: &mut Option<f64>, joules: f64) {
        *figure = Some(figure.unwrap_or(0.0) + joules.max(0.0));
    }
}

/// The node's energy of one interval by part, adding up to the interval's; `None` where the
/// interval's parts are unknown (the first after slurmd started again, a part unread).
#[derive(Debug, Clone, Default)]
pub(super) struct Composition(Option<Vec<(String, f64)>>);

impl Composition {
    pub(super) fn unknown() -> Self {
        Self(None)
    }

    /// Of these parts' joules; no parts: the source measures none.
    pub(super) fn of(parts: Vec<(String, f64)>) -> Self {
        Self(Some(parts))
    }
}

impl Breakdown {
    /// Charges `joules` of an interval of `composition`: each part its fraction of them;
    /// where the interval's parts are unknown, in the proportions of the account's parts so
    /// far (the estimate of the time slurmd was away is at its last power, too), [`REST`]
    /// when it has none yet. Nothing where the source measures no parts.
    pub(super) fn charge(&mut self, joules: f64, composition: &Composition) {
        if joules <= 0.0 || !joules.is_finite() {
            return;
        }
        match &composition.0 {
            Some(parts) if parts.is_empty() => {}
            Some(parts) if parts.iter().map(|(_, j)| j).sum::<f64>() > 0.0 => {
                let sum: f64 = parts.iter().map(|(_, j)| j).sum();
                for (label, part) in parts {
                    *self.parts.entry(label.clone()).or_default() += joules * part / sum;
                }
            }
            _ => {
                let sum: f64 = self.parts.values().sum();
                if sum > 0.0 {
                    for part in self.parts.values_mut() {
                        *part += joules * *part / sum;
                    }
                } else {
                    *self.parts.entry(REST.to_string()).or_default() += joules;
                }
            }
        }
    }

    /// Adds `joules` of the part `label` (a device's).
    pub(super) fn add(&mut self, label: String, joules: f64) {
        *self.parts.entry(label).or_default() += joules.max(0.0);
    }
}

/// The name of the device at `position` as a part.
pub(super) fn device_part(position: u32) -> String {
    format!("gpu{position}")
}

/// Each part's value now (its energy in µJ, as read), to take the next interval's from.
#[derive(Debug, Clone, Default)]
pub(super) struct PartValues {
    /// The source's parts beside a whole-node meter, in µJ since the meter opened.
    parts: Vec<(String, f64)>,
    /// The hardware counts that make the node's figure (RAPL's domains).
    counts: Vec<HardwareCount>,
}

impl PartValues {
    pub(super) fn of(obs: &Observation) -> Self {
        Self {
            parts: obs
                .parts
                .iter()
                .map(|Part { label, joules, .. }| (label.clone(), *joules))
                .collect(),
            counts: obs.counts.clone(),
        }
    }
}

impl Ledger {
    /// The node's `joules` of the interval that ends with `obs`, by part: its source's parts
    /// beside a whole-node meter and the rest, or the hardware counts that make the node's
    /// figure (several: RAPL's domains; one is the node itself, no part).
    pub(super) fn composition(&self, obs: &Observation, joules: f64) -> Composition {
        let empty = PartValues::default();
        let was = self.part_values.as_ref().unwrap_or(&empty);
        if !obs.parts.is_empty() || !was.parts.is_empty() {
            let mut rises = Vec::new();
            for p in &obs.parts {
                match was.parts.iter().find(|(l, _)| *l == p.label) {
                    Some((_, at)) => rises.push((p.label.clone(), (p.joules - at).max(0.0))),
                    None => return Composition::unknown(),
                }
            }
            if rises.len() != was.parts.len() {
                return Composition::unknown();
            }
            // the parts' reads and the node's are not at one instant: parts that rose more
            // than the node in an interval are taken at the node's energy, no rest
            let sum: f64 = rises.iter().map(|(_, j)| j).sum();
            if sum > joules && sum > 0.0 {
                rises.iter_mut().for_each(|(_, j)| *j *= joules / sum);
            } else {
                rises.push((REST.to_string(), joules - sum));
            }
            return Composition::of(rises);
        }
        if obs.counts.len() < 2 && was.counts.len() < 2 {
            // no parts, or one count: the node itself
            return Composition::of(Vec::new());
        }
        let mut rises = Vec::new();
        for c in &obs.counts {
            let Some(at) = was.counts.iter().find(|b| b.name == c.name) else {
                return Composition::unknown();
            };
            let rise = match c.wraps_at_uj {
                Some(wrap) if c.value_uj < at.value_uj => {
                    wrap.saturating_sub(at.value_uj) + c.value_uj
                }
                _ => c.value_uj.saturating_sub(at.value_uj),
            };
            rises.push((c.name.clone(), rise as f64 / 1e6));
        }
        if rises.len() != was.counts.len() {
            return Composition::unknown();
        }
        Composition::of(rises)
    }
}
