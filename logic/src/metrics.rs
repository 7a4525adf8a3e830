//! The node's and its jobs' energy in Prometheus's text format, for node_exporter's
//! textfile collector (`EnergyMetricsFile=` in acct_gather.conf).
//!
//! slurmd's ledger keeper writes the file at each ledger update (about once a second),
//! from the ledger itself: the figures are those the node's steps report to Slurm. It is
//! written whole to a temporary file (a name the collector skips, created so that no link
//! planted in the directory is followed: [`crate::replace`]) renamed over the old one, so
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
/// ([`Directory`]); a failure is logged once per episode.
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
    /// through a temporary file beside it that the collector skips ([`Directory::replace`]).
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
mod tests {
    mod dashboard;

    use super::*;
    use crate::attribution::StepId;
    use crate::ledger::{Observation, ObservedJob, ObservedStep, Split};
    use std::fs;
    use std::time::{Instant, SystemTime};

    #[test]
    fn the_file_key_wants_an_absolute_prom_file() {
        let parse = |v: &str| {
            let mut values = KeyValues::new();
            values.set(FILE_KEY, v);
            MetricsConfig::parse(&values)
        };
        assert_eq!(
            MetricsConfig::parse(&KeyValues::new()),
            Ok(MetricsConfig::default())
        );
        let ok = parse("/var/lib/node_exporter/slurm_energy.prom").expect("valid");
        assert_eq!(
            ok.path_for("rust_rapl", false, "n1"),
            Some(PathBuf::from("/var/lib/node_exporter/slurm_energy.prom"))
        );
        assert_eq!(
            ok.path_for("rust_gpu", true, "n1"),
            Some(PathBuf::from(
                "/var/lib/node_exporter/slurm_energy.rust_gpu.prom"
            ))
        );
        let per_node = parse("/shared/metrics/%n/energy_%h.prom").expect("valid");
        assert_eq!(
            per_node.path_for("rust_rapl", false, "n7"),
            Some(PathBuf::from(format!(
                "/shared/metrics/n7/energy_{}.prom",
                crate::source::host_name()
            )))
        );
        for bad in ["energy.prom", "/var/lib/energy.txt", "/var/lib/"] {
            let e = parse(bad).expect_err(bad);
            assert_eq!((e.key, e.value.as_str()), (FILE_KEY, bad));
        }
    }

