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
