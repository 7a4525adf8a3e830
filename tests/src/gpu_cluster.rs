//! Clusters with stand-in GPUs ([`crate::fakegpu`]) for the rust_gpu cluster tests: device
//! files for gres.conf, the power schedule the jobs set, and two jobs sharing one GPU
//! ([`shared_gpu`]).

use std::path::Path;

use std::time::Duration;
use tempfile::TempDir;

use crate::cluster::{Cgroups, Cluster, ClusterSpec, energy_of};
use crate::fakegpu::{FakeGpus, Vendor, now_ns};
use crate::{assert_close, root_test_dir};

/// The GPUs' minors in NVML's enumeration order: not the gres.conf order, so a mapping
/// by enumeration order would charge each job the other's GPU.
pub const MINORS: [u32; 2] = [5, 3];

/// Makes `/dev/nvidiaN`-like character devices (major 195) for the gres.conf.
pub fn device_files(dir: &Path, minors: &[u32]) {
    for &minor in minors {
        device_file(&dir.join(format!("nvidia{minor}")), 195, minor);
    }
}

/// Makes a character device file for the gres.conf (its directory too).
pub fn device_file(path: &Path, major: u32, minor: u32) {
    std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
    let status = std::process::Command::new("mknod")
        .arg(path)
        .args(["c", &major.to_string(), &minor.to_string()])
        .status()
        .expect("mknod");
    assert!(status.success(), "mknod {}", path.display());
}

/// A node whose gres.conf lists two GPUs, `/dev/nvidia3` then `/dev/nvidia5` (GRES 0 and 1;
/// made under `dir/dev`), with AutoDetect off and no device constraints, running rust_gpu
/// over `fake`: the order NVML enumerates them in is `fake`'s, not gres.conf's.
pub fn two_gpu_cluster(dir: &Path, fake: &FakeGpus) -> Cluster {
    two_gpu_cluster_with(dir, fake, "")
}

/// [`two_gpu_cluster`] with `acct_gather` added to acct_gather.conf.
pub fn two_gpu_cluster_with(dir: &Path, fake: &FakeGpus, acct_gather: &str) -> Cluster {
    let devices = dir.join("dev");
    device_files(&devices, &MINORS);
    let gres = format!(
        "AutoDetect=off\nName=gpu File={}\nName=gpu File={}\n",
        devices.join("nvidia3").display(),
        devices.join("nvidia5").display()
    );
    Cluster::up(
        dir,
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_gpu",
            acct_gather: &format!("{}{acct_gather}", fake.acct_gather()),
            gres: "gpu:2",
            gres_conf: &gres,
            ..ClusterSpec::default()
        },
    )
}

/// A cluster with the temporary directory it lives in: the cluster is taken down (dropped)
/// before the directory goes, however the caller keeps it (fields drop in order; a tuple's
/// bindings would drop last first, and the directory's removal first leaves the daemons
/// running).
pub struct ClusterInDir {
    pub cluster: Cluster,
    _dir: TempDir,
}

