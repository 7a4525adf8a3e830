//! senergy: the energy of Slurm jobs from Slurm's accounting, with emissions and cost.

mod carbon;
mod check;
mod emissions;
mod ffi;
mod measured;
mod output;
mod plot;
mod presence;
mod prometheus;
mod record;
mod report;
mod tres;
mod usage;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use carbon::{Intensities, SiteFile, Tariff, TariffError};
use ffi::{Accounting, JobQuery};
use prometheus::{NodeSamples, Prometheus};

/// Exit statuses (documented in --help).
mod exit {
    pub const USAGE: u8 = 2;
    pub const NOT_FOUND: u8 = 3;
    pub const CONFIG: u8 = 4;
    pub const ACCOUNTING: u8 = 5;
    pub const UNHEALTHY: u8 = 6;
}

const DEFAULT_CONF: &str = "/etc/slurm/senergy.conf";

const AFTER_HELP: &str = "\
ENERGY
    Figures come from Slurm's accounting (slurmdbd), as the calling user: slurmdbd's
    PrivateData decides which jobs you see. A job's energy is what sacct shows as its
    ConsumedEnergy; per step, the energy TRES of TRESUsageInTot/Max/Min and their nodes
    name the nodes that used the most and the least (for 3 nodes or fewer, every node).
    A value Slurm marks as unknown is never shown as a number.

DATA PRESENCE
    complete  every step and node reported energy
    partial   some did not (or the job is still running): the figure is a lower bound
    missing   no energy recorded (no energy plugin, or every reading unavailable)

EMISSIONS AND COST
    emissions_g = kWh x carbon intensity (gCO2e/kWh). With an intensity series each piece
    of the job's energy takes the intensity of its time: with --prometheus, each increase
    of the job's energy counter on each node between two samples (the metrics slurmd
    writes with EnergyMetricsFile), scaled to accounting's total; else each srun step's
    energy over its run and the rest over the time no step ran; else evenly over the run.
    The JSON's emissions_method and the text say which. Each step's emissions_g is its
    energy over its run. A series is a CSV at any interval (5 minutes to an hour): time,g_co2e_per_kwh
    (unix seconds or RFC 3339), or an Electricity Maps export (its direct intensity) or an
    RTE eCO2mix export, from ODRE (eco2mix-national-tr.csv) or from rte-france.com (the
    .xls in eCO2mix_RTE_*.zip: Latin-1 text, Paris time), as downloaded. A value holds
    for the series' step; a time no value covers takes the static intensity.
    cost = kWh x price per kWh. Flags override the site file (default
    /etc/slurm/senergy.conf, or SENERGY_CONF, or --config), which is TOML:
        carbon_intensity = 350                       # gCO2e/kWh
        carbon_intensity_csv = \"/etc/slurm/grid.csv\" # a series, as above
        price_per_kwh = 0.25
        currency = \"EUR\"
        prometheus_url = \"http://prometheus:9090\"   # as --prometheus

PLOTS
    senergy job J --plot FILE.svg (or .png): with Prometheus, the job's power over time on
    each node (each interval between two samples of its energy counter), its steps shaded
    and named; without, its steps' and nodes' energy from accounting, as bars. PNG needs a
    TrueType font (fonts-dejavu-core, or SENERGY_FONT=path.ttf).

EXIT STATUS
    0  success
    2  bad command line
    3  a requested job is unknown or not visible to you (the others are reported)
    4  bad site file, intensity series or figure
    5  Slurm's configuration cannot be loaded, slurmdbd is unreachable, or the query failed
    6  check: something on the node keeps its energy from being accounted (a FAIL line)

