//! What a source is: a [`Source`] of readings (polled in microseconds) or a [`Sensor`] that
//! may block, what each yields ([`Reading`], [`Power`]), why a sensor's poll fails
//! ([`Failure`]), and the one staleness rule.

use std::time::{Duration, Instant};

mod bridge;

pub(crate) use bridge::{Bridged, Ends, bridge};

/// The one staleness rule, for every source and every reader, in its three figures: for
/// something sampled every `period`,
/// - its samples are **missed** once the last is `max(STALE_PERIODS × period, MIN_MISSED)`
///   old ([`missed_after`]: 3 periods, 2 s at least; a poller's, which the meter reads);
/// - a reading is **stale**, unavailable (`NO_VAL64`), once it is
///   `max(STALE_PERIODS × period, MIN_STALE)` old ([`stale_after`]: 3 periods, 10 s at
///   least; what Slurm and the steps are given).
const STALE_PERIODS: u32 = 3;
/// A reading is never stale sooner, however short the period: a 1 s sampler a few
/// seconds late is late, not a failed sensor.
const MIN_STALE: Duration = Duration::from_secs(10);
/// A sample a fast poller takes may come late by a request's time (an HTTP BMC answers in
/// hundreds of milliseconds): a few late samples are not missing ones.
const MIN_MISSED: Duration = Duration::from_secs(2);

/// How old the last sample of something sampled every `period` may be before the samples
/// count as missing (a power poller's, read by the meter: the meter's own limit,
/// [`stale_after`], then applies on top, so this one has a lower floor).
pub(crate) fn missed_after(period: Duration) -> Duration {
    (period * STALE_PERIODS).max(MIN_MISSED)
}

/// How old a reading of something sampled every `period` may be and still count as current.
pub(crate) fn stale_after(period: Duration) -> Duration {
    missed_after(period).max(MIN_STALE)
}

/// A source of readings: it polls its hardware in microseconds (a counter, a file, a cache)
/// and yields the node's energy so far, a [`Reading`]. The meter polls it from Slurm's calls
/// as well as from its own thread, at the period its plugin's
/// [`crate::plugin::Plugin::open`] returned. The scheduler (`crate::scheduler`) decides the
/// threads; the meter keeps the node's figure.
pub trait Source: Send + 'static {
    /// One line for the log: what was found and how it is read.
    fn describe(&self) -> String;

    /// Polls the hardware once at `now`, and returns quickly (a few `pread`s, a cache): the
    /// meter calls it from Slurm's calls too.
    fn poll(&mut self, now: Instant) -> Reading;
}

/// A sensor that may block (a BMC, a library in a helper process): it yields one power
/// sample or why not, a `Power`, and is polled only by a thread of its own, which
/// integrates it (`crate::power::SensorPolling`) and which `crate::power::Polled` makes a
/// [`Source`] of readings. What it states
/// of itself (the most it may draw) comes with it from connecting
/// (`crate::power::Connected`).
pub trait Sensor: Send + 'static {
    /// One line for the log: what was found and how it is read.
    fn describe(&self) -> String;

    /// Polls the hardware once at `now`; may block up to the hardware's own timeouts.
    fn poll(&mut self, now: Instant) -> Power;
}

/// What a [`Sensor`] yields at each poll: a power sample, or why not.
pub(crate) type Power = Result<Sample, Failure>;

/// A power reading and when it was taken (which for a sensor read through a helper process
/// is earlier than when the poller receives it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// The power, in watts.
    pub watts: f64,
    /// When it was taken.
    pub at: Instant,
    /// The sensor's own energy counter in joules, where it has one (a Redfish BMC's
    /// EnergyJoules): the energy between two samples is then the counter's rise, and the
    /// power is integrated only where the counter cannot be used.
    pub energy_j: Option<f64>,
}

impl Sample {
    /// `watts` read now, without an energy counter.
    pub fn now(watts: f64) -> Self {
        Self {
            watts,
            at: Instant::now(),
            energy_j: None,
        }
    }
}

/// Why a poll of a [`Sensor`] gave nothing, and so what its poller does next.
/// Both are retried: what is never retried is the plugin's [`crate::plugin::Plugin::open`]
/// failing (the node reports no energy, and the log says why). A source of [`Reading`]s
/// never fails whole: a counter it could not read leaves the reading incomplete
/// ([`Reading::complete`]) and catches up when it can be read again.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Failure {
    /// The connection works but this poll's result is not usable (e.g. all zero): skip it,
    /// keep the connection, poll again next period.
    #[error("{0}")]
    Retry(String),
    /// The connection is broken: drop it and connect again, with backoff.
    #[error("{0}")]
    Reconnect(String),
}

/// `text` with `%n` as `node` (Slurm's NodeName) and `%h` as this host's name
/// (`gethostname`), as slurm.conf(5) has them: a node may be named apart from its host
/// (NodeHostname, several slurmds on one host).
pub(crate) fn expand_node(text: &str, node: &str) -> String {
    expand(text, node, &host_name())
}

