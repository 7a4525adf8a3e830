use super::*;
use crate::accounting::Accounting;
use crate::attribution::{Attribution, CGROUP_ROOT, Mode, cgroup, cgroup_mountpoint, procs};
use crate::ledger::StepFigure;
use std::os::unix::net::UnixListener;

/// The attribution cost per sample in steady state (counters read, model, ledger
/// written) with 1, 16, 64 and 256 one-CPU jobs of two steps each over a faithful v1 tree,
/// their slurmstepds among 500 other processes (found at the first sample only):
/// `cargo test --release -p slurm-energy-logic --lib attribution_cost -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn attribution_cost_per_sample() {
    for jobs in [1u32, 16, 64, 256] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (spool, cgroups) = (tmp.path().join("spool"), tmp.path().join("cgroup"));
        let proc_root = tmp.path().join("proc");
        fs::create_dir_all(&spool).expect("spool");
        for pid in 1..=500 {
            procs::tests::process(&proc_root, pid, "/usr/bin/sleep 1000", "0::/\n");
        }
        let mut sockets = Vec::new();
        for job in 1..=jobs {
            let cpu = (job - 1).to_string();
            let steps = [("step_extern", 0), ("step_batch", 1000)];
            let dir = cgroup::tests::v1_tree(&cgroups, "slurm", job, &cpu, u64::MAX, 1000, &steps);
            for (k, step) in [StepId::EXTERN, StepId::BATCH].into_iter().enumerate() {
                let pid = 1000 + 2 * job + k as u32;
                let stepd = cgroup::tests::v1_stepd(&dir, &step.cgroup_name(), true);
                let socket = spool.join(format!("n1_{job}.{}", step.0));
                sockets.push(procs::tests::stepd(
                    &proc_root,
                    pid,
                    (job, step),
                    &stepd,
                    &socket,
                ));
            }
        }
        let site = Site {
            spool,
            cgroup_root: cgroups,
            proc_root,
        };
        let mut keeper = Keeper::shared(&site, 0, None).expect("keeper");
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut accounting = Accounting::new(w0);
        let rounds = 200u32;
        let mut started = Instant::now();
        let mut cpu = crate::ledger::tests::thread_cpu();
        for k in 0..=rounds {
            if k == 1 {
                assert!(
                    keeper
                        .places
                        .values()
                        .all(|p| matches!(p, Place::Found(..)))
                );
                started = Instant::now();
                cpu = crate::ledger::tests::thread_cpu();
            }
            let at = Duration::from_secs(u64::from(k));
            let reading = Reading {
                energy_uj: u64::from(k) * 300_000_000,
                complete: true,
                ..Reading::default()
            };
            accounting.record(&reading, t0 + at, w0 + at);
            keeper.pace = Arc::default();
            keeper.on_sample(&accounting, &Reading::default());
        }
        let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        let cpu_us =
            (crate::ledger::tests::thread_cpu() - cpu).as_secs_f64() * 1e6 / f64::from(rounds);
        // the same without the ledger file's write (every fifth sample above): what the
        // sample costs apart from the file system's creating and renaming of a file
        keeper.stored = Some(t0 + Duration::from_secs(1_000_000));
        let (started, cpu) = (Instant::now(), crate::ledger::tests::thread_cpu());
        for k in rounds + 1..=2 * rounds {
            let at = Duration::from_secs(u64::from(k));
            let reading = Reading {
                energy_uj: u64::from(k) * 300_000_000,
                complete: true,
                ..Reading::default()
            };
            accounting.record(&reading, t0 + at, w0 + at);
            keeper.pace = Arc::default();
            keeper.on_sample(&accounting, &Reading::default());
        }
        let unstored = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        let unstored_cpu =
            (crate::ledger::tests::thread_cpu() - cpu).as_secs_f64() * 1e6 / f64::from(rounds);
        // the part of it that finds the jobs and reads their cgroups
        let started = Instant::now();
        for _ in 0..rounds {
            assert_eq!(keeper.observe(&[]).len(), jobs as usize);
        }
        let observe = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        // the same with the Prometheus metrics file written at each sample
        keeper.stored = None;
        let file = tmp.path().join("slurm_energy.prom");
        let readable = crate::replace::Access {
            mode: 0o644,
            group: None,
        };
        let who = crate::metrics::Identity {
            node: "n1".into(),
            source: "rust_rapl".into(),
            attribution: keeper.attribution().into(),
        };
        let mut metrics = crate::metrics::MetricsFile::open(&file, readable).expect("opened");
        let mut keeper = keeper.publishing(
            true,
            Box::new(move |ledger, owners| {
                metrics.write(&crate::metrics::render(ledger, owners, &who));
            }),
        );
        let started = Instant::now();
        for k in 2 * rounds + 1..=3 * rounds {
            let at = Duration::from_secs(u64::from(k));
            let reading = Reading {
                energy_uj: u64::from(k) * 300_000_000,
                complete: true,
                ..Reading::default()
            };
            accounting.record(&reading, t0 + at, w0 + at);
            keeper.pace = Arc::default();
            keeper.on_sample(&accounting, &Reading::default());
        }
        let with_metrics = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        let bytes = fs::metadata(&file).map_or(0, |m| m.len());
        println!(
            "{jobs} jobs: {us:.0} us per sample ({:.1} us per job; {cpu_us:.0} us CPU), of which steps and \
             cgroups read {observe:.0} us ({:.1} us per job); without the ledger file's write \
             {unstored:.0} us ({unstored_cpu:.0} us CPU); with the metrics file \
             ({bytes} bytes) {with_metrics:.0} us",
            us / f64::from(jobs),
            observe / f64::from(jobs)
        );
    }
}

