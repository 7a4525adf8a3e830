use super::*;

fn errors(findings: &[Finding]) -> Vec<(Option<usize>, &str)> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| (f.line, f.message.as_str()))
        .collect()
}

fn warnings(findings: &[Finding]) -> Vec<(Option<usize>, &str)> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .map(|f| (f.line, f.message.as_str()))
        .collect()
}

/// The shipped examples' kind of file: every key known, every value taken.
#[test]
fn a_good_file_has_nothing_to_say() {
    let text = "# the family's file\n\
                EnergyRaplSource=auto\n\
                EnergyAttribution=shared   # split the node\n\
                energymetricsfile=/var/lib/prometheus/node-exporter/slurm_energy.prom\n\
                ProfileInfluxDBHost=influx:8086\n\
                \n";
    assert_eq!(check(text, &[]), vec![]);
    assert_eq!(check(text, &["rust_rapl"]), vec![]);
}

/// A typo of a key stops every daemon (Slurm's parser is fatal at it): an error on its
/// line naming the key it most likely meant.
#[test]
fn an_unknown_key_is_an_error_with_the_key_it_likely_meant() {
    let found = check(
        "EnergyRaplSource=auto\nEnergyAtribution=shared\nFooBar=1\n",
        &[],
    );
    let said = errors(&found);
    assert_eq!(said.len(), 2, "{found:?}");
    assert_eq!(said[0].0, Some(2));
    assert!(
        said[0].1.starts_with(
            "EnergyAtribution: no acct_gather plugin registers this key (did you mean \
             EnergyAttribution?)"
        ),
        "{}",
        said[0].1
    );
    assert_eq!(said[1].0, Some(3));
    assert!(!said[1].1.contains("did you mean"), "{}", said[1].1);
    let found = check("just words\n", &[]);
    assert_eq!(errors(&found).len(), 1);
    assert!(errors(&found)[0].1.contains("expected Key=Value"));
}

/// Every bad value is said on its own line with what slurmd says of it, not only the
/// first of a plugin's.
#[test]
fn every_bad_value_is_an_error_on_its_line() {
    let text = "EnergyRaplSource=powercap-ish\n\
                EnergyRedfishUrl=ftp://bmc-%n\n\
                EnergyRedfishFrequency=0\n\
                EnergyAttribution=half\n";
    let found = check(text, &[]);
    let errors = errors(&found);
    let lines: Vec<Option<usize>> = errors.iter().map(|e| e.0).collect();
    assert_eq!(lines, [Some(1), Some(2), Some(3), Some(4)], "{found:?}");
    assert!(errors[0].1.starts_with("EnergyRaplSource=powercap-ish: "));
    assert!(
        errors[0]
            .1
            .ends_with("rust_rapl reports no energy on any node until it is fixed")
    );
    assert!(
        errors[1].1.contains("the scheme must be http or https"),
        "{}",
        errors[1].1
    );
    assert!(
        errors[2].1.contains("expected seconds from 0.1"),
        "{}",
        errors[2].1
    );
    assert!(
        errors[3].1.starts_with("EnergyAttribution=half: "),
        "{}",
        errors[3].1
    );
    assert!(errors[3].1.ends_with("falls back to its default for it"));
}

/// A refusal that needs two keys (a password given twice) is said too.
#[test]
fn a_refusal_of_two_keys_together_is_said() {
    let text = "EnergyIPMIPassword=x\nEnergyIPMIPasswordFile=/etc/slurm/bmc.pass\n";
    let found = check(text, &["rust_ipmi"]);
    let errors = errors(&found);
    assert_eq!(errors.len(), 1, "{found:?}");
    assert_eq!(errors[0].0, Some(2));
    assert!(
        errors[0].1.contains("EnergyIPMIPassword is set too"),
        "{}",
        errors[0].1
    );
}

