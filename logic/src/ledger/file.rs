//! The ledger's file: JSON of these types, versioned ([`VERSION`]). Every number is
//! checked as it is read (finite, not negative): a corrupt file must never put garbage in
//! accounting; such a file, or one of another version, is refused whole.
//!
//! slurmd writes it from the ledger itself ([`Out`], borrowing), and every slurmstepd reads
//! it at each of its polls ([`parse`]), straight into these types: no tree of values.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use super::number::{finite, finite_values, optional_finite};

use super::parts::IdleHeld;
use super::{Account, Job, Ledger, Part, Step, StepId, VERSION};
use crate::source::HardwareCount;

/// Why a text is not a ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// Not whole JSON of the expected fields, or a number out of range.
    Format,
    /// A ledger of another version (the version found).
    Version(String),
}

/// The file as read.
#[derive(Deserialize)]
pub(super) struct In {
    version: u64,
    pub epoch: u64,
    #[serde(deserialize_with = "finite")]
    pub sampled_at: f64,
    /// The static power learned ([`super::floor`]); a ledger of before has none (its
    /// `learned_idle_watts`, the lowest power of any interval, is not taken: it was the
    /// error of the worst interval, not the node's).
    #[serde(default, deserialize_with = "optional_finite")]
    pub floor_watts: Option<f64>,
    /// Written since the field came; a ledger of before has none.
    #[serde(default)]
    pub source: String,
    pub node: Account,
    pub parts: Vec<Part>,
    /// The counts and CPU times are written since slurmd's absence is bridged: a ledger of
    /// before has none, and its absence is estimated.
    #[serde(default)]
    pub counts: Vec<HardwareCount>,
    pub jobs: Vec<JobIn>,
    /// How slurmd splits the node's energy ([`super::Split::name`]); a ledger of before
    /// has none, and an unknown name is none.
    #[serde(default)]
    pub split: String,
}

#[derive(Deserialize)]
pub(super) struct JobIn {
    pub job: u32,
    #[serde(deserialize_with = "finite")]
    pub last_seen: f64,
    #[serde(default)]
    pub usage_ns: Option<u64>,
    pub account: Account,
    pub steps: Vec<StepIn>,
    /// Its parts and idle-held energy ([`super::parts`]); a ledger of before has none.
    #[serde(default, deserialize_with = "finite_values")]
    pub parts: BTreeMap<String, f64>,
    #[serde(default)]
    pub idle_held: IdleHeld,
}

#[derive(Deserialize)]
pub(super) struct StepIn {
    pub step: u32,
    /// A ledger written before steps were dated has none.
    #[serde(default, deserialize_with = "optional_finite")]
    pub last_seen: Option<f64>,
    #[serde(default)]
    pub usage_ns: Option<u64>,
    pub account: Account,
    #[serde(default, deserialize_with = "finite_values")]
    pub parts: BTreeMap<String, f64>,
    #[serde(default)]
    pub idle_held: IdleHeld,
}

/// Only the version, to tell a ledger of another version from a broken one.
#[derive(Deserialize)]
struct Versioned {
    version: u64,
}

/// The file in `text`, or why it is refused.
pub(super) fn parse(text: &[u8]) -> Result<In, Refused> {
    match serde_json::from_slice::<In>(text) {
        Ok(file) if file.version != VERSION => Err(Refused::Version(file.version.to_string())),
        Ok(file) if !file.counts.iter().all(sound) => Err(Refused::Format),
        Ok(file) => Ok(file),
        Err(_) => match serde_json::from_slice::<Versioned>(text) {
            Ok(v) if v.version != VERSION => Err(Refused::Version(v.version.to_string())),
            _ => Err(Refused::Format),
        },
    }
}

/// A count that can be bridged with: a finite maximum power, a wrap above zero.
fn sound(count: &HardwareCount) -> bool {
    count.max_watts.is_finite() && count.max_watts >= 0.0 && count.wraps_at_uj != Some(0)
}

/// The file as written, borrowed from the ledger.
#[derive(Serialize)]
pub(super) struct Out<'a> {
    version: u64,
    epoch: u64,
    sampled_at: f64,
    floor_watts: Option<f64>,
    /// The same, for the plugins of before, which need the field to read the ledger (a
    /// slurmd taken back to an earlier version).
    learned_idle_watts: Option<f64>,
    source: &'a str,
    node: &'a Account,
    parts: &'a [Part],
    counts: &'a [HardwareCount],
    #[serde(serialize_with = "jobs")]
    jobs: &'a BTreeMap<u32, Job>,
    split: &'a str,
}

impl<'a> From<&'a Ledger> for Out<'a> {
    fn from(ledger: &'a Ledger) -> Self {
        Self {
            version: VERSION,
            epoch: ledger.epoch,
            sampled_at: ledger.sampled_at,
            floor_watts: ledger.floor.watts(),
            learned_idle_watts: ledger.floor.watts(),
            source: &ledger.source,
            node: &ledger.node,
            parts: &ledger.parts,
            counts: &ledger.counts,
            jobs: &ledger.jobs,
            split: &ledger.split,
        }
    }
}

#[derive(Serialize)]
struct JobOut<'a> {
    job: u32,
    last_seen: f64,
    usage_ns: Option<u64>,
    account: &'a Account,
    #[serde(serialize_with = "steps")]
    steps: &'a BTreeMap<StepId, Step>,
    /// Written only where known: a step's entry stays small ([`super::ENDED_STEPS_KEPT`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    parts: &'a BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "IdleHeld::is_unknown")]
    idle_held: &'a IdleHeld,
}

#[derive(Serialize)]
struct StepOut<'a> {
    step: u32,
    last_seen: f64,
    usage_ns: Option<u64>,
    account: &'a Account,
    /// Written only where known: a step's entry stays small ([`super::ENDED_STEPS_KEPT`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    parts: &'a BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "IdleHeld::is_unknown")]
    idle_held: &'a IdleHeld,
}

fn jobs<S: Serializer>(jobs: &&BTreeMap<u32, Job>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(jobs.iter().map(|(&job, j)| JobOut {
        job,
        last_seen: j.last_seen,
        usage_ns: j.usage_ns,
        account: &j.account,
        steps: &j.steps,
        parts: &j.breakdown.parts,
        idle_held: &j.breakdown.idle_held,
    }))
}

fn steps<S: Serializer>(steps: &&BTreeMap<StepId, Step>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(steps.iter().map(|(id, step)| StepOut {
        step: id.0,
        last_seen: step.last_seen,
        usage_ns: step.usage_ns,
        account: &step.account,
        parts: &step.breakdown.parts,
        idle_held: &step.breakdown.idle_held,
    }))
}
