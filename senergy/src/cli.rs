//! The command line: each subcommand declares only the options it reads, and turns them
//! into its plan ([`JobPlan`], [`UsagePlan`], [`CheckPlan`]) before anything asks Slurm, so
//! that what an option changes can be seen (and tested) without a cluster. Options that
//! several subcommands share are one `#[command(flatten)]` struct each.

mod help;
mod list;

pub use list::{ListArgs, ListPlan, Whose};

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::Failure;
use crate::carbon::{Intensities, TariffError};
use crate::scopes::{Factor, Origin, Stamp};
use crate::site::{SiteFile, Tariff};

pub const DEFAULT_CONF: &str = "/etc/slurm/senergy.conf";

#[derive(Parser)]
#[command(
    name = "senergy",
    version,
    about = "Energy, emissions and cost of Slurm jobs, from Slurm's accounting",
    after_help = help::TOP
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// With no subcommand: the jobs of a period, a line each, as sacct lists them.
    #[command(flatten)]
    pub list: ListArgs,
}

#[derive(Subcommand)]
pub enum Command {
    /// A job's energy, power, nodes, data presence, emissions and cost, per step.
    #[command(after_help = help::JOB_EXAMPLES, after_long_help = help::job_long())]
    Job(JobArgs),
    /// Energy, emissions and cost per account and user of the jobs that ended in a period.
    #[command(after_help = help::USAGE_EXAMPLES, after_long_help = help::usage_long())]
    Usage(UsageArgs),
    /// Whether this node's energy plugin works (run on the node, as root).
    #[command(after_help = help::CHECK_EXAMPLES, after_long_help = help::check_long())]
    Check(CheckArgs),
    /// Slurm's MailProg: end-of-job mails get the job's summary, others pass unchanged
    /// (MailProg=/usr/bin/senergy: slurmctld's `-s SUBJECT USER` come here).
    Mail(MailArgs),
    /// The node's Epilog: keeps this node's figures of the job in its SystemComment, for
    /// `senergy job` to find whenever asked (run as root; always exits 0).
    Record(RecordArgs),
}

#[derive(Args)]
pub struct RecordArgs {
    /// The job (default: the Epilog's SLURM_JOB_ID).
    #[arg(value_name = "JOBID")]
    pub job: Option<u32>,
    /// The node whose ledgers are read (default: SLURMD_NODENAME, else this host's short
    /// name).
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// The node's figures as the Epilog read them (JSON), for the process of its own that
    /// writes them in the node's turn ([`crate::epilog`]): no ledger is read.
    #[arg(long, hide = true, value_name = "JSON", requires_all = ["job", "node", "since"])]
    pub entry: Option<String>,
    /// With --entry: when the node began counting the job (unix seconds).
    #[arg(long, hide = true, value_name = "UNIX", requires = "entry")]
    pub since: Option<f64>,
}

