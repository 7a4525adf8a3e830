//! A private Slurm cluster (ci/cluster.sh) whose nodes see simulated RAPL hardware.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{Sim, bin, plugin_dir, workspace};

pub struct ClusterSpec<'a> {
    pub nodes: usize,
    pub energy_type: &'a str,
    pub acct_gather: &'a str,
    pub node_freq: u32,
    pub jobacct_freq: u32,
    /// raplsim options per node; `None` leaves a node without RAPL.
    pub sim_args: Vec<Option<&'a str>>,
    /// More slurm.conf lines.
    pub extra_conf: &'a str,
    /// More slurmdbd.conf lines.
    pub extra_dbd_conf: &'a str,
    /// More NodeName options for every node (`Gres=gpu:2 `, with a trailing space).
    pub node_options: &'a str,
    /// Every node's hardware in slurm.conf (`CPUs=64 CoresPerSocket=64`, with
    /// `SlurmdParameters=config_overrides`); empty: this machine's.
    pub node_hw: &'a str,
    /// How long a step's credential lives (AuthInfo's `cred_expire`), which is also how
    /// long a requeued job waits before it runs again; `None`: Slurm's 120 s.
    pub cred_expire: Option<u32>,
    /// gres.conf; empty: none.
    pub gres_conf: &'a str,
    /// cgroup.conf in place of cluster.sh's; empty: cluster.sh's.
    pub cgroup_conf: &'a str,
    /// A directory with `passwd` and `group`: the whole cluster (and its clients) then
    /// runs in a private mount namespace where they are bind-mounted over /etc's, so tests
    /// can have more Unix users without touching the machine's /etc.
    pub etc_users: Option<&'a Path>,
    /// A directory whose contents the cluster sees as `/proc/driver` (a tmpfs over it in
    /// the cluster's private mount namespace), for a GPU driver's files this machine lacks
    /// (`nvidia-caps/mig-minors`).
    pub proc_driver: Option<&'a Path>,
    /// Lines the nodes' /etc/hosts holds beside the machine's (bind-mounted in each node's
    /// private mount namespace by tests/fakehw/node-hook.sh), e.g. BMC names.
    pub hosts: &'a str,
    /// A .deb of the plugins (ci/package.sh) that `dpkg -i` installs into Slurm's plugin
    /// directory for the daemons (tests/package/with-deb.sh), which then load only it; `None`
    /// loads the build dir's plugins.
    pub package: Option<&'a Path>,
}

impl Default for ClusterSpec<'_> {
    /// One node without RAPL, Slurm's usual 5 s polls, no energy plugin.
    fn default() -> Self {
        Self {
            nodes: 1,
            energy_type: "acct_gather_energy/none",
            acct_gather: "",
            node_freq: 5,
            jobacct_freq: 5,
            sim_args: vec![None],
            extra_conf: "",
            extra_dbd_conf: "",
            node_options: "",
            node_hw: "",
            cred_expire: None,
            gres_conf: "",
            cgroup_conf: "",
            etc_users: None,
            hosts: "",
            proc_driver: None,
            package: None,
        }
    }
}

pub struct Cluster {
    pub dir: PathBuf,
    pub sims: Vec<Option<Sim>>,
    /// The cluster runs in a private mount namespace (see [`ClusterSpec::etc_users`],
    /// [`ClusterSpec::proc_driver`]).
    private_ns: bool,
}

