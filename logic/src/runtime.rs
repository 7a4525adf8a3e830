//! One plugin's state in one process, and what each of Slurm's calls does with it.
//!
//! This is the plugin's behaviour without Slurm: which daemon it runs in and how it reaches
//! slurmd are told by a [`Host`] (Slurm's in the crate `slurm-energy`, a fake in tests), and
//! Slurm's `data_type`s arrive as [`Query`]/[`Update`]. That crate's `ffi` only converts
//! pointers and calls.
//!
//! Every call runs behind the one panic guard and recovers a poisoned lock: a panic in a
//! source makes that call return an error, and the next call works.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::accounting::{Baseline, EnergyRecord};
use crate::attribution::grant::Grant;
use crate::attribution::gres::GresOrder;
use crate::attribution::job_record::{LoadJob, StepRecordConfig};
use crate::attribution::procs::Procs;
use crate::attribution::{self, Attribution, Mode, Site, StepId};
use crate::config::KeyValues;
use crate::family;
use crate::guard::guard;
use crate::ledger::doorbell::{self, Doorbell};
use crate::ledger::{Keeper, StepFigure, ledger_path};
use crate::meter::Meter;
use crate::metrics::{self, MetricsConfig, PrivateData};
use crate::plugin::Plugin;

/// The Slurm program the plugin runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    Slurmd,
    Slurmstepd,
    /// slurmctld or a client: loads the plugin for its configuration only, never measures.
    Other,
}

/// What the runtime needs from its surroundings.
pub trait Host: Send + Sync + 'static {
    fn daemon(&self) -> Daemon;

    /// SlurmdSpoolDir, expanded for this node: where slurmd keeps the node's energy ledger
    /// and its slurmstepds read it.
    fn spool_dir(&self) -> Result<PathBuf, String> {
        Err("not in a Slurm daemon".into())
    }

    /// How many energy plugins `AcctGatherEnergyType` stacks (Slurm sums them).
    fn energy_plugins(&self) -> usize {
        1
    }

    /// Where `EnergyAttribution=shared` keeps the node's ledger and finds its jobs; an
    /// error says what is missing.
    fn attribution_site(&self) -> Result<Site, String> {
        Err("not in a Slurm daemon".into())
    }

    /// How slurmd numbers this node's GPUs (from gres.conf); an error says why unknown.
    fn gres_order(&self) -> Result<GresOrder, String> {
        Err("not in a Slurm daemon".into())
    }

    /// This node's name.
    fn node_name(&self) -> String {
        String::new()
    }

    /// The plugin's name after `acct_gather_energy/` (`rust_rapl`).
    fn plugin_kind(&self) -> &'static str {
        ""
    }

    /// What slurm.conf's `PrivateData` hides from other users.
    fn private_data(&self) -> PrivateData {
        PrivateData::default()
    }

    /// What Slurm's step record at `address` (as slurmstepd passes it at
    /// `ENERGY_DATA_STEP_PTR`) grants this slurmstepd's step, or why it is not read.
    fn step_record(&self, _address: usize) -> Result<Grant, RecordRefused> {
        Err(RecordRefused::Failed("not in slurmstepd".into()))
    }

    /// This slurmstepd's job and step (its title).
    fn own_step(&self) -> Option<(u32, StepId)> {
        None
    }

    /// How to ask slurmctld for its record of a job; `None` where none can be asked.
    fn job_records(&self) -> Option<LoadJob> {
        None
    }
}

/// What `get_data` asks for (Slurm's `ENERGY_DATA_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    JoulesTask,
    NodeEnergy,
    NodeEnergyUp,
    Struct,
    LastPoll,
    SensorCount,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Record(EnergyRecord),
    /// The node's record, then one per part of the node the source measures beside it
    /// (pm_counters' cpu, memory, accelN): as many as [`Answer::SensorCount`] says.
    Records(Vec<EnergyRecord>),
    PollTime(i64),
    SensorCount(u16),
}

