//! The measuring of `senergy check --compare`: both sides over one window, as average power.
//! Each end of the window waits for slurmd to write a new ledger and reads the counters at
//! once; power-only readers are sampled every second and integrated.

use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use slurm_energy_logic::Ledger;
use slurm_energy_logic::{doorbell_path, ring_without_waiting};

use super::verdict::{Average, Comparison, LedgerResult, ReaderResult, judge};
use crate::check::readers::{Quantity, Reader, Slot, Unavailable};

/// How long an end of the window waits for slurmd to write a new ledger: slurmd writes it
/// at each update (about a second apart), and samples at once for a ring ([`RING_EVERY`]).
const LEDGER_WAIT: Duration = Duration::from_secs(3);
/// How often a wait rings slurmd's doorbell for a ledger written now (slurmd paces rings).
const RING_EVERY: Duration = Duration::from_millis(500);
/// How often power-only readers are sampled.
const POWER_PERIOD: Duration = Duration::from_secs(1);

/// A ledger's node account at one of slurmd's readings.
#[derive(Debug, Clone, Copy)]
struct LedgerPoint {
    sampled_at: f64,
    joules: f64,
    epoch: u64,
}

fn ledger_point(path: &Path) -> Result<Option<LedgerPoint>, String> {
    Ok(Ledger::load(path)
        .map_err(|e| e.to_string())?
        .map(|l| LedgerPoint {
            sampled_at: l.sampled_at(),
            joules: l.node().joules,
            epoch: l.epoch(),
        }))
}

/// The ledger's next reading after `after` (or its current one), waiting for slurmd to
/// write it.
fn fresh_point(path: &Path, after: Option<f64>) -> Result<LedgerPoint, String> {
    let until = Instant::now() + LEDGER_WAIT;
    let doorbell = doorbell_path(path);
    let mut rung: Option<Instant> = None;
    let mut last = None;
    loop {
        // a ring (as a slurmstepd of before rings) has slurmd sample and write the file now,
        // not at its next periodic update; without a doorbell the wait is the file's own
        if after.is_some() && rung.is_none_or(|r| r.elapsed() >= RING_EVERY) {
            ring_without_waiting(&doorbell);
            rung = Some(Instant::now());
        }
        let point = ledger_point(path)?;
        if point.is_none() && last.is_none() {
            // no ledger at all: nothing to wait for
            return Err(format!(
                "no ledger at {}: slurmd has taken no reading",
                path.display()
            ));
        }
        if let Some(p) = point {
            last = Some(p);
            if after.is_none_or(|a| p.sampled_at > a) {
                return Ok(p);
            }
        }
        if Instant::now() >= until {
            return match last {
                None => Err(format!(
                    "no ledger at {}: slurmd has taken no reading",
                    path.display()
                )),
                Some(_) => Err(format!(
                    "{}: slurmd wrote no new reading in {} s: readings have stopped",
                    path.display(),
                    LEDGER_WAIT.as_secs()
                )),
            };
        }
        sleep(Duration::from_millis(20));
    }
}

/// One open reader's state over the window.
struct Running {
    /// The slot's name, which [`super::verdict::pairing`] knows it by.
    name: &'static str,
    reader: Box<dyn Reader>,
    /// `(time, value)`: a counter's first and last, or every power sample.
    samples: Vec<(Instant, f64)>,
    failed: Option<Unavailable>,
}

impl Running {
    fn take(&mut self) {
        if self.failed.is_some() {
            return;
        }
        let before = Instant::now();
        match self.reader.read() {
            Ok(v) => {
                let after = Instant::now();
                let at = match self.reader.stamped() {
                    // of when the hardware took it, on this clock
                    Some(stamp) => {
                        let age = std::time::SystemTime::now()
                            .duration_since(stamp)
                            .unwrap_or_default();
                        after.checked_sub(age).unwrap_or(after)
                    }
                    // a tool takes its time: its reading is of the middle of its run
                    None => before + (after - before) / 2,
                };
                self.samples.push((at, v));
            }
            Err(e) => self.failed = Some(e),
        }
    }

