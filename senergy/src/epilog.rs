//! `senergy record`, run by the node's Epilog (as root, with `SLURM_JOB_ID`): keeps this
//! node's figures of the job in its SystemComment ([`crate::kept`], which says why not its
//! AdminComment), for `senergy job` to find whenever asked.
//!
//! Bounded and harmless: it waits for the ledgers at most [`LEDGER_WAIT`] and for slurmdbd
//! at most [`WRITE_WAIT`], and whatever fails is one line on stderr (slurmd's log) and exit
//! status 0: an Epilog that fails drains the node, and a figure not kept is no reason to
//! take a node out of service (`senergy job` then says "not recorded" for it).
//!
//! Every node of a job writes the one row, each in its turn ([`turn`]): a job of more nodes
//! than [`SYNC_NODES`] would hold its nodes in COMPLETING for its turns, so its Epilog hands
//! the node's figures, once read, to a process of its own that writes them in the node's
//! turn (in its own process group, its output to syslog) and ends at once.

use std::path::PathBuf;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use slurm_energy_logic::{Ledger, ledger_path, unix_time};
use slurm_energy_logic::{doorbell_path, ring_without_waiting};
use slurm_energy_logic::{hostlist, spool_for_node};

use crate::check::FAMILY;
use crate::cli::RecordArgs;
use crate::ffi::{self, Accounting, JobQuery};
use crate::kept::{self, Ledgered, NodeRecord};
use crate::record::JobRow;

/// How long the Epilog waits for a ledger sampled after the job's steps were gone: slurmd
/// samples at least every few seconds, and at once when rung.
pub const LEDGER_WAIT: Duration = Duration::from_secs(10);
/// How long it tries to write the record, at least: slurmdbd may not have the job's start
/// yet (slurmctld sends it through its agent queue); a job of many nodes waits [`TURNS`]
/// cycles of their turns ([`Turn::cycle`]) as well.
pub const WRITE_WAIT: Duration = Duration::from_secs(15);
/// The turns a node takes at most: its write, and two more where another's undid it.
const TURNS: u32 = 3;
/// How long after a write the record is read back: longer than another node's read,
/// merge and write take, so that a write of theirs made on what they read before ours
/// lands before we look (and we write again, in our next turn).
const SETTLE: Duration = Duration::from_millis(1000);
const POLL: Duration = Duration::from_millis(200);
/// How long before its turn a node connects to slurmdbd (a round trip or two): the turn
/// holds the read, the merge and the write alone.
const CONNECT_AHEAD: Duration = Duration::from_millis(200);

mod turn;
use turn::Turn;

/// The most nodes whose Epilogs write in their turns themselves: [`SYNC_NODES`] turns
/// last a few seconds. A job of more hands its writes to processes of their own.
const SYNC_NODES: usize = 16;

/// The Epilog's command: keeps `job`'s figures (default: `SLURM_JOB_ID`) of node `node`
/// (default: `SLURMD_NODENAME`, else this host's short name); with `--entry`, writes the
/// figures an Epilog read (the process it started). Exit status 0 whatever happens (see
/// the module).
pub fn run(args: &RecordArgs) -> u8 {
    let named = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|j| j.parse().ok());
    let Some(job) = args.job.or(named) else {
        eprintln!("senergy record: no job named, and no SLURM_JOB_ID: nothing recorded");
        return 0;
    };
    let node = (args.node.clone())
        .or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .unwrap_or_else(crate::check::node::short_host_name);
    let say = |why: &str| eprintln!("senergy record: job {job} on {node}: not recorded: {why}");
    if let (Some(json), Some(since)) = (&args.entry, args.since) {
        // the process of its own: its stderr goes nowhere an admin looks
        let said = match serde_json::from_str::<NodeRecord>(json) {
            Ok(entry) => write(job, &node, &entry, since).err(),
            Err(e) => Some(format!("--entry: {e}")),
        };
        if let Some(why) = said {
            ffi::syslog(&format!(
                "senergy record: job {job} on {node}: not recorded: {why}"
            ));
        }
        return 0;
    }
    let settings = ffi::slurm_settings();
    let ledgers = ledger_paths(&settings, &node);
    let (entry, since) = match node_figures(job, &ledgers) {
        Ok(figures) => figures,
        Err(why) => {
            say(&why);
            return 0;
        }
    };
    let nodes = job_nodes(None).map_or(0, |n| n.len());
    let written = match nodes > SYNC_NODES {
        true => hand_over(job, &node, &entry, since),
        false => write(job, &node, &entry, since),
    };
    if let Err(why) = written {
        say(&why);
    }
    0
}

