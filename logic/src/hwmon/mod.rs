//! Node energy from the kernel's hwmon power and energy sensors (`/sys/class/hwmon`): ACPI
//! power meters (a server's, NVIDIA Grace's and Grace Hopper's rails) and any driver's
//! `energyN_input` counters.
//!
//! Reading a sensor may block (an ACPI power meter's value is an ACPI method the firmware
//! runs), so a poller thread reads them (`crate::power::Polled`, as a BMC's); Slurm's calls
//! only read what it published. Each channel's readings pass a [`Screen`] and are added
//! to its own [`Integral`], the one integration of power every sensor of the family goes
//! through: a counter's rise where the channel has a counter, else its power; a mean over
//! the channel's averaging interval counted from when the meter published it to the next
//! one, each dated at its interval's end once the intervals' phase is known (`means`). A channel
//! that cannot be read (a value not a number, a file gone) is named in the log once, its
//! figure goes stale and the node's is unavailable (`NO_VAL64`), never 0; when it is read
//! again the gap is bridged by the readings around it. Which channels make the node's
//! energy, and which are parts beside it: `select`.

mod config;
mod means;
mod select;
mod tree;

use std::time::{Duration, Instant};

pub use config::HwmonConfig;
use config::{KEY_DIR, KEY_MAX_WATTS};

use crate::config::{ConfigError, KeyValues};
use crate::plugin::{Opened, Plugin};
use crate::power::{Blocking, Bound, Integral, Polled, Screen, Settings};
use crate::scheduler::Polling;
use crate::source::{Failure, PartReading, Reading, Sample, Source, missed_after};

use means::Means;
use select::Kind;
use tree::{Channel, Input, read_number};

/// How often the poller reads every channel: a few small reads (the ACPI driver caches a
/// meter's value for its sampling time). A mean over a window is read as it stood at each
/// read: when the meter updated it is known only to within a read, so each change of
/// power is counted within this period of when it took effect. A Slurm call asks for a
/// fresh round besides (see [`FRESH_WAIT`]).
const POLL_PERIOD: Duration = Duration::from_millis(100);
/// Opening waits at most this long for the poller's first round.
const FIRST_ROUND_WAIT: Duration = Duration::from_millis(500);
/// A channel's averaging interval is read again this often.
const INTERVAL_REREAD: Duration = Duration::from_secs(10);
/// A read waits at most this long for a fresh round, and only while the poller is well.
const FRESH_WAIT: Duration = Duration::from_millis(20);
/// hwmon's counters are 64-bit microjoules.
const PARTS: [Kind; 4] = [Kind::Module, Kind::Grace, Kind::Cpu, Kind::Sysio];

/// The rust_hwmon plugin: the node's hwmon power sensors, read by a poller thread.
pub struct Hwmon;

/// rust_hwmon's configuration: its keys, and whether rust_gpu takes a Grace Hopper module
/// (`crate::stack`).
pub(crate) type HwmonSettings = crate::stack::Stacked<HwmonConfig>;

impl Plugin for Hwmon {
    type Config = HwmonSettings;
    type Source = Polled<HwmonPolling>;
    const KEYS: &'static [&'static str] = HwmonConfig::KEYS;

    fn parse_config(values: &KeyValues) -> Result<HwmonSettings, ConfigError> {
        HwmonConfig::parse(values).map(HwmonSettings::alone)
    }

    fn show_config(config: &HwmonSettings) -> Vec<(&'static str, String)> {
        config.keys.show()
    }

    fn stacked(config: &HwmonSettings, plugins: &[String]) -> HwmonSettings {
        config.among(plugins)
    }

    fn open(config: &HwmonSettings) -> Result<Opened<Polled<HwmonPolling>>, String> {
        let (polling, readout, settings) = prepare(config)?;
        let mut source = Polled::start(&settings, polling, readout)?;
        // the poller's first round, for the meter's first reading (a step that begins at
        // once has a figure from its start): a few reads, or FIRST_ROUND_WAIT where one
        // blocks, which the poller then waits out alone
        let waiting = Instant::now();
        while !source.poll(Instant::now()).complete && waiting.elapsed() < FIRST_ROUND_WAIT {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Opened {
            source,
            sample_period: Duration::from_secs(1),
        })
    }
}