CHECK
    senergy check, run on a compute node as root (it reads slurmd's root-only energy
    ledger), says whether the node's energy plugin works: the plugin AcctGatherEnergyType
    names and the Slurm release its file was built for (against slurmd's), whether slurmd
    runs for the node, what the plugin reads, how fresh its last reading is (slurmd takes
    one every second: older than 10 s is stale), the node's watts, Slurm's job cgroups
    where EnergyAttribution=shared, and the plugin's errors in slurmd's log since slurmd
    started. Each line is ok, warn or FAIL; any FAIL exits 6.
";

#[derive(Parser)]
#[command(
    name = "senergy",
    version,
    about = "Energy, emissions and cost of Slurm jobs, from Slurm's accounting",
    after_help = AFTER_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    format: Format,
    #[command(flatten)]
    tariff: TariffArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Per job and step: energy, power, min/max node, data presence, emissions, cost.
    Job {
        /// Job ids: 123, an array element 123_4, or an array job 123 (all its elements);
        /// a step as sacct names it (123.0, 123.batch, 123_4.1): the job with that step only.
        #[arg(required = true, value_name = "JOBID")]
        jobs: Vec<String>,
        /// Draw the job's power over time per node, its steps marked (from Prometheus),
        /// or without Prometheus its steps' and nodes' energy: FILE.svg or FILE.png.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
    /// Whether this node's energy plugin works: plugin, release, slurmd, source, ledger,
    /// power, cgroups, slurmd's log (run on the node, as root).
    Check {
        /// The node, as slurm.conf names it [default: this host's short name].
        #[arg(long, value_name = "NODENAME")]
        node: Option<String>,
        /// Also set slurmd's figure beside an independent reader of the same hardware
        /// (RAPL perf events, the BMC, Redfish, pm_counters, nvidia-smi, amd-smi) over a
        /// window of SECONDS [default: 30].
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "30")]
        compare: Option<f64>,
    },
    /// Energy, emissions and cost per account and user of the jobs that ended in a period.
    Usage {
        /// Start: YYYY-MM-DD[THH:MM[:SS]] (local time), RFC 3339 or unix seconds [default: 30 days before the end].
        #[arg(long, short = 'S')]
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
    },
}

/// `--json` and `--csv` exclude each other, wherever they are given (checked in `run`:
/// clap checks a group of global flags only where they come before the subcommand).
#[derive(Args)]
struct Format {
    /// JSON (schema_version 1, documented in the README).
    #[arg(long, global = true)]
    json: bool,
    /// CSV with a header line.
    #[arg(long, global = true)]
    csv: bool,
}

#[derive(Args)]
struct TariffArgs {
    /// Site file [env: SENERGY_CONF] [default: /etc/slurm/senergy.conf if it exists].
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Carbon intensity in gCO2e/kWh.
    #[arg(long, global = true, value_name = "G_PER_KWH")]
    carbon_intensity: Option<f64>,
    /// Intensity series: time,g_co2e_per_kwh, or an Electricity Maps or eCO2mix export.
    #[arg(long, global = true, value_name = "PATH")]
    carbon_csv: Option<PathBuf>,
    /// Price per kWh.
    #[arg(long, global = true, value_name = "PER_KWH")]
    price: Option<f64>,
    /// Currency of the price (e.g. EUR).
    #[arg(long, global = true)]
    currency: Option<String>,
    /// Prometheus scraping the nodes' metrics (http://host:9090): emissions per power
    /// sample, and power plots.
    #[arg(long, global = true, value_name = "URL")]
    prometheus: Option<String>,
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Tariff(#[from] TariffError),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Accounting(#[from] ffi::AccountingError),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Tariff(_) => exit::CONFIG,
            Failure::Input(_) => exit::USAGE,
            Failure::Accounting(_) => exit::ACCOUNTING,
        }
    }
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

/// Flags over the site file; the default site file may be absent, a named one not. Also
/// the Prometheus to ask, if any.
fn tariff(args: &TariffArgs) -> Result<(Tariff, Option<String>), TariffError> {
    let named = args
        .config
        .clone()
        .or_else(|| std::env::var_os("SENERGY_CONF").map(PathBuf::from));
    let site = match named {
        Some(path) => SiteFile::parse(&path, &read(&path)?)?,
        None if Path::new(DEFAULT_CONF).exists() => {
            SiteFile::parse(Path::new(DEFAULT_CONF), &read(Path::new(DEFAULT_CONF))?)?
        }
        None => SiteFile::default(),
    };
    // a series may be Latin-1 (RTE's own downloads): read as bytes
    let series = match args.carbon_csv.clone().or(site.carbon_intensity_csv) {
        Some(path) => Some(Intensities::parse(&path, read_bytes(&path)?)?),
        None => None,
    };
    let prometheus = args.prometheus.clone().or(site.prometheus_url);
    let tariff = Tariff::new(
        args.carbon_intensity.or(site.carbon_intensity),
        series,
        args.price.or(site.price_per_kwh),
        args.currency.clone().or(site.currency),
    )?;
    Ok((tariff, prometheus))
}

