//! The rules `senergy check` judges a node by: each a name (the finding's `check`), what it
//! checks (its function's first line) and its judgements, in [`RULES`], in the order an admin
//! would fix what they find. A rule reads the facts only: it never depends on what another
//! rule said, so that each can be tested alone and the table reordered without surprise.

use super::{FAMILY, Facts, LedgerFact, LedgerState, STALE_AFTER_SECS, Status, release};

/// More power than this on one node is not a reading but a broken one.
const MAX_NODE_WATTS: f64 = 100_000.0;

/// A rule's judgement of one thing it looked at: how it stands, and what was seen. With
/// the rule's name, it is a finding: one line of the node's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub status: Status,
    pub detail: String,
}

fn ok(detail: impl Into<String>) -> Judgement {
    Judgement {
        status: Status::Ok,
        detail: detail.into(),
    }
}

fn warn(detail: impl Into<String>) -> Judgement {
    Judgement {
        status: Status::Warn,
        detail: detail.into(),
    }
}

fn fail(detail: impl Into<String>) -> Judgement {
    Judgement {
        status: Status::Fail,
        detail: detail.into(),
    }
}

/// What a rule looks at, and how it gives its judgements.
#[derive(Clone, Copy)]
pub enum Scope {
    /// The node as a whole: its judgements, one for each thing it looked at (a plugin, a
    /// probe), none where nothing applies.
    Node(fn(&Facts) -> Vec<Judgement>),
    /// Each plugin's ledger in turn: its judgement of one, `None` where it does not apply.
    /// The ledger rules that stand together in [`RULES`] are said ledger by ledger, so
    /// that one plugin's lines stay together.
    Ledger(fn(&Facts, &LedgerFact) -> Option<Judgement>),
}

/// One rule of the verdict.
pub struct Rule {
    /// The name its findings carry (`check` in the text and the JSON).
    pub name: &'static str,
    pub scope: Scope,
    /// Whether its failure is the whole verdict: the rules after it presume what it checks.
    pub decisive: bool,
}

const fn node(name: &'static str, rule: fn(&Facts) -> Vec<Judgement>) -> Rule {
    Rule {
        name,
        scope: Scope::Node(rule),
        decisive: false,
    }
}

const fn each_ledger(
    name: &'static str,
    rule: fn(&Facts, &LedgerFact) -> Option<Judgement>,
) -> Rule {
    Rule {
        name,
        scope: Scope::Ledger(rule),
        decisive: false,
    }
}

/// The rules, in the order an admin would fix what they find.
pub const RULES: &[Rule] = &[
    Rule {
        decisive: true,
        ..node("config", config)
    },
    node("plugin", plugin),
    node("slurmd", slurmd),
    node("attribution", attribution),
    each_ledger("source", source),
    each_ledger("ledger", ledger),
    each_ledger("power", power),
    each_ledger("static", static_power),
    node("probe", probe),
    node("log", log),
];

/// AcctGatherEnergyType names one of this family's plugins.
fn config(facts: &Facts) -> Vec<Judgement> {
    let types = facts.energy_types.join(",");
    vec![if facts.plugins.is_empty() {
        fail(format!(
            "AcctGatherEnergyType={} in {}: none of this family's plugins ({FAMILY}rapl, ...)",
            if types.is_empty() { "(none)" } else { &types },
            facts.slurm_conf
        ))
    } else {
        ok(format!(
            "AcctGatherEnergyType={types} ({})",
            facts.slurm_conf
        ))
    }]
}

/// Each plugin named is in PluginDir, built for the Slurm release slurmd runs.
fn plugin(facts: &Facts) -> Vec<Judgement> {
    let judge = |plugin: &super::PluginFile| match (&plugin.found, &facts.slurmd_release) {
        (Err(why), _) => fail(format!("{}: {why}", plugin.plugin_type)),
        (Ok((path, built)), Ok((running, slurmd))) if built != running => fail(format!(
            "{} is built for Slurm {}, slurmd here is {} ({}): Slurm refuses to load it \
             (install the build for {})",
            path.display(),
            release(*built),
            release(*running),
            slurmd.display(),
            release(*running)
        )),
        (Ok((path, built)), Ok(_)) => ok(format!(
            "{}, built for Slurm {}",
            path.display(),
            release(*built)
        )),
        (Ok((path, built)), Err(why)) => warn(format!(
            "{}, built for Slurm {}; slurmd's release is unknown ({why})",
            path.display(),
            release(*built)
        )),
    };
    facts.plugins.iter().map(judge).collect()
}

/// A slurmd runs for this node with this slurm.conf; where not, why each other one on the
/// host is not it.
fn slurmd(facts: &Facts) -> Vec<Judgement> {
    vec![match facts.slurmd_pid {
        Some(pid) => ok(format!("running for node {} (pid {pid})", facts.node)),
        None => fail(format!(
            "no slurmd runs for node {} with {} on this host{}",
            facts.node,
            facts.slurm_conf,
            facts
                .other_slurmds
                .iter()
                .map(|(pid, why)| format!("; pid {pid} {why}"))
                .collect::<String>()
        )),
    }]
}

