//! The GPUs as a source that may block: the poller that calls the vendor libraries, how
//! Slurm's reads make a reading of its figures (through `crate::power::Polled`, as a
//! sensor's), and the rust_gpu plugin over it.

mod tracker;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::config::{self, GpuConfig, KEY_AMD, KEY_MAX_WATTS, KEY_NVML};
use super::library::{self, GpuLibrary};

use crate::config::{ConfigError, KeyValues};
use crate::plugin::{Opened, Plugin};
use crate::power::{Blocking, Bound, Polled, Settings};
use crate::scheduler::Polling;
use crate::source::{DeviceReading, Failure, Reading, missed_after};
use tracker::{Figure, Tracked};

/// How often the poller reads every GPU, for a call per GPU that takes microseconds. A
/// Slurm call asks for a fresh round besides (see [`FRESH_WAIT`]), so figures are not this
/// old; they are never extrapolated at the last power (a GPU's power falls steeply when
/// its work ends, and an extrapolation would then stay counted).
const POLL_PERIOD: Duration = Duration::from_millis(250);
/// Connecting again after every library failed, backing off up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Opens (loads and initialises) one vendor's library; runs in the poller.
pub(super) type Opener = Box<dyn Fn() -> Result<Box<dyn GpuLibrary>, String> + Send>;

/// The rust_gpu plugin: the node's GPUs, read by a poller thread (`GpuPolling`).
pub struct Gpus;

impl Plugin for Gpus {
    type Config = GpuConfig;
    type Source = Polled<GpuPolling>;
    const KEYS: &'static [&'static str] = GpuConfig::KEYS;
    const ALLOCATED_DEVICES: bool = true;

    fn parse_config(values: &KeyValues) -> Result<GpuConfig, ConfigError> {
        GpuConfig::parse(values)
    }

    fn show_config(config: &GpuConfig) -> Vec<(&'static str, String)> {
        config.show()
    }

    fn device_idle_watts(config: &GpuConfig) -> Option<f64> {
        config.idle_watts
    }

    fn open(config: &GpuConfig) -> Result<Opened<Polled<GpuPolling>>, String> {
        let mut openers: Vec<Opener> = Vec::new();
        if let Some(path) = config.nvml.clone() {
            openers.push(Box::new(move || library::open_nvml(&path)));
        }
        if let Some(path) = config.amd.clone() {
            openers.push(Box::new(move || library::open_amd_smi(&path)));
        }
        if openers.is_empty() {
            return Err(format!("{KEY_NVML} and {KEY_AMD} are both none"));
        }
        let settings = Settings {
            period: POLL_PERIOD,
            max_backoff: MAX_BACKOFF,
            max_watts_key: KEY_MAX_WATTS,
            max_watts: config.max_watts,
            default_max_watts: config::DEFAULT_MAX_WATTS,
        };
        // the poller polls the GPUs; the meter's own sampling only keeps CurrentWatts fresh
        GpuPolling::polled(openers, &settings).map(|source| Opened {
            source,
            sample_period: Duration::from_secs(1),
        })
    }
}

/// A read waits at most this long for the poller to read the GPUs afresh, and only while
/// the poller is well (not stuck in a call): a step's final figure is then current, not
/// a poll period old.
const FRESH_WAIT: Duration = Duration::from_millis(10);