/// The poller and the readout of the channels `config` finds, and how they are polled.
fn prepare(config: &HwmonSettings) -> Result<(HwmonPolling, HwmonReadout, Settings), String> {
    let rails = rails(config)?;
    let settings = Settings {
        period: POLL_PERIOD,
        max_backoff: Duration::from_secs(60),
        max_watts_key: KEY_MAX_WATTS,
        max_watts: config.keys.max_watts,
        default_max_watts: config::DEFAULT_MAX_WATTS,
    };
    let readout = HwmonReadout {
        period: POLL_PERIOD,
        rails: rails
            .iter()
            .map(|r| {
                (
                    r.channel.what.clone(),
                    r.channel.label.clone(),
                    r.kind,
                    r.counted,
                )
            })
            .collect(),
    };
    let bound = settings.bound();
    let polling = HwmonPolling {
        rails: rails
            .into_iter()
            .map(|r| RailPoll {
                screen: Screen::new(bound.clone(), r.channel.what.clone()),
                rail: r,
                counter: None,
                failing: false,
                window: None,
                means: Means::default(),
            })
            .collect(),
        bound,
    };
    Ok((polling, readout, settings))
}

/// The files of the channels that make the node's energy under `config`
/// (`hwmonN/power1_average`, `hwmonN/energy1_input`, ...), as the plugin would choose them:
/// what `senergy check --compare` reads by itself beside slurmd's figure.
pub fn counted_files(config: &HwmonConfig) -> Result<Vec<std::path::PathBuf>, String> {
    let settings = HwmonSettings {
        keys: config.clone(),
        beside_gpus: false,
    };
    Ok(rails(&settings)?
        .into_iter()
        .filter(|r| r.counted)
        .map(|r| match r.channel.input {
            Input::Energy(file) | Input::Power { file, .. } => file,
        })
        .collect())
}

/// A channel found, its kind, and whether it makes the node's energy.
#[derive(Debug, Clone)]
struct Rail {
    channel: Channel,
    kind: Kind,
    counted: bool,
}

/// The channels under the configured directory: those counted, and the parts beside.
fn rails(settings: &HwmonSettings) -> Result<Vec<Rail>, String> {
    let config = &settings.keys;
    let channels = tree::channels(&config.dir).map_err(|e| {
        format!(
            "cannot read {}: {e} (set {KEY_DIR} where hwmon is)",
            config.dir.display()
        )
    })?;
    let kinds: Vec<Kind> = channels
        .iter()
        .map(|c| select::kind(&c.chip, c.label.as_deref()))
        .collect();
    let mut counted = select::counted(&channels, &kinds, &config.sensors)
        .map_err(|why| format!("{}: {why}", config.dir.display()))?;
    // stacked with rust_gpu on Grace Hopper: NVML's counter of each GPU covers its module,
    // which rust_gpu charges to the jobs holding the GPU (`crate::stack`)
    if settings.beside_gpus && config.sensors.is_empty() && kinds.contains(&Kind::Module) {
        counted.iter_mut().for_each(|c| *c = false);
    }
    Ok(channels
        .into_iter()
        .zip(kinds)
        .zip(counted)
        .filter(|((_, kind), counted)| *counted || PARTS.contains(kind))
        .map(|((channel, kind), counted)| Rail {
            channel,
            kind,
            counted,
        })
        .collect())
}

/// One channel as the poller reads it.
struct RailPoll {
    rail: Rail,
    screen: Screen,
    /// A counter's last value (µJ) and when it was read.
    counter: Option<(u64, Instant)>,
    failing: bool,
    /// The averaging interval and when it was read: reading it runs an ACPI method
    /// (`_GAI`) each time, where the mean is cached by the driver, so it is read again only
    /// every [`INTERVAL_REREAD`] (an admin may change it).
    window: Option<(Option<Duration>, Instant)>,
    /// The means read, dated at their intervals' ends.
    means: Means,
}

impl RailPoll {
    /// The averaging interval at `now`, read again when the last read is old.
    fn window(&mut self, now: Instant) -> Option<Duration> {
        match self.window {
            Some((window, at)) if now.saturating_duration_since(at) < INTERVAL_REREAD => window,
            _ => {
                let window = self.rail.channel.interval();
                self.window = Some((window, now));
                window
            }
        }
    }