/// What `set_data` tells (Slurm's `ENERGY_DATA_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    Reconfig,
    /// `ENERGY_DATA_STEP_PTR`: the address of slurmstepd's step record, never dereferenced
    /// here ([`Host::step_record`]): what it says the step was granted is published for
    /// slurmd (`step_grant`).
    StepRecord(usize),
    /// Send a `--profile=energy` sample.
    Profile,
}

/// A power sample for the profile plugin: the node's, and its parts'.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileSample {
    pub watts: u32,
    pub parts: Vec<(&'static str, EnergyRecord)>,
    pub poll_time: i64,
}

/// The call panicked; the panic was logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("internal error (logged)")]
pub struct CallFailed;

/// How fresh a figure must be.
#[derive(Clone, Copy)]
enum Read {
    /// Read the hardware now: a step's figure at its last poll is its final energy.
    Now,
    /// The sampler's reading if it is less than a period old (it always is, unless the
    /// sampler could not start): node figures for slurmd's polls, at no cost per poll.
    Recent,
    /// The latest reading, whatever its age.
    Cached,
}

enum Config<C> {
    /// conf_set has not run yet: defaults apply.
    Unset,
    Valid(C),
    /// The error was logged; the plugin reports no energy.
    Invalid,
}

enum Hardware {
    NotOpened,
    /// Not measured in this process (slurmctld), or the reason was logged once.
    Unavailable,
    Open(Meter),
}

struct State<P: Plugin> {
    config: Config<P::Config>,
    /// How the node's energy is attributed; a bad value was logged and is `node`.
    attribution: Attribution,
    /// Where slurmd writes the metrics file; a bad value was logged and is none.
    metrics: MetricsConfig,
    /// Whether Slurm's step record is read; a bad value was logged and is `no`.
    step_record: StepRecordConfig,
    /// This plugin's index among stacked energy plugins, for asking slurmd.
    context_id: u16,
    hardware: Hardware,
    /// In slurmd, where the node's steps ask for a fresh ledger at their edges.
    doorbell: Option<Doorbell>,
    /// This process's step (one slurmstepd runs one step): energy since the process
    /// started measuring. Kept here rather than in the caller's struct, so stacked plugins
    /// and task exits cannot reset it.
    step: Option<Baseline>,
}

/// The static power slurmd's ledger splits: for a source of allocated devices each
/// device's, from the plugin's own key; otherwise the node meter's
/// (`EnergyAttributionIdleWatts`). `None`: learned.
fn ledger_idle_watts<P: Plugin>(attribution: &Attribution, config: &P::Config) -> Option<f64> {
    if P::ALLOCATED_DEVICES {
        P::device_idle_watts(config)
    } else {
        attribution.idle_watts
    }
}

/// Whether the plugin in `daemon` takes its figure from slurmd's ledger rather than the
/// source: in every slurmstepd.
fn reads_ledger(daemon: Daemon) -> bool {
    daemon == Daemon::Slurmstepd
}

fn measures(daemon: Daemon) -> bool {
    matches!(daemon, Daemon::Slurmd | Daemon::Slurmstepd)
}

impl<P: Plugin> State<P> {
    fn new() -> Self {
        Self {
            config: Config::Unset,
            attribution: Attribution::default(),
            metrics: MetricsConfig::default(),
            step_record: StepRecordConfig::default(),
            context_id: 0,
            hardware: Hardware::NotOpened,
            doorbell: None,
            step: None,
        }
    }

