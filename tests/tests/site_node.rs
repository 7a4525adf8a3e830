//! The site-node tier: a Debian node as a site sets one up, in a VM with its own kernel,
//! systemd as PID 1 and cgroup v2 with its controllers as Debian boots it, Debian's own
//! slurmd, slurmctld, slurmdbd (MariaDB) and munge started by their units, the package
//! installed with apt, README's Configure blocks as printed, jobs of an ordinary user.
//!
//! ci/site-node/build-image.sh builds (and caches) the node's disk from the package
//! registry; this test stages a payload disk (the .deb of ci/package.sh, `raplsim` and
//! tests/fakehw/bind-rapl.sh as the node's RAPL hardware, README's blocks, the scenario
//! ci/site-node/entry.sh), boots the VM under qemu's TCG (`-snapshot`: the cached disk is
//! never written; a reboot inside keeps what the run wrote), and reads the raw figures the
//! scenario writes to the VM's second serial port. Every expected figure is computed here
//! from the simulator's truth.

use energy_tests as support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::fakegpu::{FakeGpus, Vendor};
use support::*;

/// The longest the VM may run: boot, setup, six jobs, a reboot, a restart with GPUs (about
/// 7 to 12 minutes under TCG on a 2-core machine beside other work).
const VM_LIMIT: Duration = Duration::from_secs(1500);
/// `EnergyAttribution=shared`'s node power in the measured windows (entry.sh's `sim_set`).
const ON_WATTS: f64 = 300.0;
/// raplsim's power before the windows (ci/site-node/raplsim.service): the static power
/// the ledger learns with no job on the node.
const BASE_WATTS: f64 = 100.0;

/// The `R KEY VALUE...` lines of the scenario, in order.
struct Results(Vec<(String, String)>);

impl Results {
    fn parse(text: &str) -> Results {
        Results(
            text.lines()
                .filter_map(|l| l.trim_end_matches('\r').strip_prefix("R "))
                .map(|l| match l.split_once(' ') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (l.to_string(), String::new()),
                })
                .collect(),
        )
    }

    /// Every value of `key`.
    fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The last value of `key` (panics naming it when the scenario wrote none).
    fn get(&self, key: &str) -> &str {
        self.all(key)
            .last()
            .copied()
            .unwrap_or_else(|| panic!("the scenario wrote no {key}"))
    }

    /// The fields after `name` of the last `key name ...` line.
    fn of(&self, key: &str, name: &str) -> Vec<&str> {
        let line = self
            .all(key)
            .into_iter()
            .rev()
            .find(|v| v.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("the scenario wrote no {key} {name}"));
        line.split_whitespace().skip(1).collect()
    }
}

fn number(what: &str, text: &str) -> f64 {
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{what}: not a number: {text:?}"))
}

/// `program` on PATH, or `None` where ENERGY_TESTS_ALLOW_SKIP=1 lets the test skip.
fn tool_or_skip(test: &str, program: &str, package: &str) -> Option<()> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(());
    }
    if std::env::var("ENERGY_TESTS_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!("SKIPPED {test}: no {program} (apt-get install {package})");
        return None;
    }
    panic!("{test} needs {program}: apt-get install {package} (ci/deps.sh installs it)");
}

/// The .deb of ci/package.sh (ENERGY_TEST_DEB), or `None` where ENERGY_TESTS_ALLOW_SKIP=1
/// lets `test` skip without it.
fn deb_or_skip(test: &str) -> Option<PathBuf> {
    match std::env::var_os("ENERGY_TEST_DEB") {
        Some(deb) if !deb.is_empty() => Some(PathBuf::from(deb)),
        _ if std::env::var("ENERGY_TESTS_ALLOW_SKIP").as_deref() == Ok("1") => {
            eprintln!("SKIPPED {test}: ENERGY_TEST_DEB unset");
            None
        }
        _ => panic!(
            "ENERGY_TEST_DEB must name the .deb of ci/package.sh (ci/test.sh sets it), \
             or set ENERGY_TESTS_ALLOW_SKIP=1 to skip"
        ),
    }
}