    #[test]
    fn the_files_mode_group_and_owners_are_configurable_and_bad_values_named() {
        let parse = |pairs: &[(&'static str, &str)]| {
            let mut values = KeyValues::new();
            for (k, v) in pairs {
                values.set(k, *v);
            }
            MetricsConfig::parse(&values)
        };
        let open = PrivateData::default();
        let default = parse(&[]).expect("defaults");
        assert_eq!(
            (default.mode, &default.group, default.owners),
            (None, &None, None)
        );
        let effect = default.in_effect(open);
        assert_eq!(
            default.access(&effect),
            Ok(Access {
                mode: 0o644,
                group: None
            })
        );
        assert!(effect.owners);
        let set =
            parse(&[(MODE_KEY, "0640"), (GROUP_KEY, "4242"), (OWNERS_KEY, "No")]).expect("valid");
        let effect = set.in_effect(open);
        assert_eq!(
            set.access(&effect),
            Ok(Access {
                mode: 0o640,
                group: Some(4242)
            })
        );
        assert!(!effect.owners);
        assert_eq!(
            set.shown(open)[1..],
            [
                (MODE_KEY, "0640".to_string()),
                (GROUP_KEY, "4242".to_string()),
                (OWNERS_KEY, "no".to_string())
            ]
        );
        assert_eq!(parse(&[(MODE_KEY, "600")]).map(|c| c.mode), Ok(Some(0o600)));
        // a name is looked up where the file is written
        let root = parse(&[(GROUP_KEY, "root")]).expect("a name");
        let effect = root.in_effect(open);
        assert_eq!(root.access(&effect).map(|a| a.group), Ok(Some(0)));
        let unknown = parse(&[(GROUP_KEY, "no-such-group-here")]).expect("a name");
        let e = unknown
            .access(&unknown.in_effect(open))
            .expect_err("unknown");
        assert_eq!((e.key, e.value.as_str()), (GROUP_KEY, "no-such-group-here"));
        assert!(e.to_string().contains("no such group"), "{e}");
        for (key, bad) in [
            (MODE_KEY, "0666"),
            (MODE_KEY, "0646"),
            (MODE_KEY, "4755"),
            (MODE_KEY, "rw-r--r--"),
            (MODE_KEY, "0x1a4"),
            (MODE_KEY, "0o644"),
            (MODE_KEY, "01777"),
            (GROUP_KEY, "99999999999"),
            (GROUP_KEY, "node exporter"),
            (GROUP_KEY, "-g"),
            (OWNERS_KEY, "maybe"),
        ] {
            let e = parse(&[(key, bad)]).expect_err(bad);
            assert_eq!((e.key, e.value.as_str()), (key, bad));
            assert!(e.to_string().contains(&format!("{key}={bad}")), "{e}");
        }
    }

    /// `EnergyMetricsOwners=no`: no series names a user or an account.
    #[test]
    fn without_owners_no_series_says_who_runs_a_job() {
        let text = render(&ledger(3), None, &who());
        assert!(text.contains("slurm_energy_job_joules_total{"), "{text}");
        for absent in ["slurm_energy_job_info", "user=", "account="] {
            assert!(!text.contains(absent), "{absent} in\n{text}");
        }
    }

    /// A node-mode ledger with job 7 (extern, batch) from the first sample and job 8, gone
    /// `gone_for` seconds before the last sample.
    fn ledger(gone_for: u64) -> Ledger {
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let job = |id: u32, steps: &[StepId]| ObservedJob {
            job: id,
            counters: None,
            steps: steps
                .iter()
                .map(|&id| ObservedStep {
                    id,
                    usage_ns: None,
                    started: Some(w0),
                    holds: vec![],
                })
                .collect(),
        };
        let mut ledger = Ledger::default();
        let last = 2 + gone_for;
        for secs in 0..=last {
            let mut jobs = vec![job(7, &[StepId::EXTERN, StepId::BATCH])];
            if secs <= 2 {
                jobs.push(job(8, &[StepId(0)]));
            }
            let obs = Observation {
                at: t0 + Duration::from_secs(secs),
                wall: w0 + Duration::from_secs(secs),
                node_uj: secs * 250_000_000,
                settled: true,
                jobs,
                parts: vec![],
                counts: vec![],
                devices: vec![],
            };
            ledger.update(&obs, Split::Node);
        }
        ledger
    }

    fn who() -> Identity {
        Identity {
            node: "n1".into(),
            source: "rust_rapl".into(),
            attribution: "node".into(),
        }
    }

    #[test]
    fn the_file_has_the_node_its_jobs_and_steps_and_who_runs_them() {
        let owners = HashMap::from([(
            7,
            Owner {
                user: "al\"ice".into(),
            },
        )]);
        let text = render(&ledger(3), Some(&owners), &who());
        let node = r#"node="n1",source="rust_rapl""#;
        for line in [
            "# TYPE slurm_energy_node_joules_total counter".to_string(),
            format!("slurm_energy_node_joules_total{{{node}}} 1250"),
            format!("slurm_energy_node_watts{{{node}}} 250"),
            format!("slurm_energy_job_joules_total{{{node},jobid=\"7\"}} 1250"),
            format!("slurm_energy_job_watts{{{node},jobid=\"7\"}} 250"),
            format!("slurm_energy_step_joules_total{{{node},jobid=\"7\",step=\"batch\"}} 1250"),
            format!("slurm_energy_step_joules_total{{{node},jobid=\"7\",step=\"extern\"}} 1250"),
            // job 8 left 3 s ago: still there, with its final figure and no power
            format!("slurm_energy_job_joules_total{{{node},jobid=\"8\"}} 500"),
            format!("slurm_energy_job_watts{{{node},jobid=\"8\"}} 0"),
            format!("slurm_energy_step_joules_total{{{node},jobid=\"8\",step=\"0\"}} 500"),
            "slurm_energy_job_info{node=\"n1\",jobid=\"7\",user=\"al\\\"ice\"} 1".to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        // each family once, its HELP and TYPE before its samples
        for family in ["slurm_energy_job_joules_total", "slurm_energy_job_info"] {
            let help = format!("# HELP {family} ");
            assert_eq!(text.matches(&help).count(), 1, "{text}");
            let first = text.find(&format!("\n{family}{{")).expect("a sample");
            assert!(text.find(&help).expect("help") < first);
        }
    }

    #[test]
    fn a_finished_jobs_series_go_after_the_grace_period() {
        let gone = GRACE.as_secs() + 2;
        let text = render(&ledger(gone), Some(&HashMap::new()), &who());
        assert!(text.contains("jobid=\"7\""), "{text}");
        assert!(!text.contains("jobid=\"8\""), "{text}");
    }

    #[test]
    fn the_file_is_replaced_whole_and_removed_when_slurmd_stops() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("energy.prom");
        let readable = Access {
            mode: DEFAULT_MODE,
            group: None,
        };
        let mut file = MetricsFile::open(&path, readable).expect("opened");
        file.write("a 1\n");
        file.write("a 2\n");
        assert_eq!(fs::read_to_string(&path).expect("file"), "a 2\n");
        let names: Vec<_> = fs::read_dir(tmp.path()).expect("dir").flatten().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
        // node_exporter's user plants a link at the name the file once went through
        let outside = tempfile::NamedTempFile::new().expect("outside");
        fs::write(outside.path(), "root's\n").expect("outside");
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("energy.prom.tmp"))
            .expect("link");
        file.write("a 3\n");
        assert_eq!(fs::read_to_string(&path).expect("file"), "a 3\n");
        assert_eq!(
            fs::read_to_string(outside.path()).expect("outside"),
            "root's\n"
        );
        drop(file);
        assert!(!path.exists());
    }