    fn open(&mut self, host: &dyn Host) {
        let daemon = host.daemon();
        if !measures(daemon) {
            self.hardware = Hardware::Unavailable;
            return;
        }
        let config = match &self.config {
            Config::Valid(c) => c.clone(),
            Config::Unset => P::Config::default(),
            Config::Invalid => {
                self.hardware = Hardware::Unavailable;
                return;
            }
        };
        let site = self.shared_site(host);
        // one meter per node: slurmd's reads the source and keeps the ledger, each
        // slurmstepd reads its figure there (its share, or the node's since it began)
        let meter = if reads_ledger(daemon) {
            host.spool_dir().map(|spool| {
                let figure = StepFigure::from_path(
                    &ledger_path(&spool, self.context_id),
                    &Procs::from_path(Path::new(attribution::procs::PROC_ROOT)),
                    std::process::id(),
                    site.is_some() || P::ALLOCATED_DEVICES,
                );
                Meter::new(if host.energy_plugins() > 1 {
                    figure.stacked()
                } else {
                    figure
                })
            })
        } else {
            let node = host.node_name();
            let mine = P::for_node(&config, &node);
            if mine != config {
                log::info!(
                    "%n in acct_gather.conf is this node's name, {node}; %h this host's, {}",
                    crate::source::host_name()
                );
            }
            P::open(&mine).map(Meter::new)
        };
        self.hardware = match meter {
            Ok(mut meter) => {
                if daemon == Daemon::Slurmd {
                    let idle_watts = ledger_idle_watts::<P>(&self.attribution, &config);
                    self.doorbell = self.keep_ledger(host, site.as_ref(), idle_watts, &mut meter);
                }
                // Threads may start here: slurmd loads this configuration after it
                // daemonizes, and slurmstepd never forks without exec afterwards.
                meter.ensure_sampling();
                Hardware::Open(meter)
            }
            Err(why) => {
                log::error!(
                    "no energy can be measured on this node: {why}; energy is reported as unavailable"
                );
                Hardware::Unavailable
            }
        };
    }

    /// In slurmd: the keeper of the node's ledger, told each of the meter's samples, and
    /// the doorbell by which steps ask for one now. Errors are logged.
    fn keep_ledger(
        &self,
        host: &dyn Host,
        site: Option<&Site>,
        idle_watts: Option<f64>,
        meter: &mut Meter,
    ) -> Option<Doorbell> {
        let keeper = match site {
            _ if P::ALLOCATED_DEVICES => host.spool_dir().and_then(|spool| {
                let order = host.gres_order().unwrap_or_else(|why| {
                    log::error!(
                        "{why}; GPUs are matched to Slurm's GRES indexes in the library's order"
                    );
                    GresOrder::Detected
                });
                let procs = Path::new(attribution::procs::PROC_ROOT);
                Keeper::devices(&spool, self.context_id, order, idle_watts, procs)
            }),
            Some(site) => Keeper::shared(site, self.context_id, idle_watts),
            None => host
                .spool_dir()
                .and_then(|spool| Keeper::node(&spool, self.context_id)),
        };
        let mut keeper = keeper
            .inspect_err(|why| {
                log::error!("no energy ledger: {why}; this node's steps report no energy")
            })
            .ok()?;
        keeper.describe_source(format!("{}: {}", host.plugin_kind(), meter.describe()));
        let stacked = host.energy_plugins() > 1;
        let node = host.node_name();
        if let Some(path) = self.metrics.path_for(host.plugin_kind(), stacked, &node) {
            let effect = self.metrics.in_effect(host.private_data());
            let opened = self
                .metrics
                .access(&effect)
                .and_then(|access| metrics::MetricsFile::open(&path, access));
            match opened {
                Ok(mut file) => {
                    log::info!("writing energy metrics to {}", path.display());
                    log::info!("{}", effect.describe(&path, self.metrics.group.as_ref()));
                    let owners = effect.owners;
                    let who = metrics::Identity {
                        node: node.clone(),
                        source: host.plugin_kind().to_string(),
                        attribution: keeper.attribution().to_string(),
                    };
                    keeper = keeper.publishing(
                        owners,
                        Box::new(move |ledger, owners| {
                            file.write(&metrics::render(ledger, owners, &who));
                        }),
                    );
                }
                Err(e) => log::error!("{e}; no metrics file is written"),
            }
        }
        let (pace, book, wake) = (keeper.pace(), keeper.book(), meter.waker());
        let bell = doorbell::doorbell_path(keeper.path());
        meter.observe(Box::new(move |a, reading| keeper.on_sample(a, reading)));
        // a ring wakes the sampler, whose sample the keeper takes as the update asked for
        Doorbell::open(&bell, pace, book, wake)
            .inspect_err(|e| {
                log::error!(
                    "{e}; steps' figures are brought forward from the last ledger at their ends"
                )
            })
            .ok()
    }