/// What is right on one node and wrong on many: a learned constant set, one BMC named;
/// and a key no plugin named reads, and a key given twice.
#[test]
fn per_node_values_in_a_shared_file_are_warned_of() {
    let text = "EnergyAttribution=shared\n\
                EnergyAttributionIdleWatts=120\n\
                EnergyGpuIdleWatts=60\n\
                EnergyRedfishUrl=https://10.1.2.3\n\
                EnergyIPMIHost=bmc-%n\n\
                EnergyAttribution=node\n";
    let found = check(text, &["rust_rapl", "rust_gpu"]);
    assert_eq!(errors(&found), vec![], "{found:?}");
    let warned: Vec<Option<usize>> = warnings(&found).iter().map(|w| w.0).collect();
    // line 4 twice: rust_redfish's key, which neither plugin reads, and one BMC; line 5:
    // rust_ipmi's; line 6: given again
    assert_eq!(
        warned,
        [Some(2), Some(3), Some(4), Some(4), Some(5), Some(6)],
        "{found:?}"
    );
    let text: Vec<&str> = warnings(&found).iter().map(|w| w.1).collect();
    assert!(text[0].starts_with("EnergyAttributionIdleWatts=120: one node's figure"));
    assert!(text[3].contains("use %n"), "{}", text[3]);
    assert!(text[5].contains("line 1 too"), "{}", text[5]);
}

#[test]
fn slurm_conf_names_the_plugins_and_the_cgroups_shared_mode_needs() {
    let conf = "AcctGatherEnergyType=acct_gather_energy/rust_rapl,acct_gather_energy/rust_gpu\n\
                AcctGatherNodeFreq=30\n\
                ProctrackType=proctrack/cgroup\n\
                TaskPlugin=task/affinity,task/cgroup\n";
    let (named, found) = check_slurm_conf(conf, true);
    assert_eq!(named, ["rust_rapl", "rust_gpu"]);
    assert_eq!(found, vec![]);
    // the shipped examples before issue 52: shared mode would charge each job the node
    let linux = "AcctGatherEnergyType=acct_gather_energy/rust_rapl\n\
                 ProctrackType=proctrack/linuxproc\n\
                 JobAcctGatherType=jobacct_gather/linux\n";
    let (_, found) = check_slurm_conf(linux, true);
    assert_eq!(errors(&found).len(), 1, "{found:?}");
    assert!(
        errors(&found)[0]
            .1
            .contains("ProctrackType=proctrack/cgroup (it is proctrack/linuxproc)")
    );
    assert!(
        warnings(&found)[0]
            .1
            .contains("AcctGatherNodeFreq is not set")
    );
    let (named, found) = check_slurm_conf(
        "AcctGatherEnergyType=acct_gather_energy/rust_rappl\n",
        false,
    );
    assert!(named.is_empty());
    assert_eq!(errors(&found).len(), 2, "{found:?}");
}

/// The examples the package installs are files an admin pushes as they are: every one
/// checks clean (no error, no warning) for the plugin it is for, with its slurm.conf, and
/// with shared mode switched on as its comment says.
#[test]
fn every_shipped_example_checks_clean() {
    let conf = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../conf"));
    let mut checked = 0;
    for plugin in family::PLUGINS.iter().map(|entry| entry.name) {
        let read = |name: String| {
            std::fs::read_to_string(conf.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let acct_gather = read(format!("acct_gather.conf.{plugin}"));
        let slurm = read(format!("slurm.conf.{plugin}"));
        let shared = acct_gather.replace("#EnergyAttribution=shared", "EnergyAttribution=shared");
        for text in [&acct_gather, &shared] {
            let asks_shared = crate::config::file_value(text, "EnergyAttribution")
                .is_some_and(|v| v.eq_ignore_ascii_case("shared"));
            let (named, found) = check_slurm_conf(&slurm, asks_shared);
            assert_eq!(found, vec![], "slurm.conf.{plugin}");
            assert!(
                named.contains(&plugin),
                "slurm.conf.{plugin} names {named:?}"
            );
            assert_eq!(check(text, &named), vec![], "acct_gather.conf.{plugin}");
        }
        checked += 1;
    }
    assert_eq!(checked, 7);
}
