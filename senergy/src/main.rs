//! senergy: the energy of Slurm jobs from Slurm's accounting, with emissions and cost.
//!
//! `unsafe` is denied in this crate but in [`ffi`] (the only exception: core's
//! `unsafe_is_allowed_in_ffi_and_the_gpu_vendor_calls_only` fails on any other), so that
//! the calls into C stay in one module small enough to review line by line.
#![deny(unsafe_code)]

mod carbon;
mod check;
mod cli;
mod emissions;
mod epilog;
// The one exception: libslurm, the descriptor calls that hold its stderr, perf_event_open.
#[allow(unsafe_code)]
mod ffi;
mod kept;
mod mail;
mod measured;
mod output;
mod pages;
mod plot;
mod presence;
mod prometheus;
mod record;
mod report;
mod scopes;
mod settle;
mod site;
mod slots;
mod summary;
mod tres;
mod usage;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use carbon::TariffError;
use cli::{CheckPlan, Cli, Command, JobPlan, ListPlan, Output, UsagePlan, Wanted, Whose};
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

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Tariff(#[from] TariffError),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Accounting(#[from] ffi::AccountingError),
    /// MailProg's summary found no slot to wait in ([`slots`]).
    #[error("{0}")]
    NoSlot(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Tariff(_) => exit::CONFIG,
            Failure::Input(_) => exit::USAGE,
            Failure::Accounting(_) | Failure::NoSlot(_) => exit::ACCOUNTING,
        }
    }
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
    // when and where the others ran is all that is compared: their steps are not read
    let others = window.and_then(|w| {
        db.jobs(&JobQuery {
            window: Some(w),
            jobs_only: true,
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

/// The nodes' features, from the slurm.conf libslurm loaded, where a node class of the
/// site file matches by feature.
fn read_node_features(tariff: &mut site::Tariff) {
    if tariff.classes.iter().all(|c| c.entry.features.is_empty()) {
        return;
    }
    let conf = ffi::slurm_settings().slurm_conf;
    match std::fs::read_to_string(&conf) {
        Ok(text) => tariff.node_features = scopes::node_features(&text),
        Err(e) => eprintln!(
            "senergy: cannot read {conf} for the nodes' features ({e}): a node that only a \
             feature puts in a class has no embodied emissions"
        ),
    }
}

/// `senergy check`: the node's verdict, in text or JSON; exits 6 on any failure. The
/// node's health owes nothing to the site file.
fn check_node(plan: CheckPlan) -> u8 {
    if let Some(conf) = &plan.conf {
        return check::conf::run(conf, exit::UNHEALTHY, exit::NOT_FOUND);
    }
    let settings = ffi::slurm_settings();
    let facts = check::node::gather(&settings, plan.node);
    let findings = check::judge(&facts);
    let compared = plan
        .compare
        .map(|w| check::node::compare(&settings, &facts, w));
    if plan.json {
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
    if check::healthy(&findings) && agrees {
        0
    } else {
        exit::UNHEALTHY
    }
}

/// The report in the form the command line chose, the only one rendered (a thousand
/// jobs' three forms took a third of `senergy job`'s time).
fn print(
    output: Output,
    table: impl FnOnce() -> String,
    json: impl FnOnce() -> String,
    csv: impl FnOnce() -> String,
) {
    let text = match output {
        Output::Table | Output::Summary => table(),
        Output::Json => json(),
        Output::Csv => csv(),
    };
    print!("{text}");
}

/// The jobs' rows, and the connection that read them; with `wait`, asked again each second
/// until waiting can change nothing ([`settle`]: every job settled, or ended where no figure
/// will come) or the time is up. Each time on a new connection: slurmdbd keeps a
/// connection's database transaction open, and InnoDB shows a transaction the rows as its
/// first read saw them, so the same connection would never see the job end (as a 22.05
/// cluster showed: RUNNING for a minute after its end). With `mail_slots` (MailProg's
/// summary), a wait first takes one of that many slots ([`slots`]), or ends at once.
fn settled_rows(
    wanted: &[(u32, Option<u32>)],
    wait: Option<std::time::Duration>,
    mail_slots: Option<u32>,
    ended_after: Option<i64>,
    clusters: &[String],
) -> Result<(Accounting, Vec<record::JobRow>), Failure> {
    let deadline = wait.map(|w| std::time::Instant::now() + w);
    let settings = wait.map(|_| ffi::slurm_settings());
    let measured = settings
        .as_ref()
        .is_some_and(|s| settle::measured_by_ours(&s.energy_types));
    let mut slot = None;
    loop {
        let db = Accounting::open()?;
        let mut rows = db.jobs(&JobQuery {
            jobs: wanted.to_vec(),
            clusters: clusters.to_vec(),
            ..JobQuery::default()
        })?;
        // an earlier job of the same id, given while slurmdbd does not hold this run yet,
        // is not this one's (waited past, as a run not in accounting yet)
        rows.retain(|r| ended_after.is_none_or(|t| r.end <= 0 || r.end >= t));
        let waiting = deadline.is_some_and(|d| std::time::Instant::now() < d)
            && settle::worth_waiting(&rows, measured);
        if !waiting {
            return Ok((db, rows));
        }
        if let (None, Some(n), Some(s)) = (&slot, mail_slots, &settings) {
            let taken = slots::take(&slots::dir(&s.state_save), n).map_err(|e| {
                let job = match wanted.first() {
                    Some((job, Some(task))) => format!("{job}_{task}"),
                    Some((job, None)) => job.to_string(),
                    None => String::new(),
                };
                Failure::NoSlot(format!(
                    "accounting does not hold job {job}'s final figures yet, and {e}: \
                     `senergy job {job}` gives them later"
                ))
            })?;
            slot = Some(taken);
        }
        drop(db);
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// `senergy job`: each job's report, its plot; exits 3 if a job named is not found.
fn job(mut plan: JobPlan, now: i64) -> Result<u8, Failure> {
    let prometheus = plan
        .prometheus
        .as_deref()
        .map(Prometheus::new)
        .transpose()
        .map_err(|e| Failure::Input(e.to_string()))?;
    let wanted: Vec<(u32, Option<u32>)> = plan
        .named
        .iter()
        .map(|(job, task, _)| (*job, *task))
        .collect();
    let (db, rows) = settled_rows(
        &wanted,
        plan.wait,
        plan.mail_slots,
        plan.ended_after,
        &plan.clusters,
    )?;
    if plan.plot.is_some() && rows.len() > 1 {
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
    read_node_features(&mut plan.tariff);
    let tariff = &plan.tariff;
    let mut reports: Vec<_> = rows
        .iter()
        .zip(&samples)
        .map(|(r, s)| {
            let points: Option<Vec<Vec<(f64, f64)>>> = s
                .as_ref()
                .map(|nodes| nodes.iter().map(|n| n.points.clone()).collect());
            report::job_report(r, tariff, now, points.as_deref())
        })
        .collect();
    only_named_steps(&mut reports, &rows, &plan.named);
    say_what_was_measured(&db, &mut reports, &rows, now);
    if let (Some(path), Some(row), Some(report)) = (&plan.plot, rows.first(), reports.first()) {
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
    let missing: Vec<&String> = plan
        .given
        .iter()
        .zip(&wanted)
        .filter(|(_, id)| !found.contains(id))
        .map(|(text, _)| text)
        .collect();
    print(
        plan.output,
        || match plan.output {
            Output::Summary => summary::text(&reports, tariff),
            _ => output::jobs_table(&reports, tariff),
        },
        || output::jobs_json(&reports, tariff),
        || output::jobs_csv(&reports, tariff),
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

/// `senergy usage`: the period's energy per account and user, a page of accounting at a
/// time ([`pages`]) on one connection. A job is added in the page it ended in (it ran then,
/// so that page's query has it); one that ran over several pages is read in each and added
/// once.
fn usage(mut plan: UsagePlan, now: i64) -> Result<u8, Failure> {
    let uids = plan
        .users
        .iter()
        .map(|u| uid_of(u))
        .collect::<Result<Vec<_>, _>>()?;
    let db = Accounting::open()?;
    read_node_features(&mut plan.tariff);
    let tariff = &plan.tariff;
    let (start, end) = plan.period;
    let mut tally = usage::Tally::new(start, end);
    let query = JobQuery {
        accounts: plan.accounts.clone(),
        uids,
        clusters: plan.clusters.clone(),
        ..JobQuery::default()
    };
    each_page(&db, query, plan.period, |(page, page_end), _, rows| {
        for row in rows.iter().filter(|r| r.end >= page && r.end < page_end) {
            tally.add(&report::job_report(row, tariff, now, None));
        }
    })?;
    let usage = tally.finish(tariff);
    print(
        plan.output,
        || output::usage_table(&usage, tariff),
        || output::usage_json(&usage, tariff),
        || output::usage_csv(&usage, tariff),
    );
    Ok(0)
}

/// Each page of `[start, end)`'s jobs that `query` selects, read on `db` ([`pages`]): `each`
/// gets the page's span, whether it is the period's last, and its rows (every job that ran
/// in the span: one that ran over several spans comes in each).
fn each_page(
    db: &Accounting,
    mut query: JobQuery,
    (start, end): (i64, i64),
    mut each: impl FnMut((i64, i64), bool, Vec<record::JobRow>),
) -> Result<(), Failure> {
    let mut pages = pages::Pages::new(start, end);
    while let Some(span) = pages.next_page() {
        query.window = Some(span);
        let rows = db.jobs(&query)?;
        pages.held(rows.len());
        each(span, pages.is_last(span.1), rows);
    }
    Ok(())
}

fn run(cli: Cli) -> Result<u8, Failure> {
    let now = chrono::Utc::now().timestamp();
    let Some(command) = &cli.command else {
        return list(cli.list.plan(now)?, now);
    };
    match command {
        Command::Check(args) => Ok(check_node(args.plan()?)),
        Command::Job(args) => job(args.plan()?, now),
        Command::Usage(args) => usage(args.plan(now)?, now),
        Command::Mail(args) => Ok(mail::run(args.args.clone())),
        Command::Record(args) => Ok(epilog::run(args)),
    }
}

/// `senergy` with no subcommand: the period's jobs, a line each, read and written a page
/// ([`pages`]) of accounting at a time on one connection: a job is listed in the
/// page where its run in the period begins (each page's query has
/// every job that ran in it). What measured a job (the `source` and `method` columns)
/// is worked out only where a column asks for it: it reads the page's overlapping jobs
/// again.
fn list(mut plan: ListPlan, now: i64) -> Result<u8, Failure> {
    let uids = match &plan.whose {
        Whose::All => Vec::new(),
        Whose::Users(users) => users.iter().map(|u| uid_of(u)).collect::<Result<_, _>>()?,
        Whose::Caller => vec![nix::unistd::getuid().as_raw()],
    };
    let db = Accounting::open()?;
    read_node_features(&mut plan.tariff);
    let tariff = &plan.tariff;
    let measured = plan.format.iter().any(|c| c == "source" || c == "method");
    let start = plan.period.0;
    let mut writer = output::ListWriter::new(plan.output, &plan.format);
    print!("{}", writer.begin());
    let query = JobQuery {
        accounts: plan.accounts.clone(),
        uids,
        clusters: plan.clusters.clone(),
        ..JobQuery::default()
    };
    each_page(&db, query, plan.period, |(page, page_end), last, rows| {
        // each job where its run in the period begins: its start, else its end (it never
        // ran), else now (it waits)
        let rows: Vec<record::JobRow> = rows
            .into_iter()
            .filter(|r| {
                let began = [r.start, r.end, now]
                    .into_iter()
                    .find(|t| *t > 0)
                    .unwrap_or(now);
                let at = began.max(start);
                at >= page && (at < page_end || last)
            })
            .collect();
        let mut reports: Vec<_> = rows
            .iter()
            .map(|r| report::job_report(r, tariff, now, None))
            .collect();
        if measured {
            say_what_was_measured(&db, &mut reports, &rows, now);
        }
        print!(
            "{}",
            writer.page(&output::list_cells(&reports, tariff, &plan.format))
        );
    })?;
    print!("{}", writer.end());
    Ok(0)
}

fn main() -> ExitCode {
    // slurmctld runs MailProg as `MailProg -s SUBJECT USER`: with MailProg=senergy that
    // is `senergy -s ...`, which no other command line begins with
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "-s") {
        args.insert(1, "mail".into());
    }
    let cli = Cli::parse_from(args);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("senergy: {e}");
            ExitCode::from(e.code())
        }
    }
}
