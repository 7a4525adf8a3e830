//! `senergy` with no subcommand: the jobs of a period, a line each, as sacct lists them
//! (the caller's since midnight unless told otherwise), in the columns `--format` picks
//! from `senergy job --csv`'s job line.

use clap::Args;

use super::{Clusters, Output, SiteArgs, TableJsonCsv, period, when};
use crate::Failure;
use crate::output::{DEFAULT_FORMAT, columns};
use crate::site::Tariff;

#[derive(Args)]
pub struct ListArgs {
    /// Jobs that ran from this time, in sacct's forms (see `senergy usage --help`)
    /// [default: midnight today, as sacct].
    #[arg(long, short = 'S', value_name = "TIME")]
    start: Option<String>,
    /// Jobs that ran until this time (exclusive), same forms [default: now].
    #[arg(long, short = 'E', value_name = "TIME")]
    end: Option<String>,
    /// These users' jobs (comma-separated names) [default: the caller's].
    #[arg(long, short = 'u', value_delimiter = ',', conflicts_with = "all_users")]
    users: Vec<String>,
    /// Every user's jobs (those the caller may see: slurmdbd's PrivateData).
    #[arg(long, short = 'a')]
    all_users: bool,
    /// Only these accounts (comma-separated).
    #[arg(long, short = 'A', value_delimiter = ',')]
    accounts: Vec<String>,
    /// The columns, comma-separated: any of `senergy job --csv`'s (docs/senergy.md)
    /// [default: id,name,user,state,start,elapsed_s,nodes,energy_j,avg_watts,emissions_g,
    /// cost,kept].
    #[arg(long, short = 'o', value_delimiter = ',', value_name = "COLUMNS")]
    format: Vec<String>,
    #[command(flatten)]
    clusters: Clusters,
    #[command(flatten)]
    output: TableJsonCsv,
    #[command(flatten)]
    site: SiteArgs,
}

/// Whose jobs the list shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Whose {
    /// The caller's.
    Caller,
    All,
    Users(Vec<String>),
}

/// What `senergy` with no subcommand lists, and how.
#[derive(Debug, PartialEq)]
pub struct ListPlan {
    /// `[start, end)`, unix seconds.
    pub period: (i64, i64),
    pub whose: Whose,
    pub accounts: Vec<String>,
    pub clusters: Vec<String>,
    /// The columns, each one of [`columns`].
    pub format: Vec<String>,
    pub output: Output,
    pub tariff: Tariff,
}

impl ListArgs {
    /// The period runs from midnight (local time) to `now` unless told otherwise; a column
    /// `--format` names that no job line has is refused, named.
    pub fn plan(&self, now: i64) -> Result<ListPlan, Failure> {
        let (tariff, _) = self.site.tariff()?;
        let period = period(self.start.as_deref(), self.end.as_deref(), now, |_| {
            when("midnight", now)
        })?;
        let known = columns();
        let format: Vec<String> = match self.format.is_empty() {
            true => DEFAULT_FORMAT.iter().map(|c| c.to_string()).collect(),
            false => self
                .format
                .iter()
                .map(|c| c.trim().to_lowercase())
                .collect(),
        };
        if let Some(unknown) = format.iter().find(|c| !known.contains(c)) {
            return Err(Failure::Input(format!(
                "--format {unknown}: no such column (the columns: {})",
                known.join(",")
            )));
        }
        let whose = match (self.all_users, self.users.is_empty()) {
            (true, _) => Whose::All,
            (false, true) => Whose::Caller,
            (false, false) => Whose::Users(self.users.clone()),
        };
        Ok(ListPlan {
            period,
            whose,
            accounts: self.accounts.clone(),
            clusters: self.clusters.names.clone(),
            format,
            output: self.output.output(),
            tariff,
        })
    }
}
