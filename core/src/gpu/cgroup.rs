//! Which GPUs this process is accounted for: the GPU device files its devices cgroup
//! (cgroup v1) allows.
//!
//! Slurm's task/cgroup with `ConstrainDevices=yes` puts each slurmstepd into its step's
//! devices cgroup, whose `devices.list` names exactly the device files of the GPUs the
//! step was given (gres.conf `File=`). So a slurmstepd counts its step's GPUs and slurmd
//! (unconstrained: `a *:* rwm`) all of the node's, with one rule and no Slurm internals.
//! Without a devices cgroup (cgroup v2, ConstrainDevices=no) everything is allowed, as
//! Slurm's own gpu energy plugin then counts all GPUs too.

use std::path::{Path, PathBuf};

/// Device files a devices cgroup allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    All,
    /// Character devices `(major, minor)`; `None` as minor: every minor of that major.
    Chars(Vec<(u32, Option<u32>)>),
}

impl Allowed {
    /// Whether a GPU reached through `file` (`None`: unknown) is allowed.
    pub fn allows(&self, file: Option<(u32, u32)>) -> bool {
        match (self, file) {
            (Allowed::All, _) => true,
            (Allowed::Chars(_), None) => false,
            (Allowed::Chars(list), Some((major, minor))) => list
                .iter()
                .any(|&(ma, mi)| ma == major && mi.is_none_or(|mi| mi == minor)),
        }
    }
}

/// Parses `devices.list`: lines `TYPE MAJOR:MINOR ACCESS` with `a` (all) or `*` wildcards.
pub fn parse_devices_list(text: &str) -> Allowed {
    let mut chars = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(kind), Some(numbers)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((major, minor)) = numbers.split_once(':') else {
            continue;
        };
        match kind {
            "a" => return Allowed::All,
            "c" if major == "*" => return Allowed::All,
            "c" => {
                let Ok(major) = major.parse() else { continue };
                chars.push((major, minor.parse().ok()));
            }
            _ => {}
        }
    }
    Allowed::Chars(chars)
}

/// The devices hierarchy's mount point in `/proc/self/mountinfo` text: the cgroup (v1)
/// mount whose super options name `devices`.
pub fn devices_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let mut fs = fs.split_whitespace();
        let (kind, _source, options) = (fs.next()?, fs.next()?, fs.next()?);
        if kind != "cgroup" || !options.split(',').any(|o| o == "devices") {
            return None;
        }
        mount.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// The process's devices cgroup in `/proc/self/cgroup` text (`N:devices:/path`).
pub fn devices_cgroup(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "devices")
            .then_some(path)
    })
}

/// What this process's devices cgroup allows now (`All` without one). Read at every
/// sample: slurmstepd moves into its step's cgroup after it opened the source.
pub fn allowed_now(proc_self: &Path) -> Allowed {
    let read = |name: &str| std::fs::read_to_string(proc_self.join(name)).ok();
    let list = read("mountinfo")
        .and_then(|m| devices_mount(&m))
        .zip(read("cgroup"))
        .and_then(|(mount, cgroup)| {
            let path = devices_cgroup(&cgroup)?.trim_start_matches('/').to_string();
            std::fs::read_to_string(mount.join(path).join("devices.list")).ok()
        });
    list.map_or(Allowed::All, |text| parse_devices_list(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constrained_list_allows_only_its_gpus() {
        let list = "c 1:3 rwm\nc 195:1 rwm\nc 195:255 rwm\nc 226:* rw\nb 8:0 r\n";
        let allowed = parse_devices_list(list);
        assert!(allowed.allows(Some((195, 1))));
        assert!(!allowed.allows(Some((195, 0))));
        assert!(allowed.allows(Some((226, 129))));
        assert!(!allowed.allows(None));
        assert_eq!(parse_devices_list("a *:* rwm\n"), Allowed::All);
        assert_eq!(parse_devices_list("c *:* rwm\n"), Allowed::All);
        assert!(!parse_devices_list("").allows(Some((195, 0))));
    }

    #[test]
    fn finds_the_devices_cgroup_of_the_process() {
        let mountinfo = "25 1 0:23 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
            30 25 0:26 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices\n\
            31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            devices_mount(mountinfo),
            Some(PathBuf::from("/sys/fs/cgroup/devices"))
        );
        assert_eq!(devices_mount("1 0 0:2 / / rw - cgroup2 cgroup2 rw\n"), None);
        let cgroup = "12:memory:/slurm/uid_0/job_7/step_0\n5:devices:/slurm/uid_0/job_7/step_0\n";
        assert_eq!(devices_cgroup(cgroup), Some("/slurm/uid_0/job_7/step_0"));
        assert_eq!(devices_cgroup("0::/user.slice\n"), None);
    }

    #[test]
    fn a_process_tree_without_a_devices_cgroup_allows_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("mountinfo"), "").expect("write");
        std::fs::write(dir.path().join("cgroup"), "0::/\n").expect("write");
        assert_eq!(allowed_now(dir.path()), Allowed::All);
        let mount = dir.path().join("devices");
        std::fs::create_dir_all(mount.join("slurm/job_3/step_0")).expect("mkdir");
        std::fs::write(
            mount.join("slurm/job_3/step_0/devices.list"),
            "c 195:1 rwm\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("mountinfo"),
            format!(
                "30 25 0:26 / {} rw - cgroup cgroup rw,devices\n",
                mount.display()
            ),
        )
        .expect("write");
        std::fs::write(dir.path().join("cgroup"), "5:devices:/slurm/job_3/step_0\n")
            .expect("write");
        assert_eq!(
            allowed_now(dir.path()),
            Allowed::Chars(vec![(195, Some(1))])
        );
    }
}
