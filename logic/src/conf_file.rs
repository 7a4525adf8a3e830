//! An acct_gather.conf checked before it is pushed to every node (`senergy check --conf`):
//! the file as Slurm's parser reads it, each key known to the family or to one of Slurm's
//! own acct_gather plugins, each value as the plugins parse it (the same parse slurmd
//! runs, so a value passed here is a value slurmd takes), and what is right for one node
//! but wrong in a file many nodes share.
//!
//! Slurm's `acct_gather_conf_init` is fatal at a key no loaded plugin registers: a typo in
//! a configless acct_gather.conf stops every slurmd; a bad value of ours leaves the node
//! without energy (`NO_VAL`) until it is fixed.

use std::collections::HashMap;

use crate::attribution::{self, job_record::StepRecordConfig};
use crate::config::{ConfigError, KeyValues};
use crate::family::{self, PluginKind};
use crate::metrics::MetricsConfig;

/// The keys Slurm's own acct_gather plugins register (energy ipmi and xcc, profile hdf5
/// and influxdb, interconnect ofed and sysfs; read in Slurm 23.02.7 and 26.05.3): a file
/// may hold them beside ours, for whichever of those plugins a node loads. The IPMI ones
/// are also rust_ipmi's.
const SLURMS_OWN_KEYS: &[&str] = &[
    "EnergyXCCFake",
    "InfinibandOFEDPort",
    "InterconnectOFEDPort",
    "ProfileHDF5Default",
    "ProfileHDF5Dir",
    "ProfileInfluxDBDatabase",
    "ProfileInfluxDBDefault",
    "ProfileInfluxDBExtraTags",
    "ProfileInfluxDBFlags",
    "ProfileInfluxDBFrequency",
    "ProfileInfluxDBHost",
    "ProfileInfluxDBPass",
    "ProfileInfluxDBRTPolicy",
    "ProfileInfluxDBTimeout",
    "ProfileInfluxDBUser",
    "SysfsInterfaces",
];

/// Keys whose value is one node's: learned by slurmd where left out, so a file for many
/// nodes should leave them out.
const PER_NODE: &[&str] = &["EnergyAttributionIdleWatts", "EnergyGpuIdleWatts"];

/// Keys naming one BMC: in a file for many nodes, `%n` or `%h` gives each node its own.
const ONE_BMC: &[&str] = &["EnergyIPMIHost", "EnergyRedfishUrl"];

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Slurm refuses the file, or a plugin leaves the node without energy.
    Error,
    /// Taken, but likely not what a site means.
    Warning,
}

/// One thing said of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Whether the file may be pushed as it is.
    pub severity: Severity,
    /// The file's line (from 1), where the finding is one line's.
    pub line: Option<usize>,
    /// What is wrong, naming the key and value, and what it does on the nodes.
    pub message: String,
}

/// A `Key=Value` line of the file.
#[derive(Debug)]
struct Entry<'a> {
    line: usize,
    key: &'a str,
    value: &'a str,
}

/// A group of keys parsed together, as the plugins parse them.
struct Group {
    /// `rust_rapl`, or the runtime's part every plugin reads.
    name: &'static str,
    keys: &'static [&'static str],
    parse: fn(&KeyValues) -> Result<(), ConfigError>,
    /// Its keys' text and defaults, for the key reference.
    #[cfg(test)]
    reference: fn() -> Vec<crate::config::KeyDoc>,
}

