//! A simulated BMC (OpenIPMI ipmi_sim with DCMI, tests/ipmisim) on a free loopback port,
//! and the true energy of the power schedule it was given.

use std::fs;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{joules_between, power_schedule, workspace};

pub struct BmcSim {
    pub run: PathBuf,
    pub port: u16,
    pid: i32,
}

/// Ports handed out in this process: a port is free again the moment the probe socket
/// closes, so tests running in parallel could otherwise get the same one.
static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());

/// A UDP port whose TCP successor (the simulator's console) is free too.
fn free_port_pair() -> u16 {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    for _ in 0..100 {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        let port = udp.local_addr().expect("addr").port();
        let taken = |p: u16| handed_out.iter().any(|h| h.abs_diff(p) <= 1);
        if port < u16::MAX && !taken(port) && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port pair");
}

fn script(name: &str) -> PathBuf {
    workspace().join("tests/ipmisim").join(name)
}

impl BmcSim {
    pub fn start(run: &Path, watts: u32) -> BmcSim {
        let port = free_port_pair();
        let out = Command::new("sh")
            .arg(script("start_sim.sh"))
            .arg(run)
            .arg(watts.to_string())
            .arg(port.to_string())
            .output()
            .expect("start_sim.sh");
        assert!(
            out.status.success(),
            "ipmi_sim did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .expect("ipmi_sim pid");
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(
            alive,
            "ipmi_sim exited: {}",
            fs::read_to_string(run.join("ipmi_sim.log")).unwrap_or_default()
        );
        BmcSim {
            run: run.to_path_buf(),
            port,
            pid,
        }
    }

    pub fn set(&self, watts: u32) {
        let status = Command::new("sh")
            .arg(script("set_power.sh"))
            .arg(&self.run)
            .arg(watts.to_string())
            .status()
            .expect("set_power.sh");
        assert!(status.success());
    }

    /// Shell text that sets the power (for job scripts).
    pub fn set_command(&self, watts: u32) -> String {
        format!(
            "sh {} {} {watts}",
            script("set_power.sh").display(),
            self.run.display()
        )
    }

    /// Shell text that makes the DCMI power reading say `watts` for `secs` while the node's
    /// power (and the truth) stays as it is (for job scripts).
    pub fn glitch_command(&self, watts: u32, secs: f64) -> String {
        format!(
            "sh {} {} {watts} {secs}",
            script("glitch_power.sh").display(),
            self.run.display()
        )
    }

    /// The BMC states an active DCMI power limit of `watts` from now on.
    pub fn set_power_limit(&self, watts: u32) {
        fs::write(self.run.join("power_watts_limit"), format!("{watts}\n")).expect("limit");
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the simulator this struct started.
        unsafe { libc::kill(self.pid, signal) };
    }

    /// SIGSTOP: the BMC stops answering, as a hung BMC does.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Every power change: `"<unix ns> <watts>"` lines.
    pub fn power_log(&self) -> PathBuf {
        self.run.join("power.log")
    }

    /// True joules of the power schedule so far.
    pub fn true_joules(&self) -> f64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as f64;
        joules_between(&power_schedule(&self.power_log()), 0.0, now)
    }

    /// acct_gather.conf for this BMC. Readings every 0.25 s: a power step costs up to half
    /// a period of the step (trapezoid), which this keeps far below the tests' tolerance.
    /// The keys for this BMC, polled every 0.25 s with a 2 s timeout, and `extra`.
    pub fn acct_gather(&self, extra: &str) -> String {
        format!(
            "{}EnergyIPMIFrequency=0.25\nEnergyIPMITimeout=2\n{extra}",
            self.acct_gather_defaults()
        )
    }

    /// Only what reaching this BMC needs: every other key at its default.
    pub fn acct_gather_defaults(&self) -> String {
        format!(
            "EnergyIPMIHost=127.0.0.1:{}\nEnergyIPMIUsername=slurm\nEnergyIPMIPassword=slurmpass\n",
            self.port
        )
    }
}

impl Drop for BmcSim {
    fn drop(&mut self) {
        self.thaw();
        self.signal(libc::SIGTERM);
    }
}
