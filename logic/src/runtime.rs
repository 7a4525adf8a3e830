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

use crate::accounting::EnergyRecord;
use crate::attribution::grant::Grant;
use crate::attribution::gres::GresOrder;
use crate::attribution::job_record::{LoadJob, StepRecordConfig};
use crate::attribution::procs::Procs;
use crate::attribution::{self, Attribution, Mode, Site, StepKey};
use crate::config::KeyValues;
use crate::family;
use crate::guard::guard;
use crate::ledger::ledger_path;
use crate::metrics::{MetricsConfig, PrivateData};
use crate::plugin::Plugin;
use crate::trusted_dir;
use node::{LedgerConfig, NodePipeline};
use step::{StepFigure, StepPipeline};

/// The Slurm program the plugin runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    /// slurmd: meters the node.
    Slurmd,
    /// slurmstepd: reads its step's figure.
    Slurmstepd,
    /// slurmctld or a client: loads the plugin for its configuration only, never measures.
    Other,
}

/// What the runtime needs from its surroundings.
pub trait Host: Send + Sync + 'static {
    /// The Slurm program the plugin runs in.
    fn daemon(&self) -> Daemon;

    /// SlurmdSpoolDir, expanded for this node: where slurmd keeps the node's energy ledger
    /// and its slurmstepds read it.
    fn spool_dir(&self) -> Result<PathBuf, String> {
        Err("not in a Slurm daemon".into())
    }

    /// SlurmUser's uid: its directories are trusted as root's (`trusted_dir`); `None`
    /// where slurm.conf is not known.
    fn slurm_user(&self) -> Option<u32> {
        None
    }

    /// How many energy plugins `AcctGatherEnergyType` stacks (Slurm sums them).
    fn energy_plugins(&self) -> usize {
        1
    }

    /// The plugins `AcctGatherEnergyType` names (with `acct_gather_energy/`), this one
    /// among them; empty where slurm.conf is not known.
    fn energy_plugin_types(&self) -> Vec<String> {
        Vec::new()
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

    /// Where the kernel shows its processes (`/proc`): a step finds its tasks there, and
    /// slurmd's keeper the processes using each device.
    fn proc_root(&self) -> PathBuf {
        PathBuf::from(attribution::procs::PROC_ROOT)
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
    fn own_step(&self) -> Option<StepKey> {
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
    /// `ENERGY_DATA_JOULES_TASK`.
    JoulesTask,
    /// `ENERGY_DATA_NODE_ENERGY`.
    NodeEnergy,
    /// `ENERGY_DATA_NODE_ENERGY_UP`.
    NodeEnergyUp,
    /// `ENERGY_DATA_STRUCT`.
    Struct,
    /// `ENERGY_DATA_LAST_POLL`.
    LastPoll,
    /// `ENERGY_DATA_SENSOR_CNT`.
    SensorCount,
}

/// What `get_data` answers, by [`Query`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// One energy record.
    Record(EnergyRecord),
    /// The node's record, then one per part of the node the source measures beside it
    /// (pm_counters' cpu, memory, accelN): as many as [`Answer::SensorCount`] says.
    Records(Vec<EnergyRecord>),
    /// Unix time of the last poll.
    PollTime(i64),
    /// How many records `Records` holds.
    SensorCount(u16),
}

/// What `set_data` tells (Slurm's `ENERGY_DATA_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// `ENERGY_DATA_RECONFIG`: acct_gather.conf was read again.
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
pub(crate) enum Read {
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

/// What the plugin does in this process, chosen once, when it opens, by the daemon it
/// runs in: slurmd measures the node and keeps its ledger; a slurmstepd asks slurmd for
/// its step's figure. Nothing else asks which daemon it is in.
enum Pipeline {
    NotOpened,
    /// Not measured in this process (slurmctld), or the reason was logged once.
    Unavailable,
    Node(NodePipeline),
    Step(Box<StepPipeline>),
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
    pipeline: Pipeline,
    /// slurmstepd's threads that publish its step's grant: joined when the state is
    /// dropped (fini).
    grant_publishers: step_grant::Publishers,
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

impl<P: Plugin> State<P> {
    fn new() -> Self {
        Self {
            config: Config::Unset,
            attribution: Attribution::default(),
            metrics: MetricsConfig::default(),
            step_record: StepRecordConfig::default(),
            context_id: 0,
            pipeline: Pipeline::NotOpened,
            grant_publishers: step_grant::Publishers::default(),
        }
    }

    /// Opens the pipeline of the daemon the plugin runs in; a failure is logged and the
    /// plugin reports no energy.
    fn open(&mut self, host: &dyn Host) {
        let config = match &self.config {
            Config::Valid(c) => c.clone(),
            Config::Unset => P::Config::default(),
            Config::Invalid => {
                self.pipeline = Pipeline::Unavailable;
                return;
            }
        };
        // one meter per node: slurmd's reads the source and keeps the ledger, each
        // slurmstepd asks for its figure there (its share, or the node's since it began);
        // both decide alike whether the node is split
        let opened = match host.daemon() {
            Daemon::Other => Ok(Pipeline::Unavailable),
            Daemon::Slurmd => {
                let site = self.shared_site(host);
                let ledger = LedgerConfig {
                    context_id: self.context_id,
                    site: site.as_ref(),
                    idle_watts: ledger_idle_watts::<P>(&self.attribution, &config),
                    metrics: &self.metrics,
                };
                NodePipeline::open::<P>(host, &config, ledger).map(Pipeline::Node)
            }
            Daemon::Slurmstepd => host.spool_dir().map(|spool| {
                let figure = StepFigure::from_path(
                    &ledger_path(&spool, self.context_id),
                    &Procs::from_path(&host.proc_root()),
                    std::process::id(),
                    self.shared_site(host).is_some() || P::ALLOCATED_DEVICES,
                );
                let stacked = host.energy_plugins() > 1;
                let figure = if stacked { figure.stacked() } else { figure };
                Pipeline::Step(Box::new(StepPipeline::open(figure, stacked)))
            }),
        };
        self.pipeline = opened.unwrap_or_else(|why| {
            log::error!(
                "no energy can be measured on this node: {why}; energy is reported as unavailable"
            );
            Pipeline::Unavailable
        });
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

    /// The pipeline, opened on first use.
    fn pipeline(&mut self, host: &dyn Host) -> &mut Pipeline {
        if matches!(self.pipeline, Pipeline::NotOpened) {
            self.open(host);
        }
        &mut self.pipeline
    }

    /// The node's record, from a reading as fresh as `read` asks (in slurmstepd, the
    /// step's figure: read now unless `read` takes the cached one).
    fn node_record(&mut self, host: &dyn Host, read: Read) -> EnergyRecord {
        match self.pipeline(host) {
            Pipeline::Node(node) => node.node_record(read),
            Pipeline::Step(step) => step.node_record(!matches!(read, Read::Cached)),
            Pipeline::NotOpened | Pipeline::Unavailable => EnergyRecord::unavailable(0),
        }
    }

    /// The records of the node's parts.
    fn part_records(&mut self, host: &dyn Host) -> Vec<(&'static str, EnergyRecord)> {
        match self.pipeline(host) {
            Pipeline::Node(node) => node.part_records(),
            Pipeline::Step(step) => step.part_records(),
            Pipeline::NotOpened | Pipeline::Unavailable => Vec::new(),
        }
    }

    /// `NODE_ENERGY_UP`: in slurmstepd its step's figure, as Slurm must get it.
    fn step_record(&mut self, host: &dyn Host) -> EnergyRecord {
        match self.pipeline(host) {
            Pipeline::Node(node) => node.step_record(),
            Pipeline::Step(step) => step.step_record(),
            Pipeline::NotOpened | Pipeline::Unavailable => EnergyRecord::unavailable(0),
        }
    }

    /// What `get_data` answers.
    fn answer(&mut self, host: &dyn Host, query: Query) -> Answer {
        match query {
            // slurmd answers a step's REQUEST_ACCT_GATHER_ENERGY with JOULES_TASK, or with
            // STRUCT when it polled within the same second: the step's figure must be
            // current to the request (a power source's cached figure is up to a sample
            // period old: at 350 W and 1 s, up to 350 J short at the step's end).
            // Only that RPC asks for these two, with an array of SENSOR_CNT records: the
            // parts follow the node's.
            Query::JoulesTask | Query::Struct => {
                let node = self.node_record(host, Read::Now);
                let parts = self.part_records(host).into_iter().map(|(_, r)| r);
                Answer::Records(std::iter::once(node).chain(parts).collect())
            }
            // in slurmstepd (--profile=energy) the step's current figure
            Query::NodeEnergy => Answer::Record(self.node_record(host, Read::Recent)),
            Query::NodeEnergyUp => Answer::Record(self.step_record(host)),
            Query::LastPoll => Answer::PollTime(self.node_record(host, Read::Cached).poll_time),
            // the node's record, then its parts'
            Query::SensorCount => {
                let count = 1 + self.part_records(host).len();
                Answer::SensorCount(u16::try_from(count).unwrap_or(1))
            }
        }
    }

    /// Whether the plugin answers for a step (its records are then a step's).
    fn for_a_step(&self) -> bool {
        matches!(self.pipeline, Pipeline::Step(_))
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
        if matches!(self.pipeline, Pipeline::Node(_) | Pipeline::Step(_)) {
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
        self.open(host);
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

/// One plugin in one process: Slurm's calls, as safe functions.
pub struct Runtime<P: Plugin, H: Host> {
    host: H,
    state: Mutex<Option<State<P>>>,
}

impl<P: Plugin, H: Host> Runtime<P, H> {
    /// A runtime not yet opened, in the process `host` describes.
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
        self.with_state("init", |_, host| {
            if let Some(dir) = plugin_dir {
                P::plugin_located(dir);
            }
            if let Some(uid) = host.slurm_user() {
                trusted_dir::trust_slurm_user(uid);
            }
        })
    }

    /// `fini`: stops and joins every thread before Slurm unloads the plugin (the state's
    /// drop: the pipelines' threads, and slurmstepd's grant's, which may be waiting for
    /// slurmctld's answer).
    pub fn fini(&self) -> Result<(), CallFailed> {
        guard("fini", Err(CallFailed), || {
            // taken under the lock, dropped outside it: no thread joined here needs it
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

    /// Answers Slurm's `get_data`.
    pub fn get(&self, query: Query) -> Result<Answer, CallFailed> {
        let (answer, for_a_step) = self.with_state("get_data", |state, host| {
            let answer = state.answer(host, query);
            (answer, state.for_a_step())
        })?;
        if !for_a_step {
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
                step_grant::publish(
                    host,
                    state.step_record,
                    address,
                    &mut state.grant_publishers,
                );
                None
            }
            Update::Profile => {
                let record = state.node_record(host, Read::Now);
                let parts = state.part_records(host);
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

mod node;
mod step;
mod step_grant;
pub use step_grant::RecordRefused;
#[cfg(test)]
mod tests;
