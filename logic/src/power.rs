//! Sources that report watts (a BMC, Variorum): a poller thread reads them and integrates
//! the power into energy; Slurm's calls only ever see the cached result.
//!
//! Reading such a sensor can block (a hung BMC, a stalled library), so it happens only in
//! the poller thread (a [`crate::poller::Poller`]), which reconnects with backoff after
//! failures. Energy is the trapezoid
//! of successive samples with sub-second timestamps; across a gap (a frozen BMC) the
//! trapezoid between the last sample before and the first after is the estimate, as in
//! Slurm's ipmi plugin. A cache whose last sample is older than [`missed_after`] the period
//! makes the reading incomplete, so Slurm gets "unavailable", never 0 or a stale figure.
//!
//! Every power reading passes a [`Screen`] before it is energy (here, and wherever a power
//! is integrated or stands in for energy: a GPU without an energy counter, pm_counters'
//! power): a reading no node can draw (above the source's [`Bound`], negative, not a
//! number) is dropped, and a reading far from the last one is held until the next reading
//! tells a real step from a one-reading spike, as [`crate::counter`] holds a counter's
//! burst. What is dropped is bridged as a gap is.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::ConfigError;
use crate::poller::{Outcome, Poller, Polling, Timing};
use crate::source::{EnergyReader, HardwareCount, Reading, Source, missed_after};

/// Reconnecting backs off, doubling from one period up to this many periods (within
/// `BACKOFF_BOUNDS`): a sensor that comes back is read again soon, so the energy of the
/// gap is bridged before the steps that need it end.
const BACKOFF_PERIODS: u32 = 4;
const BACKOFF_BOUNDS: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(60));

/// A power reading and when it was taken (which for a sensor read through a helper process
/// is earlier than when the poller receives it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub watts: f64,
    pub at: Instant,
    /// The sensor's own energy counter in joules, where it has one (a Redfish BMC's
    /// EnergyJoules): the energy between two samples is then the counter's rise, and the
    /// power is integrated only where the counter cannot be used.
    pub energy_j: Option<f64>,
}

impl Sample {
    pub fn now(watts: f64) -> Self {
        Self {
            watts,
            at: Instant::now(),
            energy_j: None,
        }
    }
}

/// A device's stated limit (a Redfish chassis' `PowerCapacityWatts`, a DCMI power limit) is
/// raised by this much for the bound: a limit is enforced over a correction time, so a
/// reading may pass it briefly, and what the bound must stop is far beyond it (an
/// all-ones 65535 W, 1e12 W).
pub const STATED_LIMIT_MARGIN: f64 = 1.5;
/// The largest bound a key or a device may state (10 MW): more is a typing error, or a
/// glitch itself.
const MAX_BOUND_WATTS: u32 = 10_000_000;

/// A reading may differ from the last one accepted by this share of it (plus
/// [`JUMP_FLOOR_SHARE`] of the bound) and be counted at once; a larger change is held until
/// the next reading confirms it. A one-reading spike smaller than that is counted: at most
/// this share of the power over one period (40 ms of power a second: 0.1% of a 40 s job
/// sampled every second), the size of ordinary noise.
const JUMP_SHARE: f64 = 0.04;
/// ... plus this share of the bound, so that a node at (nearly) no power does not make
/// every reading a jump.
const JUMP_FLOOR_SHARE: f64 = 0.0005;
/// The levels of this many readings (in bound, accepted or not) are remembered: a jump back
/// to one of them is taken at once. A level that recurs is the node's (a load that swings
/// at about the sampling rate), and holding and dropping each reading of it would
/// under-count it; a glitch that recurs that soon is counted as a step would be.
const RECENT_READINGS: usize = 8;

/// The most power a source's readings may show; a reading above it is no node's.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    pub watts: f64,
    /// Where the figure comes from, for the log.
    pub from: String,
}

impl Bound {
    /// The admin's `key` when set (`configured`), else what the device states (raised by
    /// [`STATED_LIMIT_MARGIN`]; a statement of no power, or of more than 10 MW, is
    /// ignored), else the source's `default`.
    pub fn resolve(
        key: &'static str,
        configured: Option<u32>,
        stated: Option<(f64, String)>,
        default: u32,
    ) -> Bound {
        if let Some(watts) = configured {
            return Bound {
                watts: f64::from(watts),
                from: key.to_string(),
            };
        }
        if let Some((watts, what)) =
            stated.filter(|(w, _)| w.is_finite() && *w > 0.0 && *w <= f64::from(MAX_BOUND_WATTS))
        {
            return Bound {
                watts: watts * STATED_LIMIT_MARGIN,
                from: format!("{what} of {watts} W, times {STATED_LIMIT_MARGIN}"),
            };
        }
        Bound {
            watts: f64::from(default),
            from: format!("the default; {key} sets it"),
        }
    }