    /// Where the node's ledger is, in `shared` mode when the node has what it takes; slurmd
    /// and its slurmstepds decide alike, so both split or neither does.
    fn shared_site(&self, host: &dyn Host) -> Option<Site> {
        if self.attribution.mode != Mode::Shared {
            return None;
        }
        if P::ALLOCATED_DEVICES {
            log::info!(
                "{}=shared: each job is charged the GPUs it holds, as in node mode",
                attribution::MODE_KEY
            );
            return None;
        }
        match host.attribution_site() {
            Ok(site) => Some(site),
            Err(why) => {
                log::error!(
                    "{}=shared: {why}; every step gets the node's energy",
                    attribution::MODE_KEY
                );
                None
            }
        }
    }

    /// The meter, opened on first use, with its sampler running.
    fn meter(&mut self, host: &dyn Host) -> Option<&mut Meter> {
        if matches!(self.hardware, Hardware::NotOpened) {
            self.open(host);
        }
        match &mut self.hardware {
            Hardware::Open(meter) => {
                meter.ensure_sampling();
                Some(meter)
            }
            _ => None,
        }
    }

    /// The node's record, from a reading as fresh as `read` asks.
    fn node_record(&mut self, host: &dyn Host, read: Read) -> EnergyRecord {
        match self.meter(host) {
            Some(meter) => {
                let accounting = match read {
                    Read::Now => meter.refresh(),
                    Read::Recent => meter.recent(),
                    Read::Cached => meter.snapshot(),
                };
                accounting.node_record(Instant::now(), meter.stale_after())
            }
            None => EnergyRecord::unavailable(0),
        }
    }

    /// The records of the node's parts. Their number is fixed by the meter's first
    /// reading, taken when it opens, so SENSOR_CNT and the array it sizes agree.
    fn sensor_records(&mut self, host: &dyn Host) -> Vec<(&'static str, EnergyRecord)> {
        match self.meter(host) {
            Some(meter) => meter
                .snapshot()
                .sensor_records(Instant::now(), meter.stale_after()),
            None => Vec::new(),
        }
    }

    fn step_record(&mut self, host: &dyn Host) -> EnergyRecord {
        let Some(meter) = self.meter(host) else {
            return EnergyRecord::unavailable(0);
        };
        let accounting = meter.refresh();
        let (now, stale) = (Instant::now(), meter.stale_after());
        if self.step.is_none() {
            // a figure from the ledger is the step's own already (in shared mode it may
            // hold a share counted before this process could first read the ledger); a
            // source read here counts from its first reading
            self.step = if reads_ledger(host.daemon()) {
                Baseline::from_zero(&accounting)
            } else {
                Baseline::start(&accounting)
            };
        }
        match &mut self.step {
            Some(step) => step.record(&accounting, now, stale),
            None => accounting.node_record(now, stale),
        }
    }

