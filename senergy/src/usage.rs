//! Energy per account and user over a period (what Moab/MAM charged from): every job is
//! charged in full to the period in which it ended.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::presence::Presence;
use crate::report::JobReport;
use crate::scopes::Scopes;
use crate::site::Tariff;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageRow {
    pub account: String,
    pub user: String,
    pub jobs: u64,
    /// Jobs whose energy is partial or missing: the figures are a lower bound.
    pub jobs_incomplete: u64,
    pub energy_j: u64,
    pub kwh: f64,
    /// `None` when some job with energy has no emissions (no intensity for its hours).
    pub emissions_g: Option<f64>,
    pub cost: Option<f64>,
    /// The jobs' emissions by scope, summed (`node_class` `None`).
    pub emissions: Scopes,
    /// What the jobs held and did not use (gpu, cpu), J, as their nodes kept it
    /// ([`crate::kept`]), over the jobs whose record has it.
    pub idle_held_j: BTreeMap<String, f64>,
    /// The jobs whose record has idle-held figures: the others' are not recorded.
    pub jobs_idle_held_recorded: u64,
    /// This row's idle-held energy, % of the period's; `None` where none was recorded.
    pub idle_held_share_pct: Option<f64>,
    /// What that energy emitted under each Scope 2 factor, gCO2e, over the jobs that have
    /// the figure ([`crate::kept::Kept::with_idle_emissions`]).
    pub idle_held_scope2_location_g: Option<f64>,
    pub idle_held_scope2_market_g: Option<f64>,
}

impl UsageRow {
    fn add(&mut self, job: &JobReport) {
        self.jobs += 1;
        if job.data != Presence::Complete {
            self.jobs_incomplete += 1;
        }
        let sum = |total: Option<f64>, part: Option<f64>| Some(total? + part?);
        // a node's embodied emissions do not depend on its energy being known
        let (e, part) = (&mut self.emissions, &job.emissions);
        e.node_hours = sum(e.node_hours, part.node_hours);
        e.scope3_embodied_g = sum(e.scope3_embodied_g, part.scope3_embodied_g);
        if let Some(idle) = &job.kept.idle_held {
            self.jobs_idle_held_recorded += 1;
            for (kind, j) in idle {
                *self.idle_held_j.entry(kind.clone()).or_default() += j;
            }
        }
        let add = |total: &mut Option<f64>, part: Option<f64>| {
            if let Some(g) = part {
                *total = Some(total.unwrap_or(0.0) + g);
            }
        };
        add(
            &mut self.idle_held_scope2_location_g,
            job.kept.idle_held_scope2_location_g,
        );
        add(
            &mut self.idle_held_scope2_market_g,
            job.kept.idle_held_scope2_market_g,
        );
        let Some(energy) = job.energy_j else {
            return;
        };
        self.energy_j += energy;
        self.kwh = self.energy_j as f64 / crate::carbon::JOULES_PER_KWH;
        self.emissions_g = sum(self.emissions_g, job.emissions_g);
        self.cost = sum(self.cost, job.cost);
        e.facility_energy_j = sum(e.facility_energy_j, part.facility_energy_j);
        e.scope2_location_g = sum(e.scope2_location_g, part.scope2_location_g);
        e.scope2_market_g = sum(e.scope2_market_g, part.scope2_market_g);
    }