/// A job as the command line names it: `(job, array task, step)`.
type Wanted = (u32, Option<u32>, Option<String>);

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

/// Local `YYYY-MM-DD[THH:MM[:SS]]`, RFC 3339 or unix seconds.
fn when(text: &str) -> Result<i64, Failure> {
    use chrono::{Local, NaiveDate, NaiveDateTime, TimeZone};
    if let Some(t) = carbon::parse_time(text) {
        return Ok(t);
    }
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M"))
        .or_else(|_| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d").map(|d| d.and_time(Default::default()))
        });
    naive
        .ok()
        .and_then(|n| Local.from_local_datetime(&n).earliest())
        .map(|t| t.timestamp())
        .ok_or_else(|| {
            Failure::Input(format!(
                "{text:?} is not a time (YYYY-MM-DD[THH:MM[:SS]], RFC 3339 or unix seconds)"
            ))
        })
}

/// Where every id naming a job names a step of it (`123.0`), its report keeps those
/// steps only.
fn only_named_steps(reports: &mut [report::JobReport], rows: &[record::JobRow], named: &[Wanted]) {
    for (report, row) in reports.iter_mut().zip(rows) {
        let names_it = |(job, task, _): &&Wanted| match *task {
            Some(task) => row.array == Some((*job, task)),
            None => row.job_id == *job || row.array.is_some_and(|(array, _)| array == *job),
        };
        let steps: Option<Vec<&str>> = named
            .iter()
            .filter(names_it)
            .map(|(_, _, step)| step.as_deref())
            .collect();
        if let Some(steps) = steps.filter(|s| !s.is_empty()) {
            report.steps.retain(|s| steps.contains(&s.step.as_str()));
        }
    }
}

fn uid_of(user: &str) -> Result<u32, Failure> {
    match nix::unistd::User::from_name(user) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        _ => user
            .parse()
            .map_err(|_| Failure::Input(format!("no user {user:?} on this host"))),
    }
}

/// Each report says what its figure measured and how ([`measured`]): from today's
/// slurm.conf and acct_gather.conf, and the other jobs accounting shows on its nodes while
/// it ran (where they cannot be asked, whether it was alone is unknown).
fn say_what_was_measured(
    db: &Accounting,
    reports: &mut [report::JobReport],
    rows: &[record::JobRow],
    now: i64,
) {
    let settings = ffi::slurm_settings();
    let acct_gather = Path::new(&settings.slurm_conf)
        .parent()
        .map(|dir| dir.join("acct_gather.conf"))
        .and_then(|path| std::fs::read_to_string(path).ok());
    let setup = measured::Setup::new(&settings.energy_types, acct_gather.as_deref());
    let started: Vec<&record::JobRow> = rows.iter().filter(|r| r.start > 0).collect();
    let window = started.iter().map(|r| r.start).min().map(|first| {
        let last = started
            .iter()
            .map(|r| if r.end > 0 { r.end } else { now })
            .max()
            .unwrap_or(now);
        (first, last + 1)
    });
    let others = window.and_then(|w| {
        db.jobs(&JobQuery {
            window: Some(w),
            ..JobQuery::default()
        })
        .ok()
    });
    for (report, row) in reports.iter_mut().zip(rows) {
        let alone = match &others {
            Some(others) => measured::alone(row, others, now),
            None => measured::Alone::Unknown,
        };
        report.measured(setup.source(), setup.method(&alone));
    }
}