/// The fenced blocks of README.md's "## Configure" section, in order (as
/// cluster_admin.rs reads them).
fn readme_configure_blocks() -> Vec<String> {
    let readme = fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Configure\n"))
        .expect("README.md has a \"## Configure\" section");
    section
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|block| {
            block
                .trim_start_matches(|c| c != '\n')
                .trim_start()
                .to_string()
        })
        .collect()
}

/// The node's disk (ci/site-node/build-image.sh, cached): the directory of disk.img,
/// vmlinuz and initrd.img.
fn base_image(suite: &str) -> PathBuf {
    let t0 = Instant::now();
    let out = Command::new("sh")
        .arg(workspace().join("ci/site-node/build-image.sh"))
        .arg(suite)
        .stderr(Stdio::inherit())
        .output()
        .expect("run ci/site-node/build-image.sh");
    assert!(
        out.status.success(),
        "ci/site-node/build-image.sh {suite} failed"
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    println!(
        "base image {} ({:.0} s, cached when that is a second or two)",
        dir.display(),
        t0.elapsed().as_secs_f64()
    );
    dir
}

/// The payload disk: what entry.sh reads from /payload.
fn payload(tmp: &Path, deb: &Path, suite: &str) -> PathBuf {
    let stage = tmp.join("payload");
    fs::create_dir_all(&stage).expect("mkdir payload");
    let site = workspace().join("ci/site-node");
    for f in [
        "entry.sh",
        "slurm.site.conf",
        "raplsim.service",
        "fake-rapl.service",
        "cgroup-job.sh",
        "site0.netdev",
        "site0.network",
    ] {
        fs::copy(site.join(f), stage.join(f)).expect("copy a site-node file");
    }
    fs::copy(
        workspace().join("tests/fakehw/bind-rapl.sh"),
        stage.join("bind-rapl.sh"),
    )
    .expect("copy bind-rapl.sh");
    fs::copy(bin("raplsim"), stage.join("raplsim")).expect("copy raplsim");
    // the stand-in NVML (built here: the VM has no compiler) and its power script
    let fake = FakeGpus::new(Vendor::Nvidia, &[0, 1]);
    fs::copy(fake.library(), stage.join("libnvidia-ml.so.1")).expect("copy the stand-in NVML");
    fs::copy(
        workspace().join("tests/fakegpu/set_power.sh"),
        stage.join("set_power.sh"),
    )
    .expect("copy set_power.sh");
    // what the VM runs, executable whatever the checkout's modes
    for f in [
        "entry.sh",
        "cgroup-job.sh",
        "bind-rapl.sh",
        "raplsim",
        "set_power.sh",
        "libnvidia-ml.so.1",
    ] {
        fs::set_permissions(stage.join(f), fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    if suite == "trixie" {
        // Debian 13's slurmdbd fails its first query with Debian 13's libmariadb3 (entry.sh
        // says how): Debian 12's Connector/C, this host's, stands in for it
        fs::copy(
            "/usr/lib/x86_64-linux-gnu/libmariadb.so.3",
            stage.join("libmariadb.so.3"),
        )
        .expect("Debian 12's libmariadb.so.3 (libmariadb3) on this host");
    }
    let name = deb.file_name().expect("the .deb's name");
    fs::copy(deb, stage.join(name)).expect("copy the .deb");

    // README's three blocks, unchanged: they name no node and no CPU count, which are the
    // only lines a site would change (the site's own lines are slurm.site.conf's)
    let blocks = readme_configure_blocks();
    let [slurm, cgroup, acct_gather] = &blocks[..] else {
        panic!("README's Configure section has three blocks, not {blocks:?}");
    };
    for (file, block) in [
        ("slurm.readme.conf", slurm),
        ("cgroup.readme.conf", cgroup),
        ("acct_gather.readme.conf", acct_gather),
    ] {
        fs::write(stage.join(file), block).expect("write a README block");
        println!(
            "{file}: README's block as printed ({} lines), changes: none (it names no node and no CPU count)",
            block.lines().count()
        );
    }
    let img = tmp.join("payload.img");
    let size = fs::read_dir(&stage)
        .expect("payload")
        .flatten()
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum::<u64>()
        / (1 << 20)
        + 32;
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-d"])
        .arg(&stage)
        .arg(&img)
        .arg(format!("{size}M"))
        .output()
        .expect("run mkfs.ext4");
    assert!(
        out.status.success(),
        "mkfs.ext4 payload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    img
}

/// Boots the VM until it powers off (the scenario's end), at most [`VM_LIMIT`]; returns
/// what its second serial port received.
fn boot(tmp: &Path, image: &Path, payload: &Path) -> String {
    let console = tmp.join("console.log");
    let results = tmp.join("results.txt");
    let t0 = Instant::now();
    let mut vm = Command::new("qemu-system-x86_64");
    vm.args(["-accel", "tcg,thread=multi", "-cpu", "max"])
        .args(["-smp", "2,sockets=1,cores=2,threads=1"])
        .args(["-m", "2048", "-display", "none", "-monitor", "none"])
        .arg("-kernel")
        .arg(image.join("vmlinuz"))
        .arg("-initrd")
        .arg(image.join("initrd.img"))
        // tsc=unstable: Debian 13's kernel marks sched_clock stable about 10 s into a boot by
        // patching its text (a static key, int3 breakpoints) while the other vCPU runs it,
        // which qemu's multi-threaded TCG raced into a kernel panic once in CI
        .args([
            "-append",
            "root=/dev/vda rw console=ttyS0,115200 tsc=unstable",
        ])
        .arg("-drive")
        .arg(format!(
            "file={},format=raw,if=virtio,snapshot=on",
            image.join("disk.img").display()
        ))
        .arg("-drive")
        .arg(format!("file={},format=raw,if=virtio", payload.display()))
        .args(["-nic", "none"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-serial")
        .arg(format!("file:{}", results.display()))
        .stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe; the VM dies with this test (a killed run leaves
    // no VM behind)
    unsafe {
        vm.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut vm = vm.spawn().expect("start qemu-system-x86_64");
    let status = loop {
        if let Some(status) = vm.try_wait().expect("wait for qemu") {
            break Some(status);
        }
        if t0.elapsed() > VM_LIMIT {
            let _ = vm.kill();
            let _ = vm.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let text = fs::read_to_string(&results).unwrap_or_default();
    println!("VM ran {:.0} s ({status:?})", t0.elapsed().as_secs_f64());
    if status.is_none() || !text.contains("R done ok") {
        let log = fs::read_to_string(&console).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(80).collect();
        println!("---- console (last 80 lines)");
        for l in tail.iter().rev() {
            println!("{l}");
        }
    }
    text
}

/// One job's window at [`ON_WATTS`] (0 W before and after): its final figure against the
/// truth over the window.
fn alone_against_truth(r: &Results, name: &str, relative: f64) -> f64 {
    let window = r.of("window", name);
    let truth = number("window end", window[1]) - number("window start", window[0]);
    let fin = r.of("final", name);
    println!("{name}: job {} {}", fin[0], fin.get(2).unwrap_or(&"?"));
    let measured = number(&format!("{name}'s sacct figure"), fin.get(1).unwrap_or(&""));
    assert_close(
        &format!("{name}: sacct against the truth"),
        measured,
        truth,
        relative,
    );
    truth
}

/// The GPU job under `ConstrainDevices=yes`: the devices filter let it open its own GPU's
/// device file (which reaches the absent driver) and refused the other; its figure is its
/// CPUs' (the node's RAPL truth over the window: it was alone) and its GPU's (the stand-in's
/// power schedule) within 2%.
fn gpu_job_against_truth(r: &Results) {
    let devices = r.all("gpu_device");
    println!("gpu job's device files: {devices:?}");
    let own: Vec<&str> = devices
        .iter()
        .filter(|d| d.ends_with("No such device or address"))
        .copied()
        .collect();
    let refused = devices
        .iter()
        .filter(|d| d.ends_with("Operation not permitted"))
        .count();
    assert_eq!(
        (own.len(), refused),
        (1, 1),
        "the devices filter gives the job its one GPU: {devices:?}"
    );
    let minor = own[0]
        .split_whitespace()
        .next()
        .and_then(|d| d.strip_prefix("/dev/nvidia"))
        .expect("a device file");
    // "<ns> <minor> <watts>" lines: the job's GPU at 200 W, then 0 W
    let schedule: Vec<(f64, &str, f64)> = r
        .get("gpu_power_log")
        .split(';')
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                *f.get(1)?,
                f.get(2)?.parse().ok()?,
            ))
        })
        .collect();
    println!("gpu power schedule: {schedule:?}");
    assert!(schedule.iter().all(|(_, m, _)| *m == minor), "{schedule:?}");
    let gpu_joules: f64 = schedule
        .windows(2)
        .map(|w| w[0].2 * (w[1].0 - w[0].0) / 1e9)
        .sum();
    let window = r.of("window", "gpu");
    let cpu_joules = number("window end", window[1]) - number("window start", window[0]);
    let fin = r.of("final", "gpu");
    let measured = number("the gpu job's sacct figure", fin.get(1).unwrap_or(&""));
    println!(
        "gpu: job {} {}: sacct {measured} J, the truth {cpu_joules:.0} J of CPUs and \
         {gpu_joules:.0} J of its GPU",
        fin[0],
        fin.get(2).unwrap_or(&"?")
    );
    assert_close(
        "gpu: sacct against the truth",
        measured,
        cpu_joules + gpu_joules,
        0.02,
    );
}

/// `senergy job --json`'s kept record, and the SystemComment the Epilog wrote.
fn epilog_record(r: &Results, name: &str, truth: f64) {
    let comment = r.of("system_comment", name)[1..].join(" ");
    println!("{name}: SystemComment {comment}");
    let record: Value =
        serde_json::from_str(comment.strip_prefix("senergy=").unwrap_or_else(|| {
            panic!("{name}: the Epilog's senergy record wrote no record: {comment:?}")
        }))
        .expect("the record is JSON");
    let kept = record["nodes"]["sitenode1"]["joules"]
        .as_f64()
        .unwrap_or_else(|| panic!("no sitenode1 joules in {record:#}"));
    assert_close(&format!("{name}: the Epilog's record"), kept, truth, 0.01);
    let shown = r.of("senergy_job_json", name).join(" ");
    let doc: Value = serde_json::from_str(&shown)
        .unwrap_or_else(|_| panic!("{name}: senergy job --json as the user said {shown}"));
    let k = &doc["jobs"][0]["kept"];
    assert_eq!(
        k["recorded"], true,
        "{name}: senergy job as the user: {doc:#}"
    );
    let joules = k["joules"].as_f64().expect("kept joules");
    assert_close(
        &format!("{name}: senergy job as the user, kept"),
        joules,
        truth,
        0.01,
    );
}

/// The busy and the idle job's live figures over the window between the two snapshots,
/// against the model's share of the truth (docs/shared-nodes.md): the static part
/// (the learned static power over the window) half each, the rest by cgroup CPU time.
fn pair_against_model(r: &Results) {
    let floor = number("floor_at_pair", r.get("floor_at_pair"));
    println!("static power learned at {floor:.1} W (the node drew {BASE_WATTS} W with no job)");
    assert!(
        (floor - BASE_WATTS).abs() <= 0.03 * BASE_WATTS,
        "learned {floor} W where the node drew {BASE_WATTS} W"
    );
    let snap = |name: &str| -> Vec<f64> {
        r.of("snapshot", name)
            .iter()
            .map(|v| number("snapshot", v))
            .collect()
    };
    // truth_first truth_last cpu_busy cpu_idle (energy truth_before truth_after) x 2
    let (a, b) = (snap("a"), snap("b"));
    let node = (b[0] + b[1]) / 2.0 - (a[0] + a[1]) / 2.0;
    let used = [(b[2] - a[2]) / 1e6, (b[3] - a[3]) / 1e6];
    let total: f64 = used.iter().sum();
    println!(
        "window {:.1} s, node {node:.0} J, CPU time busy {:.2} s idle {:.2} s",
        node / ON_WATTS,
        used[0],
        used[1]
    );
    // each job's share of the node over its own window: the two jobs' live figures are
    // read at different moments of a snapshot (seconds apart in a VM under TCG beside CI's
    // tests), so their sum is not the node's over any one window, but their fractions of
    // the node over their own windows add up to one
    let mut fractions = 0.0;
    for (k, name) in ["busy", "idle"].iter().enumerate() {
        let at = 4 + 3 * k;
        let node_k = (b[at + 1] + b[at + 2]) / 2.0 - (a[at + 1] + a[at + 2]) / 2.0;
        let static_k = floor * node_k / ON_WATTS;
        let predicted = static_k / 2.0 + (node_k - static_k) * used[k] / total;
        let measured = b[at] - a[at];
        println!(
            "{name}: measured {measured:.0} J, model {predicted:.0} J ({:+.2}%)",
            100.0 * (measured - predicted) / predicted
        );
        assert_close(name, measured, predicted, 0.03);
        fractions += measured / node_k;
    }
    // a live figure is the ledger's last sample brought forward at its power: its age, up
    // to a second or two in the VM under load, is what this bound allows
    assert_close("the pair's fractions of the node", fractions, 1.0, 0.02);
}

/// A Debian 12 node (Slurm 22.05.8 from Debian, kernel 6.1, systemd 252) runs the package
/// as a site would: [`site_node`].
#[test]
fn a_debian_12_site_node_measures_its_jobs_as_debian_runs_slurm() {
    site_node(
        "a_debian_12_site_node_measures_its_jobs_as_debian_runs_slurm",
        "bookworm",
        "Debian GNU/Linux 12",
    );
}

/// A Debian 13 node (Slurm 24.11.5 from Debian, kernel 6.12, systemd 257) runs the package
/// built for it (ENERGY_TEST_DEB: the 24.11.5 build's, laid out for Debian's plugin
/// directory) as a site would: [`site_node`].
#[test]
fn a_debian_13_site_node_measures_its_jobs_as_debian_runs_slurm() {
    site_node(
        "a_debian_13_site_node_measures_its_jobs_as_debian_runs_slurm",
        "trixie",
        "Debian GNU/Linux 13",
    );
}

/// A node of Debian `suite` (`os` its PRETTY_NAME's start), its Slurm from Debian, runs the
/// package as a site would, each figure against the simulator's truth: a busy and an idle
/// job sharing the node (each the model's share within 3%, their fractions of the node
/// adding up to one within 2%), a job alone (1%), its Epilog's record and `senergy job` as
/// its owner (1%), `senergy
/// check` as the user, `systemctl restart slurmd` in the middle of a job (2%), a reboot
/// (every unit back, a job alone within 1%), and a GPU job with rust_gpu stacked on
/// rust_rapl under `ConstrainDevices=yes` (its CPUs' and its GPU's energy within 2%, the
/// other GPU's device file refused by cgroup/v2's eBPF filter); and what a job's owner can
/// do to its cgroups under v2.
fn site_node(test: &str, suite: &str, os: &str) {
    let Some(tmp) = root_test_dir(test) else {
        return;
    };
    let Some(deb) = deb_or_skip(test) else {
        return;
    };
    for (program, package) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("debootstrap", "debootstrap"),
        ("mkfs.ext4", "e2fsprogs"),
    ] {
        if tool_or_skip(test, program, package).is_none() {
            return;
        }
    }
    let t0 = Instant::now();
    let image = base_image(suite);
    let payload = payload(tmp.path(), &deb, suite);
    let text = boot(tmp.path(), &image, &payload);
    println!("site node: {:.0} s in all", t0.elapsed().as_secs_f64());
    for line in text.lines().filter(|l| l.starts_with("R ")) {
        println!("{line}");
    }
    let r = Results::parse(&text);
    assert_eq!(r.get("done"), "ok", "the scenario did not finish");

    // the node as Debian boots it
    assert_eq!(r.get("pid1"), "systemd");
    assert_eq!(r.get("cgroup_fs"), "cgroup2fs");
    for c in ["cpuset", "cpu", "memory", "pids"] {
        assert!(
            r.get("controllers").split_whitespace().any(|x| x == c),
            "controller {c} missing: {}",
            r.get("controllers")
        );
    }
    assert!(r.get("os").starts_with(os), "{}", r.get("os"));
    assert_eq!(
        r.get("spool"),
        "slurm:slurm 755",
        "Debian's spool directory as the package makes it"
    );
    assert_eq!(r.get("apt_install_rc"), "0", "apt install of the .deb");
    assert!(
        r.get("installed").ends_with("install ok installed"),
        "{}",
        r.get("installed")
    );
    for phase in ["setup", "reboot"] {
        for v in r.all("unit").into_iter().filter(|v| v.starts_with(phase)) {
            assert!(v.ends_with(" active"), "unit not active: {v}");
        }
    }
    assert_eq!(r.of("unit_after_restart", "restart"), ["active"]);
    assert!(
        !r.get("ledger_file").contains("No such file"),
        "no ledger: {}",
        r.get("ledger_file")
    );
    for n in r.all("ledger_errors") {
        assert_eq!(n, "0", "slurmd said no energy ledger is published");
    }

    pair_against_model(&r);
    let alone = alone_against_truth(&r, "alone", 0.01);
    epilog_record(&r, "alone", alone);
    alone_against_truth(&r, "restart", 0.02);
    if let Some(state) = r.all("node_after_reboot").first() {
        // Slurm's ReturnToService=0 (its default) leaves DOWN a node that rebooted unasked
        println!("after the reboot slurmctld said: {state}; resumed as an admin would");
    }
    alone_against_truth(&r, "reboot", 0.01);
    gpu_job_against_truth(&r);

    // senergy check mid-job at 300 W: as the ordinary user (what it says), and as root
    // (docs/senergy.md): healthy, its power the truth's
    println!(
        "senergy check as the user: rc {:?}: {} {}",
        r.of("senergy_check_rc", "alone"),
        r.of("senergy_check_json", "alone").join(" "),
        r.of("senergy_check_err", "alone").join(" ")
    );
    let root_check = r.of("senergy_check_root_json", "alone").join(" ");
    let report: Value = serde_json::from_str(&root_check)
        .unwrap_or_else(|_| panic!("senergy check --json as root said {root_check}"));
    // every check passes on a node as Debian runs it: slurmd started by its unit, with its
    // compiled-in slurm.conf (no -f, no SLURM_CONF), is this node's slurmd
    let failed: Vec<String> = report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] != "ok")
        .map(|c| format!("{}: {}", c["check"], c["detail"]))
        .collect();
    println!("senergy check as root: failed checks {failed:?}");
    assert!(
        failed.is_empty(),
        "senergy check as root on the site node: {failed:#?}"
    );
    assert_eq!(report["healthy"], true, "senergy check as root: {report:#}");
    let watts: f64 = report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["check"] == "power"))
        .and_then(|c| c["detail"].as_str())
        .and_then(|d| d.split_whitespace().next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no power in {report:#}"));
    println!("senergy check as root: {watts} W, the truth {ON_WATTS} W");
    assert!(
        (watts - ON_WATTS).abs() <= 0.03 * ON_WATTS,
        "senergy check as root: {watts} W where the node drew {ON_WATTS} W"
    );
    // what a job's owner can do to its cgroups
    for t in r.all("cgroup_try") {
        println!("cgroup: {t}");
    }
    // every write and every move of the job's owner is refused: the job's cgroups and
    // everything above them are root's (Slurm's cgroup/v2 under systemd's delegation)
    let tries = r.all("cgroup_try");
    let outcome = |name: &str| -> &str {
        tries
            .iter()
            .find(|l| l.starts_with(&format!("{name} ")))
            .copied()
            .unwrap_or_else(|| panic!("no try {name} in {tries:?}"))
    };
    for name in [
        "write_own_cpu_max",
        "write_job_cpu_max",
        "write_job_memory_max",
        "write_job_subtree_control",
        "mkdir_in_own",
        "move_to_root",
        "move_to_user_slice",
        "move_to_job",
        "move_to_extern",
        "move_to_system_slice",
    ] {
        let line = outcome(name);
        assert!(line.contains(" refused: "), "a job's owner could: {line}");
    }
    assert_eq!(
        outcome("own").strip_prefix("own "),
        outcome("after").strip_prefix("after "),
        "the job's process left its cgroup"
    );
}
