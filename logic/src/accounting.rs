//! Node and step energy bookkeeping, independent of where the energy comes from.
//!
//! Energy is kept in microjoules from the source's monotonic total; Slurm gets whole joules.
//! CurrentWatts is the power over the most recent window of at least one second (sub-second
//! timestamps) between settled readings ([`PowerWindow`]); AveWatts is the true average
//! since the first reading. A reading older than the staleness limit makes the record
//! unavailable (`None`, i.e. `NO_VAL64`), never 0.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::source::{PartReading, Reading};

/// CurrentWatts is averaged over at least this long, so two reads microseconds apart do
/// not produce a meaningless figure.
const WATTS_WINDOW: f64 = 1.0;
/// A window is closed at an unsettled reading once it is this long: a counter that holds a
/// value undecided for longer (a suspect read again and again) leaves the power measured
/// over what was counted.
const UNSETTLED_WINDOW: f64 = 10.0;
/// Parts of a node reported beside it (pm_counters: cpu, memory, up to 8 accelerators).
pub(crate) const MAX_PARTS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub at: Instant,
    pub wall: SystemTime,
    pub energy_uj: u64,
    /// No counter holds a read undecided here (see [`Reading::unsettled`]).
    pub settled: bool,
}

impl Point {
    fn unix_secs(&self) -> i64 {
        unix_secs(self.wall)
    }
}

pub(crate) fn unix_secs(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The power of a cumulative energy figure over windows of at least `WATTS_WINDOW`, the
/// one rule for every power derived from energy (the node's, a GPU's, a share's).
///
/// A window closes only at a settled figure: a counter that holds a burst undecided counts
/// it later, when the next read confirms it, and the energy then counted accrued before the
/// read that held it. A window closed at the held read and measured to the confirming one
/// would show both intervals' energy over one (a steep real rise, from nothing to 320 W with
/// a reader late by a second, read as 688 W); measured from before the held read to after
/// it, the power is the true average.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PowerWindow {
    /// Where the current window began: (seconds on the caller's clock, joules then).
    from: Option<(f64, f64)>,
    watts: Option<f64>,
}

impl PowerWindow {
    /// Takes the figure `joules` at `at` (seconds on any clock that does not go back);
    /// returns the power over the last closed window, if one has closed.
    pub(crate) fn update(&mut self, at: f64, joules: f64, settled: bool) -> Option<f64> {
        let (began, before) = *self.from.get_or_insert((at, joules));
        let secs = at - began;
        if secs >= WATTS_WINDOW && (settled || secs >= UNSETTLED_WINDOW) {
            self.watts = Some(((joules - before) / secs).max(0.0));
            self.from = Some((at, joules));
        }
        self.watts
    }

    /// Begins the first window at the figure `joules` at `at`, unless one has begun: for a
    /// caller that knows where its figure started before its first update.
    pub(crate) fn begin(&mut self, at: f64, joules: f64) {
        self.from.get_or_insert((at, joules));
    }

    /// The power since the current window began, at the figure `joules` at `at`: a figure
    /// before the first window closes, once it spans `WATTS_WINDOW` (a window of a few
    /// milliseconds, a step's first sample just after its start, is mostly the counter's
    /// steps: 332 W reported for a step drawing 300 W over counters stepping every 10 ms).
    pub(crate) fn so_far(&self, at: f64, joules: f64) -> Option<f64> {
        let (began, before) = self.from?;
        let secs = at - began;
        (secs >= WATTS_WINDOW).then(|| ((joules - before) / secs).max(0.0))
    }

    pub(crate) fn watts(&self) -> Option<f64> {
        self.watts
    }
}

/// What Slurm's `acct_gather_energy_t` carries, in safe types.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EnergyRecord {
    /// `None` when unavailable (`NO_VAL64`).
    pub consumed_j: Option<u64>,
    /// Joules since the previous record of the same view.
    pub base_consumed_j: u64,
    /// `consumed_j` of the previous record of the same view.
    pub previous_consumed_j: u64,
    /// `None` when unknown (`NO_VAL`; scontrol shows `n/s`).
    pub current_watts: Option<u32>,
    /// Average power since `start_time`, in watts.
    pub ave_watts: u32,
    /// Unix time of the hardware reading the record is built from.
    pub poll_time: i64,
    /// Unix time this process started measuring.
    pub start_time: i64,
}