    fn average(&self) -> Result<Average, Unavailable> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let (Some(first), Some(last)) = (self.samples.first(), self.samples.last()) else {
            return Err(Unavailable::Failed("no reading".into()));
        };
        let secs = last.0.duration_since(first.0).as_secs_f64();
        if secs <= 0.0 {
            return Err(Unavailable::Failed("one reading only".into()));
        }
        let joules = match self.reader.quantity() {
            Quantity::Energy if last.1 < first.1 => {
                return Err(Unavailable::Failed(format!(
                    "its counter went back ({:.0} J, then {:.0} J): reset or wrapped",
                    first.1, last.1
                )));
            }
            Quantity::Energy => last.1 - first.1,
            Quantity::Power => integrate(&self.samples),
        };
        Ok(Average {
            watts: joules / secs,
            secs,
        })
    }
}

/// Power samples integrated (trapezoids).
fn integrate(samples: &[(Instant, f64)]) -> f64 {
    samples
        .windows(2)
        .map(|w| w[1].0.duration_since(w[0].0).as_secs_f64() * (w[0].1 + w[1].1) / 2.0)
        .sum()
}

/// Measures over `window`: the ledgers (`(plugin type, path)`) and the readers.
pub fn measure(window: Duration, ledgers: &[(String, PathBuf)], slots: Vec<Slot>) -> Comparison {
    let mut results = Vec::new();
    let mut running = Vec::new();
    for slot in slots {
        match slot.reader {
            Ok(reader) => running.push(Running {
                name: slot.name,
                reader,
                samples: Vec::new(),
                failed: None,
            }),
            Err(why) => results.push(ReaderResult {
                name: slot.name,
                scope: slot.scope,
                path: String::new(),
                outcome: Err(why),
            }),
        }
    }
    // the window opens at the first ledger's next reading (the others follow within a
    // second: each is compared over its own times)
    let starts: Vec<Result<LedgerPoint, String>> = ledgers
        .iter()
        .map(|(_, path)| {
            fresh_point(path, None).and_then(|p| fresh_point(path, Some(p.sampled_at)))
        })
        .collect();
    for r in &mut running {
        r.take();
    }
    let opened = Instant::now();
    while opened.elapsed() < window {
        sleep(POWER_PERIOD.min(window.saturating_sub(opened.elapsed())));
        for r in running
            .iter_mut()
            .filter(|r| r.reader.quantity() == Quantity::Power)
        {
            r.take();
        }
    }
    let ends: Vec<Result<LedgerPoint, String>> = ledgers
        .iter()
        .zip(&starts)
        .map(|((_, path), start)| match start {
            Ok(s) => fresh_point(path, Some(s.sampled_at)),
            Err(e) => Err(e.clone()),
        })
        .collect();
    for r in running
        .iter_mut()
        .filter(|r| r.reader.quantity() == Quantity::Energy)
    {
        r.take();
    }
    let window_s = opened.elapsed().as_secs_f64();
    for r in running {
        results.push(ReaderResult {
            name: r.name,
            scope: r.reader.scope(),
            path: r.reader.path(),
            outcome: r.average(),
        });
    }
    let ledger_results = ledgers
        .iter()
        .zip(starts.into_iter().zip(ends))
        .map(|((plugin_type, path), (start, end))| LedgerResult {
            plugin_type: plugin_type.clone(),
            path: path.clone(),
            outcome: ledger_average(start, end),
        })
        .collect();
    judge(window_s, results, ledger_results)
}

