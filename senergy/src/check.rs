//! `senergy check`: whether this node's energy plugin works, judged from what it leaves
//! where an admin would look: slurm.conf, the plugin's file, slurmd, slurmd's log and the
//! node's energy ledger. [`node`] gathers those facts; this module judges them and says the
//! verdict, in a few lines or as JSON.

pub mod compare;
pub mod conf;
pub mod node;
pub mod readers;
mod rules;

use std::path::PathBuf;

use serde_json::json;

use rules::{Judgement, RULES, Rule, Scope};

/// A ledger older than this is stale: slurmd writes it at each update (about a second
/// apart) while its source answers, and not at all while it does not.
pub const STALE_AFTER_SECS: f64 = 10.0;
/// What names the family's plugins in AcctGatherEnergyType.
pub const FAMILY: &str = "acct_gather_energy/rust_";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    /// As JSON names it; the text shouts a failure (`FAIL`).
    fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }

    fn word(self) -> String {
        match self {
            Status::Fail => self.name().to_ascii_uppercase(),
            _ => self.name().to_string(),
        }
    }
}

/// One line of the verdict: what was checked, how it stands, and what was seen.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    pub detail: String,
}

/// A plugin named in AcctGatherEnergyType, as found in PluginDir: its file and the Slurm
/// release it was built for (its `plugin_version`), or why not.
#[derive(Debug, Clone)]
pub struct PluginFile {
    pub plugin_type: String,
    pub found: Result<(PathBuf, u32), String>,
}

/// What a ledger says of the node.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerState {
    /// Unix time of slurmd's last reading.
    pub sampled_at: f64,
    pub watts: f64,
    pub joules: f64,
    /// Unix time the ledger's node account began.
    pub since: f64,
    pub jobs: usize,
    /// What the meter reads, as slurmd described it (empty in a ledger of before).
    pub source: String,
    /// The lowest power the node held over
    /// [`STATIC_POWER_SUSTAIN_SECS`](slurm_energy_logic::STATIC_POWER_SUSTAIN_SECS)
    /// (`Ledger::learned_idle_watts`); `None`: not learned yet.
    pub learned_idle_watts: Option<f64>,
}

/// A plugin's ledger: its path and what it holds (`None`: no ledger), or why it cannot
/// be read.
#[derive(Debug, Clone)]
pub struct LedgerFact {
    pub plugin_type: String,
    pub path: PathBuf,
    pub state: Result<Option<LedgerState>, String>,
}

/// What slurmd's log says of the family's plugins since slurmd started.
#[derive(Debug, Clone, Default)]
pub struct LogFacts {
    /// SlurmdLogFile for this node; `None` where slurmd logs to syslog.
    pub file: Option<PathBuf>,
    /// Why it could not be read.
    pub unreadable: Option<String>,
    /// The plugins' "measuring ..." lines: what they read.
    pub measuring: Vec<String>,
    /// Their error and warning lines, and the loader's about their files, oldest first.
    pub problems: Vec<String>,
}

/// Everything `check` judges, gathered on the node ([`node::gather`]).
#[derive(Debug, Clone)]
pub struct Facts {
    pub node: String,
    /// The slurm.conf libslurm loaded.
    pub slurm_conf: String,
    /// AcctGatherEnergyType, split.
    pub energy_types: Vec<String>,
    /// The family's plugins among them.
    pub plugins: Vec<PluginFile>,
    /// slurmd running for this node.
    pub slurmd_pid: Option<u32>,
    /// slurmd's release (`slurmd -V`) and which slurmd said it, or why it is unknown.
    pub slurmd_release: Result<(u32, PathBuf), String>,
    pub ledgers: Vec<LedgerFact>,
    pub log: LogFacts,
    /// Where a plugin's ledger has no fresh reading: its source probed directly
    /// ([`readers::probe`]): `(plugin type, what answers or why nothing does)`.
    pub probes: Vec<(String, Result<String, String>)>,
    /// slurmd processes on this host left aside: they run for another node or another
    /// slurm.conf (`(pid, why)`).
    pub other_slurmds: Vec<(u32, String)>,
    /// With `EnergyAttribution=shared`: whether the node has what the split needs (the
    /// plugin's own verdict, [`slurm_energy_logic::Site::from_conf`]).
    pub shared: Option<Result<(), String>>,
    /// Unix time now.
    pub now: f64,
}

/// A release as Slurm numbers it (`SLURM_VERSION_NUMBER`), as people write it.
pub fn release(number: u32) -> String {
    format!(
        "{}.{:02}.{}",
        number >> 16,
        (number >> 8) & 0xff,
        number & 0xff
    )
}