/// The GPU attribution cost per sample in steady state (steps found, their GPUs known,
/// each GPU's processes' use charged per job, ledger written) with 1, 16, 64 and 256 jobs
/// sharing 8 GPUs by shards, each with a process using its GPU, among 500 other
/// processes: `cargo test --release -p slurm-energy-logic --lib gpu_attribution_cost --
/// --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn gpu_attribution_cost_per_sample() {
    use crate::source::DeviceReading;
    for jobs in [1u32, 16, 64, 256] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (spool, proc_root) = (tmp.path().join("spool"), tmp.path().join("proc"));
        fs::create_dir_all(&spool).expect("spool");
        for pid in 1..=500 {
            procs::tests::process(&proc_root, pid, "/usr/bin/sleep 1000", "0::/\n");
        }
        let mut sockets = Vec::new();
        for job in 1..=jobs {
            let (stepd, task) = (10_000 + 2 * job, 10_001 + 2 * job);
            let job_dir = format!("0::/system.slice/slurmstepd.scope/job_{job}");
            let socket = spool.join(format!("n1_{job}.0"));
            let cgroup = format!("{job_dir}/step_0/slurm\n");
            sockets.push(procs::tests::stepd(
                &proc_root,
                stepd,
                (job, StepId(0)),
                &cgroup,
                &socket,
            ));
            let task_cgroup = format!("{job_dir}/step_0/user/task_0\n");
            procs::tests::process(&proc_root, task, "python", &task_cgroup);
            grant::tests::shards(job, StepId(0), 2, job % 8)
                .publish(&spool)
                .expect("grant");
        }
        let mut keeper = Keeper::devices(&spool, 0, GresOrder::Detected, Some(60.0), &proc_root)
            .expect("keeper");
        let (t0, w0) = (Instant::now(), SystemTime::now());
        let mut accounting = Accounting::new(w0);
        let rounds = 200u32;
        let mut started = Instant::now();
        for k in 0..=rounds {
            if k == 1 {
                started = Instant::now();
            }
            let devices: Vec<DeviceReading> = (0..8u32)
                .map(|gpu| DeviceReading {
                    position: gpu,
                    file: Some((195, gpu)),
                    energy_uj: u64::from(k) * 300_000_000,
                    watts: Some(300.0),
                    busy: (1..=jobs)
                        .filter(|job| job % 8 == gpu)
                        .map(|job| (10_001 + 2 * job, u64::from(k) * u64::from(job)))
                        .collect(),
                    instances: vec![],
                })
                .collect();
            let at = Duration::from_secs(u64::from(k));
            let reading = Reading {
                energy_uj: u64::from(k) * 2_400_000_000,
                complete: true,
                ..Reading::default()
            };
            accounting.record(&reading, t0 + at, w0 + at);
            keeper.pace = Arc::default();
            keeper.on_sample(&accounting, &Reading { devices, ..reading });
        }
        let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        let charged = (1..=jobs)
            .filter(|job| {
                keeper
                    .ledger
                    .step(*job, StepId(0))
                    .is_some_and(|a| a.joules > 0.0)
            })
            .count();
        assert_eq!(charged, jobs as usize, "every job holds its GPU");
        println!(
            "{jobs} jobs on 8 GPUs: {us:.0} us per sample ({:.1} us per job)",
            us / f64::from(jobs)
        );
    }
}

