//! Cumulative joules of the node and of each job and step on it, updated at each sample of
//! the node's meter, and the file slurmd publishes them in for the node's slurmstepds.
//!
//! The file is JSON with a version, written to a temporary file renamed over the old one
//! (`crate::replace`), so a reader sees a whole ledger or the previous one, and a slurmd that restarts (or crashes)
//! continues from the last one written. It is not synced to disk every second: what must
//! survive is slurmd, not the node (a node that goes down takes its jobs with it), and a
//! ledger left torn by a power cut is refused on load and started anew, with a new epoch
//! that tells its readers their old figures are not continued in it.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod account;
mod charge;
mod file;
mod floor;
mod number;
mod observation;
mod parts;

pub use account::Account;
pub(crate) use account::JobView;
pub(crate) use file::Refused;
pub use floor::SUSTAIN as STATIC_POWER_SUSTAIN_SECS;
pub(crate) use observation::{Observation, ObservedJob, ObservedStep, Part};
pub use parts::{Breakdown, IdleHeld};

use crate::attribution::StepId;
use crate::replace::{Access, replace};
use crate::source::HardwareCount;
use crate::trusted_dir::{self, DirError, NO_WRITE};
use account::{Job, Rate, Step};
// the tests (`tests.rs`, through `use super::*`) build observations of these, whose types
// moved with `Observation` to `observation`
#[cfg(test)]
use crate::attribution::{cgroup::JobCounters, holders::ObservedDevice};
use floor::Floor;
use parts::PartValues;

/// How old the ledger may get while slurmd samples normally.
pub(crate) const LEDGER_PERIOD: Duration = Duration::from_secs(1);

/// Where the ledger of the plugin stacked at `context_id` lives.
pub fn ledger_path(spool: &Path, context_id: u16) -> PathBuf {
    spool.join(format!("energy-ledger.{context_id}.json"))
}

/// The directory of the ledger at `path`: SlurmdSpoolDir.
pub(crate) fn spool_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The file format; a reader refuses any other.
pub(crate) const VERSION: u64 = 2;
/// A job that left the node is kept this long, so its slurmstepds' last reads find it.
const KEEP_GONE: Duration = Duration::from_secs(300);
/// A step that ended while its job goes on is kept this long at most, and only the
/// [`ENDED_STEPS_KEPT`] that ended last: the ledger is rewritten every second and read
/// whole by every slurmstepd, and a job may run thousands of steps (Slurm's MaxStepCount
/// is 40 000), so a job's entry must not grow with the steps it ran. The ended step needs
/// none of it for its own figure: its slurmstepd takes its last figure as its tasks are
/// removed, from a sample it rang for while its socket still showed it present. What is
/// kept serves readers that come later (a scrape of the metrics file, a slurmstepd that
/// was slow to read), for a minute: a Prometheus scrape at its default interval. The job's
/// own account is apart from its steps' and keeps their energy. A ledger thus holds, per
/// job present, its running steps and at most [`ENDED_STEPS_KEPT`] more: its size is
/// O(running steps + a constant per job), plus the jobs gone less than [`KEEP_GONE`] ago
/// as they were when they left.
const KEEP_ENDED_STEP: Duration = Duration::from_secs(60);
/// How many ended steps a job present keeps at most ([`KEEP_ENDED_STEP`]): a few dozen,
/// enough for the steps of a job array's task or a workflow that end within one scrape.
const ENDED_STEPS_KEPT: usize = 32;
/// After a slurmd restart, the time it was away is the meter's own where its counts tell
/// it ([`crate::source::bridge`]); else it is estimated at the power each job had, up to this long; a
/// longer absence is not guessed.
pub(crate) const MAX_GAP: Duration = Duration::from_secs(300);
/// A step seen begun this much later than the step of the same name the ledger holds is
/// another run of its job (requeued, or its id come round again). More than the start of
/// one slurmstepd as read from its socket and from its process can differ (a slurmd
/// started again may first know a step by its socket), and less than any requeue takes:
/// Slurm starts a requeued job no sooner than its credential's lifetime (AuthInfo's
/// `cred_expire`, at least 5 s) and a second after its run before ended.
pub(crate) const RUN_SLACK: f64 = 5.0;

/// Why the energy ledger could not be read or published.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The ledger's path.
        path: String,
        /// The error reading it.
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The ledger's path.
        path: String,
        /// The error writing it.
        source: std::io::Error,
    },
    /// The file is not a ledger.
    #[error("{path} is not an energy ledger (not whole JSON of the expected fields)")]
    Format {
        /// The file's path.
        path: String,
    },
    /// The ledger is of another version.
    #[error("{path} is an energy ledger of version {found}, not {VERSION}")]
    Version {
        /// The ledger's path.
        path: String,
        /// The version it says.
        found: String,
    },
    /// Whoever can write SlurmdSpoolDir can put a file of theirs in the ledger's place, or
    /// move root's away: no figure is taken from it, and none published there.
    #[error(
        "SlurmdSpoolDir: {0}; no energy ledger is published or read there (anyone who can \
         write it could put their own in its place)"
    )]
    Spool(#[from] DirError),
    /// The file is a link, or not slurmd's own: not read.
    #[error(
        "{path} is a link, or not a regular file of slurmd's user: not read as the energy ledger"
    )]
    Untrusted {
        /// The file's path.
        path: String,
    },
}