/// Starts the process that writes `entry` in the node's turn: this program again, with
/// the figures on its command line, in a process group of its own (slurmd kills an
/// Epilog's group at its timeout), without the Epilog's output pipes (slurmd reads them
/// until they close).
fn hand_over(job: u32, node: &str, entry: &NodeRecord, since: f64) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let json = serde_json::to_string(entry).map_err(|e| e.to_string())?;
    let me = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    std::process::Command::new(me)
        .args(["record", &job.to_string(), "--node", node, "--entry", &json])
        .args(["--since", &since.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the process that writes in this node's turn: {e}"))
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

/// The job's row as accounting holds it now on `db`, a connection that has read nothing
/// yet (a connection's reads see the rows as its first one did: [`crate::settled_rows`]).
fn job_row(db: &Accounting, job: u32, since: f64) -> Result<JobRow, String> {
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

/// [`job_row`] on a new connection.
fn fresh_row(job: u32, since: f64) -> Result<JobRow, String> {
    job_row(&Accounting::open().map_err(|e| e.to_string())?, job, since)
}

/// The job's node list, in order: the Epilog's `SLURM_JOB_NODELIST` (slurmd's), else
/// accounting's (a run by hand).
fn job_nodes(row: Option<&JobRow>) -> Option<Vec<String>> {
    let listed = std::env::var("SLURM_JOB_NODELIST").ok();
    listed
        .as_deref()
        .or(row.map(|r| r.nodes.as_str()))
        .and_then(|list| hostlist::expand(list).ok())
        .filter(|nodes| !nodes.is_empty())
}

/// Merges `entry` into the job's SystemComment in this node's turn ([`turn`]), and reads
/// it back after [`SETTLE`] until it holds it (another node's write made on what it read
/// before ours undoes ours: we then merge and write again in our next turn), for at most
/// [`WRITE_WAIT`] or [`TURNS`] cycles of turns. Every read and write of the row is in the
/// node's turn but the read back: a thousand nodes' Epilogs never ask slurmdbd at once.
fn write(job: u32, node: &str, entry: &NodeRecord, since: f64) -> Result<(), String> {
    let began = Instant::now();
    let mut turn = job_nodes(None).map(|nodes| Turn::of(node, &nodes));
    let mut seen = kept::Seen::default();
    let mut last = String::new();
    loop {
        let attempt = (|| {
            let turn = match turn {
                Some(turn) => turn,
                None => *turn.insert(Turn::of(
                    node,
                    &job_nodes(Some(&fresh_row(job, since)?)).unwrap_or_default(),
                )),
            };
            // connected before the turn, read, merge and write in it on that connection
            let wait = turn.wait(unix_time(SystemTime::now()));
            sleep(wait.saturating_sub(CONNECT_AHEAD));
            let db = Accounting::open().map_err(|e| e.to_string())?;
            sleep(turn.wait(unix_time(SystemTime::now())).min(CONNECT_AHEAD));
            let row = job_row(&db, job, since)?;
            let update = kept::update(&row, node, entry, &mut seen);
            let Some(merged) = update.map_err(|e| e.to_string())? else {
                return Ok(true);
            };
            db.set_system_comment(&row, &merged)
                .map_err(|e| e.to_string())?;
            Ok::<bool, String>(false)
        })();
        match attempt {
            Ok(true) => return Ok(()),
            Ok(false) => last.clear(),
            Err(why) => last = why,
        }
        let wait = turn.map_or(WRITE_WAIT, |t| WRITE_WAIT.max(TURNS * t.cycle()));
        if began.elapsed() + SETTLE >= wait {
            return Err(match last.as_str() {
                "" => format!("another write kept undoing ours for {} s", wait.as_secs()),
                _ => last,
            });
        }
        sleep(SETTLE);
        // read back (our write landed and stayed: done), else write again in our turn
        let held = fresh_row(job, since).is_ok_and(|row| {
            kept::update(&row, node, entry, &mut seen).is_ok_and(|update| update.is_none())
        });
        if held {
            return Ok(());
        }
    }
}
