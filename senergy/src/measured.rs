//! What a job's figure measured: the source (what the node's meter covers) and how the
//! job's part of it was obtained, derived from what senergy can know: the energy plugins
//! slurm.conf names (AcctGatherEnergyType, one or stacked), acct_gather.conf's
//! EnergyAttribution, and whether another job that accounting shows overlapped the job on
//! its nodes. It is today's configuration, not necessarily the one the job ran under.

use std::collections::BTreeSet;

use slurm_energy_logic::{PluginKind, hostlist};

use crate::record::JobRow;

/// The site's energy setup, from slurm.conf and acct_gather.conf.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Setup {
    /// AcctGatherEnergyType, split (`acct_gather_energy/rust_rapl`, ...).
    pub plugins: Vec<String>,
    /// `EnergyAttribution=shared`; `None` where acct_gather.conf cannot be read (it is
    /// often root's alone: it may hold BMC passwords).
    pub shared: Option<bool>,
}

impl Setup {
    /// `acct_gather`: acct_gather.conf's text, `None` if it cannot be read.
    pub fn new(energy_types: &str, acct_gather: Option<&str>) -> Setup {
        Setup {
            plugins: energy_types
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect(),
            shared: acct_gather.map(|text| {
                slurm_energy_logic::file_value(text, "EnergyAttribution")
                    .is_some_and(|v| v.eq_ignore_ascii_case("shared"))
            }),
        }
    }

    fn short(&self) -> impl Iterator<Item = &str> {
        self.plugins
            .iter()
            .map(|p| p.rsplit('/').next().unwrap_or(p))
    }

    fn has_gpu(&self) -> bool {
        self.short()
            .any(|p| PluginKind::named(p) == Some(PluginKind::Gpu))
    }

    /// A source of the node's CPU side or the whole node (not only its GPUs).
    fn has_node_meter(&self) -> bool {
        self.short()
            .any(|p| PluginKind::named(p) != Some(PluginKind::Gpu) && p != "none")
    }

    /// What the meter covers (each plugin's words, as the family declares them: `rapl: CPU
    /// packages+DRAM`), stacked with ` + `.
    pub fn source(&self) -> String {
        let parts: Vec<&str> = self
            .short()
            .map(|p| PluginKind::named(p).map_or(p, |kind| kind.measures()))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" + ")
        }
    }

    /// How the job's part was obtained, given whether it had its nodes alone.
    pub fn method(&self, alone: &Alone) -> String {
        let mut parts = Vec::new();
        if self.has_node_meter() {
            parts.push(match (self.shared, alone) {
                (_, Alone::Yes) => "the node meter's own: the job had its nodes alone".to_string(),
                (Some(false), Alone::No(others)) => format!(
                    "the node meter's own, whole node (EnergyAttribution=node): includes jobs \
                     {} that shared its nodes",
                    ids(others)
                ),
                (Some(false), Alone::Unknown) => {
                    "the node meter's own, whole node (EnergyAttribution=node)".into()
                }
                (None, _) => "the node meter's own or a model's share: EnergyAttribution is \
                              unknown (acct_gather.conf is not readable by you)"
                    .into(),
                (Some(true), _) => "a model's share of the node (EnergyAttribution=shared: static \
                              power by what it held, the rest by CPU time; \
                              docs/shared-nodes.md)"
                    .into(),
            });
        }
        if self.has_gpu() {
            parts.push(
                "its GPUs: the boards it held, a shared GPU split by shares, use and MIG size \
                 (docs/shared-nodes.md)"
                    .into(),
            );
        }
        if parts.is_empty() {
            "not measured".into()
        } else {
            parts.join("; ")
        }
    }
}

fn ids(jobs: &[u32]) -> String {
    const SHOWN: usize = 5;
    let mut text: Vec<String> = jobs.iter().take(SHOWN).map(u32::to_string).collect();
    if jobs.len() > SHOWN {
        text.push(format!("and {} more", jobs.len() - SHOWN));
    }
    text.join(", ")
}

/// Whether a job had its nodes alone, as accounting shows the caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Alone {
    Yes,
    /// These jobs ran on one of its nodes while it ran.
    No(Vec<u32>),
    /// Not started, or its node list cannot be read.
    Unknown,
}

