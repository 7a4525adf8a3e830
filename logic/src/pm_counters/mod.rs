//! Node energy from an HPE Cray EX node controller's meter, `/sys/cray/pm_counters`.
//!
//! The node's energy is the controller's own counter (`energy`, joules), read in
//! consistent scans (see `files`); `power` is CurrentWatts. The cpu, memory and
//! accelerator counters are reported as parts beside the node, never added to it. When
//! the controller restarts (`startup` changes, or the counter falls), its counters start
//! again from zero: nothing negative or bogus is counted; the gap since the last read is
//! estimated from the last measured power, and counting goes on from the new value.
//!
//! The power files pass a [`Screen`] before they are CurrentWatts (which slurmd's ledger
//! uses to estimate a gap): a power above `EnergyPmCountersMaxWatts` or a one-reading spike
//! is not shown; the last plausible power is.

mod config;
mod files;

use std::time::{Duration, Instant};

pub use config::PmCountersConfig;
pub(crate) use config::{KEY_DIR, KEY_MAX_WATTS};
pub(crate) use files::Value;
pub use files::parse_value;

use crate::config::{ConfigError, KeyValues};
use crate::counter::{Advance, WrappingCounter};
use crate::plugin::{Opened, Plugin};
use crate::power::{Bound, Screen};
use crate::source::{HardwareCount, PartReading, Reading, Sample, Source};
use files::{Files, Pair, PairValues};

/// The controller scans about ten times a second; a sample a second keeps CurrentWatts
/// fresh and bounds what a controller restart's gap can cost, for a few small reads.
const SAMPLE_PERIOD: Duration = Duration::from_secs(1);
/// The counters are 64-bit joules that never wrap in practice.
const MODULUS: u64 = 1 << 63;
/// Labels of the parts (for the log and the profile's `<label>Power` fields).
const PART_LABELS: [(&str, &str); 10] = [
    ("cpu", "Cpu"),
    ("memory", "Memory"),
    ("accel0", "Accel0"),
    ("accel1", "Accel1"),
    ("accel2", "Accel2"),
    ("accel3", "Accel3"),
    ("accel4", "Accel4"),
    ("accel5", "Accel5"),
    ("accel6", "Accel6"),
    ("accel7", "Accel7"),
];

/// One energy counter of the controller, in joules.
#[derive(Debug)]
struct Joules {
    counter: WrappingCounter,
    /// A rise faster than this is no energy.
    max_watts: f64,
}

impl Joules {
    /// `max_watts`: a rise faster than this since the last read is no energy.
    fn new(max_watts: f64) -> Self {
        Self {
            counter: WrappingCounter::new(MODULUS, max_watts),
            max_watts,
        }
    }

    /// A problem for the log when the value could not be counted as it is.
    fn advance(&mut self, value: u64, at: Instant, restarted: bool, what: &str) -> Option<String> {
        let advance = if restarted {
            self.counter.restarted(value, at)
        } else {
            self.counter.advance(value, at)
        };
        match advance {
            Advance::Reset { gap, .. } => Some(format!(
                "{what}: the node controller's counter restarted ({}); the {:.1} s before is \
                 estimated from the power measured after it, and counting goes on from {value} J",
                if restarted {
                    "startup changed"
                } else {
                    "the counter fell and went on from there"
                },
                gap.as_secs_f64()
            )),
            Advance::Suspect { .. } => Some(format!(
                "{what}: the counter read {value} J, which the last good reading cannot reach; \
                 not counted until the next readings tell a restart from a bad read"
            )),
            Advance::Recovered { .. } => Some(format!(
                "{what}: the counter continues the last good reading again; the bad read is \
                 forgotten"
            )),
            Advance::Behind { by } => Some(format!(
                "{what}: the counter read {value} J, {by} J behind the last good reading: one of \
                 the two is a bad read; nothing is counted until it passes that reading again"
            )),
            Advance::Started | Advance::Counted { .. } | Advance::Burst | Advance::Held => None,
        }
    }

    fn total_uj(&self) -> u64 {
        self.counter.total_units().saturating_mul(1_000_000)
    }
}

#[derive(Debug)]
struct Part {
    pair: Pair,
    label: &'static str,
    joules: Joules,
    power: Screen,
    failing: bool,
}

/// An HPE Cray node controller's counters, read from its files.
#[derive(Debug)]
pub struct NodeController {
    files: Files,
    node: Joules,
    power: Screen,
    parts: Vec<Part>,
    startup: Option<String>,
    /// A scan's controller time, and an instant no earlier than that scan: controller
    /// times map to instants from here, so rates and readings follow the controller's own
    /// clock.
    anchor: Option<(u64, Instant)>,
}

