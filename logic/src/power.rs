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

use std::time::{Duration, Instant};

use crate::poller::{Outcome, Poller, Polling, Timing};
use crate::source::{EnergyReader, Reading, Source, missed_after};

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

/// More than any node draws: a counter rising faster is not counted (a reset or a bad
/// reading); the power is integrated over that interval instead.
const MAX_COUNTER_WATTS: f64 = 1e6;

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
}

/// Integrated power so far, shared between the poller and the readers.
#[derive(Debug, Default, Clone, Copy)]
struct Integral {
    energy_uj: f64,
    last: Option<(Instant, f64)>,
    /// The energy counter of the last sample, if it had one.
    last_counter_j: Option<f64>,
    /// The most ever reported, so an extrapolation followed by a lower reading never
    /// makes energy go backwards.
    reported_uj: u64,
}

impl Integral {
    fn add(&mut self, sample: &Sample) {
        let Sample {
            watts,
            at,
            energy_j,
        } = *sample;
        if let Some((t0, w0)) = self.last {
            if at <= t0 {
                return; // the same sample again, or out of order
            }
            let secs = at.saturating_duration_since(t0).as_secs_f64();
            let rise_j = match (self.last_counter_j, energy_j) {
                (Some(before), Some(now)) => Some(now - before),
                _ => None,
            }
            .filter(|rise| (0.0..=MAX_COUNTER_WATTS * secs).contains(rise));
            self.energy_uj += match rise_j {
                Some(rise) => rise * 1e6,
                None => secs * (w0 + watts) / 2.0 * 1e6,
            };
        }
        self.last = Some((at, watts));
        self.last_counter_j = energy_j;
    }

    /// The energy as of `now`: up to the last sample, plus (when `extrapolate`) the time
    /// since at the last power, up to `limit` (a stale sample is not extrapolated).
    fn energy_at(&mut self, now: Instant, extrapolate: bool, limit: Duration) -> u64 {
        let mut energy_uj = self.energy_uj;
        if let (true, Some((at, watts))) = (extrapolate, self.last) {
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

/// What the poller does with a [`PowerSensor`]: connect it, read a sample a round, add
/// the sample to the [`Integral`].
struct Sensing<P: PowerSensor> {
    config: P::Config,
}

impl<P: PowerSensor> Polling for Sensing<P> {
    type Link = P;
    type Output = Sample;
    type Published = Integral;
    const DOING: &'static str = "reading power";
    // Sensor code is third-party protocol code: a panic in it is one more broken
    // connection, and a fresh connection starts from nothing the panic could have left.
    const CONTAIN_PANICS: bool = true;

    fn connect(&mut self) -> Result<P, String> {
        P::connect(&self.config)
    }

    fn round(&mut self, sensor: &mut P) -> Outcome<Sample> {
        match sensor.read_watts() {
            Ok(sample) if sample.watts.is_finite() && sample.watts >= 0.0 => {
                Outcome::Publish(sample)
            }
            Ok(Sample { watts, .. }) => {
                Outcome::Reconnect(format!("the sensor returned an impossible power {watts} W"))
            }
            Err(ReadError::Skip(e)) => Outcome::Skip(e),
            Err(ReadError::Broken(e)) => Outcome::Reconnect(e),
        }
    }

    fn publish(sample: Sample, integral: &mut Integral) {
        integral.add(&sample);
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

    fn recovered(sample: &Sample) -> Option<String> {
        Some(format!("power readings are back ({:.0} W)", sample.watts))
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
        Reading {
            energy_uj: integral.energy_at(now, self.extrapolate, missed),
            complete: fresh,
            problems: if fresh || integral.last.is_none() {
                vec![]
            } else {
                vec!["no power reading for too long".into()]
            },
            watts: integral.last.map(|(_, w)| w),
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

    #[test]
    fn trapezoid_with_sub_second_timestamps() {
        let t0 = Instant::now();
        let mut i = Integral::default();
        let at = |ms| t0 + Duration::from_millis(ms);
        i.add(&Sample {
            watts: 100.0,
            at: at(0),
            energy_j: None,
        });
        // 0.5 s * 200 W = 100 J
        i.add(&Sample {
            watts: 300.0,
            at: at(500),
            energy_j: None,
        });
        // 2 s * 300 W = 600 J
        i.add(&Sample {
            watts: 300.0,
            at: at(2500),
            energy_j: None,
        });
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
        i.add(&power(0, 300.0));
        i.add(&power(1000, 300.0)); // 300 J
        let at = |ms| t0 + Duration::from_millis(ms);
        // 0.5 s after the last sample at 300 W
        assert_eq!(i.energy_at(at(1500), true, limit), 450_000_000);
        assert_eq!(i.energy_at(at(1500), false, limit), 450_000_000); // never backwards
        // the power had fallen to 0: the trapezoid (375 J) is below what was reported
        i.add(&power(1500, 0.0));
        assert_eq!(i.energy_at(at(2500), true, limit), 450_000_000);
        i.add(&power(2500, 0.0));
        i.add(&power(3500, 300.0)); // 375 + 150 J
        assert_eq!(i.energy_at(at(3500), false, limit), 525_000_000);
        // a stale sample is extrapolated only up to the limit: 525 J + 10 s at 300 W
        assert_eq!(i.energy_at(at(60_000), true, limit), 3_525_000_000);
    }

    #[test]
    fn an_energy_counter_is_counted_and_a_reset_falls_back_to_the_power() {
        let t0 = Instant::now();
        let mut i = Integral::default();
        let mut add = |ms, watts, energy_j| {
            i.add(&Sample {
                watts,
                at: t0 + Duration::from_millis(ms),
                energy_j,
            });
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
}