#[derive(Args)]
pub struct MailArgs {
    /// What slurmctld passes: `-s SUBJECT USER`, for the real mailer as they are.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

#[derive(Args)]
pub struct JobArgs {
    /// Job ids: 123, an array element 123_4, or an array job 123 (all its elements);
    /// a step as sacct names it (123.0, 123.batch, 123_4.1): the job with that step only.
    #[arg(required = true, value_name = "JOBID")]
    jobs: Vec<String>,
    /// Draw the job's power over time per node, its steps marked (from Prometheus),
    /// or without Prometheus its steps' and nodes' energy: FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    output: TableJsonCsv,
    /// A few lines for a terminal, an epilog or the job's end e-mail: energy, emissions
    /// by scope and cost, "not recorded" where accounting has no figure; an array or a
    /// heterogeneous job rolled up, its elements listed.
    #[arg(long, help_heading = "Output", conflicts_with_all = ["json", "csv", "plot"])]
    summary: bool,
    /// Wait up to SECONDS for the jobs' end and energy to reach accounting: an epilog or
    /// MailProg runs before slurmdbd has them. The figures then, whatever they are.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=600))]
    wait: Option<u64>,
    /// MailProg's summary ([`crate::mail`]): a wait takes one of N slots
    /// ([`crate::slots`]), and with none free the summary ends at once, saying so.
    #[arg(long, hide = true, value_name = "N", requires = "wait",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::slots::MAX_SLOTS)))]
    mail_slots: Option<u32>,
    /// MailProg's summary: a run of the job id that ended before this unix time is another
    /// job's (the id come round again), not reported. A job's own run may end well before
    /// its mail goes (slurmctld's mail queue): MailProg gives a day before the run began.
    #[arg(long, hide = true, value_name = "UNIX", requires = "wait")]
    ended_after: Option<i64>,
    #[command(flatten)]
    site: SiteArgs,
    /// Prometheus scraping the nodes' metrics (http://host:9090): emissions at each power
    /// sample's time, and power plots [default: the site file's prometheus_url].
    #[arg(long, value_name = "URL", help_heading = "Emissions and cost")]
    prometheus: Option<String>,
    #[command(flatten)]
    clusters: Clusters,
}

#[derive(Args)]
pub struct UsageArgs {
    // the help as an attribute, not a doc comment: rustdoc would read its brackets as links
    #[arg(
        long,
        short = 'S',
        help = "Start, as sacct takes it: YYYY-MM-DD[THH:MM[:SS]], MMDD[YY][-HH:MM[:SS]], \
                MM/DD[/YY][-HH:MM[:SS]], MM.DD[.YY][-HH:MM[:SS]], HH:MM[:SS][AM|PM] (local \
                time), today, tomorrow, midnight, noon, fika, teatime, now[{+|-}N[seconds|\
                minutes|hours|days|weeks]], RFC 3339 or unix seconds [default: 30 days \
                before the end]."
    )]
    start: Option<String>,
    /// End (exclusive), same forms [default: now].
    #[arg(long, short = 'E')]
    end: Option<String>,
    /// Only these accounts (comma-separated).
    #[arg(long, short = 'A', value_delimiter = ',')]
    accounts: Vec<String>,
    /// Only these users (comma-separated names).
    #[arg(long, short = 'u', value_delimiter = ',')]
    users: Vec<String>,
    #[command(flatten)]
    clusters: Clusters,
    #[command(flatten)]
    output: TableJsonCsv,
    #[command(flatten)]
    site: SiteArgs,
}

/// sacct's `-M`: the clusters whose accounting is read.
#[derive(Args)]
pub struct Clusters {
    /// These clusters of slurmdbd's (comma-separated), or `all` [default: this one,
    /// slurm.conf's ClusterName].
    #[arg(
        long = "clusters",
        short = 'M',
        value_delimiter = ',',
        value_name = "NAMES"
    )]
    pub names: Vec<String>,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The node, as slurm.conf names it [default: this host's short name].
    #[arg(long, value_name = "NODENAME")]
    node: Option<String>,
    /// Also set slurmd's figure beside an independent reader of the same hardware
    /// (RAPL perf events, the BMC, Redfish, pm_counters, nvidia-smi, amd-smi) over a
    /// window of SECONDS, 2 to 3600 [default: 30].
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "30")]
    compare: Option<f64>,
    /// JSON (schema_version 1; its fields: docs/senergy.md, "senergy check").
    #[arg(long)]
    json: bool,
    /// Check this acct_gather.conf instead of the node, before it is pushed to the nodes:
    /// every key known, every value as the plugins parse it, one node's values in a file
    /// for many; exits 6 on an error. Needs no Slurm and no root.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["node", "compare"])]
    conf: Option<PathBuf>,
    /// With --conf: the slurm.conf whose AcctGatherEnergyType names the plugins the file is
    /// for (and whose cgroup lines EnergyAttribution=shared needs).
    #[arg(long, value_name = "FILE", requires = "conf")]
    slurm_conf: Option<PathBuf>,
    /// With --conf: the plugins the file is for (rust_rapl,rust_gpu), where no
    /// --slurm-conf names them [default: those whose keys the file sets].
    #[arg(
        long,
        value_name = "PLUGINS",
        value_delimiter = ',',
        requires = "conf",
        conflicts_with = "slurm_conf"
    )]
    plugins: Vec<String>,
}

