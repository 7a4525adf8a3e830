//! Starting a cluster: its directory, its identity, its configuration files, its daemons,
//! until every node is idle.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::super::config::{self, Identity, Settings};
use super::super::procs::start_daemon;
use super::super::slots::{Slot, slots_dir};
use super::super::{Error, Layout, MARKER, State, cgroups, netns};
use super::{client, client_ok, command, down, failed, in_path, lib_dir, records, wait_for};

/// Starts the cluster in `dir` as `settings` say, and returns once every node is idle;
/// what it started is taken down again when it fails.
pub fn up(dir: &Path, settings: &Settings) -> Result<(), Error> {
    let layout = Layout::new(dir)?;
    let t0 = Instant::now();
    let dir = &layout.dir;
    if fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) && !dir.join(MARKER).exists() {
        return Err(Error::Usage(format!(
            "{} is not empty and was not created by this harness; refusing to use it",
            dir.display()
        )));
    }
    let recs = records(&layout);
    if recs.names().iter().any(|n| recs.pid(n).is_some()) {
        return Err(Error::Usage(format!(
            "a cluster is already running in {} (run: cluster down {})",
            dir.display(),
            dir.display()
        )));
    }
    // leftovers of an earlier run that was not taken down (namespaces, its slot)
    down(&layout, true);
    check(&layout, settings)?;
    make_layout(&layout, settings)?;
    let id = identity(&layout, settings)?;
    write_configs(&layout, settings, &id)?;
    config::write_client_wrappers(settings, &layout)?;
    // from here on, a failure tears down what was started
    match start(&layout, settings, &id) {
        Ok(()) => {
            eprintln!(
                "cluster up ({} node(s), cluster {}, {:.1}s, DIR {})",
                settings.nodes,
                id.cluster,
                t0.elapsed().as_secs_f64(),
                dir.display()
            );
            Ok(())
        }
        Err(e) => {
            eprintln!("cluster: tearing down after failed up");
            down(&layout, true);
            Err(e)
        }
    }
}

/// What `up` needs, checked before anything starts.
fn check(layout: &Layout, s: &Settings) -> Result<(), Error> {
    let i = &s.install;
    for b in [
        i.sbin.join("slurmctld"),
        i.sbin.join("slurmd"),
        i.sbin.join("slurmdbd"),
        i.bin.join("sinfo"),
        i.bin.join("scontrol"),
        i.bin.join("sacctmgr"),
    ] {
        if !b.exists() {
            return Err(Error::Setup(format!("missing {}", b.display())));
        }
    }
    if !i.plugin_dir.is_dir() {
        return Err(Error::Setup(format!(
            "missing plugin dir {}",
            i.plugin_dir.display()
        )));
    }
    let mut needed = vec![
        "munged",
        "mariadbd",
        "mariadb-install-db",
        "mariadb-admin",
        "setsid",
        "unshare",
        "nsenter",
    ];
    if s.netns {
        needed.push("ip");
    }
    if let Some(missing) = needed.into_iter().find(|p| !in_path(p)) {
        return Err(Error::Setup(format!("missing command {missing}")));
    }
    if let Some(hook) = &s.node_hook {
        let ok = if hook.is_absolute() {
            fs::metadata(hook).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
        } else {
            in_path(&hook.to_string_lossy())
        };
        if !ok {
            return Err(Error::Usage(format!(
                "NODE_HOOK {} is not executable",
                hook.display()
            )));
        }
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Err(Error::Setup(
            "must run as root (namespaces, SlurmUser=root)".into(),
        ));
    }
    // Unix socket paths are limited to 108 bytes; slurmd's step sockets
    // (DIR/spool/nK/nK_<jobid>.<stepid>) are the longest ones made.
    let len = layout.dir.as_os_str().len();
    if len > 70 {
        return Err(Error::Usage(format!(
            "DIR path too long ({len} > 70 chars): unix sockets under it would not fit"
        )));
    }
    Ok(())
}

/// A fresh directory layout (only the harness's own subdirectories are removed).
fn make_layout(layout: &Layout, s: &Settings) -> Result<(), Error> {
    let dir = &layout.dir;
    let mkdir = |p: &Path| fs::create_dir_all(p).map_err(|e| Error::io(p, e));
    mkdir(dir)?;
    fs::write(dir.join(MARKER), "").map_err(|e| Error::io(dir, e))?;
    for sub in ["etc", "run", "state", "spool", "db", "bin", "log"] {
        let _ = fs::remove_dir_all(dir.join(sub));
    }
    for sub in [
        "etc",
        "run/pid",
        "state",
        "spool",
        "db",
        "bin",
        "log",
        "run/munge",
    ] {
        mkdir(&dir.join(sub))?;
    }
    // munged warns about sockets in directories others cannot enter
    let mut open = vec![dir.join("run"), dir.join("run/munge")];
    for k in 1..=s.nodes {
        mkdir(&dir.join(format!("spool/n{k}")))?;
        if s.nodes > 1 {
            let m = dir.join(format!("run/munge-n{k}"));
            mkdir(&m)?;
            open.push(m);
        }
    }
    for d in open {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).map_err(|e| Error::io(&d, e))?;
    }
    Ok(())
}

