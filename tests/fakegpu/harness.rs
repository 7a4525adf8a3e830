//! Builds and drives the stand-in NVML and amd-smi libraries (fakenvml.c, fakeamdsmi.c;
//! control files in fakegpu.h) for the rust_gpu tests: `energy_tests::fakegpu`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Nvidia,
    Amd,
}

impl Vendor {
    fn source(self) -> &'static str {
        match self {
            Vendor::Nvidia => "fakenvml.c",
            Vendor::Amd => "fakeamdsmi.c",
        }
    }

    /// The name the real library has.
    fn soname(self) -> &'static str {
        match self {
            Vendor::Nvidia => "libnvidia-ml.so.1",
            Vendor::Amd => "libamd_smi.so",
        }
    }

    /// The acct_gather.conf key that names this vendor's library.
    pub fn key(self) -> &'static str {
        match self {
            Vendor::Nvidia => "EnergyGpuNvmlLibrary",
            Vendor::Amd => "EnergyGpuAmdLibrary",
        }
    }

    pub fn other(self) -> Vendor {
        match self {
            Vendor::Nvidia => Vendor::Amd,
            Vendor::Amd => Vendor::Nvidia,
        }
    }
}

fn fakegpu_dir() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("tests/fakegpu/fakegpu.h").exists() {
        assert!(dir.pop(), "tests/fakegpu not found above the package");
    }
    dir.join("tests/fakegpu")
}

static BUILT: OnceLock<Mutex<Option<tempfile::TempDir>>> = OnceLock::new();

