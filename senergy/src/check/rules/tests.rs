//! Each rule alone, on the facts of a healthy node with one thing changed: its judgements in
//! full (what `senergy check` prints), and where it says nothing.

use super::*;
use crate::check::tests::{R22, R24, healthy_facts};
use crate::check::{LogFacts, PluginFile};

fn said(judgements: Vec<Judgement>) -> Vec<(Status, String)> {
    judgements
        .into_iter()
        .map(|v| (v.status, v.detail))
        .collect()
}

fn said_of_ledger(
    rule: fn(&Facts, &LedgerFact) -> Option<Judgement>,
    facts: &Facts,
) -> Option<(Status, String)> {
    rule(facts, &facts.ledgers[0]).map(|v| (v.status, v.detail))
}

fn state(facts: &mut Facts) -> &mut LedgerState {
    match &mut facts.ledgers[0].state {
        Ok(Some(state)) => state,
        other => panic!("the fixture's ledger holds a reading: {other:?}"),
    }
}

/// The table: the names `senergy check` prints, in the order an admin fixes things, and
/// only AcctGatherEnergyType's rule ending the verdict (nothing else applies without one
/// of the family's plugins).
#[test]
fn the_rules_are_in_the_order_an_admin_fixes_things() {
    let names: Vec<_> = RULES.iter().map(|r| r.name).collect();
    assert_eq!(
        names,
        [
            "config",
            "plugin",
            "slurmd",
            "attribution",
            "source",
            "ledger",
            "power",
            "static",
            "probe",
            "log"
        ]
    );
    let decisive: Vec<_> = RULES
        .iter()
        .filter(|r| r.decisive)
        .map(|r| r.name)
        .collect();
    assert_eq!(decisive, ["config"]);
}

#[test]
fn config_wants_one_of_the_familys_plugins() {
    let mut facts = healthy_facts();
    assert_eq!(
        said(config(&facts)),
        [(
            Status::Ok,
            "AcctGatherEnergyType=acct_gather_energy/rust_rapl (/etc/slurm/slurm.conf)".to_string()
        )]
    );
    facts.plugins.clear();
    facts.energy_types.clear();
    assert_eq!(
        said(config(&facts)),
        [(
            Status::Fail,
            "AcctGatherEnergyType=(none) in /etc/slurm/slurm.conf: none of this family's \
             plugins (acct_gather_energy/rust_rapl, ...)"
                .to_string()
        )]
    );
}

/// One judgement per plugin: missing, built for another release, built for this one, or
/// slurmd's release unknown.
#[test]
fn plugin_wants_each_file_built_for_slurmds_release() {
    let mut facts = healthy_facts();
    let so = |release| Ok(("/p/acct_gather_energy_rust_rapl.so".into(), release));
    facts.plugins = vec![
        PluginFile {
            plugin_type: "acct_gather_energy/rust_gpu".into(),
            found: Err("not in /p".into()),
        },
        PluginFile {
            plugin_type: "acct_gather_energy/rust_rapl".into(),
            found: so(R24),
        },
        PluginFile {
            plugin_type: "acct_gather_energy/rust_rapl".into(),
            found: so(R22),
        },
    ];
    assert_eq!(
        said(plugin(&facts)),
        [
            (
                Status::Fail,
                "acct_gather_energy/rust_gpu: not in /p".to_string()
            ),
            (
                Status::Fail,
                "/p/acct_gather_energy_rust_rapl.so is built for Slurm 24.11.5, slurmd here \
                 is 22.05.8 (/usr/sbin/slurmd): Slurm refuses to load it (install the build \
                 for 22.05.8)"
                    .to_string()
            ),
            (
                Status::Ok,
                "/p/acct_gather_energy_rust_rapl.so, built for Slurm 22.05.8".to_string()
            ),
        ]
    );
    facts.plugins.drain(..2);
    facts.slurmd_release = Err("no slurmd on PATH".into());
    assert_eq!(
        said(plugin(&facts)),
        [(
            Status::Warn,
            "/p/acct_gather_energy_rust_rapl.so, built for Slurm 22.05.8; slurmd's release \
             is unknown (no slurmd on PATH)"
                .to_string()
        )]
    );
}

