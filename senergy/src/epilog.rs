//! `senergy record`, run by the node's Epilog (as root, with `SLURM_JOB_ID`): keeps this
//! node's figures of the job in its SystemComment ([`crate::kept`], which says why not its
//! AdminComment), for `senergy job` to find whenever asked.
//!
//! Bounded and harmless: it waits for the ledgers at most [`LEDGER_WAIT`] and for slurmdbd
//! at most [`WRITE_WAIT`], and whatever fails is one line on stderr (slurmd's log) and exit
//! status 0: an Epilog that fails drains the node, and a figure not kept is no reason to
//! take a node out of service (`senergy job` then says "not recorded" for it).

use std::path::PathBuf;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use slurm_energy_logic::spool_for_node;
use slurm_energy_logic::{Ledger, ledger_path, unix_time};
use slurm_energy_logic::{doorbell_path, ring_without_waiting};

use crate::check::FAMILY;
use crate::ffi::{self, Accounting, JobQuery};
use crate::kept::{self, Ledgered, NodeRecord};
use crate::record::JobRow;

/// How long the Epilog waits for a ledger sampled after the job's steps were gone: slurmd
/// samples at least every few seconds, and at once when rung.
pub const LEDGER_WAIT: Duration = Duration::from_secs(10);
/// How long it tries to write the record: slurmdbd may not have the job's start yet
/// (slurmctld sends it through its agent queue), and the job's other nodes write at the
/// same time.
pub const WRITE_WAIT: Duration = Duration::from_secs(15);
/// How long after a write the record is read back: longer than another node's read,
/// merge and write take, so that a write of theirs made on what they read before ours
/// lands before we look (and we write again).
const SETTLE: Duration = Duration::from_millis(1000);
const POLL: Duration = Duration::from_millis(200);

/// The Epilog's command: keeps `job`'s figures (default: `SLURM_JOB_ID`) of node `node`
/// (default: `SLURMD_NODENAME`, else this host's short name). Exit status 0 whatever
/// happens (see the module).
pub fn run(job: Option<u32>, node: Option<String>) -> u8 {
    let named = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|j| j.parse().ok());
    let Some(job) = job.or(named) else {
        eprintln!("senergy record: no job named, and no SLURM_JOB_ID: nothing recorded");
        return 0;
    };
    let node = node
        .or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .unwrap_or_else(crate::check::node::short_host_name);
    let settings = ffi::slurm_settings();
    let ledgers = ledger_paths(&settings, &node);
    let (entry, since) = match node_figures(job, &ledgers) {
        Ok(figures) => figures,
        Err(why) => {
            eprintln!("senergy record: job {job} on {node}: not recorded: {why}");
            return 0;
        }
    };
    if let Err(why) = write(job, &node, &entry, since) {
        eprintln!("senergy record: job {job} on {node}: not recorded: {why}");
    }
    0
}

/// Every energy plugin's ledger of node `node`: each is named by its plugin's place among
/// the energy plugins (its context).
fn ledger_paths(settings: &ffi::SlurmSettings, node: &str) -> Vec<PathBuf> {
    let spool = spool_for_node(&settings.spool_dir, node);
    settings
        .energy_types
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .enumerate()
        .filter(|(_, t)| t.starts_with(FAMILY))
        .map(|(k, _)| ledger_path(&spool, u16::try_from(k).unwrap_or(u16::MAX)))
        .collect()
}

/// The node's figures of `job` from its ledgers, once each is final (the job's steps gone
/// at a sample since the Epilog began) or holds no such job: rings each ledger's slurmd
/// for a sample, and waits at most [`LEDGER_WAIT`].
fn node_figures(job: u32, ledgers: &[PathBuf]) -> Result<(NodeRecord, f64), String> {
    if ledgers.is_empty() {
        return Err("no energy plugin of ours in AcctGatherEnergyType".into());
    }
    let began = unix_time(SystemTime::now());
    let deadline = Instant::now() + LEDGER_WAIT;
    let mut rung = None;
    loop {
        if rung.is_none_or(|at: Instant| at.elapsed() >= Duration::from_secs(1)) {
            for path in ledgers {
                ring_without_waiting(&doorbell_path(path));
            }
            rung = Some(Instant::now());
        }
        let read: Vec<(Ledgered, Option<Ledger>)> = ledgers
            .iter()
            .map(|path| match Ledger::load(path) {
                Ok(Some(ledger)) => {
                    let held = ledger
                        .jobs()
                        .find(|j| j.id == job)
                        .map(|j| (j.last_seen(), j.account().joules));
                    (
                        kept::ledgered(ledger.sampled_at(), held, began),
                        Some(ledger),
                    )
                }
                // none yet, or one that cannot be read (said at the deadline)
                _ => (Ledgered::Wait, None),
            })
            .collect();
        let waiting = read.iter().any(|(l, _)| *l == Ledgered::Wait);
        if !waiting || Instant::now() >= deadline {
            return figures(job, &read, ledgers);
        }
        sleep(POLL);
    }
}