/// Whether `job` had its nodes alone among `others` (jobs of the same period): another
/// job overlapped it when their runs overlap in time (a running job's end is `now`) and
/// their node lists share a node.
pub fn alone(job: &JobRow, others: &[JobRow], now: i64) -> Alone {
    let run = |j: &JobRow| (j.start > 0).then_some((j.start, if j.end > 0 { j.end } else { now }));
    let nodes = |j: &JobRow| -> Option<BTreeSet<String>> {
        Some(hostlist::expand(&j.nodes).ok()?.into_iter().collect())
    };
    let (Some((start, end)), Some(mine)) = (run(job), nodes(job)) else {
        return Alone::Unknown;
    };
    if mine.is_empty() {
        return Alone::Unknown;
    }
    let mut overlapping: Vec<u32> = others
        .iter()
        .filter(|o| o.job_id != job.job_id)
        .filter(|o| run(o).is_some_and(|(s, e)| s < end && start < e))
        .filter(|o| nodes(o).is_some_and(|n| !n.is_disjoint(&mine)))
        .map(|o| o.job_id)
        .collect();
    overlapping.sort_unstable();
    overlapping.dedup();
    if overlapping.is_empty() {
        Alone::Yes
    } else {
        Alone::No(overlapping)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u32, nodes: &str, start: i64, end: i64) -> JobRow {
        JobRow {
            job_id: id,
            nodes: nodes.into(),
            start,
            end,
            ..JobRow::default()
        }
    }

    #[test]
    fn a_job_is_alone_unless_another_shares_a_node_while_it_runs() {
        let me = job(10, "n[1-2]", 100, 200);
        let others = [
            me.clone(),
            job(11, "n3", 100, 200),    // other node
            job(12, "n2", 200, 300),    // after it
            job(13, "n[2-4]", 50, 101), // overlaps by a second on n2
        ];
        assert_eq!(alone(&me, &others[..3], 1000), Alone::Yes);
        assert_eq!(alone(&me, &others, 1000), Alone::No(vec![13]));
        // a running job runs until now
        let running = job(14, "n1", 150, 0);
        assert_eq!(alone(&me, &[running], 1000), Alone::No(vec![14]));
        assert_eq!(alone(&job(15, "n1", 0, 0), &others, 1000), Alone::Unknown);
    }

    #[test]
    fn the_source_and_method_follow_the_plugins_and_the_attribution() {
        let rapl = Setup::new("acct_gather_energy/rust_rapl", Some(""));
        assert_eq!(rapl.source(), "rapl: CPU packages+DRAM");
        assert!(
            rapl.method(&Alone::Yes)
                .starts_with("the node meter's own: the job had")
        );
        let shared_with = rapl.method(&Alone::No(vec![3, 4]));
        assert!(shared_with.contains("includes jobs 3, 4"), "{shared_with}");

        let shared = Setup::new(
            "acct_gather_energy/rust_ipmi",
            Some("EnergyAttribution=shared\n"),
        );
        assert_eq!(shared.source(), "ipmi: whole node, as its BMC sees it");
        assert!(
            shared
                .method(&Alone::No(vec![3]))
                .starts_with("a model's share")
        );
        // alone, the model's share is all of the node: the meter's own
        assert!(
            shared
                .method(&Alone::Yes)
                .starts_with("the node meter's own")
        );

        let stacked = Setup::new(
            "acct_gather_energy/rust_rapl,acct_gather_energy/rust_gpu",
            Some("EnergyAttribution=shared"),
        );
        assert_eq!(
            stacked.source(),
            "rapl: CPU packages+DRAM + gpu: GPU boards"
        );
        let m = stacked.method(&Alone::No(vec![7]));
        assert!(
            m.starts_with("a model's share") && m.contains("; its GPUs: the boards it held"),
            "{m}"
        );
        let gpu = Setup::new("acct_gather_energy/rust_gpu", Some(""));
        assert!(gpu.method(&Alone::Yes).starts_with("its GPUs"));
        assert_eq!(Setup::new("", Some("")).source(), "none");
        let unknown = Setup::new("acct_gather_energy/rust_rapl", None);
        assert!(
            unknown
                .method(&Alone::No(vec![1]))
                .contains("EnergyAttribution is unknown")
        );
    }
}
