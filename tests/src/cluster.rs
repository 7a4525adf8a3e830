//! A private Slurm cluster whose nodes see simulated RAPL hardware: [`ClusterSpec`] says
//! what it is, [`Cluster`] runs it through the `cluster` program (tests/src/bin/cluster.rs),
//! whose commands the submodules implement.

pub mod cgroups;
pub mod config;
pub mod layout;
mod ledger;
mod logs;
pub mod netns;
pub mod nodesup;
pub mod ops;
pub mod procs;
pub mod slots;

pub use layout::{Error, Layout, MARKER, State};

use config::{Install, Settings};

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
    /// More slurm.conf lines, after the harness's (a test's scheduler settings, its
    /// PrologFlags): what no typed field says.
    pub extra_conf: &'a str,
    /// More slurmdbd.conf lines.
    pub extra_dbd_conf: &'a str,
    /// Every node's generic resources (NodeName's `Gres=`, e.g. `gpu:1,shard:4`), their
    /// types then GresTypes; empty: none.
    pub gres: &'a str,
    /// Every node's CPUs as slurm.conf states them (one socket of this many cores, with
    /// `SlurmdParameters=config_overrides`); `None`: this machine's.
    pub cpus: Option<u32>,
    /// How long a step's credential lives (AuthInfo's `cred_expire`), which is also how
    /// long a requeued job waits before it runs again; `None`: Slurm's 120 s.
    pub cred_expire: Option<u32>,
    /// gres.conf; empty: none.
    pub gres_conf: &'a str,
    /// Slurm's cgroup plugins on the nodes.
    pub cgroups: Cgroups,
    /// cgroup.conf in place of the one [`Self::cgroups`] implies (what a test constrains
    /// otherwise: devices, the README's); empty: that one.
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
            gres: "",
            cpus: None,
            cred_expire: None,
            gres_conf: "",
            cgroups: Cgroups::Off,
            cgroup_conf: "",
            etc_users: None,
            hosts: "",
            proc_driver: None,
            package: None,
        }
    }
}

/// How long [`Cluster::wait_job`] waits, after a job has ended, for each of its steps'
/// completions to reach slurmdbd.
const STEP_REPORT_WAIT: Duration = Duration::from_secs(15);

pub struct Cluster {
    pub dir: PathBuf,
    pub sims: Vec<Option<Sim>>,
    /// The cluster runs in a private mount namespace (see [`ClusterSpec::etc_users`],
    /// [`ClusterSpec::proc_driver`]).
    private_ns: bool,
}

/// Slurm's cgroup plugins on the nodes ([`ClusterSpec::cgroups`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cgroups {
    /// None: Slurm's default process tracking.
    #[default]
    Off,
    /// cgroup/v1 in this host's tree: processes tracked, tasks placed and accounted in
    /// cgroups, cores constrained ([`cgroup_v1_conf`]).
    V1,
    /// cgroup/v2 on a pure v2 host of each slurmd's own ([`config::Settings::cgroup_v2`]),
    /// without controllers ([`cgroup_v2_conf`]): jobacct_gather/cgroup cannot start there
    /// ("memory cgroup controller is not available") and task/cgroup has nothing to
    /// constrain; proctrack/cgroup places the jobs, which is what `shared` reads.
    V2,
}

impl Cgroups {
    /// Its slurm.conf lines.
    fn slurm_conf(self) -> &'static str {
        match self {
            Cgroups::Off => "",
            Cgroups::V1 => {
                "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n\
                 JobAcctGatherType=jobacct_gather/cgroup\n"
            }
            Cgroups::V2 => {
                "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n\
                 JobAcctGatherType=jobacct_gather/linux\n"
            }
        }
    }

    /// Its cgroup.conf; `None` for none.
    fn cgroup_conf(self) -> Option<String> {
        match self {
            Cgroups::Off => None,
            Cgroups::V1 => Some(cgroup_v1_conf("ConstrainCores=yes\n")),
            Cgroups::V2 => Some(cgroup_v2_conf("")),
        }
    }
}

/// GresTypes for NodeName's `Gres=` value `gres`: each resource's name once, in order
/// (`gpu:3g.40gb:1,gpu:1g.10gb:1,shard:4` gives `gpu,shard`).
fn gres_types(gres: &str) -> String {
    let mut types: Vec<&str> = Vec::new();
    for name in gres.split(',').filter_map(|g| g.split(':').next()) {
        if !types.contains(&name) {
            types.push(name);
        }
    }
    types.join(",")
}