fn ledger_average(
    start: Result<LedgerPoint, String>,
    end: Result<LedgerPoint, String>,
) -> Result<Average, String> {
    let (start, end) = (start?, end?);
    if start.epoch != end.epoch || end.joules < start.joules {
        return Err("the ledger began anew during the window".into());
    }
    let secs = end.sampled_at - start.sampled_at;
    if secs <= 0.0 {
        return Err("slurmd took no reading during the window".into());
    }
    Ok(Average {
        watts: (end.joules - start.joules) / secs,
        secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::compare::verdict::{Verdict, pairing};
    use crate::check::readers::Scope;

    /// A BMC at a steady 200 W, as whichever tool reads it.
    struct SteadyBmc;

    impl Reader for SteadyBmc {
        fn path(&self) -> String {
            "ipmitool dcmi power reading".into()
        }
        fn scope(&self) -> Scope {
            Scope::WholeNode
        }
        fn quantity(&self) -> Quantity {
            Quantity::Power
        }
        fn read(&mut self) -> Result<f64, Unavailable> {
            Ok(200.0)
        }
    }

    /// A node controller's counter, whose values carry the time of the scan that took them.
    struct Scanned {
        origin: std::time::SystemTime,
        reads: u32,
    }

    impl Reader for Scanned {
        fn path(&self) -> String {
            "pm_counters/energy".into()
        }
        fn scope(&self) -> Scope {
            Scope::WholeNode
        }
        fn quantity(&self) -> Quantity {
            Quantity::Energy
        }
        /// 300 W: 90 J a scan, one scan every 0.3 s.
        fn read(&mut self) -> Result<f64, Unavailable> {
            self.reads += 1;
            Ok(f64::from(self.reads - 1) * 90.0)
        }
        fn stamped(&self) -> Option<std::time::SystemTime> {
            Some(self.origin + Duration::from_millis(300) * (self.reads - 1))
        }
    }

    /// A counter is timed by its own scans, not by when a loaded node read it: read 50 ms
    /// and then 150 ms after its scans, 300 W is 300 W (225 W by the reads' times).
    #[test]
    fn a_stamped_counter_is_timed_by_its_scans() {
        let mut running = Running {
            name: "pm_counters",
            reader: Box::new(Scanned {
                origin: std::time::SystemTime::now(),
                reads: 0,
            }),
            samples: Vec::new(),
            failed: None,
        };
        std::thread::sleep(Duration::from_millis(50));
        running.take();
        std::thread::sleep(Duration::from_millis(400));
        running.take();
        let watts = running.average().expect("read").watts;
        assert!((watts - 300.0).abs() < 300.0 * 0.03, "{watts} W");
    }

    #[test]
    fn a_reader_is_known_by_its_slots_name_which_its_pair_names() {
        // the BMC read through ipmitool was reported as `ipmitool`, which rust_ipmi's pair
        // (`bmc`) never matched: rust_ipmi was never compared
        let slots = vec![Slot {
            name: "bmc",
            scope: Scope::WholeNode,
            reader: Ok(Box::new(SteadyBmc)),
        }];
        let c = measure(Duration::from_millis(50), &[], slots);
        assert_eq!(c.readers.len(), 1);
        assert_eq!(c.readers[0].name, "bmc");
        assert_eq!(c.readers[0].path, "ipmitool dcmi power reading");
        let watts = c.readers[0]
            .outcome
            .as_ref()
            .map(|a| a.watts)
            .expect("read");
        // integrated over the window and divided by it: 200 W, to rounding
        assert!((watts - 200.0).abs() < 1e-9, "{watts}");
        let (names, _) = pairing("acct_gather_energy/rust_ipmi").expect("paired");
        assert_eq!(names, ["bmc"]);
        let c = judge(
            c.window_s,
            c.readers,
            vec![LedgerResult {
                plugin_type: "acct_gather_energy/rust_ipmi".into(),
                path: "/s/energy-ledger.0.json".into(),
                outcome: Ok(Average {
                    watts: 201.0,
                    secs: 30.0,
                }),
            }],
        );
        assert_eq!(c.pairs[0].verdict, Verdict::Agree, "{:?}", c.pairs[0]);
    }

    #[test]
    fn power_samples_integrate_and_counters_subtract() {
        let t0 = Instant::now();
        let s = |dt: f64, v: f64| (t0 + Duration::from_secs_f64(dt), v);
        // 100 W for a second, then a ramp to 300 W over the next
        assert_eq!(
            integrate(&[s(0.0, 100.0), s(1.0, 100.0), s(2.0, 300.0)]),
            300.0
        );
        let ledger = |at: f64, j: f64, epoch: u64| {
            Ok(LedgerPoint {
                sampled_at: at,
                joules: j,
                epoch,
            })
        };
        let a = ledger_average(ledger(10.0, 1000.0, 1), ledger(40.0, 8500.0, 1)).expect("avg");
        assert_eq!((a.watts, a.secs), (250.0, 30.0));
        assert!(ledger_average(ledger(10.0, 1000.0, 1), ledger(40.0, 8500.0, 2)).is_err());
    }
}