/// One sample of `keeper`, whatever the time since the last (and since its last search of
/// /proc).
fn tick(keeper: &mut Keeper) {
    keeper.scans = procs::Scans::default();
    sample(keeper);
}

/// One sample of `keeper`, whatever the time since the last; /proc is searched only if its
/// last search is [`procs::SCAN_GAP`] old.
fn sample(keeper: &mut Keeper) {
    let (t, w) = (Instant::now(), SystemTime::now());
    let mut accounting = Accounting::new(w);
    let reading = Reading {
        complete: true,
        ..Reading::default()
    };
    accounting.record(&reading, t, w);
    keeper.pace = Arc::default();
    keeper.on_sample(&accounting, &Reading::default());
}

fn found(keeper: &mut Keeper, job: u32, step: StepId) -> Option<&mut StepCgroup> {
    match keeper.places.get_mut(&(job, step)) {
        Some(Place::Found(_, cgroup)) => Some(&mut **cgroup),
        _ => None,
    }
}

/// A node's spool dir, cgroup mount and /proc in a temp dir.
struct Node {
    tmp: tempfile::TempDir,
    site: Site,
    sockets: HashMap<(u32, StepId), UnixListener>,
}

impl Node {
    fn new(mount: &str) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let site = Site {
            spool: tmp.path().join("spool/n1"),
            cgroup_root: tmp.path().join(mount),
            proc_root: tmp.path().join("proc"),
        };
        fs::create_dir_all(&site.spool).expect("spool");
        Self {
            tmp,
            site,
            sockets: HashMap::new(),
        }
    }

    /// slurmd starts a step: its socket, its slurmstepd at `pid` in `cgroup`.
    fn start(&mut self, job: u32, step: StepId, pid: u32, cgroup: &str) {
        let socket = self.site.spool.join(format!("n1_{job}.{}", step.0));
        let socket = procs::tests::stepd(&self.site.proc_root, pid, (job, step), cgroup, &socket);
        self.sockets.insert((job, step), socket);
    }

    fn moves(&self, pid: u32, cgroup: &str) {
        cgroup::tests::write(&self.site.proc_root.join(format!("{pid}/cgroup")), cgroup);
    }

    fn ends(&mut self, job: u32, step: StepId, pid: u32) {
        self.sockets.remove(&(job, step));
        fs::remove_file(self.site.spool.join(format!("n1_{job}.{}", step.0))).expect("rm");
        fs::remove_dir_all(self.site.proc_root.join(pid.to_string())).expect("rm");
    }

    fn keeper(&self) -> Keeper {
        Keeper::shared(&self.site, 0, None).expect("keeper")
    }
}

