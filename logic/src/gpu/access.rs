//! Which GPUs this process is accounted for: the GPUs whose device files it may open.
//!
//! Slurm's task/cgroup with `ConstrainDevices=yes` puts each slurmstepd into its step's
//! devices cgroup (cgroup v1 `devices.allow`/`devices.deny`, v2 an eBPF program), which
//! lets it open the device files of the GPUs its step was given (gres.conf `File=`) and
//! denies the others. What the cgroup allows is not readable back (v1's `devices.list`
//! shows `a *:* rwm` for a cgroup that denies only some devices, as Slurm's do; v2 has no
//! list), so it is asked the way the kernel decides it: by opening the GPU's device file.
//! The kernel checks the cgroup before the driver's open, and refuses with EPERM. So a
//! slurmstepd counts its step's GPUs and slurmd (unconstrained) all of the node's, with
//! one rule for both cgroup versions and no Slurm internals. Without constraints
//! everything is allowed, as Slurm's own gpu energy plugin then counts all GPUs too.
//!
//! The device file is the GPU's usual one (`/dev/nvidiaN`, `/dev/dri/renderDN`) when it
//! exists with the right numbers, else a node made for the question in a private
//! directory (gres.conf may name files elsewhere). Opening a GPU's device file can block
//! like its library, so only the poller asks, and only when the process's cgroup changes.

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::sys::stat::{Mode, SFlag, makedev, mknod};

use super::library::{DRM_MAJOR, NVIDIA_MAJOR};

/// What decides which GPUs count: asked by the poller.
pub trait Access: Send {
    /// Names the process's device constraints: when it changes, [`Access::allows`] is asked
    /// again (slurmstepd moves into its step's cgroup after it opened the source).
    fn constraints(&self) -> Option<String>;
    /// Whether the process may open the GPU's device file (`None`: unknown file).
    fn allows(&self, file: Option<(u32, u32)>) -> bool;
}

/// This process's cgroups and device files.
pub struct DeviceAccess;

impl Access for DeviceAccess {
    /// The calling thread's cgroups (v1 membership is per thread; the poller asks).
    fn constraints(&self) -> Option<String> {
        std::fs::read_to_string("/proc/thread-self/cgroup").ok()
    }

    /// A GPU whose device file its library cannot tell is counted, as where nothing
    /// constrains devices (NVML and amd-smi tell it on Linux).
    fn allows(&self, file: Option<(u32, u32)>) -> bool {
        file.is_none_or(|(major, minor)| may_open(major, minor) != Opened::Denied)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Opened {
    Allowed,
    Denied,
    /// The question could not be asked (no device node could be made): counted as
    /// allowed, as where nothing constrains devices.
    Unknown,
}

/// The usual device file of a GPU.
fn usual_path(major: u32, minor: u32) -> Option<PathBuf> {
    match major {
        NVIDIA_MAJOR => Some(PathBuf::from(format!("/dev/nvidia{minor}"))),
        DRM_MAJOR => Some(PathBuf::from(format!("/dev/dri/renderD{minor}"))),
        _ => None,
    }
}

fn is_char_device(path: &Path, major: u32, minor: u32) -> bool {
    std::fs::metadata(path).is_ok_and(|m| {
        m.file_type().is_char_device() && m.rdev() == makedev(major.into(), minor.into())
    })
}

/// Opens `path` read-only without side effects on a terminal or blocking, and closes it.
fn open_result(path: &Path) -> Opened {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    match opened {
        Ok(_) => Opened::Allowed,
        Err(e)
            if e.kind() == ErrorKind::PermissionDenied && e.raw_os_error() == Some(libc::EPERM) =>
        {
            Opened::Denied
        }
        // the cgroup let the open through to the driver, which has no such device (ENXIO,
        // ENODEV): allowed; EACCES: the file system is mounted nodev, unknown
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENXIO | libc::ENODEV)) => Opened::Allowed,
        Err(_) => Opened::Unknown,
    }
}

fn may_open(major: u32, minor: u32) -> Opened {
    if let Some(path) = usual_path(major, minor).filter(|p| is_char_device(p, major, minor)) {
        return open_result(&path);
    }
    // a directory only root can enter, for a node only root can open
    let dir = std::env::temp_dir().join(format!(
        "rust-gpu-access-{}-{}",
        std::process::id(),
        nix::unistd::gettid()
    ));
    if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_err() {
        return Opened::Unknown;
    }
    let node = dir.join(format!("{major}-{minor}"));
    let dev = makedev(major.into(), minor.into());
    // the cgroup is asked at mknod already, with the same answer
    let opened = match mknod(&node, SFlag::S_IFCHR, Mode::S_IRUSR, dev) {
        Ok(()) => open_result(&node),
        Err(nix::errno::Errno::EPERM) => Opened::Denied,
        Err(_) => Opened::Unknown,
    };
    let _ = std::fs::remove_file(&node);
    let _ = std::fs::remove_dir(&dir);
    opened
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside any device constraint a GPU with no driver behind it (this machine's) is
    /// allowed: the open reaches the driver layer, which answers ENXIO.
    #[test]
    fn an_unconstrained_process_may_open_any_gpu() {
        // /proc/self belongs to the effective user
        if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
            eprintln!("skipped: mknod needs root");
            return;
        }
        assert_eq!(may_open(NVIDIA_MAJOR, 7), Opened::Allowed);
        assert_eq!(may_open(DRM_MAJOR, 130), Opened::Allowed);
        assert!(DeviceAccess.allows(Some((NVIDIA_MAJOR, 7))));
        assert!(DeviceAccess.allows(None));
    }

    /// In a devices cgroup that denies one GPU (as Slurm's do: `devices.list` still says
    /// `a *:* rwm`), that GPU is denied and the others allowed.
    #[test]
    fn a_devices_cgroup_denies_its_gpus() {
        let cgroup = PathBuf::from(format!(
            "/sys/fs/cgroup/devices/rust-gpu-access-test-{}",
            std::process::id()
        ));
        if std::fs::create_dir(&cgroup).is_err() {
            eprintln!("skipped: no cgroup v1 devices hierarchy to make a cgroup in");
            return;
        }
        std::fs::write(cgroup.join("devices.deny"), "c 195:5 rwm").expect("deny");
        // a thread of its own in the cgroup (v1 membership is per thread)
        let procs = cgroup.join("tasks");
        let answers = std::thread::spawn(move || {
            std::fs::write(&procs, nix::unistd::gettid().to_string()).expect("join");
            (
                may_open(NVIDIA_MAJOR, 5),
                may_open(NVIDIA_MAJOR, 3),
                DeviceAccess.constraints().unwrap_or_default(),
            )
        })
        .join()
        .expect("thread");
        let _ = std::fs::remove_dir(&cgroup);
        assert_eq!(answers.0, Opened::Denied);
        assert_eq!(answers.1, Opened::Allowed);
        assert!(
            answers.2.contains("devices:/rust-gpu-access-test"),
            "{}",
            answers.2
        );
    }
}
