//! Sources that may block (a BMC, Variorum, the GPU libraries): a poller thread polls them,
//! and [`Polled`], the one adapter, makes a [`Source`] of what it publishes; Slurm's calls
//! only ever see that. Sensors yield `Power`, which their poller integrates into energy
//! ([`SensorPolling`]).
//!
//! Polling such a source can block (a hung BMC, a stalled library), so it happens only in
//! the poller thread (a `crate::scheduler::Poller`), which reconnects with backoff after
//! failures. A sensor's energy is the trapezoid
//! of successive samples with sub-second timestamps; across a gap (a frozen BMC) the
//! trapezoid between the last sample before and the first after is the estimate, as in
//! Slurm's ipmi plugin. A cache whose last sample is older than [`missed_after`] the period
//! makes the reading incomplete, so Slurm gets "unavailable", never 0 or a stale figure.
//!
//! Every power reading passes a [`Screen`] before it is energy (here, and wherever a power
//! is integrated or stands in for energy: a GPU without an energy counter, pm_counters'
//! power): a reading no node can draw (above the source's [`Bound`], negative, not a
//! number) is dropped, and a reading far from the last one is held until the next reading
//! tells a real step from a one-reading spike, as `crate::counter` holds a counter's
//! burst. What is dropped is bridged as a gap is.

use std::time::{Duration, Instant};

mod screen;

pub(crate) use screen::{Bound, Screen, parse_max_watts, show_max_watts};

use crate::plugin::Opened;
use crate::scheduler::{Poller, Polling, Timing};
use crate::source::{Failure, HardwareCount, Reading, Sample, Sensor, Source, missed_after};
use screen::lower;

/// A power sensor's reconnecting backs off, doubling from one period up to this many
/// periods (within `BACKOFF_BOUNDS`): a sensor that comes back is read again soon, so the
/// energy of the gap is bridged before the steps that need it end ([`sensor_backoff`]).
const BACKOFF_PERIODS: u32 = 4;
const BACKOFF_BOUNDS: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(60));

/// How a source that may block is polled, from its plugin's configuration: known before it
/// connects, since connecting happens in its poller. Sensors and the GPUs alike start their
/// pollers from it ([`Polled::start`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How often the poller polls the source.
    pub period: Duration,
    /// Reconnecting backs off, doubling from one period, up to this ([`sensor_backoff`]
    /// for a power sensor).
    pub max_backoff: Duration,
    /// The acct_gather.conf key of the source's [`Bound`], the bound it sets if it is set,
    /// and the bound where neither the key nor the device says one.
    pub max_watts_key: &'static str,
    pub max_watts: Option<u32>,
    pub default_max_watts: u32,
}

impl Settings {
    /// The bound its readings are screened by until a device states one.
    pub(crate) fn bound(&self) -> Bound {
        Bound::of(self.max_watts_key, self.max_watts, self.default_max_watts)
    }
}

/// How far a power sensor polled every `period` backs off reconnecting: `BACKOFF_PERIODS`
/// periods, within `BACKOFF_BOUNDS`.
pub(crate) fn sensor_backoff(period: Duration) -> Duration {
    (period * BACKOFF_PERIODS).clamp(BACKOFF_BOUNDS.0, BACKOFF_BOUNDS.1)
}

/// A sensor as connecting found it: the sensor, and the most the device says the node may
/// draw and what says so (a Redfish chassis' `PowerCapacityWatts`, a DCMI power limit), for
/// the bound its samples are screened by ([`Bound::resolve`]).
pub struct Connected<S> {
    /// The sensor, connected.
    pub sensor: S,
    /// The device's stated limit, where it states one.
    pub stated_max_watts: Option<(f64, String)>,
}