impl NodeController {
    /// When the controller took `value`, read at `now`. A scan is read after it is taken,
    /// so a mapping that would put one after its read is moved to that read: the anchor
    /// settles on the freshest read seen, and a late first read does not date every later
    /// scan late. A controller clock that went back (a restart) is anchored anew.
    fn at(&mut self, value: &Value, now: Instant) -> Instant {
        if let Some((at_us, then)) = self.anchor
            && let Some(at) = value
                .at_us
                .checked_sub(at_us)
                .and_then(|us| then.checked_add(Duration::from_micros(us)))
            && at <= now
        {
            return at;
        }
        self.anchor = Some((value.at_us, now));
        now
    }

    /// Counts the node's energy in `values`; a problem for the log, and when it was taken.
    fn count_node(
        &mut self,
        values: &PairValues,
        restarted: bool,
        now: Instant,
    ) -> (Option<String>, Instant) {
        let at = self.at(&values.energy_j, now);
        let problem = self
            .node
            .advance(values.energy_j.value, at, restarted, "energy");
        (problem, at)
    }
}

/// The rust_pm_counters plugin: the node controller's counters.
pub struct PmCounters;

impl Plugin for PmCounters {
    type Config = PmCountersConfig;
    type Source = NodeController;
    const KEYS: &'static [&'static str] = config::PmCountersConfig::KEYS;

    fn parse_config(values: &KeyValues) -> Result<PmCountersConfig, ConfigError> {
        PmCountersConfig::parse(values)
    }

    fn show_config(config: &PmCountersConfig) -> Vec<(&'static str, String)> {
        config.show()
    }

    fn open(config: &PmCountersConfig) -> Result<Opened<NodeController>, String> {
        NodeController::open(config).map(|source| Opened {
            source,
            sample_period: SAMPLE_PERIOD,
        })
    }
}

impl NodeController {
    /// Finds the controller's files the configuration names, and what they count.
    fn open(config: &PmCountersConfig) -> Result<Self, String> {
        let files = Files {
            dir: config.dir.clone(),
        };
        let pairs = files.parts().map_err(|e| {
            format!(
                "cannot read {}: {e} (not an HPE Cray EX node? set {KEY_DIR})",
                config.dir.display()
            )
        })?;
        let scan = files.scan(&[]);
        if let Err(e) = &scan.node {
            return Err(format!("{}/{e}", config.dir.display()));
        }
        let bound = Bound::of(KEY_MAX_WATTS, config.max_watts, config::DEFAULT_MAX_WATTS);
        let mut parts = Vec::new();
        for pair in pairs {
            match PART_LABELS.iter().find(|(p, _)| *p == pair.prefix) {
                Some((_, label)) => parts.push(Part {
                    power: Screen::new(bound.clone(), format!("{}_power", pair.prefix)),
                    pair,
                    label,
                    joules: Joules::new(bound.watts),
                    failing: false,
                }),
                None => log::info!(
                    "{}_energy is not reported (at most {} parts)",
                    pair.prefix,
                    PART_LABELS.len()
                ),
            }
        }
        Ok(Self {
            files,
            node: Joules::new(bound.watts),
            power: Screen::new(bound, "power"),
            parts,
            startup: None,
            anchor: None,
        })
    }
}

impl Source for NodeController {
    fn describe(&self) -> String {
        let parts: Vec<&str> = self.parts.iter().map(|p| p.pair.prefix.as_str()).collect();
        format!(
            "the node controller's meter in {}: energy and power{}; sampling every {} s",
            self.files.dir.display(),
            if parts.is_empty() {
                String::new()
            } else {
                format!(", parts {} beside the node", parts.join(", "))
            },
            SAMPLE_PERIOD.as_secs()
        )
    }

