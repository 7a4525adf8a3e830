//! A step's view of node energy reported by slurmd, across slurmd restarts.
//!
//! slurmd reports the node's joules since *it* started. When slurmd restarts during a step,
//! the figure falls back towards zero: the step must neither go negative nor lose what was
//! counted before. A restart shows as a changed start time (24.11+ carries slurmd's start
//! in the record) or, on any release, as a figure lower than the last one; the step asks
//! again soon after slurmd fails to answer, so the restarted slurmd's figure is still
//! small when it is first seen. The restarted slurmd's figure is added whole, and the gap
//! between the last report of the old slurmd and the start of the new one is estimated
//! from the last known power (the new slurmd's start is derived from its figure and its
//! power).

use std::time::Instant;

/// One answer from slurmd.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeReport {
    pub consumed_j: u64,
    pub watts: Option<u32>,
    /// When slurmd started, where the release reports it.
    pub started: Option<i64>,
}

#[derive(Debug, Default, Clone)]
pub struct RemoteTotal {
    total_uj: u64,
    last: Option<Last>,
}

#[derive(Debug, Clone, Copy)]
struct Last {
    at: Instant,
    consumed_j: u64,
    watts: f64,
    started: Option<i64>,
}

impl RemoteTotal {
    /// Energy since the first report.
    pub fn total_uj(&self) -> u64 {
        self.total_uj
    }

    /// Adds a report; returns a note for the log when slurmd restarted.
    pub fn update(&mut self, report: NodeReport, at: Instant) -> Option<String> {
        let watts = report.watts.map(f64::from);
        let mut note = None;
        if let Some(last) = self.last {
            let restarted = report.consumed_j < last.consumed_j
                || matches!((last.started, report.started), (Some(a), Some(b)) if a != b);
            if !restarted {
                self.total_uj += (report.consumed_j - last.consumed_j) * 1_000_000;
            } else {
                let elapsed = at.saturating_duration_since(last.at).as_secs_f64();
                let since_new_start = match watts {
                    Some(w) if w >= 1.0 => report.consumed_j as f64 / w,
                    _ => 0.0,
                };
                let gap = (elapsed - since_new_start).max(0.0);
                let estimated_j = last.watts * gap;
                self.total_uj += report.consumed_j * 1_000_000 + (estimated_j * 1e6) as u64;
                note = Some(format!(
                    "slurmd restarted (its node energy went from {} J to {} J); counted its new \
                     figure and estimated {estimated_j:.0} J for the {gap:.1} s between",
                    last.consumed_j, report.consumed_j
                ));
            }
        }
        self.last = Some(Last {
            at,
            consumed_j: report.consumed_j,
            watts: watts.or(self.last.map(|l| l.watts)).unwrap_or(0.0),
            started: report.started,
        });
        note
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn report(consumed_j: u64, watts: u32) -> NodeReport {
        NodeReport {
            consumed_j,
            watts: Some(watts),
            started: None,
        }
    }

    #[test]
    fn counts_increments_from_the_first_report() {
        let t0 = Instant::now();
        let mut r = RemoteTotal::default();
        assert_eq!(r.update(report(5000, 100), t0), None);
        r.update(report(5100, 100), t0 + Duration::from_secs(1));
        r.update(report(5350, 250), t0 + Duration::from_secs(2));
        assert_eq!(r.total_uj(), 350_000_000);
    }

    #[test]
    fn a_slurmd_restart_neither_goes_negative_nor_loses_energy() {
        let t0 = Instant::now();
        let mut r = RemoteTotal::default();
        r.update(report(10_000, 200), t0);
        r.update(report(10_200, 200), t0 + Duration::from_secs(1));
        // slurmd down for a while; 10 s after the last report the new slurmd has counted
        // 600 J at 200 W, i.e. it started 3 s ago: 7 s of gap at 200 W
        let note = r.update(report(600, 200), t0 + Duration::from_secs(11));
        assert!(note.is_some_and(|n| n.contains("restarted")));
        assert_eq!(r.total_uj(), (200 + 600 + 1400) * 1_000_000);
        r.update(report(800, 200), t0 + Duration::from_secs(12));
        assert_eq!(r.total_uj(), (200 + 600 + 1400 + 200) * 1_000_000);
    }

    #[test]
    fn a_restart_seen_late_is_told_by_the_start_time() {
        let t0 = Instant::now();
        let mut r = RemoteTotal::default();
        let at = |started, consumed_j| NodeReport {
            consumed_j,
            watts: Some(100),
            started: Some(started),
        };
        r.update(at(1000, 500), t0);
        r.update(at(1000, 600), t0 + Duration::from_secs(1));
        // the new slurmd already counted more than the old one had when first seen
        let note = r.update(at(2000, 900), t0 + Duration::from_secs(11));
        assert!(note.is_some());
        // 100 + 900 + the gap: 10 s elapsed, 9 s of it since the new start, 1 s at 100 W
        assert_eq!(r.total_uj(), (100 + 900 + 100) * 1_000_000);
    }
}