/// Connects a [`Sensor`]: runs in its poller, and may block up to the sensor's own
/// timeouts. An error is retried with backoff.
type Connect<S> = Box<dyn FnMut() -> Result<Connected<S>, String> + Send>;

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
    /// The last energy reported is not yet the samples' (`energy_at`): a power measured up
    /// to it would be the extrapolation's, not the node's, so the reading says it is
    /// unsettled.
    unconfirmed: bool,
    /// The time of the last sample when energy was last reported.
    reported_sample: Option<Instant>,
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

    /// Whether the last energy reported is not yet the samples' (see the field).
    pub(crate) fn unconfirmed(&self) -> bool {
        self.unconfirmed
    }

    /// When the last sample was taken.
    pub(crate) fn last_at(&self) -> Option<Instant> {
        self.last.map(|(at, _)| at)
    }

    /// Sets the power of the reading a [`Screen`] holds (see the field).
    pub(crate) fn hold(&mut self, watts: Option<f64>) {
        self.held_watts = watts;
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
    pub(crate) fn watts(&self) -> Option<f64> {
        lower(self.last.map(|(_, w)| w), self.held_watts)
    }

    /// The energy as of `now`: up to the last sample, plus (when `extrapolate`) the time
    /// since at the last power, up to `limit` (a stale sample is not extrapolated).
    pub(crate) fn energy_at(&mut self, now: Instant, extrapolate: bool, limit: Duration) -> u64 {
        let mut energy_uj = self.energy_uj;
        let sample = self.last.map(|(at, _)| at);
        // brought forward from a sample an earlier report already was
        let mut stale = false;
        if let (true, Some((at, _)), Some(watts)) = (extrapolate, self.last, self.watts()) {
            let since = now.saturating_duration_since(at).min(limit);
            energy_uj += watts * since.as_secs_f64() * 1e6;
            stale = !since.is_zero() && sample == self.reported_sample;
        }
        // A report is the node's only from a sample new since the last report, brought
        // forward no further than to this report, and not held at what was reported
        // before: past a fall (a BMC read every 5 s, its power fallen since the sample), a
        // figure brought forward at the power before is above the truth, and what is
        // reported waits, unchanged, until the samples catch up. A power measured between
        // such reports would be the wait's (near 0 W: a shared node's static power learned
        // at 39 W for a node that never drew less than 100 W), so they are unconfirmed;
        // the error left is one report's time at the change, not a sample period's.
        let held_back = (energy_uj as u64) < self.reported_uj;
        self.unconfirmed = held_back || stale;
        self.reported_sample = sample;
        self.reported_uj = self.reported_uj.max(energy_uj as u64);
        self.reported_uj
    }
}

/// A source that may block, as its poller runs it (its [`Polling`]) and as Slurm's calls
/// read what the poller publishes (its [`Blocking::Readout`]): [`Polled`] joins the two,
/// the one adapter from a blocking source to a [`Source`]. A power sensor's is
/// [`SensorPolling`]; the GPUs' is `crate::gpu`'s.
pub(crate) trait Blocking: Polling {
    /// What Slurm's reads keep between reads (the period, how energy is brought forward).
    type Readout: Send + 'static;
    /// The poller thread's name.
    const THREAD: &'static str;
    /// A read waits at most this long for a fresh round ([`Poller::fresh`]); zero: it
    /// takes the latest, without waking the poller.
    const FRESH_WAIT: Duration;

    /// One line for the log: what was found and how it is read.
    fn describe(readout: &Self::Readout) -> String;

    /// The reading at `now` of what the poller last published (under the poller's lock: no
    /// hardware call here).
    fn reading(
        readout: &mut Self::Readout,
        published: &mut Self::Published,
        now: Instant,
    ) -> Reading;
}

/// A [`Blocking`] source polled by its own thread, as a source of [`Reading`]s: the one
/// adapter every sensor and the GPUs go through.
// `pub` as each blocking plugin's `Plugin::Source`, yet named outside the crate only through
// it: how it polls (`Blocking`, `Polling`) stays the crate's.
#[allow(private_bounds)]
pub struct Polled<P: Blocking> {
    poller: Poller<P::Published>,
    readout: P::Readout,
}

#[allow(private_bounds)] // as on `Polled`
impl<P: Blocking> Polled<P> {
    /// Why the poller publishes nothing, while connecting or rounds fail (the log says it
    /// in production; the GPUs' tests ask).
    #[cfg(all(test, feature = "gpu"))]
    pub(crate) fn failure(&self) -> Option<String> {
        self.poller.latest().failure().map(str::to_string)
    }

    /// Starts `polling` in its thread, at the settings' period and backoff, and returns at
    /// once: the one way a source that may block reaches the scheduler.
    pub(crate) fn start(
        settings: &Settings,
        polling: P,
        readout: P::Readout,
    ) -> Result<Self, String> {
        let timing = Timing {
            period: settings.period,
            max_backoff: settings.max_backoff,
        };
        Ok(Self {
            poller: Poller::start(P::THREAD, polling, timing)?,
            readout,
        })
    }
}

impl<P: Blocking> Source for Polled<P> {
    fn describe(&self) -> String {
        P::describe(&self.readout)
    }

