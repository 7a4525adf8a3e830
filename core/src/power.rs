//! Sources that report watts (a BMC, Variorum): a poller thread reads them and integrates
//! the power into energy; Slurm's calls only ever see the cached result.
//!
//! Reading such a sensor can block (a hung BMC, a stalled library), so it happens only in
//! the poller thread, which reconnects with backoff after failures. Energy is the trapezoid
//! of successive samples with sub-second timestamps; across a gap (a frozen BMC) the
//! trapezoid between the last sample before and the first after is the estimate, as in
//! Slurm's ipmi plugin. A cache whose last sample is older than `STALE_PERIODS` periods
//! makes the reading incomplete, so Slurm gets "unavailable", never 0 or a stale figure.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::{ConfigError, KeyValues};
use crate::source::{EnergyReader, EnergySource, Reading};

const STALE_PERIODS: u32 = 3;
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

/// A sensor of whole-node power.
pub trait PowerSensor: Sized + Send + 'static {
    type Config: Default + Clone + PartialEq + Send + std::fmt::Debug + 'static;
    const KEYS: &'static [&'static str];

    fn parse_config(values: &KeyValues) -> Result<Self::Config, ConfigError>;
    fn show_config(config: &Self::Config) -> Vec<(&'static str, String)>;

    /// How often the poller reads the sensor.
    fn period(config: &Self::Config) -> Duration;

    /// Connects. Runs in the poller thread; may block up to the sensor's own timeouts.
    fn connect(config: &Self::Config) -> Result<Self, String>;

    /// What was connected to, for the log.
    fn describe(&self) -> String;

    /// One reading of the node's power. Runs in the poller thread; may block up to the
    /// sensor's own timeouts.
    fn read_watts(&mut self) -> Result<Sample, ReadError>;

    /// Extrapolate the energy from the last reading to the time it is read, at the last
    /// power (Slurm's `EnergyIPMICalcAdjustment`).
    fn extrapolate(_config: &Self::Config) -> bool {
        false
    }

    /// See [`EnergySource::plugin_located`].
    fn plugin_located(_dir: &std::path::Path) {}
}

/// Runs sensor code, turning a panic inside it (third-party protocol code) into an error
/// that makes the poller reconnect.
fn contained<T, E: From<String>>(what: &str, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(E::from(format!("internal error while {what}"))))
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
}

struct Shared {
    integral: Mutex<Integral>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    /// Sleeps up to `d`; true when asked to stop.
    fn sleep(&self, d: Duration) -> bool {
        let stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        if *stop {
            return true;
        }
        let (stop, _) = self
            .wake
            .wait_timeout(stop, d)
            .unwrap_or_else(PoisonError::into_inner);
        *stop
    }
}

/// An [`EnergySource`] over a [`PowerSensor`] polled by its own thread.
pub struct Polled<P: PowerSensor> {
    shared: Arc<Shared>,
    period: Duration,
    extrapolate: bool,
    poller: Option<JoinHandle<()>>,
    _sensor: std::marker::PhantomData<fn() -> P>,
}