impl EnergyRecord {
    /// The record as a step's slurmstepd must hand it to Slurm: its jobacct_gather copies
    /// the u32 `current_watts` into the step's u64 power TRES (TRESUsageOutMax/Tot,
    /// common_jag.c), where `NO_VAL` is no marker but 4294967294 W, and keeps the maximum
    /// over polls, so one early unknown reading became the step's peak power in sacct.
    /// There an unknown power is 0, what Slurm's own energy plugins report before their
    /// first rate and the neutral value of the max and sum Slurm takes. slurmd keeps `None`
    /// (`NO_VAL`, which scontrol shows as `n/s`).
    pub fn for_step(self) -> Self {
        Self {
            current_watts: Some(self.current_watts.unwrap_or(0)),
            ..self
        }
    }

    /// A record with every figure unavailable, for a process measuring since `start_time`.
    pub fn unavailable(start_time: i64) -> Self {
        Self {
            start_time,
            ..Self::default()
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Accounting {
    first: Option<Point>,
    /// The latest reading in which every counter was read.
    last: Option<Point>,
    power: PowerWindow,
    /// A power the source reported with its energy (a sensor's), instead of the window's.
    reported_watts: Option<f64>,
    /// When the process started measuring (for `slurmd_start_time`).
    started: Option<SystemTime>,
    /// The parts of the node its source measures beside it, fixed by the first reading
    /// (Slurm sizes its array by the count, then has it filled).
    parts: [Option<PartTrack>; MAX_PARTS],
    parts_fixed: bool,
}

/// One part of the node: energy since its first reading, as the node's.
#[derive(Debug, Clone, Copy)]
struct PartTrack {
    label: &'static str,
    first: Option<Point>,
    last: Option<Point>,
    watts: Option<f64>,
}

impl PartTrack {
    fn record(&mut self, reading: &PartReading, at: Instant, wall: SystemTime) {
        let Some(energy_uj) = reading.energy_uj else {
            return;
        };
        let point = Point {
            at,
            wall,
            energy_uj,
            settled: true,
        };
        self.first.get_or_insert(point);
        self.last = Some(point);
        self.watts = reading.watts;
    }

    fn record_at(&self, now: Instant, stale_after: Duration, start_time: i64) -> EnergyRecord {
        let last = self
            .last
            .filter(|p| now.saturating_duration_since(p.at) <= stale_after);
        match (self.first, last) {
            (Some(first), Some(last)) => EnergyRecord {
                consumed_j: Some(whole_joules(last.energy_uj.saturating_sub(first.energy_uj))),
                base_consumed_j: 0,
                previous_consumed_j: 0,
                current_watts: self.watts.map(|w| w.round().max(0.0) as u32),
                ave_watts: average_watts(&first, &last).unwrap_or(0.0).round() as u32,
                poll_time: last.unix_secs(),
                start_time,
            },
            _ => EnergyRecord::unavailable(start_time),
        }
    }
}

impl Accounting {
    pub(crate) fn new(started: SystemTime) -> Self {
        Self {
            started: Some(started),
            ..Self::default()
        }
    }

    pub(crate) fn record(&mut self, reading: &Reading, at: Instant, wall: SystemTime) {
        // a reading is never dated before the one before (a hardware stamp that went back)
        let (at, wall) = match self.last {
            Some(last) if at < last.at => (last.at, last.wall),
            _ => (at, wall),
        };
        self.record_parts(&reading.parts, at, wall);
        if !reading.complete {
            return;
        }
        let point = Point {
            at,
            wall,
            energy_uj: reading.energy_uj,
            settled: !reading.unsettled,
        };
        let first = *self.first.get_or_insert(point);
        self.last = Some(point);
        self.reported_watts = reading.watts;
        let secs = at.saturating_duration_since(first.at).as_secs_f64();
        self.power
            .update(secs, reading.energy_uj as f64 / 1e6, point.settled);
    }

    /// The source's reported power, else the window's.
    fn current_watts(&self) -> Option<f64> {
        self.reported_watts.or(self.power.watts())
    }

    /// The node's power as measured so far: [`Self::current_watts`], else, before its
    /// first window closes (a meter just opened), its average since its first reading.
    pub(crate) fn measured_watts(&self) -> Option<f64> {
        self.current_watts()
            .or_else(|| average_watts(&self.first?, &self.last?))
    }

    /// The parts are recorded whether or not the node's reading is complete: each has its
    /// own files. Their list is fixed by the first reading; a part is found by its label.
    fn record_parts(&mut self, parts: &[PartReading], at: Instant, wall: SystemTime) {
        if !self.parts_fixed {
            self.parts_fixed = true;
            for (slot, s) in self.parts.iter_mut().zip(parts) {
                *slot = Some(PartTrack {
                    label: s.label,
                    first: None,
                    last: None,
                    watts: None,
                });
            }
        }
        for s in parts {
            if let Some(track) = self.parts.iter_mut().flatten().find(|t| t.label == s.label) {
                track.record(s, at, wall);
            }
        }
    }

    /// How many parts are reported beside the node.
    #[cfg(test)]
    pub(crate) fn part_count(&self) -> usize {
        self.parts.iter().flatten().count()
    }

    /// Each part's label and record, in the order they are reported.
    pub(crate) fn part_records(
        &self,
        now: Instant,
        stale_after: Duration,
    ) -> Vec<(&'static str, EnergyRecord)> {
        self.parts
            .iter()
            .flatten()
            .map(|t| (t.label, t.record_at(now, stale_after, self.start_time())))
            .collect()
    }

    /// The latest complete reading, unless it is older than `stale_after`.
    pub(crate) fn fresh(&self, now: Instant, stale_after: Duration) -> Option<Point> {
        self.last
            .filter(|p| now.saturating_duration_since(p.at) <= stale_after)
    }

    fn start_time(&self) -> i64 {
        self.started.map(unix_secs).unwrap_or(0)
    }

    /// The node's record: energy since this process started measuring.
    pub(crate) fn node_record(&self, now: Instant, stale_after: Duration) -> EnergyRecord {
        match (self.first, self.fresh(now, stale_after)) {
            (Some(first), Some(last)) => {
                let consumed = whole_joules(last.energy_uj - first.energy_uj);
                EnergyRecord {
                    consumed_j: Some(consumed),
                    base_consumed_j: 0,
                    previous_consumed_j: 0,
                    current_watts: self.current_watts_u32(),
                    ave_watts: average_watts(&first, &last).unwrap_or(0.0).round() as u32,
                    poll_time: last.unix_secs(),
                    start_time: self.start_time(),
                }
            }
            _ => EnergyRecord::unavailable(self.start_time()),
        }
    }

    fn current_watts_u32(&self) -> Option<u32> {
        self.current_watts().map(|w| w.round().max(0.0) as u32)
    }
}

/// Slurm's figures are whole joules: rounded, not truncated, so that a node's jobs, each
/// short of a joule by half a joule on average when truncated, add up to the node (a
/// thousand jobs of 200 J lost 0.25%). A rising count stays rising.
fn whole_joules(uj: u64) -> u64 {
    uj.saturating_add(500_000) / 1_000_000
}

/// A step's view: energy since its slurmstepd started measuring.
///
/// slurmstepd opens the hardware while it reads acct_gather.conf, before any task of the
/// step runs; its first poll comes later (after the first task starts), so counting from
/// the first poll would miss the step's first milliseconds. The origin is therefore the
/// process's first reading.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Baseline {
    origin: Point,
    previous_j: u64,
}

impl Baseline {
    /// Starts at the process's first complete reading, if there is one.
    pub(crate) fn start(accounting: &Accounting) -> Option<Self> {
        accounting.first.map(|origin| Self {
            origin,
            previous_j: 0,
        })
    }

    /// Starts at zero energy at the process's first complete reading: for a figure that
    /// counts the step from its start already.
    pub(crate) fn from_zero(accounting: &Accounting) -> Option<Self> {
        accounting.first.map(|first| Self {
            origin: Point {
                energy_uj: 0,
                ..first
            },
            previous_j: 0,
        })
    }

    pub(crate) fn record(
        &mut self,
        accounting: &Accounting,
        now: Instant,
        stale_after: Duration,
    ) -> EnergyRecord {
        let Some(last) = accounting.fresh(now, stale_after) else {
            return EnergyRecord::unavailable(accounting.start_time());
        };
        let consumed = whole_joules(last.energy_uj.saturating_sub(self.origin.energy_uj));
        let record = EnergyRecord {
            consumed_j: Some(consumed),
            base_consumed_j: consumed.saturating_sub(self.previous_j),
            previous_consumed_j: self.previous_j,
            current_watts: accounting.current_watts_u32(),
            ave_watts: average_watts(&self.origin, &last)
                .or(accounting.current_watts())
                .unwrap_or(0.0)
                .round() as u32,
            poll_time: last.unix_secs(),
            start_time: accounting.start_time(),
        };
        self.previous_j = consumed;
        record
    }
}

fn watts_between(a: &Point, b: &Point) -> f64 {
    let secs = b.at.saturating_duration_since(a.at).as_secs_f64();
    if secs <= 0.0 {
        return 0.0;
    }
    b.energy_uj.saturating_sub(a.energy_uj) as f64 / 1e6 / secs
}

fn average_watts(first: &Point, last: &Point) -> Option<f64> {
    (last.at > first.at).then(|| watts_between(first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_never_passes_an_unknown_power_as_a_figure() {
        let unknown = EnergyRecord::unavailable(0);
        assert_eq!(unknown.current_watts, None);
        assert_eq!(unknown.for_step().current_watts, Some(0));
        let known = EnergyRecord {
            current_watts: Some(517),
            ..unknown
        };
        assert_eq!(known.for_step().current_watts, Some(517));
    }

    const STALE: Duration = Duration::from_secs(10);

    fn reading(energy_uj: u64) -> Reading {
        Reading {
            energy_uj,
            complete: true,
            ..Reading::default()
        }
    }

    fn after(t0: Instant, secs: f64) -> Instant {
        t0 + Duration::from_secs_f64(secs)
    }

    #[test]
    fn node_record_counts_from_first_reading_with_true_average() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let mut acc = Accounting::new(wall);
        acc.record(&reading(5_000_000), t0, wall);
        // 100 W for 0.5 s, then 300 W for 1.5 s
        acc.record(&reading(55_000_000), after(t0, 0.5), wall);
        acc.record(&reading(505_000_000), after(t0, 2.0), wall);
        let rec = acc.node_record(after(t0, 2.0), STALE);
        assert_eq!(rec.consumed_j, Some(500));
        assert_eq!(rec.ave_watts, 250);
        // the window closed at 2.0 s, opened at 0 s: (505-5) J / 2 s
        assert_eq!(rec.current_watts, Some(250));
    }

    #[test]
    fn current_watts_uses_sub_second_timestamps() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let mut acc = Accounting::new(wall);
        acc.record(&reading(0), t0, wall);
        acc.record(&reading(180_000_000), after(t0, 1.2), wall); // 150 W over 1.2 s
        assert_eq!(
            acc.node_record(after(t0, 1.2), STALE).current_watts,
            Some(150)
        );
    }

    /// A window closes at settled figures only, or once it is 10 s long.
    #[test]
    fn the_power_is_measured_between_settled_figures() {
        let mut power = PowerWindow::default();
        assert_eq!(power.update(0.0, 0.0, true), None);
        // a rise held undecided at 1.1 s: its energy is counted at 2.2 s
        assert_eq!(power.update(1.1, 0.0, false), None);
        assert_eq!(power.update(2.2, 660.0, true), Some(300.0));
        // a suspect read again and again: measured over what was counted, after 10 s
        assert_eq!(power.update(3.5, 700.0, false), Some(300.0));
        assert_eq!(power.update(12.1, 700.0, false), Some(300.0));
        assert_eq!(power.update(12.2, 700.0, false), Some(4.0));
        assert_eq!(power.so_far(13.2, 900.0), Some(200.0));
    }

    #[test]
    fn stale_or_missing_readings_are_unavailable_not_zero() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let mut acc = Accounting::new(wall);
        assert_eq!(acc.node_record(t0, STALE).consumed_j, None);
        acc.record(&reading(1_000_000), t0, wall);
        let incomplete = Reading {
            complete: false,
            ..reading(9_000_000)
        };
        acc.record(&incomplete, after(t0, 5.0), wall);
        assert_eq!(acc.node_record(after(t0, 5.0), STALE).consumed_j, Some(0));
        let rec = acc.node_record(after(t0, 11.0), STALE);
        assert_eq!(rec.consumed_j, None);
        assert_eq!(rec.current_watts, None);
    }

    /// A figure read from the ledger counts from the step's start already: its first
    /// reading (the moments between the process's start and the plugin's load) is kept.
    #[test]
    fn a_baseline_from_zero_keeps_the_first_readings_energy() {
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut accounting = Accounting::new(w0);
        accounting.record(&reading(79_000_000), t0, w0);
        let mut step = Baseline::from_zero(&accounting).expect("a reading");
        let later = Duration::from_secs(30);
        accounting.record(&reading(9_097_000_000), t0 + later, w0 + later);
        assert_eq!(
            step.record(&accounting, t0 + later, STALE).consumed_j,
            Some(9097)
        );
    }

    #[test]
    fn a_baseline_reports_energy_since_the_first_reading() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let mut acc = Accounting::new(wall);
        assert!(Baseline::start(&acc).is_none());
        acc.record(&reading(7_000_000), t0, wall);
        acc.record(&reading(207_000_000), after(t0, 1.0), wall);
        // the first poll comes after energy was already used
        let mut step = Baseline::start(&acc).expect("a reading");
        let first = step.record(&acc, after(t0, 1.0), STALE);
        assert_eq!(first.consumed_j, Some(200));
        assert_eq!(first.ave_watts, 200);
        acc.record(&reading(257_500_000), after(t0, 2.0), wall);
        let second = step.record(&acc, after(t0, 2.0), STALE);
        // 250.5 J: whole joules are rounded, not truncated
        assert_eq!(second.consumed_j, Some(251));
        assert_eq!(second.previous_consumed_j, 200);
        assert_eq!(second.base_consumed_j, 51);
        acc.record(&reading(257_999_999), after(t0, 2.5), wall);
        assert_eq!(
            step.record(&acc, after(t0, 2.5), STALE).consumed_j,
            Some(251)
        );
        acc.record(&reading(258_000_000), after(t0, 3.0), wall);
        assert_eq!(
            step.record(&acc, after(t0, 3.0), STALE).consumed_j,
            Some(251)
        );
        acc.record(&reading(258_500_000), after(t0, 3.5), wall);
        assert_eq!(
            step.record(&acc, after(t0, 3.5), STALE).consumed_j,
            Some(252)
        );
    }