    fn poll(&mut self, now: Instant) -> Reading {
        let mut published = self.poller.fresh(P::FRESH_WAIT);
        P::reading(&mut self.readout, &mut published, now)
    }
}

/// What the poller does with a [`Sensor`]: connect it, poll a sample a round, and add what
/// its [`Screen`] accepts to the [`Integral`].
pub struct SensorPolling<S> {
    connect: Connect<S>,
    settings: Settings,
    screen: Screen,
}

impl<S: Sensor> SensorPolling<S> {
    /// Starts polling the sensor `connect` connects (in the poller) and returns at once.
    /// The meter reads the cache each second, or each period where that is shorter:
    /// reading it costs nothing and keeps CurrentWatts fresh. `extrapolate`: bring the
    /// energy from the last sample up to the moment it is read, at the last power (Slurm's
    /// `EnergyIPMICalcAdjustment`), so that a step's final figure is not a period old.
    pub fn polled(
        settings: &Settings,
        extrapolate: bool,
        connect: impl FnMut() -> Result<Connected<S>, String> + Send + 'static,
    ) -> Result<Opened<Polled<Self>>, String> {
        let polling = Self {
            connect: Box::new(connect),
            settings: settings.clone(),
            screen: Screen::new(settings.bound(), "power"),
        };
        let readout = SensorReadout {
            period: settings.period,
            extrapolate,
        };
        Ok(Opened {
            source: Polled::start(settings, polling, readout)?,
            sample_period: Duration::from_secs(1).min(settings.period),
        })
    }
}

/// How Slurm's reads make a reading of a sensor's [`Integral`].
pub(crate) struct SensorReadout {
    period: Duration,
    /// Whether the energy is brought forward from the last sample at the last power.
    extrapolate: bool,
}

/// What a round publishes: the samples the screen accepted, the bound, and the power of
/// the reading it holds.
pub(crate) struct Accepted {
    samples: Vec<Sample>,
    max_watts: f64,
    held_watts: Option<f64>,
}

impl<S: Sensor> Polling for SensorPolling<S> {
    type Link = S;
    type Output = Accepted;
    type Published = Integral;
    const DOING: &'static str = "reading power";
    // Sensor code is third-party protocol code: a panic in it is one more broken
    // connection, and a fresh connection starts from nothing the panic could have left.
    const CONTAIN_PANICS: bool = true;

    fn connect(&mut self) -> Result<S, String> {
        let Connected {
            sensor,
            stated_max_watts,
        } = (self.connect)()?;
        let bound = Bound::resolve(
            self.settings.max_watts_key,
            self.settings.max_watts,
            stated_max_watts,
            self.settings.default_max_watts,
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
    fn poll(&mut self, sensor: &mut S) -> Result<Accepted, Failure> {
        let sample = sensor.poll(Instant::now())?;
        Ok(Accepted {
            samples: self.screen.judge(sample),
            max_watts: self.screen.bound().watts,
            held_watts: self.screen.held().map(|s| s.watts),
        })
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

    fn connected(sensor: &S) -> Option<String> {
        Some(format!("connected: {}", sensor.describe()))
    }

    fn recovered(accepted: &Accepted) -> Option<String> {
        Some(match accepted.samples.last() {
            Some(sample) => format!("power readings are back ({:.0} W)", sample.watts),
            None => "power readings are back".into(),
        })
    }
}

impl<S: Sensor> Blocking for SensorPolling<S> {
    type Readout = SensorReadout;
    const THREAD: &'static str = "power-poller";
    const FRESH_WAIT: Duration = Duration::ZERO;

    fn describe(readout: &SensorReadout) -> String {
        format!("power polled every {:.1} s", readout.period.as_secs_f64())
    }

    fn reading(readout: &mut SensorReadout, integral: &mut Integral, now: Instant) -> Reading {
        let missed = missed_after(readout.period);
        let fresh = integral
            .last
            .is_some_and(|(at, _)| now.saturating_duration_since(at) <= missed);
        let energy_uj = integral.energy_at(now, readout.extrapolate, missed);
        Reading {
            energy_uj,
            complete: fresh,
            problems: if fresh || integral.last.is_none() {
                vec![]
            } else {
                vec!["no power reading for too long".into()]
            },
            watts: integral.watts(),
            unsettled: integral.unconfirmed,
            counts: integral.count().into_iter().collect(),
            ..Reading::default()
        }
    }
}

#[cfg(test)]
mod tests;