#[test]
fn slurmd_wants_one_for_this_node_and_says_why_others_are_not() {
    let mut facts = healthy_facts();
    assert_eq!(
        said(slurmd(&facts)),
        [(Status::Ok, "running for node n1 (pid 42)".to_string())]
    );
    facts.slurmd_pid = None;
    facts.other_slurmds = vec![(7, "runs for node n2".into()), (8, "reads /x.conf".into())];
    assert_eq!(
        said(slurmd(&facts)),
        [(
            Status::Fail,
            "no slurmd runs for node n1 with /etc/slurm/slurm.conf on this host; pid 7 runs \
             for node n2; pid 8 reads /x.conf"
                .to_string()
        )]
    );
}

#[test]
fn attribution_speaks_of_a_shared_split_only() {
    let mut facts = healthy_facts();
    assert_eq!(said(attribution(&facts)), []);
    facts.shared = Some(Ok(()));
    assert_eq!(
        said(attribution(&facts)),
        [(
            Status::Ok,
            "EnergyAttribution=shared: Slurm's job cgroups are there".to_string()
        )]
    );
    facts.shared = Some(Err("no cgroup v2".into()));
    assert_eq!(
        said(attribution(&facts)),
        [(
            Status::Fail,
            "EnergyAttribution=shared: no cgroup v2; every step gets the node's energy".to_string()
        )]
    );
}

/// The ledger's own words, else the log's last "measuring" line, else not said; nothing
/// where the ledger holds no reading.
#[test]
fn source_says_what_the_ledger_or_the_log_says_is_read() {
    let mut facts = healthy_facts();
    let ok = |s: &str| Some((Status::Ok, s.to_string()));
    assert_eq!(
        said_of_ledger(source, &facts),
        ok("rust_rapl: RAPL of 2 packages")
    );
    state(&mut facts).source.clear();
    assert_eq!(said_of_ledger(source, &facts), ok("(not said)"));
    facts.log.measuring = vec!["RAPL via MSRs".into(), "RAPL via powercap".into()];
    assert_eq!(said_of_ledger(source, &facts), ok("RAPL via powercap"));
    facts.ledgers[0].state = Ok(None);
    assert_eq!(said_of_ledger(source, &facts), None);
    facts.ledgers[0].state = Err("unreadable".into());
    assert_eq!(said_of_ledger(source, &facts), None);
}

/// Unreadable, missing, stale past the bound (the log's reason, or where to look), or
/// fresh up to and at the bound.
#[test]
fn ledger_wants_a_reading_within_the_staleness_bound() {
    let mut facts = healthy_facts();
    let path = "/s/energy-ledger.0.json";
    assert_eq!(
        said_of_ledger(ledger, &facts),
        Some((
            Status::Ok,
            format!("{path}: last reading 0.5 s ago, 1 job(s) on the node")
        ))
    );
    facts.now = 999.5 + STALE_AFTER_SECS;
    assert_eq!(
        said_of_ledger(ledger, &facts),
        Some((
            Status::Ok,
            format!("{path}: last reading 10.0 s ago, 1 job(s) on the node")
        ))
    );
    facts.now = 1060.0;
    facts.log.problems = vec!["error: acct_gather_energy/rust_rapl: EIO".into()];
    assert_eq!(
        said_of_ledger(ledger, &facts),
        Some((
            Status::Fail,
            format!(
                "{path}: the last reading is 60 s old: readings have stopped; slurmd's log: \
                 error: acct_gather_energy/rust_rapl: EIO"
            )
        ))
    );
    facts.log = LogFacts::default();
    facts.ledgers[0].state = Ok(None);
    assert_eq!(
        said_of_ledger(ledger, &facts),
        Some((
            Status::Fail,
            format!(
                "no ledger at {path}: slurmd has taken no reading from \
                 acct_gather_energy/rust_rapl since the ledger began; slurmd logs to syslog \
                 (journalctl -u slurmd | grep rust_)"
            )
        ))
    );
    facts.ledgers[0].state = Err("cannot read it: permission".into());
    assert_eq!(
        said_of_ledger(ledger, &facts),
        Some((Status::Fail, "cannot read it: permission".to_string()))
    );
}