    /// The bound `key`'s default alone sets (a source whose devices state no limit).
    pub fn of(key: &'static str, configured: Option<u32>, default: u32) -> Bound {
        Self::resolve(key, configured, None, default)
    }
}

/// A bound in acct_gather.conf: whole watts, 1 to 10 000 000.
pub fn parse_max_watts(key: &'static str, v: &str) -> Result<u32, ConfigError> {
    v.parse::<u32>()
        .ok()
        .filter(|w| (1..=MAX_BOUND_WATTS).contains(w))
        .ok_or_else(|| {
            ConfigError::new(
                key,
                v,
                format!("expected whole watts from 1 to {MAX_BOUND_WATTS}"),
            )
        })
}

/// A bound key for `scontrol show config`: the value set, else what applies (`stated`:
/// the source's devices may state a limit).
pub fn show_max_watts(configured: Option<u32>, default: u32, stated: bool) -> String {
    match (configured, stated) {
        (Some(watts), _) => watts.to_string(),
        (None, true) => {
            format!("(the device's stated limit times {STATED_LIMIT_MARGIN}, else {default})")
        }
        (None, false) => default.to_string(),
    }
}

/// Readings being dropped, logged once when the first is and once (if more followed) when
/// a reading is accepted again.
#[derive(Debug, Clone)]
struct Dropping {
    since: Instant,
    count: u32,
}

/// Judges power readings before they are energy: what a [`Screen::judge`] returns is
/// what to count, in order; what it holds or drops is bridged by the trapezoid between
/// the readings around it, as a gap is.
///
/// - A reading no node can draw (above the [`Bound`], negative, not a number) is dropped.
/// - A reading far from the last accepted (see [`JUMP_SHARE`]) is held, as
///   [`crate::counter`] holds a burst, and the next reading decides: one nearer to it than
///   to the last accepted confirms a real step (both are counted, so the step costs
///   nothing but a period's delay); one nearer the last accepted says it was a spike,
///   dropped. A jump back to the level of one of the last few readings is taken at once
///   (see [`RECENT_READINGS`]).
/// - The first reading has nothing to be judged by: it is counted when in bound.
///
/// So a glitch out of bound costs nothing however long it lasts (at constant power; a
/// change of power under it is bridged as across a gap), and one in bound costs nothing
/// when it lasts one reading; two readings in bound that agree are a step.
#[derive(Debug, Clone)]
pub struct Screen {
    bound: Bound,
    /// Names what is read, for the log ("power", "NVIDIA GPU 0 (...)").
    what: String,
    last: Option<Sample>,
    held: Option<Sample>,
    /// The power of the last readings in bound, newest first.
    recent: VecDeque<f64>,
    dropping: Option<Dropping>,
}

impl Screen {
    pub fn new(bound: Bound, what: impl Into<String>) -> Self {
        Self {
            bound,
            what: what.into(),
            last: None,
            held: None,
            recent: VecDeque::with_capacity(RECENT_READINGS + 1),
            dropping: None,
        }
    }

    pub fn bound(&self) -> &Bound {
        &self.bound
    }

    /// A new bound (a sensor connected again, stating another limit); what was accepted
    /// stays the reference.
    pub fn set_bound(&mut self, bound: Bound) {
        self.bound = bound;
    }

    /// The last reading accepted.
    pub fn last(&self) -> Option<&Sample> {
        self.last.as_ref()
    }

    /// The reading held until the next one decides.
    pub fn held(&self) -> Option<&Sample> {
        self.held.as_ref()
    }

    /// The power to show now (CurrentWatts, and what a figure is brought forward at): the
    /// last reading accepted, or the held one where it is lower. Until the next reading it
    /// is unknown which is the node's, and a figure brought forward at the higher stays
    /// counted (what is reported never goes back): a fall at a job's end, or a spike.
    pub fn power(&self) -> Option<f64> {
        lower(self.last.map(|s| s.watts), self.held.map(|s| s.watts))
    }

    /// The readings to count now, in order (none, the one given, or a held one and it).
    pub fn judge(&mut self, sample: Sample) -> Vec<Sample> {
        let watts = sample.watts;
        if !(watts.is_finite() && (0.0..=self.bound.watts).contains(&watts)) {
            let why = if watts.is_nan() {
                "not a number".to_string()
            } else if watts < 0.0 {
                "negative".to_string()
            } else {
                format!(
                    "above the {:.0} W no reading may pass ({})",
                    self.bound.watts, self.bound.from
                )
            };
            self.drop_reading(sample.at, &format!("a reading of {watts} W is {why}"));
            return Vec::new();
        }
        let newest = self.held.or(self.last).map(|s| s.at);
        if newest.is_some_and(|at| sample.at <= at) {
            return Vec::new(); // the same reading again, or out of order
        }
        let Some(last) = self.last else {
            self.remember(watts);
            return vec![self.accept(sample)];
        };
        let mut accepted = Vec::new();
        if let Some(held) = self.held.take() {
            if nearer(watts, held.watts, last.watts) {
                accepted.push(self.accept(held));
            } else {
                self.drop_reading(
                    held.at,
                    &format!(
                        "a reading of {} W between {} W and {watts} W is a spike the next \
                         reading does not confirm",
                        held.watts, last.watts
                    ),
                );
            }
        }
        let last = self.last.unwrap_or(last);
        let recurring = self.recent.iter().any(|&level| !self.far(level, watts));
        if self.far(last.watts, watts) && !recurring {
            self.held = Some(sample);
        } else {
            accepted.push(self.accept(sample));
        }
        self.remember(watts);
        accepted
    }