impl ClusterSpec<'_> {
    /// The slurm.conf lines the harness adds: the extern step then carries the job's
    /// energy (PrologFlags=Contain, which is not summed over steps), then what the typed
    /// fields say, then [`Self::extra_conf`], which can override any of them.
    fn slurm_conf(&self) -> String {
        let mut text = format!("PrologFlags=Contain\n{}", self.cgroups.slurm_conf());
        if !self.gres.is_empty() {
            text.push_str(&format!("GresTypes={}\n", gres_types(self.gres)));
        }
        if self.cpus.is_some() {
            text.push_str("SlurmdParameters=config_overrides\n");
        }
        text + self.extra_conf
    }

    /// What `cluster up` starts for this spec, with the files it names written under
    /// `root` and the nodes' simulators expected in `root/sim` ([`Cluster::up`] starts them).
    pub fn settings(&self, root: &Path) -> Settings {
        let sim_root = root.join("sim");
        if !self.hosts.is_empty() {
            let machine = fs::read_to_string("/etc/hosts").unwrap_or_default();
            fs::create_dir_all(&sim_root).expect("sim root");
            fs::write(sim_root.join("hosts"), format!("{machine}\n{}", self.hosts)).expect("hosts");
        }
        let file = |name: &str, text: &str| {
            let path = root.join(name);
            fs::write(&path, text).expect(name);
            path
        };
        let optional = |name: &str, text: &str| (!text.is_empty()).then(|| file(name, text));
        Settings {
            nodes: self.nodes,
            netns: self.nodes > 1,
            energy_type: self.energy_type.into(),
            node_freq: self.node_freq,
            jobacct_freq: self.jobacct_freq,
            install: Install::from_env(),
            // a package installs its plugins into the Slurm's plugin directory
            extra_plugin_dir: self
                .package
                .is_none()
                .then(|| plugin_dir(root).display().to_string()),
            node_hook: Some(workspace().join("tests/fakehw/node-hook.sh")),
            sim_root: Some(sim_root),
            cgroup_v2: self.cgroups == Cgroups::V2,
            acct_gather_conf: Some(file("acct_gather.conf.in", self.acct_gather)),
            cgroup_conf: if self.cgroup_conf.is_empty() {
                self.cgroups
                    .cgroup_conf()
                    .map(|text| file("cgroup.conf.in", &text))
            } else {
                Some(file("cgroup.conf.in", self.cgroup_conf))
            },
            gres_conf: optional("gres.conf.in", self.gres_conf),
            extra_slurm_conf: Some(file("slurm.conf.extra", &self.slurm_conf())),
            extra_slurmdbd_conf: Some(file("slurmdbd.conf.extra", self.extra_dbd_conf)),
            cluster_name: None,
            daemon_debug: "info".into(),
            debug_flags: String::new(),
            node_options: if self.gres.is_empty() {
                String::new()
            } else {
                format!("Gres={} ", self.gres)
            },
            node_hw: self
                .cpus
                .map(|n| {
                    format!(
                        "CPUs={n} Boards=1 SocketsPerBoard=1 CoresPerSocket={n} ThreadsPerCore=1 "
                    )
                })
                .unwrap_or_default(),
            cred_expire: self.cred_expire,
            up_timeout_secs: 60,
        }
    }
}

