//! A job's figures kept with it in Slurm's accounting: each node's record of the job,
//! merged into the job's SystemComment by `senergy record` (the node's Epilog), read back
//! by `senergy job` for a job of last year. Only Slurm's operators and administrators
//! (root, SlurmUser) may write SystemComment on every release we support, and slurmdbd
//! gives it to whoever may see the job (its PrivateData): the job's owner can read it and
//! cannot change it (docs/senergy.md, "Kept with the job").
//!
//! Not AdminComment, where releases before this one kept it: Princeton's jobstats, which
//! many sites run, sets the whole AdminComment to its own `JS1:` record from slurmctld's
//! epilog, before or after the nodes' Epilogs, and its reader decodes everything after
//! `JS1:` as its payload. Whichever wrote last destroyed or corrupted the other's record;
//! in SystemComment neither touches the other's, and a site's own AdminComment text stays
//! as it is. A record an earlier release kept in AdminComment is still read.
//!
//! Our part of the comment is one segment, `senergy={json}`, anywhere in it: whatever else
//! is there (slurmctld's burst-buffer messages) is kept as it is. Pure: no Slurm, no files.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use slurm_energy_logic::{Breakdown, hostlist};

use crate::record::JobRow;
// the tests (`tests.rs`, through `use super::*`) give a job its extern step, as `shown`
// looks for it
#[cfg(test)]
use crate::record::EXTERN_STEP;

mod shown;

pub use shown::{Kept, kept, text};

/// What begins our segment of the comment.
pub const SEGMENT: &str = "senergy=";
/// The record's format; a reader takes no other.
pub const VERSION: u64 = 1;
/// The most the whole comment may hold: slurmdbd keeps SystemComment in a MySQL `text`
/// column (65 535 bytes), and a longer one would be cut, our JSON with it.
pub const MAX_COMMENT: usize = 60_000;

/// One node's figures of the job, from its ledgers (every energy plugin's, summed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The job's energy on the node, J.
    pub joules: f64,
    /// The plugins that measured the node (`rust_rapl + rust_gpu`): not their sources'
    /// descriptions, which name a BMC's address and user.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// J by part label (package, dram, gpu0, rest...), where the ledger splits them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<BTreeMap<String, f64>>,
    /// J of what the job held and did not use (gpu, cpu), where the ledger says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_held: Option<BTreeMap<String, f64>>,
}

/// Adds one ledger's breakdown of the job to the node's record: stacked plugins measure
/// different parts (RAPL's domains, each GPU), so their parts and idle-held figures add up
/// as their energies do. A figure no ledger knows stays absent, never 0.
pub fn add_breakdown(entry: &mut NodeRecord, breakdown: &Breakdown) {
    if !breakdown.parts.is_empty() {
        let parts = entry.parts.get_or_insert_with(BTreeMap::new);
        for (label, joules) in &breakdown.parts {
            *parts.entry(label.clone()).or_insert(0.0) += joules;
        }
    }
    let idle = breakdown.idle_held;
    for (kind, figure) in [("gpu", idle.gpu), ("cpu", idle.cpu)] {
        if let Some(joules) = figure {
            *entry
                .idle_held
                .get_or_insert_with(BTreeMap::new)
                .entry(kind.to_string())
                .or_insert(0.0) += joules;
        }
    }
}

/// The whole record: every node's figures, by node name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub v: u64,
    pub nodes: BTreeMap<String, NodeRecord>,
    /// The parts and idle-held figures of the nodes whose entries hold their energy alone
    /// (a job of hundreds of nodes): summed exactly here, where every node's would not fit.
    /// A reader of an earlier release ignores it, and sees those nodes' energy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folded: Option<Folded>,
}

/// What [`Record::folded`] holds: the sums of some nodes' parts and idle-held figures,
/// and which nodes they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Folded {
    /// The nodes summed here, a Slurm host list (`nid[001000-002023]`).
    pub nodes: String,
    /// Their plugins, as [`NodeRecord::source`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<BTreeMap<String, f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_held: Option<BTreeMap<String, f64>>,
}