/// The reports' forms: a table for people, JSON or CSV for programs.
#[derive(Args)]
#[command(next_help_heading = "Output")]
pub(crate) struct TableJsonCsv {
    /// JSON (schema_version 1; its fields: docs/senergy.md, "JSON schema").
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV with a header line: the JSON's fields under the same names.
    #[arg(long)]
    csv: bool,
}

/// The site file and the flags over it: the figures of emissions and cost.
#[derive(Args)]
#[command(next_help_heading = "Emissions and cost")]
pub(crate) struct SiteArgs {
    /// Site file, TOML (docs/senergy.md, "Emissions and cost") [default: $SENERGY_CONF,
    /// else /etc/slurm/senergy.conf if it exists].
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Carbon intensity in gCO2e/kWh.
    #[arg(long, value_name = "G_PER_KWH")]
    carbon_intensity: Option<f64>,
    /// Intensity series: time,g_co2e_per_kwh, or an Electricity Maps or eCO2mix export.
    #[arg(long, value_name = "PATH")]
    carbon_csv: Option<PathBuf>,
    /// Price per kWh.
    #[arg(long, value_name = "PER_KWH")]
    price: Option<f64>,
    /// Currency of the price (e.g. EUR).
    #[arg(long)]
    currency: Option<String>,
    /// Market-based Scope 2 intensity in gCO2e/kWh: the electricity contract's (0 for a
    /// certified renewable supply).
    #[arg(long, value_name = "G_PER_KWH")]
    market_intensity: Option<f64>,
    /// Market-based intensity series, in the forms of --carbon-csv.
    #[arg(long, value_name = "PATH")]
    market_csv: Option<PathBuf>,
    /// The facility's PUE (1 to 10): Scope 2 is on the IT energy times it.
    #[arg(long, value_name = "RATIO")]
    pue: Option<f64>,
    /// PUE series: time,pue (unix seconds or RFC 3339).
    #[arg(long, value_name = "PATH")]
    pue_csv: Option<PathBuf>,
}

pub use crate::output::Output;

/// A job as the command line names it: `(job, array task, step)`.
pub type Wanted = (u32, Option<u32>, Option<String>);

/// What `senergy job` reports, and how.
#[derive(Debug, PartialEq)]
pub struct JobPlan {
    /// The ids as given, for the message about those not found.
    pub given: Vec<String>,
    pub named: Vec<Wanted>,
    pub plot: Option<PathBuf>,
    pub output: Output,
    pub tariff: Tariff,
    pub prometheus: Option<String>,
    /// How long to wait for the jobs' end records ([`JobArgs::wait`]).
    pub wait: Option<Duration>,
    /// MailProg's bound on summaries waiting at once ([`crate::slots`]); `None`: no bound.
    pub mail_slots: Option<u32>,
    /// MailProg's bound on the job id's runs ([`JobArgs::ended_after`]); `None`: accounting's
    /// latest.
    pub ended_after: Option<i64>,
    /// [`Clusters`]: none, this one.
    pub clusters: Vec<String>,
}

/// What `senergy usage` sums, and how.
#[derive(Debug, PartialEq)]
pub struct UsagePlan {
    /// `[start, end)`, unix seconds.
    pub period: (i64, i64),
    pub accounts: Vec<String>,
    pub users: Vec<String>,
    /// [`Clusters`]: none, this one.
    pub clusters: Vec<String>,
    pub output: Output,
    pub tariff: Tariff,
}

/// What `senergy check` does.
#[derive(Debug, PartialEq)]
pub struct CheckPlan {
    pub node: Option<String>,
    pub compare: Option<Duration>,
    pub json: bool,
    /// `--conf`: a file to check instead of the node.
    pub conf: Option<crate::check::conf::ConfPlan>,
}