    fn poll(&mut self, now: Instant) -> Reading {
        let pairs: Vec<Pair> = self.parts.iter().map(|p| p.pair.clone()).collect();
        let scan = self.files.scan(&pairs);
        let restarted = !scan.startup.is_empty()
            && self
                .startup
                .replace(scan.startup.clone())
                .is_some_and(|before| before != scan.startup);
        let mut reading = Reading {
            energy_uj: self.node.total_uj(),
            complete: scan.node.is_ok(),
            ..Reading::default()
        };
        if scan.torn {
            reading.problems.push(
                "the controller's values kept changing while read; taken as they were".into(),
            );
        }
        match &scan.node {
            Ok(values) => {
                let (problem, taken_at) = self.count_node(values, restarted, now);
                reading.problems.extend(problem);
                reading.taken_at = Some(taken_at);
                reading.energy_uj = self.node.total_uj();
                reading.unsettled = !self.node.counter.settled();
                // named by the controller's startup: a count begun again is another count
                reading
                    .counts
                    .extend(
                        self.node
                            .counter
                            .published_value()
                            .map(|joules| HardwareCount {
                                name: format!("energy since startup {}", scan.startup),
                                value_uj: joules.saturating_mul(1_000_000),
                                wraps_at_uj: None,
                                max_watts: self.node.max_watts,
                            }),
                    );
                let at = self.at(&values.watts, now);
                reading.watts = screened(&mut self.power, values.watts.value, at);
            }
            Err(e) => reading.problems.push(e.to_string()),
        }
        for (i, result) in scan.parts.iter().enumerate() {
            let at = result
                .as_ref()
                .ok()
                .map(|v| (self.at(&v.energy_j, now), self.at(&v.watts, now)));
            let part = &mut self.parts[i];
            let watts = match (result, at) {
                (Ok(values), Some((at, power_at))) => {
                    if part.failing {
                        log::info!("{} readings are back", part.pair.prefix);
                        part.failing = false;
                    }
                    reading.problems.extend(part.joules.advance(
                        values.energy_j.value,
                        at,
                        restarted,
                        &format!("{}_energy", part.pair.prefix),
                    ));
                    screened(&mut part.power, values.watts.value, power_at)
                }
                (Err(e), _) => {
                    if !part.failing {
                        log::warn!("{e}; {} is unavailable until it can be read", part.label);
                        part.failing = true;
                    }
                    None
                }
                (Ok(_), None) => None,
            };
            reading.parts.push(PartReading {
                label: part.label,
                energy_uj: watts.map(|_| part.joules.total_uj()),
                watts,
            });
        }
        reading
    }
}

