use super::*;

pub(super) const R22: u32 = (22 << 16) | (5 << 8) | 8;
pub(super) const R24: u32 = (24 << 16) | (11 << 8) | 5;

pub(super) fn healthy_facts() -> Facts {
    Facts {
        node: "n1".into(),
        slurm_conf: "/etc/slurm/slurm.conf".into(),
        energy_types: vec!["acct_gather_energy/rust_rapl".into()],
        plugins: vec![PluginFile {
            plugin_type: "acct_gather_energy/rust_rapl".into(),
            found: Ok(("/p/acct_gather_energy_rust_rapl.so".into(), R22)),
        }],
        slurmd_pid: Some(42),
        slurmd_release: Ok((R22, "/usr/sbin/slurmd".into())),
        ledgers: vec![LedgerFact {
            plugin_type: "acct_gather_energy/rust_rapl".into(),
            path: "/s/energy-ledger.0.json".into(),
            state: Ok(Some(LedgerState {
                sampled_at: 999.5,
                watts: 250.0,
                joules: 25_000.0,
                since: 900.0,
                jobs: 1,
                source: "rust_rapl: RAPL of 2 packages".into(),
                learned_idle_watts: Some(196.34),
            })),
        }],
        log: LogFacts {
            file: Some("/l/slurmd.log".into()),
            ..LogFacts::default()
        },
        shared: None,
        probes: Vec::new(),
        other_slurmds: Vec::new(),
        now: 1000.0,
    }
}

fn failed(findings: &[Finding]) -> Vec<(&'static str, &str)> {
    findings
        .iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| (f.check, f.detail.as_str()))
        .collect()
}

#[test]
fn releases_read_and_print_as_slurm_numbers_them() {
    assert_eq!(parse_release("slurm 22.05.8"), Some(R22));
    assert_eq!(parse_release("24.11.5\n"), Some(R24));
    assert_eq!(parse_release("slurm 26.11.0-0rc1"), Some(0x1a_0b_00));
    assert_eq!(release(R22), "22.05.8");
    assert_eq!(release(R24), "24.11.5");
    for bad in ["", "slurm", "22.05", "22.05.x", "22.05.8.1", "22.300.1"] {
        assert_eq!(parse_release(bad), None, "{bad}");
    }
}

#[test]
fn a_healthy_node_passes_with_its_source_and_power() {
    let facts = healthy_facts();
    let findings = judge(&facts);
    assert!(healthy(&findings), "{findings:?}");
    let shown = text(&facts, &findings);
    assert!(shown.contains("RAPL of 2 packages"), "{shown}");
    assert!(shown.contains("250.0 W now"), "{shown}");
    assert!(
        shown.contains("last reading 0.5 s ago, 1 job(s)"),
        "{shown}"
    );
    assert!(shown.ends_with("verdict: OK\n"), "{shown}");
    let value = json(&facts, &findings);
    assert_eq!(value["healthy"], true);
}

/// The ledger's learned static power has its line and its number in the JSON; a
/// ledger that has learned none yet says so (`null`), never 0 W.
#[test]
fn the_learned_static_power_is_shown_or_said_not_learned() {
    let mut facts = healthy_facts();
    let findings = judge(&facts);
    let shown = text(&facts, &findings);
    assert!(
        shown.contains(
            "\n  ok    static       lowest power held over 10 s: 196.3 W (the static power \
                 EnergyAttribution=shared splits by holding, unless EnergyAttributionIdleWatts \
                 sets it)\n"
        ),
        "{shown}"
    );
    let value = json(&facts, &findings);
    assert_eq!(
        value["ledgers"],
        serde_json::json!([{"plugin": "acct_gather_energy/rust_rapl", "learned_idle_watts": 196.34}])
    );
    if let Ok(Some(state)) = &mut facts.ledgers[0].state {
        state.learned_idle_watts = None;
    }
    let findings = judge(&facts);
    assert!(healthy(&findings), "{findings:?}");
    let shown = text(&facts, &findings);
    assert!(
        shown.contains("\n  ok    static       lowest power held over 10 s: not learned yet\n"),
        "{shown}"
    );
    let value = json(&facts, &findings);
    assert!(
        value["ledgers"][0]["learned_idle_watts"].is_null(),
        "{value}"
    );
}