/// `22.05.8` (or `slurm 22.05.8`, as `slurmd -V` prints it) as Slurm numbers it; a
/// pre-release (`slurm 26.11.0-0rc1`) as the release it comes before, which its headers'
/// `SLURM_VERSION_NUMBER` (0x1a0b00) and so its loader take it for.
pub fn parse_release(text: &str) -> Option<u32> {
    let word = text.split_whitespace().last()?;
    let word = word.split_once('-').map_or(word, |(release, _)| release);
    let mut parts = word.split('.').map(|p| p.parse::<u32>().ok());
    let (major, minor, micro) = (parts.next()??, parts.next()??, parts.next()??);
    (parts.next().is_none() && minor < 256 && micro < 256)
        .then_some((major << 16) | (minor << 8) | micro)
}

/// The family's lines in slurmd's log text (the part since slurmd started): what each
/// plugin measures, and its problems. A line is the family's when it names one of its
/// plugins (`acct_gather_energy/rust_...`, or the file `acct_gather_energy_rust_...`:
/// Slurm's loader refusing it).
pub fn read_log(text: &str) -> (Vec<String>, Vec<String>) {
    let mut measuring = Vec::new();
    let mut problems = Vec::new();
    for line in text.lines() {
        let ours = line.contains(FAMILY) || line.contains("acct_gather_energy_rust_");
        if !ours {
            continue;
        }
        let line = line.trim();
        if let Some((_, what)) = line.split_once(": measuring ") {
            measuring.push(what.to_string());
        } else if ["error:", "warning:", "fatal:"]
            .iter()
            .any(|w| line.contains(w))
        {
            problems.push(line.to_string());
        }
    }
    (measuring, problems)
}

/// The verdict's lines: [`rules::RULES`] in turn, each ledger rule said ledger by ledger.
pub fn judge(facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    let per_ledger = |rule: &Rule| matches!(rule.scope, Scope::Ledger(_));
    for group in RULES.chunk_by(|a, b| per_ledger(a) && per_ledger(b)) {
        let mut say = |rule: &Rule, judgement: Judgement| {
            out.push(Finding {
                check: rule.name,
                status: judgement.status,
                detail: judgement.detail,
            })
        };
        if let [
            rule @ Rule {
                scope: Scope::Node(judge),
                ..
            },
        ] = group
        {
            let judgements = judge(facts);
            let failed = judgements.iter().any(|v| v.status == Status::Fail);
            judgements.into_iter().for_each(|v| say(rule, v));
            if rule.decisive && failed {
                return out;
            }
            continue;
        }
        for ledger in &facts.ledgers {
            for rule in group {
                if let Scope::Ledger(judge) = rule.scope {
                    judge(facts, ledger).into_iter().for_each(|v| say(rule, v));
                }
            }
        }
    }
    out
}

/// Whether the node is healthy: no finding failed.
pub fn healthy(findings: &[Finding]) -> bool {
    findings.iter().all(|f| f.status != Status::Fail)
}

pub fn text(facts: &Facts, findings: &[Finding]) -> String {
    let mut out = format!("senergy check: node {}\n", facts.node);
    for f in findings {
        out.push_str(&format!(
            "  {:<5} {:<12} {}\n",
            f.status.word(),
            f.check,
            f.detail
        ));
    }
    let failed = findings.iter().filter(|f| f.status == Status::Fail).count();
    if failed == 0 {
        out.push_str("verdict: OK\n");
    } else {
        out.push_str(&format!(
            "verdict: {failed} problem(s): energy on this node is not accounted as it should be\n"
        ));
    }
    out
}

pub fn json(facts: &Facts, findings: &[Finding]) -> serde_json::Value {
    let checks: Vec<_> = findings
        .iter()
        .map(|f| {
            json!({
                "check": f.check,
                "status": f.status.name(),
                "detail": f.detail,
            })
        })
        .collect();
    // each readable ledger's learned static power, as a number (the text is in `checks`)
    let ledgers: Vec<_> = facts
        .ledgers
        .iter()
        .filter_map(|l| {
            let state = l.state.as_ref().ok()?.as_ref()?;
            Some(json!({
                "plugin": l.plugin_type,
                "learned_idle_watts": state.learned_idle_watts,
            }))
        })
        .collect();
    json!({
        "schema_version": 1,
        "node": facts.node,
        "healthy": healthy(findings),
        "checks": checks,
        "ledgers": ledgers,
    })
}

#[cfg(test)]
mod tests;
