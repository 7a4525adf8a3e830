//! The CSV form of the reports: one column per field of the JSON, under the same name, every
//! text cell neutralised against spreadsheet formulas. A job's line has the columns of
//! [`COLUMNS`]; a usage line, the fields of [`UsageLine`].

use serde::Serialize;

use super::columns::{COLUMNS, Line, pairs, text};
use super::factors_text;
use crate::report::JobReport;
use crate::site::Tariff;
use crate::usage::{Usage, UsageRow};

/// A text cell of a usage line, written through [`text`]. [`UsageLine`] holds its text only
/// as `Text`, so no text column can miss the neutralisation.
struct Text<T>(T);

impl<T: AsRef<str>> Serialize for Text<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&text(self.0.as_ref()))
    }
}

/// A figure with `N` decimals (CSV readers get one precision per column, where JSON gives
/// the shortest exact form); `None` is an empty cell.
struct Fixed<const N: usize>(Option<f64>);

impl<const N: usize> Serialize for Fixed<N> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(v) => s.serialize_str(&format!("{v:.N$}")),
            None => s.serialize_none(),
        }
    }
}

/// Usage lines under a header of their fields' names, as `csv` serialises a struct.
fn csv_text<L: Serialize>(lines: impl IntoIterator<Item = L>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    for line in lines {
        // a line of strings and numbers written to memory cannot fail
        let _ = w.serialize(line);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// One line per job (`step` empty) and one per step, a cell per column ([`COLUMNS`]): the
/// fields of the JSON's job and step under their names.
pub fn jobs_csv(jobs: &[JobReport], tariff: &Tariff) -> String {
    let factors = factors_text(tariff);
    let mut w = csv::Writer::from_writer(Vec::new());
    // a line of strings written to memory cannot fail
    let _ = w.write_record(COLUMNS.iter().map(|c| c.name));
    for job in jobs {
        for line in Line::with_steps(job, &tariff.currency, &factors) {
            let _ = w.write_record(COLUMNS.iter().map(|c| (c.cell)(&line).into_string()));
        }
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// A line of `senergy usage --csv`: a [`UsageRow`]'s fields under their names, and the
/// currency.
#[derive(Serialize)]
struct UsageLine<'a> {
    account: Text<&'a str>,
    user: Text<&'a str>,
    jobs: u64,
    jobs_incomplete: u64,
    energy_j: u64,
    kwh: Fixed<9>,
    emissions_g: Fixed<6>,
    cost: Fixed<6>,
    currency: Text<&'a str>,
    facility_energy_j: Fixed<3>,
    scope2_location_g: Fixed<6>,
    scope2_market_g: Fixed<6>,
    scope3_embodied_g: Fixed<6>,
    node_hours: Fixed<6>,
    node_class: Text<String>,
    factors: Text<String>,
    // added after them: idle-held energy as the jobs' nodes kept it
    idle_held: Text<String>,
    idle_held_share_pct: Fixed<3>,
    jobs_idle_held_recorded: u64,
    idle_held_scope2_location_g: Fixed<6>,
    idle_held_scope2_market_g: Fixed<6>,
    // added after them: the jobs whose energy in accounting was changed after their end
    jobs_tampered: u64,
    tampered_accounting_j: u64,
}

impl<'a> UsageLine<'a> {
    /// `account` and `user` as given: the total's line names them `(all)`.
    fn new(
        r: &UsageRow,
        account: &'a str,
        user: &'a str,
        currency: &'a str,
        factors: &str,
    ) -> Self {
        UsageLine {
            account: Text(account),
            user: Text(user),
            jobs: r.jobs,
            jobs_incomplete: r.jobs_incomplete,
            energy_j: r.energy_j,
            kwh: Fixed(Some(r.kwh)),
            emissions_g: Fixed(r.emissions_g),
            cost: Fixed(r.cost),
            currency: Text(currency),
            facility_energy_j: Fixed(r.emissions.facility_energy_j),
            scope2_location_g: Fixed(r.emissions.scope2_location_g),
            scope2_market_g: Fixed(r.emissions.scope2_market_g),
            scope3_embodied_g: Fixed(r.emissions.scope3_embodied_g),
            node_hours: Fixed(r.emissions.node_hours),
            node_class: Text(r.emissions.node_class.clone().unwrap_or_default()),
            factors: Text(factors.to_string()),
            idle_held: Text(pairs(Some(&r.idle_held_j).filter(|m| !m.is_empty()))),
            idle_held_share_pct: Fixed(r.idle_held_share_pct),
            jobs_idle_held_recorded: r.jobs_idle_held_recorded,
            idle_held_scope2_location_g: Fixed(r.idle_held_scope2_location_g),
            idle_held_scope2_market_g: Fixed(r.idle_held_scope2_market_g),
            jobs_tampered: r.jobs_tampered,
            tampered_accounting_j: r.tampered_accounting_j,
        }
    }
}

pub fn usage_csv(usage: &Usage, tariff: &Tariff) -> String {
    let currency = tariff.currency.as_str();
    let factors = factors_text(tariff);
    csv_text(
        usage
            .rows
            .iter()
            .map(|r| UsageLine::new(r, &r.account, &r.user, currency, &factors))
            .chain([UsageLine::new(
                &usage.total,
                "(all)",
                "(all)",
                currency,
                &factors,
            )]),
    )
}