/// Two jobs, one GPU each by GRES (100 W and 300 W for 20 s), no device constraint: job A's
/// batch script at once execs its work with the other GPU's index in `SLURM_JOB_GPUS`,
/// `SLURM_STEP_GPUS` and `CUDA_VISIBLE_DEVICES`; job B's with a clean environment (`env
/// -i`, as `apptainer exec --cleanenv`). Each is charged its own GPU's energy (1%): what
/// Slurm gave it, not what its tasks' environment says. `acct_gather`: acct_gather.conf's
/// lines beside the stand-in GPUs'. The cluster is returned for its logs, with its
/// directory ([`ClusterInDir`]).
pub fn each_job_its_own_gpu_whatever_its_environment(
    test: &str,
    acct_gather: &str,
) -> Option<ClusterInDir> {
    let tmp = root_test_dir(test)?;
    // NVML enumerates 5, 3; gres.conf orders 3, 5
    let fake = FakeGpus::new(Vendor::Nvidia, &MINORS);
    let cluster = two_gpu_cluster_with(tmp.path(), &fake, acct_gather);
    // the work, given its own GRES index as $1 (taken before the environment is forged):
    // its GPU (gres.conf's order: 3, 5) at `watts` for 20 s
    let work = |watts: f64| {
        format!(
            "PATH=/usr/bin:/bin; m=$(echo 3,5 | cut -d, -f$(($1 + 1))); {}; sleep 20; {}",
            fake.set_power_command("$m", watts),
            fake.set_power_command("$m", 0.0)
        )
    };
    let forged = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH --gres=gpu:1\nexec env SLURM_JOB_GPUS=$((1 - $SLURM_JOB_GPUS)) \
         SLURM_STEP_GPUS=$((1 - $SLURM_JOB_GPUS)) CUDA_VISIBLE_DEVICES=$((1 - $SLURM_JOB_GPUS)) \
         /bin/sh -c '{}' sh \"$SLURM_JOB_GPUS\"\n",
        work(100.0)
    ));
    let clean = cluster.sbatch(&format!(
        "#!/bin/sh\n#SBATCH --gres=gpu:1\nexec env -i /bin/sh -c '{}' sh \"$SLURM_JOB_GPUS\"\n",
        work(300.0)
    ));
    for job in [forged, clean] {
        cluster.wait_job(job, Duration::from_secs(120));
    }
    let end = now_ns();
    let minors = [minor_set_to(&fake, 100.0), minor_set_to(&fake, 300.0)];
    assert_ne!(
        minors[0], minors[1],
        "the two jobs were given different GPUs"
    );
    let mut failures = Vec::new();
    for ((job, minor), how) in [forged, clean]
        .into_iter()
        .zip(minors)
        .zip(["forged environment", "clean environment"])
    {
        let truth = fake.truth(minor, end);
        let rows = cluster.energy(job);
        for id in [job.to_string(), format!("{job}.batch")] {
            let got = energy_of(&rows, &id);
            println!(
                "{how}: job {id} on GPU {minor}: expected {truth:.1} J, got {got:.0} J ({:+.2}%)",
                100.0 * (got - truth) / truth
            );
            if (got - truth).abs() > truth * 0.01 + 1.0 {
                failures.push(format!("{how}: {id}: {got} J for {truth:.1} J"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    Some(ClusterInDir { cluster, _dir: tmp })
}

/// The power schedule's changes: `(unix ns, minor, watts)`.
pub fn changes(fake: &FakeGpus) -> Vec<(f64, u32, f64)> {
    std::fs::read_to_string(fake.dir.path().join("power.log"))
        .expect("power.log")
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
            ))
        })
        .collect()
}

/// The GPU a job set to `watts` (its first change to that power).
pub fn minor_set_to(fake: &FakeGpus, watts: f64) -> u32 {
    changes(fake)
        .iter()
        .find(|(_, _, w)| *w == watts)
        .map(|(_, m, _)| *m)
        .expect("the job set its power")
}

/// When GPU `minor` was set to `watts`, the `n`th time.
pub fn set_at(fake: &FakeGpus, minor: u32, watts: f64, n: usize) -> f64 {
    changes(fake)
        .iter()
        .filter(|(_, m, w)| *m == minor && *w == watts)
        .nth(n)
        .map(|(t, _, _)| *t)
        .unwrap_or_else(|| panic!("GPU {minor} was not set to {watts} W {} times", n + 1))
}

/// How two jobs share the one GPU of [`shared_gpu`]'s node.
pub struct Sharing<'a> {
    /// Its vendor: NVIDIA's GPU is `nvidia3`, AMD's `renderD128`.
    pub vendor: Vendor,
    /// gres.conf's records after `AutoDetect=off`; `{gpu}` is the GPU's device file,
    /// `{dev}` their directory.
    pub gres: &'a str,
    /// The node's `Gres` ([`ClusterSpec::gres`]).
    pub node_gres: &'a str,
    /// Each job's `--gres` (empty: it asks for none).
    pub requests: [&'a str; 2],
    /// Each job's processes' SM use (0: none reported).
    pub sm: [u32; 2],
    /// Capability device files to make (`/dev/nvidia-caps/nvidia-capN` minors).
    pub caps: &'a [u32],
    /// The stand-in's `mig.3` (its MIG instances), and the driver's `mig-minors`.
    pub mig: Option<(&'a str, &'a str)>,
    /// Each job's part by the model: of the GPU's idle power (40 W of its 40 W and 240 W
    /// phases), and of the rest.
    pub parts: [(f64, f64); 2],
    /// How each job's processes use the GPU.
    pub uses: [GpuUse; 2],
    /// Whether Slurm's cgroup plugins track the jobs (proctrack/cgroup, task/cgroup,
    /// jobacct_gather/cgroup over cgroup v1): every process of a job, however it was
    /// started, is in the job's cgroup.
    pub cgroups: bool,
}

