//! What an energy source provides to the meter.

use std::time::{Duration, Instant};

use crate::config::{ConfigError, KeyValues};

/// A node energy source: probed once, then read many times.
///
/// `read` must be cheap (a few `pread`s): the meter calls it from Slurm's calls as well as
/// from its own sampling thread.
pub trait EnergySource: Sized + Send + 'static {
    type Config: Default + Clone + PartialEq + Send + std::fmt::Debug + 'static;

    /// The acct_gather.conf keys this source reads (all parsed as strings by Slurm).
    const KEYS: &'static [&'static str];

    /// Validates the keys; an error names the key and the value.
    fn parse_config(values: &KeyValues) -> Result<Self::Config, ConfigError>;

    /// `(key, value)` pairs for `scontrol show config`, defaults included.
    fn show_config(config: &Self::Config) -> Vec<(&'static str, String)>;

    /// Finds the hardware. An error says, for the admin, why there is no energy.
    fn open(config: &Self::Config) -> Result<Self, String>;

    /// One line for the log: what was found and how it is read.
    fn describe(&self) -> String;

    /// Reads every counter once at `now`.
    fn read(&mut self, now: Instant) -> Reading;

    /// How often the counters must be read so that no wrap is ever missed.
    fn sample_period(&self) -> Duration;
}

/// The node's energy since the source was opened.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub energy_uj: u64,
    /// Every counter was read. When not, `energy_uj` lags behind; the failed counters
    /// catch up when they can be read again.
    pub complete: bool,
    /// Counters that failed or misbehaved in this read, for the log.
    pub problems: Vec<String>,
}