/// How Slurm's reads make a reading of the GPUs' figures.
pub(crate) struct GpuReadout {
    period: Duration,
    /// Per GPU (vendor, index): the figure last seen, so energy only ever grows.
    seen_uj: HashMap<(&'static str, u32), f64>,
    total_uj: f64,
}

/// A library that opened, and its GPUs.
type OpenLibrary = (Box<dyn GpuLibrary>, Vec<Tracked>);

/// Opens every library that works, with the GPUs it sees, placed one after the other
/// (NVIDIA's first). The failures of the others are returned for the log.
fn open(openers: &[Opener], bound: &Bound) -> (Vec<OpenLibrary>, Vec<String>) {
    let mut open = Vec::new();
    let mut failures = Vec::new();
    let mut position = 0;
    for opener in openers {
        let mut lib = match opener() {
            Ok(lib) => lib,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        match lib.devices() {
            Ok(devices) if devices.is_empty() => {
                failures.push(format!("{} sees no GPU", lib.vendor()))
            }
            Ok(devices) => {
                let vendor = lib.vendor();
                for d in &devices {
                    log::info!(
                        "{vendor} GPU {} ({}), device file {}",
                        d.index,
                        d.name,
                        d.file
                            .map_or("unknown".into(), |(ma, mi)| format!("{ma}:{mi}"))
                    );
                    let covers = crate::stack::gpu_covers(&d.name);
                    if covers != crate::stack::Covers::Board {
                        log::info!(
                            "{vendor} GPU {}: its energy counter covers {}",
                            d.index,
                            covers.describe()
                        );
                    }
                }
                let mut tracked = Vec::new();
                for d in devices {
                    let mut gpu = Tracked::new(vendor, d, position, bound.clone());
                    match lib.mig_instances(gpu.figure().device.index) {
                        Ok(instances) => gpu.partition(instances),
                        Err(e) => log::error!(
                            "{vendor} GPU {}: listing its MIG instances: {e}; its energy is \
                             not split among them",
                            gpu.figure().device.index
                        ),
                    }
                    position += 1;
                    tracked.push(gpu);
                }
                open.push((lib, tracked));
            }
            Err(e) => failures.push(format!("{}: listing GPUs: {e}", lib.vendor())),
        }
    }
    (open, failures)
}

/// What the poller does with the GPUs: open the libraries, read every GPU a round.
pub struct GpuPolling {
    openers: Vec<Opener>,
    /// The most one GPU may draw.
    bound: Bound,
    /// Per GPU (vendor, index): whether its last read failed, so a failure is logged once
    /// and its end once.
    failing: HashMap<(&'static str, u32), bool>,
}

impl GpuPolling {
    /// Starts the poller and returns at once: libraries are opened in the poller, which
    /// starts as a sensor's does ([`Polled::start`]); the settings' bound is the most one
    /// GPU may draw. A GPU's figure is never extrapolated (see [`POLL_PERIOD`]).
    fn polled(openers: Vec<Opener>, settings: &Settings) -> Result<Polled<Self>, String> {
        let polling = Self {
            openers,
            bound: settings.bound(),
            failing: HashMap::new(),
        };
        let readout = GpuReadout {
            period: settings.period,
            seen_uj: HashMap::new(),
            total_uj: 0.0,
        };
        Polled::start(settings, polling, readout)
    }
}

impl Polling for GpuPolling {
    type Link = Vec<OpenLibrary>;
    type Output = Vec<Figure>;
    type Published = Vec<Figure>;
    const DOING: &'static str = "reading the GPUs";
    // Reconnecting would open the libraries afresh, every GPU's figure starting again
    // from 0 (which the reader holds at what it saw, under-counting until it passes); a
    // poller that ended leaves its GPUs unavailable instead, which is honest.
    const CONTAIN_PANICS: bool = false;

    fn connect(&mut self) -> Result<Vec<OpenLibrary>, String> {
        let (libs, failures) = open(&self.openers, &self.bound);
        if libs.is_empty() {
            return Err(failures.join("; "));
        }
        for f in &failures {
            log::info!("{f}");
        }
        Ok(libs)
    }

    /// Every GPU's failures are its own (logged here, once each): a poll always publishes.
    fn poll(&mut self, libs: &mut Vec<OpenLibrary>) -> Result<Vec<Figure>, Failure> {
        for (lib, gpus) in libs.iter_mut() {
            for gpu in gpus.iter_mut().filter(|g| !g.figure().lost) {
                let result = gpu.sample(lib.as_mut(), Instant::now());
                let key = (gpu.figure().vendor, gpu.figure().device.index);
                let was_failing = self.failing.insert(key, result.is_err()).unwrap_or(false);
                match result {
                    Ok(Some(note)) => log::warn!("{note}"),
                    Ok(None) if was_failing => log::info!(
                        "{} GPU {} is read again",
                        gpu.figure().vendor,
                        gpu.figure().device.index
                    ),
                    Err(why) if !was_failing => log::error!("{why}"),
                    _ => {}
                }
            }
        }
        Ok(libs
            .iter()
            .flat_map(|(_, gpus)| gpus.iter().map(|g| g.figure().clone()))
            .collect())
    }

    fn publish(figures: Vec<Figure>, published: &mut Vec<Figure>) {
        *published = figures;
    }

    fn cannot_connect(why: &str, max_backoff: Duration) -> String {
        format!(
            "no GPU energy on this node: {why}; reporting no energy (NO_VAL), retrying with \
             backoff up to {} s",
            max_backoff.as_secs()
        )
    }
}

/// The poller polls the GPUs; the meter's own sampling only keeps CurrentWatts fresh.
impl Blocking for GpuPolling {
    type Readout = GpuReadout;
    const THREAD: &'static str = "gpu-poller";
    const FRESH_WAIT: Duration = FRESH_WAIT;

    fn describe(readout: &GpuReadout) -> String {
        format!(
            "GPU energy counters (or power) and each process's use of each GPU, read every \
             {:.2} s by a poller thread",
            readout.period.as_secs_f64()
        )
    }

    fn reading(readout: &mut GpuReadout, figures: &mut Vec<Figure>, now: Instant) -> Reading {
        if figures.is_empty() {
            return Reading::default();
        }
        let missed = missed_after(readout.period);
        let mut reading = Reading {
            complete: true,
            ..Reading::default()
        };
        let mut watts = None;
        for f in figures.iter() {
            let fresh =
                f.at.is_some_and(|at| now.saturating_duration_since(at) <= missed);
            let seen = readout
                .seen_uj
                .entry((f.vendor, f.device.index))
                .or_insert(0.0);
            let value = f.energy_uj.max(*seen);
            readout.total_uj += value - *seen;
            *seen = value;
            reading.devices.push(DeviceReading {
                position: f.position,
                file: f.device.file,
                energy_uj: value as u64,
                watts: f.watts.filter(|_| fresh && !f.lost),
                busy: f.busy.clone(),
                instances: f.instances.clone(),
            });
            if f.lost {
                continue;
            }
            if fresh {
                *watts.get_or_insert(0.0) += f.watts.unwrap_or(0.0);
            } else {
                reading.complete = false;
                reading.problems.push(format!(
                    "{} GPU {} ({}) has not been read for over {} s",
                    f.vendor,
                    f.device.index,
                    f.device.name,
                    missed.as_secs()
                ));
            }
        }
        reading.energy_uj = readout.total_uj as u64;
        reading.watts = watts;
        reading
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