impl Folded {
    /// The names of the nodes summed here.
    fn names(&self) -> Vec<String> {
        hostlist::expand(&self.nodes).unwrap_or_default()
    }

    /// Adds node `node`'s parts, idle-held figures and source to the sums.
    fn add(&mut self, node: &str, entry: &NodeRecord) {
        let mut names = self.names();
        names.push(node.to_string());
        self.nodes = hostlist::compress(&names);
        for (sum, figures) in [
            (&mut self.parts, &entry.parts),
            (&mut self.idle_held, &entry.idle_held),
        ] {
            if let Some(figures) = figures {
                let sum = sum.get_or_insert_with(BTreeMap::new);
                for (label, j) in figures {
                    let total = sum.entry(label.clone()).or_insert(0.0);
                    *total = rounded(*total + j);
                }
            }
        }
        if !entry.source.is_empty() && !self.source.split(" | ").any(|s| s == entry.source) {
            self.source = match self.source.as_str() {
                "" => entry.source.clone(),
                had => format!("{had} | {}", entry.source),
            };
        }
    }
}

impl Record {
    /// The job's energy over the nodes recorded, J.
    pub fn joules(&self) -> f64 {
        self.nodes.values().map(|n| n.joules).sum()
    }

    /// `pick`'s figures summed over the nodes (the entries' and the folded sums), by
    /// label; `None` where no node has them.
    pub fn summed(
        &self,
        pick: impl Fn(&NodeRecord) -> Option<&BTreeMap<String, f64>>,
    ) -> Option<BTreeMap<String, f64>> {
        let folded = self.folded.as_ref().map(|f| NodeRecord {
            parts: f.parts.clone(),
            idle_held: f.idle_held.clone(),
            ..NodeRecord::default()
        });
        let mut sum: Option<BTreeMap<String, f64>> = None;
        for figures in self.nodes.values().chain(&folded).filter_map(&pick) {
            let sum = sum.get_or_insert_with(BTreeMap::new);
            for (label, j) in figures {
                *sum.entry(label.clone()).or_default() += j;
            }
        }
        sum
    }

    /// How many nodes' parts the job's parts sum: those of entries with parts, and the
    /// folded ones. A node whose parts went into sums another write then undid has its
    /// energy kept and no parts ([`Seen`]).
    pub fn nodes_with_parts(&self) -> usize {
        let folded = self.folded.as_ref().map(Folded::names).unwrap_or_default();
        self.nodes
            .iter()
            .filter(|(n, e)| e.parts.is_some() || folded.contains(n))
            .count()
    }

    /// Whether node `node`'s parts and idle-held figures are in the folded sums.
    fn is_folded(&self, node: &str) -> bool {
        self.folded
            .as_ref()
            .is_some_and(|f| f.names().iter().any(|n| n == node))
    }

    /// Folds node `node`'s entry: its parts and idle-held figures into the sums, its
    /// energy kept in its entry.
    fn fold(&mut self, node: &str) {
        let Some(entry) = self.nodes.get_mut(node) else {
            return;
        };
        let full = std::mem::replace(entry, bare(entry));
        if has_breakdown(&full) {
            self.folded
                .get_or_insert_with(Folded::default)
                .add(node, &full);
        }
    }
}

/// An entry of the energy alone.
fn bare(entry: &NodeRecord) -> NodeRecord {
    NodeRecord {
        joules: entry.joules,
        ..NodeRecord::default()
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MergeError {
    #[error(
        "the job's SystemComment would grow to {0} bytes, over the {MAX_COMMENT} slurmdbd keeps \
         whole"
    )]
    TooLarge(usize),
    /// slurmdbd before 23.02 puts the text between single quotes in its SQL unescaped: a
    /// quote or backslash in it would break the statement (or change it).
    #[error(
        "the job's SystemComment holds a quote or backslash, which slurmdbd would not store \
         as written: left as it is"
    )]
    Unquotable,
}