/// Each release's cgroup/v2 layout: the job's directory under the mount, found from
/// where the slurmstepd sits once it leaves the scope's `system/`, and kept.
#[test]
fn v2_steps_are_found_where_their_slurmstepd_runs_in_every_release() {
    let layouts = [
        // 22.05 to 25.05, and 26.05 with CgroupJobIdPaths=yes
        "system.slice/slurmstepd.scope/job_7",
        // 24.11 and later rooted at init's cgroup, in a container sharing the host's
        "kubepods.slice/pod1/system.slice/slurmstepd.scope/job_7",
        // 25.11 and later with CgroupSlice=slurm.slice
        "slurm.slice/slurmstepd.scope/job_7",
        // 26.05's default: the job's SLUID
        "system.slice/slurmstepd.scope/sEKNKTV3WPV500",
        // a multiple-slurmd build
        "system.slice/n1_slurmstepd.scope/job_7",
    ];
    for job_dir in layouts {
        let mut node = Node::new("sys/fs/cgroup");
        let mount = node.site.cgroup_root.clone();
        let steps = [("step_extern", 10), ("step_0", 1_000)];
        cgroup::tests::v2_tree(&mount, job_dir, "0-1", "1073741824", 1_010, &steps);
        let scope = Path::new(job_dir)
            .parent()
            .expect("scope")
            .display()
            .to_string();
        let parked = format!(
            "0::/{scope}/system
"
        );
        node.start(7, StepId(0), 300, &parked);
        let mut keeper = node.keeper();
        tick(&mut keeper);
        assert_eq!(keeper.places.get(&(7, StepId(0))), Some(&Place::Stepd(300)));
        node.moves(
            300,
            &format!(
                "0::/{job_dir}/step_0/slurm
"
            ),
        );
        tick(&mut keeper);
        let step = found(&mut keeper, 7, StepId(0)).expect(job_dir);
        assert_eq!(step.job, Path::new(job_dir));
        assert_eq!(step.step_usage_ns(), Some(1_000_000), "{job_dir}");
        assert_eq!(
            step.job_counters(),
            Some(cgroup::JobCounters {
                cpus: 2,
                memory: Some(1 << 30),
                usage_ns: 1_010_000
            }),
            "{job_dir}"
        );
        // kept: no /proc read once found
        fs::remove_dir_all(node.site.proc_root.join("300")).expect("rm");
        tick(&mut keeper);
        assert!(found(&mut keeper, 7, StepId(0)).is_some(), "{job_dir}");
        // and dropped with the step
        node.sockets.clear();
        fs::remove_file(node.site.spool.join("n1_7.0")).expect("rm");
        tick(&mut keeper);
        assert!(keeper.places.is_empty(), "{job_dir}");
    }
}

/// Several slurmd on one host run a slurmstepd each for a step of a job that spans
/// their nodes: this node's is the one holding this node's socket.
#[test]
fn with_several_slurmd_on_a_host_the_step_is_this_nodes() {
    let mut node = Node::new("sys/fs/cgroup");
    let mount = node.site.cgroup_root.clone();
    let (ours, theirs) = (
        "system.slice/n1_slurmstepd.scope/job_9",
        "system.slice/n2_slurmstepd.scope/job_9",
    );
    cgroup::tests::v2_tree(&mount, ours, "0", "max", 100, &[("step_0", 50)]);
    cgroup::tests::v2_tree(&mount, theirs, "1-3", "max", 900, &[("step_0", 800)]);
    procs::tests::process(
        &node.site.proc_root,
        400,
        "slurmstepd: [9.0]",
        &format!(
            "0::/{theirs}/step_0/slurm
"
        ),
    );
    node.start(
        9,
        StepId(0),
        401,
        &format!(
            "0::/{ours}/step_0/slurm
"
        ),
    );
    let proc_root = node.site.proc_root.clone();
    let socket = |n: &str| node.tmp.path().join(format!("spool/{n}/{n}_9.0"));
    let _theirs = procs::tests::holds_socket(&proc_root, 400, &socket("n2"));
    let mut keeper = node.keeper();
    tick(&mut keeper);
    let step = found(&mut keeper, 9, StepId(0)).expect("step");
    assert_eq!(step.job, Path::new(ours));
    assert_eq!(step.step_usage_ns(), Some(50_000));
}