    fn remember(&mut self, watts: f64) {
        self.recent.push_front(watts);
        self.recent.truncate(RECENT_READINGS);
    }

    /// Whether `watts` is too far from `from` to count before the next reading.
    fn far(&self, from: f64, watts: f64) -> bool {
        (watts - from).abs() > JUMP_SHARE * from + JUMP_FLOOR_SHARE * self.bound.watts
    }

    fn accept(&mut self, sample: Sample) -> Sample {
        if let Some(d) = self.dropping.take()
            && d.count > 1
        {
            log::info!(
                "{}: plausible readings again ({:.0} W) after {} dropped over {:.1} s",
                self.what,
                sample.watts,
                d.count,
                sample.at.saturating_duration_since(d.since).as_secs_f64()
            );
        }
        self.last = Some(sample);
        sample
    }

    fn drop_reading(&mut self, at: Instant, why: &str) {
        match &mut self.dropping {
            Some(d) => d.count += 1,
            None => {
                log::warn!(
                    "{}: {why}: not counted; the energy over it is bridged from the readings \
                     around it",
                    self.what
                );
                self.dropping = Some(Dropping {
                    since: at,
                    count: 1,
                });
            }
        }
    }
}

/// `last`, or `held` where it is lower.
fn lower(last: Option<f64>, held: Option<f64>) -> Option<f64> {
    last.map(|w| held.map_or(w, |h| h.min(w)))
}

/// Whether `watts` is nearer `a` than `b`.
fn nearer(watts: f64, a: f64, b: f64) -> bool {
    (watts - a).abs() < (watts - b).abs()
}

/// Why there is no reading.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadError {
    /// The connection works but this reading is not usable (e.g. all zero): skip it.
    #[error("{0}")]
    Skip(String),
    /// The connection is broken: drop it and reconnect.
    #[error("{0}")]
    Broken(String),
}

impl From<String> for ReadError {
    fn from(e: String) -> Self {
        ReadError::Broken(e)
    }
}

/// A sensor of whole-node power: the part of a [`Source`] that only the poller thread
/// touches.
///
/// Why a second trait beside [`EnergyReader`]: a counter is read in a few microseconds, so
/// Slurm's calls may read it directly; a power sensor may block for seconds (a hung BMC, a
/// stalled library), so it is read only by the poller, and [`Polled`] turns its samples
/// into the [`EnergyReader`] Slurm's calls see. A power source's [`Source::open`] is
/// [`Polled::start`].
pub trait PowerSensor: Source + Sized + Send {
    /// How often the poller reads the sensor.
    fn period(config: &Self::Config) -> Duration;

    /// Connects. Runs in the poller thread; may block up to the sensor's own timeouts.
    fn connect(config: &Self::Config) -> Result<Self, String>;

    /// What was connected to, for the log.
    fn describe(&self) -> String;

    /// One reading of the node's power. Runs in the poller thread; may block up to the
    /// sensor's own timeouts.
    fn read_watts(&mut self) -> Result<Sample, ReadError>;

    /// Bring the energy from the last sample up to the moment it is read, at the last
    /// power (Slurm's `EnergyIPMICalcAdjustment`), so that a step's final figure is not a
    /// period old.
    fn extrapolate(_config: &Self::Config) -> bool {
        true
    }

    /// The acct_gather.conf key of the source's [`Bound`], and the bound where neither the
    /// key nor the device says one.
    const MAX_WATTS_KEY: &'static str;
    const DEFAULT_MAX_WATTS: u32;

    /// The bound the key sets, if it is set.
    fn max_watts(config: &Self::Config) -> Option<u32>;

    /// The most the device says the node may draw, and what says so (a Redfish chassis'
    /// `PowerCapacityWatts`, a DCMI power limit). Runs in the poller thread after
    /// [`PowerSensor::connect`].
    fn stated_max_watts(&self) -> Option<(f64, String)> {
        None
    }
}

