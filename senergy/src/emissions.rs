//! When a job's energy was spent, for emissions at the hour they happened: from its power
//! samples where Prometheus has them, else from its steps' energies over their runs,
//! else evenly over its run. Everything here decides; nothing touches Slurm or the network.

use crate::carbon::JOULES_PER_KWH;
use crate::scopes::{self, Factor, Scopes};
use crate::site::Tariff;

/// How a job's emissions were found (said in reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// One intensity: when the energy was spent does not matter.
    Static,
    /// The job's energy spread evenly over its run.
    Even,
    /// Each step (srun steps) over its own run; the rest of the job's energy over the
    /// time no such step ran.
    Steps,
    /// Each increase of the job's energy counter between two of Prometheus's samples,
    /// over its interval.
    PowerSamples,
}

impl Method {
    pub fn text(self) -> &'static str {
        match self {
            Method::Static => "static intensity",
            Method::Even => "series, energy spread evenly over the run",
            Method::Steps => "series, each step's energy over its run",
            Method::PowerSamples => "series, each power sample (Prometheus) at its time",
        }
    }
}

/// Some of a job's energy and the interval (unix seconds) it was spent over, evenly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spent {
    pub joules: f64,
    pub start: f64,
    pub end: f64,
}

/// gCO2e of the pieces; `None` if a piece has no intensity.
pub fn emissions_g(tariff: &Tariff, pieces: &[Spent]) -> Option<f64> {
    pieces
        .iter()
        .map(|p| tariff.emissions_g(p.joules, p.start, p.end))
        .sum()
}

/// Scope 2 of the pieces: the facility's energy (IT x PUE; `None` without a PUE) and its
/// location- and market-based gCO2e, each piece at the factors of its time (`None` where
/// that intensity is not set, or has no value for some piece). Scope 3 is left `None`.
pub fn scope2(tariff: &Tariff, pieces: &[Spent]) -> Scopes {
    let sum = |kwh: bool, factors: &[&Factor]| -> Option<f64> {
        pieces
            .iter()
            .map(|p| {
                let amount = if kwh {
                    p.joules / JOULES_PER_KWH
                } else {
                    p.joules
                };
                scopes::weighted(amount, p.start, p.end, factors)
            })
            .sum()
    };
    // without a PUE, the IT energy stands for the facility's
    let pue: Vec<&Factor> = Some(&tariff.pue)
        .filter(|f| f.is_set())
        .into_iter()
        .collect();
    let on_facility = |intensity: &Factor| {
        let mut factors = pue.clone();
        factors.push(intensity);
        intensity.is_set().then(|| sum(true, &factors)).flatten()
    };
    Scopes {
        facility_energy_j: tariff.pue.is_set().then(|| sum(false, &pue)).flatten(),
        scope2_location_g: on_facility(&tariff.location),
        scope2_market_g: on_facility(&tariff.market),
        ..Scopes::default()
    }
}

/// The job's `joules` over `[start, end)` from its steps' own `(joules, start, end)`
/// (srun steps, which run inside the job): each step over its run, and the rest over the
/// time none ran (over the whole run if they cover it). Steps that add up to more than
/// the job (parallel steps on the same nodes) are scaled to it.
pub fn from_steps(joules: f64, start: f64, end: f64, steps: &[Spent]) -> Vec<Spent> {
    let stepped: f64 = steps.iter().map(|s| s.joules).sum();
    if stepped <= 0.0 {
        return vec![Spent { joules, start, end }];
    }
    let scale = if stepped > joules {
        joules / stepped
    } else {
        1.0
    };
    let mut pieces: Vec<Spent> = steps
        .iter()
        .map(|s| Spent {
            joules: s.joules * scale,
            ..*s
        })
        .collect();
    let rest = (joules - stepped).max(0.0);
    if rest > 0.0 {
        let gaps = uncovered(start, end, steps);
        let idle: f64 = gaps.iter().map(|(a, b)| b - a).sum();
        if idle > 0.0 {
            pieces.extend(gaps.iter().map(|&(a, b)| Spent {
                joules: rest * (b - a) / idle,
                start: a,
                end: b,
            }));
        } else {
            pieces.push(Spent {
                joules: rest,
                start,
                end,
            });
        }
    }
    pieces
}

/// The parts of `[start, end)` that no step's run covers.
fn uncovered(start: f64, end: f64, steps: &[Spent]) -> Vec<(f64, f64)> {
    let mut runs: Vec<(f64, f64)> = steps.iter().map(|s| (s.start, s.end)).collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut gaps = Vec::new();
    let mut at = start;
    for (a, b) in runs {
        if a > at {
            gaps.push((at, a.min(end)));
        }
        at = at.max(b);
        if at >= end {
            break;
        }
    }
    if at < end {
        gaps.push((at, end));
    }
    gaps.retain(|(a, b)| b > a);
    gaps
}