/// cgroup/v1 in every release (22.05 to 26.05 alike), the mount from cgroup.conf.
#[test]
fn v1_steps_are_found_where_their_slurmstepd_runs() {
    let conf = "# site\nCgroupPlugin=cgroup/v1\ncgroupmountpoint = /cgroup # ours\n";
    assert_eq!(cgroup_mountpoint(conf), Path::new("/cgroup"));
    assert_eq!(
        cgroup_mountpoint("CgroupPlugin=autodetect\n"),
        Path::new(CGROUP_ROOT)
    );
    // multiple-slurmd builds prefix `slurm_<node>`
    for slurm in ["slurm", "slurm_n1"] {
        let mut node = Node::new("cgroup");
        let mount = node.site.cgroup_root.clone();
        let steps = [("step_batch", 4_000), ("step_0", 2_000)];
        let job = cgroup::tests::v1_tree(&mount, slurm, 5, "0-3", 1 << 30, 6_000, &steps);
        // ConstrainCores: the slurmstepd is in the step's cpuset
        let constrained = cgroup::tests::v1_stepd(&job, "step_batch", true);
        node.start(5, StepId::BATCH, 500, &constrained);
        // no constraint: the slurmstepd is in its job's freezer cgroup, the step's
        // directory is `step_0` in it (its tasks' cgroups are never read)
        node.start(
            5,
            StepId(0),
            501,
            &cgroup::tests::v1_stepd(&job, "step_0", false),
        );
        let mut keeper = node.keeper();
        tick(&mut keeper);
        assert!(found(&mut keeper, 5, StepId::BATCH).is_some(), "{slurm}");
        let step = found(&mut keeper, 5, StepId(0)).expect("step 0");
        assert_eq!(step.job, Path::new(&job[1..]));
        assert_eq!(step.step_usage_ns(), Some(2_000));
        assert_eq!(
            step.job_counters(),
            Some(cgroup::JobCounters {
                cpus: 4,
                memory: Some(1 << 30),
                usage_ns: 6_000
            })
        );
        node.ends(5, StepId(0), 501);
        tick(&mut keeper);
        assert_eq!(keeper.places.len(), 1, "{slurm}");
    }
}

/// A step whose slurmstepd is not found is searched for at every sample while its
/// socket is young (a new slurmstepd a loaded node has not titled yet: its job has no
/// share until found), then less and less often (a stale socket).
#[test]
fn an_unseen_step_is_searched_for_at_every_sample_while_young_then_less_often() {
    let node = Node::new("cgroup");
    cgroup::tests::v1_tree(&node.site.cgroup_root, "slurm", 3, "0", 1 << 30, 0, &[]);
    let socket = node.site.spool.join("n1_3.0");
    let _listener = UnixListener::bind(&socket).expect("socket");
    let mut keeper = node.keeper();
    let mut searched = Vec::new();
    for sample in 0..40 {
        if sample == 20 {
            let old = nix::sys::time::TimeSpec::new(
                (SystemTime::now() - 2 * YOUNG_SOCKET)
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("after 1970")
                    .as_secs() as i64,
                0,
            );
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                &socket,
                &old,
                &old,
                nix::sys::stat::UtimensatFlags::NoFollowSymlink,
            )
            .expect("age the socket");
        }
        let before = keeper.places.get(&(3, StepId(0))).cloned();
        tick(&mut keeper);
        if keeper.places.get(&(3, StepId(0))) != before.as_ref() {
            searched.push(sample);
        }
    }
    let mut expected: Vec<u64> = (0..20).collect();
    expected.extend([20, 22, 26, 34]);
    assert_eq!(searched, expected);
}

/// However many steps start, and however often the ledger is updated (rings), /proc is
/// searched at most once per SCAN_GAP: the steps of the samples between wait for the next
/// search, which finds them all at once.
#[test]
fn proc_is_searched_at_most_twice_a_second() {
    assert_eq!(procs::SCAN_GAP, Duration::from_millis(500));
    let mut node = Node::new("cgroup");
    cgroup::tests::v1_tree(&node.site.cgroup_root, "slurm", 3, "0", 1 << 30, 0, &[]);
    node.start(3, StepId(0), 300, "0::/\n");
    let mut keeper = node.keeper();
    tick(&mut keeper);
    let searched = Instant::now();
    assert_eq!(keeper.places.get(&(3, StepId(0))), Some(&Place::Stepd(300)));
    // new steps at every sample: none is searched for until SCAN_GAP has passed (a sample
    // that ended within it began within it; a loaded machine may get through fewer)
    let mut within = 0;
    for (k, job) in (4..24).enumerate() {
        node.start(job, StepId(0), 400 + job, "0::/\n");
        sample(&mut keeper);
        if searched.elapsed() >= procs::SCAN_GAP {
            break;
        }
        assert_eq!(keeper.places.len(), 1, "sample {k}: no search");
        within += 1;
    }
    assert!(within > 0, "no sample within SCAN_GAP of the search");
    std::thread::sleep(procs::SCAN_GAP.saturating_sub(searched.elapsed()));
    sample(&mut keeper);
    // the steps started so far, all found by one search
    for job in 4..4 + within.max(1) {
        let place = keeper.places.get(&(job, StepId(0)));
        assert_eq!(place, Some(&Place::Stepd(400 + job)), "{job}");
    }
}

