//! The node's and its jobs' energy in Prometheus's text format, for node_exporter's
//! textfile collector (`EnergyMetricsFile=` in acct_gather.conf).
//!
//! slurmd's ledger keeper writes the file at each ledger update (about once a second),
//! from the ledger itself: the figures are those the node's steps report to Slurm. It is
//! written whole to a temporary file (a name the collector skips, created so that no link
//! planted in the directory is followed: `crate::replace`) renamed over the old one, so
//! a scrape reads a whole file or the previous one. The counters continue across
//! slurmd restarts as the ledger does; a job's series stay for [`GRACE`] after it left the
//! node, so that a scrape sees its final figure, then go.
//!
//! The job's id is the label `jobid`, not `job`: Prometheus gives every scraped series
//! the label `job` (the scrape job's name) and would rename ours. Who ran a job is in a
//! separate info series (`slurm_energy_job_info`), joined by `jobid` where a query needs
//! it: the owner is known only once a task has started, and a label that appeared later
//! would start a new series.
//!
//! Where slurm.conf's `PrivateData` hides jobs, users or usage from other users, the file
//! hides them too unless the admin said otherwise ([`InEffect`]): node_exporter usually
//! serves it to the network without authentication, and a local user reads a 0644 file.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::attribution::grant::Owner;
use crate::config::{ConfigError, KeyValues, config_keys, yes_no};
use crate::ledger::Ledger;
use crate::replace::{Access, Directory};

/// The keys every plugin of the family reads for its metrics.
pub const KEYS: &[&str] = MetricsConfig::KEYS;
/// Readable by all, node_exporter's user included: what the file's mode was before it
/// could be set, and still is where Slurm does not hide jobs from other users.
const DEFAULT_MODE: u32 = 0o644;
/// Where `PrivateData` hides jobs: root's only, or root's and [`GROUP_KEY`]'s.
const PRIVATE_MODE: u32 = 0o600;
const PRIVATE_GROUP_MODE: u32 = 0o640;
/// How long a job's series stay after it left the node: two scrapes at Prometheus's
/// default interval of a minute.
pub const GRACE: Duration = Duration::from_secs(120);

config_keys! {
    /// Where the metrics go, if anywhere, and who may read them. An empty value is the key
    /// left out.
    #[derive(Debug, Clone, PartialEq)]
    pub struct MetricsConfig {
        pub file: Option<PathBuf> = None, {
            FILE_KEY = "EnergyMetricsFile": parse(parse_file),
                show(|f| f.as_ref().map_or("(none)".to_string(), |f| f.display().to_string()));
        }
        /// The file's permission bits ([`MODE_KEY`]); `None` where the admin left them to
        /// the default, which `PrivateData` decides ([`InEffect`]).
        pub mode: Option<u32> = None, {
            MODE_KEY = "EnergyMetricsFileMode": parse(parse_mode),
                show(|m| m.map_or("(default)".to_string(), |m| format!("{m:04o}")));
        }
        /// The file's group ([`GROUP_KEY`]), when not slurmd's: node_exporter's, where the file
        /// is not readable by all.
        pub group: Option<GroupName> = None, {
            GROUP_KEY = "EnergyMetricsFileGroup":
                parse(|_, v| if v.is_empty() { Ok(None) } else { parse_group(v).map(Some) }),
                show(|g| g.as_ref().map_or("(slurmd's)".to_string(), GroupName::to_string));
        }
        /// Whether the file says who runs each job ([`OWNERS_KEY`]); `None` where the admin
        /// left it to the default, which `PrivateData` decides ([`InEffect`]).
        pub owners: Option<bool> = None, {
            OWNERS_KEY = "EnergyMetricsOwners": parse(|k, v| match v.to_ascii_lowercase().as_str() {
                "yes" => Ok(Some(true)),
                "no" => Ok(Some(false)),
                "" => Ok(None),
                _ => Err(ConfigError::new(k, v, "expected yes or no")),
            }),
            show(|o| o.as_ref().map_or("(default)".to_string(), yes_no));
        }
    }
}