    /// One reading of the channel as samples (none for a counter's first reading, or a
    /// mean read again), or why it could not be read. `window`: its averaging interval.
    fn sample(&mut self, now: Instant, window: Option<Duration>) -> Result<Vec<Sample>, String> {
        let what = &self.rail.channel.what;
        match &self.rail.channel.input {
            Input::Power { file, .. } => {
                let uw = read_number(file, what, "microwatts").map_err(|e| e.to_string())?;
                Ok(match window {
                    Some(window) => self.means.read(uw, now, window),
                    None => vec![Sample {
                        watts: uw as f64 / 1e6,
                        at: now,
                        energy_j: None,
                    }],
                })
            }
            Input::Energy(file) => {
                let uj = read_number(file, what, "microjoules").map_err(|e| e.to_string())?;
                let before = self.counter.replace((uj, now));
                let Some((uj0, t0)) = before else {
                    return Ok(Vec::new());
                };
                let secs = now.saturating_duration_since(t0).as_secs_f64();
                // the power since the last read, or (a counter that fell: reset) the last
                // power accepted; the rise itself is judged by the integral
                let watts = if uj >= uj0 && secs > 0.0 {
                    (uj - uj0) as f64 / 1e6 / secs
                } else {
                    match self.screen.power() {
                        Some(w) => w,
                        None => return Ok(Vec::new()),
                    }
                };
                Ok(vec![Sample {
                    watts,
                    at: now,
                    energy_j: Some(uj as f64 / 1e6),
                }])
            }
        }
    }
}

/// The poller's side: every channel, each round.
pub struct HwmonPolling {
    rails: Vec<RailPoll>,
    bound: Bound,
}

/// What a round yields for one channel: the samples its screen accepted, the averaging
/// window they were taken over, and the power of the reading it holds.
pub(crate) struct Round {
    samples: Vec<Sample>,
    window: Option<Duration>,
    held_watts: Option<f64>,
}

/// What readers see: each channel's integral and averaging interval, in the rails' order.
#[derive(Default)]
pub(crate) struct Figures {
    integrals: Vec<Integral>,
    windows: Vec<Option<Duration>>,
}

impl Polling for HwmonPolling {
    type Link = ();
    type Output = (Vec<Round>, f64);
    type Published = Figures;
    const DOING: &'static str = "reading hwmon";
    const CONTAIN_PANICS: bool = true;

    fn connect(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// Every channel's failures are its own (logged once each): a round always publishes.
    fn poll(&mut self, _: &mut ()) -> Result<(Vec<Round>, f64), Failure> {
        Ok(self.round(Instant::now()))
    }

    fn publish((rounds, max_watts): (Vec<Round>, f64), figures: &mut Figures) {
        figures
            .integrals
            .resize_with(rounds.len(), Integral::default);
        figures.windows = rounds.iter().map(|r| r.window).collect();
        for (round, integral) in rounds.iter().zip(&mut figures.integrals) {
            for sample in &round.samples {
                integral.add(sample, max_watts);
            }
            integral.hold(round.held_watts);
        }
    }

    fn cannot_connect(why: &str, max_backoff: Duration) -> String {
        format!(
            "cannot read hwmon: {why}; retrying with backoff up to {} s",
            max_backoff.as_secs()
        )
    }
}

impl HwmonPolling {
    /// One round at `now`: each channel read once, and the bound its readings pass.
    fn round(&mut self, now: Instant) -> (Vec<Round>, f64) {
        let rounds = self
            .rails
            .iter_mut()
            .map(|rail| {
                let window = rail.window(now);
                let samples = match rail.sample(now, window) {
                    Ok(samples) => {
                        if rail.failing {
                            log::info!("{} is read again", rail.rail.channel.what);
                            rail.failing = false;
                        }
                        samples
                            .into_iter()
                            .flat_map(|s| rail.screen.judge(s))
                            .collect()
                    }
                    Err(why) => {
                        rail.means.lost();
                        if !rail.failing {
                            log::warn!("{why}; unavailable until it can be read");
                            rail.failing = true;
                        }
                        Vec::new()
                    }
                };
                Round {
                    samples,
                    window,
                    held_watts: rail.screen.held().map(|s| s.watts),
                }
            })
            .collect();
        (rounds, self.bound.watts)
    }
}

/// How Slurm's reads make a reading of the channels' integrals.
pub(crate) struct HwmonReadout {
    period: Duration,
    /// Each channel: what it is, its label, its kind, whether it is counted.
    rails: Vec<(String, Option<String>, Kind, bool)>,
}

impl Blocking for HwmonPolling {
    type Readout = HwmonReadout;
    const THREAD: &'static str = "hwmon-poller";
    const FRESH_WAIT: Duration = FRESH_WAIT;