/// How a ledger splits the node's energy among its jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Split {
    /// Not at all: the ledger keeps the node's account, and a step's figure is the node's
    /// energy since the step began.
    Node,
    /// Among the jobs by what they hold and use ([`crate::attribution::model`]), at this static power
    /// (learned when `None`).
    Shared { idle_watts: Option<f64> },
    /// Each device (GPU) among the jobs holding it ([`ObservedStep::holds`]): alone, a job
    /// gets it whole; shared, its static power (`idle_watts` each, learned per device when
    /// `None`) by the shares held and the rest by the holders' use ([`crate::attribution::model::split_device`]). A
    /// device nobody holds is nobody's.
    Devices { idle_watts: Option<f64> },
}

impl Split {
    /// Its name, as the ledger's file and the metrics label it: `node`, `shared` or
    /// `devices`.
    pub fn name(&self) -> &'static str {
        match self {
            Split::Node => "node",
            Split::Shared { .. } => "shared",
            Split::Devices { .. } => "devices",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Sampled {
    at: Instant,
    node_uj: u64,
}

/// The node's ledger.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// When this ledger was begun, in microseconds of Unix time (an integer, exact through
    /// the file): a reader that sees another epoch knows the figures it had are not
    /// continued here.
    epoch: u64,
    /// The node's energy since the epoch, continued across slurmd restarts.
    node: Account,
    /// The node's parts at the last sample.
    parts: Vec<Part>,
    jobs: BTreeMap<u32, Job>,
    /// The node's static power as learned: the lowest power it held ([`floor`]).
    floor: Floor,
    /// Unix time of the last sample (kept in the file).
    sampled_at: f64,
    /// The previous sample of this process's meter (not kept: the meter restarts with it).
    last: Option<Sampled>,
    node_rate: Rate,
    /// The last interval's own power: a job arriving in the next one is charged from its
    /// arrival with the piece before taken at it, not at a power averaged over a window that
    /// may reach back before a change.
    interval_watts: Option<f64>,
    /// The recent intervals' energy that no job got (nobody was there), for a job found
    /// after its start: it is charged the part of that energy since it began.
    unassigned: VecDeque<Piece>,
    /// In node mode, the recent intervals' energy, for a job found after its start: it is
    /// charged the node's energy since it began.
    recent: VecDeque<Piece>,
    /// Each device's state, by position ([`Split::Devices`]; not kept in the file).
    devices: BTreeMap<u32, DeviceState>,
    /// What the node's meter reads (the plugin and its source), for whoever inspects the
    /// node (`senergy check`); kept in the file, empty where unknown.
    source: String,
    /// The hardware's counts at the last settled sample (kept in the file: a slurmd started
    /// again bridges the time it was away with their rise).
    counts: Vec<HardwareCount>,
    /// How its last sample split the node's energy ([`Split::name`]; kept in the file):
    /// each step reads its figure as the slurmd that writes the ledger splits, whatever the
    /// acct_gather.conf it read itself says. Empty in a ledger of before.
    split: String,
    /// The parts' values at this process's last sample ([`parts`]; not kept: the meter
    /// restarts with it, and the first interval after is of unknown parts).
    part_values: Option<PartValues>,
}

/// What the ledger keeps of one device between samples.
#[derive(Debug, Clone, Default)]
struct DeviceState {
    /// Its energy at the last sample.
    last_uj: Option<u64>,
    /// Its static power as learned: the lowest power it held ([`floor`]).
    floor: Floor,
    /// Its recent energy that nobody held it for.
    unassigned: VecDeque<Piece>,
    /// The present jobs seen using it without holding it, each logged once.
    unheld_users: HashSet<u32>,
}

/// The node's energy of an interval (Unix times), or the part of it that no job got.
#[derive(Debug, Clone, Copy)]
struct Piece {
    from: f64,
    to: f64,
    joules: f64,
}

impl Piece {
    /// Its part within `[from, to]`, spread evenly over the interval.
    fn within(&self, from: f64, to: f64) -> f64 {
        let overlap = (self.to.min(to) - self.from.max(from)).max(0.0);
        let len = self.to - self.from;
        if len > 0.0 {
            self.joules * overlap / len
        } else {
            0.0
        }
    }
}

/// How far back a job found late is charged what nobody got.
const UNASSIGNED_KEPT: f64 = 60.0;

/// Forgets what nobody got longer ago than [`UNASSIGNED_KEPT`].
fn keep_recent(unassigned: &mut VecDeque<Piece>, now: f64) {
    while unassigned
        .front()
        .is_some_and(|u| u.to < now - UNASSIGNED_KEPT)
    {
        unassigned.pop_front();
    }
}

/// `t` in seconds of Unix time, as the ledger writes times.
pub fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Ledger {
    /// The node's static power as learned (`floor`), where the admin set none.
    pub fn learned_idle_watts(&self) -> Option<f64> {
        self.floor.watts()
    }

    /// When this ledger was begun, in microseconds of Unix time.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The node's account.
    pub fn node(&self) -> Account {
        self.node
    }

    /// The parts of the node the source measures beside it.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The jobs it keeps (present, or gone less than `KEEP_GONE` ago), in job order.
    pub fn jobs(&self) -> impl Iterator<Item = JobView<'_>> {
        self.jobs.iter().map(|(&id, job)| JobView { id, job })
    }

