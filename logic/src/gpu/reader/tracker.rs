//! One GPU's energy, from its counter or (where it has none) its power.
//!
//! The counter (NVML's millijoules since the driver loaded, amd-smi's accumulator times
//! its resolution) is counted with [`WrappingCounter`]: when the driver reloads the counter
//! starts again from zero, which is a reset, never a negative or huge delta; the gap is
//! estimated from the power measured after it. A GPU whose counter is not supported
//! (NVML before Volta) is integrated from its power, as a power sensor's is: its readings
//! pass a [`Screen`] (a power above the bound, `EnergyGpuMaxWatts`, or a one-reading spike
//! is not energy), then trapezoids between samples with sub-second timestamps.

use std::time::Instant;

use super::library::{Device, GpuError, GpuLibrary, MigInstance};
use crate::accounting::PowerWindow;
use crate::counter::{Advance, WrappingCounter};
use crate::power::{Bound, Integral, Screen};
use crate::source::{InstanceReading, Sample};

/// MIG instances are placed after every GPU: instance `k` of the GPU at `p` at
/// `MIG_PLACES + p * MAX_INSTANCES + k`.
const MIG_PLACES: u32 = 1 << 16;
/// More MIG instances than a GPU can hold (7 on A100 and H100).
const MAX_INSTANCES: u32 = 64;

/// The counters are 64-bit and never wrap in practice (NVML: 2^64 mJ).
const MODULUS: u64 = 1 << 63;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Not read yet: the first read tries the counter.
    Unknown,
    Counter,
    Power,
}

/// What one GPU has measured so far, as the poller publishes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figure {
    pub vendor: &'static str,
    pub device: Device,
    /// Energy since the GPU was first read.
    pub energy_uj: f64,
    /// The latest power, measured or (from a counter) derived.
    pub watts: Option<f64>,
    /// When the GPU was last read successfully; `None`: never.
    pub at: Option<Instant>,
    /// Lost (fallen off the bus): its energy so far is kept, it is not read again.
    pub lost: bool,
    /// Its place among all the node's GPUs the libraries see.
    pub position: u32,
    /// Each process's use of it so far ([`GpuLibrary::process_use`]).
    pub busy: Vec<(u32, u64)>,
    /// Its MIG instances, with their activity so far.
    pub instances: Vec<InstanceReading>,
}

#[derive(Debug)]
pub(crate) struct Tracked {
    figure: Figure,
    mode: Mode,
    counter: WrappingCounter,
    /// Power readings judged (power mode); its bound is the counter's too.
    screen: Screen,
    /// Power integrated (power mode).
    integral: Integral,
    /// The counter's power, and the instant its clock counts from (the first count).
    power: PowerWindow,
    since: Option<Instant>,
    /// Whether its use per process could not be read at the last sample (said once per
    /// episode: its energy is split by shares meanwhile, which the log must tell).
    use_unread: bool,
}

impl Tracked {
    /// `bound`: the most the GPU may draw; a counter rising faster was reset or misread.
    pub(super) fn new(vendor: &'static str, device: Device, position: u32, bound: Bound) -> Self {
        let name = format!("{vendor} GPU {} ({})", device.index, device.name);
        Self {
            figure: Figure {
                vendor,
                device,
                energy_uj: 0.0,
                watts: None,
                at: None,
                lost: false,
                position,
                busy: Vec::new(),
                instances: Vec::new(),
            },
            mode: Mode::Unknown,
            counter: WrappingCounter::new(MODULUS, bound.watts * 1e6),
            screen: Screen::new(bound, name),
            integral: Integral::default(),
            power: PowerWindow::default(),
            since: None,
            use_unread: false,
        }
    }

    pub(super) fn figure(&self) -> &Figure {
        &self.figure
    }

    /// The GPU is partitioned into `instances` (MIG): Slurm allocates these.
    pub(super) fn partition(&mut self, instances: Vec<MigInstance>) {
        let base = MIG_PLACES + self.figure.position * MAX_INSTANCES;
        self.figure.instances = (base..)
            .zip(instances.into_iter().take(MAX_INSTANCES as usize))
            .map(|(position, i)| {
                log::info!(
                    "{}: MIG instance {} (GPU instance {}, compute instance {}), {} SMs",
                    self.name(),
                    i.uuid,
                    i.gpu_instance,
                    i.compute_instance,
                    i.sms
                );
                InstanceReading {
                    position,
                    uuid: i.uuid,
                    gpu_instance: i.gpu_instance,
                    compute_instance: i.compute_instance,
                    sms: i.sms,
                    activity: None,
                }
            })
            .collect();
    }

    fn name(&self) -> String {
        format!(
            "{} GPU {} ({})",
            self.figure.vendor, self.figure.device.index, self.figure.device.name
        )
    }