/// Power a node can draw, none (a warning), or more than a node can draw; nothing of a
/// stale ledger's.
#[test]
fn power_wants_a_figure_a_node_can_draw() {
    let mut facts = healthy_facts();
    let since = crate::output::local_time(900);
    let judged = |facts: &Facts| said_of_ledger(power, facts);
    assert_eq!(
        judged(&facts),
        Some((Status::Ok, format!("250.0 W now; 25000 J since {since}")))
    );
    state(&mut facts).watts = 0.0;
    assert_eq!(
        judged(&facts),
        Some((
            Status::Warn,
            format!("0.0 W now; 25000 J since {since}: the source reports no power")
        ))
    );
    state(&mut facts).watts = MAX_NODE_WATTS + 1.0;
    assert_eq!(
        judged(&facts),
        Some((
            Status::Fail,
            format!(
                "100001.0 W now; 25000 J since {since}: more than a node can draw, a broken \
                 reading"
            )
        ))
    );
    facts.now = 1060.0;
    assert_eq!(judged(&facts), None);
}

#[test]
fn static_says_what_the_ledger_learned_or_that_it_has_not() {
    let mut facts = healthy_facts();
    let ok = |s: &str| Some((Status::Ok, s.to_string()));
    assert_eq!(
        said_of_ledger(static_power, &facts),
        ok(
            "lowest power held over 10 s: 196.3 W (the static power EnergyAttribution=shared \
            splits by holding, unless EnergyAttributionIdleWatts sets it)"
        )
    );
    state(&mut facts).learned_idle_watts = None;
    assert_eq!(
        said_of_ledger(static_power, &facts),
        ok("lowest power held over 10 s: not learned yet")
    );
    facts.now = 1060.0;
    assert_eq!(said_of_ledger(static_power, &facts), None);
}

/// A source that answers senergy but not slurmd is a warning; none at all a failure.
#[test]
fn probe_says_whether_the_source_answers_directly() {
    let mut facts = healthy_facts();
    assert_eq!(said(probe(&facts)), []);
    facts.probes = vec![
        (
            "acct_gather_energy/rust_rapl".into(),
            Ok("RAPL of 2 packages".into()),
        ),
        ("acct_gather_energy/rust_gpu".into(), Err("no GPU".into())),
    ];
    assert_eq!(
        said(probe(&facts)),
        [
            (
                Status::Warn,
                "acct_gather_energy/rust_rapl: the source answers senergy directly (RAPL of 2 \
                 packages), not slurmd"
                    .to_string()
            ),
            (
                Status::Fail,
                "acct_gather_energy/rust_gpu: this node has no source it can read: no GPU"
                    .to_string()
            ),
        ]
    );
}

/// The plugins' problems are a warning while every ledger is fresh (a stale one's
/// failure already gave the last); an unreadable log is a warning always.
#[test]
fn log_warns_of_past_problems_and_an_unreadable_log() {
    let mut facts = healthy_facts();
    assert_eq!(said(log(&facts)), []);
    facts.log.problems = vec!["error: a".into(), "error: b".into()];
    facts.log.unreadable = Some("cannot read /l/slurmd.log: permission".into());
    let unreadable = (
        Status::Warn,
        "cannot read /l/slurmd.log: permission".to_string(),
    );
    assert_eq!(
        said(log(&facts)),
        [
            (
                Status::Warn,
                "2 problem line(s) from the plugin since slurmd started; the last: error: b"
                    .to_string()
            ),
            unreadable.clone(),
        ]
    );
    facts.now = 1060.0;
    assert_eq!(said(log(&facts)), [unreadable]);
}