/// How a job's step uses the GPU it shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuUse {
    /// The step's task itself ([`FakeGpus::use_gpu_command`]).
    Task,
    /// A process the task double-forks, adopted by init
    /// ([`FakeGpus::use_gpu_detached_command`]): no slurmstepd among its ancestors.
    DoubleForked,
    /// The step's task uses the GPU whatever Slurm gave it, as a program that opens
    /// every device file may where devices are not constrained
    /// ([`FakeGpus::use_any_gpu_command`]).
    Unheld,
}

/// Two jobs sharing one GPU as `sharing` says, with an unmanaged second GPU at 77 W: the
/// first job sets the GPU's power, once both hold it, to 40 W (its idle power, as
/// `EnergyGpuIdleWatts` says), 240 W, 40 W and 0 W; the second ends after. Each
/// job (and its step) gets its parts within 1%, and together the GPU's energy. Returns
/// each job's GRES indexes, as its step was told.
pub fn shared_gpu(test: &str, sharing: &Sharing) -> Option<[String; 2]> {
    let tmp = root_test_dir(test)?;
    let devices = tmp.path().join("dev");
    // the shared GPU, and one gres.conf does not name
    let (file, major, gpu, unmanaged) = match sharing.vendor {
        Vendor::Nvidia => ("nvidia3", 195, 3, 7),
        Vendor::Amd => ("renderD128", 226, 128, 129),
    };
    device_file(&devices.join(file), major, gpu);
    for minor in sharing.caps {
        device_file(
            &devices.join(format!("nvidia-caps/nvidia-cap{minor}")),
            235,
            *minor,
        );
    }
    let fake = FakeGpus::new(sharing.vendor, &[gpu, unmanaged]);
    fake.set_power(unmanaged, 77.0);
    let driver = tmp.path().join("proc-driver");
    if let Some((mig, minors)) = sharing.mig {
        fake.set_mig(gpu, mig);
        std::fs::create_dir_all(driver.join("nvidia-caps")).expect("mkdir");
        std::fs::write(driver.join("nvidia-caps/mig-minors"), minors).expect("mig-minors");
    }
    let gres = format!(
        "AutoDetect=off\n{}",
        sharing
            .gres
            .replace("{gpu}", &devices.join(file).display().to_string())
            .replace("{dev}", &devices.display().to_string())
    );
    let acct_gather = format!("{}EnergyGpuIdleWatts=40\n", fake.acct_gather());
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_gpu",
            acct_gather: &acct_gather,
            gres: sharing.node_gres,
            gres_conf: &gres,
            cgroups: if sharing.cgroups {
                Cgroups::V1
            } else {
                Cgroups::Off
            },
            proc_driver: sharing.mig.is_some().then_some(driver.as_path()),
            ..ClusterSpec::default()
        },
    );
    let marker = |name: &str| fake.dir.path().join(name).display().to_string();
    let wait_for = |name: &str| format!("while [ ! -e {} ]; do sleep 0.2; done", marker(name));
    let power = |watts: f64| fake.set_power_command(&gpu.to_string(), watts);
    // every GRES index names (a part of) the one GPU
    let begin = |k: usize| {
        let uses = match sharing.uses[k] {
            GpuUse::Task => fake.use_gpu_command(&[gpu, gpu], sharing.sm[k]),
            GpuUse::DoubleForked => fake.use_gpu_detached_command(&[gpu, gpu], sharing.sm[k]),
            GpuUse::Unheld => fake.use_any_gpu_command(gpu, sharing.sm[k]),
        };
        format!(
            "echo $SLURM_STEP_GPUS > {}; {uses}",
            marker(&format!("gres.{k}"))
        )
    };
    let gres_line = |k: usize| match sharing.requests[k] {
        "" => String::new(),
        request => format!("#SBATCH --gres={request}\n"),
    };
    let first = cluster.sbatch(&format!(
        "#!/bin/sh\n{}srun -n1 sh -c '{}; {}; sleep 2; \
         {}; sleep 3; {}; sleep 20; {}; sleep 3; {}; touch {}'\n",
        gres_line(0),
        begin(0),
        wait_for("second_ready"),
        power(40.0),
        power(240.0),
        power(40.0),
        power(0.0),
        marker("first_done")
    ));
    let second = cluster.sbatch(&format!(
        "#!/bin/sh\n{}srun -n1 sh -c '{}; touch {}; {}'\n",
        gres_line(1),
        begin(1),
        marker("second_ready"),
        wait_for("first_done")
    ));
    for job in [first, second] {
        cluster.wait_job(job, Duration::from_secs(120));
    }
    if sharing.uses.contains(&GpuUse::DoubleForked) {
        adopted_processes(&fake);
    }
    let (t1, t2) = (set_at(&fake, gpu, 40.0, 0), set_at(&fake, gpu, 240.0, 0));
    let (t3, t4) = (set_at(&fake, gpu, 40.0, 1), set_at(&fake, gpu, 0.0, 0));
    let idle_phases = 40.0 * ((t2 - t1) + (t4 - t3)) / 1e9;
    let busy_phase = 240.0 * (t3 - t2) / 1e9;
    let total = fake.truth(gpu, now_ns());
    assert!(
        (total - idle_phases - busy_phase).abs() < 0.01,
        "the GPU drew {total} J"
    );
    let figures = [first, second].map(|job| {
        let rows = cluster.energy(job);
        (
            energy_of(&rows, &job.to_string()),
            energy_of(&rows, &format!("{job}.0")),
        )
    });
    let gres = [0, 1].map(|k| {
        std::fs::read_to_string(marker(&format!("gres.{k}")))
            .expect("the step's GRES")
            .trim()
            .to_string()
    });
    println!(
        "{test}: jobs {figures:?} (GRES {gres:?}), GPU {idle_phases:.1} J idle + \
         {busy_phase:.1} J"
    );
    assert_close(
        &format!("{test}: the two jobs together"),
        figures[0].0 + figures[1].0,
        total,
        0.01,
    );
    // in the 240 W phase 40 W is idle power, 200 W the rest
    let idle = idle_phases + busy_phase / 6.0;
    let rest = busy_phase * 5.0 / 6.0;
    for (k, ((job, step), (idle_part, rest_part))) in
        figures.into_iter().zip(sharing.parts).enumerate()
    {
        let truth = idle * idle_part + rest * rest_part;
        assert_close(&format!("{test}: job {k}"), job, truth, 0.01);
        // a step that holds no GPU is charged none: a job's use of a GPU it does not hold
        // is its job's, which cannot tell which of its steps used it
        if sharing.uses[k] != GpuUse::Unheld {
            assert_close(&format!("{test}: job {k}, step 0"), step, truth, 0.01);
        }
    }
    Some(gres)
}

/// Prints what each double-forked GPU user wrote when it began its use (its parent, its
/// cgroups), and checks that one began and that its parent was no slurmstepd.
fn adopted_processes(fake: &FakeGpus) {
    let mut found = 0;
    for entry in std::fs::read_dir(fake.dir.path())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("adopted.") else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).expect("adopted.<pid>");
        let parent = text
            .lines()
            .find_map(|l| l.strip_prefix("parent "))
            .expect("its parent")
            .trim()
            .to_string();
        let title = std::fs::read(format!("/proc/{parent}/cmdline"))
            .map(|t| String::from_utf8_lossy(&t).replace('\0', " "))
            .unwrap_or_default();
        let cgroups: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("freezer") || l.contains("cpuacct"))
            .collect();
        println!(
            "double-forked GPU process {pid}: parent {parent} ({}), cgroups {cgroups:?}",
            title.trim()
        );
        assert!(
            !title.contains("slurmstepd"),
            "the double-forked process's parent is a slurmstepd"
        );
        found += 1;
    }
    assert!(found > 0, "no double-forked process began using the GPU");
}