    fn configure(&mut self, host: &dyn Host, context_id: u16, values: &KeyValues) {
        self.context_id = context_id;
        // another plugin's keys are registered so that Slurm accepts one file for all
        for (key, _) in values.iter().filter(|(k, _)| !family::reads(P::KEYS, k)) {
            if let Some(owner) = family::owner(key) {
                log::debug!(
                    "acct_gather.conf: {key} is {owner}'s; {} ignores it",
                    host.plugin_kind()
                );
            }
        }
        let attribution = Attribution::parse(values).unwrap_or_else(|e| {
            log::error!("{e}; every step gets the node's energy");
            Attribution::default()
        });
        let metrics = MetricsConfig::parse(values).unwrap_or_else(|e| {
            log::error!("{e}; no metrics file is written");
            MetricsConfig::default()
        });
        let step_record = StepRecordConfig::parse(values).unwrap_or_else(|e| {
            // an admin who set the key meant to change it from its default
            log::error!("{e}; Slurm's step record is not read");
            StepRecordConfig { read: false }
        });
        let parsed = P::parse_config(values);
        if let Hardware::Open(_) = self.hardware {
            // reconfigure: keep measuring so the node's energy does not restart
            if !matches!(&self.config, Config::Valid(c) if Ok(c) == parsed.as_ref()) {
                log::info!(
                    "acct_gather.conf changed; the new values take effect when slurmd restarts"
                );
            }
            if let Err(e) = parsed {
                log::error!("{e}");
            }
            return;
        }
        self.attribution = attribution;
        self.metrics = metrics;
        self.step_record = step_record;
        self.config = match parsed {
            Ok(c) => Config::Valid(c),
            Err(e) => {
                log::error!("{e}; this node reports no energy until it is fixed");
                Config::Invalid
            }
        };
        // Open now: slurmstepd reads acct_gather.conf before it changes identity, and
        // the devices need root.
        if measures(host.daemon()) {
            self.open(host);
        }
    }

    fn shown_config(&self, host: &dyn Host) -> Vec<(&'static str, String)> {
        let mut shown = match &self.config {
            Config::Valid(c) => P::show_config(c),
            Config::Unset => P::show_config(&P::Config::default()),
            Config::Invalid => P::KEYS
                .iter()
                .map(|&k| (k, "(invalid, see the log)".to_string()))
                .collect(),
        };
        shown.extend(self.attribution.show());
        shown.extend(self.step_record.show());
        shown.extend(self.metrics.shown(host.private_data()));
        shown
    }
}

/// A step's figure as slurmstepd's jobacct_gather must get it. With stacked plugins,
/// Slurm's `acct_gather_energy_g_get_sum` adds every plugin's figure to the caller's
/// struct without clearing it, and jobacct_gather passes the task's record, which holds
/// the previous poll's sum: the step's energy would grow by the whole figure at every
/// poll. Each stacked plugin therefore answers with its energy since its previous
/// answer, and Slurm's running sum is the step's energy (a single plugin's figure
/// replaces the record, so it stays the total).
fn stacked_step(host: &dyn Host, record: EnergyRecord) -> EnergyRecord {
    if host.daemon() != Daemon::Slurmstepd || host.energy_plugins() < 2 {
        return record;
    }
    EnergyRecord {
        consumed_j: record.consumed_j.map(|_| record.base_consumed_j),
        ..record
    }
}

/// One plugin in one process: Slurm's calls, as safe functions.
pub struct Runtime<P: Plugin, H: Host> {
    host: H,
    state: Mutex<Option<State<P>>>,
}