#[test]
fn a_plugin_built_for_another_release_fails_naming_both() {
    let mut facts = healthy_facts();
    facts.plugins[0].found = Ok(("/p/acct_gather_energy_rust_rapl.so".into(), R24));
    let findings = judge(&facts);
    let failed = failed(&findings);
    assert_eq!(failed.len(), 1, "{findings:?}");
    assert_eq!(failed[0].0, "plugin");
    assert!(
        failed[0]
            .1
            .contains("built for Slurm 24.11.5, slurmd here is 22.05.8 (/usr/sbin/slurmd)"),
        "{}",
        failed[0].1
    );
    // slurmd's release unknown: said, not failed
    facts.slurmd_release = Err("no slurmd on PATH".into());
    assert!(healthy(&judge(&facts)));
}

#[test]
fn not_one_of_ours_fails_at_once() {
    let mut facts = healthy_facts();
    facts.energy_types = vec!["acct_gather_energy/rapl".into()];
    facts.plugins.clear();
    let findings = judge(&facts);
    assert_eq!(findings.len(), 1);
    assert!(
        findings[0]
            .detail
            .contains("AcctGatherEnergyType=acct_gather_energy/rapl")
    );
    assert!(!healthy(&findings));
}

#[test]
fn a_missing_or_stale_ledger_fails_with_the_logs_reason() {
    let mut facts = healthy_facts();
    facts.log.problems =
        vec!["[t] error: acct_gather_energy/rust_rapl: no energy can be measured".into()];
    facts.ledgers[0].state = Ok(None);
    let findings = judge(&facts);
    let failed = failed(&findings);
    assert_eq!(failed.len(), 1, "{findings:?}");
    assert!(failed[0].1.contains("no ledger at"), "{}", failed[0].1);
    assert!(
        failed[0].1.contains("no energy can be measured"),
        "{}",
        failed[0].1
    );

    let mut facts = healthy_facts();
    facts.now = 1060.0;
    let failed_now = judge(&facts);
    let failed = self::failed(&failed_now);
    assert!(failed[0].1.contains("60 s old"), "{failed:?}");
    // within the staleness bound, a problem of the past is a warning
    let mut facts = healthy_facts();
    facts.log.problems = vec!["[t] error: acct_gather_energy/rust_rapl: BMC timed out".into()];
    let findings = judge(&facts);
    assert!(healthy(&findings));
    assert!(
        findings
            .iter()
            .any(|f| f.status == Status::Warn && f.check == "log")
    );
}

#[test]
fn an_unreadable_ledger_and_a_stopped_slurmd_fail() {
    let mut facts = healthy_facts();
    facts.ledgers[0].state = Err("cannot read /s/energy-ledger.0.json: permission".into());
    facts.slurmd_pid = None;
    let checks: Vec<_> = failed(&judge(&facts)).iter().map(|f| f.0).collect();
    assert_eq!(checks, ["slurmd", "ledger"]);
}

#[test]
fn shared_mode_without_cgroups_fails_with_what_is_missing() {
    let mut facts = healthy_facts();
    facts.shared = Some(Err("it needs Slurm's job cgroups: ProctrackType=...".into()));
    let failed = failed(&judge(&facts))
        .iter()
        .map(|f| f.1.to_string())
        .collect::<Vec<_>>();
    assert_eq!(failed.len(), 1);
    assert!(failed[0].starts_with("EnergyAttribution=shared: it needs"));
}

#[test]
fn implausible_and_zero_power_are_told() {
    let mut facts = healthy_facts();
    if let Ok(Some(state)) = &mut facts.ledgers[0].state {
        state.watts = 1e9;
    }
    assert!(!healthy(&judge(&facts)));
    if let Ok(Some(state)) = &mut facts.ledgers[0].state {
        state.watts = 0.0;
    }
    let findings = judge(&facts);
    assert!(healthy(&findings));
    assert!(
        findings
            .iter()
            .any(|f| f.status == Status::Warn && f.check == "power")
    );
}

#[test]
fn the_log_gives_the_families_source_and_problems() {
    let log = "\
[2026-11-25T10:00:00.000] slurmd version 22.05.8 started
[2026-11-25T10:00:00.100] acct_gather_energy/rust_rapl: measuring RAPL via MSRs, 2 packages
[2026-11-25T10:00:00.200] error: Couldn't find the specified plugin name for gres/foo
[2026-11-25T10:00:01.000] error: acct_gather_energy/rust_rapl: reading energy failed: EIO
[2026-11-25T10:00:02.000] acct_gather_energy/rust_rapl: warning: a counter jumped
[2026-11-25T10:00:03.000] error: plugin_load_from_file: Incompatible Slurm plugin /p/acct_gather_energy_rust_gpu.so version (24.11.5)
";
    let (measuring, problems) = read_log(log);
    assert_eq!(measuring, ["RAPL via MSRs, 2 packages"]);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("EIO"));
    assert!(problems[2].contains("Incompatible"));
}