/// A job's owner can title a process as any step's slurmstepd (`exec -a`): it is not
/// taken for one unless it runs as slurmd's user and holds the step's socket.
#[test]
fn a_process_titled_as_a_slurmstepd_is_not_taken_for_one() {
    let node = Node::new("cgroup");
    let job = cgroup::tests::v1_tree(&node.site.cgroup_root, "slurm", 3, "0", 1 << 30, 0, &[]);
    let listener = UnixListener::bind(node.site.spool.join("n1_3.0")).expect("socket");
    let root = &node.site.proc_root;
    let task = format!("4:cpuset:/{job}/step_0/task_0\n");
    // the user's process, as another uid; and one of slurmd's uid not holding it
    procs::tests::process_of(root, 900, "slurmstepd: [3.0]", &task, 4242);
    procs::tests::process(root, 901, "slurmstepd: [3.0]", &task);
    let mut keeper = node.keeper();
    tick(&mut keeper);
    assert!(matches!(
        keeper.places.get(&(3, StepId(0))),
        Some(Place::Unseen { .. })
    ));
    assert!(keeper.starts.contains_key(&(3, StepId(0))));
    // the step's own slurmstepd, holding its socket, is found
    procs::tests::process(root, 902, "slurmstepd: [3.0]", "0::/\n");
    procs::tests::holds(root, 902, &listener);
    tick(&mut keeper);
    assert_eq!(
        keeper.places.get(&(3, StepId(0))).and_then(Place::stepd),
        Some(902)
    );
}

#[test]
fn without_cgroups_the_keeper_says_what_is_missing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let site = Site {
        spool: tmp.path().to_path_buf(),
        cgroup_root: tmp.path().join("nothing"),
        proc_root: tmp.path().join("proc"),
    };
    let e = Keeper::shared(&site, 0, None).err().expect("error");
    assert!(e.contains("cgroup"), "{e}");
}

#[test]
fn a_step_reads_its_share_extrapolated_and_never_less() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (spool, cgroups) = (tmp.path().join("spool"), tmp.path().join("cgroup"));
    fs::create_dir_all(&spool).expect("spool");
    let job = cgroup::tests::v1_tree(
        &cgroups,
        "slurm",
        5,
        "0",
        u64::MAX,
        0,
        &[("step_extern", 0)],
    );
    let proc_root = tmp.path().join("proc");
    let stepd = cgroup::tests::v1_stepd(&job, "step_extern", true);
    let socket = spool.join("n1_5.4294967292");
    let _sock = procs::tests::stepd(&proc_root, 40, (5, StepId::EXTERN), &stepd, &socket);
    let procs = Procs::from_path(&proc_root);
    let site = Site {
        spool: spool.clone(),
        cgroup_root: cgroups.clone(),
        proc_root,
    };
    let attribution = Attribution {
        mode: Mode::Shared,
        idle_watts: Some(10.0),
    };
    let mut keeper = Keeper::shared(&site, 0, attribution.idle_watts).expect("keeper");
    let mut share = StepFigure::from_path(&ledger_path(&spool, 0), &procs, 40, true);
    // no ledger yet: no figure at all, not 0 J
    assert!(!share.read().complete);

    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut accounting = Accounting::new(w0);
    let reading = |uj| Reading {
        energy_uj: uj,
        complete: true,
        ..Reading::default()
    };
    accounting.record(&reading(0), t0, w0);
    keeper.on_sample(&accounting, &Reading::default());
    // 2 s later, 200 J: the job alone gets it all, at 100 W
    let later = |s| (t0 + Duration::from_secs(s), w0 + Duration::from_secs(s));
    let (t, w) = later(2);
    accounting.record(&reading(200_000_000), t, w);
    keeper.pace = Arc::default();
    // the file is written every STORE_INTERVAL: this step reads it (no doorbell)
    keeper.stored = None;
    keeper.on_sample(&accounting, &Reading::default());
    let first = share.read();
    assert!(first.complete);
    // over its life: from its slurmstepd's start (its socket's time here, a moment before
    // the first sample: no energy was seen before that sample)
    let started = fs::metadata(&socket)
        .and_then(|m| m.modified())
        .expect("socket's time");
    let life = crate::ledger::unix(w) - crate::ledger::unix(started);
    let watts = first.watts.expect("a power");
    assert!(
        (watts - 200.0 / life).abs() < 0.01,
        "{watts} W over {life} s"
    );
    // read now, i.e. up to 2 s before the sample's wall time: no extrapolation back
    assert!(first.energy_uj >= 200_000_000, "{}", first.energy_uj);
    assert!(
        first.energy_uj <= 200_000_000 + 300_000_000,
        "capped at 3 s"
    );
    // the power falls to 0: the next sample publishes no more joules; the figure is
    // the published one again, not what was brought forward at the old power
    let (t, w) = later(3);
    accounting.record(&reading(200_000_000), t, w);
    keeper.pace = Arc::default();
    keeper.stored = None;
    keeper.on_sample(&accounting, &Reading::default());
    let after_fall = share.read();
    assert_eq!(after_fall.watts, Some(0.0));
    assert_eq!(after_fall.energy_uj, 200_000_000);
    // the ledger is continued by a new keeper
    let again = Keeper::shared(&site, 0, attribution.idle_watts).expect("keeper");
    assert_eq!(
        again.ledger.step(5, StepId::EXTERN).map(|a| a.joules),
        Some(200.0)
    );
}