impl<P: Plugin, H: Host> Runtime<P, H> {
    pub const fn new(host: H) -> Self {
        Self {
            host,
            state: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<State<P>>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the state (created if needed) behind the panic guard.
    fn with_state<R>(
        &self,
        what: &str,
        f: impl FnOnce(&mut State<P>, &dyn Host) -> R,
    ) -> Result<R, CallFailed> {
        guard(what, Err(CallFailed), || {
            let mut state = self.lock();
            Ok(f(state.get_or_insert_with(State::new), &self.host))
        })
    }

    /// `init`: `plugin_dir` is where the plugin's `.so` was loaded from.
    pub fn init(&self, plugin_dir: Option<&Path>) -> Result<(), CallFailed> {
        self.with_state("init", |_, _| {
            if let Some(dir) = plugin_dir {
                P::plugin_located(dir);
            }
        })
    }

    /// `fini`: stops and joins every thread before Slurm unloads the plugin.
    pub fn fini(&self) -> Result<(), CallFailed> {
        guard("fini", Err(CallFailed), || {
            let state = self.lock().take();
            drop(state);
            Ok(())
        })
    }

    /// `update_node_energy`: slurmd's periodic node poll.
    pub fn update_node_energy(&self) -> Result<(), CallFailed> {
        self.with_state("update_node_energy", |state, host| {
            state.node_record(host, Read::Recent);
        })
    }

    pub fn get(&self, query: Query) -> Result<Answer, CallFailed> {
        let answer = self.with_state("get_data", |state, host| match query {
            // slurmd answers a step's REQUEST_ACCT_GATHER_ENERGY with JOULES_TASK, or with
            // STRUCT when it polled within the same second: the step's figure must be
            // current to the request (a power source's cached figure is up to a sample
            // period old: at 350 W and 1 s, up to 350 J short at the step's end).
            // Only that RPC asks for these two, with an array of SENSOR_CNT records: the
            // parts follow the node's.
            Query::JoulesTask | Query::Struct => {
                let node = state.node_record(host, Read::Now);
                let parts = state.sensor_records(host).into_iter().map(|(_, r)| r);
                Answer::Records(std::iter::once(node).chain(parts).collect())
            }
            // in slurmstepd (--profile=energy) this is the step's current figure
            Query::NodeEnergy if host.daemon() == Daemon::Slurmstepd => {
                Answer::Record(state.node_record(host, Read::Now))
            }
            Query::NodeEnergy => Answer::Record(state.node_record(host, Read::Recent)),
            Query::NodeEnergyUp => Answer::Record(stacked_step(host, state.step_record(host))),
            Query::LastPoll => Answer::PollTime(state.node_record(host, Read::Cached).poll_time),
            // the node's record, then its parts'
            Query::SensorCount => {
                let count = 1 + state.sensor_records(host).len();
                Answer::SensorCount(u16::try_from(count).unwrap_or(1))
            }
        })?;
        if self.host.daemon() != Daemon::Slurmstepd {
            return Ok(answer);
        }
        Ok(match answer {
            Answer::Record(r) => Answer::Record(r.for_step()),
            Answer::Records(rs) => {
                Answer::Records(rs.into_iter().map(EnergyRecord::for_step).collect())
            }
            other => other,
        })
    }

    /// `set_data`: a profile request returns the sample to send, when the power is known.
    pub fn set(&self, update: Update) -> Result<Option<ProfileSample>, CallFailed> {
        self.with_state("set_data", |state, host| match update {
            // State survives reconfiguration: the node's energy must not restart.
            Update::Reconfig => None,
            Update::StepRecord(address) => {
                step_grant::publish(host, state.step_record, address);
                None
            }
            Update::Profile => {
                let record = state.node_record(host, Read::Now);
                let parts = state.sensor_records(host);
                record.current_watts.map(|watts| ProfileSample {
                    watts,
                    parts,
                    poll_time: record.poll_time,
                })
            }
        })
    }

    /// `conf_set`: the values of the family's keys in acct_gather.conf ([`family::keys`]);
    /// this plugin reads its own and the runtime's.
    pub fn configure(&self, context_id: u16, values: &KeyValues) -> Result<(), CallFailed> {
        self.with_state("conf_set", |state, host| {
            state.configure(host, context_id, values)
        })
    }

    /// `conf_values`: what `scontrol show config` shows (never a password).
    pub fn shown_config(&self) -> Result<Vec<(&'static str, String)>, CallFailed> {
        self.with_state("conf_values", |state, host| state.shown_config(host))
    }
}

mod step_grant;
pub use step_grant::RecordRefused;
#[cfg(test)]
mod tests;