impl Cluster {
    /// Starts a cluster in `root/cluster` that loads the built plugins, or the package's.
    pub fn up(root: &Path, spec: &ClusterSpec) -> Cluster {
        let dir = root.join("cluster");
        let settings = spec.settings(root);
        let sim_root = settings.sim_root.as_deref().expect("the nodes' sim root");
        let sims = (1..=spec.nodes)
            .map(|k| {
                spec.sim_args
                    .get(k - 1)
                    .copied()
                    .flatten()
                    .map(|args| Sim::start(&sim_root.join(format!("n{k}")), args))
            })
            .collect();
        let settings_file = root.join("cluster-settings.json");
        fs::write(
            &settings_file,
            serde_json::to_string_pretty(&settings).expect("settings as JSON"),
        )
        .expect("settings file");
        let cluster = Cluster {
            dir,
            sims,
            private_ns: spec.etc_users.is_some() || spec.proc_driver.is_some(),
        };
        let program = bin("cluster");
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
            (true, None) => Command::new(&program),
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
                    .arg(&program);
                up
            }
            (true, Some(deb)) => {
                let mut up = Command::new(workspace().join("tests/package/with-deb.sh"));
                up.arg(deb).arg(root.join("package-install")).arg(&program);
                up
            }
            (false, Some(_)) => {
                panic!("a private mount namespace and an installed package are not combined")
            }
        };
        let out = up
            .arg("up")
            .arg(&cluster.dir)
            .arg("--settings")
            .arg(&settings_file)
            .output()
            .expect("run cluster up");
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

    /// The records of the processes this cluster started ([`procs`]).
    pub fn records(&self) -> procs::Records {
        procs::Records {
            dir: self.dir.join("run/pid"),
        }
    }

    /// A command that runs in this cluster's mount namespace (see
    /// [`ClusterSpec::etc_users`], [`ClusterSpec::proc_driver`]), `program` first.
    fn command(&self, program: &Path) -> Command {
        if !self.private_ns {
            return Command::new(program);
        }
        match self.records().pid("slurmctld") {
            Some(pid) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &pid.to_string(), "-m", "--"]).arg(program);
                c
            }
            // slurmctld is gone (and with it the namespace, unless its daemons outlive it)
            None => Command::new(program),
        }
    }

    /// `cluster COMMAND DIR` (tests/src/bin/cluster.rs), where this cluster runs: for
    /// `restart-slurmd NODE [SIGNAL [DOWN_SECS]]` and `reconfigure`, with more arguments.
    pub fn harness(&self, command: &str) -> Command {
        let mut c = self.command(&bin("cluster"));
        c.arg(command).arg(&self.dir);
        c
    }

    /// The command line that runs a program inside node `k`'s namespaces (mount, host
    /// name, network), as its slurmd: for a device of that node only it reaches, its BMC.
    pub fn node_prefix(&self, k: usize) -> Vec<std::ffi::OsString> {
        let c = self.command(&bin("cluster"));
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
        let c = self.command(&bin("cluster"));
        let mut prefix = vec![c.get_program().to_owned()];
        prefix.extend(c.get_args().map(ToOwned::to_owned));
        prefix.extend(["client".into(), self.dir.clone().into_os_string()]);
        prefix
    }

    /// Runs any client program (e.g. senergy) against this cluster, as `user` (uid,
    /// gid) when given; its output whatever the status.
    pub fn client(
        &self,
        user: Option<(u32, u32)>,
        program: &Path,
        args: &[&str],
    ) -> std::process::Output {
        let mut c = self.command(&bin("cluster"));
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
        let out = self.output(args);
        assert!(
            out.status.success(),
            "{args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// [`Self::run`] for a command that may fail yet (a step not started): its stdout, or
    /// `None` when it failed.
    pub fn try_run(&self, args: &[&str]) -> Option<String> {
        let out = self.output(args);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn output(&self, args: &[&str]) -> std::process::Output {
        // what a shell that eval'ed `cluster env` runs: the client wrappers first in PATH
        let path = std::env::var_os("PATH").unwrap_or_default();
        let path = std::env::join_paths(
            std::iter::once(self.dir.join("bin")).chain(std::env::split_paths(&path)),
        )
        .expect("PATH");
        self.command(Path::new(args[0]))
            .args(&args[1..])
            .env("PATH", path)
            .env("SLURM_CONF", self.dir.join("etc/slurm.conf"))
            .output()
            .expect("client command")
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
        // once the job has ended, sacct shows its steps ended with it even before their
        // own completions (and figures) reach slurmdbd: those have no usage yet
        let mut ended_at: Option<Instant> = None;
        loop {
            let rows = self.run(&[
                "sacct",
                "-n",
                "-P",
                "-j",
                &id,
                "-o",
                "JobID,State,TRESUsageInTot",
            ]);
            // the states a job or step leaves again: a job
            // suspended (by scontrol or the gang scheduler) has no final figures yet
            let done = !rows.trim().is_empty()
                && rows.lines().all(|row| {
                    let state = row.split('|').nth(1).unwrap_or("").trim();
                    !matches!(
                        state,
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
            let reported = rows.lines().all(|row| {
                let fields: Vec<&str> = row.split('|').collect();
                !fields[0].contains('.') || fields.get(2).is_some_and(|u| !u.trim().is_empty())
            });
            if done {
                if ended_at.is_none() && !reported {
                    println!("job {job} ended; some steps' completions are not in slurmdbd yet");
                }
                let since = *ended_at.get_or_insert_with(Instant::now);
                // a step that never ran reports nothing: the figures are read anyway
                if reported || since.elapsed() > STEP_REPORT_WAIT {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "job {job} not finished: {rows}\n{}",
                self.logs()
            );
            // a look is one sacct (tens of milliseconds): the test goes on a quarter of a
            // second after the job's last completion reached slurmdbd, not up to a second
            std::thread::sleep(Duration::from_millis(250));
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

    /// Each step's peak power as accounting holds it: the energy TRES of its
    /// `TRESUsageOutMax` (the highest `current_watts` its slurmstepd reported), by step id
    /// (`J.batch`, `J.0`, ...); steps the release records no usage for are left out.
    pub fn peak_watts(&self, job: u32) -> Vec<(String, f64)> {
        self.run(&[
            "sacct",
            "-n",
            "-P",
            "--noconvert",
            "-j",
            &job.to_string(),
            "-o",
            "JobID,TRESUsageOutMax",
        ])
        .lines()
        .filter_map(|l| {
            let (id, tres) = l.split_once('|')?;
            let watts = tres
                .split(',')
                .find_map(|t| t.strip_prefix("energy="))?
                .parse()
                .ok()?;
            Some((id.to_string(), watts))
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

    /// Stops node `node`'s slurmd with SIGTERM, as an admin's `systemctl stop slurmd`
    /// does, and returns how long it took to exit.
    pub fn stop_slurmd(&self, node: &str) -> Duration {
        let pid = self
            .records()
            .pid(&format!("slurmd-{node}"))
            .expect("a running slurmd");
        let alive = || procs::state_start(pid).is_some_and(|(state, _)| state != 'Z');
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
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // a failed test's cluster logs outlive its temporary directory where asked
        if std::thread::panicking()
            && let Some(keep) = std::env::var_os("ENERGY_TESTS_KEEP_FAILED")
        {
            let to = Path::new(&keep).join(format!("{}", std::process::id()));
            let copied = fs::create_dir_all(&to).and_then(|()| {
                Command::new("cp")
                    .arg("-a")
                    .arg(self.dir.join("log"))
                    .arg(self.dir.join("spool"))
                    .arg(&to)
                    .status()
            });
            eprintln!("the cluster's logs: {} ({copied:?})", to.display());
        }
        // what the energy plugins warned of, in the failure's output (a CI log keeps no
        // cluster directory)
        if std::thread::panicking() {
            eprint!("{}", self.energy_warnings());
        }
        let _ = self
            .command(&bin("cluster"))
            .arg("down")
            .arg(&self.dir)
            .status();
    }
}

/// cgroup.conf for Slurm's cgroup v1 plugin on this machine's hierarchies (24.11 and later
/// cannot autodetect the version on a hybrid host), with `constrain` lines such as
/// `ConstrainCores=yes`.
pub fn cgroup_v1_conf(constrain: &str) -> String {
    format!("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n{constrain}")
}

/// cgroup.conf for Slurm's cgroup v2 plugin on the nodes' pure v2 hosts
/// ([`Cgroups::V2`]), which no systemd runs (`IgnoreSystemd`: Slurm makes its
/// own directories), with `constrain` lines. No controller is there to constrain with.
pub fn cgroup_v2_conf(constrain: &str) -> String {
    format!(
        "CgroupPlugin=cgroup/v2\nCgroupMountpoint=/sys/fs/cgroup\nIgnoreSystemd=yes\n{constrain}"
    )
}

/// The energy of `id` (a job, step or array element) in [`Cluster::energy`]'s rows.
pub fn energy_of(rows: &[(String, Option<u64>)], id: &str) -> f64 {
    rows.iter()
        .find(|(i, _)| i == id)
        .and_then(|(_, e)| *e)
        .unwrap_or_else(|| panic!("no energy for {id} in {rows:?}")) as f64
}

/// Marks written by jobs: `raplsim mark SIM NAME` appends "NAME joules".
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
