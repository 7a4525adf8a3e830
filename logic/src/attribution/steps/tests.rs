use super::*;
use crate::attribution::{CGROUP_ROOT, Site, cgroup, cgroup_mountpoint};
use std::os::unix::net::UnixListener;
use std::time::{Instant, SystemTime};

/// One sample of `steps`, whatever the time since its last search of /proc.
fn tick(steps: &mut Steps) {
    steps.scans = procs::Scans::default();
    sample(steps);
}

/// One sample of `steps`; /proc is searched only if its last search is
/// [`procs::SCAN_GAP`] old.
fn sample(steps: &mut Steps) {
    steps.find(None);
}

fn found(steps: &mut Steps, job: u32, step: StepId) -> Option<&mut StepCgroup> {
    match steps.places.get_mut(&StepKey::new(job, step)) {
        Some(Place::Found(_, cgroup)) => Some(&mut **cgroup),
        _ => None,
    }
}

/// A node's spool dir, cgroup mount and /proc in a temp dir.
pub(crate) struct Node {
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) site: Site,
    pub(crate) sockets: HashMap<StepKey, UnixListener>,
}

impl Node {
    pub(crate) fn new(mount: &str) -> Self {
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
    pub(crate) fn start(&mut self, job: u32, step: StepId, pid: u32, cgroup: &str) {
        let socket = self.site.spool.join(format!("n1_{job}.{}", step.0));
        let socket = procs::tests::stepd(
            &self.site.proc_root,
            pid,
            StepKey::new(job, step),
            cgroup,
            &socket,
        );
        self.sockets.insert(StepKey::new(job, step), socket);
    }

    fn moves(&self, pid: u32, cgroup: &str) {
        cgroup::tests::write(&self.site.proc_root.join(format!("{pid}/cgroup")), cgroup);
    }

    pub(crate) fn ends(&mut self, job: u32, step: StepId, pid: u32) {
        self.sockets.remove(&StepKey::new(job, step));
        fs::remove_file(self.site.spool.join(format!("n1_{job}.{}", step.0))).expect("rm");
        fs::remove_dir_all(self.site.proc_root.join(pid.to_string())).expect("rm");
    }

    /// The node's steps, read in its cgroup tree.
    fn steps(&self) -> Steps {
        let tree = CgroupTree::from_path(&self.site.cgroup_root).expect("cgroup tree");
        Steps::new(&self.site.spool, Some(tree), &self.site.proc_root)
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
        let mut steps = node.steps();
        tick(&mut steps);
        assert_eq!(
            steps.places.get(&StepKey::new(7, StepId(0))),
            Some(&Place::Stepd(300))
        );
        node.moves(
            300,
            &format!(
                "0::/{job_dir}/step_0/slurm
"
            ),
        );
        tick(&mut steps);
        let step = found(&mut steps, 7, StepId(0)).expect(job_dir);
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
        tick(&mut steps);
        assert!(found(&mut steps, 7, StepId(0)).is_some(), "{job_dir}");
        // and dropped with the step
        node.sockets.clear();
        fs::remove_file(node.site.spool.join("n1_7.0")).expect("rm");
        tick(&mut steps);
        assert!(steps.places.is_empty(), "{job_dir}");
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
    let mut steps = node.steps();
    tick(&mut steps);
    let step = found(&mut steps, 9, StepId(0)).expect("step");
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
        let mut steps = node.steps();
        tick(&mut steps);
        assert!(found(&mut steps, 5, StepId::BATCH).is_some(), "{slurm}");
        let step = found(&mut steps, 5, StepId(0)).expect("step 0");
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
        tick(&mut steps);
        assert_eq!(steps.places.len(), 1, "{slurm}");
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
    let mut steps = node.steps();
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
        let before = steps.places.get(&StepKey::new(3, StepId(0))).cloned();
        tick(&mut steps);
        if steps.places.get(&StepKey::new(3, StepId(0))) != before.as_ref() {
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
    let mut steps = node.steps();
    tick(&mut steps);
    let searched = Instant::now();
    assert_eq!(
        steps.places.get(&StepKey::new(3, StepId(0))),
        Some(&Place::Stepd(300))
    );
    // new steps at every sample: none is searched for until SCAN_GAP has passed (a sample
    // that ended within it began within it; a loaded machine may get through fewer)
    let mut within = 0;
    for (k, job) in (4..24).enumerate() {
        node.start(job, StepId(0), 400 + job, "0::/\n");
        sample(&mut steps);
        if searched.elapsed() >= procs::SCAN_GAP {
            break;
        }
        assert_eq!(steps.places.len(), 1, "sample {k}: no search");
        within += 1;
    }
    assert!(within > 0, "no sample within SCAN_GAP of the search");
    std::thread::sleep(procs::SCAN_GAP.saturating_sub(searched.elapsed()));
    sample(&mut steps);
    // the steps started so far, all found by one search
    for job in 4..4 + within.max(1) {
        let place = steps.places.get(&StepKey::new(job, StepId(0)));
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
    let mut steps = node.steps();
    tick(&mut steps);
    assert!(matches!(
        steps.places.get(&StepKey::new(3, StepId(0))),
        Some(Place::Unseen { .. })
    ));
    assert!(steps.starts.contains_key(&StepKey::new(3, StepId(0))));
    // the step's own slurmstepd, holding its socket, is found
    procs::tests::process(root, 902, "slurmstepd: [3.0]", "0::/\n");
    procs::tests::holds(root, 902, &listener);
    tick(&mut steps);
    assert_eq!(
        steps
            .places
            .get(&StepKey::new(3, StepId(0)))
            .and_then(Place::stepd),
        Some(902)
    );
}

/// A step whose grant names its slurmstepd is placed from that one process, which here has
/// no title and holds no socket in /proc: a search would not find it (before, the only way,
/// a pass over every process of the host). A grant naming a pid given again (another
/// start) or gone places nothing.
#[test]
fn a_slurmstepd_its_grant_names_is_placed_without_a_search_of_proc() {
    use crate::attribution::grant::{StepdId, tests::grant};
    let mut node = Node::new("cgroup");
    let step = StepKey::new(5, StepId(0));
    let socket = node.site.spool.join("n1_5.0");
    node.sockets
        .insert(step, UnixListener::bind(&socket).expect("bind"));
    procs::tests::process(&node.site.proc_root, 40, "sleep 100", "0::/");
    cgroup::tests::write(
        &node.site.proc_root.join("40/stat"),
        "40 (sleep) S 1 40 40 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 1234 9000000 100\n",
    );
    let placed = |start| {
        let signed = Grant {
            stepd: Some(StepdId { pid: 40, start }),
            ..grant(5, StepId(0), Vec::new())
        };
        signed.publish(&node.site.spool).expect("publish");
        let mut steps = Steps::new(&node.site.spool, None, &node.site.proc_root);
        tick(&mut steps);
        steps.places.get(&step).and_then(Place::stepd)
    };
    assert_eq!(placed(1234), Some(40));
    assert_eq!(placed(1235), None);
    fs::remove_dir_all(node.site.proc_root.join("40")).expect("rm");
    assert_eq!(placed(1234), None);
}