/// The groups: each plugin's, as the family declares it, then the runtime's every plugin
/// reads.
fn groups() -> Vec<Group> {
    fn ok<T>(r: Result<T, ConfigError>) -> Result<(), ConfigError> {
        r.map(|_| ())
    }
    let plugins = family::PLUGINS.iter().map(|entry| Group {
        name: entry.name,
        keys: entry.parsed,
        parse: entry.parse,
        #[cfg(test)]
        reference: entry.reference,
    });
    let runtime = [
        Group {
            name: "",
            keys: attribution::KEYS,
            parse: |v| ok(attribution::Attribution::parse(v)),
            #[cfg(test)]
            reference: attribution::Attribution::reference,
        },
        Group {
            name: "",
            keys: StepRecordConfig::KEYS,
            parse: |v| ok(StepRecordConfig::parse(v)),
            #[cfg(test)]
            reference: StepRecordConfig::reference,
        },
        Group {
            name: "",
            keys: MetricsConfig::KEYS,
            parse: |v| ok(MetricsConfig::parse(v)),
            #[cfg(test)]
            reference: MetricsConfig::reference,
        },
    ];
    plugins.chain(runtime).collect()
}

/// The file's `Key=Value` lines as Slurm's parser reads them (`#` starts a comment, keys
/// are case-insensitive), and the lines it cannot read.
fn entries(text: &str) -> (Vec<Entry<'_>>, Vec<Finding>) {
    let (mut entries, mut findings) = (Vec::new(), Vec::new());
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        match line.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() && !key.trim().contains(' ') => entries
                .push(Entry {
                    line: n + 1,
                    key: key.trim(),
                    value: value.trim(),
                }),
            _ => findings.push(Finding {
                severity: Severity::Error,
                line: Some(n + 1),
                message: format!("{line:?}: expected Key=Value; Slurm refuses the file"),
            }),
        }
    }
    (entries, findings)
}

/// The edit distance of two keys, case-insensitive: the nearest known key is suggested for
/// an unknown one.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (
        a.to_ascii_lowercase().chars().collect(),
        b.to_ascii_lowercase().chars().collect(),
    );
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The key of ours or Slurm's an unknown `key` most likely meant.
fn nearest(key: &str, ours: &[&'static str]) -> Option<&'static str> {
    ours.iter()
        .chain(SLURMS_OWN_KEYS)
        .map(|k| (distance(key, k), *k))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, k)| k)
}

/// Checks the text of an acct_gather.conf for the family's plugins `plugins` (names after
/// `acct_gather_energy/`; empty: every plugin whose keys the file sets). Findings in the
/// file's order, errors before warnings on a line.
pub fn check(text: &str, plugins: &[&str]) -> Vec<Finding> {
    let (entries, mut findings) = entries(text);
    let ours = family::keys();
    let mut values = KeyValues::new();
    let mut lines: HashMap<&'static str, usize> = HashMap::new();
    let mut say = |severity, line: Option<usize>, message: String| {
        findings.push(Finding {
            severity,
            line,
            message,
        })
    };
    for e in &entries {
        let Some(key) = ours.iter().find(|k| k.eq_ignore_ascii_case(e.key)) else {
            if !SLURMS_OWN_KEYS
                .iter()
                .any(|k| k.eq_ignore_ascii_case(e.key))
            {
                let hint = nearest(e.key, &ours)
                    .map(|k| format!(" (did you mean {k}?)"))
                    .unwrap_or_default();
                say(
                    Severity::Error,
                    Some(e.line),
                    format!(
                        "{}: no acct_gather plugin registers this key{hint}: slurmd and \
                         slurmstepd refuse the file and do not start",
                        e.key
                    ),
                );
            }
            continue;
        };
        if let Some(earlier) = lines.insert(key, e.line) {
            say(
                Severity::Warning,
                Some(e.line),
                format!("{key} is given again (line {earlier} too): this line's value counts"),
            );
        }
        values.set(key, e.value);
        if !plugins.is_empty()
            && let Some(owner) = family::owner(key)
            && !plugins.contains(&owner)
            && !SLURMS_OWN_KEYS.contains(key)
        {
            say(
                Severity::Warning,
                Some(e.line),
                format!(
                    "{key} is {owner}'s, which the plugins named ({}) do not read",
                    plugins.join(", ")
                ),
            );
        }
        if PER_NODE.contains(key) {
            say(
                Severity::Warning,
                Some(e.line),
                format!(
                    "{key}={}: one node's figure; in a file pushed to many nodes every node \
                     gets it: set it in a node's own file, or leave it out (slurmd learns it)",
                    e.value
                ),
            );
        }
        if ONE_BMC.contains(key) && !e.value.contains("%n") && !e.value.contains("%h") {
            say(
                Severity::Warning,
                Some(e.line),
                format!(
                    "{key}={}: one BMC; in a file pushed to many nodes every node reads it: \
                     use %n (the node's name) or %h (its host's) in it",
                    e.value
                ),
            );
        }
    }
    let named = |group: &Group| {
        group.name.is_empty()
            || plugins.contains(&group.name)
            || (plugins.is_empty() && group.keys.iter().any(|k| values.get(k).is_some()))
    };
    for group in groups().iter().filter(|g| named(g)) {
        // each key alone, so that every bad value is said, then all together (a key that
        // is refused only beside another)
        let mut said = false;
        for key in group.keys {
            let Some(value) = values.get(key) else {
                continue;
            };
            let mut alone = KeyValues::new();
            alone.set(key, value);
            if let Err(e) = (group.parse)(&alone) {
                say(Severity::Error, lines.get(key).copied(), refusal(group, &e));
                said = true;
            }
        }
        if let (false, Err(e)) = (said, (group.parse)(&values)) {
            say(
                Severity::Error,
                lines.get(e.key).copied(),
                refusal(group, &e),
            );
        }
    }
    findings.sort_by_key(|f| (f.line, f.severity));
    findings
}

