//! Waits on what a node's slurmd publishes: its ledger (the file every step reads its
//! figure from, replaced by a rename at each sample, about once a second). A test that
//! measures over a window of steady power starts it at a sample taken after the power
//! changed, and a job's share starts once slurmd has it in the ledger: conditions these
//! wait for, where a fixed sleep would guess how long they take.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Cluster;
use crate::poll_until;

/// How long slurmd may take to publish a sample: a second apart, late on a loaded machine.
const SAMPLE_WAIT: Duration = Duration::from_secs(30);

impl Cluster {
    /// Polls `look` until it gives a value, for `timeout` at most ([`crate::wait_until`]);
    /// fails naming `what` it waited for, with the cluster's logs.
    pub fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        look: impl FnMut() -> Option<T>,
    ) -> T {
        poll_until(timeout, look)
            .unwrap_or_else(|| panic!("{what}: not seen within {timeout:?}\n{}", self.logs()))
    }

    /// Node `k`'s ledger file.
    pub fn ledger_path(&self, k: usize) -> PathBuf {
        self.dir.join(format!("spool/n{k}/energy-ledger.0.json"))
    }

    /// Node `k`'s ledger, one whole sample (slurmd replaces the file by a rename), as text
    /// and JSON; `None` before slurmd wrote one.
    pub fn ledger(&self, k: usize) -> Option<(String, serde_json::Value)> {
        let text = fs::read_to_string(self.ledger_path(k)).ok()?;
        let json = serde_json::from_str(&text).ok()?;
        Some((text, json))
    }

    /// Waits until node `k`'s slurmd has published `n` more samples than now: with `n` = 2
    /// the latest sample's interval began after this call (a power set before it is steady
    /// over the interval).
    pub fn wait_for_samples(&self, k: usize, n: usize) {
        self.wait_for_rewrites(&self.ledger_path(k), n);
    }

    /// Waits until node `k`'s ledger holds a sample over the power set before this call
    /// alone, where a window of ledger samples at steady power can start: the sample that
    /// sees a power step may hold the counter's jump undecided (a burst or a glitch?), the
    /// next confirms it and counts it in its interval (capped static power, the rest
    /// dynamic), the third is the new power's. Not for live figures (`sstat`): they are
    /// brought forward at a published power taken over a second or more, and a step's ring
    /// makes a sample milliseconds after the one before: time, not a count of samples.
    pub fn wait_past_power_step(&self, k: usize) {
        self.wait_for_samples(k, 3);
    }

    /// Waits until slurmd has replaced the file at `path` (its ledger, its metrics file)
    /// `n` more times than now, each a rename that changes the file's identity (inode and
    /// mtime). Looks far more often than slurmd writes (twice a second at most): a write
    /// missed only makes the wait longer.
    pub fn wait_for_rewrites(&self, path: &Path, n: usize) {
        let id = || {
            fs::metadata(path)
                .ok()
                .map(|m| (m.ino(), m.mtime(), m.mtime_nsec()))
        };
        let mut last = id();
        let mut seen = 0;
        self.wait_until(
            &format!("{n} more writes of {}", path.display()),
            SAMPLE_WAIT * n as u32,
            || {
                let now = id();
                if now.is_some() && now != last {
                    seen += 1;
                    last = now;
                }
                (seen >= n).then_some(())
            },
        )
    }

    /// Waits until node `k`'s ledger lists each of `jobs` (slurmd has found them and
    /// charges them from that sample on).
    pub fn wait_for_jobs_in_ledger(&self, k: usize, jobs: &[u32]) {
        self.wait_until(
            &format!("jobs {jobs:?} in n{k}'s ledger"),
            SAMPLE_WAIT,
            || {
                let (_, ledger) = self.ledger(k)?;
                let listed = ledger["jobs"].as_array()?;
                jobs.iter()
                    .all(|&j| {
                        listed
                            .iter()
                            .any(|x| x["job"].as_u64() == Some(u64::from(j)))
                    })
                    .then_some(())
            },
        )
    }
}