/// Our segment in `comment`: where it begins and ends, and the record it holds. The
/// first `senergy=` followed by a record of our version; text that only looks like one
/// is the site's.
fn find(comment: &str) -> Option<(usize, usize, Record)> {
    let mut from = 0;
    while let Some(at) = comment[from..].find(SEGMENT).map(|i| from + i) {
        let json = at + SEGMENT.len();
        let mut stream = serde_json::Deserializer::from_str(&comment[json..]).into_iter::<Record>();
        if let Some(Ok(record)) = stream.next()
            && record.v == VERSION
        {
            return Some((at, json + stream.byte_offset(), record));
        }
        from = json;
    }
    None
}

/// The record kept in `comment`, if any.
pub fn read(comment: &str) -> Option<Record> {
    find(comment).map(|(_, _, record)| record)
}

/// A label or text of ours as the comment may hold it: no quote, backslash or control
/// character (slurmdbd's SQL, and JSON that needs no escapes).
fn plain(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\'' | '"' | '\\' => '_',
            c if c.is_control() => '_',
            c => c,
        })
        .collect()
}

/// Joules to the millijoule: the ledger's figures carry no more, and the comment is
/// bounded.
fn rounded(j: f64) -> f64 {
    (j * 1000.0).round() / 1000.0
}

fn plain_figures(figures: &Option<BTreeMap<String, f64>>) -> Option<BTreeMap<String, f64>> {
    figures.as_ref().map(|f| {
        f.iter()
            .map(|(label, j)| (plain(label), rounded(*j)))
            .collect()
    })
}

/// `comment` with node `node`'s figures in our segment (added, or replacing the node's
/// earlier ones), the rest of the comment as it was, within [`MAX_COMMENT`]: where the
/// whole would not fit, the node's parts and idle-held figures are folded into the
/// record's sums ([`Record::folded`]), then the other nodes', in their names' order: every
/// node's energy is kept, and the job's parts and idle-held figures stay exact. Where even
/// that would not fit (thousands of labels), the node's energy alone is added; where even
/// that would not, nothing is changed.
/// The entries of `seen` that the comment lost are put back first: entries another
/// Epilog's write undid, as this one read them earlier.
pub fn merge(
    comment: &str,
    node: &str,
    entry: &NodeRecord,
    seen: &Seen,
) -> Result<String, MergeError> {
    if comment.contains(['\'', '\\']) {
        return Err(MergeError::Unquotable);
    }
    let node = plain(node);
    let full = NodeRecord {
        joules: rounded(entry.joules),
        source: plain(&entry.source),
        parts: plain_figures(&entry.parts),
        idle_held: plain_figures(&entry.idle_held),
    };
    let (place, before) = match find(comment) {
        Some((start, end, record)) => (Some((start, end)), record),
        None => (
            None,
            Record {
                v: VERSION,
                ..Record::default()
            },
        ),
    };
    let fits = |record: &Record| {
        let merged = with_record(comment, place, record);
        match merged.len() <= MAX_COMMENT {
            true => Ok(merged),
            false => Err(merged.len()),
        }
    };
    let mut before = before;
    for (lost, kept) in seen.lost_from(&before) {
        before.nodes.insert(lost, kept);
    }
    // a folded node's parts are in the sums already: it keeps its energy alone
    let folded = before.is_folded(&node);
    let mut record = before.clone();
    record.nodes.insert(
        node.clone(),
        if folded { bare(&full) } else { full.clone() },
    );
    if let Ok(merged) = fits(&record) {
        return Ok(merged);
    }
    let others: Vec<String> = record
        .nodes
        .iter()
        .filter(|(n, e)| **n != node && has_breakdown(e))
        .map(|(n, _)| n.clone())
        .collect();
    for next in std::iter::once(node.clone()).chain(others) {
        record.fold(&next);
        if let Ok(merged) = fits(&record) {
            return Ok(merged);
        }
    }
    let mut record = before;
    record.nodes.insert(node, bare(&full));
    fits(&record).map_err(MergeError::TooLarge)
}