    /// Reads the GPU once at `now` (after the library returned). `Ok(Some(note))`: read,
    /// with something for the log; `Err`: not read, with why for the log.
    pub(super) fn sample(
        &mut self,
        lib: &mut dyn GpuLibrary,
        now: Instant,
    ) -> Result<Option<String>, String> {
        if self.figure.lost {
            return Ok(None);
        }
        let index = self.figure.device.index;
        let mut note = None;
        if self.mode != Mode::Power {
            match lib.energy_uj(index) {
                Ok(raw) => {
                    self.mode = Mode::Counter;
                    note = self.count(raw, now);
                }
                Err(GpuError::NotSupported) if self.mode == Mode::Unknown => {
                    self.mode = Mode::Power;
                    note = Some(format!(
                        "{}: no energy counter; its power is integrated",
                        self.name()
                    ));
                }
                Err(e) => return Err(self.failed(e)),
            }
        }
        if self.mode == Mode::Power {
            match lib.power_w(index) {
                Ok(watts) => self.integrate(watts, now),
                Err(e) => return Err(self.failed(e)),
            }
        }
        self.figure.at = Some(now);
        // a GPU that reports no use per process (MIG) is split by the shares held; so is
        // one whose list cannot be read now (amd-smi past its most processes), its use
        // standing still meanwhile, which is said at the episode's start and end
        match lib.process_use(index) {
            Ok(busy) => {
                if std::mem::take(&mut self.use_unread) {
                    note = Some(join(
                        note,
                        format!("{}: each process's use of it is read again", self.name()),
                    ));
                }
                self.figure.busy = busy;
            }
            Err(GpuError::NotSupported) => {}
            Err(e) => {
                if !std::mem::replace(&mut self.use_unread, true) {
                    note = Some(join(
                        note,
                        format!(
                            "{}: each process's use of it cannot be read ({e}); the \
                             energy of its use is split by the shares its holders were \
                             granted until it can",
                            self.name()
                        ),
                    ));
                }
            }
        }
        if !self.figure.instances.is_empty() {
            // instances without GPM are split by their size alone
            let activity = lib.mig_activity(index).unwrap_or_default();
            for i in &mut self.figure.instances {
                i.activity = activity
                    .iter()
                    .find(|(gi, _)| *gi == i.gpu_instance)
                    .map(|(_, busy)| *busy);
            }
        }
        Ok(note)
    }

    fn failed(&mut self, e: GpuError) -> String {
        if e == GpuError::Lost {
            self.figure.lost = true;
            self.figure.watts = None;
            return format!(
                "{} is lost; its energy until now is kept and it is no longer read",
                self.name()
            );
        }
        format!("{}: {e}", self.name())
    }

    fn count(&mut self, raw_uj: u64, now: Instant) -> Option<String> {
        let advance = self.counter.advance(raw_uj, now);
        let energy = self.counter.total_units() as f64;
        self.figure.energy_uj = energy;
        let secs = now
            .saturating_duration_since(*self.since.get_or_insert(now))
            .as_secs_f64();
        self.figure.watts = self
            .power
            .update(secs, energy / 1e6, self.counter.settled());
        match advance {
            Advance::Reset { gap, .. } => Some(format!(
                "{}: the energy counter restarted (driver reloaded?); the {:.1} s before is \
                 estimated from the power measured after it",
                self.name(),
                gap.as_secs_f64()
            )),
            Advance::Suspect { .. } => Some(format!(
                "{}: the energy counter read {raw_uj} uJ, which the last reading cannot reach; \
                 not counted until the next readings tell a restart from a bad read",
                self.name()
            )),
            _ => None,
        }
    }

    /// A power reading, screened (what is dropped is bridged by the readings around it).
    fn integrate(&mut self, watts: f64, now: Instant) {
        let max_watts = self.screen.bound().watts;
        for sample in self.screen.judge(Sample {
            watts,
            at: now,
            energy_j: None,
        }) {
            self.integral.add(&sample, max_watts);
        }
        self.figure.energy_uj = self.integral.energy_uj();
        self.figure.watts = self.screen.power();
    }
}