/// Integrated power so far, shared between the poller and the readers.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Integral {
    energy_uj: f64,
    last: Option<(Instant, f64)>,
    /// The energy counter of the last sample, if it had one.
    last_counter_j: Option<f64>,
    /// The most ever reported, so an extrapolation followed by a lower reading never
    /// makes energy go backwards.
    reported_uj: u64,
    /// The power of the reading a [`Screen`] holds: whether the power since the last
    /// reading accepted is that one's or the held one's is unknown until the next reading
    /// (a step, or a spike), so the energy is brought forward at the lower of the two. What
    /// is reported never goes back: a fall (a job's end) brought forward at the power before
    /// would stay counted, as would a spike; a rise is counted whole once confirmed.
    held_watts: Option<f64>,
    /// The bound of the samples added: what a counter can count at most.
    max_watts: f64,
}

impl Integral {
    /// Adds a sample a [`Screen`] accepted; a counter rising faster than `max_watts` (a
    /// reset or a bad reading) is not counted, the power is integrated over that interval
    /// instead.
    pub(crate) fn add(&mut self, sample: &Sample, max_watts: f64) {
        let Sample {
            watts,
            at,
            energy_j,
        } = *sample;
        self.max_watts = max_watts;
        if let Some((t0, w0)) = self.last {
            if at <= t0 {
                return; // the same sample again, or out of order
            }
            let secs = at.saturating_duration_since(t0).as_secs_f64();
            let rise_j = match (self.last_counter_j, energy_j) {
                (Some(before), Some(now)) => Some(now - before),
                _ => None,
            }
            .filter(|rise| (0.0..=max_watts * secs).contains(rise));
            self.energy_uj += match rise_j {
                Some(rise) => rise * 1e6,
                None => secs * (w0 + watts) / 2.0 * 1e6,
            };
        }
        self.last = Some((at, watts));
        self.last_counter_j = energy_j;
    }

    /// The energy up to the last sample.
    #[cfg(feature = "gpu")]
    pub(crate) fn energy_uj(&self) -> f64 {
        self.energy_uj
    }

    /// The sensor's own energy counter where it has one, as the energy reported stands at
    /// it (what was brought forward past the last sample included), while no reading is
    /// held: what a restarted slurmd bridges its absence with
    /// ([`crate::source::Reading::counts`]).
    fn count(&self) -> Option<HardwareCount> {
        let counter_j = self.last_counter_j.filter(|_| self.held_watts.is_none())?;
        let ahead_uj = (self.reported_uj as f64 - self.energy_uj).max(0.0);
        Some(HardwareCount {
            name: "the sensor's energy counter".into(),
            value_uj: (counter_j * 1e6 + ahead_uj) as u64,
            wraps_at_uj: None,
            max_watts: self.max_watts,
        })
    }

    /// The power to show, as [`Screen::power`] says.
    fn watts(&self) -> Option<f64> {
        lower(self.last.map(|(_, w)| w), self.held_watts)
    }

    /// The energy as of `now`: up to the last sample, plus (when `extrapolate`) the time
    /// since at the last power, up to `limit` (a stale sample is not extrapolated).
    fn energy_at(&mut self, now: Instant, extrapolate: bool, limit: Duration) -> u64 {
        let mut energy_uj = self.energy_uj;
        if let (true, Some((at, _)), Some(watts)) = (extrapolate, self.last, self.watts()) {
            let since = now.saturating_duration_since(at).min(limit);
            energy_uj += watts * since.as_secs_f64() * 1e6;
        }
        self.reported_uj = self.reported_uj.max(energy_uj as u64);
        self.reported_uj
    }
}

/// The [`EnergyReader`] of a [`PowerSensor`] polled by its own thread.
pub struct Polled<P: PowerSensor> {
    poller: Poller<Integral>,
    period: Duration,
    extrapolate: bool,
    _sensor: std::marker::PhantomData<fn() -> P>,
}

impl<P: PowerSensor> Polled<P> {
    /// Starts the poller and returns at once: connecting happens in the poller.
    pub fn start(config: &P::Config) -> Result<Self, String> {
        let period = P::period(config);
        let timing = Timing {
            period,
            max_backoff: (period * BACKOFF_PERIODS).clamp(BACKOFF_BOUNDS.0, BACKOFF_BOUNDS.1),
        };
        let poller = Poller::start(
            "power-poller",
            Sensing::<P> {
                config: config.clone(),
                screen: Screen::new(
                    Bound::of(P::MAX_WATTS_KEY, P::max_watts(config), P::DEFAULT_MAX_WATTS),
                    "power",
                ),
            },
            timing,
        )?;
        Ok(Self {
            poller,
            period,
            extrapolate: P::extrapolate(config),
            _sensor: std::marker::PhantomData,
        })
    }
}

/// What the poller does with a [`PowerSensor`]: connect it, read a sample a round, and
/// add what its [`Screen`] accepts to the [`Integral`].
struct Sensing<P: PowerSensor> {
    config: P::Config,
    screen: Screen,
}