/// Whether an entry holds more than the node's energy.
fn has_breakdown(entry: &NodeRecord) -> bool {
    entry.parts.is_some() || entry.idle_held.is_some() || !entry.source.is_empty()
}

/// `comment` with `record` as our segment, in place of the one at `place` (its start and
/// end), else after the site's text.
fn with_record(comment: &str, place: Option<(usize, usize)>, record: &Record) -> String {
    let segment = format!(
        "{SEGMENT}{}",
        serde_json::to_string(record).unwrap_or_default()
    );
    match (place, comment.trim_end()) {
        (Some((start, end)), _) => format!("{}{segment}{}", &comment[..start], &comment[end..]),
        (None, "") => segment,
        (None, site) => format!("{site} {segment}"),
    }
}

/// Whether `comment` holds node `node`'s figures as `merge` wrote them: the check after a
/// write, which another node's write made at the same time may have undone.
pub fn holds(comment: &str, node: &str, entry: &NodeRecord) -> bool {
    read(comment)
        .and_then(|r| r.nodes.get(&plain(node)).cloned())
        .is_some_and(|kept| kept.joules == rounded(entry.joules))
}

/// The entries an Epilog read in the job's record, each node's fullest: what it puts back
/// when a later read lacks them (another node's write, made on what it read before theirs
/// landed, undid them). A thousand nodes write one row: each write then carries what its
/// writer saw, and an entry is lost only when every node that read it lost it too.
#[derive(Debug, Default)]
pub struct Seen(BTreeMap<String, NodeRecord>);

impl Seen {
    /// Keeps the entries of `record`; an entry seen with its parts keeps them.
    fn absorb(&mut self, record: &Record) {
        for (node, entry) in &record.nodes {
            match self.0.get(node) {
                Some(had) if has_breakdown(had) && !has_breakdown(entry) => {}
                _ => {
                    self.0.insert(node.clone(), entry.clone());
                }
            }
        }
    }

    /// The entries seen that `record` holds neither as entries nor in its sums. One seen
    /// bare (its parts folded into sums since lost) comes back bare: its energy is kept,
    /// its parts not counted twice.
    fn lost_from(&self, record: &Record) -> Vec<(String, NodeRecord)> {
        let folded = record
            .folded
            .as_ref()
            .map(Folded::names)
            .unwrap_or_default();
        self.0
            .iter()
            .filter(|(n, _)| !record.nodes.contains_key(*n) && !folded.contains(n))
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect()
    }
}

/// What the Epilog writes for node `node` of the job of `row`: the job's SystemComment
/// with the node's figures merged in (and the entries `seen` before that it lost), or
/// `None` where it holds them already (a write of ours that landed). Only the
/// SystemComment: the AdminComment is the site's and jobstats', and is never written.
pub fn update(
    row: &JobRow,
    node: &str,
    entry: &NodeRecord,
    seen: &mut Seen,
) -> Result<Option<String>, MergeError> {
    let record = read(&row.system_comment);
    if let Some(record) = &record {
        seen.absorb(record);
    }
    let lost = record.as_ref().map_or(0, |r| seen.lost_from(r).len());
    if holds(&row.system_comment, node, entry) && lost == 0 {
        return Ok(None);
    }
    merge(&row.system_comment, node, entry, seen).map(Some)
}

/// The job's record: the SystemComment's, and the nodes an earlier release kept in the
/// AdminComment (a job that ended while its nodes were upgraded has some in each); a node
/// in both has its SystemComment figures. `None` where neither holds one.
pub fn job_record(row: &JobRow) -> Option<Record> {
    match (read(&row.system_comment), read(&row.admin_comment)) {
        (Some(mut now), Some(before)) => {
            for (node, entry) in before.nodes {
                now.nodes.entry(node).or_insert(entry);
            }
            Some(now)
        }
        (now, before) => now.or(before),
    }
}