impl JobArgs {
    /// The site file first (exit 4 on a bad one), then the ids and the plot's file name.
    pub fn plan(&self) -> Result<JobPlan, Failure> {
        let (tariff, site_prometheus) = self.site.tariff()?;
        let named = self
            .jobs
            .iter()
            .map(|j| job_id(j))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(path) = &self.plot {
            crate::plot::check(path).map_err(|e| Failure::Input(e.to_string()))?;
        }
        Ok(JobPlan {
            given: self.jobs.clone(),
            named,
            plot: self.plot.clone(),
            output: if self.summary {
                Output::Summary
            } else {
                self.output.output()
            },
            tariff,
            prometheus: self.prometheus.clone().or(site_prometheus),
            wait: self.wait.map(Duration::from_secs),
            mail_slots: self.mail_slots,
            ended_after: self.ended_after,
            clusters: self.clusters.names.clone(),
        })
    }
}

impl UsageArgs {
    /// The period ends at `now` and spans 30 days unless the command line says otherwise.
    pub fn plan(&self, now: i64) -> Result<UsagePlan, Failure> {
        // usage asks no Prometheus: the site file's prometheus_url is job's
        let (tariff, _) = self.site.tariff()?;
        let period = period(self.start.as_deref(), self.end.as_deref(), now, |end| {
            Ok(end - 30 * 86400)
        })?;
        Ok(UsagePlan {
            period,
            accounts: self.accounts.clone(),
            users: self.users.clone(),
            clusters: self.clusters.names.clone(),
            output: self.output.output(),
            tariff,
        })
    }
}