    /// PrivateData's flags that hide jobs, each alone and all, against the admin's keys:
    /// a key the admin set wins, a key left out is private where jobs are hidden, and the
    /// log line says who can read the file and, where not all, which key lets node_exporter.
    #[test]
    fn where_private_data_hides_jobs_the_file_is_private_unless_the_admin_said_otherwise() {
        let flags = |jobs, usage, users| PrivateData { jobs, usage, users };
        let hiding = [
            flags(true, false, false),
            flags(false, true, false),
            flags(false, false, true),
            flags(true, true, true),
        ];
        // the admin's keys; (mode, owners) in effect where jobs are hidden, and where not
        type Row = (
            &'static [(&'static str, &'static str)],
            (u32, bool),
            (u32, bool),
        );
        let table: &[Row] = &[
            (&[], (0o600, false), (0o644, true)),
            (&[(GROUP_KEY, "4242")], (0o640, false), (0o644, true)),
            (&[(MODE_KEY, "0644")], (0o644, false), (0o644, true)),
            (&[(OWNERS_KEY, "yes")], (0o600, true), (0o644, true)),
            (&[(OWNERS_KEY, "no")], (0o600, false), (0o644, false)),
            (
                &[(MODE_KEY, "0640"), (OWNERS_KEY, "yes")],
                (0o640, true),
                (0o640, true),
            ),
            (
                &[(MODE_KEY, "0600"), (GROUP_KEY, "4242")],
                (0o600, false),
                (0o600, true),
            ),
        ];
        let path = Path::new("/var/lib/node_exporter/energy.prom");
        for (keys, hidden, open) in table {
            let mut values = KeyValues::new();
            for (k, v) in *keys {
                values.set(k, *v);
            }
            let config = MetricsConfig::parse(&values).expect("valid");
            let cases = hiding
                .iter()
                .map(|p| (*p, *hidden))
                .chain([(PrivateData::default(), *open)]);
            for (private, (mode, owners)) in cases {
                let at = format!("{keys:?} {private:?}");
                let effect = config.in_effect(private);
                assert_eq!((effect.mode, effect.owners), (mode, owners), "{at}");
                assert_eq!(config.access(&effect).map(|a| a.mode), Ok(mode), "{at}");
                // scontrol show config: what is in effect, and why where PrivateData chose
                let because = |admin: bool| match (private.hides_jobs(), admin) {
                    (true, false) => " (PrivateData)",
                    _ => "",
                };
                let set = |key| keys.iter().any(|(k, _)| *k == key);
                let shown = config.shown(private);
                assert_eq!(
                    shown[1],
                    (MODE_KEY, format!("{mode:04o}{}", because(set(MODE_KEY)))),
                    "{at}"
                );
                let yes = if owners { "yes" } else { "no" };
                assert_eq!(
                    shown[3],
                    (OWNERS_KEY, format!("{yes}{}", because(set(OWNERS_KEY)))),
                    "{at}"
                );
                let line = effect.describe(path, config.group.as_ref());
                assert!(line.contains(&path.display().to_string()), "{line}");
                let everyone = line.contains("readable by every user");
                assert_eq!(everyone, mode & 0o004 != 0, "{at}: {line}");
                assert_eq!(line.contains(GROUP_KEY), !everyone, "{at}: {line}");
                let named = if owners { "names each" } else { "names no" };
                assert!(line.contains(named), "{at}: {line}");
                assert!(!line.contains("  "), "one line of words: {line:?}");
            }
        }
    }