/// A group as acct_gather.conf names it: by number, or by name (looked up on the node that
/// writes the file: the controller, which shows the configuration, may not know it).
#[derive(Debug, Clone, PartialEq)]
pub enum GroupName {
    Id(u32),
    Name(String),
}

impl std::fmt::Display for GroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Id(gid) => write!(f, "{gid}"),
            Self::Name(name) => f.write_str(name),
        }
    }
}

/// [`MODE_KEY`]'s value: octal permission bits, writable by the owner (root) only: the
/// figures are billed, and a file others could write between two updates could lie.
fn parse_mode(key: &'static str, v: &str) -> Result<Option<u32>, ConfigError> {
    if v.is_empty() {
        return Ok(None);
    }
    let bad = || {
        ConfigError::new(
            key,
            v,
            "expected octal permission bits writable by root only, such as 0644 or 0640",
        )
    };
    if v.len() > 4 || !v.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad());
    }
    u32::from_str_radix(v, 8)
        .ok()
        .filter(|m| m & !0o777 == 0 && m & 0o022 == 0)
        .map(Some)
        .ok_or_else(bad)
}

/// [`GROUP_KEY`]'s value: a number, or a name as `groupadd` allows one.
fn parse_group(v: &str) -> Result<GroupName, ConfigError> {
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return v
            .parse()
            .map(GroupName::Id)
            .map_err(|_| ConfigError::new(GROUP_KEY, v, "expected a group id below 2^32"));
    }
    let name = v.len() <= 32
        && !v.starts_with('-')
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if name {
        Ok(GroupName::Name(v.to_string()))
    } else {
        Err(ConfigError::new(
            GROUP_KEY,
            v,
            "expected a group name or number",
        ))
    }
}

/// [`FILE_KEY`]'s value: an absolute path for node_exporter's textfile collector.
fn parse_file(key: &'static str, v: &str) -> Result<Option<PathBuf>, ConfigError> {
    if v.is_empty() {
        return Ok(None);
    }
    let path = Path::new(v);
    if !path.is_absolute() {
        return Err(ConfigError::new(key, v, "expected an absolute path"));
    }
    if path.extension().is_none_or(|e| e != "prom") || path.file_stem().is_none() {
        return Err(ConfigError::new(
            key,
            v,
            "expected a file name ending in .prom (node_exporter's textfile collector \
             reads only those)",
        ));
    }
    Ok(Some(path.to_path_buf()))
}

/// What slurm.conf's `PrivateData` hides from users other than a job's own (Slurm's
/// `PrivateData=jobs,usage,users`, each set by `all` too); the other flags say nothing of
/// jobs and their owners.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrivateData {
    pub jobs: bool,
    pub usage: bool,
    pub users: bool,
}

impl PrivateData {
    /// Whether Slurm hides who runs which job, or how much it used, from other users: then
    /// so must the file.
    fn hides_jobs(self) -> bool {
        self.jobs || self.usage || self.users
    }
}

/// The file's mode and whether it names owners, as in effect: each key the admin set wins;
/// a key left out takes its default, which is private where [`PrivateData`] hides jobs
/// (mode 0600, or 0640 with [`GROUP_KEY`]; no owners) and otherwise what it always was
/// (0644, owners named).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InEffect {
    pub mode: u32,
    pub owners: bool,
    /// Whether `PrivateData` chose the mode, the owners: `scontrol show config` says so.
    private_mode: bool,
    private_owners: bool,
}

