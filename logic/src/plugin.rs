//! What a plugin of the family is ([`Plugin`]): its acct_gather.conf keys, its
//! configuration for this node, and how its source opens.

use std::time::Duration;

use crate::config::{ConfigError, KeyValues};
use crate::source::Source;

/// What a plugin of the family is: the keys it reads, and how its source opens. Every
/// plugin names one type that implements this in its `energy_plugin!` call, a descriptor
/// of its own, apart from the source it opens.
pub trait Plugin: 'static {
    /// Its acct_gather.conf keys, parsed.
    type Config: Default + Clone + PartialEq + Send + std::fmt::Debug + 'static;
    /// What it opens: a source of readings (counters directly; a source that may block, a
    /// sensor or the GPUs, through `crate::power::Polled`).
    type Source: Source;

    /// The acct_gather.conf keys this plugin reads (all parsed as strings by Slurm); it
    /// registers every plugin's (`crate::family`), so one file serves them all.
    const KEYS: &'static [&'static str];

    /// The source measures devices Slurm allocates to jobs (rust_gpu's GPUs, in
    /// [`crate::source::Reading::devices`]): slurmd's ledger charges each job the devices it holds (a
    /// shared one split among its holders) in every `EnergyAttribution` mode, never by CPU
    /// time, which would give one job's GPU energy to another.
    const ALLOCATED_DEVICES: bool = false;

    /// Each device's idle power, from the plugin's own key, for a source of
    /// [`Self::ALLOCATED_DEVICES`]; `None`: slurmd's ledger learns it per device.
    fn device_idle_watts(_config: &Self::Config) -> Option<f64> {
        None
    }

    /// Validates the keys; an error names the key and the value.
    fn parse_config(values: &KeyValues) -> Result<Self::Config, ConfigError>;

    /// `(key, value)` pairs for `scontrol show config`, defaults included.
    fn show_config(config: &Self::Config) -> Vec<(&'static str, String)>;

    /// The configuration for node `node`: `%n` and `%h` in the values that name a node's
    /// own device (its BMC) become its name, so that one acct_gather.conf serves a cluster
    /// (configless Slurm pushes one file to every node).
    fn for_node(config: &Self::Config, _node: &str) -> Self::Config {
        config.clone()
    }

    /// The configuration where `AcctGatherEnergyType` stacks `plugins` (its names, this
    /// plugin's among them): a node meter whose rails another plugin covers leaves them out
    /// (`crate::stack`). Asked in slurmd only, before [`Self::open`].
    fn stacked(config: &Self::Config, _plugins: &[String]) -> Self::Config {
        config.clone()
    }

    /// Finds the hardware, and says how often the meter polls what it found. An error is
    /// fatal: it says, for the admin, why this node reports no energy (a sensor's own
    /// failures once open are retried, see [`crate::source::Failure`]).
    fn open(config: &Self::Config) -> Result<Opened<Self::Source>, String>;

    /// Told once, at load, the directory of the plugin's `.so` (where a source may keep
    /// helper programs).
    fn plugin_located(_dir: &std::path::Path) {}
}

/// What a plugin opened: its source, and how often the meter polls it.
#[derive(Debug)]
pub struct Opened<S> {
    /// The source of readings.
    pub source: S,
    /// How often the meter polls it between Slurm's calls: often enough that no counter
    /// wrap is ever missed, and CurrentWatts stays fresh.
    pub sample_period: Duration,
}
