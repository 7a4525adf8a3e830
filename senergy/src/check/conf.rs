//! `senergy check --conf FILE`: an acct_gather.conf (and slurm.conf's energy lines) checked
//! before configuration management pushes it to every node, with the same parse the plugins
//! run in slurmd. Needs no Slurm, no root, no node: an admin's workstation will do.

use std::path::{Path, PathBuf};

use serde_json::json;
use slurm_energy_logic::{Finding, Severity, check_acct_gather_conf, check_slurm_conf, file_value};

/// What to check: the file, and what names its plugins.
#[derive(Debug, PartialEq)]
pub struct ConfPlan {
    pub file: PathBuf,
    /// A slurm.conf whose `AcctGatherEnergyType` names the plugins.
    pub slurm_conf: Option<PathBuf>,
    /// The plugins named on the command line (`rust_rapl`); empty: those whose keys the
    /// file sets.
    pub plugins: Vec<String>,
    pub json: bool,
}

/// A finding and the file it is of.
struct Said {
    file: PathBuf,
    finding: Finding,
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The findings of `plan`, or why the files cannot be read.
fn findings(plan: &ConfPlan) -> Result<Vec<Said>, String> {
    let text = read(&plan.file)?;
    let shared =
        file_value(&text, "EnergyAttribution").is_some_and(|v| v.eq_ignore_ascii_case("shared"));
    let mut said = Vec::new();
    let named: Vec<String> = match &plan.slurm_conf {
        Some(path) => {
            let (named, found) = check_slurm_conf(&read(path)?, shared);
            said.extend(found.into_iter().map(|finding| Said {
                file: path.clone(),
                finding,
            }));
            named.iter().map(|n| n.to_string()).collect()
        }
        None => plan.plugins.clone(),
    };
    let named: Vec<&str> = named.iter().map(String::as_str).collect();
    said.extend(
        check_acct_gather_conf(&text, &named)
            .into_iter()
            .map(|finding| Said {
                file: plan.file.clone(),
                finding,
            }),
    );
    Ok(said)
}

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

/// Prints the findings, `FILE:LINE: error: ...` one a line (as compilers say them), or as
/// JSON; exits 0 where nothing is an error, `unhealthy` where something is, `unreadable`
/// where a file cannot be read.
pub fn run(plan: &ConfPlan, unhealthy: u8, unreadable: u8) -> u8 {
    let said = match findings(plan) {
        Ok(said) => said,
        Err(why) => {
            eprintln!("senergy check: {why}");
            return unreadable;
        }
    };
    let errors = said
        .iter()
        .filter(|s| s.finding.severity == Severity::Error)
        .count();
    if plan.json {
        let findings: Vec<_> = said
            .iter()
            .map(|s| {
                json!({
                    "file": s.file.display().to_string(),
                    "line": s.finding.line,
                    "severity": severity(s.finding.severity),
                    "message": s.finding.message,
                })
            })
            .collect();
        let value = json!({
            "schema_version": 1,
            "file": plan.file.display().to_string(),
            "ok": errors == 0,
            "findings": findings,
        });
        println!("{value:#}");
    } else {
        for s in &said {
            let at = s.finding.line.map(|l| format!(":{l}")).unwrap_or_default();
            println!(
                "{}{at}: {}: {}",
                s.file.display(),
                severity(s.finding.severity),
                s.finding.message
            );
        }
        let warnings = said.len() - errors;
        println!(
            "{}: {errors} error(s), {warnings} warning(s){}",
            plan.file.display(),
            if errors == 0 {
                ": slurmd takes it"
            } else {
                ": fix before pushing it"
            }
        );
    }
    if errors == 0 { 0 } else { unhealthy }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit statuses main.rs passes ([`crate::exit`]'s UNHEALTHY and NOT_FOUND).
    const UNHEALTHY: u8 = 6;
    const UNREADABLE: u8 = 3;

    /// `acct_gather` (and `slurm`, a slurm.conf) written to a temporary directory: the plan
    /// that checks them, `plugins` named where no slurm.conf is.
    fn plan(dir: &Path, acct_gather: &str, slurm: Option<&str>, plugins: &[&str]) -> ConfPlan {
        let file = dir.join("acct_gather.conf");
        std::fs::write(&file, acct_gather).expect("write acct_gather.conf");
        let slurm_conf = slurm.map(|text| {
            let path = dir.join("slurm.conf");
            std::fs::write(&path, text).expect("write slurm.conf");
            path
        });
        ConfPlan {
            file,
            slurm_conf,
            plugins: plugins.iter().map(|p| p.to_string()).collect(),
            json: false,
        }
    }

    /// Each finding as (the file's name, its line, its severity), in order.
    fn said(plan: &ConfPlan) -> Vec<(String, Option<usize>, &'static str)> {
        findings(plan)
            .expect("readable files")
            .iter()
            .map(|s| {
                let name = s.file.file_name().map(|n| n.to_string_lossy().into_owned());
                (
                    name.unwrap_or_default(),
                    s.finding.line,
                    severity(s.finding.severity),
                )
            })
            .collect()
    }

    const SLURM_CONF: &str = "AcctGatherEnergyType=acct_gather_energy/rust_rapl\n\
                              AcctGatherNodeFreq=30\n\
                              ProctrackType=proctrack/cgroup\n\
                              TaskPlugin=task/cgroup,task/affinity\n";

    /// A file slurmd takes exits 0, warnings or not; one with an error exits 6, the error
    /// on its file's line; a file that cannot be read exits 3.
    #[test]
    fn the_exit_status_says_whether_slurmd_takes_the_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let clean = plan(
            dir.path(),
            "EnergyRaplSource=powercap\nEnergyAttribution=shared\n",
            Some(SLURM_CONF),
            &[],
        );
        assert_eq!(said(&clean), vec![]);
        assert_eq!(run(&clean, UNHEALTHY, UNREADABLE), 0);

        // one node's static power in a file for every node: a warning, still taken
        let warned = plan(
            dir.path(),
            "EnergyRaplSource=powercap\nEnergyAttributionIdleWatts=120\n",
            None,
            &["rust_rapl"],
        );
        assert_eq!(
            said(&warned),
            vec![("acct_gather.conf".to_string(), Some(2), "warning")]
        );
        assert_eq!(run(&warned, UNHEALTHY, UNREADABLE), 0);

        // a typo of a key stops every slurmd: an error on its line
        let typo = plan(
            dir.path(),
            "EnergyRaplSource=powercap\n\nEnergyRaplSourc=msr\n",
            None,
            &["rust_rapl"],
        );
        assert_eq!(
            said(&typo),
            vec![("acct_gather.conf".to_string(), Some(3), "error")]
        );
        assert_eq!(run(&typo, UNHEALTHY, UNREADABLE), UNHEALTHY);

        let mut gone = plan(dir.path(), "", None, &[]);
        gone.file = dir.path().join("no-such.conf");
        assert!(findings(&gone).is_err());
        assert_eq!(run(&gone, UNHEALTHY, UNREADABLE), UNREADABLE);
        let mut no_slurm = plan(dir.path(), "EnergyRaplSource=auto\n", None, &[]);
        no_slurm.slurm_conf = Some(dir.path().join("no-such-slurm.conf"));
        assert_eq!(run(&no_slurm, UNHEALTHY, UNREADABLE), UNREADABLE);
    }

    /// slurm.conf names the plugins the file is for, and is judged by what the file asks:
    /// shared mode without Slurm's job cgroups is slurm.conf's error, a key of a plugin
    /// slurm.conf does not load the file's warning.
    #[test]
    fn slurm_conf_names_the_plugins_and_its_findings_are_its_own() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let linuxproc = "AcctGatherEnergyType=acct_gather_energy/rust_rapl\n\
                         AcctGatherNodeFreq=30\n\
                         ProctrackType=proctrack/linuxproc\n";
        let node_mode = plan(dir.path(), "EnergyAttribution=node\n", Some(linuxproc), &[]);
        assert_eq!(said(&node_mode), vec![]);
        let shared = plan(
            dir.path(),
            "EnergyAttribution=shared\nEnergyRedfishFrequency=5\n",
            Some(linuxproc),
            &[],
        );
        let found = said(&shared);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, "slurm.conf");
        assert_eq!(found[0].2, "error");
        let first = findings(&shared).expect("readable files").remove(0);
        assert!(
            first
                .finding
                .message
                .contains("ProctrackType=proctrack/cgroup (it is proctrack/linuxproc)"),
            "{}",
            first.finding.message
        );
        // rust_redfish's key, which the rust_rapl slurm.conf loads does not read
        assert_eq!(
            found[1],
            ("acct_gather.conf".to_string(), Some(2), "warning")
        );
        assert_eq!(run(&shared, UNHEALTHY, UNREADABLE), UNHEALTHY);
        // the same file, the plugins named on the command line instead: no slurm.conf, so
        // nothing said of the cgroups, and rust_redfish reads its key
        let named = plan(
            dir.path(),
            "EnergyAttribution=shared\nEnergyRedfishFrequency=5\n",
            None,
            &["rust_redfish"],
        );
        assert_eq!(said(&named), vec![]);
    }
}