/// With `EnergyAttribution=shared`, the node has what the split needs.
fn attribution(facts: &Facts) -> Vec<Judgement> {
    match &facts.shared {
        Some(Err(why)) => vec![fail(format!(
            "EnergyAttribution=shared: {why}; every step gets the node's energy"
        ))],
        Some(Ok(())) => vec![ok(
            "EnergyAttribution=shared: Slurm's job cgroups are there",
        )],
        None => vec![],
    }
}

/// What a plugin's source reads, as its ledger or else slurmd's log says (a ledger that
/// holds a reading only).
fn source(facts: &Facts, ledger: &LedgerFact) -> Option<Judgement> {
    let Ok(Some(state)) = &ledger.state else {
        return None;
    };
    Some(ok(if !state.source.is_empty() {
        state.source.clone()
    } else {
        facts
            .log
            .measuring
            .last()
            .cloned()
            .unwrap_or_else(|| "(not said)".into())
    }))
}

/// The plugin's ledger is readable and slurmd wrote a reading to it less than
/// [`STALE_AFTER_SECS`] ago; where not, the log's last problem says why.
fn ledger(facts: &Facts, ledger: &LedgerFact) -> Option<Judgement> {
    let path = ledger.path.display();
    let state = match &ledger.state {
        Err(why) => return Some(fail(why.clone())),
        Ok(None) => {
            return Some(fail(with_log_reason(
                facts,
                format!(
                    "no ledger at {path}: slurmd has taken no reading from {} since the \
                     ledger began",
                    ledger.plugin_type
                ),
            )));
        }
        Ok(Some(state)) => state,
    };
    let age = facts.now - state.sampled_at;
    Some(if fresh(facts, ledger).is_none() {
        fail(with_log_reason(
            facts,
            format!("{path}: the last reading is {age:.0} s old: readings have stopped"),
        ))
    } else {
        ok(format!(
            "{path}: last reading {:.1} s ago, {} job(s) on the node",
            age.max(0.0),
            state.jobs
        ))
    })
}

/// A fresh ledger's power is one a node can draw, and not none.
fn power(facts: &Facts, ledger: &LedgerFact) -> Option<Judgement> {
    let state = fresh(facts, ledger)?;
    let power = format!(
        "{:.1} W now; {:.0} J since {}",
        state.watts,
        state.joules,
        crate::output::local_time(state.since as i64)
    );
    Some(if state.watts > MAX_NODE_WATTS {
        fail(format!(
            "{power}: more than a node can draw, a broken reading"
        ))
    } else if state.watts == 0.0 {
        warn(format!("{power}: the source reports no power"))
    } else {
        ok(power)
    })
}

/// What a fresh ledger learned of the node's static power: an admin sees there what a
/// shared split divides by holding (docs/shared-nodes.md), and whether it is the node's.
fn static_power(facts: &Facts, ledger: &LedgerFact) -> Option<Judgement> {
    let state = fresh(facts, ledger)?;
    let held = format!(
        "lowest power held over {:.0} s",
        slurm_energy_logic::STATIC_POWER_SUSTAIN_SECS
    );
    Some(ok(match state.learned_idle_watts {
        Some(watts) => format!(
            "{held}: {watts:.1} W (the static power EnergyAttribution=shared splits by \
             holding, unless EnergyAttributionIdleWatts sets it)"
        ),
        None => format!("{held}: not learned yet"),
    }))
}

/// Where a ledger has no fresh reading, whether its source answers when probed directly.
fn probe(facts: &Facts) -> Vec<Judgement> {
    let judge = |(plugin, found): &(String, Result<String, String>)| match found {
        Ok(what) => warn(format!(
            "{plugin}: the source answers senergy directly ({what}), not slurmd"
        )),
        Err(why) => fail(format!(
            "{plugin}: this node has no source it can read: {why}"
        )),
    };
    facts.probes.iter().map(judge).collect()
}

/// slurmd's log is readable and, where every ledger is fresh, has no problem line from the
/// plugins (where one is not, the `ledger` rule already gave the last).
fn log(facts: &Facts) -> Vec<Judgement> {
    let mut out = Vec::new();
    let every_ledger_fresh = facts.ledgers.iter().all(|l| fresh(facts, l).is_some());
    if let (true, Some(last)) = (every_ledger_fresh, facts.log.problems.last()) {
        out.push(warn(format!(
            "{} problem line(s) from the plugin since slurmd started; the last: {last}",
            facts.log.problems.len()
        )));
    }
    if let Some(why) = &facts.log.unreadable {
        out.push(warn(why.clone()));
    }
    out
}

/// The ledger's state where it holds a reading less than [`STALE_AFTER_SECS`] old.
fn fresh<'a>(facts: &Facts, ledger: &'a LedgerFact) -> Option<&'a LedgerState> {
    let Ok(Some(state)) = &ledger.state else {
        return None;
    };
    if facts.now - state.sampled_at > STALE_AFTER_SECS {
        None
    } else {
        Some(state)
    }
}

/// `detail` and why slurmd's log says readings fail: its last problem line, or where to
/// look when slurmd logs to syslog.
fn with_log_reason(facts: &Facts, mut detail: String) -> String {
    if let Some(last) = facts.log.problems.last() {
        detail.push_str(&format!("; slurmd's log: {last}"));
    } else if facts.log.file.is_none() {
        detail.push_str("; slurmd logs to syslog (journalctl -u slurmd | grep rust_)");
    }
    detail
}

#[cfg(test)]
mod tests;