/// A step's last read is answered by an update that charges it, and no later one does;
/// with its extern step's, its job is charged no more, and the node's energy goes to the
/// jobs still on it. Forgotten with the step.
#[test]
fn a_step_is_charged_up_to_its_last_read_and_its_job_no_more_after_its_extern_steps() {
    let mut node = Node::new("cgroup");
    let mount = node.site.cgroup_root.clone();
    let five = [("step_extern", 0), ("step_batch", 0)];
    let job5 = cgroup::tests::v1_tree(&mount, "slurm", 5, "0", u64::MAX, 0, &five);
    let job6 = cgroup::tests::v1_tree(&mount, "slurm", 6, "1", u64::MAX, 0, &five[..1]);
    let stepd = |job: &str, step| cgroup::tests::v1_stepd(job, step, true);
    node.start(5, StepId::EXTERN, 40, &stepd(&job5, "step_extern"));
    node.start(5, StepId::BATCH, 41, &stepd(&job5, "step_batch"));
    node.start(6, StepId::EXTERN, 50, &stepd(&job6, "step_extern"));
    // no static power, nobody busy: each job gets half of each interval
    let mut keeper = Keeper::shared(&node.site, 0, Some(0.0)).expect("keeper");
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut accounting = Accounting::new(w0);
    let mut sample = |keeper: &mut Keeper, s: u64, last_read: Option<u32>| {
        let (t, w) = (t0 + Duration::from_secs(s), w0 + Duration::from_secs(s));
        let reading = Reading {
            energy_uj: s * 100_000_000,
            complete: true,
            ..Reading::default()
        };
        accounting.record(&reading, t, w);
        keeper.pace = Arc::default();
        if let Some(pid) = last_read {
            keeper.pace.last_read(pid);
        }
        keeper.on_sample(&accounting, &Reading::default());
        let joules = |job, step| keeper.ledger.step(job, step).map(|a| a.joules.round());
        (
            joules(5, StepId::EXTERN),
            joules(5, StepId::BATCH),
            joules(6, StepId::EXTERN),
        )
    };
    sample(&mut keeper, 0, None);
    let (_, batch, _) = sample(&mut keeper, 2, None);
    assert_eq!(sample(&mut keeper, 2, None).0, Some(100.0));
    // the batch step's last read: the update that answers charges it
    let (extern5, batch_last, six) = sample(&mut keeper, 4, Some(41));
    assert_eq!((extern5, six), (Some(200.0), Some(200.0)));
    assert!(batch_last > batch, "{batch_last:?} > {batch:?}");
    // the job goes on in its extern step; its batch step is charged no more
    assert_eq!(
        sample(&mut keeper, 6, None),
        (Some(300.0), batch_last, Some(300.0))
    );
    // the extern step's last read, answered; then the job is charged no more
    assert_eq!(
        sample(&mut keeper, 8, Some(40)),
        (Some(400.0), batch_last, Some(400.0))
    );
    assert_eq!(
        sample(&mut keeper, 10, None),
        (Some(400.0), batch_last, Some(600.0))
    );
    assert_eq!(keeper.ledger.job(5).map(|a| a.joules.round()), Some(400.0));
    // a pid that is no step's changes nothing
    assert_eq!(
        sample(&mut keeper, 12, Some(99)),
        (Some(400.0), batch_last, Some(800.0))
    );
    node.ends(5, StepId::EXTERN, 40);
    node.ends(5, StepId::BATCH, 41);
    sample(&mut keeper, 14, None);
    assert!(keeper.ended.is_empty(), "{:?}", keeper.ended);
}

