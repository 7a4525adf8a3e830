//! A Redfish BMC for tests: sushy-tools' `sushy-static` (a real Redfish server) on a free
//! loopback port, serving a mockup from tests/redfish whose readings `redfishsim` keeps
//! current, over http or https (a test CA and a server certificate, made at test time).

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{bin, joules_between, power_schedule, workspace};

pub const PASSWORD: &str = "redfish-secret-42";

/// `SUSHY_STATIC`, else ci/deps.sh's virtual environment, else `sushy-static` on PATH.
fn sushy_static() -> PathBuf {
    if let Some(p) = std::env::var_os("SUSHY_STATIC").filter(|p| !p.is_empty()) {
        return p.into();
    }
    let cached = Path::new("/var/cache/rust-energy-slurm/sushy-tools/bin/sushy-static");
    if cached.exists() {
        return cached.into();
    }
    "sushy-static".into()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub struct RedfishSim {
    pub dir: PathBuf,
    pub port: u16,
    pub https: bool,
    sim: Child,
    server: Option<Child>,
    /// What runs the server ([`RedfishSim::start_in`]); empty: this process's namespaces.
    prefix: Vec<std::ffi::OsString>,
    /// The address the server listens on.
    addr: String,
}

impl RedfishSim {
    /// `mockup`: a directory of tests/redfish (`legacy`, `metrics`, `two-chassis`).
    pub fn start(dir: &Path, mockup: &str, https: bool) -> RedfishSim {
        Self::start_in(dir, mockup, https, Vec::new(), "127.0.0.1", free_port())
    }

    /// A BMC listening at `addr:port` where `prefix` runs programs (a node's namespaces,
    /// [`crate::cluster::Cluster::node_prefix`]): only that node reaches it.
    pub fn start_in(
        dir: &Path,
        mockup: &str,
        https: bool,
        prefix: Vec<std::ffi::OsString>,
        addr: &str,
        port: u16,
    ) -> RedfishSim {
        crate::hardware_time::hardware_dir(dir);
        let sim = Command::new(bin("redfishsim"))
            .arg("run")
            .arg(dir)
            .arg(workspace().join("tests/redfish").join(mockup))
            .spawn()
            .expect("start redfishsim");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.join("truth").exists() {
            assert!(Instant::now() < deadline, "redfishsim did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        if https {
            let status = Command::new("sh")
                .arg(workspace().join("tests/redfish/make-certs.sh"))
                .arg(dir.join("tls"))
                .status()
                .expect("make-certs.sh");
            assert!(status.success(), "make-certs.sh failed");
        }
        let mut sim = RedfishSim {
            dir: dir.to_path_buf(),
            port,
            https,
            sim,
            server: None,
            prefix,
            addr: addr.to_string(),
        };
        sim.start_server();
        sim
    }

    /// A command run where the server runs.
    fn command(&self, program: &Path) -> Command {
        match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    /// Starts sushy-static and waits until it answers.
    pub fn start_server(&mut self) {
        let log = fs::File::create(self.dir.join("sushy.log")).expect("sushy log");
        let mut command = self.command(&sushy_static());
        command
            // its request log is read while it runs (`wait_until_polled`)
            .env("PYTHONUNBUFFERED", "1")
            .args(["-i", &self.addr, "-p", &self.port.to_string(), "-m"])
            .arg(self.dir.join("mockup"))
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log));
        if self.https {
            command
                .arg("-c")
                .arg(self.dir.join("tls/server.pem"))
                .arg("-k")
                .arg(self.dir.join("tls/server.key"));
        }
        self.server = Some(
            command
                .spawn()
                .expect("start sushy-static (ci/deps.sh installs it)"),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.answers() {
            assert!(Instant::now() < deadline, "sushy-static did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the server accepts connections, as seen where it runs.
    fn answers(&self) -> bool {
        if self.prefix.is_empty() {
            return std::net::TcpStream::connect((self.addr.as_str(), self.port)).is_ok();
        }
        self.command(Path::new("bash"))
            .args(["-c", "exec 3<>/dev/tcp/$0/$1"])
            .args([&self.addr, &self.port.to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn signal(&self, signal: i32) {
        if let Some(server) = &self.server {
            // SAFETY: kill(2) on the server this struct started.
            unsafe { libc::kill(server.id() as i32, signal) };
        }
    }

    /// SIGSTOP: the BMC accepts connections (the kernel does) and never answers.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    /// The BMC is gone: connections are refused.
    pub fn kill_server(&mut self) {
        self.thaw();
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
    }

    /// Where the server's request log ends now: [`Self::wait_until_polled`] counts the
    /// requests after it.
    pub fn log_mark(&self) -> u64 {
        fs::metadata(self.dir.join("sushy.log")).map_or(0, |m| m.len())
    }

    /// Waits until a plugin started after `mark` has its first power sample: its poller
    /// has requested the reading resource three times (choosing it, the baseline of
    /// connecting, the first poll), then two periods more. A fixed wait is not enough:
    /// under load connecting has taken over 2 s, and the energy of a power step before
    /// the first sample is nobody's to count.
    pub fn wait_until_polled(&self, mark: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = fs::read(self.dir.join("sushy.log")).unwrap_or_default();
            let since = String::from_utf8_lossy(log.get(mark as usize..).unwrap_or_default());
            let mut gets: std::collections::HashMap<&str, usize> = Default::default();
            for path in since.lines().filter_map(|l| l.split("\"GET ").nth(1)) {
                *gets
                    .entry(path.split(' ').next().unwrap_or(""))
                    .or_default() += 1;
            }
            if gets.values().any(|&n| n >= 3) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the plugin never polled the BMC:\n{since}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.addr, self.port)
    }

    /// acct_gather.conf for this BMC, readings every 0.25 s.
    pub fn acct_gather(&self, extra: &str) -> String {
        let ca = if self.https {
            format!(
                "EnergyRedfishCaFile={}\n",
                self.dir.join("tls/ca.pem").display()
            )
        } else {
            String::new()
        };
        format!(
            "EnergyRedfishUrl={}\nEnergyRedfishUsername=slurm\nEnergyRedfishPassword={PASSWORD}\n\
             EnergyRedfishFrequency=0.25\nEnergyRedfishTimeout=1\n{ca}{extra}",
            self.url()
        )
    }

    /// Shell text that sets the power (for job scripts).
    pub fn set_command(&self, watts: u32) -> String {
        format!(
            "{} set {} {watts}",
            bin("redfishsim").display(),
            self.dir.display()
        )
    }

    /// Shell text that makes the readings say `watts` for `secs` while the node's power
    /// (and the truth) stays as it is (for job scripts).
    pub fn glitch_command(&self, watts: f64, secs: f64) -> String {
        format!(
            "{} glitch {} {watts:e} {secs}",
            bin("redfishsim").display(),
            self.dir.display()
        )
    }

    pub fn set(&self, watts: u32) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(self.set_command(watts))
            .status()
            .expect("redfishsim set");
        assert!(status.success());
    }

    pub fn power_log(&self) -> PathBuf {
        self.dir.join("power.log")
    }

    /// True joules so far: the simulator's own integral.
    pub fn truth(&self) -> f64 {
        fs::read_to_string(self.dir.join("truth"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .expect("truth")
    }

    /// The schedule's integral up to now (for a cross-check).
    pub fn schedule_joules(&self) -> f64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as f64;
        joules_between(&power_schedule(&self.power_log()), 0.0, now)
    }
}

impl Drop for RedfishSim {
    fn drop(&mut self) {
        self.kill_server();
        let _ = self.sim.kill();
        let _ = self.sim.wait();
    }
}