/// The job's `joules` from its energy counter's samples on each node (`(time, joules)`,
/// in time order): the first sample's value over `[start, its time)`, each increase over
/// the interval between its two samples (a counter that fell began anew: its value is
/// the increase). Scaled so that they add up to `joules` (the figure in accounting);
/// `None` without samples.
pub fn from_samples(joules: f64, start: f64, nodes: &[Vec<(f64, f64)>]) -> Option<Vec<Spent>> {
    let mut pieces = Vec::new();
    for samples in nodes {
        let mut before: Option<(f64, f64)> = None;
        for &(t, value) in samples {
            let (from, increase) = match before {
                None => (start.min(t), value),
                Some((t0, v0)) if value >= v0 => (t0, value - v0),
                Some((t0, _)) => (t0, value),
            };
            if increase > 0.0 {
                pieces.push(Spent {
                    joules: increase,
                    start: from,
                    end: t,
                });
            }
            before = Some((t, value));
        }
    }
    let sampled: f64 = pieces.iter().map(|p| p.joules).sum();
    if sampled <= 0.0 {
        return None;
    }
    for p in &mut pieces {
        p.joules *= joules / sampled;
    }
    Some(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::carbon::Intensities;
    use std::path::Path;

    /// 100 g/kWh until t = 1000, 200 after (rows every 100 s from 0 to 1900).
    fn doubling() -> Tariff {
        let mut csv = String::from("time,g_co2e_per_kwh\n");
        for t in (0..2000).step_by(100) {
            csv.push_str(&format!("{t},{}\n", if t < 1000 { 100 } else { 200 }));
        }
        let series = Intensities::parse(Path::new("grid.csv"), &csv).expect("series");
        Tariff::new(None, Some(series), None, None).expect("tariff")
    }

    const KWH: f64 = 3.6e6;

    #[test]
    fn steps_take_the_intensity_of_their_runs_and_the_rest_the_gaps() {
        // a job from 500 to 1500 s: 1 kWh; its srun step 1100..1500 used 0.8 kWh
        let step = Spent {
            joules: 0.8 * KWH,
            start: 1100.0,
            end: 1500.0,
        };
        let pieces = from_steps(KWH, 500.0, 1500.0, &[step]);
        let total: f64 = pieces.iter().map(|p| p.joules).sum();
        assert!((total - KWH).abs() < 1e-6);
        // 0.8 kWh at 200, 0.2 kWh over 500..1100: 5/6 of it at 100, 1/6 at 200
        let want = 0.8 * 200.0 + 0.2 * (100.0 * 5.0 / 6.0 + 200.0 / 6.0);
        let g = emissions_g(&doubling(), &pieces).expect("covered");
        assert!((g - want).abs() < 1e-6, "{g} vs {want}");
        // evenly over the run it would be 150
        let even = emissions_g(&doubling(), &from_steps(KWH, 500.0, 1500.0, &[])).expect("c");
        assert!((even - 150.0).abs() < 1e-6, "{even}");
    }

    #[test]
    fn parallel_steps_beyond_the_job_are_scaled_to_it() {
        let s = |start: f64, end: f64| Spent {
            joules: KWH,
            start,
            end,
        };
        let pieces = from_steps(KWH, 0.0, 2000.0, &[s(0.0, 1000.0), s(0.0, 1000.0)]);
        let total: f64 = pieces.iter().map(|p| p.joules).sum();
        assert!((total - KWH).abs() < 1e-6);
        assert!(pieces.iter().all(|p| p.end <= 1000.0), "{pieces:?}");
    }

    #[test]
    fn power_samples_follow_the_series_and_add_up_to_accounting() {
        // two nodes sampled every 100 s from 600 to 1400: node a at 1 kW throughout, node
        // b at 1 kW until 1000 then 3 kW; the job began at 550
        let counter = |watts: &dyn Fn(f64) -> f64| -> Vec<(f64, f64)> {
            let mut e = 0.0;
            let mut t = 550.0;
            let mut out = Vec::new();
            for s in (600..=1400).step_by(100).map(f64::from) {
                while t < s {
                    e += watts(t);
                    t += 1.0;
                }
                out.push((s, e));
            }
            out
        };
        let a = counter(&|_| 1000.0);
        let b = counter(&|t| if t < 1000.0 { 1000.0 } else { 3000.0 });
        let total = a.last().expect("a").1 + b.last().expect("b").1;
        let pieces = from_samples(total, 550.0, &[a, b]).expect("samples");
        let g = emissions_g(&doubling(), &pieces).expect("covered");
        // before 1000: 450 s x 2 kW at 100 g/kWh; after: 400 s x 4 kW at 200 g/kWh
        let want = (450.0 * 2000.0 * 100.0 + 400.0 * 4000.0 * 200.0) / KWH;
        assert!((g - want).abs() < 1e-6, "{g} vs {want}");
        // scaled to accounting's figure when Prometheus missed some
        let half = from_samples(total / 2.0, 550.0, &[counter(&|_| 1000.0)]).expect("s");
        let sum: f64 = half.iter().map(|p| p.joules).sum();
        assert!((sum - total / 2.0).abs() < 1e-6);
        assert_eq!(from_samples(1.0, 0.0, &[vec![]]), None);
    }

    #[test]
    fn a_counter_that_began_anew_counts_from_zero() {
        let pieces = from_samples(
            300.0,
            0.0,
            &[vec![(10.0, 100.0), (20.0, 200.0), (30.0, 100.0)]],
        )
        .expect("samples");
        let joules: Vec<f64> = pieces.iter().map(|p| p.joules).collect();
        assert_eq!(joules, vec![100.0, 100.0, 100.0]);
        assert_eq!((pieces[2].start, pieces[2].end), (20.0, 30.0));
    }
}