impl InEffect {
    /// The line slurmd logs once when it starts writing `path` (group as the admin named
    /// it): who can read the file, and, where not everyone, how node_exporter can.
    pub fn describe(&self, path: &Path, group: Option<&GroupName>) -> String {
        let path = path.display();
        let owners = if self.owners {
            "names each job's owner"
        } else {
            "names no job's owner"
        };
        let why = if self.private_mode {
            "slurm.conf's PrivateData hides jobs, users or usage, so "
        } else {
            ""
        };
        let mode = self.mode;
        if mode & 0o004 != 0 {
            return format!(
                "the energy metrics file {path} is readable by every user of this node \
                 (mode {mode:04o}) and {owners} ({OWNERS_KEY})"
            );
        }
        let how = match group {
            Some(group) if mode & 0o040 != 0 => format!(
                "readable by root and group {group} only (mode {mode:04o}, {GROUP_KEY}: \
                 node_exporter's user must be in it)"
            ),
            Some(group) => format!(
                "readable by root only (mode {mode:04o}); set {MODE_KEY}=0640 to let \
                 node_exporter read it through group {group} ({GROUP_KEY})"
            ),
            None => format!(
                "readable by root only (mode {mode:04o}); set {GROUP_KEY} to \
                 node_exporter's group to let node_exporter read it"
            ),
        };
        format!("{why}the energy metrics file {path} is {how}; it {owners} ({OWNERS_KEY})")
    }

    /// `scontrol show config`'s value for [`MODE_KEY`] and [`OWNERS_KEY`].
    fn show(&self, key: &str) -> Option<String> {
        let because = |private: bool| if private { " (PrivateData)" } else { "" };
        match key {
            MODE_KEY => Some(format!("{:04o}{}", self.mode, because(self.private_mode))),
            OWNERS_KEY => Some(format!(
                "{}{}",
                yes_no(&self.owners),
                because(self.private_owners)
            )),
            _ => None,
        }
    }
}

impl MetricsConfig {
    /// The mode and owners in effect where slurm.conf's PrivateData is `private`.
    pub fn in_effect(&self, private: PrivateData) -> InEffect {
        let hides = private.hides_jobs();
        let private_mode = if self.group.is_some() {
            PRIVATE_GROUP_MODE
        } else {
            PRIVATE_MODE
        };
        InEffect {
            mode: self
                .mode
                .unwrap_or(if hides { private_mode } else { DEFAULT_MODE }),
            owners: self.owners.unwrap_or(!hides),
            private_mode: hides && self.mode.is_none(),
            private_owners: hides && self.owners.is_none(),
        }
    }

    /// `(key, value)` for `scontrol show config`: the values in effect where slurm.conf's
    /// PrivateData is `private`, and why where it chose them.
    pub fn shown(&self, private: PrivateData) -> Vec<(&'static str, String)> {
        let effect = self.in_effect(private);
        self.show()
            .into_iter()
            .map(|(key, value)| (key, effect.show(key).unwrap_or(value)))
            .collect()
    }

    /// Who may read the file as `effect` says, its group looked up on this node; an error
    /// names the key and the value.
    pub fn access(&self, effect: &InEffect) -> Result<Access, ConfigError> {
        let group = match &self.group {
            None => None,
            Some(GroupName::Id(gid)) => Some(*gid),
            Some(GroupName::Name(name)) => match nix::unistd::Group::from_name(name) {
                Ok(Some(group)) => Some(group.gid.as_raw()),
                Ok(None) => {
                    return Err(ConfigError::new(
                        GROUP_KEY,
                        name,
                        "no such group on this node",
                    ));
                }
                Err(e) => {
                    return Err(ConfigError::new(
                        GROUP_KEY,
                        name,
                        format!("cannot look the group up: {e}"),
                    ));
                }
            },
        };
        Ok(Access {
            mode: effect.mode,
            group,
        })
    }