/// `senergy check`: the node's verdict, in text or JSON; exits 6 on any failure.
fn check_node(format: &Format, node: Option<String>, compare: Option<f64>) -> Result<u8, Failure> {
    if format.csv {
        return Err(Failure::Input("check has no CSV form: use --json".into()));
    }
    let window = compare
        .map(|s| {
            (s.is_finite() && (2.0..=3600.0).contains(&s))
                .then(|| std::time::Duration::from_secs_f64(s))
                .ok_or_else(|| {
                    Failure::Input(format!("--compare {s}: a window of 2 to 3600 seconds"))
                })
        })
        .transpose()?;
    let settings = ffi::slurm_settings();
    let facts = check::node::gather(&settings, node);
    let findings = check::judge(&facts);
    let compared = window.map(|w| check::node::compare(&settings, &facts, w));
    if format.json {
        let mut value = check::json(&facts, &findings);
        if let Some(c) = &compared {
            value["compare"] = check::compare::json(c);
        }
        println!("{value:#}");
    } else {
        print!("{}", check::text(&facts, &findings));
        if let Some(c) = &compared {
            print!("{}", check::compare::text(c));
        }
    }
    let agrees = compared
        .as_ref()
        .is_none_or(check::compare::Comparison::agrees);
    Ok(if check::healthy(&findings) && agrees {
        0
    } else {
        exit::UNHEALTHY
    })
}

