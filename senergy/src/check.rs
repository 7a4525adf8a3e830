//! `senergy check`: whether this node's energy plugin works, judged from what it leaves
//! where an admin would look: slurm.conf, the plugin's file, slurmd, slurmd's log and the
//! node's energy ledger. [`node`] gathers those facts; this module judges them and says the
//! verdict, in a few lines or as JSON.

pub mod compare;
pub mod node;
pub mod readers;

use std::path::PathBuf;

use serde_json::json;

/// A ledger older than this is stale: slurmd writes it at least every second while its
/// source answers (and not at all while it does not).
pub const STALE_AFTER_SECS: f64 = 10.0;
/// More power than this on one node is not a reading but a broken one.
const MAX_NODE_WATTS: f64 = 100_000.0;
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
    /// [`STATIC_POWER_SUSTAIN_SECS`](slurm_energy_logic::ledger::STATIC_POWER_SUSTAIN_SECS)
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
    /// plugin's own verdict, [`slurm_energy_logic::attribution::Site::from_conf`]).
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

/// The verdict's lines, in the order an admin would fix them.
pub fn judge(facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut say = |check, status, detail: String| {
        out.push(Finding {
            check,
            status,
            detail,
        })
    };
    let types = facts.energy_types.join(",");
    if facts.plugins.is_empty() {
        say(
            "config",
            Status::Fail,
            format!(
                "AcctGatherEnergyType={} in {}: none of this family's plugins \
                 ({FAMILY}rapl, ...)",
                if types.is_empty() { "(none)" } else { &types },
                facts.slurm_conf
            ),
        );
        return out;
    }
    say(
        "config",
        Status::Ok,
        format!("AcctGatherEnergyType={types} ({})", facts.slurm_conf),
    );

    for plugin in &facts.plugins {
        match (&plugin.found, &facts.slurmd_release) {
            (Err(why), _) => say(
                "plugin",
                Status::Fail,
                format!("{}: {why}", plugin.plugin_type),
            ),
            (Ok((path, built)), Ok((running, slurmd))) if built != running => say(
                "plugin",
                Status::Fail,
                format!(
                    "{} is built for Slurm {}, slurmd here is {} ({}): Slurm refuses to load \
                     it (install the build for {})",
                    path.display(),
                    release(*built),
                    release(*running),
                    slurmd.display(),
                    release(*running)
                ),
            ),
            (Ok((path, built)), Ok(_)) => say(
                "plugin",
                Status::Ok,
                format!("{}, built for Slurm {}", path.display(), release(*built)),
            ),
            (Ok((path, built)), Err(why)) => say(
                "plugin",
                Status::Warn,
                format!(
                    "{}, built for Slurm {}; slurmd's release is unknown ({why})",
                    path.display(),
                    release(*built)
                ),
            ),
        }
    }

    match facts.slurmd_pid {
        Some(pid) => say(
            "slurmd",
            Status::Ok,
            format!("running for node {} (pid {pid})", facts.node),
        ),
        None => say(
            "slurmd",
            Status::Fail,
            format!(
                "no slurmd runs for node {} with {} on this host{}",
                facts.node,
                facts.slurm_conf,
                facts
                    .other_slurmds
                    .iter()
                    .map(|(pid, why)| format!("; pid {pid} {why}"))
                    .collect::<String>()
            ),
        ),
    }

    if let Some(Err(why)) = &facts.shared {
        say(
            "attribution",
            Status::Fail,
            format!("EnergyAttribution=shared: {why}; every step gets the node's energy"),
        );
    } else if let Some(Ok(())) = &facts.shared {
        say(
            "attribution",
            Status::Ok,
            "EnergyAttribution=shared: Slurm's job cgroups are there".into(),
        );
    }

    let log_problems = |out: &mut String| {
        if let Some(last) = facts.log.problems.last() {
            out.push_str(&format!("; slurmd's log: {last}"));
        } else if facts.log.file.is_none() {
            out.push_str("; slurmd logs to syslog (journalctl -u slurmd | grep rust_)");
        }
    };
    let mut failing = false;
    for ledger in &facts.ledgers {
        let path = ledger.path.display();
        let state = match &ledger.state {
            Err(why) => {
                say("ledger", Status::Fail, why.clone());
                failing = true;
                continue;
            }
            Ok(None) => {
                let mut detail = format!(
                    "no ledger at {path}: slurmd has taken no reading from {} since the \
                     ledger began",
                    ledger.plugin_type
                );
                log_problems(&mut detail);
                say("ledger", Status::Fail, detail);
                failing = true;
                continue;
            }
            Ok(Some(state)) => state,
        };
        let source = if !state.source.is_empty() {
            state.source.clone()
        } else {
            facts
                .log
                .measuring
                .last()
                .cloned()
                .unwrap_or_else(|| "(not said)".into())
        };
        say("source", Status::Ok, source);
        let age = facts.now - state.sampled_at;
        if age > STALE_AFTER_SECS {
            let mut detail =
                format!("{path}: the last reading is {age:.0} s old: readings have stopped");
            log_problems(&mut detail);
            say("ledger", Status::Fail, detail);
            failing = true;
            continue;
        }
        say(
            "ledger",
            Status::Ok,
            format!(
                "{path}: last reading {:.1} s ago, {} job(s) on the node",
                age.max(0.0),
                state.jobs
            ),
        );
        let power = format!(
            "{:.1} W now; {:.0} J since {}",
            state.watts,
            state.joules,
            crate::output::local_time(state.since as i64)
        );
        if state.watts > MAX_NODE_WATTS {
            say(
                "power",
                Status::Fail,
                format!("{power}: more than a node can draw, a broken reading"),
            );
        } else if state.watts == 0.0 {
            say(
                "power",
                Status::Warn,
                format!("{power}: the source reports no power"),
            );
        } else {
            say("power", Status::Ok, power);
        }
        say("static", Status::Ok, static_power(state.learned_idle_watts));
    }

    for (plugin, found) in &facts.probes {
        match found {
            Ok(what) => say(
                "probe",
                Status::Warn,
                format!("{plugin}: the source answers senergy directly ({what}), not slurmd"),
            ),
            Err(why) => say(
                "probe",
                Status::Fail,
                format!("{plugin}: this node has no source it can read: {why}"),
            ),
        }
    }

    if !failing && !facts.log.problems.is_empty() {
        let n = facts.log.problems.len();
        say(
            "log",
            Status::Warn,
            format!(
                "{n} problem line(s) from the plugin since slurmd started; the last: {}",
                facts.log.problems[n - 1]
            ),
        );
    }
    if let Some(why) = &facts.log.unreadable {
        say("log", Status::Warn, why.clone());
    }
    out
}

/// What the ledger learned of the node's static power: an admin sees there what a shared
/// split divides by holding (docs/shared-nodes.md), and whether it is the node's.
fn static_power(learned: Option<f64>) -> String {
    let held = format!(
        "lowest power held over {:.0} s",
        slurm_energy_logic::ledger::STATIC_POWER_SUSTAIN_SECS
    );
    match learned {
        Some(watts) => format!(
            "{held}: {watts:.1} W (the static power EnergyAttribution=shared splits by \
             holding, unless EnergyAttributionIdleWatts sets it)"
        ),
        None => format!("{held}: not learned yet"),
    }
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