impl Cluster {
    /// Starts a cluster in `root/cluster` that loads the built plugins, or the package's.
    pub fn up(root: &Path, spec: &ClusterSpec) -> Cluster {
        let dir = root.join("cluster");
        let sim_root = root.join("sim");
        let sims = (1..=spec.nodes)
            .map(|k| {
                spec.sim_args
                    .get(k - 1)
                    .copied()
                    .flatten()
                    .map(|args| Sim::start(&sim_root.join(format!("n{k}")), args))
            })
            .collect();
        if !spec.hosts.is_empty() {
            let machine = fs::read_to_string("/etc/hosts").unwrap_or_default();
            fs::create_dir_all(&sim_root).expect("sim root");
            fs::write(sim_root.join("hosts"), format!("{machine}\n{}", spec.hosts)).expect("hosts");
        }
        let acct_gather = root.join("acct_gather.conf.in");
        fs::write(&acct_gather, spec.acct_gather).expect("acct_gather.conf");
        let extra = root.join("slurm.conf.extra");
        // the extern step then carries the job's energy, which is not summed over steps
        fs::write(&extra, format!("PrologFlags=Contain\n{}", spec.extra_conf)).expect("extra conf");
        let mut optional_files = Vec::new();
        let dbd_extra = root.join("slurmdbd.conf.extra");
        fs::write(&dbd_extra, spec.extra_dbd_conf).expect("extra dbd conf");
        for (file, text, var) in [
            ("gres.conf.in", spec.gres_conf, "GRES_CONF"),
            ("cgroup.conf.in", spec.cgroup_conf, "CGROUP_CONF"),
        ] {
            if !text.is_empty() {
                fs::write(root.join(file), text).expect(file);
                optional_files.push((var, root.join(file)));
            }
        }
        let cluster = Cluster {
            dir,
            sims,
            private_ns: spec.etc_users.is_some() || spec.proc_driver.is_some(),
        };
        let cluster_sh = workspace().join("ci/cluster.sh");
        // what a private mount namespace is set up with: `sh -c` lines, their arguments
        let mut setup: Vec<(&str, &Path)> = Vec::new();
        if let Some(etc) = spec.etc_users {
            setup.push((
                r#"mount --bind "$1/passwd" /etc/passwd && mount --bind "$1/group" /etc/group"#,
                etc,
            ));
        }
        if let Some(driver) = spec.proc_driver {
            setup.push((
                r#"mount -t tmpfs rust-energy-test /proc/driver && cp -r "$1/." /proc/driver"#,
                driver,
            ));
        }
        let mut up = match (setup.is_empty(), spec.package) {
            (true, None) => {
                let mut up = Command::new(&cluster_sh);
                up.env("EXTRA_PLUGIN_DIR", plugin_dir(root));
                up
            }
            (false, None) => {
                let mut up = Command::new("unshare");
                let script: Vec<String> = setup
                    .iter()
                    .map(|(line, _)| format!("({line}) || exit 1; shift"))
                    .collect();
                up.args(["-m", "--propagation", "private", "sh", "-c"])
                    .arg(format!("set -e; {}; exec \"$@\"", script.join("; ")))
                    .arg("sh")
                    .args(setup.iter().map(|(_, arg)| *arg))
                    .arg(&cluster_sh)
                    .env("EXTRA_PLUGIN_DIR", plugin_dir(root));
                up
            }
            (true, Some(deb)) => {
                let mut up = Command::new(workspace().join("tests/package/with-deb.sh"));
                up.arg(deb)
                    .arg(root.join("package-install"))
                    .arg(&cluster_sh);
                up
            }
            (false, Some(_)) => {
                panic!("a private mount namespace and an installed package are not combined")
            }
        };
        let out = up
            .envs(optional_files)
            .env("NODE_OPTIONS", spec.node_options)
            .env("NODE_HW", spec.node_hw)
            .env(
                "CRED_EXPIRE",
                spec.cred_expire.map(|s| s.to_string()).unwrap_or_default(),
            )
            .arg("up")
            .arg(&cluster.dir)
            .env("NODES", spec.nodes.to_string())
            .env("ENERGY_TYPE", spec.energy_type)
            .env("NODE_FREQ", spec.node_freq.to_string())
            .env("JOBACCT_FREQ", spec.jobacct_freq.to_string())
            .env("ACCT_GATHER_CONF", &acct_gather)
            .env("EXTRA_SLURM_CONF", &extra)
            .env("EXTRA_SLURMDBD_CONF", &dbd_extra)
            .env("NODE_HOOK", workspace().join("tests/fakehw/node-hook.sh"))
            .env("SIM_ROOT", &sim_root)
            .output()
            .expect("run ci/cluster.sh up");
        assert!(
            out.status.success(),
            "cluster did not come up:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }

    pub fn sim(&self, node: usize) -> &Sim {
        self.sims[node - 1].as_ref().expect("node has a simulator")
    }

    /// A command that runs in this cluster's mount namespace (see
    /// [`ClusterSpec::etc_users`], [`ClusterSpec::proc_driver`]), `program` first.
    fn command(&self, program: &Path) -> Command {
        if !self.private_ns {
            return Command::new(program);
        }
        let record = fs::read_to_string(self.dir.join("run/pid/slurmctld")).unwrap_or_default();
        match record.split_whitespace().next() {
            Some(pid) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", pid, "-m", "--"]).arg(program);
                c
            }
            // slurmctld is gone (and with it the namespace, unless its daemons outlive it)
            None => Command::new(program),
        }
    }

    /// Runs any client program (e.g. senergy) against this cluster, as `user` (uid,
    /// gid) when given; its output whatever the status.
    /// The command line that runs a program inside node `k`'s namespaces (mount, host
    /// name, network), as its slurmd: for a device of that node only it reaches, its BMC.
    pub fn node_prefix(&self, k: usize) -> Vec<std::ffi::OsString> {
        let c = self.command(&workspace().join("ci/cluster.sh"));
        let mut prefix = vec![c.get_program().to_owned()];
        prefix.extend(c.get_args().map(ToOwned::to_owned));
        prefix.extend([
            "node-exec".into(),
            self.dir.clone().into_os_string(),
            format!("n{k}").into(),
        ]);
        prefix
    }

    /// The command line that runs a program where the cluster's clients run (in its
    /// controller's network namespace, with SLURM_CONF set): for servers a test runs
    /// beside the cluster, such as Prometheus.
    pub fn client_prefix(&self) -> Vec<std::ffi::OsString> {
        let c = self.command(&workspace().join("ci/cluster.sh"));
        let mut prefix = vec![c.get_program().to_owned()];
        prefix.extend(c.get_args().map(ToOwned::to_owned));
        prefix.extend(["client".into(), self.dir.clone().into_os_string()]);
        prefix
    }

    pub fn client(
        &self,
        user: Option<(u32, u32)>,
        program: &Path,
        args: &[&str],
    ) -> std::process::Output {
        let mut c = self.command(&workspace().join("ci/cluster.sh"));
        c.arg("client").arg(&self.dir);
        if let Some((uid, gid)) = user {
            c.args([
                "setpriv",
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
            ]);
        }
        c.arg(program).args(args).output().expect("client program")
    }

    /// Runs a Slurm client command against this cluster; returns stdout.
    pub fn run(&self, args: &[&str]) -> String {
        let out = self
            .command(Path::new("bash"))
            .arg("-c")
            .arg(r#"eval "$("$0" env "$1")"; shift; exec "$@""#)
            .arg(workspace().join("ci/cluster.sh"))
            .arg(&self.dir)
            .args(args)
            .output()
            .expect("client command");
        assert!(
            out.status.success(),
            "{args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn sbatch(&self, script: &str) -> u32 {
        let path = self.dir.join(format!("job-{}.sh", script.len()));
        fs::write(&path, script).expect("job script");
        let out = self.run(&[
            "sbatch",
            "--parsable",
            "-o",
            "/dev/null",
            path.to_str().expect("path"),
        ]);
        out.trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("sbatch said {out:?}"))
    }

    /// Waits until the job and all its steps are finished in accounting.
    pub fn wait_job(&self, job: u32, timeout: Duration) {
        let id = job.to_string();
        let deadline = Instant::now() + timeout;
        loop {
            let states = self.run(&["sacct", "-n", "-P", "-j", &id, "-o", "State"]);
            // the states a job or step leaves again (ci/cluster.sh's wait-job): a job
            // suspended (by scontrol or the gang scheduler) has no final figures yet
            let done = !states.trim().is_empty()
                && states.lines().all(|s| {
                    !matches!(
                        s.trim(),
                        "RUNNING"
                            | "PENDING"
                            | "COMPLETING"
                            | "REQUEUED"
                            | "SUSPENDED"
                            | "RESIZING"
                            | "CONFIGURING"
                            | "SIGNALING"
                            | "STAGE_OUT"
                            | ""
                    )
                });
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "job {job} not finished: {states}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// `(JobID, ConsumedEnergyRaw)` per job, step and array element.
    pub fn energy(&self, job: u32) -> Vec<(String, Option<u64>)> {
        self.run(&[
            "sacct",
            "-n",
            "-P",
            "-j",
            &job.to_string(),
            "-o",
            "JobID,ConsumedEnergyRaw,State",
        ])
        .lines()
        .filter_map(|l| {
            let mut f = l.split('|');
            Some((f.next()?.to_string(), f.next()?.trim().parse().ok()))
        })
        .collect()
    }

    /// The slowest answer over `duration`, asking every half second: slurmd's own
    /// (`scontrol show slurmd`) and step `job.0`'s energy (`sstat`, which slurmd relays to
    /// the step's slurmstepd).
    pub fn slowest_answer(&self, job: u32, duration: Duration) -> Duration {
        let step = format!("{job}.0");
        let asks: [&[&str]; 2] = [
            &["scontrol", "show", "slurmd"],
            &["sstat", "-n", "-P", "-j", &step, "-o", "ConsumedEnergyRaw"],
        ];
        let until = Instant::now() + duration;
        let mut slowest = Duration::ZERO;
        while Instant::now() < until {
            for args in asks {
                let start = Instant::now();
                self.run(args);
                slowest = slowest.max(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        slowest
    }

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

    /// The first of this cluster's job ids (its slot's range: ci/cluster.sh), from slurm.conf.
    pub fn first_job_id(&self) -> u32 {
        fs::read_to_string(self.dir.join("etc/slurm.conf"))
            .expect("slurm.conf")
            .lines()
            .find_map(|l| l.strip_prefix("FirstJobId=")?.trim().parse().ok())
            .expect("FirstJobId in slurm.conf")
    }

    /// Stops node `node`'s slurmd with SIGTERM, as an admin's `systemctl stop slurmd`
    /// does, and returns how long it took to exit.
    pub fn stop_slurmd(&self, node: &str) -> Duration {
        let record = fs::read_to_string(self.dir.join(format!("run/pid/slurmd-{node}")))
            .expect("slurmd's pid record");
        let pid: i32 = record
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a pid");
        let alive = || {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, s)| !s.starts_with('Z'))
            })
        };
        let t0 = Instant::now();
        // SAFETY: kill(2) on the slurmd this cluster started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "kill slurmd");
        while alive() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "slurmd did not stop:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        t0.elapsed()
    }

    /// After [`Self::stop_slurmd`] took `took` while a plugin thread of `node` was in a call
    /// that hangs: the plugin left the thread behind (its log line), slurmd stopped within
    /// a second, and it ended cleanly.
    pub fn assert_stopped_promptly(&self, node: &str, took: Duration) {
        let log = self.log(&format!("slurmd-{node}.log"));
        assert!(
            log.contains("still in a call after 200 ms"),
            "a plugin thread was in the hanging call when slurmd stopped:\n{log}"
        );
        assert!(
            took < Duration::from_secs(1),
            "slurmd took {took:?} to stop"
        );
        let out = self.log(&format!("slurmd-{node}.out"));
        assert!(
            !out.contains("Segmentation") && !log.contains("fatal"),
            "slurmd ended cleanly:\n{out}\n{log}"
        );
    }

    pub fn log(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join("log").join(name)).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .command(&workspace().join("ci/cluster.sh"))
            .arg("down")
            .arg(&self.dir)
            .status();
    }
}

/// Marks written by jobs: `raplsim mark SIM NAME` appends "NAME joules".
/// The energy of `id` (a job, step or array element) in [`Cluster::energy`]'s rows.
/// cgroup.conf for Slurm's cgroup v1 plugin on this machine's hierarchies (24.11 and later
/// cannot autodetect the version on a hybrid host), with `constrain` lines such as
/// `ConstrainCores=yes`.
pub fn cgroup_v1_conf(constrain: &str) -> String {
    format!("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n{constrain}")
}

pub fn energy_of(rows: &[(String, Option<u64>)], id: &str) -> f64 {
    rows.iter()
        .find(|(i, _)| i == id)
        .and_then(|(_, e)| *e)
        .unwrap_or_else(|| panic!("no energy for {id} in {rows:?}")) as f64
}

pub fn marks(sim: &Sim) -> Vec<(String, f64)> {
    fs::read_to_string(sim.dir.join("marks"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (name, joules) = l.split_once(' ')?;
            Some((name.to_string(), joules.trim().parse().ok()?))
        })
        .collect()
}

pub fn mark(sim: &Sim, name: &str) -> Option<f64> {
    marks(sim)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, j)| j)
}

/// Shell text that brackets a phase of set power with marks.
pub fn phase_commands(sim: &Sim, name: &str, phases: &[(&str, u32)]) -> String {
    let s = bin("raplsim").display().to_string();
    let d = sim.dir.display().to_string();
    let mut text = format!("{s} mark {d} {name}_start; ");
    for (power, secs) in phases {
        text.push_str(&format!("{s} set {d} {power}; sleep {secs}; "));
    }
    text.push_str(&format!("{s} set {d} all=0; {s} mark {d} {name}_end"));
    text
}