    fn new(account: &str, user: &str) -> Self {
        Self {
            account: account.into(),
            user: user.into(),
            emissions_g: Some(0.0),
            cost: Some(0.0),
            emissions: Scopes {
                facility_energy_j: Some(0.0),
                scope2_location_g: Some(0.0),
                scope2_market_g: Some(0.0),
                scope3_embodied_g: Some(0.0),
                node_hours: Some(0.0),
                node_class: None,
            },
            ..Self::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    pub start: i64,
    pub end: i64,
    pub rows: Vec<UsageRow>,
    pub total: UsageRow,
}

/// Sums the jobs that ended in `[start, end)` per account and user, ordered by account
/// then user; running jobs are left for the period they end in.
pub fn usage(jobs: &[JobReport], start: i64, end: i64, tariff: &Tariff) -> Usage {
    let mut rows: BTreeMap<(String, String), UsageRow> = BTreeMap::new();
    let mut total = UsageRow::new("", "");
    for job in jobs
        .iter()
        .filter(|j| j.end.is_some_and(|e| e >= start && e < end))
    {
        rows.entry((job.account.clone(), job.user.clone()))
            .or_insert_with(|| UsageRow::new(&job.account, &job.user))
            .add(job);
        total.add(job);
    }
    let mut rows: Vec<UsageRow> = rows.into_values().collect();
    let idle_total: f64 = total.idle_held_j.values().sum();
    for row in rows.iter_mut().chain(std::iter::once(&mut total)) {
        let idle: f64 = row.idle_held_j.values().sum();
        row.idle_held_share_pct = (idle_total > 0.0).then(|| 100.0 * idle / idle_total);
    }
    // without an intensity or a price there is no figure, not 0
    for row in rows.iter_mut().chain(std::iter::once(&mut total)) {
        let e = &mut row.emissions;
        for (set, figure) in [
            (tariff.location.is_set(), &mut row.emissions_g),
            (tariff.price_per_kwh.is_some(), &mut row.cost),
            (tariff.pue.is_set(), &mut e.facility_energy_j),
            (tariff.location.is_set(), &mut e.scope2_location_g),
            (tariff.market.is_set(), &mut e.scope2_market_g),
            (!tariff.classes.is_empty(), &mut e.scope3_embodied_g),
        ] {
            if !set {
                *figure = None;
            }
        }
    }
    Usage {
        start,
        end,
        rows,
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::JobRow;
    use crate::report::job_report;
    use crate::site::Tariff;

    fn job(id: u32, account: &str, user: &str, end: i64, tres: &str) -> JobReport {
        let row = JobRow {
            job_id: id,
            account: account.into(),
            user: user.into(),
            state: slurm_sys::job_states::JOB_COMPLETE,
            start: end - 100,
            end,
            elapsed_s: 100,
            alloc_nodes: 1,
            tres_alloc: tres.into(),
            ..JobRow::default()
        };
        let tariff = Tariff::new(Some(400.0), None, Some(0.2), Some("EUR".into()))
            .expect("valid in this test");
        job_report(&row, &tariff, 0, None)
    }

    #[test]
    fn sums_per_account_and_user_within_the_period() {
        let jobs = [
            job(1, "a", "alice", 1000, "3=3600000"),
            job(2, "a", "alice", 1500, "3=7200000"),
            job(3, "b", "bob", 1999, "3=1800000"),
            job(4, "b", "bob", 2000, "3=999"), // ends at the period's end: next period
            job(5, "a", "carol", 999, "3=999"), // before
            job(6, "b", "bob", 1200, "3=0"),   // no energy measured
        ];
        let tariff = Tariff::new(Some(400.0), None, Some(0.2), None).expect("valid");
        let u = usage(&jobs, 1000, 2000, &tariff);
        let summary: Vec<_> = u
            .rows
            .iter()
            .map(|r| {
                (
                    r.account.as_str(),
                    r.user.as_str(),
                    r.jobs,
                    r.jobs_incomplete,
                    r.energy_j,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("a", "alice", 2, 0, 10_800_000),
                ("b", "bob", 2, 1, 1_800_000)
            ]
        );
        assert_eq!(u.total.energy_j, 12_600_000);
        assert_eq!(u.total.jobs, 4);
        assert!((u.total.kwh - 3.5).abs() < 1e-12);
        assert!((u.total.emissions_g.expect("valid in this test") - 3.5 * 400.0).abs() < 1e-9);
        assert!((u.total.cost.expect("valid in this test") - 3.5 * 0.2).abs() < 1e-12);
        let u = usage(&jobs, 1000, 2000, &Tariff::default());
        assert_eq!((u.total.emissions_g, u.total.cost), (None, None));
    }

    /// Idle-held energy as the jobs' nodes kept it, summed per account and user with
    /// their share of the period's; a job whose nodes kept none is not counted as 0.
    #[test]
    fn idle_held_is_summed_with_its_share() {
        let idle = |job: &mut JobReport, gpu: f64, cpu: f64| {
            job.kept.idle_held = Some(BTreeMap::from([
                ("cpu".to_string(), cpu),
                ("gpu".to_string(), gpu),
            ]));
        };
        let mut jobs = [
            job(1, "a", "alice", 1000, "3=3600000"),
            job(2, "a", "alice", 1500, "3=7200000"),
            job(3, "b", "bob", 1999, "3=1800000"),
            job(4, "b", "bob", 1200, "3=1800000"),
        ];
        idle(&mut jobs[0], 300.0, 20.0);
        idle(&mut jobs[1], 100.0, 30.0);
        idle(&mut jobs[2], 0.0, 50.0);
        let u = usage(&jobs, 1000, 2000, &Tariff::default());
        let alice = &u.rows[0];
        assert_eq!(
            alice.idle_held_j,
            BTreeMap::from([("cpu".into(), 50.0), ("gpu".into(), 400.0)])
        );
        assert_eq!(alice.jobs_idle_held_recorded, 2);
        // 450 of the 500 J held idle in the period
        assert_eq!(alice.idle_held_share_pct, Some(90.0));
        let bob = &u.rows[1];
        assert_eq!((bob.jobs, bob.jobs_idle_held_recorded), (2, 1));
        assert_eq!(bob.idle_held_share_pct, Some(10.0));
        assert_eq!(u.total.idle_held_share_pct, Some(100.0));
        // nothing recorded: no share, not 0 %
        let none = usage(&jobs[3..], 1000, 2000, &Tariff::default());
        assert_eq!(none.rows[0].idle_held_share_pct, None);
        assert!(none.rows[0].idle_held_j.is_empty());
    }

    /// Each job's idle-held share of its energy times its Scope 2 figure: 1 kWh at
    /// 200 gCO2e/kWh (PUE 1), 0.25 kWh of it held idle: 50 g; summed per user, absent
    /// (not 0) where no job kept the figure.
    #[test]
    fn idle_held_emissions_are_each_jobs_share_of_its_scope_figure() {
        let mut jobs = [
            job(1, "a", "alice", 1000, "3=3600000"),
            job(2, "a", "alice", 1500, "3=3600000"),
            job(3, "b", "bob", 1999, "3=3600000"),
        ];
        let scopes = Scopes {
            scope2_location_g: Some(200.0),
            scope2_market_g: Some(0.0),
            ..Scopes::default()
        };
        for (k, idle_j) in [(0, 900_000.0), (1, 1_800_000.0)] {
            jobs[k].kept.idle_held = Some(BTreeMap::from([("gpu".to_string(), idle_j)]));
            jobs[k].kept = jobs[k]
                .kept
                .clone()
                .with_idle_emissions(jobs[k].energy_j, &scopes);
        }
        assert_eq!(jobs[0].kept.idle_held_scope2_location_g, Some(50.0));
        assert_eq!(jobs[0].kept.idle_held_scope2_market_g, Some(0.0));
        let u = usage(&jobs, 1000, 2000, &Tariff::default());
        assert_eq!(u.rows[0].idle_held_scope2_location_g, Some(150.0));
        assert_eq!(u.rows[1].idle_held_scope2_location_g, None);
        assert_eq!(u.total.idle_held_scope2_location_g, Some(150.0));
    }
}
