//! The processes of the steps slurmd runs, from /proc: where a step runs is where its
//! processes are ([`super::cgroup`]).
//!
//! A step's slurmstepd names itself `slurmstepd: [<job>.<step>]` (`_set_job_log_prefix()`
//! in slurmstepd.c, every release; 26.05's step manager appends ` stepmgr`): one pass over
//! /proc finds every new step's candidates by title, and the pid is kept while the step
//! runs. A title is anyone's to set (`exec -a`), so a candidate is the step's slurmstepd
//! only if it runs as slurmd's user (its real uid: slurmstepd drops only its effective one
//! at times) and holds the step's socket in this node's SlurmdSpoolDir, which only the
//! step's slurmstepd binds. That also tells apart the slurmstepds of the same step on one
//! host (`--enable-multiple-slurmd`, or nodes in network namespaces).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{StepId, own_step};

/// Where the kernel shows processes.
pub const PROC_ROOT: &str = "/proc";

/// A view of /proc (a fake one in tests).
#[derive(Debug, Clone)]
pub struct Procs {
    root: PathBuf,
}

impl Procs {
    /// The processes shown under `root` (`/proc`).
    pub fn from_path(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    /// The processes of real uid `uid` titled as the slurmstepd of one of the `wanted`
    /// steps, in one pass over all processes.
    pub fn stepds(
        &self,
        wanted: &HashSet<(u32, StepId)>,
        uid: u32,
    ) -> HashMap<(u32, StepId), Vec<u32>> {
        let mut found: HashMap<(u32, StepId), Vec<u32>> = HashMap::new();
        let pids = fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
        for pid in pids {
            // a process that ended meanwhile, or a kernel thread (no cmdline), is no stepd
            let Ok(cmdline) = fs::read(self.cmdline_path(pid)) else {
                continue;
            };
            let title = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            let Some(step) = own_step(&title).filter(|s| wanted.contains(s)) else {
                continue;
            };
            if self.uid(pid) == Some(uid) {
                found.entry(step).or_default().push(pid);
            }
        }
        found
    }

    /// When process `pid` started, on this moment's wall clock: its age is the time since
    /// boot (`/proc/uptime`) less its start in clock ticks after boot (`/proc/<pid>/stat`'s
    /// 22nd field). Not from `/proc/stat`'s btime: it is whole seconds (a start up to a
    /// second early) and moves when the wall clock is set. Ticks are USER_HZ, 100 per
    /// second on every architecture Slurm runs on.
    pub fn started(&self, pid: u32) -> Option<SystemTime> {
        const TICKS_PER_SEC: f64 = 100.0;
        let stat = fs::read_to_string(self.root.join(pid.to_string()).join("stat")).ok()?;
        // the command name may hold spaces and parentheses: fields count from its end
        let after_name = &stat[stat.rfind(')')? + 1..];
        let ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
        let uptime: f64 = fs::read_to_string(self.root.join("uptime"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        let age = (uptime - ticks as f64 / TICKS_PER_SEC).max(0.0);
        SystemTime::now().checked_sub(Duration::try_from_secs_f64(age).ok()?)
    }

    /// The real uid of process `pid` (`/proc/<pid>/status`'s `Uid:` first field).
    pub fn uid(&self, pid: u32) -> Option<u32> {
        let status = fs::read_to_string(self.root.join(pid.to_string()).join("status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// `/proc/<pid>/cmdline`, where a process's title is.
    pub fn cmdline_path(&self, pid: u32) -> PathBuf {
        self.root.join(pid.to_string()).join("cmdline")
    }

    /// The text of `/proc/<pid>/cgroup`; `None` once the process is gone.
    pub fn cgroup(&self, pid: u32) -> Option<String> {
        fs::read_to_string(self.root.join(pid.to_string()).join("cgroup")).ok()
    }

    /// `/proc/<pid>/environ`: the environment the process started with (root may read
    /// any); `None` once it is gone.
    pub fn environ(&self, pid: u32) -> Option<Vec<u8>> {
        fs::read(self.root.join(pid.to_string()).join("environ")).ok()
    }

    /// The parent of `pid` (`/proc/<pid>/stat`'s 4th field); `None` once it is gone.
    pub fn parent(&self, pid: u32) -> Option<u32> {
        let stat = fs::read_to_string(self.root.join(pid.to_string()).join("stat")).ok()?;
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }

    /// The NVIDIA driver's MIG capability minors (`driver/nvidia-caps/mig-minors`):
    /// `gpu<minor>/gi<id>/access` and `gpu<minor>/gi<id>/ci<id>/access` to the minor of
    /// the capability file that gives access to it; empty without MIG.
    pub fn mig_minors(&self) -> HashMap<String, u32> {
        fs::read_to_string(self.root.join("driver/nvidia-caps/mig-minors"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (name, minor) = l.split_once(' ')?;
                Some((name.to_string(), minor.trim().parse().ok()?))
            })
            .collect()
    }

    /// The name of the thread that calls (`/proc/thread-self/comm`): Slurm names its own.
    pub fn calling_thread(&self) -> Option<String> {
        let name = fs::read_to_string(self.root.join("thread-self/comm")).ok()?;
        Some(name.trim_end().to_string())
    }

    /// The id of the thread that calls (`/proc/thread-self/stat`'s first field): a
    /// process's main thread has the process's id.
    pub fn calling_tid(&self) -> Option<u32> {
        let stat = fs::read_to_string(self.root.join("thread-self/stat")).ok()?;
        stat.split_whitespace().next()?.parse().ok()
    }

    /// The children of `pid` (of all its threads), where a step's tasks are.
    pub fn children(&self, pid: u32) -> Vec<u32> {
        let tasks = self.root.join(pid.to_string()).join("task");
        fs::read_dir(tasks)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|t| fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect()
    }

    /// Which of `pids` holds the unix socket bound at `socket`: `/proc/net/unix` gives the
    /// socket's inode (of this network namespace, which slurmd's stepds share), each
    /// process's `fd/` links name the inodes it holds.
    pub fn holding_socket(&self, pids: &[u32], socket: &Path) -> Option<u32> {
        let table = fs::read_to_string(self.root.join("net/unix")).ok()?;
        let inodes: HashSet<String> = table
            .lines()
            .skip(1)
            .filter_map(|l| {
                // Num RefCount Protocol Flags Type St Inode Path: the path as slurmstepd
                // bound it, compared by components (a SlurmdSpoolDir ending in `/`)
                let fields: Vec<&str> = l.split_whitespace().collect();
                let bound = fields.get(7..)?.join(" ");
                (Path::new(&bound) == socket).then(|| format!("socket:[{}]", fields[6]))
            })
            .collect();
        pids.iter().copied().find(|pid| {
            fs::read_dir(self.root.join(pid.to_string()).join("fd"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|fd| fs::read_link(fd.path()).ok())
                .any(|target| inodes.contains(target.to_string_lossy().as_ref()))
        })
    }

    /// When process `pid` started, in clock ticks after boot (`/proc/<pid>/stat`'s 22nd
    /// field): with its pid, the process's name that a pid given again does not take over.
    pub fn start_ticks(&self, pid: u32) -> Option<u64> {
        let stat = fs::read_to_string(self.root.join(pid.to_string()).join("stat")).ok()?;
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(19)?
            .parse()
            .ok()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::attribution::cgroup::tests::write;
    use std::os::unix::fs::symlink;

    /// A process in a fake /proc: its title (NUL-separated as the kernel shows argv) and
    /// its `/proc/<pid>/cgroup`, running as this test's user.
    pub(crate) fn process(proc_root: &Path, pid: u32, title: &str, cgroup: &str) {
        process_of(
            proc_root,
            pid,
            title,
            cgroup,
            nix::unistd::getuid().as_raw(),
        );
    }

    /// The same, of real uid `uid`.
    pub(crate) fn process_of(proc_root: &Path, pid: u32, title: &str, cgroup: &str, uid: u32) {
        let dir = proc_root.join(pid.to_string());
        write(&dir.join("cmdline"), &format!("{title}\0\0\0"));
        write(&dir.join("cgroup"), cgroup);
        write(
            &dir.join("status"),
            &format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
        );
    }

    /// A step's slurmstepd in a fake /proc: titled, in `cgroup`, holding `socket`.
    pub(crate) fn stepd(
        proc_root: &Path,
        pid: u32,
        step: (u32, StepId),
        cgroup: &str,
        socket: &Path,
    ) {
        let title = format!("slurmstepd: [{}.{}]", step.0, step.1.name());
        process(proc_root, pid, &title, cgroup);
        holds_socket(proc_root, pid, socket, 50_000 + pid);
    }

    /// The thread that reads `proc_root/thread-self` is named `name`.
    pub(crate) fn write_thread_name(proc_root: &Path, name: &str) {
        write(&proc_root.join("thread-self/comm"), &format!("{name}\n"));
    }

    /// The calling thread is thread `tid`.
    pub(crate) fn write_calling_tid(proc_root: &Path, tid: u32) {
        write(
            &proc_root.join("thread-self/stat"),
            &format!("{tid} (slurmstepd) S 1"),
        );
    }

    /// `child` is a child of `parent`'s main thread.
    pub(crate) fn child(proc_root: &Path, parent: u32, child: u32) {
        let file = proc_root.join(format!("{parent}/task/{parent}/children"));
        let mut text = fs::read_to_string(&file).unwrap_or_default();
        text.push_str(&format!("{child} "));
        write(&file, &text);
    }

    /// `pid` holds the unix socket bound at `socket`, of inode `inode`.
    pub(crate) fn holds_socket(proc_root: &Path, pid: u32, socket: &Path, inode: u32) {
        let table = proc_root.join("net/unix");
        let mut text = fs::read_to_string(&table)
            .unwrap_or_else(|_| "Num       RefCount Protocol Flags    Type St Inode Path\n".into());
        text.push_str(&format!(
            "0000000000000000: 00000002 00000000 00010000 0001 01 {inode} {}\n",
            socket.display()
        ));
        write(&table, &text);
        let fd = proc_root.join(format!("{pid}/fd/{inode}"));
        fs::create_dir_all(fd.parent().expect("fd dir")).expect("mkdir");
        symlink(format!("socket:[{inode}]"), fd).expect("fd link");
    }

    #[test]
    fn a_process_start_is_its_age_before_now() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        write(&root.join("uptime"), "1300.34 2500.10\n");
        // a name with a space and a parenthesis; the start is the 22nd field: 1234 ticks
        write(
            &root.join("42/stat"),
            "42 (slurmstepd: [1.0) x) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 1234 \
             9000000 100 18446744073709551615\n",
        );
        let before = SystemTime::now();
        let started = procs(root).started(42).expect("started");
        let after = SystemTime::now();
        // 1300.34 s since boot, started 12.34 s after it: 1288 s ago
        let age = Duration::from_secs(1288);
        assert!(
            started >= before - age && started <= after - age,
            "{started:?}"
        );
        assert_eq!(procs(root).started(43), None);
        // this very process, in the real /proc: it started before now, after boot
        let me = procs(Path::new(PROC_ROOT))
            .started(std::process::id())
            .expect("this process");
        let age = me.elapsed().expect("started in the past");
        assert!(age < Duration::from_secs(3600), "{age:?}");
    }

    #[test]
    fn stepds_are_found_by_their_title() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        process(root, 10, "slurmstepd: [5.extern]", "0::/");
        process(root, 11, "slurmstepd: [5.0]", "0::/");
        process(root, 12, "slurmstepd: [6.batch]", "0::/");
        process(root, 13, "slurmstepd infinity", "0::/");
        process(root, 14, "slurmstepd: [7.extern stepmgr]", "0::/");
        write(&root.join("15/cgroup"), "0::/\n");
        fs::create_dir_all(root.join("self")).expect("self");
        let wanted: HashSet<_> = [
            (5, StepId(0)),
            (5, StepId::EXTERN),
            (7, StepId::EXTERN),
            (8, StepId(0)),
        ]
        .into_iter()
        .collect();
        // a process of another user titled as a slurmstepd is none
        process_of(root, 16, "slurmstepd: [8.0]", "0::/", 4242);
        let me = nix::unistd::getuid().as_raw();
        assert_ne!(me, 4242);
        let found = procs(root).stepds(&wanted, me);
        assert_eq!(procs(root).uid(16), Some(4242));
        assert_eq!(found.get(&(5, StepId(0))), Some(&vec![11]));
        assert_eq!(found.get(&(5, StepId::EXTERN)), Some(&vec![10]));
        assert_eq!(found.get(&(7, StepId::EXTERN)), Some(&vec![14]));
        assert_eq!(found.len(), 3);
    }

    fn procs(root: &Path) -> Procs {
        Procs::from_path(root)
    }

    #[test]
    fn children_and_sockets_are_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        child(root, 10, 20);
        child(root, 10, 21);
        assert_eq!(procs(root).children(10), vec![20, 21]);
        assert!(procs(root).children(99).is_empty());
        let socket = Path::new("/var/spool/slurmd/n2/n2_5.0");
        holds_socket(root, 31, Path::new("/var/spool/slurmd/n1/n1_5.0"), 700);
        holds_socket(root, 32, Path::new("/var/spool/slurmd/n2//n2_5.0"), 701);
        assert_eq!(procs(root).holding_socket(&[31, 32], socket), Some(32));
        assert_eq!(procs(root).holding_socket(&[31], socket), None);
    }
}