/// The power to show after a reading of `watts` at `at`, as the screen says.
fn screened(screen: &mut Screen, watts: u64, at: Instant) -> Option<f64> {
    screen.judge(Sample {
        watts: watts as f64,
        at,
        energy_j: None,
    });
    screen.power()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;

    /// A controller directory written as the real one is, on a clock of its own that the
    /// tests advance scan by scan.
    struct Controller {
        dir: tempfile::TempDir,
        freshness: u64,
        at_us: u64,
        started: (u64, Instant),
    }

    impl Controller {
        fn new() -> Self {
            let at_us = 1_734_094_386_000_000;
            let c = Controller {
                dir: tempfile::tempdir().expect("tempdir"),
                freshness: 0,
                at_us,
                started: (at_us, Instant::now()),
            };
            c.write("startup", "1734000000000000");
            c.write("version", "2");
            c
        }

        fn path(&self) -> &Path {
            self.dir.path()
        }

        fn write(&self, name: &str, text: &str) {
            fs::write(self.path().join(name), format!("{text}\n")).expect("write");
        }

        /// One scan 100 ms after the previous: node and parts.
        fn scan(&mut self, node_j: u64, watts: u64, parts: &[(&str, u64)]) {
            self.at_us += 100_000;
            self.freshness += 1;
            let at = self.at_us;
            self.write("energy", &format!("{node_j} J {at} us"));
            self.write("power", &format!("{watts} W {at} us"));
            for (prefix, j) in parts {
                self.write(&format!("{prefix}_energy"), &format!("{j} J {at} us"));
                self.write(&format!("{prefix}_power"), &format!("10 W {at} us"));
            }
            self.write("freshness", &self.freshness.to_string());
        }

        fn open(&self) -> NodeController {
            NodeController::open(&PmCountersConfig {
                dir: self.path().into(),
                ..PmCountersConfig::default()
            })
            .expect("open")
        }

        /// The instant of the last scan, by the controller's clock.
        fn scanned(&self) -> Instant {
            let (at_us, then) = self.started;
            then + Duration::from_micros(self.at_us - at_us)
        }

        /// Polls `pm` 5 ms after the last scan.
        fn read(&self, pm: &mut NodeController) -> Reading {
            pm.poll(self.scanned() + Duration::from_millis(5))
        }
    }

    #[test]
    fn counts_the_controllers_counter_and_reports_parts_beside_the_node() {
        let mut c = Controller::new();
        c.scan(5000, 300, &[("cpu", 100), ("memory", 50), ("accel0", 7)]);
        let mut pm = c.open();
        let first = c.read(&mut pm);
        assert!(first.complete);
        assert_eq!(first.energy_uj, 0);
        assert_eq!(first.watts, Some(300.0));
        let labels: Vec<&str> = first.parts.iter().map(|s| s.label).collect();
        assert_eq!(labels, ["Cpu", "Memory", "Accel0"]);
        c.scan(5030, 300, &[("cpu", 120), ("memory", 52), ("accel0", 9)]);
        let r = c.read(&mut pm);
        assert_eq!(r.energy_uj, 30_000_000);
        assert_eq!(r.parts[0].energy_uj, Some(20_000_000));
        assert_eq!(r.parts[2].watts, Some(10.0));
        assert!(r.problems.is_empty(), "{:?}", r.problems);
    }

    /// A reading is dated when the controller took it: by the freshest read seen, however
    /// late the first read or this one came.
    #[test]
    fn a_reading_is_dated_by_the_controllers_scan() {
        let mut c = Controller::new();
        c.scan(1000, 300, &[]);
        let mut pm = c.open();
        // the first read comes 300 ms after the scan, the next 5 ms after theirs
        let late = Duration::from_millis(300);
        assert_eq!(
            pm.poll(c.scanned() + late).taken_at,
            Some(c.scanned() + late)
        );
        let fresh = Duration::from_millis(5);
        c.scan(1030, 300, &[]);
        assert_eq!(c.read(&mut pm).taken_at, Some(c.scanned() + fresh));
        // a scan read 400 ms late, as a stalled controller or reader leaves it: dated as
        // the freshest read dated its scan
        c.scan(1060, 300, &[]);
        let r = pm.poll(c.scanned() + Duration::from_millis(400));
        assert_eq!(r.taken_at, Some(c.scanned() + fresh));
        assert_eq!(r.energy_uj, 60_000_000);
    }

    #[test]
    fn a_controller_restart_is_never_negative_and_counts_on_from_the_new_value() {
        let mut c = Controller::new();
        c.scan(10_000, 300, &[]);
        let mut pm = c.open();
        c.read(&mut pm);
        // 300 W for 1 s, in 10 scans
        for k in 1..=10 {
            c.scan(10_000 + 30 * k, 300, &[]);
        }
        assert_eq!(c.read(&mut pm).energy_uj, 300_000_000);
        // restart: startup changes, the counter starts again from zero
        for _ in 0..5 {
            c.scan(0, 300, &[]);
        }
        c.write("startup", "1734094399000000");
        c.scan(150, 300, &[]);
        let r = c.read(&mut pm);
        // counting goes on from 150 J; the gap (0.6 s of controller time) waits for the
        // power measured after the restart
        assert_eq!(r.energy_uj, 300_000_000, "{:?}", r.problems);
        assert!(
            r.problems[0].contains("startup changed"),
            "{:?}",
            r.problems
        );
        for k in 1..=5 {
            c.scan(150 + 30 * k, 300, &[]);
            c.read(&mut pm);
        }
        // 150 J counted since, and the gap at the 300 W measured over 0.5 s: 180 J
        assert_eq!(c.read(&mut pm).energy_uj, 630_000_000);
        // a fall without a new startup: a suspect, confirmed as a restart by the next scan
        // that advances from it, never a negative or bogus delta
        c.scan(3, 300, &[]);
        let r = c.read(&mut pm);
        assert_eq!(r.energy_uj, 630_000_000);
        assert!(r.problems[0].contains("cannot reach"), "{:?}", r.problems);
        c.scan(33, 300, &[]);
        let r = c.read(&mut pm);
        assert!(
            r.energy_uj >= 660_000_000 && r.energy_uj <= 700_000_000,
            "{}",
            r.energy_uj
        );
        assert!(r.problems[0].contains("fell"), "{:?}", r.problems);
    }

    #[test]
    fn a_vanished_or_garbage_file_is_unavailable_then_catches_up() {
        let mut c = Controller::new();
        c.scan(1000, 200, &[("cpu", 10)]);
        let mut pm = c.open();
        c.read(&mut pm);
        fs::remove_file(c.path().join("energy")).expect("rm");
        let r = c.read(&mut pm);
        assert!(!r.complete);
        assert!(r.problems[0].starts_with("energy: "), "{:?}", r.problems);
        c.scan(1100, 200, &[("cpu", 12)]);
        c.write("cpu_energy", "garbage");
        let r = c.read(&mut pm);
        assert!(r.complete);
        assert_eq!(r.energy_uj, 100_000_000);
        assert_eq!(r.parts[0].energy_uj, None);
        c.write("energy", "\u{1}\u{2} J");
        let r = c.read(&mut pm);
        assert!(!r.complete);
        assert!(r.problems[0].contains("cannot read"), "{:?}", r.problems);
        c.scan(1200, 200, &[("cpu", 30)]);
        let r = c.read(&mut pm);
        assert_eq!(r.energy_uj, 200_000_000);
        assert_eq!(r.parts[0].energy_uj, Some(20_000_000));
    }

    #[test]
    fn a_missing_directory_says_why() {
        let e = NodeController::open(&PmCountersConfig {
            dir: "/nonexistent/pm_counters".into(),
            ..PmCountersConfig::default()
        })
        .expect_err("missing");
        assert!(
            e.contains("/nonexistent/pm_counters") && e.contains(KEY_DIR),
            "{e}"
        );
    }
}
