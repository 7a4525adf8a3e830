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
    /// Jobs whose energy in accounting was changed after they ended (an owner's TRES edit,
    /// 25.11+): they are billed what their nodes kept ([`crate::kept::tampered`]).
    pub jobs_tampered: u64,
    /// What accounting says those jobs used, J (what sacct and sreport would bill).
    pub tampered_accounting_j: u64,
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
        if let Some(t) = job.kept.tampered {
            self.jobs_tampered += 1;
            self.tampered_accounting_j += t.accounting_j;
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

/// The sums of a period's jobs so far, per account and user: jobs are added a page of
/// accounting at a time ([`Tally::add`]), so that a year of a site's jobs is never in
/// memory at once.
pub struct Tally {
    start: i64,
    end: i64,
    rows: BTreeMap<(String, String), UsageRow>,
    total: UsageRow,
}

impl Tally {
    /// Nothing yet of the jobs that end in `[start, end)`.
    pub fn new(start: i64, end: i64) -> Tally {
        Tally {
            start,
            end,
            rows: BTreeMap::new(),
            total: UsageRow::new("", ""),
        }
    }

    /// Adds `job` where it ended in the period; running jobs are left for the period they
    /// end in.
    pub fn add(&mut self, job: &JobReport) {
        if !job.end.is_some_and(|e| e >= self.start && e < self.end) {
            return;
        }
        self.rows
            .entry((job.account.clone(), job.user.clone()))
            .or_insert_with(|| UsageRow::new(&job.account, &job.user))
            .add(job);
        self.total.add(job);
    }

    /// The period's sums per account and user, ordered by account then user.
    pub fn finish(self, tariff: &Tariff) -> Usage {
        let mut rows: Vec<UsageRow> = self.rows.into_values().collect();
        let mut total = self.total;
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
            start: self.start,
            end: self.end,
            rows,
            total,
        }
    }
}

/// The period's sums of `jobs`, added in one page (the tests').
#[cfg(test)]
pub(crate) fn usage(jobs: &[JobReport], start: i64, end: i64, tariff: &Tariff) -> Usage {
    let mut tally = Tally::new(start, end);
    jobs.iter().for_each(|j| tally.add(j));
    tally.finish(tariff)
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

    /// A job of `nodes` nodes whose nodes `kept` kept their figures (J each) in its
    /// SystemComment, with accounting's energy `accounting_j` (its extern step's, as with
    /// PrologFlags=Contain).
    fn kept_job(id: u32, user: &str, nodes: u32, kept: &[f64], accounting_j: u64) -> JobReport {
        let mut comment = String::new();
        for (k, j) in kept.iter().enumerate() {
            let node = crate::kept::NodeRecord {
                joules: *j,
                ..Default::default()
            };
            comment = crate::kept::merge(
                &comment,
                &format!("n{}", k + 1),
                &node,
                &crate::kept::Seen::default(),
            )
            .expect("a small record");
        }
        let row = JobRow {
            job_id: id,
            account: format!("acct_{user}"),
            user: user.into(),
            state: slurm_sys::job_states::JOB_COMPLETE,
            start: 1000,
            end: 4600,
            elapsed_s: 3600,
            alloc_nodes: nodes,
            tres_alloc: format!("1=4,3={accounting_j}"),
            system_comment: comment,
            steps: vec![crate::record::StepRow {
                step_id: crate::record::EXTERN_STEP,
                ..Default::default()
            }],
            ..JobRow::default()
        };
        let tariff = Tariff::new(Some(400.0), None, Some(0.2), Some("EUR".into()))
            .expect("valid in this test");
        job_report(&row, &tariff, 0, None)
    }

    /// An owner's rewrite of their job's energy (25.11+: `sacctmgr modify job ... set
    /// tres=energy=1`) bills nothing less: where what the job's nodes kept disagrees, usage
    /// bills that, and counts the job as changed in its row (text, JSON, CSV). A record of
    /// some nodes bills what those used, a lower bound (the job counts as incomplete too).
    /// Before, usage summed accounting's 1 J.
    #[test]
    fn a_rewritten_energy_is_billed_as_its_nodes_kept_and_counted() {
        let jobs = [
            // alice: rewritten to 1 J (2 MJ + 1.6 MJ kept), and an honest job
            kept_job(1, "alice", 2, &[2_000_000.0, 1_600_000.0], 1),
            kept_job(2, "alice", 2, &[2_000_000.0, 1_600_000.0], 3_600_000),
            // bob: 3 nodes, 2 kept: rewritten to 1 J, and an honest 2.7 MJ
            kept_job(3, "bob", 3, &[1_000_000.0, 800_000.0], 1),
            kept_job(4, "bob", 3, &[1_000_000.0, 800_000.0], 2_700_000),
        ];
        let tariff = Tariff::new(Some(400.0), None, Some(0.2), Some("EUR".into())).expect("valid");
        let u = usage(&jobs, 0, 10_000, &tariff);
        let each: Vec<_> = u
            .rows
            .iter()
            .map(|r| {
                (
                    r.user.as_str(),
                    r.energy_j,
                    r.jobs_tampered,
                    r.tampered_accounting_j,
                    r.jobs_incomplete,
                )
            })
            .collect();
        assert_eq!(
            each,
            [("alice", 7_200_000, 1, 1, 0), ("bob", 4_500_000, 1, 1, 1)]
        );
        assert_eq!(
            (u.total.jobs_tampered, u.total.tampered_accounting_j),
            (2, 2)
        );
        // cost and emissions follow the billed figure: alice's 2 kWh
        assert!((u.rows[0].cost.expect("priced") - 0.4).abs() < 1e-12);
        assert!((u.rows[0].emissions_g.expect("an intensity") - 800.0).abs() < 1e-9);
        let table = crate::output::usage_table(&u, &tariff);
        assert!(
            table.contains(
                "WARNING: accounting's energy of 2 job(s) was changed after they ended; each is \
                 billed above at what its nodes kept:"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "acct_bob         bob              1 job(s) changed, accounting says 1 J"
            ),
            "{table}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&crate::output::usage_json(&u, &tariff)).expect("JSON");
        assert_eq!(json["rows"][1]["jobs_tampered"], 1);
        assert_eq!(json["total"]["tampered_accounting_j"], 2);
        let csv = crate::output::usage_csv(&u, &tariff);
        let header: Vec<&str> = csv.lines().next().unwrap_or("").split(',').collect();
        let at = header
            .iter()
            .position(|c| *c == "jobs_tampered")
            .expect("a column");
        let alice: Vec<&str> = csv.lines().nth(1).unwrap_or("").split(',').collect();
        assert_eq!((alice[1], alice[at], alice[at + 1]), ("alice", "1", "1"));
        // nothing changed: no warning
        let honest = usage(&jobs[1..2], 0, 10_000, &tariff);
        assert!(!crate::output::usage_table(&honest, &tariff).contains("WARNING"));
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