/// What a round publishes: the samples the screen accepted, the bound, and the power of
/// the reading it holds.
struct Accepted {
    samples: Vec<Sample>,
    max_watts: f64,
    held_watts: Option<f64>,
}

impl<P: PowerSensor> Polling for Sensing<P> {
    type Link = P;
    type Output = Accepted;
    type Published = Integral;
    const DOING: &'static str = "reading power";
    // Sensor code is third-party protocol code: a panic in it is one more broken
    // connection, and a fresh connection starts from nothing the panic could have left.
    const CONTAIN_PANICS: bool = true;

    fn connect(&mut self) -> Result<P, String> {
        let sensor = P::connect(&self.config)?;
        let bound = Bound::resolve(
            P::MAX_WATTS_KEY,
            P::max_watts(&self.config),
            sensor.stated_max_watts(),
            P::DEFAULT_MAX_WATTS,
        );
        if bound != *self.screen.bound() {
            log::info!(
                "power readings above {:.0} W ({}) are not counted",
                bound.watts,
                bound.from
            );
            self.screen.set_bound(bound);
        }
        Ok(sensor)
    }

    /// A reading no node can draw is no broken link: the screen drops it (and the energy
    /// over it is bridged), the session is kept.
    fn round(&mut self, sensor: &mut P) -> Outcome<Accepted> {
        match sensor.read_watts() {
            Ok(sample) => Outcome::Publish(Accepted {
                samples: self.screen.judge(sample),
                max_watts: self.screen.bound().watts,
                held_watts: self.screen.held().map(|s| s.watts),
            }),
            Err(ReadError::Skip(e)) => Outcome::Skip(e),
            Err(ReadError::Broken(e)) => Outcome::Reconnect(e),
        }
    }

    fn publish(accepted: Accepted, integral: &mut Integral) {
        for sample in &accepted.samples {
            integral.add(sample, accepted.max_watts);
        }
        integral.held_watts = accepted.held_watts;
    }

    fn cannot_connect(why: &str, max_backoff: Duration) -> String {
        format!(
            "cannot connect to the power sensor: {why}; retrying with backoff up to {} s",
            max_backoff.as_secs()
        )
    }

    fn connected(sensor: &P) -> Option<String> {
        Some(format!("connected: {}", sensor.describe()))
    }

    fn recovered(accepted: &Accepted) -> Option<String> {
        Some(match accepted.samples.last() {
            Some(sample) => format!("power readings are back ({:.0} W)", sample.watts),
            None => "power readings are back".into(),
        })
    }
}

impl<P: PowerSensor> EnergyReader for Polled<P> {
    fn describe(&self) -> String {
        format!("power polled every {:.1} s", self.period.as_secs_f64())
    }

    fn read(&mut self, now: Instant) -> Reading {
        let mut integral = self.poller.latest();
        let missed = missed_after(self.period);
        let fresh = integral
            .last
            .is_some_and(|(at, _)| now.saturating_duration_since(at) <= missed);
        let energy_uj = integral.energy_at(now, self.extrapolate, missed);
        Reading {
            energy_uj,
            complete: fresh,
            problems: if fresh || integral.last.is_none() {
                vec![]
            } else {
                vec!["no power reading for too long".into()]
            },
            watts: integral.watts(),
            counts: integral.count().into_iter().collect(),
            ..Reading::default()
        }
    }

