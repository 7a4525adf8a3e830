//! The verdict of `senergy check --compare`: which reader each plugin is set beside, how
//! far apart the two may be, whether they agree, and RAPL's share of the wall power.

use std::path::PathBuf;

use slurm_energy_logic::PluginKind;

use crate::check::readers::{Scope, Unavailable};

/// How far apart two figures of the same hardware may be: `pct` of the reader's energy plus
/// `floor_watts` over the window (a floor for a nearly idle device), plus the reader's power
/// over `edge_secs` (a counter that updates every `edge_secs` is up to that old at each of
/// slurmd's samples, which bound its window: a share of a short window no percentage fits),
/// and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub pct: f64,
    pub floor_watts: f64,
    pub edge_secs: f64,
    pub why: &'static str,
}

/// The readers of the same hardware a plugin reads, and the tolerance of the pair.
/// Each plugin of the family has its arm (a plugin without one does not compile).
pub fn pairing(plugin_type: &str) -> Option<(&'static [&'static str], Tolerance)> {
    Some(match PluginKind::named(plugin_type)? {
        PluginKind::Rapl => (
            &["rapl-perf"],
            Tolerance {
                pct: 2.0,
                floor_watts: 1.0,
                edge_secs: 0.0,
                why: "the same RAPL registers read twice: what differs is when (each end \
                      within ~0.1 s of slurmd's reading) and the plugin's accounting",
            },
        ),
        PluginKind::Variorum => (
            &["rapl-perf"],
            Tolerance {
                pct: 5.0,
                floor_watts: 2.0,
                edge_secs: 0.0,
                why: "Variorum's node power integrated at the plugin's interval against \
                      RAPL's counters: a load that changes within the interval costs up to \
                      half an interval of the change",
            },
        ),
        PluginKind::Ipmi => (
            &["bmc"],
            Tolerance {
                pct: 5.0,
                floor_watts: 5.0,
                edge_secs: 0.0,
                why: "the same BMC power, sampled by each about once a second at other \
                      moments and integrated; DCMI gives whole watts",
            },
        ),
        PluginKind::Redfish => (
            &["redfish"],
            Tolerance {
                pct: 5.0,
                floor_watts: 5.0,
                edge_secs: 0.0,
                why: "the same Redfish reading, each polling it at its own moments; BMCs \
                      refresh it every few seconds",
            },
        ),
        PluginKind::PmCounters => (
            &["pm_counters"],
            Tolerance {
                pct: 1.0,
                floor_watts: 1.0,
                edge_secs: 0.1,
                why: "the node controller's own energy counter, read twice; it updates at \
                      10 Hz, so each of slurmd's samples is up to 0.1 s old",
            },
        ),
        PluginKind::Hwmon => (
            &["hwmon"],
            Tolerance {
                pct: 2.0,
                floor_watts: 2.0,
                edge_secs: 0.0,
                why: "the same means over the meters' averaging interval, each polling them \
                      at its own moments",
            },
        ),
        PluginKind::Gpu => (
            &["nvidia-smi", "amd-smi"],
            Tolerance {
                pct: 2.0,
                floor_watts: 1.0,
                edge_secs: 0.0,
                why: "the driver's energy counter read twice; a tool run takes up to ~0.5 s, \
                      which shifts its ends",
            },
        ),
    })
}

/// Average power over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Average {
    pub watts: f64,
    pub secs: f64,
}

/// What one reader said over the window.
#[derive(Debug, Clone)]
pub struct ReaderResult {
    pub name: &'static str,
    pub scope: Scope,
    pub path: String,
    pub outcome: Result<Average, Unavailable>,
}

/// What slurmd's ledger of one plugin said over the window.
#[derive(Debug, Clone)]
pub struct LedgerResult {
    pub plugin_type: String,
    pub path: PathBuf,
    pub outcome: Result<Average, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Agree,
    Differ,
    /// Nothing to compare, and why.
    NotCompared(String),
}

/// A plugin's figure beside its readers'.
#[derive(Debug, Clone)]
pub struct Pair {
    pub plugin_type: String,
    pub readers: Vec<&'static str>,
    pub plugin_joules: Option<f64>,
    pub reader_joules: Option<f64>,
    pub tolerance: Option<Tolerance>,
    pub verdict: Verdict,
}

impl Pair {
    pub fn difference_j(&self) -> Option<f64> {
        Some(self.plugin_joules? - self.reader_joules?)
    }

    pub fn difference_pct(&self) -> Option<f64> {
        let reader = self.reader_joules.filter(|r| *r > 0.0)?;
        Some(100.0 * self.difference_j()? / reader)
    }
}

/// RAPL's part of the node's wall power.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    pub rapl_watts: f64,
    pub rapl_from: String,
    pub wall_watts: f64,
    pub wall_from: String,
}

impl Share {
    pub fn pct(&self) -> f64 {
        100.0 * self.rapl_watts / self.wall_watts
    }
}

#[derive(Debug, Clone)]
pub struct Comparison {
    pub window_s: f64,
    pub readers: Vec<ReaderResult>,
    pub ledgers: Vec<LedgerResult>,
    pub pairs: Vec<Pair>,
    pub share: Option<Share>,
}