fn refusal(group: &Group, e: &ConfigError) -> String {
    let leaves = if group.name.is_empty() {
        "every plugin of the family falls back to its default for it".to_string()
    } else {
        format!(
            "{} reports no energy on any node until it is fixed",
            group.name
        )
    };
    format!("{}={}: {}; {leaves}", e.key, e.value, e.reason)
}

/// What slurm.conf's energy lines need: `AcctGatherEnergyType` naming plugins of the
/// family, `AcctGatherNodeFreq` for slurmd's polls, and where the file shares the node
/// (`EnergyAttribution=shared`), Slurm's job cgroups. `conf` is slurm.conf's text, `shared`
/// whether acct_gather.conf asks for `shared`. Returns the family's plugins it names.
pub fn check_slurm_conf(conf: &str, shared: bool) -> (Vec<&'static str>, Vec<Finding>) {
    let mut findings = Vec::new();
    let value = |key| crate::config::file_value(conf, key).unwrap_or_default();
    let mut say = |severity, message: String| {
        findings.push(Finding {
            severity,
            line: None,
            message: format!("slurm.conf: {message}"),
        })
    };
    let mut named = Vec::new();
    for plugin in value("AcctGatherEnergyType").split(',').map(str::trim) {
        let kind = plugin.strip_prefix("acct_gather_energy/").unwrap_or(plugin);
        match PluginKind::ALL.iter().find(|member| member.name() == kind) {
            Some(member) => named.push(member.name()),
            None if kind.starts_with("rust_") => say(
                Severity::Error,
                format!("AcctGatherEnergyType names {plugin}, which is none of this family's"),
            ),
            None => {}
        }
    }
    if named.is_empty() {
        say(
            Severity::Error,
            "AcctGatherEnergyType names none of this family's plugins \
             (acct_gather_energy/rust_rapl, ...)"
                .into(),
        );
    }
    if value("AcctGatherNodeFreq").parse::<u32>().unwrap_or(0) == 0 {
        say(
            Severity::Warning,
            "AcctGatherNodeFreq is not set: slurmd never polls the node (scontrol's \
             CurrentWatts stays unknown); the plugins read it at every step's poll only"
                .into(),
        );
    }
    if shared
        && let Err(why) = attribution::job_cgroups(value("ProctrackType"), value("TaskPlugin"))
    {
        say(
            Severity::Error,
            format!(
                "EnergyAttribution=shared {why}; without them every job gets the node's energy"
            ),
        );
    }
    (named, findings)
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