/// What one ledger says of a job at the node's Epilog.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ledgered {
    /// Sampled since the job's steps were gone: its figure is final.
    Final(f64),
    /// Not sampled since the Epilog began, or the job's steps were still seen at its last
    /// sample: wait for the next one.
    Wait,
    /// Sampled since the Epilog began, and holds no such job: it never ran here as this
    /// ledger knows (or left too long ago).
    Absent,
}

/// What a ledger last sampled at `sampled_at`, holding the job as last seen at
/// `last_seen` with `joules` (`None`: it holds no such job), says at an Epilog that began
/// at `began` (Unix seconds, the node's clock as the ledger's).
pub fn ledgered(sampled_at: f64, job: Option<(f64, f64)>, began: f64) -> Ledgered {
    if sampled_at < began {
        return Ledgered::Wait;
    }
    match job {
        None => Ledgered::Absent,
        Some((last_seen, joules)) if last_seen < sampled_at => Ledgered::Final(joules),
        Some(_) => Ledgered::Wait,
    }
}

/// Accounting's energy for the job next to its record, where they disagree.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tampered {
    pub accounting_j: u64,
    pub recorded_j: f64,
    /// The record holds some of the job's nodes only: `recorded_j` is what those alone
    /// used, a lower bound of the job's energy (which the missing nodes can only raise).
    pub lower_bound: bool,
}

/// The most accounting's figure and the record's may differ by before it is said to have
/// been changed: each node's figure reaches Slurm in whole joules, so a joule or two per
/// node; 0.5% of the whole for the rounding in the plugins' power window; and what the
/// nodes draw in one sample (slurmd samples every second at most), at the job's mean power
/// over its `elapsed_s` (a second at least): the job's ledger figure and its extern step's
/// may begin a sample apart. A job that lived a fraction of a second (its step failed at
/// once) thus differs by several joules at a few hundred watts, while a rewritten figure
/// (1 J for a job of hours) is still far outside.
fn tolerance(nodes: usize, recorded_j: f64, elapsed_s: u64) -> f64 {
    let sample_s = 1.0;
    let mean_watts = recorded_j / elapsed_s.max(1) as f64;
    2.0 * nodes as f64 + 0.005 * recorded_j + mean_watts * sample_s
}

/// Accounting's job energy `accounting_j` against `record`, for a job of `alloc_nodes`
/// nodes that ran `elapsed_s`, whose accounting figure is its extern step's (`with_extern`:
/// each node's ledger figure, as the record holds): `Some` where they differ by more than
/// [`tolerance`], the sign that accounting's figure was changed after the job (an owner may
/// rewrite their job's energy TRES from 25.11). A record of every node bounds the figure
/// both ways; a record of some nodes (another node's Epilog failed, or its write was lost)
/// bounds it from below only: accounting's figure under what the recorded nodes alone used
/// was lowered. A record of more nodes than the job had is not compared.
pub fn tampered(
    accounting_j: Option<u64>,
    record: &Record,
    alloc_nodes: u32,
    elapsed_s: u64,
    with_extern: bool,
) -> Option<Tampered> {
    let accounting_j = accounting_j?;
    let nodes = record.nodes.len();
    if !with_extern || nodes == 0 || nodes > alloc_nodes as usize {
        return None;
    }
    let lower_bound = nodes < alloc_nodes as usize;
    let recorded_j = record.joules();
    let off = accounting_j as f64 - recorded_j;
    let bound = tolerance(nodes, recorded_j, elapsed_s);
    let changed = if lower_bound {
        off < -bound
    } else {
        off.abs() > bound
    };
    changed.then_some(Tampered {
        accounting_j,
        recorded_j,
        lower_bound,
    })
}

#[cfg(test)]
mod tests;