/// Compiles both stand-ins once per test process; the directory holding them.
fn built() -> PathBuf {
    let built = BUILT.get_or_init(|| Mutex::new(None));
    let mut built = built.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(dir) = built.as_ref() {
        return dir.path().to_path_buf();
    }
    let dir = tempfile::Builder::new()
        .prefix("fakegpu-build")
        .tempdir()
        .expect("temp dir");
    for vendor in [Vendor::Nvidia, Vendor::Amd] {
        let out = Command::new("gcc")
            .args([
                "-shared", "-fPIC", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o",
            ])
            .arg(dir.path().join(vendor.soname()))
            .arg(fakegpu_dir().join(vendor.source()))
            .output()
            .expect("run gcc");
        assert!(
            out.status.success(),
            "gcc {}: {}",
            vendor.source(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = dir.path().to_path_buf();
    *built = Some(dir);
    path
}

pub fn now_ns() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as f64)
        .unwrap_or(0.0)
}

/// A stand-in library in a directory of its own, with its control files beside it.
pub struct FakeGpus {
    pub dir: tempfile::TempDir,
    pub vendor: Vendor,
}

impl FakeGpus {
    /// GPUs `minors`, in enumeration order, all at 0 W.
    pub fn new(vendor: Vendor, minors: &[u32]) -> FakeGpus {
        let dir = tempfile::Builder::new()
            .prefix("fakegpu")
            .tempdir()
            .expect("temp dir");
        fs::copy(
            built().join(vendor.soname()),
            dir.path().join(vendor.soname()),
        )
        .expect("copy the stand-in library");
        // readable by the job's user, who runs set_power.sh
        let mode: fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o777);
        fs::set_permissions(dir.path(), mode.clone()).expect("chmod");
        let fake = FakeGpus { dir, vendor };
        let minors: Vec<String> = minors.iter().map(u32::to_string).collect();
        fake.write("gpus", &minors.join(" "));
        fs::write(fake.dir.path().join("power.log"), "").expect("power.log");
        fs::set_permissions(fake.dir.path().join("power.log"), mode).expect("chmod");
        fake
    }

    pub fn library(&self) -> String {
        self.dir
            .path()
            .join(self.vendor.soname())
            .display()
            .to_string()
    }

    /// acct_gather.conf lines: this library, the other vendor's off.
    pub fn acct_gather(&self) -> String {
        format!(
            "{}={}\n{}=none\n",
            self.vendor.key(),
            self.library(),
            self.vendor.other().key()
        )
    }

    /// Replaces a control file whole, so a call never reads half of it.
    fn write(&self, name: &str, text: &str) {
        let tmp = self.dir.path().join(format!(".{name}.tmp"));
        fs::write(&tmp, text).expect("write control file");
        fs::rename(&tmp, self.dir.path().join(name)).expect("rename control file");
    }

    pub fn set_power(&self, minor: u32, watts: f64) {
        // the way jobs do: the script appends "<ns> <minor> <watts>"
        let status = Command::new("sh")
            .arg("-c")
            .arg(self.set_power_command(&minor.to_string(), watts))
            .status()
            .expect("set_power.sh");
        assert!(status.success());
    }

    /// A shell command that sets the power of `minor` ("self": the caller's one GPU).
    pub fn set_power_command(&self, minor: &str, watts: f64) -> String {
        format!(
            "sh {} {} {minor} {watts}",
            fakegpu_dir().join("set_power.sh").display(),
            self.dir.path().display()
        )
    }

    /// A shell command by which the caller uses the GPU Slurm gave it (its first GRES
    /// index, a place in `minors`, gres.conf's order) at `sm` percent while it lives.
    pub fn use_gpu_command(&self, minors: &[u32], sm: u32) -> String {
        let minors: Vec<String> = minors.iter().map(u32::to_string).collect();
        format!(
            "sh {} {} {} {sm}",
            fakegpu_dir().join("use_gpu.sh").display(),
            self.dir.path().display(),
            minors.join(",")
        )
    }

    /// [`Self::use_gpu_command`], but the use is a process of its own that the caller
    /// double-forks (a new session whose parent exits at once, so init adopts it), which
    /// registers its use only once adopted and lives on until killed (Slurm's
    /// proctrack/cgroup kills it with its step) or for at most 10 minutes.
    pub fn use_gpu_detached_command(&self, minors: &[u32], sm: u32) -> String {
        format!("{} detached", self.use_gpu_command(minors, sm))
    }

    /// A shell command by which the calling shell uses GPU `minor`, whatever Slurm gave
    /// it (nothing, or another GPU), at `sm` percent while it lives: what a program that
    /// opens every device file may do where devices are not constrained.
    pub fn use_any_gpu_command(&self, minor: u32, sm: u32) -> String {
        format!(
            "echo \"$$ {sm}\" >> {}",
            self.dir.path().join(format!("procs.{minor}")).display()
        )
    }

    /// A shell command that sets the power of the GPU Slurm gave the caller (its first
    /// GRES index, a place in `minors`, gres.conf's order).
    pub fn set_gres_power_command(&self, minors: &[u32], watts: f64) -> String {
        let minors: Vec<String> = minors.iter().map(u32::to_string).collect();
        self.set_power_command(&format!("gres:{}", minors.join(",")), watts)
    }

    /// See fakegpu.h: ok, hang, lost, nosupport, `reload@<ns>`.
    /// Names GPU `minor` as NVML names a real device (`nvmlDeviceGetName`), e.g.
    /// "NVIDIA GH200 480GB".
    pub fn set_name(&self, minor: u32, name: &str) {
        self.write(&format!("name.{minor}"), name);
    }

    pub fn set_mode(&self, minor: u32, mode: &str) {
        self.write(&format!("mode.{minor}"), mode);
    }

    /// Partitions GPU `minor` into MIG instances: `"<gi> <ci> <sms> <sm%> <uuid>"` lines.
    pub fn set_mig(&self, minor: u32, instances: &str) {
        self.write(&format!("mig.{minor}"), instances);
    }

    pub fn set_driver_missing(&self) {
        self.write("driver", "missing");
    }

    /// From now on the library notes the instant of each power read of GPU `minor`.
    pub fn record_power_reads(&self, minor: u32) {
        fs::write(self.dir.path().join(format!("power_reads.{minor}")), "").expect("power_reads");
    }

    /// What integrating GPU `minor`'s power from its reads (recorded since
    /// [`Self::record_power_reads`]) can miss up to `until_ns`, at most: each change of power
    /// falls between two reads, and a trapezoid between them can be off by the change times
    /// half their distance. A change with no read after it counts to `until_ns`.
    pub fn power_sampling_bound(&self, minor: u32, until_ns: f64) -> f64 {
        let reads: Vec<f64> =
            fs::read_to_string(self.dir.path().join(format!("power_reads.{minor}")))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
        let mut bound = 0.0;
        let mut watts = 0.0;
        for (at, now) in schedule(&self.dir.path().join("power.log"), minor) {
            if at > until_ns {
                break;
            }
            let before = reads.iter().copied().filter(|&r| r <= at).reduce(f64::max);
            let after = reads.iter().copied().filter(|&r| r > at).reduce(f64::min);
            let (before, after) = (before.unwrap_or(at), after.unwrap_or(until_ns));
            bound += (now - watts).abs() * (after - before) / 2e9;
            watts = now;
        }
        bound
    }

    /// The true joules of GPU `minor` over its whole schedule up to `until_ns`.
    pub fn truth(&self, minor: u32, until_ns: f64) -> f64 {
        schedule_joules(&self.dir.path().join("power.log"), minor, until_ns)
    }
}

/// One GPU's "<ns> <minor> <watts>" schedule: each change's instant and its power from then.
fn schedule(log: &Path, minor: u32) -> Vec<(f64, f64)> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let f: Vec<f64> = line
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            (f.len() == 3 && f[1] == f64::from(minor)).then(|| (f[0], f[2]))
        })
        .collect()
}

/// The integral of one GPU's `"<ns> <minor> <watts>"` schedule up to `until_ns`.
pub fn schedule_joules(log: &Path, minor: u32, until_ns: f64) -> f64 {
    let mut joules = 0.0;
    let mut last: Option<(f64, f64)> = None;
    for (at, watts) in schedule(log, minor) {
        if at > until_ns {
            continue;
        }
        if let Some((t, w)) = last {
            joules += w * (at - t) / 1e9;
        }
        last = Some((at, watts));
    }
    if let Some((t, w)) = last {
        joules += w * (until_ns - t).max(0.0) / 1e9;
    }
    joules
}
