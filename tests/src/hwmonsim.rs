//! A running `hwmonsim` (the kernel's hwmon class with ACPI power meters: NVIDIA Grace
//! Hopper's, Grace's or a server's); killed on drop.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::bin;

pub struct HwmonSim {
    pub dir: PathBuf,
    child: Child,
}

impl HwmonSim {
    /// `args`: hwmonsim's options, e.g. `--platform gh200 --sockets 2`.
    pub fn start(dir: &Path, args: &str) -> HwmonSim {
        crate::hardware_time::hardware_dir(dir);
        let child = Command::new(bin("hwmonsim"))
            .arg("run")
            .arg(dir)
            .args(args.split_whitespace())
            .spawn()
            .expect("start hwmonsim");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("truth").exists() {
            assert!(Instant::now() < deadline, "hwmonsim did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        HwmonSim {
            dir: dir.to_path_buf(),
            child,
        }
    }

    /// The hwmon class directory it writes (`EnergyHwmonDir`; a cluster node sees it at
    /// `/sys/class/hwmon`, bound there by tests/fakehw/node-hook.sh).
    pub fn hwmon(&self) -> PathBuf {
        self.dir.join("hwmon")
    }

    pub fn acct_gather(&self) -> String {
        format!("EnergyHwmonDir={}\n", self.hwmon().display())
    }

    /// Shell text that sets the node's power (for job scripts).
    pub fn set_command(&self, watts: u32) -> String {
        format!(
            "{} set {} {watts}",
            bin("hwmonsim").display(),
            self.dir.display()
        )
    }

    pub fn set(&self, watts: u32) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(self.set_command(watts))
            .status()
            .expect("hwmonsim set");
        assert!(status.success());
    }

    pub fn glitch(&self, what: &str, secs: f64) {
        let status = Command::new(bin("hwmonsim"))
            .arg("glitch")
            .arg(&self.dir)
            .args([what, &secs.to_string()])
            .status()
            .expect("hwmonsim glitch");
        assert!(status.success());
    }

    pub fn power_log(&self) -> PathBuf {
        self.dir.join("power.log")
    }

    /// True joules since the simulator started: the node's, then each rail kind's by name.
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

impl Drop for HwmonSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
