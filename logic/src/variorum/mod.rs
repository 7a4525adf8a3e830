//! Node power from LLNL Variorum, called in a separate sampler process.
//!
//! Variorum cannot run inside slurmd: it calls `exit(-1)` on hwloc or ROCm SMI failures,
//! segfaults on some paths, prints to stdout, can hang in vendor libraries, and keeps
//! global state without locks. So the plugin starts `acct_gather_energy_rust_variorum_sampler`
//! (crate `plugins/variorum-sampler`), which loads the library and writes one line per
//! sample into a pipe (protocol in [`sampler`]). Here, [`VariorumSensor`] is a sensor of
//! `Power` (and [`Variorum`] the plugin over it): `connect` starts a fresh sampler, `poll` waits for its next
//! sample up to `EnergyVariorumTimeout`, and anything wrong (timeout, exit, crash, garbage,
//! a Variorum error) kills and reaps the sampler and returns an error, after which the
//! poller reconnects with backoff. The sampler also dies with its parent thread
//! (`PR_SET_PDEATHSIG`) and when the pipe is closed.
//!
//! Energy comes from integrating these power samples (the poller does it), not from
//! `variorum_get_energy_json`: that function exists only in 0.8.0, is wired for three
//! Intel models and IBM Power9 only, segfaults elsewhere (llnl/variorum#537), returns raw
//! wrapping 32-bit counters on Intel and millijoules labelled joules on IBM.

mod config;
pub mod json;
pub mod protocol;
pub mod sampler;

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use config::KEY_MAX_WATTS;
pub use config::VariorumConfig;
use json::JsonError;
pub use json::{NodePower, NodeSource};
use sampler::SamplerError;

use crate::config::{ConfigError, KeyValues};
use crate::plugin::{Opened, Plugin};
use crate::power::{Connected, Polled, Settings, sensor_backoff};
use crate::source::{Failure, Power, Sample, Sensor};
use protocol::Line;
use sampler::Sampler;

static PLUGIN_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Tells where the plugin's `.so` is (found with `dladdr` at load time), so that the
/// sampler is looked for beside it when `EnergyVariorumSampler` is not set.
pub(crate) fn set_plugin_dir(dir: PathBuf) {
    *PLUGIN_DIR.lock().unwrap_or_else(PoisonError::into_inner) = Some(dir);
}

fn plugin_dir() -> Option<PathBuf> {
    PLUGIN_DIR
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// A connected sampler: Variorum's node power, read in a helper process.
pub struct VariorumSensor {
    sampler: Sampler,
    config: VariorumConfig,
    program: PathBuf,
    api: String,
    version: Option<String>,
    first_read: bool,
}

impl VariorumSensor {
    /// Starts a sampler and waits (up to the timeout) until it has loaded Variorum and
    /// made one successful call.
    pub fn start(config: &VariorumConfig) -> Result<Self, VariorumError> {
        let program = config.sampler_path().map_err(VariorumError::Config)?;
        let mut sampler = Sampler::spawn(&program, &config.library, config.period)?;
        let deadline = Instant::now() + config.timeout;
        let (api, version) = match sampler.oldest(deadline, "start-up report")? {
            Line::Ready { api, version } => (api, version),
            Line::Failed(error) => {
                sampler.kill();
                return Err(SamplerError::Variorum(error).into());
            }
            Line::Sample { .. } => {
                sampler.kill();
                return Err(
                    SamplerError::Protocol("a sample before the start-up report".into()).into(),
                );
            }
        };
        Ok(Self {
            sampler,
            config: config.clone(),
            program,
            api,
            version,
            first_read: true,
        })
    }

    /// The next sample, parsed, and when the sampler took it. Any failure but a sample
    /// without power leaves the sampler killed and reaped.
    fn sample(&mut self) -> Result<(NodePower, Instant), VariorumError> {
        let mut wait = self.config.timeout;
        if std::mem::take(&mut self.first_read) {
            // the sampler's warm-up comes before its first sample
            wait += protocol::WARMUP;
        }
        let result = match self.sampler.newest(Instant::now() + wait, "sample") {
            Ok(Line::Sample { json, t_ns }) => {
                // it integrates with the time of the call, not the time it was read here
                let at = t_ns
                    .and_then(protocol::instant_of)
                    .unwrap_or_else(Instant::now);
                json::parse(&json)
                    .map(|power| (power, at))
                    .map_err(SamplerError::from)
            }
            Ok(Line::Failed(error)) => Err(SamplerError::Variorum(error)),
            Ok(Line::Ready { .. }) => {
                Err(SamplerError::Protocol("a second start-up report".into()))
            }
            Err(e) => Err(e),
        };
        result.map_err(|e| {
            // a well-formed sample without power: the sampler itself is fine
            if !matches!(
                e,
                SamplerError::Json(JsonError::ZeroPower | JsonError::NoPower)
            ) {
                self.sampler.kill();
            }
            e.into()
        })
    }
}

/// Why the sampler could not be started or read.
#[derive(Debug, thiserror::Error)]
pub enum VariorumError {
    /// The configuration names no usable sampler (why).
    #[error("{0}")]
    Config(String),
    /// The sampler failed.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
}

/// The rust_variorum plugin: the sampler polled by a thread in slurmd; steps read its
/// ledger.
pub struct Variorum;

impl Plugin for Variorum {
    type Config = VariorumConfig;
    type Source = Polled<VariorumSensor>;
    const KEYS: &'static [&'static str] = VariorumConfig::KEYS;

    fn parse_config(values: &KeyValues) -> Result<Self::Config, ConfigError> {
        VariorumConfig::parse(values)
    }

    fn plugin_located(dir: &std::path::Path) {
        set_plugin_dir(dir.to_path_buf());
    }

    fn show_config(config: &Self::Config) -> Vec<(&'static str, String)> {
        config.show()
    }

    fn open(config: &Self::Config) -> Result<Opened<Polled<VariorumSensor>>, String> {
        let settings = Settings {
            period: config.period,
            max_backoff: sensor_backoff(config.period),
            max_watts_key: KEY_MAX_WATTS,
            max_watts: config.max_watts,
            default_max_watts: config::DEFAULT_MAX_WATTS,
        };
        let config = config.clone();
        // Variorum states no limit: the key's bound, or the default, applies
        Polled::start(&settings, true, move || {
            VariorumSensor::connect(&config).map(|sensor| Connected {
                sensor,
                stated_max_watts: None,
            })
        })
    }
}

impl VariorumSensor {
    /// Starts a fresh sampler. Runs in the poller thread; waits for the sampler's start-up
    /// report up to its timeout.
    pub fn connect(config: &VariorumConfig) -> Result<Self, String> {
        Self::start(config).map_err(|e| e.to_string())
    }
}

impl Sensor for VariorumSensor {
    fn describe(&self) -> String {
        let version = self
            .version
            .as_deref()
            .map(|v| format!(", says version {v}"))
            .unwrap_or_default();
        format!(
            "Variorum {} ({}{version}) in sampler {} pid {}",
            self.config.library,
            self.api,
            self.program.display(),
            self.sampler.pid()
        )
    }

    fn poll(&mut self, _now: Instant) -> Power {
        let (watts, at) = match self.sample() {
            Ok((power, at)) => (power.node_watts, at),
            Err(
                e @ VariorumError::Sampler(SamplerError::Json(
                    JsonError::ZeroPower | JsonError::NoPower,
                )),
            ) => {
                return Err(Failure::Retry(e.to_string()));
            }
            Err(e) => return Err(Failure::Reconnect(e.to_string())),
        };
        Ok(Sample {
            watts,
            at,
            energy_j: None,
        })
    }
}