fn stdout_of(c: &mut Command, what: &str) -> Result<String, Error> {
    let out = c
        .output()
        .map_err(|e| Error::Setup(format!("{what}: {e}")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The slot (ports, job ids), the nodes' hardware and the release, saved for the other
/// commands.
fn identity(layout: &Layout, s: &Settings) -> Result<Identity, Error> {
    let slurmd = s.install.sbin.join("slurmd");
    // a node's hardware is this machine's (every node runs here)
    let hw = if s.node_hw.is_empty() {
        let out = stdout_of(
            Command::new(&slurmd)
                .arg("-C")
                .env("SLURM_CONF", "/nonexistent"),
            "slurmd -C",
        )?;
        let first = out.lines().next().unwrap_or_default();
        match first.strip_prefix("NodeName=") {
            Some(rest) => rest.split_once(' ').map_or("", |(_, hw)| hw).to_string(),
            None => first.to_string(),
        }
    } else {
        s.node_hw.clone()
    };
    if hw.is_empty() {
        return Err(Error::Setup("slurmd -C printed nothing".into()));
    }
    // the release ("slurm 24.11.5", "slurm-wlm 22.05.8"), for settings that differ
    let v = stdout_of(Command::new(&slurmd).arg("-V"), "slurmd -V")?;
    let release = v.split_whitespace().nth(1).unwrap_or_default().to_string();
    if !release.split('.').take(2).all(|p| p.parse::<u32>().is_ok()) || !release.contains('.') {
        return Err(Error::Setup(format!(
            "cannot tell the release of {} (-V: {v})",
            slurmd.display()
        )));
    }
    let cluster = s
        .cluster_name
        .clone()
        .unwrap_or_else(|| layout.default_cluster.clone());
    let slot = Slot::claim(
        &slots_dir(),
        &layout.dir,
        super::super::layout::dir_hash(&layout.dir),
    )?;
    // a cluster of this slot before, killed before its `down`, left its jobs' cgroups
    cgroups::remove_job_cgroups(Path::new(cgroups::CGROUP_ROOT), &slot.job_ids());
    cgroups::remove_v2_root(&cgroups::v2_root(slot.0));
    State {
        nodes: s.nodes,
        netns: s.netns,
        bin: s.install.bin.clone(),
        sbin: s.install.sbin.clone(),
        cluster: cluster.clone(),
        slot,
    }
    .save(layout)?;
    Ok(Identity {
        cluster,
        slot,
        hw,
        release,
    })
}

/// slurm.conf, slurmdbd.conf and the files beside them.
fn write_configs(layout: &Layout, s: &Settings, id: &Identity) -> Result<(), Error> {
    let etc = layout.dir.join("etc");
    let write = |name: &str, text: &str, mode: u32| {
        let path = etc.join(name);
        fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(&path, e))
    };
    let mut key = vec![0u8; 1024];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
        .map_err(|e| Error::io(Path::new("/dev/urandom"), e))?;
    let key_path = etc.join("munge.key");
    fs::write(&key_path, &key).map_err(|e| Error::io(&key_path, e))?;
    fs::set_permissions(&key_path, fs::Permissions::from_mode(0o400))
        .map_err(|e| Error::io(&key_path, e))?;
    write("plugstack.conf", "", 0o644)?;
    if let Some(path) = &s.acct_gather_conf {
        write("acct_gather.conf", &config::read(path)?, 0o644)?;
    }
    if let Some(text) = config::cgroup_conf(s, &id.release)? {
        write("cgroup.conf", &text, 0o644)?;
    }
    if let Some(path) = &s.gres_conf {
        write("gres.conf", &config::read(path)?, 0o644)?;
    }
    let extra = s
        .extra_slurm_conf
        .as_deref()
        .map(config::read)
        .transpose()?;
    write(
        "slurm.conf",
        &config::slurm_conf(s, id, layout, extra.as_deref().unwrap_or_default()),
        0o644,
    )?;
    let extra = s
        .extra_slurmdbd_conf
        .as_deref()
        .map(config::read)
        .transpose()?;
    // slurmdbd reads slurmdbd.conf from SLURM_CONF's directory; it must be 0600
    write(
        "slurmdbd.conf",
        &config::slurmdbd_conf(s, id, layout, extra.as_deref().unwrap_or_default()),
        0o600,
    )
}

/// A daemon's command: the caller's environment less its SLURM_* variables (tests may
/// themselves run inside a Slurm job), with this cluster's SLURM_CONF.
fn daemon(layout: &Layout, prefix: &[String], program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = command(prefix, program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SLURM_") {
            c.env_remove(k);
        }
    }
    c.env("SLURM_CONF", layout.conf());
    c
}

/// Namespaces and daemons, each waited for.
fn start(layout: &Layout, s: &Settings, id: &Identity) -> Result<(), Error> {
    let dir = &layout.dir;
    let recs = records(layout);
    let timeout = Duration::from_secs(s.up_timeout_secs);
    if s.netns {
        netns::create(layout, s.nodes)?;
    }
    let ctl = netns::ctl_prefix(layout, s.netns);
    let sock = layout.munge_socket();
    let run = |name: &str| dir.join("run").join(name);
    let munged = |prefix: &[String], socket: &Path, suffix: &str| {
        let mut c = command(prefix, "munged");
        c.arg("--foreground")
            .arg("--force")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!(
                "--key-file={}",
                dir.join("etc/munge.key").display()
            ))
            .arg(format!(
                "--pid-file={}",
                run(&format!("munged{suffix}.pid")).display()
            ))
            .arg(format!(
                "--log-file={}",
                layout.log(&format!("munged{suffix}.log")).display()
            ))
            .arg(format!(
                "--seed-file={}",
                run(&format!("munged{suffix}.seed")).display()
            ));
        c
    };
    start_daemon(
        &recs,
        "munged",
        &layout.log("munged.out"),
        munged(&ctl, &sock, ""),
    )?;
    let mut mungeds = vec!["munged".to_string()];
    if s.nodes > 1 {
        // as on a real cluster each node has its own munged (same key): a munged refuses
        // to decode a credential twice, and from 23.11 every node of a step decodes the
        // same launch credential; node-start.sh mounts its socket over AuthInfo's
        for k in 1..=s.nodes {
            let name = format!("munged-n{k}");
            let socket = run(&format!("munge-n{k}/munge.sock"));
            let c = munged(&[], &socket, &format!("-n{k}"));
            start_daemon(&recs, &name, &layout.log(&format!("{name}.out")), c)?;
            mungeds.push(name);
        }
    }
    // --no-defaults: ignore /etc/mysql; a small log file keeps DIR small and fast.
    // --tmpdir: its own, as clusters run side by side (two bootstraps sharing /tmp's
    // temporary tables fail: "Unknown table 'mysql.tmp_user_sys'")
    let tmp = run("mariadb-tmp");
    fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let mdb_opts: Vec<OsString> = vec![
        "--no-defaults".into(),
        format!("--datadir={}", dir.join("db").display()).into(),
        "--user=root".into(),
        format!("--tmpdir={}", tmp.display()).into(),
        "--innodb-log-file-size=8M".into(),
        "--innodb-buffer-pool-size=64M".into(),
    ];
    let mut installdb = Command::new("mariadb-install-db");
    installdb.args(&mdb_opts).args([
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
    ]);
    let mut installdb = start_daemon(&recs, "installdb", &layout.log("installdb.out"), installdb)?;

    wait_for(layout, timeout, "munged", &["munged"], || sock.exists())?;
    for k in (1..=s.nodes).filter(|_| s.nodes > 1) {
        let name = format!("munged-n{k}");
        let socket = run(&format!("munge-n{k}/munge.sock"));
        wait_for(
            layout,
            timeout,
            &format!("munged of n{k}"),
            &[&name],
            || socket.exists(),
        )?;
    }
    let status = installdb
        .wait()
        .map_err(|e| Error::Setup(format!("mariadb-install-db: {e}")))?;
    if !status.success() {
        return Err(failed(layout, "mariadb-install-db failed", &["installdb"]));
    }
    // --skip-grant-tables: no users or passwords needed; 127.0.0.1 only
    let mariadb_sock = run("mariadb.sock");
    let mut mariadbd = command(&ctl, "mariadbd");
    mariadbd.args(&mdb_opts).args([
        "--skip-grant-tables".into(),
        "--skip-name-resolve".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--port={}", id.slot.ports().mariadb),
        format!("--socket={}", mariadb_sock.display()),
        format!("--pid-file={}", run("mariadbd.pid").display()),
        format!("--log-error={}", layout.log("mariadbd.log").display()),
        "--skip-log-bin".into(),
        "--innodb-flush-log-at-trx-commit=2".into(),
        "--innodb-doublewrite=0".into(),
    ]);
    start_daemon(&recs, "mariadbd", &layout.log("mariadbd.out"), mariadbd)?;
    wait_for(layout, timeout, "mariadbd", &["mariadbd"], || {
        Command::new("mariadb-admin")
            .arg("--no-defaults")
            .arg(format!("--socket={}", mariadb_sock.display()))
            .arg("ping")
            .output()
            .is_ok_and(|o| o.status.success())
    })?;

    let dbd = daemon(layout, &ctl, s.install.sbin.join("slurmdbd"));
    start_daemon(
        &recs,
        "slurmdbd",
        &layout.log("slurmdbd.out"),
        with_args(dbd, &["-D"]),
    )?;
    wait_for(
        layout,
        timeout,
        "slurmdbd",
        &["slurmdbd", "mariadbd", "munged"],
        || client_ok(layout, "sacctmgr", &["-n", "-P", "list", "cluster"]),
    )?;
    // the cluster is registered before slurmctld starts, so that its first connection to
    // slurmdbd already finds it (and sacct works right away)
    let add = client(layout, "sacctmgr", &["-i", "add", "cluster", &id.cluster]);
    let text = add
        .as_ref()
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default();
    let _ = fs::write(layout.log("sacctmgr-add.out"), &text);
    if !add.is_some_and(|o| o.status.success()) {
        return Err(failed(
            layout,
            &format!("sacctmgr add cluster failed: {text}"),
            &["slurmdbd"],
        ));
    }

    let ctld = daemon(layout, &ctl, s.install.sbin.join("slurmctld"));
    start_daemon(
        &recs,
        "slurmctld",
        &layout.log("slurmctld.out"),
        with_args(ctld, &["-D"]),
    )?;
    let mut watch: Vec<String> = ["slurmctld", "slurmdbd", "mariadbd"]
        .into_iter()
        .map(String::from)
        .chain(mungeds)
        .collect();
    let lib = lib_dir();
    if s.cgroup_v2 {
        build_cgroup2_only(layout, &lib)?;
    }
    // each node's supervisor is this program's `nodesup` (tests/src/cluster/nodesup.rs)
    let this = std::env::current_exe()
        .map_err(|e| Error::Setup(format!("the cluster program's path: {e}")))?;
    for k in 1..=s.nodes {
        let node = format!("n{k}");
        let mut sup = daemon(layout, &[], &this);
        // what node-start.sh and the node hook read, in this node's every (re)start
        if let Some(root) = &s.sim_root {
            sup.env("SIM_ROOT", root);
        }
        if s.cgroup_v2 {
            sup.env("CGROUP2_ROOT", cgroups::v2_root(id.slot.0).join(&node));
        }
        sup.env("NODE_HOOK", s.node_hook.as_deref().unwrap_or(Path::new("")))
            .arg("nodesup")
            .arg(recs.dir.join(format!("slurmd-{node}")))
            .arg(layout.exit_file(&node))
            .arg(layout.log(&format!("slurmd-{node}.out")))
            .arg("--")
            .args(netns::node_prefix(layout, s.netns, k))
            .args([
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "--",
                "sh",
            ])
            .arg(lib.join("node-start.sh"))
            .arg(k.to_string())
            .arg(&node)
            .arg(dir)
            .arg(s.install.sbin.join("slurmd"))
            .args(["-D", "-N", &node]);
        let name = format!("nodesup-{node}");
        start_daemon(&recs, &name, &layout.log(&format!("{name}.out")), sup)?;
        watch.push(name);
    }
    let watch: Vec<&str> = watch.iter().map(String::as_str).collect();
    wait_for(layout, timeout, "slurmctld", &watch, || {
        client_ok(layout, "scontrol", &["ping"])
    })?;
    wait_for(
        layout,
        timeout,
        &format!("{} node(s) idle", s.nodes),
        &watch,
        || nodes_idle(layout) == Some(s.nodes),
    )
}

/// The LD_PRELOAD library that shows the slurmds of a pure cgroup v2 host their own
/// /proc/self/cgroup without this machine's v1 hierarchies (ci/cluster-lib/cgroup2-only.c,
/// which says why), in `run/` where node-start.sh takes it.
fn build_cgroup2_only(layout: &Layout, lib: &Path) -> Result<(), Error> {
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(layout.dir.join("run/cgroup2-only.so"))
        .arg(lib.join("cgroup2-only.c"))
        .arg("-ldl")
        .output()
        .map_err(|e| Error::Setup(format!("cc (for cgroup2-only.so): {e}")))?;
    if !out.status.success() {
        return Err(Error::Setup(format!(
            "cc cgroup2-only.c failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

fn with_args(mut c: Command, args: &[&str]) -> Command {
    c.args(args);
    c
}

/// How many nodes slurmctld knows idle (a node in several partitions is listed once per
/// partition).
fn nodes_idle(layout: &Layout) -> Option<usize> {
    let out = client(layout, "sinfo", &["-h", "-N", "-o", "%N %T"])?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut idle: Vec<&str> = text.lines().filter(|l| l.ends_with(" idle")).collect();
    idle.sort_unstable();
    idle.dedup();
    Some(idle.len())
}