    /// The file plugin `source` writes on node `node`: the one named, `%n` in it the node's
    /// name and `%h` the host's (one acct_gather.conf for nodes sharing a file system), or where
    /// energy plugins are stacked one per plugin beside it (`energy.prom`:
    /// `energy.rust_gpu.prom`), each with its own `source` label.
    pub fn path_for(&self, source: &str, stacked: bool, node: &str) -> Option<PathBuf> {
        let text = self.file.as_ref()?.to_str()?;
        let file = PathBuf::from(crate::source::expand_node(text, node));
        if !stacked {
            return Some(file);
        }
        let stem = file.file_stem()?.to_string_lossy();
        Some(file.with_file_name(format!("{stem}.{source}.prom")))
    }
}

/// The labels of every series of one plugin on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The node's name.
    pub node: String,
    /// The plugin (`rust_rapl`).
    pub source: String,
    /// How jobs are charged (`node`, `shared`, `devices`).
    pub attribution: String,
}

/// A label value as the text format writes it: `\`, `"` and newlines escaped.
fn escaped(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// One metric family: its `# HELP` and `# TYPE` lines, then its samples.
struct Family {
    text: String,
}

impl Family {
    fn new(name: &str, kind: &str, help: &str) -> Self {
        Self {
            text: format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"),
        }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        self.text.push('{');
        for (k, (key, value)) in labels.iter().enumerate() {
            if k > 0 {
                self.text.push(',');
            }
            let _ = write!(self.text, "{key}=\"{}\"", escaped(value));
        }
        let _ = writeln!(self.text, "}} {value}");
    }
}

/// The file's text: the node's energy and power (and its parts'), and those of each job
/// and step the ledger keeps that was on the node less than [`GRACE`] ago (a job's ended
/// steps as long as the ledger keeps them: a minute at most, a few dozen per job), and who
/// runs each job unless `owners` is `None` ([`OWNERS_KEY`]): then no series says it.
pub fn render(ledger: &Ledger, owners: Option<&HashMap<u32, Owner>>, who: &Identity) -> String {
    const NODE_J: &str = "slurm_energy_node_joules_total";
    const NODE_W: &str = "slurm_energy_node_watts";
    const PART_J: &str = "slurm_energy_node_part_joules_total";
    const PART_W: &str = "slurm_energy_node_part_watts";
    const JOB_J: &str = "slurm_energy_job_joules_total";
    const JOB_W: &str = "slurm_energy_job_watts";
    const STEP_J: &str = "slurm_energy_step_joules_total";
    const STEP_W: &str = "slurm_energy_step_watts";
    const JOB_INFO: &str = "slurm_energy_job_info";
    const SAMPLED: &str = "slurm_energy_sampled_timestamp_seconds";
    let node = [("node", who.node.as_str()), ("source", who.source.as_str())];

    let mut sampled = Family::new(
        SAMPLED,
        "gauge",
        "Unix time of the sample the figures are from (how fresh they are).",
    );
    sampled.sample(
        SAMPLED,
        &[node[0], node[1], ("attribution", who.attribution.as_str())],
        ledger.sampled_at(),
    );
    let mut node_j = Family::new(
        NODE_J,
        "counter",
        "Energy the node used, in joules, continued across slurmd restarts.",
    );
    let mut node_w = Family::new(
        NODE_W,
        "gauge",
        "The node's power over the last second or more, in watts.",
    );
    let account = ledger.node();
    node_j.sample(NODE_J, &node, account.joules);
    node_w.sample(NODE_W, &node, account.watts);
    let mut part_j = Family::new(
        PART_J,
        "counter",
        "Energy of a part of the node the source measures (a package, DRAM, a GPU), in joules.",
    );
    let mut part_w = Family::new(PART_W, "gauge", "Power of a part of the node, in watts.");
    for part in ledger.parts() {
        let labels = [node[0], node[1], ("part", part.label.as_str())];
        part_j.sample(PART_J, &labels, part.joules);
        if let Some(watts) = part.watts {
            part_w.sample(PART_W, &labels, watts);
        }
    }

    let mut job_j = Family::new(
        JOB_J,
        "counter",
        "Energy charged to the job on this node since it began, in joules (its share where \
         the node or a GPU is shared): what Slurm's accounting gets.",
    );
    let mut job_w = Family::new(
        JOB_W,
        "gauge",
        "Power charged to the job on this node, in watts; 0 once it left.",
    );
    let mut step_j = Family::new(
        STEP_J,
        "counter",
        "Energy charged to the step on this node since it began, in joules.",
    );
    let mut step_w = Family::new(STEP_W, "gauge", "Power charged to the step, in watts.");
    let mut info = Family::new(
        JOB_INFO,
        "gauge",
        "Who runs the job (from Slurm's step record), always 1: join on jobid.",
    );
    let grace = GRACE.as_secs_f64();
    for job in ledger
        .jobs()
        .filter(|j| ledger.sampled_at() - j.last_seen() <= grace)
    {
        let id = job.id.to_string();
        let labels = [node[0], node[1], ("jobid", id.as_str())];
        let account = job.account();
        job_j.sample(JOB_J, &labels, account.joules);
        job_w.sample(JOB_W, &labels, account.watts);
        for (step, account) in job.steps() {
            let name = step.name();
            let labels = [node[0], node[1], ("jobid", id.as_str()), ("step", &name)];
            step_j.sample(STEP_J, &labels, account.joules);
            step_w.sample(STEP_W, &labels, account.watts);
        }
        if let Some(owner) = owners.and_then(|o| o.get(&job.id)) {
            info.sample(
                JOB_INFO,
                &[
                    node[0],
                    ("jobid", id.as_str()),
                    ("user", owner.user.as_str()),
                ],
                1.0,
            );
        }
    }
    let info = owners.is_some().then_some(info);
    [
        sampled, node_j, node_w, part_j, part_w, job_j, job_w, step_j, step_w,
    ]
    .iter()
    .chain(info.as_ref())
    .map(|f| f.text.as_str())
    .collect()
}

/// The file the metrics are written to, in the directory opened once when slurmd started
/// (`Directory`); a failure is logged once per episode.
pub struct MetricsFile {
    dir: Directory,
    name: String,
    access: Access,
    failing: bool,
}

impl Drop for MetricsFile {
    /// slurmd stops measuring: the file goes, or node_exporter would serve its last
    /// figures as current for ever. Removed from the directory first opened, whatever its
    /// path names now.
    fn drop(&mut self) {
        let _ = self.dir.remove(&self.name);
    }
}

impl MetricsFile {
    /// Writes to `path`, readable as `access` says, once the temporary files a killed
    /// slurmd left beside it are gone. Its
    /// directory is opened now, for good: a link in its path is refused (an error naming
    /// [`FILE_KEY`]), and a directory on the way that others can write is logged.
    pub fn open(path: &Path, access: Access) -> Result<Self, ConfigError> {
        let refused = |why: String| ConfigError::new(FILE_KEY, &path.display().to_string(), why);
        let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
        else {
            return Err(refused("expected a file name in a directory".into()));
        };
        let (dir, exposed) = Directory::open_checked(dir).map_err(|e| refused(e.to_string()))?;
        for exposure in exposed {
            log::warn!("{FILE_KEY}: {exposure}");
        }
        dir.sweep(name);
        Ok(Self {
            dir,
            name: name.to_string(),
            access,
            failing: false,
        })
    }

    /// Its path as it was when opened.
    fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }

    /// Replaces the file with `text`, readable by node_exporter's user as configured,
    /// through a temporary file beside it that the collector skips (`Directory::replace`).
    pub fn write(&mut self, text: &str) {
        let written = self.dir.replace(&self.name, text.as_bytes(), self.access);
        match written {
            Ok(()) if self.failing => {
                log::info!(
                    "the energy metrics are written to {} again",
                    self.path().display()
                );
                self.failing = false;
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                log::error!(
                    "cannot write the energy metrics to {}: {e}",
                    self.path().display()
                );
                self.failing = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