impl CheckArgs {
    pub fn plan(&self) -> Result<CheckPlan, Failure> {
        let compare = self
            .compare
            .map(|s| {
                (s.is_finite() && (2.0..=3600.0).contains(&s))
                    .then(|| Duration::from_secs_f64(s))
                    .ok_or_else(|| {
                        Failure::Input(format!("--compare {s}: a window of 2 to 3600 seconds"))
                    })
            })
            .transpose()?;
        let plugins = self
            .plugins
            .iter()
            .map(|p| {
                let kind = p.trim().trim_start_matches("acct_gather_energy/");
                slurm_energy_logic::family_plugins()
                    .contains(&kind)
                    .then(|| kind.to_string())
                    .ok_or_else(|| {
                        Failure::Input(format!(
                            "--plugins {p}: not a plugin of this family ({})",
                            slurm_energy_logic::family_plugins().join(", ")
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CheckPlan {
            node: self.node.clone(),
            compare,
            json: self.json,
            conf: self.conf.clone().map(|file| crate::check::conf::ConfPlan {
                file,
                slurm_conf: self.slurm_conf.clone(),
                plugins,
                json: self.json,
            }),
        })
    }
}

impl TableJsonCsv {
    pub(crate) fn output(&self) -> Output {
        match (self.json, self.csv) {
            (true, _) => Output::Json,
            (false, true) => Output::Csv,
            (false, false) => Output::Table,
        }
    }
}

impl SiteArgs {
    /// Flags over the site file; the default site file may be absent, a named one not.
    /// Also the site file's Prometheus, if it names one.
    pub(crate) fn tariff(&self) -> Result<(Tariff, Option<String>), TariffError> {
        let named = self
            .config
            .clone()
            .or_else(|| std::env::var_os("SENERGY_CONF").map(PathBuf::from))
            .or_else(|| Some(PathBuf::from(DEFAULT_CONF)).filter(|p| p.exists()));
        let (site_file, site) = match named {
            Some(path) => {
                let site = SiteFile::parse(&path, &read(&path)?)?;
                (Some(path), site)
            }
            None => (None, SiteFile::default()),
        };
        let Factor {
            value,
            series,
            origin,
        } = factor(
            (
                self.carbon_intensity,
                "--carbon-intensity",
                site.carbon_intensity,
            ),
            (&self.carbon_csv, "--carbon-csv", site.carbon_intensity_csv),
        )?;
        let mut tariff = Tariff::new(
            value,
            series,
            self.price.or(site.price_per_kwh),
            self.currency.clone().or(site.currency),
        )?;
        tariff.location.origin = origin;
        let market = factor(
            (
                self.market_intensity,
                "--market-intensity",
                site.market_intensity,
            ),
            (&self.market_csv, "--market-csv", site.market_intensity_csv),
        )?;
        let pue = factor(
            (self.pue, "--pue", site.pue),
            (&self.pue_csv, "--pue-csv", site.pue_csv),
        )?;
        let classes_in = site_file.clone().unwrap_or_default();
        let mut tariff = tariff
            .with_market(market)?
            .with_pue(pue)?
            .with_classes(&classes_in, site.node_class)?;
        tariff.stamp = Stamp {
            site_file,
            version: site.version,
        };
        Ok((tariff, site.prometheus_url))
    }
}

/// Which of a flag and a site file's key gives a figure (the flag first), and its origin.
fn pick<T>(
    flag: Option<T>,
    name: &'static str,
    site: Option<T>,
) -> (Option<T>, Option<&'static str>) {
    match (flag, site) {
        (Some(v), _) => (Some(v), Some(name)),
        (None, Some(v)) => (Some(v), Some("site file")),
        (None, None) => (None, None),
    }
}

/// A factor from its flag or site key, and its series from its flag or site key (a series
/// may be Latin-1, as RTE's own downloads are: read as bytes).
fn factor(
    (value, value_flag, site_value): (Option<f64>, &'static str, Option<f64>),
    (path, path_flag, site_path): (&Option<PathBuf>, &'static str, Option<PathBuf>),
) -> Result<Factor, TariffError> {
    let (value, value_from) = pick(value, value_flag, site_value);
    let (series_path, series_from) = pick(path.clone(), path_flag, site_path);
    let series = match &series_path {
        Some(path) => Some(Intensities::parse(path, read_bytes(path)?)?),
        None => None,
    };
    Ok(Factor {
        value,
        series,
        origin: Origin {
            value_from,
            series_path,
            series_from,
        },
    })
}

fn read(path: &Path) -> Result<String, TariffError> {
    std::fs::read_to_string(path).map_err(|source| TariffError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, TariffError> {
    std::fs::read(path).map_err(|source| TariffError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// `123`, `123_4`, or a step as sacct names it: `123.0`, `123.batch`, `123_4.extern`.
fn job_id(text: &str) -> Result<Wanted, Failure> {
    let bad = || {
        Failure::Input(format!(
            "{text:?} is not a job id (123, an array element 123_4, or a step 123.0, 123.batch)"
        ))
    };
    let (job, step) = match text.split_once('.') {
        Some((job, step)) => {
            let known =
                matches!(step, "batch" | "extern" | "interactive") || step.parse::<u32>().is_ok();
            if !known {
                return Err(bad());
            }
            (job, Some(step.to_string()))
        }
        None => (text, None),
    };
    match job.split_once('_') {
        Some((job, task)) => Ok((
            job.parse().map_err(|_| bad())?,
            Some(task.parse().map_err(|_| bad())?),
            step,
        )),
        None => Ok((job.parse().map_err(|_| bad())?, None, step)),
    }
}

mod when;

use when::when;

/// `[start, end)` from `--start` and `--end` in sacct's forms ([`when()`]): the end `now`
/// unless given, the start `default_start(end)` unless given; an empty period refused.
fn period(
    start: Option<&str>,
    end: Option<&str>,
    now: i64,
    default_start: impl FnOnce(i64) -> Result<i64, Failure>,
) -> Result<(i64, i64), Failure> {
    let end = end.map(|t| when(t, now)).transpose()?.unwrap_or(now + 1);
    let start = match start {
        Some(t) => when(t, now)?,
        None => default_start(end)?,
    };
    if start >= end {
        return Err(Failure::Input(format!(
            "the period is empty: --start {} is not before --end {}",
            crate::output::local_time(start),
            crate::output::local_time(end)
        )));
    }
    Ok((start, end))
}

#[cfg(test)]
mod tests;