    /// Job `job`'s account, where kept.
    pub fn job(&self, job: u32) -> Option<Account> {
        self.jobs.get(&job).map(|j| j.account)
    }

    /// Step `step` of job `job`'s account, where kept.
    pub fn step(&self, job: u32, step: StepId) -> Option<Account> {
        self.jobs.get(&job)?.steps.get(&step).map(|s| s.account)
    }

    /// What the node's meter reads, as its keeper described it; empty where unknown.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The plugin that measures the node (`rust_ipmi`): what its source says before the
    /// meter's own description, which names a BMC's address and user and is root's to
    /// read (the ledger file is 0600), not a job owner's.
    pub fn plugin(&self) -> &str {
        self.source
            .split_once(": ")
            .map_or(self.source.as_str(), |(plugin, _)| plugin)
    }

    /// Says what the node's meter reads (the plugin and its source).
    pub fn describe_source(&mut self, source: String) {
        self.source = source;
    }

    /// Unix time of the last sample, in seconds.
    pub fn sampled_at(&self) -> f64 {
        self.sampled_at
    }

    /// Whether the slurmd that wrote it gives each step its own share (`Split::Shared`,
    /// `Split::Devices`) rather than the node's energy (`Split::Node`); `None` for a
    /// ledger that does not say (written by a plugin of before).
    pub fn gives_shares(&self) -> Option<bool> {
        match self.split.as_str() {
            "node" => Some(false),
            "shared" | "devices" => Some(true),
            _ => None,
        }
    }

    /// Adds one sample.
    pub fn update(&mut self, obs: &Observation, split: Split) {
        let now = unix(obs.wall);
        if self.epoch == 0 {
            self.epoch = (now * 1e6) as u64;
            self.node.since = now;
        }
        self.forget_earlier_runs(obs);
        match self.last {
            Some(prev) => {
                let secs = obs.at.saturating_duration_since(prev.at).as_secs_f64();
                let joules = obs.node_uj.saturating_sub(prev.node_uj) as f64 / 1e6;
                self.charge_interval(secs, joules, obs, split);
            }
            // the first sample of this process, of a ledger loaded from the file: the time
            // slurmd was away
            None if self.sampled_at > 0.0 => self.charge_away(obs, now, split),
            None => {}
        }
        // only a settled sample's counts: energy a held read counts later is not in them
        self.counts = match obs.settled {
            true => obs.counts.clone(),
            false => Vec::new(),
        };
        self.observe_counters(obs, now);
        for d in &obs.devices {
            self.devices.entry(d.position).or_default().last_uj = Some(d.energy_uj);
        }
        self.parts.clone_from(&obs.parts);
        self.part_values = Some(PartValues::of(obs));
        // only a job seen now: one that left keeps the steps it had, with it, for its
        // slurmstepds' last reads
        for o in &obs.jobs {
            if let Some(job) = self.jobs.get_mut(&o.job) {
                job.forget_ended_steps(now);
            }
        }
        self.jobs
            .retain(|_, j| now - j.last_seen <= KEEP_GONE.as_secs_f64());
        self.sampled_at = now;
        if self.split != split.name() {
            self.split = split.name().to_string();
        }
        self.last = Some(Sampled {
            at: obs.at,
            node_uj: obs.node_uj,
        });
    }

    fn observe_counters(&mut self, obs: &Observation, now: f64) {
        for o in &obs.jobs {
            let job = self.jobs.entry(o.job).or_insert_with(|| Job::new(o, now));
            job.last_seen = now;
            job.usage_ns = o.counters.map(|c| c.usage_ns);
            for s in &o.steps {
                let step = job.steps.entry(s.id).or_insert_with(|| Step {
                    account: Account::since(s.started.map_or(now, unix).min(now)),
                    ..Step::default()
                });
                step.usage_ns = s.usage_ns;
                step.last_seen = now;
            }
        }
    }

