//! A running `pmsim` (a simulated HPE Cray EX node controller); killed on drop.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::bin;

pub struct PmSim {
    pub dir: PathBuf,
    child: Child,
}

impl PmSim {
    /// `args`: pmsim's options, e.g. `--accels 2`.
    pub fn start(dir: &Path, args: &str) -> PmSim {
        crate::hardware_time::hardware_dir(dir);
        let child = Command::new(bin("pmsim"))
            .arg("run")
            .arg(dir)
            .args(args.split_whitespace())
            .spawn()
            .expect("start pmsim");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("truth").exists() {
            assert!(Instant::now() < deadline, "pmsim did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        PmSim {
            dir: dir.to_path_buf(),
            child,
        }
    }

    /// The directory the plugin reads (`EnergyPmCountersDir`).
    pub fn counters(&self) -> PathBuf {
        self.dir.join("pm_counters")
    }

    pub fn acct_gather(&self) -> String {
        format!("EnergyPmCountersDir={}\n", self.counters().display())
    }

    /// Shell text that sets the node's power (for job scripts).
    pub fn set_command(&self, watts: u32) -> String {
        format!(
            "{} set {} {watts}",
            bin("pmsim").display(),
            self.dir.display()
        )
    }

    pub fn set(&self, watts: u32) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(self.set_command(watts))
            .status()
            .expect("pmsim set");
        assert!(status.success());
    }

    pub fn glitch(&self, what: &str, secs: f64) {
        let status = Command::new(bin("pmsim"))
            .arg("glitch")
            .arg(&self.dir)
            .args([what, &secs.to_string()])
            .status()
            .expect("pmsim glitch");
        assert!(status.success());
    }

    pub fn power_log(&self) -> PathBuf {
        self.dir.join("power.log")
    }

    /// True joules since the simulator started: the node's, then each part's by name.
    pub fn truth(&self) -> (f64, Vec<(String, f64)>) {
        let text = fs::read_to_string(self.dir.join("truth")).expect("truth");
        let mut words = text.split_whitespace();
        let node = words.next().and_then(|t| t.parse().ok()).expect("truth");
        let parts = words
            .filter_map(|w| {
                let (name, j) = w.split_once('=')?;
                Some((name.to_string(), j.parse().ok()?))
            })
            .collect();
        (node, parts)
    }

    pub fn node_truth(&self) -> f64 {
        self.truth().0
    }
}

impl Drop for PmSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