/// The node's record from its ledgers' final figures, summed over them (stacked plugins
/// measure different parts of the node), and when the node began counting the job (the
/// run of the job id it measured).
fn figures(
    job: u32,
    read: &[(Ledgered, Option<Ledger>)],
    paths: &[PathBuf],
) -> Result<(NodeRecord, f64), String> {
    if let Some(((_, _), path)) = read
        .iter()
        .zip(paths)
        .find(|((l, _), _)| *l == Ledgered::Wait)
    {
        let why = match Ledger::load(path) {
            Ok(Some(_)) => format!(
                "{} was not sampled since the job's steps were gone within {} s",
                path.display(),
                LEDGER_WAIT.as_secs()
            ),
            Ok(None) => format!("no ledger at {}", path.display()),
            Err(e) => e.to_string(),
        };
        return Err(why);
    }
    let mut entry = NodeRecord::default();
    let mut sources = Vec::new();
    let mut since = f64::INFINITY;
    for (ledgered, ledger) in read {
        if let (Ledgered::Final(joules), Some(ledger)) = (ledgered, ledger) {
            entry.joules += joules;
            // the plugin alone: the record is the job owner's to read (sacct), and the
            // meter's description names the BMC's address and user
            sources.push(ledger.plugin().to_string());
            if let Some(view) = ledger.jobs().find(|j| j.id == job) {
                kept::add_breakdown(&mut entry, view.breakdown());
                since = since.min(view.account().since);
            }
        }
    }
    if sources.is_empty() || !since.is_finite() {
        return Err(format!("no ledger of this node holds job {job}"));
    }
    sources.retain(|s| !s.is_empty());
    entry.source = sources.join(" + ");
    Ok((entry, since))
}

/// A pause of `base` and up to as long again, different on each node (their Epilogs
/// start together): the job's nodes' writes fall apart.
fn jittered(base: Duration) -> Duration {
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id().wrapping_mul(2_654_435_761);
    base + base.mul_f64(f64::from(seed % 1000) / 1000.0)
}

/// The job's row as accounting holds it now, on a new connection (a connection's reads
/// see the rows as its first one did: [`crate::settled_rows`]).
fn job_row(job: u32, since: f64) -> Result<JobRow, String> {
    let db = Accounting::open().map_err(|e| e.to_string())?;
    let rows = db
        .jobs(&JobQuery {
            jobs: vec![(job, None)],
            ..JobQuery::default()
        })
        .map_err(|e| e.to_string())?;
    // the run this node measured: not an earlier job of the same id, which slurmdbd gives
    // while it does not hold this run yet (its agent queue behind)
    rows.into_iter()
        .filter(|r| r.job_id == job && r.running_at(since))
        .max_by_key(|r| r.start)
        .ok_or_else(|| "this run of the job is not (yet) in accounting".to_string())
}

/// Merges `entry` into the job's SystemComment, and reads it back after [`SETTLE`] until it
/// holds it (another node's write made on what it read before ours undoes ours: we then
/// merge and write again), for at most [`WRITE_WAIT`].
fn write(job: u32, node: &str, entry: &NodeRecord, since: f64) -> Result<(), String> {
    let deadline = Instant::now() + WRITE_WAIT;
    let mut last = String::new();
    loop {
        let attempt = job_row(job, since).and_then(|row| {
            let Some(merged) = kept::update(&row, node, entry).map_err(|e| e.to_string())? else {
                return Ok(true);
            };
            let db = Accounting::open().map_err(|e| e.to_string())?;
            db.set_system_comment(&row, &merged)
                .map_err(|e| e.to_string())?;
            Ok(false)
        });
        match attempt {
            Ok(true) => return Ok(()),
            Ok(false) => last.clear(),
            Err(why) => last = why,
        }
        if Instant::now() + SETTLE >= deadline {
            return Err(match last.as_str() {
                "" => format!(
                    "another write kept undoing ours for {} s",
                    WRITE_WAIT.as_secs()
                ),
                _ => last,
            });
        }
        sleep(jittered(SETTLE));
    }
}