    /// The directory is swapped for a link to another after slurmd opened the file: every
    /// write still lands in the directory first opened, and slurmd's stop removes the file
    /// there, never the name the link leads to.
    #[test]
    fn a_directory_swapped_for_a_link_after_opening_is_never_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, moved, elsewhere) = (
            tmp.path().join("textfile"),
            tmp.path().join("moved"),
            tmp.path().join("elsewhere"),
        );
        fs::create_dir(&dir).expect("dir");
        fs::create_dir(&elsewhere).expect("elsewhere");
        fs::write(elsewhere.join("energy.prom"), "root's\n").expect("elsewhere's");
        let readable = Access {
            mode: DEFAULT_MODE,
            group: None,
        };
        let mut file = MetricsFile::open(&dir.join("energy.prom"), readable).expect("opened");
        file.write("a 1\n");
        fs::rename(&dir, &moved).expect("moved");
        std::os::unix::fs::symlink(&elsewhere, &dir).expect("link");
        file.write("a 2\n");
        assert_eq!(
            fs::read_to_string(moved.join("energy.prom")).expect("moved"),
            "a 2\n"
        );
        let names = |d: &Path| -> Vec<_> {
            fs::read_dir(d)
                .expect("dir")
                .flatten()
                .map(|e| e.file_name())
                .collect()
        };
        assert_eq!(
            names(&elsewhere).len(),
            1,
            "nothing created through the link"
        );
        drop(file);
        assert!(!moved.join("energy.prom").exists());
        assert_eq!(
            fs::read_to_string(elsewhere.join("energy.prom")).expect("kept"),
            "root's\n"
        );
    }

    /// A link in the file's path, as an ancestor or as the directory itself: refused, the
    /// error naming the key and the link, and nothing written where it points.
    #[test]
    fn a_link_in_the_files_path_is_refused_naming_the_key() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = tmp.path().join("real");
        fs::create_dir_all(real.join("textfile")).expect("dirs");
        let ancestor = tmp.path().join("ancestor");
        std::os::unix::fs::symlink(&real, &ancestor).expect("link");
        let directory = tmp.path().join("directory");
        std::os::unix::fs::symlink(real.join("textfile"), &directory).expect("link");
        let readable = Access {
            mode: DEFAULT_MODE,
            group: None,
        };
        for (path, link) in [
            (ancestor.join("textfile/energy.prom"), &ancestor),
            (directory.join("energy.prom"), &directory),
        ] {
            let Err(e) = MetricsFile::open(&path, readable) else {
                panic!("{} opened through a link", path.display());
            };
            assert_eq!(
                (e.key, e.value.as_str()),
                (FILE_KEY, path.to_str().expect("utf-8"))
            );
            let text = e.to_string();
            assert!(
                text.contains(&format!("{} is a symbolic link", link.display())),
                "{text}"
            );
        }
        assert_eq!(fs::read_dir(real.join("textfile")).expect("dir").count(), 0);
    }
}