/// `more` after what `note` says, if anything.
fn join(note: Option<String>, more: String) -> String {
    match note {
        Some(note) => format!("{note}; {more}"),
        None => more,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A library whose GPU 0 answers from a script of results.
    struct Scripted {
        energy: Vec<Result<u64, GpuError>>,
        power: Vec<Result<f64, GpuError>>,
        /// Its processes' use; none reported once the script is spent.
        uses: Vec<Result<Vec<(u32, u64)>, GpuError>>,
    }

    impl GpuLibrary for Scripted {
        fn vendor(&self) -> &'static str {
            "test"
        }
        fn devices(&mut self) -> Result<Vec<Device>, GpuError> {
            Ok(vec![])
        }
        fn energy_uj(&mut self, _: u32) -> Result<u64, GpuError> {
            self.energy.remove(0)
        }
        fn power_w(&mut self, _: u32) -> Result<f64, GpuError> {
            self.power.remove(0)
        }
        fn process_use(&mut self, _: u32) -> Result<Vec<(u32, u64)>, GpuError> {
            if self.uses.is_empty() {
                return Err(GpuError::NotSupported);
            }
            self.uses.remove(0)
        }
    }

    fn gpu() -> Tracked {
        Tracked::new(
            "test",
            Device {
                index: 0,
                file: Some((195, 0)),
                name: "GPU-0".into(),
            },
            0,
            Bound::of("EnergyGpuMaxWatts", None, 5_000),
        )
    }

    #[test]
    fn a_driver_reload_restarts_the_counter_without_a_negative_or_bogus_delta() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let j = |joules: u64| Ok(joules * 1_000_000);
        let mut lib = Scripted {
            // 100 W, then the driver reloads (counter from 0) and 100 W on
            energy: vec![j(50_000), j(50_100), j(50_200), j(0), j(100), j(200)],
            power: vec![],
            uses: vec![],
        };
        let mut g = gpu();
        for s in 0..6 {
            g.sample(&mut lib, at(s)).expect("read");
        }
        let joules = g.figure().energy_uj / 1e6;
        // 200 J before, 1 s gap estimated at 100 W, 200 J after
        assert!((joules - 500.0).abs() < 1.0, "{joules}");
        assert!((g.figure().watts.expect("watts") - 100.0).abs() < 1e-6);
    }

    #[test]
    fn without_a_counter_the_power_is_integrated() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut lib = Scripted {
            energy: vec![Err(GpuError::NotSupported)],
            power: vec![Ok(100.0), Ok(300.0), Ok(300.0)],
            uses: vec![],
        };
        let mut g = gpu();
        let note = g.sample(&mut lib, at(0)).expect("read");
        assert!(note.expect("logged").contains("integrated"));
        g.sample(&mut lib, at(500)).expect("read"); // 100 J
        g.sample(&mut lib, at(2500)).expect("read"); // 600 J
        assert!((g.figure().energy_uj - 700e6).abs() < 1.0);
    }

    /// A GPU without a counter at 200 W whose power reads 65535 W twice, then one 1500 W
    /// spike: nothing of it is energy, the GPU is still read (no failure).
    #[test]
    fn without_a_counter_a_glitch_is_not_energy() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut power = vec![Ok(200.0); 10];
        power[3] = Ok(65535.0);
        power[4] = Ok(65535.0);
        power[7] = Ok(1500.0);
        let mut lib = Scripted {
            energy: vec![Err(GpuError::NotSupported)],
            power,
            uses: vec![],
        };
        let mut g = gpu();
        for s in 0..10 {
            g.sample(&mut lib, at(s)).expect("read");
            assert_eq!(g.figure().watts, Some(200.0));
        }
        assert!(
            (g.figure().energy_uj - 1800e6).abs() < 1.0,
            "{}",
            g.figure().energy_uj
        );
    }

    /// A GPU whose use per process cannot be read (amd-smi past its most processes) says
    /// so once, naming the GPU, and again when it is read again; a GPU that reports no use
    /// (MIG) says nothing. Meanwhile its use stands still (its energy is split by shares).
    #[test]
    fn a_gpu_whose_use_cannot_be_read_says_so_once() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let too_many = || {
            Err(GpuError::Failed(
                "more than 4096 processes use it, the most read".into(),
            ))
        };
        let mut lib = Scripted {
            energy: (0..7).map(|k| Ok(k * 100_000_000)).collect(),
            power: vec![],
            uses: vec![
                Ok(vec![(7, 10)]),
                too_many(),
                too_many(),
                too_many(),
                Ok(vec![(7, 30)]),
                Err(GpuError::NotSupported),
                Err(GpuError::NotSupported),
            ],
        };
        let mut g = gpu();
        let mut notes = Vec::new();
        for s in 0..7 {
            notes.push(g.sample(&mut lib, at(s)).expect("read"));
            if s == 2 {
                assert_eq!(g.figure().busy, vec![(7, 10)], "the last use stands");
            }
        }
        let said = notes[1].as_deref().expect("said when it begins");
        assert!(
            said.starts_with("test GPU 0 (GPU-0): each process's use of it cannot be read")
                && said.contains("more than 4096 processes")
                && said.contains("shares"),
            "{said}"
        );
        let again = notes[4].as_deref().expect("said when it ends");
        assert_eq!(
            again,
            "test GPU 0 (GPU-0): each process's use of it is read again"
        );
        for quiet in [0, 2, 3, 5, 6] {
            assert_eq!(notes[quiet], None, "sample {quiet}");
        }
        assert_eq!(g.figure().busy, vec![(7, 30)]);
    }

    #[test]
    fn a_lost_gpu_keeps_its_energy_and_is_not_read_again() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut lib = Scripted {
            energy: vec![Ok(0), Ok(250_000_000), Err(GpuError::Lost)],
            power: vec![],
            uses: vec![],
        };
        let mut g = gpu();
        g.sample(&mut lib, at(0)).expect("read");
        g.sample(&mut lib, at(1)).expect("read");
        let why = g.sample(&mut lib, at(2)).expect_err("lost");
        assert!(why.contains("lost"), "{why}");
        assert!(g.figure().lost);
        assert_eq!(g.figure().energy_uj, 250e6);
        // not asked again (the script is empty: another call would panic)
        assert_eq!(g.sample(&mut lib, at(3)), Ok(None));
    }
}