impl Comparison {
    /// No pair disagrees (what could not be compared is said, not failed).
    pub fn agrees(&self) -> bool {
        self.pairs.iter().all(|p| p.verdict != Verdict::Differ)
    }
}

/// Sets each plugin's figure beside its readers' and finds RAPL's share of the wall power.
pub fn judge(window_s: f64, readers: Vec<ReaderResult>, ledgers: Vec<LedgerResult>) -> Comparison {
    let mut pairs = Vec::new();
    for ledger in &ledgers {
        let Some((names, tolerance)) = pairing(&ledger.plugin_type) else {
            continue;
        };
        let mut pair = Pair {
            plugin_type: ledger.plugin_type.clone(),
            readers: names.to_vec(),
            plugin_joules: None,
            reader_joules: None,
            tolerance: Some(tolerance),
            verdict: Verdict::NotCompared(String::new()),
        };
        let mine: Vec<&ReaderResult> = readers.iter().filter(|r| names.contains(&r.name)).collect();
        let read: Vec<&Average> = mine
            .iter()
            .filter_map(|r| r.outcome.as_ref().ok())
            .collect();
        let plugin = match &ledger.outcome {
            Ok(a) => a,
            Err(why) => {
                pair.verdict = Verdict::NotCompared(format!("slurmd's figure: {why}"));
                pairs.push(pair);
                continue;
            }
        };
        pair.plugin_joules = Some(plugin.watts * plugin.secs);
        if read.is_empty() {
            let why = mine
                .iter()
                .filter_map(|r| r.outcome.as_ref().err())
                .map(|u| u.detail().to_string())
                .collect::<Vec<_>>()
                .join("; ");
            pair.verdict = Verdict::NotCompared(if why.is_empty() {
                format!("no reader of its hardware ({})", names.join(", "))
            } else {
                format!("no independent reader: {why}")
            });
            pairs.push(pair);
            continue;
        }
        // several readers of one kind (GPUs of both makers) add up; over slurmd's window
        pair.readers = mine
            .iter()
            .filter(|r| r.outcome.is_ok())
            .map(|r| r.name)
            .collect();
        let reader_watts: f64 = read.iter().map(|a| a.watts).sum();
        let reader_j = reader_watts * plugin.secs;
        pair.reader_joules = Some(reader_j);
        let allowed = tolerance.pct / 100.0 * reader_j
            + tolerance.floor_watts * plugin.secs
            + reader_watts * tolerance.edge_secs;
        pair.verdict = if (plugin.watts * plugin.secs - reader_j).abs() <= allowed {
            Verdict::Agree
        } else {
            Verdict::Differ
        };
        pairs.push(pair);
    }
    let share = share(&readers, &ledgers);
    Comparison {
        window_s,
        readers,
        ledgers,
        pairs,
        share,
    }
}

