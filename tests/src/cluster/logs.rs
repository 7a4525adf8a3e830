//! What a cluster's daemons logged: tails for a failure's message, a daemon's whole log,
//! and the energy plugins' warnings for a failed test's output.

use std::fs;

use super::Cluster;

impl Cluster {
    pub fn logs(&self) -> String {
        let mut text = String::new();
        if let Ok(entries) = fs::read_dir(self.dir.join("log")) {
            for e in entries.flatten() {
                let body = fs::read_to_string(e.path()).unwrap_or_default();
                let tail: Vec<&str> = body.lines().rev().take(30).collect();
                text.push_str(&format!("==> {}\n", e.path().display()));
                for l in tail.iter().rev() {
                    text.push_str(l);
                    text.push('\n');
                }
            }
        }
        text
    }

    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join("log").join(name)).unwrap_or_default()
    }

    /// The energy plugins' warnings and errors in each daemon's log, the last 40 of each
    /// (nothing when there are none).
    pub(super) fn energy_warnings(&self) -> String {
        let mut text = String::new();
        let mut entries: Vec<_> = fs::read_dir(self.dir.join("log"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            let body = fs::read_to_string(&path).unwrap_or_default();
            let said: Vec<&str> = body
                .lines()
                .filter(|l| {
                    l.contains("acct_gather_energy")
                        && (l.contains("warning") || l.contains("error"))
                })
                .collect();
            if said.is_empty() {
                continue;
            }
            if text.is_empty() {
                text.push_str("the energy plugins' warnings and errors:\n");
            }
            text.push_str(&format!("==> {}\n", path.display()));
            for l in &said[said.len().saturating_sub(40)..] {
                text.push_str(l);
                text.push('\n');
            }
        }
        text
    }
}