    /// The cache is in memory: reading it often costs nothing and keeps CurrentWatts fresh.
    fn sample_period(&self) -> Duration {
        Duration::from_secs(1).min(self.period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound far above every power of these tests.
    const MAX: f64 = 1e6;

    #[test]
    fn trapezoid_with_sub_second_timestamps() {
        let t0 = Instant::now();
        let mut i = Integral::default();
        let at = |ms| t0 + Duration::from_millis(ms);
        i.add(
            &Sample {
                watts: 100.0,
                at: at(0),
                energy_j: None,
            },
            MAX,
        );
        // 0.5 s * 200 W = 100 J
        i.add(
            &Sample {
                watts: 300.0,
                at: at(500),
                energy_j: None,
            },
            MAX,
        );
        // 2 s * 300 W = 600 J
        i.add(
            &Sample {
                watts: 300.0,
                at: at(2500),
                energy_j: None,
            },
            MAX,
        );
        assert!((i.energy_uj - 700e6).abs() < 1.0, "{}", i.energy_uj);
    }

    #[test]
    fn extrapolation_brings_energy_to_the_call_and_never_goes_back() {
        let t0 = Instant::now();
        let limit = Duration::from_secs(10);
        let mut i = Integral::default();
        let power = |ms, watts| Sample {
            watts,
            at: t0 + Duration::from_millis(ms),
            energy_j: None,
        };
        i.add(&power(0, 300.0), MAX);
        i.add(&power(1000, 300.0), MAX); // 300 J
        let at = |ms| t0 + Duration::from_millis(ms);
        // 0.5 s after the last sample at 300 W
        assert_eq!(i.energy_at(at(1500), true, limit), 450_000_000);
        assert_eq!(i.energy_at(at(1500), false, limit), 450_000_000); // never backwards
        // the power had fallen to 0: the trapezoid (375 J) is below what was reported
        i.add(&power(1500, 0.0), MAX);
        assert_eq!(i.energy_at(at(2500), true, limit), 450_000_000);
        i.add(&power(2500, 0.0), MAX);
        i.add(&power(3500, 300.0), MAX); // 375 + 150 J
        assert_eq!(i.energy_at(at(3500), false, limit), 525_000_000);
        // a stale sample is extrapolated only up to the limit: 525 J + 10 s at 300 W
        assert_eq!(i.energy_at(at(60_000), true, limit), 3_525_000_000);
    }

    #[test]
    fn an_energy_counter_is_counted_and_a_reset_falls_back_to_the_power() {
        let t0 = Instant::now();
        let mut i = Integral::default();
        let mut add = |ms, watts, energy_j| {
            i.add(
                &Sample {
                    watts,
                    at: t0 + Duration::from_millis(ms),
                    energy_j,
                },
                MAX,
            );
            i.energy_uj
        };
        add(0, 100.0, Some(5000.0));
        // the counter, not the trapezoid (which would say 200 J)
        assert!((add(1000, 300.0, Some(5150.0)) - 150e6).abs() < 1.0);
        // the counter fell (a BMC reset): 1 s at 300 W, integrated
        assert!((add(2000, 300.0, Some(10.0)) - 450e6).abs() < 1.0);
        assert!((add(3000, 300.0, Some(310.0)) - 750e6).abs() < 1.0);
        // no counter in this sample: integrated, and the next counter starts afresh
        assert!((add(4000, 100.0, None) - 950e6).abs() < 1.0);
        assert!((add(5000, 100.0, Some(900.0)) - 1050e6).abs() < 1.0);
    }

    /// A sensor's energy counter is the count a restarted slurmd bridges its absence with,
    /// at the energy as reported: what was brought forward past the last sample is not
    /// counted again.
    #[test]
    fn the_count_stands_where_the_reported_energy_does() {
        let t0 = Instant::now();
        let mut i = Integral::default();
        let sample = |ms, energy_j| Sample {
            watts: 100.0,
            at: t0 + Duration::from_millis(ms),
            energy_j: Some(energy_j),
        };
        i.add(&sample(0, 1_000.0), MAX);
        i.add(&sample(1_000, 1_100.0), MAX);
        // reported half a second later, brought forward at 100 W: 150 J
        let reported = i.energy_at(
            t0 + Duration::from_millis(1_500),
            true,
            Duration::from_secs(3),
        );
        assert_eq!(reported, 150_000_000);
        let count = i.count().expect("a counter");
        assert_eq!(count.value_uj, 1_150_000_000);
        assert_eq!((count.wraps_at_uj, count.max_watts), (None, MAX));
        // 2.5 s on, the counter reads 1 400 J: 250 J more, at 100 W
        let later = HardwareCount {
            value_uj: 1_400_000_000,
            ..count.clone()
        };
        assert_eq!(
            crate::source::bridge(&[count], &[later], 2.5),
            Some(250_000_000)
        );
        // a sensor without a counter has none
        let mut power_only = Integral::default();
        power_only.add(&Sample::now(100.0), MAX);
        assert_eq!(power_only.count(), None);
    }

    /// A 40 s job read every second; `reading(k)` is what the sensor says at second k.
    /// The energy the screen and the trapezoid make of it (J), and the last reading
    /// accepted after each reading.
    fn screened_job(bound: f64, reading: impl Fn(u32) -> f64) -> (f64, Vec<f64>) {
        let t0 = Instant::now();
        let mut screen = Screen::new(
            Bound {
                watts: bound,
                from: "test".into(),
            },
            "power",
        );
        let mut i = Integral::default();
        let mut shown = Vec::new();
        for k in 0..=40 {
            let sample = Sample {
                watts: reading(k),
                at: t0 + Duration::from_secs(k.into()),
                energy_j: None,
            };
            for accepted in screen.judge(sample) {
                i.add(&accepted, bound);
            }
            shown.extend(screen.last().map(|s| s.watts));
        }
        (i.energy_uj / 1e6, shown)
    }

    /// The bar: a 1, 2 or 3-reading glitch of any size out of bound (1e12 W, the 65535 W
    /// of all ones, negative, not a number, infinite), and a one-reading spike of any size
    /// within it (up or down), costs at most 0.1% of a 40 s job at 300 W (12 000 J): here
    /// nothing at all, and the last reading accepted stays 300 W.
    #[test]
    fn a_glitch_of_one_to_three_readings_costs_nothing() {
        let truth = 300.0 * 40.0;
        let out_of_bound = [
            1e12,
            65535.0,
            20_001.0,
            -1.0,
            -65535.0,
            f64::NAN,
            f64::INFINITY,
        ];
        for glitch in out_of_bound {
            for len in 1..=3 {
                for first in [1, 10, 37] {
                    let (joules, shown) = screened_job(20_000.0, |k| {
                        if (first..first + len).contains(&k) {
                            glitch
                        } else {
                            300.0
                        }
                    });
                    let error = (joules - truth).abs() / truth;
                    assert!(error <= 0.001, "{glitch} W x{len} at {first}: {joules} J");
                    assert!(shown.iter().all(|w| *w == 300.0), "{glitch}: {shown:?}");
                }
            }
        }
        for spike in [0.0, 150.0, 330.0, 600.0, 1500.0, 19_999.0] {
            let (joules, shown) = screened_job(20_000.0, |k| if k == 20 { spike } else { 300.0 });
            assert!(
                (joules - truth).abs() / truth <= 0.001,
                "{spike} W: {joules} J"
            );
            assert!(shown.iter().all(|w| *w == 300.0), "{spike}: {shown:?}");
        }
        // without the screen the 65535 W of all ones for 1.5 s cost over 10 times the job
        let mut raw = Integral::default();
        let t0 = Instant::now();
        for k in 0..=40u32 {
            let watts = if (10..12).contains(&k) {
                65535.0
            } else {
                300.0
            };
            raw.add(&power_at(t0, k, watts), 1e12);
        }
        assert!(raw.energy_uj / 1e6 > 10.0 * truth);
    }

    fn power_at(t0: Instant, k: u32, watts: f64) -> Sample {
        Sample {
            watts,
            at: t0 + Duration::from_secs(k.into()),
            energy_j: None,
        }
    }

    /// The other side of the bar: a real step from 300 to 600 W that stays (at 19.5 s) is
    /// held for one reading, then counted whole: the energy is the trapezoid's, exact here,
    /// and the power shown follows one reading late. What that costs: while the reading is
    /// held, a reader's figure is brought forward at the lower of the last power accepted
    /// and the held one, so it lags the truth by the step over the time since the step
    /// (here 300 W x 1.49 s = 447 J), and catches up whole at the next reading; only a step
    /// that ends in that period keeps the lag.
    #[test]
    fn a_real_step_is_followed_one_reading_late_and_costs_nothing() {
        let step = |k: u32| if k >= 20 { 600.0 } else { 300.0 };
        let (joules, shown) = screened_job(20_000.0, step);
        let truth = 300.0 * 19.5 + 600.0 * 20.5;
        assert!((joules - truth).abs() < 1e-6, "{joules} J for {truth} J");
        assert_eq!(shown[20], 300.0, "held");
        assert_eq!(shown[21], 600.0, "confirmed by the next reading");
        // what a reader sees while the step is held, and after
        let t0 = Instant::now();
        let limit = Duration::from_secs(10);
        let mut screen = Screen::new(Bound::of("k", None, 20_000), "power");
        let mut i = Integral::default();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        for k in 0..=20 {
            for s in screen.judge(power_at(t0, k, step(k))) {
                i.add(&s, 20_000.0);
            }
            i.held_watts = screen.held().map(|s| s.watts);
        }
        let true_j = |ms: u64| 300.0 * 19.5 + 600.0 * (ms as f64 / 1000.0 - 19.5);
        let lag = true_j(20_990) - i.energy_at(at(20_990), true, limit) as f64 / 1e6;
        assert!((lag - 447.0).abs() < 0.01, "{lag}");
        for s in screen.judge(power_at(t0, 21, 600.0)) {
            i.add(&s, 20_000.0);
        }
        i.held_watts = screen.held().map(|s| s.watts);
        let after = i.energy_at(at(21_000), true, limit) as f64 / 1e6;
        assert!((after - true_j(21_000)).abs() < 1e-3, "{after}");
    }

    /// A job ending: the power falls from 300 W to 0 at 29.5 s, read at 30 s and held; a
    /// reader at 30.9 s sees the energy brought forward at 0 W, never at 300 W (which
    /// would stay counted: what is reported never goes back); the 150 J short of the truth
    /// come with the next reading.
    #[test]
    fn a_fall_held_is_not_brought_forward_at_the_power_before() {
        let t0 = Instant::now();
        let limit = Duration::from_secs(10);
        let mut screen = Screen::new(Bound::of("k", None, 20_000), "power");
        let mut i = Integral::default();
        for k in 0..=30 {
            let watts = if k < 30 { 300.0 } else { 0.0 };
            for s in screen.judge(power_at(t0, k, watts)) {
                i.add(&s, 20_000.0);
            }
            i.held_watts = screen.held().map(|s| s.watts);
        }
        let figure = i.energy_at(t0 + Duration::from_millis(30_900), true, limit);
        assert_eq!(figure, 8_700_000_000);
    }

    /// A ramp, a step down to idle and a load that swings at the sampling rate are the
    /// node's: counted as the trapezoid counts them (the swing loses its first reading).
    #[test]
    fn ramps_drops_and_swings_are_power() {
        let trapezoid = |reading: &dyn Fn(u32) -> f64| {
            (0..40u32)
                .map(|k| (reading(k) + reading(k + 1)) / 2.0)
                .sum::<f64>()
        };
        let ramp = |k: u32| f64::from(100 + 50 * k.min(20));
        let (joules, _) = screened_job(20_000.0, ramp);
        assert!((joules - trapezoid(&ramp)).abs() < 1e-6, "{joules}");
        let drop = |k: u32| if k < 30 { 300.0 } else { 40.0 };
        let (joules, _) = screened_job(20_000.0, drop);
        assert!((joules - trapezoid(&drop)).abs() < 1e-6, "{joules}");
        let swing = |k: u32| if k.is_multiple_of(2) { 300.0 } else { 900.0 };
        let (joules, _) = screened_job(20_000.0, swing);
        let missed = trapezoid(&swing) - joules;
        // the first 900 W reading, dropped as a spike: one reading's excess
        assert!(
            (0.0..=600.0).contains(&missed),
            "{missed} J of {}",
            trapezoid(&swing)
        );
        // a two-reading excursion within the bound is a step, and counted
        let twice = |k: u32| if (10..12).contains(&k) { 1500.0 } else { 300.0 };
        let (joules, _) = screened_job(20_000.0, twice);
        assert!((joules - trapezoid(&twice)).abs() < 1e-6, "{joules}");
    }

    /// The bound: the admin's key, else what the device states (a Redfish chassis'
    /// PowerCapacityWatts, a DCMI power limit) times the margin, else the default; a
    /// reading within the stated limit's bound is power, one beyond is not.
    #[test]
    fn the_bound_is_the_key_else_the_devices_limit_else_the_default() {
        let stated = || Some((800.0, "PowerCapacityWatts".to_string()));
        let b = Bound::resolve("EnergyRedfishMaxWatts", None, stated(), 20_000);
        assert_eq!(b.watts, 1200.0);
        assert!(b.from.contains("PowerCapacityWatts of 800 W"), "{}", b.from);
        let b = Bound::resolve("EnergyRedfishMaxWatts", Some(3000), stated(), 20_000);
        assert_eq!(
            (b.watts, b.from.as_str()),
            (3000.0, "EnergyRedfishMaxWatts")
        );
        for nonsense in [0.0, -5.0, f64::NAN, 1e12] {
            let b = Bound::resolve("k", None, Some((nonsense, "x".into())), 20_000);
            assert_eq!(b.watts, 20_000.0, "{nonsense}");
        }
        // 800 W stated: a real 1100 W is power, 1300 W (a spike of any length) is not
        let b = Bound::resolve("k", None, stated(), 20_000);
        let (joules, _) = screened_job(b.watts, |k| if k >= 20 { 1100.0 } else { 300.0 });
        assert!((joules - (300.0 * 19.5 + 1100.0 * 20.5)).abs() < 1e-6);
        let (joules, _) = screened_job(
            b.watts,
            |k| if (20..23).contains(&k) { 1300.0 } else { 300.0 },
        );
        assert!((joules - 12_000.0).abs() < 1e-6, "{joules}");
        assert_eq!(parse_max_watts("k", "1200"), Ok(1200));
        for bad in ["0", "-1", "1.5", "12kW", "10000001", ""] {
            let e = parse_max_watts("EnergyIPMIMaxWatts", bad).expect_err(bad);
            assert!(
                e.to_string().contains(&format!("EnergyIPMIMaxWatts={bad}")),
                "{e}"
            );
        }
        assert_eq!(show_max_watts(None, 5000, false), "5000");
        assert!(show_max_watts(None, 20_000, true).contains("stated limit"));
    }

    /// A BMC with an energy counter whose power reads 1e12 W: the sample is dropped, and
    /// the counter's rise across it is the energy.
    #[test]
    fn a_glitch_beside_an_energy_counter_is_bridged_by_the_counter() {
        let t0 = Instant::now();
        let mut screen = Screen::new(Bound::of("k", None, 20_000), "power");
        let mut i = Integral::default();
        for k in 0..=10u32 {
            let watts = if k == 5 { 1e12 } else { 300.0 };
            let sample = Sample {
                watts,
                at: t0 + Duration::from_secs(k.into()),
                energy_j: Some(1000.0 + 310.0 * f64::from(k)),
            };
            for s in screen.judge(sample) {
                i.add(&s, 20_000.0);
            }
        }
        assert!((i.energy_uj - 3100e6).abs() < 1.0, "{}", i.energy_uj);
    }
}