    #[test]
    fn parts_are_fixed_by_the_first_reading_and_do_not_change_the_node() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let part = |label, energy_uj: Option<u64>| PartReading {
            label,
            energy_uj,
            watts: Some(50.0),
        };
        let mut acc = Accounting::new(wall);
        let mut r = reading(0);
        r.parts = vec![part("Cpu", Some(1_000_000)), part("Accel0", None)];
        acc.record(&r, t0, wall);
        assert_eq!(acc.part_count(), 2);
        let mut r = reading(300_000_000);
        // a part that appears later is not added; a part read later starts then
        r.parts = vec![
            part("Cpu", Some(101_000_000)),
            part("Accel0", Some(5_000_000)),
            part("Memory", Some(1)),
        ];
        acc.record(&r, after(t0, 2.0), wall);
        let mut r = reading(600_000_000);
        r.parts = vec![
            part("Cpu", Some(201_000_000)),
            part("Accel0", Some(45_000_000)),
        ];
        r.complete = false;
        acc.record(&r, after(t0, 4.0), wall);
        assert_eq!(acc.part_count(), 2);
        let parts = acc.part_records(after(t0, 4.0), STALE);
        assert_eq!(parts[0].0, "Cpu");
        assert_eq!(parts[0].1.consumed_j, Some(200));
        assert_eq!(parts[0].1.ave_watts, 50);
        assert_eq!(parts[1].1.consumed_j, Some(40));
        // the node keeps its own figure (the last complete reading)
        assert_eq!(acc.node_record(after(t0, 4.0), STALE).consumed_j, Some(300));
        assert_eq!(
            acc.part_records(after(t0, 15.0), STALE)[0].1.consumed_j,
            None
        );
    }
}