/// Steps ask slurmd for their figures: the ledger file, what a slurmd started again
/// continues from and what a step reads when slurmd does not answer, is written every
/// [`STORE_INTERVAL`] rather than at each update, at once for a step that rang the way of
/// before (it waits for the file), and when slurmd stops. Every update is in the book.
#[test]
fn the_ledger_file_is_written_every_interval_and_the_slots_at_every_update() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut keeper = Keeper::node(tmp.path(), 0).expect("keeper");
    let path = keeper.path().to_path_buf();
    let (t0, w0) = (Instant::now(), SystemTime::now());
    let mut accounting = Accounting::new(w0);
    let written = || {
        Ledger::load(&path)
            .expect("ledger")
            .map(|l| l.sampled_at() - crate::ledger::unix(w0))
    };
    let mut sample = |keeper: &mut Keeper, secs: u64| {
        let at = Duration::from_secs(secs);
        let reading = Reading {
            energy_uj: secs * 100_000_000,
            complete: true,
            ..Reading::default()
        };
        accounting.record(&reading, t0 + at, w0 + at);
        // each sample updates (the pace counts real time; these are a second apart)
        let wanted = keeper.pace.take_file_wanted();
        keeper.pace = Arc::default();
        if wanted {
            keeper.pace.want_file();
        }
        keeper.on_sample(&accounting, &Reading::default());
    };
    sample(&mut keeper, 0);
    assert_eq!(written(), Some(0.0), "the first update");
    for secs in 1..STORE_INTERVAL.as_secs() {
        sample(&mut keeper, secs);
        assert_eq!(written(), Some(0.0), "not at {secs} s");
    }
    let book = keeper.book();
    let (mine, theirs) = std::os::unix::net::UnixStream::pair().expect("pair");
    let current = crate::ledger::ask::Request {
        step: None,
        want: crate::ledger::ask::Want::Current,
    };
    book.take(current, theirs, Instant::now());
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut &mine, &mut bytes).expect("answer");
    let answer = crate::ledger::ask::Answer::decode(&bytes).expect("an answer");
    let last = (STORE_INTERVAL.as_secs() - 1) as f64;
    assert!((answer.sampled_at - crate::ledger::unix(w0) - last).abs() < 1e-3);
    // the slots, which Slurm's periodic polls read, are written at every update
    let slots = crate::ledger::slots::Reader::open(&path).expect("the slots");
    let crate::ledger::slots::Slot::Found(slotted) = slots.read(None) else {
        panic!("the node's figures in the slots");
    };
    assert_eq!(slotted, answer);
    sample(&mut keeper, STORE_INTERVAL.as_secs());
    assert_eq!(written(), Some(STORE_INTERVAL.as_secs_f64()));
    // a step of before rang: the next update writes the file
    let next = STORE_INTERVAL.as_secs() + 1;
    keeper.pace.want_file();
    sample(&mut keeper, next);
    assert_eq!(written(), Some(next as f64));
    sample(&mut keeper, next + 1);
    assert_eq!(written(), Some(next as f64));
    drop(keeper);
    assert_eq!(
        written(),
        Some((next + 1) as f64),
        "written as slurmd stops"
    );
}