    fn describe(readout: &HwmonReadout) -> String {
        let name = |(what, label, ..): &(String, Option<String>, Kind, bool)| match label {
            Some(label) => format!("{what} ({label})"),
            None => what.clone(),
        };
        let counted: Vec<String> = readout.rails.iter().filter(|r| r.3).map(name).collect();
        let parts: Vec<&str> = PARTS
            .iter()
            .filter(|k| readout.rails.iter().any(|r| !r.3 && r.2 == **k))
            .filter_map(|k| k.part_label())
            .collect();
        let counts = if counted.is_empty() {
            "hwmon: no sensor counted: stacked with rust_gpu on Grace Hopper, whose NVML \
             counters cover each module (Grace CPU and memory included) and charge it to the \
             jobs holding its GPU (the rule for overlapping stacked plugins); the node's \
             figure here is 0 J"
                .to_string()
        } else {
            format!("hwmon power sensors {}", counted.join(" + "))
        };
        format!(
            "{counts}{}; read every {:.2} s by a poller thread",
            if parts.is_empty() {
                String::new()
            } else {
                format!(", parts {} beside the node", parts.join(", "))
            },
            readout.period.as_secs_f64()
        )
    }

    fn reading(readout: &mut HwmonReadout, figures: &mut Figures, now: Instant) -> Reading {
        let missed = missed_after(readout.period);
        // nothing published yet (the meter's first reading, at open): every channel
        // unread, the parts' list the same as later
        figures
            .integrals
            .resize_with(readout.rails.len(), Integral::default);
        let mut reading = Reading {
            complete: true,
            ..Reading::default()
        };
        let mut watts = 0.0;
        // per part kind: energy and power, `None` once one of its channels is stale
        let mut parts: Vec<(Kind, Option<(u64, f64)>)> = Vec::new();
        figures.windows.resize(readout.rails.len(), None);
        let channels = readout
            .rails
            .iter()
            .zip(&mut figures.integrals)
            .zip(&figures.windows);
        for (((what, _, kind, counted), integral), window) in channels {
            // a mean is sampled once an interval: its last sample may be an interval old
            let missed = window.map_or(missed, |w| missed.max(w * 3));
            let fresh = integral
                .last_at()
                .is_some_and(|at| now.saturating_duration_since(at) <= missed);
            let uj = integral.energy_at(now, false, missed);
            let w = integral.watts().filter(|_| fresh);
            if *counted {
                reading.energy_uj += uj;
                watts += w.unwrap_or(0.0);
                reading.unsettled |= integral.unconfirmed();
                if !fresh {
                    reading.complete = false;
                }
                // not yet read (the poller's first round, as the plugin opens) is no problem
                if !fresh && integral.last_at().is_some() {
                    reading.problems.push(format!(
                        "{what} has not been read for over {} s",
                        missed.as_secs()
                    ));
                }
            } else if PARTS.contains(kind) {
                let this = w.map(|w| (uj, w));
                match parts.iter_mut().find(|(k, _)| k == kind) {
                    Some((_, sum)) => *sum = sum.zip(this).map(|((e, p), (u, w))| (e + u, p + w)),
                    None => parts.push((*kind, this)),
                }
            }
        }
        reading.watts = reading.complete.then_some(watts);
        parts.sort_by_key(|(k, _)| *k);
        reading.parts = parts
            .into_iter()
            .filter_map(|(kind, sum)| {
                Some(PartReading {
                    label: kind.part_label()?,
                    energy_uj: sum.map(|(e, _)| e),
                    watts: sum.map(|(_, w)| w),
                })
            })
            .collect();
        reading
    }
}

#[cfg(test)]
mod tests;
