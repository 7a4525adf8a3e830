//! Whether a job's energy data is complete (flux-power-monitor's `data_presence`).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Presence {
    /// Every step and every node of it reported energy.
    Complete,
    /// Some did, some did not: the figure is a lower bound.
    Partial,
    /// No energy at all (no energy plugin, or every reading unavailable).
    Missing,
}

impl Presence {
    /// The presence of a whole made of parts: complete only if all are.
    pub fn combine(parts: impl IntoIterator<Item = Presence>) -> Option<Presence> {
        parts.into_iter().reduce(|a, b| match (a, b) {
            (Presence::Complete, Presence::Complete) => Presence::Complete,
            (Presence::Missing, Presence::Missing) => Presence::Missing,
            _ => Presence::Partial,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Presence::Complete => "complete",
            Presence::Partial => "partial",
            Presence::Missing => "missing",
        }
    }
}