/// RAPL's watts (its perf reader, else a RAPL plugin's ledger) over the node's wall watts
/// (a whole-node reader, else a whole-node plugin's ledger).
fn share(readers: &[ReaderResult], ledgers: &[LedgerResult]) -> Option<Share> {
    let reader = |scope: Scope| {
        readers.iter().find_map(|r| {
            let a = r.outcome.as_ref().ok().filter(|_| r.scope == scope)?;
            Some((a.watts, r.name.to_string()))
        })
    };
    let ledger = |names: &[&str]| {
        ledgers.iter().find_map(|l| {
            let name = l.plugin_type.rsplit('/').next()?;
            let a = l.outcome.as_ref().ok().filter(|_| names.contains(&name))?;
            Some((a.watts, format!("slurmd's {name}")))
        })
    };
    let (rapl_watts, rapl_from) = reader(Scope::Packages).or_else(|| ledger(&["rust_rapl"]))?;
    let (wall_watts, wall_from) = reader(Scope::WholeNode)
        .or_else(|| ledger(&["rust_ipmi", "rust_redfish", "rust_pm_counters"]))?;
    (wall_watts > 0.0).then_some(Share {
        rapl_watts,
        rapl_from,
        wall_watts,
        wall_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::compare::{json, text};

    fn reader(name: &'static str, scope: Scope, watts: Option<f64>) -> ReaderResult {
        ReaderResult {
            name,
            scope,
            path: format!("{name} path"),
            outcome: watts
                .map(|watts| Average { watts, secs: 30.0 })
                .ok_or(Unavailable::Absent(format!("{name} is not installed"))),
        }
    }

    fn ledger(plugin: &str, watts: f64) -> LedgerResult {
        LedgerResult {
            plugin_type: format!("acct_gather_energy/{plugin}"),
            path: "/s/energy-ledger.0.json".into(),
            outcome: Ok(Average { watts, secs: 30.0 }),
        }
    }

    #[test]
    fn a_pair_agrees_within_its_tolerance_and_differs_beyond() {
        // RAPL: 2% + 1 W over 30 s: 250 W against 254 W is 120 J of 7620 J allowed 182 J
        let c = judge(
            30.0,
            vec![reader("rapl-perf", Scope::Packages, Some(254.0))],
            vec![ledger("rust_rapl", 250.0)],
        );
        assert_eq!(c.pairs.len(), 1);
        assert_eq!(c.pairs[0].verdict, Verdict::Agree);
        assert_eq!(c.pairs[0].difference_j(), Some(-120.0));
        assert!(c.agrees());
        // 250 against 260 W: 300 J off, 186 J allowed
        let c = judge(
            30.0,
            vec![reader("rapl-perf", Scope::Packages, Some(260.0))],
            vec![ledger("rust_rapl", 250.0)],
        );
        assert_eq!(c.pairs[0].verdict, Verdict::Differ);
        assert!(!c.agrees());
        let shown = text(&c);
        assert!(shown.contains("DIFFER"), "{shown}");
        assert!(shown.contains("-300 J (-3.85%)"), "{shown}");
    }

    /// A node controller's counter updates at 10 Hz: over slurmd's 2-s window of 1-s
    /// samples, each up to 0.1 s old, 350 W reads as anything from 332 to 368 W.
    #[test]
    fn a_counter_that_updates_slowly_is_allowed_its_age_at_each_end_of_a_short_window() {
        let short = |plugin_watts: f64| {
            let mut l = ledger("rust_pm_counters", plugin_watts);
            l.outcome = Ok(Average {
                watts: plugin_watts,
                secs: 2.0,
            });
            judge(
                3.0,
                vec![reader("pm_counters", Scope::WholeNode, Some(350.0))],
                vec![l],
            )
        };
        // 356.6 W: 13.2 J off 700 J; 1% + 1 W over 2 s + 0.1 s of 350 W allow 44 J
        let c = short(356.6);
        assert_eq!(c.pairs[0].verdict, Verdict::Agree, "{}", text(&c));
        assert!(text(&c).contains("tolerance 1% + 1 W + 0.1 s of power"));
        assert_eq!(json(&c)["pairs"][0]["tolerance_edge_secs"], 0.1);
        // 375 W: 50 J off
        assert_eq!(short(375.0).pairs[0].verdict, Verdict::Differ);
    }

    #[test]
    fn gpus_of_both_makers_add_up_and_a_missing_reader_is_said() {
        let c = judge(
            30.0,
            vec![
                reader("nvidia-smi", Scope::Gpus, Some(300.0)),
                reader("amd-smi", Scope::Gpus, Some(100.0)),
            ],
            vec![ledger("rust_gpu", 401.0)],
        );
        assert_eq!(c.pairs[0].verdict, Verdict::Agree);
        assert_eq!(c.pairs[0].readers, ["nvidia-smi", "amd-smi"]);
        assert_eq!(c.pairs[0].reader_joules, Some(12_000.0));

        let c = judge(
            30.0,
            vec![
                reader("nvidia-smi", Scope::Gpus, None),
                reader("amd-smi", Scope::Gpus, None),
            ],
            vec![ledger("rust_gpu", 401.0)],
        );
        let Verdict::NotCompared(why) = &c.pairs[0].verdict else {
            panic!("{:?}", c.pairs[0]);
        };
        assert!(why.contains("nvidia-smi is not installed"), "{why}");
        assert!(c.agrees(), "not compared is said, not failed");
        let value = json(&c);
        assert_eq!(value["pairs"][0]["verdict"], "not compared");
        assert_eq!(value["readers"][0]["status"], "absent");
    }

    #[test]
    fn a_ledger_without_readings_is_not_compared() {
        let mut l = ledger("rust_ipmi", 0.0);
        l.outcome = Err("no ledger at /s/energy-ledger.0.json".into());
        let c = judge(
            30.0,
            vec![reader("bmc", Scope::WholeNode, Some(300.0))],
            vec![l],
        );
        assert!(matches!(&c.pairs[0].verdict, Verdict::NotCompared(w) if w.contains("no ledger")));
    }

    #[test]
    fn rapls_share_of_the_wall_power_from_readers_else_ledgers() {
        // the perf reader and the BMC
        let c = judge(
            30.0,
            vec![
                reader("rapl-perf", Scope::Packages, Some(87.0)),
                reader("bmc", Scope::WholeNode, Some(166.0)),
            ],
            vec![],
        );
        let s = c.share.expect("a share");
        assert!((s.pct() - 52.41).abs() < 0.01, "{}", s.pct());
        assert_eq!(
            (s.rapl_from.as_str(), s.wall_from.as_str()),
            ("rapl-perf", "bmc")
        );
        // no perf PMU: the RAPL plugin's figure
        let c = judge(
            30.0,
            vec![
                reader("rapl-perf", Scope::Packages, None),
                reader("bmc", Scope::WholeNode, Some(400.0)),
            ],
            vec![ledger("rust_rapl", 250.0)],
        );
        let s = c.share.expect("a share");
        assert_eq!(s.pct(), 62.5);
        assert_eq!(s.rapl_from, "slurmd's rust_rapl");
        // no whole-node meter: none
        let c = judge(30.0, vec![], vec![ledger("rust_rapl", 250.0)]);
        assert!(c.share.is_none());
    }
}
