//! `senergy check --compare [SECONDS]`: over a window, the node's power as slurmd's ledger
//! accounts it (the plugin's figure) beside what an independent reader of the same
//! hardware says ([`super::readers`]), with a verdict against a tolerance that suits the
//! pair, and where the node has both RAPL and a whole-node meter, the share of the node's
//! wall power that RAPL sees.
//!
//! Both sides are compared as average power over their own windows, which are aligned: each
//! end of the window waits for slurmd to write a new ledger and reads the counters at once;
//! power-only readers are sampled every second and integrated.

use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slurm_energy_logic::ledger::Ledger;

use super::readers::{Quantity, Reader, Scope, Slot, Unavailable};

/// How long an end of the window waits for slurmd to write a new ledger (it writes one a
/// second while its source answers).
const LEDGER_WAIT: Duration = Duration::from_secs(3);
/// How often power-only readers are sampled.
const POWER_PERIOD: Duration = Duration::from_secs(1);

/// How far apart two figures of the same hardware may be: `pct` of the reader's energy plus
/// `floor_watts` over the window (a floor for a nearly idle device), and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub pct: f64,
    pub floor_watts: f64,
    pub why: &'static str,
}

/// The readers of the same hardware a plugin reads, and the tolerance of the pair.
pub fn pairing(plugin_type: &str) -> Option<(&'static [&'static str], Tolerance)> {
    let name = plugin_type.rsplit('/').next().unwrap_or(plugin_type);
    Some(match name {
        "rust_rapl" => (
            &["rapl-perf"],
            Tolerance {
                pct: 2.0,
                floor_watts: 1.0,
                why: "the same RAPL registers read twice: what differs is when (each end \
                      within ~0.1 s of slurmd's reading) and the plugin's accounting",
            },
        ),
        "rust_variorum" => (
            &["rapl-perf"],
            Tolerance {
                pct: 5.0,
                floor_watts: 2.0,
                why: "Variorum's node power integrated at the plugin's interval against \
                      RAPL's counters: a load that changes within the interval costs up to \
                      half an interval of the change",
            },
        ),
        "rust_ipmi" => (
            &["bmc"],
            Tolerance {
                pct: 5.0,
                floor_watts: 5.0,
                why: "the same BMC power, sampled by each about once a second at other \
                      moments and integrated; DCMI gives whole watts",
            },
        ),
        "rust_redfish" => (
            &["redfish"],
            Tolerance {
                pct: 5.0,
                floor_watts: 5.0,
                why: "the same Redfish reading, each polling it at its own moments; BMCs \
                      refresh it every few seconds",
            },
        ),
        "rust_pm_counters" => (
            &["pm_counters"],
            Tolerance {
                pct: 1.0,
                floor_watts: 1.0,
                why: "the node controller's own energy counter, read twice; it updates at \
                      10 Hz",
            },
        ),
        "rust_gpu" => (
            &["nvidia-smi", "amd-smi"],
            Tolerance {
                pct: 2.0,
                floor_watts: 1.0,
                why: "the driver's energy counter read twice; a tool run takes up to ~0.5 s, \
                      which shifts its ends",
            },
        ),
        _ => return None,
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
        let allowed = tolerance.pct / 100.0 * reader_j + tolerance.floor_watts * plugin.secs;
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

// ---- measuring ----

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
    let mut last = None;
    loop {
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
    /// The slot's name, which [`pairing`] knows it by.
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

// ---- output ----

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Packages => "packages+dram",
        Scope::WholeNode => "whole node",
        Scope::Gpus => "gpus",
    }
}

pub fn text(c: &Comparison) -> String {
    let mut out = format!("compare: over {:.1} s\n", c.window_s);
    for r in &c.readers {
        let said = match &r.outcome {
            Ok(a) => format!("{:.1} W over {:.1} s, {}", a.watts, a.secs, r.path),
            Err(u) => format!("{}: {}", u.status(), u.detail()),
        };
        out.push_str(&format!(
            "  reader {:<12} {:<14} {said}\n",
            r.name,
            scope_name(r.scope)
        ));
    }
    for l in &c.ledgers {
        let said = match &l.outcome {
            Ok(a) => format!(
                "{:.1} W over {:.1} s ({})",
                a.watts,
                a.secs,
                l.path.display()
            ),
            Err(why) => why.clone(),
        };
        out.push_str(&format!("  slurmd {:<27} {said}\n", short(&l.plugin_type)));
    }
    for p in &c.pairs {
        let line = match (&p.verdict, p.plugin_joules, p.reader_joules, p.tolerance) {
            (Verdict::NotCompared(why), ..) => format!("not compared: {why}"),
            (verdict, Some(mine), Some(theirs), Some(t)) => format!(
                "{} {:.0} J, {} {:.0} J: {:+.0} J ({:+.2}%), {} (tolerance {}% + {} W)",
                short(&p.plugin_type),
                mine,
                p.readers.join("+"),
                theirs,
                mine - theirs,
                p.difference_pct().unwrap_or(0.0),
                if *verdict == Verdict::Agree {
                    "agree"
                } else {
                    "DIFFER"
                },
                t.pct,
                t.floor_watts
            ),
            _ => "not compared".into(),
        };
        out.push_str(&format!("  {:<33} {line}\n", short(&p.plugin_type)));
    }
    if let Some(s) = &c.share {
        out.push_str(&format!(
            "  RAPL covers {:.1}% of the node's wall power ({:.1} W from {} of {:.1} W from {}); \
             the rest is fans, disks, NICs, GPUs, power-supply losses...\n",
            s.pct(),
            s.rapl_watts,
            s.rapl_from,
            s.wall_watts,
            s.wall_from
        ));
    }
    out
}

fn short(plugin_type: &str) -> &str {
    plugin_type.rsplit('/').next().unwrap_or(plugin_type)
}

fn round(x: f64, places: i32) -> f64 {
    let k = 10f64.powi(places);
    (x * k).round() / k
}

pub fn json(c: &Comparison) -> Value {
    let readers: Vec<Value> = c
        .readers
        .iter()
        .map(|r| match &r.outcome {
            Ok(a) => json!({
                "reader": r.name, "scope": scope_name(r.scope), "status": "read",
                "path": r.path, "watts": round(a.watts, 2), "seconds": round(a.secs, 3),
                "detail": null,
            }),
            Err(u) => json!({
                "reader": r.name, "scope": scope_name(r.scope), "status": u.status(),
                "path": null, "watts": null, "seconds": null, "detail": u.detail(),
            }),
        })
        .collect();
    let ledgers: Vec<Value> = c
        .ledgers
        .iter()
        .map(|l| match &l.outcome {
            Ok(a) => json!({
                "plugin": l.plugin_type, "ledger": l.path, "watts": round(a.watts, 2),
                "seconds": round(a.secs, 3), "joules": round(a.watts * a.secs, 1), "detail": null,
            }),
            Err(why) => json!({
                "plugin": l.plugin_type, "ledger": l.path, "watts": null, "seconds": null,
                "joules": null, "detail": why,
            }),
        })
        .collect();
    let pairs: Vec<Value> = c
        .pairs
        .iter()
        .map(|p| {
            let (verdict, why) = match &p.verdict {
                Verdict::Agree => ("agree", None),
                Verdict::Differ => ("differ", None),
                Verdict::NotCompared(why) => ("not compared", Some(why.clone())),
            };
            json!({
                "plugin": p.plugin_type,
                "readers": p.readers,
                "plugin_joules": p.plugin_joules.map(|j| round(j, 1)),
                "reader_joules": p.reader_joules.map(|j| round(j, 1)),
                "difference_joules": p.difference_j().map(|j| round(j, 1)),
                "difference_pct": p.difference_pct().map(|x| round(x, 3)),
                "tolerance_pct": p.tolerance.map(|t| t.pct),
                "tolerance_floor_watts": p.tolerance.map(|t| t.floor_watts),
                "tolerance_why": p.tolerance.map(|t| t.why),
                "verdict": verdict,
                "why_not_compared": why,
            })
        })
        .collect();
    json!({
        "window_s": round(c.window_s, 3),
        "agrees": c.agrees(),
        "readers": readers,
        "slurmd": ledgers,
        "pairs": pairs,
        "rapl_share_of_wall": c.share.as_ref().map(|s| json!({
            "pct": round(s.pct(), 2),
            "rapl_watts": round(s.rapl_watts, 2),
            "rapl_from": s.rapl_from,
            "wall_watts": round(s.wall_watts, 2),
            "wall_from": s.wall_from,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let c = judge(c.window_s, c.readers, vec![ledger("rust_ipmi", 201.0)]);
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