fn run(cli: Cli) -> Result<u8, Failure> {
    if cli.format.json && cli.format.csv {
        return Err(Failure::Input(
            "--json and --csv exclude each other: give one".into(),
        ));
    }
    // the site file, read where a report needs it
    let site = || -> Result<(Tariff, Option<Prometheus>), Failure> {
        let (tariff, prometheus) = tariff(&cli.tariff)?;
        let prometheus = prometheus
            .as_deref()
            .map(Prometheus::new)
            .transpose()
            .map_err(|e| Failure::Input(e.to_string()))?;
        Ok((tariff, prometheus))
    };
    let now = chrono::Utc::now().timestamp();
    let print = |table: String, json: String, csv: String| {
        let text = if cli.format.json {
            json
        } else if cli.format.csv {
            csv
        } else {
            table
        };
        print!("{text}");
    };
    match &cli.command {
        // the node's health owes nothing to the site file
        Command::Check { node, compare } => check_node(&cli.format, node.clone(), *compare),
        Command::Job { jobs, plot } => {
            let (tariff, prometheus) = site()?;
            let named = jobs
                .iter()
                .map(|j| job_id(j))
                .collect::<Result<Vec<_>, _>>()?;
            let wanted: Vec<(u32, Option<u32>)> =
                named.iter().map(|(job, task, _)| (*job, *task)).collect();
            if let Some(path) = plot {
                plot::check(path).map_err(|e| Failure::Input(e.to_string()))?;
            }
            let db = Accounting::open()?;
            let rows = db.jobs(&JobQuery {
                jobs: wanted.clone(),
                ..JobQuery::default()
            })?;
            if plot.is_some() && rows.len() > 1 {
                return Err(Failure::Input(format!(
                    "--plot draws one job: {} are selected (name one job, or one array element)",
                    rows.len()
                )));
            }
            // each job's energy counter per node, where Prometheus has it
            let samples: Vec<Option<Vec<NodeSamples>>> = rows
                .iter()
                .map(|r| {
                    let prom = prometheus.as_ref().filter(|_| r.start > 0)?;
                    let end = (r.end > 0).then_some(r.end);
                    match prom.job_counters(r.job_id, r.start, end, now) {
                        Ok(found) if !found.is_empty() => Some(found),
                        Ok(_) => {
                            eprintln!(
                                "senergy: job {}: Prometheus has no samples of its energy",
                                r.job_id
                            );
                            None
                        }
                        Err(e) => {
                            eprintln!("senergy: {e}");
                            None
                        }
                    }
                })
                .collect();
            let mut reports: Vec<_> = rows
                .iter()
                .zip(&samples)
                .map(|(r, s)| {
                    let points: Option<Vec<Vec<(f64, f64)>>> = s
                        .as_ref()
                        .map(|nodes| nodes.iter().map(|n| n.points.clone()).collect());
                    report::job_report(r, &tariff, now, points.as_deref())
                })
                .collect();
            only_named_steps(&mut reports, &rows, &named);
            say_what_was_measured(&db, &mut reports, &rows, now);
            if let (Some(path), Some(row), Some(report)) = (plot, rows.first(), reports.first()) {
                let drawn = match samples.first().and_then(Option::as_ref) {
                    Some(series) => plot::power(path, report, row, series, now),
                    None => plot::energy_bars(path, report),
                };
                drawn.map_err(|e| Failure::Input(e.to_string()))?;
            }
            let found: BTreeSet<(u32, Option<u32>)> = rows
                .iter()
                .flat_map(|r| {
                    let mut ids = vec![(r.job_id, None)];
                    if let Some((array, task)) = r.array {
                        ids.extend([(array, None), (array, Some(task))]);
                    }
                    ids
                })
                .collect();
            let missing: Vec<&String> = jobs
                .iter()
                .zip(&wanted)
                .filter(|(_, id)| !found.contains(id))
                .map(|(text, _)| text)
                .collect();
            print(
                output::jobs_table(&reports, &tariff),
                output::jobs_json(&reports, &tariff),
                output::jobs_csv(&reports, &tariff),
            );
            for job in &missing {
                eprintln!("senergy: job {job}: unknown, or not visible to you");
            }
            Ok(if missing.is_empty() {
                0
            } else {
                exit::NOT_FOUND
            })
        }
        Command::Usage {
            start,
            end,
            accounts,
            users,
        } => {
            let (tariff, _) = site()?;
            let end = end.as_deref().map(when).transpose()?.unwrap_or(now + 1);
            let start = start
                .as_deref()
                .map(when)
                .transpose()?
                .unwrap_or(end - 30 * 86400);
            if start >= end {
                return Err(Failure::Input(format!(
                    "the period is empty: --start {} is not before --end {}",
                    output::local_time(start),
                    output::local_time(end)
                )));
            }
            let uids = users
                .iter()
                .map(|u| uid_of(u))
                .collect::<Result<Vec<_>, _>>()?;
            let db = Accounting::open()?;
            let rows = db.jobs(&JobQuery {
                accounts: accounts.clone(),
                uids,
                window: Some((start, end)),
                ..JobQuery::default()
            })?;
            let reports: Vec<_> = rows
                .iter()
                .map(|r| report::job_report(r, &tariff, now, None))
                .collect();
            let has = (
                tariff.intensity.is_some() || tariff.series.is_some(),
                tariff.price_per_kwh.is_some(),
            );
            let usage = usage::usage(&reports, start, end, has);
            print(
                output::usage_table(&usage, &tariff),
                output::usage_json(&usage, &tariff),
                output::usage_csv(&usage, &tariff),
            );
            Ok(0)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("senergy: {e}");
            ExitCode::from(e.code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids() {
        assert_eq!(job_id("123").expect("valid"), (123, None, None));
        assert_eq!(job_id("123_4").expect("valid"), (123, Some(4), None));
        assert_eq!(
            job_id("123.0").expect("valid"),
            (123, None, Some("0".into()))
        );
        assert_eq!(
            job_id("123_4.batch").expect("valid"),
            (123, Some(4), Some("batch".into()))
        );
        for bad in ["", "12a", "1_", "_3", "1.x", "1.", ".0", "1.2.3"] {
            assert!(job_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn json_and_csv_exclude_each_other_wherever_given() {
        for args in [
            ["senergy", "--json", "--csv", "job", "1"],
            ["senergy", "job", "1", "--json", "--csv"],
            ["senergy", "--json", "job", "1", "--csv"],
        ] {
            let cli = Cli::try_parse_from(args).expect("parsed");
            assert!(
                matches!(run(cli), Err(Failure::Input(m)) if m.contains("exclude")),
                "{args:?}"
            );
        }
    }

    #[test]
    fn times() {
        assert_eq!(
            when("1735689600").expect("valid in this test"),
            1_735_689_600
        );
        assert_eq!(
            when("2025-01-01T00:00:00Z").expect("valid in this test"),
            1_735_689_600
        );
        assert!(when("2025-01-01").is_ok());
        assert!(when("2025-01-01T10:30").is_ok());
        assert!(when("yesterday").is_err());
    }

    #[test]
    fn help_parses() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