/// This host's name as Slurm takes it for `%h` (`gethostname_short`): the kernel's, up to
/// its first dot.
pub(crate) fn host_name() -> String {
    let name = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    match name.split_once('.') {
        Some((short, _)) => short.to_string(),
        None => name,
    }
}

fn expand(text: &str, node: &str, host: &str) -> String {
    text.replace("%n", node).replace("%h", host)
}

/// The node's energy since the source was opened.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reading {
    /// The energy, in microjoules.
    pub energy_uj: u64,
    /// Every counter was read. When not, `energy_uj` lags behind; the failed counters
    /// catch up when they can be read again.
    pub complete: bool,
    /// Counters that failed or misbehaved in this read, for the log.
    pub problems: Vec<String>,
    /// The power a sensor reported with this energy; counters leave it out and CurrentWatts
    /// is then derived from the energy.
    pub watts: Option<f64>,
    /// A counter holds a read undecided (a burst or a suspect, until the next reads tell a
    /// real jump from a bad value): energy it counts later may have accrued before this
    /// reading, so no power is measured up to it.
    pub unsettled: bool,
    /// Parts of the node measured beside it (pm_counters' cpu, memory, accelN), always
    /// the same list from the same source: extra records after the node's, never added to
    /// it.
    pub parts: Vec<PartReading>,
    /// The devices Slurm allocates to jobs that the source measures (rust_gpu's GPUs), for
    /// slurmd's ledger to charge each job the devices it holds.
    pub devices: Vec<DeviceReading>,
    /// The hardware's own counts that `energy_uj` adds up, as any process reading the
    /// same hardware sees them (empty for a source of power only): a slurmd started again
    /// bridges the time it was away with their rise (`bridge`).
    pub counts: Vec<HardwareCount>,
    /// When the hardware took `energy_uj`, where the source knows it (a node controller
    /// stamps each scan); `None`: as the poll began. A value that waited to be read (a
    /// controller late with its scan, a poll that stalled) is timed as the hardware took
    /// it, so the power between readings is energy over the time it was used in.
    pub taken_at: Option<Instant>,
}

/// One of the hardware's energy counts behind a [`Reading`]: its value now, as the hardware
/// holds it, not since the source was opened.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HardwareCount {
    /// Names the counter: the same counter in the next process's readings. A counter whose
    /// count started again (a controller's restart) is named anew.
    pub name: String,
    pub value_uj: u64,
    /// Where it wraps to zero; `None` for a count that never does in a node's life.
    pub wraps_at_uj: Option<u64>,
    /// The most power it can count: a rise beyond that over a gap is not energy.
    pub max_watts: f64,
}

/// One device Slurm allocates to jobs (a GPU) in a [`Reading`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceReading {
    /// Its place in the source's enumeration (NVML's index; AMD's GPUs after NVIDIA's):
    /// Slurm's GRES order where Slurm detects the GPUs itself.
    pub position: u32,
    /// Its device file, `(major, minor)`, when known: gres.conf's `File=` names it.
    pub file: Option<(u32, u32)>,
    /// Energy since the source was opened; never falls.
    pub energy_uj: u64,
    /// Its power now, when it was read recently.
    pub watts: Option<f64>,
    /// Each process's use of the device so far, cumulative, in the vendor's unit (the same
    /// for all the processes of one device): `(pid, use)`.
    pub busy: Vec<(u32, u64)>,
    /// Its MIG instances, when it is partitioned: Slurm allocates these, not the GPU.
    pub instances: Vec<InstanceReading>,
}

/// A MIG instance of a [`DeviceReading`]: a device of its own to Slurm, whose energy is
/// the parent GPU's (which alone has a meter) split among its instances.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstanceReading {
    /// Its place after all the GPUs, its name in the ledger.
    pub position: u32,
    /// NVML's MIG UUID (`MIG-...`), as `CUDA_VISIBLE_DEVICES` names it.
    pub uuid: String,
    /// Its GPU instance and compute instance ids.
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// Its streaming multiprocessors: its size.
    pub sms: u32,
    /// Its SM activity so far where the GPU reports it (GPM: percent-milliseconds),
    /// cumulative; `None` where not.
    pub activity: Option<u64>,
}

/// One part of the node in a [`Reading`].
#[derive(Debug, Clone, PartialEq)]
pub struct PartReading {
    /// Names the part in the log and the profile (`<label>Power`), e.g. `Cpu`, `Accel0`.
    pub label: &'static str,
    /// Energy since the source was opened; `None` when this part could not be read now.
    pub energy_uj: Option<u64>,
    pub watts: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_n_is_the_node_and_percent_h_the_host() {
        assert_eq!(
            expand("https://%n-bmc:%h", "n1", "host7"),
            "https://n1-bmc:host7"
        );
        assert_eq!(expand("bmc", "n1", "host7"), "bmc");
    }

    #[test]
    fn staleness_is_three_periods_but_never_under_ten_seconds() {
        assert_eq!(stale_after(Duration::from_secs(1)), MIN_STALE);
        assert_eq!(
            stale_after(Duration::from_secs(10)),
            Duration::from_secs(30)
        );
    }
}