impl<P: PowerSensor> Polled<P> {
    fn poll(shared: &Shared, config: &P::Config, period: Duration) {
        let mut sensor: Option<P> = None;
        let max_backoff = (period * BACKOFF_PERIODS).clamp(BACKOFF_BOUNDS.0, BACKOFF_BOUNDS.1);
        let mut backoff = period;
        let mut failing = false;
        loop {
            if sensor.is_none() {
                match contained("connecting", || P::connect(config)) {
                    Ok(s) => {
                        log::info!("connected: {}", s.describe());
                        sensor = Some(s);
                    }
                    Err(e) => {
                        if !failing {
                            log::error!(
                                "cannot connect to the power sensor: {e}; retrying with backoff up to {} s",
                                max_backoff.as_secs()
                            );
                            failing = true;
                        }
                        if shared.sleep(backoff) {
                            return;
                        }
                        backoff = (backoff * 2).min(max_backoff);
                        continue;
                    }
                }
            }
            let Some(s) = sensor.as_mut() else { continue };
            match contained("reading power", || s.read_watts()) {
                Ok(sample) if sample.watts.is_finite() && sample.watts >= 0.0 => {
                    let watts = sample.watts;
                    shared
                        .integral
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .add(&sample);
                    if failing {
                        log::info!("power readings are back ({watts:.0} W)");
                        failing = false;
                    }
                    backoff = period;
                }
                Ok(Sample { watts, .. }) => {
                    log::error!("the sensor returned an impossible power {watts} W; reconnecting");
                    sensor = None;
                }
                Err(ReadError::Skip(e)) => {
                    if !failing {
                        log::error!("reading power failed: {e}; skipping such readings");
                        failing = true;
                    }
                }
                Err(ReadError::Broken(e)) => {
                    if !failing {
                        log::error!("reading power failed: {e}; reconnecting");
                        failing = true;
                    }
                    sensor = None;
                }
            }
            if shared.sleep(period) {
                return;
            }
        }
    }

    /// Stops and joins the poller; a sensor call in progress finishes first (bounded by
    /// its own timeouts).
    fn stop(&mut self) {
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self.poller.take()
            && handle.join().is_err()
        {
            log::error!("the power poller panicked");
        }
    }
}

impl<P: PowerSensor> Drop for Polled<P> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<P: PowerSensor> EnergySource for Polled<P> {
    type Config = P::Config;
    const KEYS: &'static [&'static str] = P::KEYS;
    const FROM_SLURMD_IN_STEPS: bool = true;

    fn parse_config(values: &KeyValues) -> Result<Self::Config, ConfigError> {
        P::parse_config(values)
    }

    fn plugin_located(dir: &std::path::Path) {
        P::plugin_located(dir);
    }

    fn show_config(config: &Self::Config) -> Vec<(&'static str, String)> {
        P::show_config(config)
    }

    /// Starts the poller and returns at once: connecting happens in the poller.
    fn open(config: &Self::Config) -> Result<Self, String> {
        let period = P::period(config);
        let shared = Arc::new(Shared {
            integral: Mutex::new(Integral::default()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let poller_shared = Arc::clone(&shared);
        let poller_config = config.clone();
        let poller = std::thread::Builder::new()
            .name("power-poller".into())
            .spawn(move || {
                // a panic in the sensor code ends polling (readings go stale), not slurmd
                let run = std::panic::AssertUnwindSafe(|| Self::poll(&poller_shared, &poller_config, period));
                if std::panic::catch_unwind(run).is_err() {
                    log::error!("the power poller stopped after an internal error; energy is now unavailable");
                }
            })
            .map_err(|e| format!("cannot start the power poller thread: {e}"))?;
        Ok(Self {
            shared,
            period,
            extrapolate: P::extrapolate(config),
            poller: Some(poller),
            _sensor: std::marker::PhantomData,
        })
    }
}

impl<P: PowerSensor> EnergyReader for Polled<P> {
    fn describe(&self) -> String {
        format!("power polled every {:.1} s", self.period.as_secs_f64())
    }

    fn read(&mut self, now: Instant) -> Reading {
        let mut integral = self
            .shared
            .integral
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let fresh = integral.last.is_some_and(|(at, _)| {
            now.saturating_duration_since(at) <= self.period * STALE_PERIODS
        });
        let mut energy_uj = integral.energy_uj;
        if let (true, Some((at, watts))) = (self.extrapolate, integral.last) {
            energy_uj += watts * now.saturating_duration_since(at).as_secs_f64() * 1e6;
        }
        integral.reported_uj = integral.reported_uj.max(energy_uj as u64);
        Reading {
            energy_uj: integral.reported_uj,
            complete: fresh,
            problems: if fresh || integral.last.is_none() {
                vec![]
            } else {
                vec!["no power reading for too long".into()]
            },
            watts: integral.last.map(|(_, w)| w),
            sensors: Vec::new(),
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