    /// The ledger as the file holds it ([`file`]): JSON written straight from the ledger
    /// (a sample of a node with hundreds of jobs must cost microseconds per job, not a tree
    /// of values per job). Numbers are finite (shares of finite energies over positive
    /// intervals), written as the shortest text that reads back to the same value.
    pub fn to_text(&self) -> String {
        serde_json::to_string(&file::Out::from(self)).unwrap_or_default()
    }

    /// The ledger in `text` ([`file`]), or why not.
    pub fn parse(text: &[u8]) -> Result<Self, Refused> {
        file::parse(text).map(|f| Self {
            epoch: f.epoch,
            node: f.node,
            parts: f.parts,
            jobs: f
                .jobs
                .into_iter()
                .map(|j| {
                    let steps = j
                        .steps
                        .into_iter()
                        .map(|s| {
                            let step = Step {
                                account: s.account,
                                // a ledger written before steps were dated: seen with their job
                                last_seen: s.last_seen.unwrap_or(j.last_seen),
                                usage_ns: s.usage_ns,
                                breakdown: Breakdown {
                                    parts: s.parts,
                                    idle_held: s.idle_held,
                                },
                                ..Step::default()
                            };
                            (StepId(s.step), step)
                        })
                        .collect();
                    let job = Job {
                        account: j.account,
                        steps,
                        last_seen: j.last_seen,
                        usage_ns: j.usage_ns,
                        breakdown: Breakdown {
                            parts: j.parts,
                            idle_held: j.idle_held,
                        },
                        ..Job::default()
                    };
                    (j.job, job)
                })
                .collect(),
            floor: Floor::from_learned(f.floor_watts),
            sampled_at: f.sampled_at,
            source: f.source,
            counts: f.counts,
            split: f.split,
            ..Self::default()
        })
    }

    /// The ledger in `path`, `None` when there is none. It is read only from a directory
    /// no one else can write (`trusted_dir`), never through a link, and only when it is
    /// slurmd's user's own file (a planted file is none of slurmd's).
    pub fn load(path: &Path) -> Result<Option<Self>, LedgerError> {
        let Some(file) = open_trusted(path, false)? else {
            return Ok(None);
        };
        let mut text = Vec::new();
        (&file)
            .read_to_end(&mut text)
            .map_err(|source| LedgerError::Read {
                path: path.display().to_string(),
                source,
            })?;
        let path = path.display().to_string();
        match Self::parse(&text) {
            Ok(ledger) => Ok(Some(ledger)),
            Err(file::Refused::Version(found)) => Err(LedgerError::Version { path, found }),
            Err(file::Refused::Format) => Err(LedgerError::Format { path }),
        }
    }

    /// Replaces `path` with this ledger, readable by root only (`replace`), in a
    /// directory no one else can write (`trusted_dir`): its readers refuse any other.
    pub fn store(&self, path: &Path) -> Result<(), LedgerError> {
        trusted_dir::check(spool_of(path), NO_WRITE)?;
        let access = Access {
            mode: 0o600,
            group: None,
        };
        replace(path, self.to_text().as_bytes(), access).map_err(|source| LedgerError::Write {
            path: path.display().to_string(),
            source,
        })
    }
}

/// Opens slurmd's file `path` in SlurmdSpoolDir (the ledger, its slots) to read, or to
/// read and write if `write`; `None` when there is none. Only from a directory no one else
/// can write ([`trusted_dir`]), never through a link, and only slurmd's user's own regular
/// file (a planted file is none of slurmd's).
pub(crate) fn open_trusted(path: &Path, write: bool) -> Result<Option<fs::File>, LedgerError> {
    let read = |source| LedgerError::Read {
        path: path.display().to_string(),
        source,
    };
    // never through a link; a FIFO in its place does not hold the open (its reader
    // would wait for a writer): it is opened at once, and refused as no regular file
    let file = fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(file) => file,
        // none there: where slurmd would refuse the directory, that is why (`senergy
        // check` says the rule, not only that there is no ledger)
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            trusted_dir::check(spool_of(path), NO_WRITE)?;
            return Ok(None);
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(LedgerError::Untrusted {
                path: path.display().to_string(),
            });
        }
        Err(e) => return Err(read(e)),
    };
    // checked once open: a reader that may not open it (`senergy check` run by a user)
    // is told that, not that the directory is not its own
    trusted_dir::check(spool_of(path), NO_WRITE)?;
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(LedgerError::Untrusted {
            path: path.display().to_string(),
        });
    }
    Ok(Some(file))
}

#[cfg(test)]
pub(crate) mod tests;
