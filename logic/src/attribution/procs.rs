//! The processes of the steps slurmd runs, from /proc: where a step runs is where its
//! processes are ([`super::cgroup`]).
//!
//! A step's slurmstepd names itself in its grant (its pid and start, [`super::grant::StepdId`],
//! in root's 0700 directory): slurmd then checks that one process. Where no grant names it
//! (not written yet, or by a plugin of before), /proc is searched, off slurmd's sampler
//! thread ([`Scans`]):
//! a step's slurmstepd names itself `slurmstepd: [<job>.<step>]` (`_set_job_log_prefix()`
//! in slurmstepd.c, every release; 26.05's step manager appends ` stepmgr`): one pass over
//! /proc finds every new step's candidates by title, and the pid is kept while the step
//! runs. A title is anyone's to set (`exec -a`), so a candidate is the step's slurmstepd
//! only if it runs as slurmd's user (its real uid: slurmstepd drops only its effective one
//! at times) and holds the step's socket in this node's SlurmdSpoolDir, which only the
//! step's slurmstepd binds. That also tells apart the slurmstepds of the same step on one
//! host (`--enable-multiple-slurmd`, or nodes in network namespaces).
//!
//! What a pass costs is not the node's users' to size: a process's owner is read before
//! anything else of it, and of slurmd's user's processes only the first [`TITLE_BYTES`] of
//! their titles (a user's can hold megabytes); which socket is bound where is asked of the
//! kernel once a pass (`unix_sockets`); and passes are [`SCAN_GAP`] apart at least, however
//! many steps start ([`Scans`]).

mod scans;
mod unix_sockets;

pub use scans::{Found, SCAN_GAP, SCAN_WAIT, Scans, search};

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use super::{StepKey, own_step};

/// Where the kernel shows processes.
pub(crate) const PROC_ROOT: &str = "/proc";

/// What of a process's title is read: `slurmstepd: [<job>.<step> stepmgr]` is under 50 bytes
/// (a u32 job, a step's number or name), and slurmstepd writes it at the title's start.
pub const TITLE_BYTES: u64 = 128;

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
    /// steps, in one pass over all processes; of another user's process only its owner is
    /// read, of slurmd's user's the start of its title.
    /// Ends early once `stop` is set.
    pub fn stepds(
        &self,
        wanted: &HashSet<StepKey>,
        uid: u32,
        stop: &AtomicBool,
    ) -> HashMap<StepKey, Vec<u32>> {
        let mut found: HashMap<StepKey, Vec<u32>> = HashMap::new();
        let pids = fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok());
        for pid in pids {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            // the owner first: nothing more is read of another user's process
            if self.uid(pid) != Some(uid) {
                continue;
            }
            // a process that ended meanwhile, or a kernel thread (no title), is no stepd
            let Some(title) = self.title(pid) else {
                continue;
            };
            if let Some(step) = own_step(&title).filter(|s| wanted.contains(s)) {
                found.entry(step).or_default().push(pid);
            }
        }
        found
    }

    /// The start of process `pid`'s title, at most [`TITLE_BYTES`] of it (arguments NUL-
    /// separated as the kernel shows them, read as spaces). A title cut by the bound ends
    /// at its last space or `]`: a step's name cut short (`[5.1` of `[5.12]`) is none.
    fn title(&self, pid: u32) -> Option<String> {
        let mut head = Vec::new();
        File::open(self.cmdline_path(pid))
            .ok()?
            .take(TITLE_BYTES)
            .read_to_end(&mut head)
            .ok()?;
        let mut title = String::from_utf8_lossy(&head).replace('\0', " ");
        if head.len() as u64 >= TITLE_BYTES {
            title.truncate(title.rfind([' ', ']']).unwrap_or(0));
        }
        Some(title)
    }

    /// When process `pid` started, on this moment's wall clock: its age is the time since
    /// boot (`/proc/uptime`) less its start in clock ticks after boot (`/proc/<pid>/stat`'s
    /// 22nd field). Not from `/proc/stat`'s btime: it is whole seconds (a start up to a
    /// second early) and moves when the wall clock is set. Ticks are USER_HZ, 100 per
    /// second on every architecture Slurm runs on.
    pub fn started(&self, pid: u32) -> Option<SystemTime> {
        const TICKS_PER_SEC: f64 = 100.0;
        let ticks = self.start_ticks(pid)?;
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

    /// The name of the thread that calls: Slurm names its own. Asked of the kernel for the
    /// calling thread itself (`prctl(PR_GET_NAME)`: one system call, no file to open), at
    /// each of Slurm's polls in a slurmstepd.
    pub fn calling_thread(&self) -> Option<String> {
        let name = nix::sys::prctl::get_name().ok()?;
        Some(name.to_string_lossy().into_owned())
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

    /// Which of `pids` holds one of the unix `sockets` (by inode): each process's `fd/`
    /// links name the inodes of the sockets it holds, `socket:[<inode>]`.
    pub fn holding(&self, pids: &[u32], sockets: &HashSet<u32>) -> Option<u32> {
        let names: HashSet<String> = sockets.iter().map(|i| format!("socket:[{i}]")).collect();
        pids.iter().copied().find(|pid| {
            fs::read_dir(self.root.join(pid.to_string()).join("fd"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|fd| fs::read_link(fd.path()).ok())
                .any(|target| names.contains(target.to_string_lossy().as_ref()))
        })
    }

    /// When process `pid` started, in clock ticks after boot (`/proc/<pid>/stat`'s 22nd
    /// field): with its pid, the process's name that a pid given again does not take over.
    pub fn start_ticks(&self, pid: u32) -> Option<u64> {
        let stat = fs::read_to_string(self.root.join(pid.to_string()).join("stat")).ok()?;
        // the command name may hold spaces and parentheses: fields count from its end
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
    use crate::attribution::StepId;
    use crate::attribution::cgroup::tests::write;
    use std::os::unix::fs::symlink;
    use std::os::unix::net::UnixListener;

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

    /// A step's slurmstepd in a fake /proc: titled, in `cgroup`, holding a socket bound at
    /// `socket` (a real one, which lives as long as the caller keeps it).
    pub(crate) fn stepd(
        proc_root: &Path,
        pid: u32,
        step: StepKey,
        cgroup: &str,
        socket: &Path,
    ) -> UnixListener {
        let title = format!("slurmstepd: [{}.{}]", step.job, step.step.name());
        process(proc_root, pid, &title, cgroup);
        holds_socket(proc_root, pid, socket)
    }

    /// The calling thread (this test's) is named `name`, as Slurm names its own.
    pub(crate) fn name_calling_thread(name: &str) {
        let name = std::ffi::CString::new(name).expect("a name");
        nix::sys::prctl::set_name(&name).expect("prctl");
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

    /// `pid` holds a unix socket bound at `socket`: a real one, in the kernel's table as
    /// slurmstepd's is, kept as long as the caller keeps it.
    pub(crate) fn holds_socket(proc_root: &Path, pid: u32, socket: &Path) -> UnixListener {
        fs::create_dir_all(socket.parent().expect("socket dir")).expect("mkdir");
        let listener = UnixListener::bind(socket).expect("bind");
        holds(proc_root, pid, &listener);
        listener
    }

    /// `pid` holds `listener`, as `/proc/<pid>/fd/` shows a socket: `socket:[<inode>]`,
    /// the inode of its sockfs file (what the kernel's socket table names).
    pub(crate) fn holds(proc_root: &Path, pid: u32, listener: &UnixListener) {
        let inode = nix::sys::stat::fstat(listener).expect("fstat").st_ino;
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
            StepKey::new(5, StepId(0)),
            StepKey::new(5, StepId::EXTERN),
            StepKey::new(7, StepId::EXTERN),
            StepKey::new(8, StepId(0)),
        ]
        .into_iter()
        .collect();
        // a process of another user titled as a slurmstepd is none
        process_of(root, 16, "slurmstepd: [8.0]", "0::/", 4242);
        let me = nix::unistd::getuid().as_raw();
        assert_ne!(me, 4242);
        let found = procs(root).stepds(&wanted, me, &AtomicBool::new(false));
        assert_eq!(procs(root).uid(16), Some(4242));
        assert_eq!(found.get(&StepKey::new(5, StepId(0))), Some(&vec![11]));
        assert_eq!(found.get(&StepKey::new(5, StepId::EXTERN)), Some(&vec![10]));
        assert_eq!(found.get(&StepKey::new(7, StepId::EXTERN)), Some(&vec![14]));
        assert_eq!(found.len(), 3);
    }

    fn procs(root: &Path) -> Procs {
        Procs::from_path(root)
    }

    /// One pass over the fake /proc at `root`, on this thread.
    fn scan(root: &Path, wanted: &[(StepKey, &Path)]) -> HashMap<StepKey, u32> {
        let wanted: HashMap<StepKey, PathBuf> =
            wanted.iter().map(|(s, p)| (*s, p.to_path_buf())).collect();
        let (failing, stop) = (AtomicBool::new(false), AtomicBool::new(false));
        search(
            &procs(root),
            &wanted,
            nix::unistd::getuid().as_raw(),
            &failing,
            &stop,
        )
    }

    #[test]
    fn children_and_sockets_are_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = &tmp.path().join("proc");
        child(root, 10, 20);
        child(root, 10, 21);
        assert_eq!(procs(root).children(10), vec![20, 21]);
        assert!(procs(root).children(99).is_empty());
        // two slurmd on one host, each with its spool dir, run step 5.0
        let spool = |n: &str| tmp.path().join(format!("spool/{n}/{n}_5.0"));
        let step = StepKey::new(5, StepId(0));
        let _n1 = stepd(root, 31, step, "0::/", &spool("n1"));
        let _n2 = stepd(root, 32, step, "0::/", &spool("n2"));
        // by components: a SlurmdSpoolDir written with a trailing `/`
        let doubled = PathBuf::from(format!("{}/spool/n2//n2_5.0", tmp.path().display()));
        assert_eq!(scan(root, &[(step, &doubled)]), [(step, 32)].into());
        assert_eq!(scan(root, &[(step, &spool("n1"))]), [(step, 31)].into());
        fs::remove_dir_all(root.join("31/fd")).expect("rm");
        assert_eq!(scan(root, &[(step, &spool("n1"))]), HashMap::new());
    }

    /// A user binds a socket at a path holding a newline and, after it, a line of
    /// `/proc/net/unix` of its own: the spool socket's path with the inode of a root
    /// slurmstepd's socket (another node's, of the same step). Read as text, the table
    /// names that slurmstepd as holding this node's socket; the kernel's own table says
    /// which socket is bound to which file, and no process is taken for this step's.
    #[test]
    fn a_forged_line_of_the_socket_table_names_no_slurmstepd() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = &tmp.path().join("proc");
        let step = StepKey::new(5, StepId(0));
        let ours = tmp.path().join("n1/n1_5.0");
        let theirs = tmp.path().join("n2/n2_5.0");
        // this node's slurmstepd is not titled yet; the other node's holds its socket
        fs::create_dir_all(ours.parent().expect("dir")).expect("mkdir");
        let _bound = UnixListener::bind(&ours).expect("bind");
        let their_stepd = stepd(root, 32, step, "0::/", &theirs);
        let inode = nix::sys::stat::fstat(&their_stepd).expect("fstat").st_ino;
        let forged = format!(
            "x\n0000: 00000002 0 10000 0001 01 {inode} {}",
            ours.display()
        );
        // the user makes the directories the path names (`…01 <inode> /tmp/…/n1/`)
        let path = tmp.path().join(forged);
        fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        let _user = UnixListener::bind(&path).expect("bind");
        // what a reader of the text table sees: the kernel's own table shows the line
        let table = fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
        let line = format!(" {inode} {}\n", ours.display());
        assert!(table.contains(&line), "the forged line is in the table");
        write(&root.join("net/unix"), &table);
        assert_eq!(scan(root, &[(step, &ours)]), HashMap::new());
    }

    /// Another user's process is not read beyond its owner: its title may be megabytes, or
    /// (here) a FIFO no one writes, whose read would wait for ever.
    #[test]
    fn another_users_process_is_read_no_further_than_its_owner() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().to_path_buf();
        process_of(&root, 40, "", "0::/", 4242);
        fs::remove_file(root.join("40/cmdline")).expect("rm");
        nix::unistd::mkfifo(&root.join("40/cmdline"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        process(&root, 41, "slurmstepd: [5.0]", "0::/");
        let done = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let wanted: HashSet<_> = [StepKey::new(5, StepId(0))].into();
            let me = nix::unistd::getuid().as_raw();
            let _ = done
                .0
                .send(procs(&root).stepds(&wanted, me, &AtomicBool::new(false)));
        });
        let found = done.1.recv_timeout(Duration::from_secs(10));
        assert_eq!(
            found.ok(),
            Some([(StepKey::new(5, StepId(0)), vec![41])].into())
        );
    }

    /// Of slurmd's user's processes, only the start of the title is read: a title longer
    /// than that is found by its start (here a FIFO that never ends: a whole read waits
    /// for ever), one cut inside its step's name is none.
    #[test]
    fn only_the_start_of_a_title_is_read() {
        use std::io::Write;
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().to_path_buf();
        process(&root, 50, "", "0::/");
        let fifo = root.join("50/cmdline");
        fs::remove_file(&fifo).expect("rm");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        let padding = "x".repeat(2 * TITLE_BYTES as usize);
        let long = format!("slurmstepd: [5.0]\0{padding}");
        // a job's number cut by the bound: `[7.12` of `[7.123]`
        let cut = format!("{} slurmstepd: [7.123]", "y ".repeat(55));
        assert_eq!(cut.find("[7.12").map(|i| i + 5), Some(TITLE_BYTES as usize));
        process(&root, 51, &cut, "0::/");
        let writer = std::thread::spawn(move || {
            let mut fifo = fs::OpenOptions::new().write(true).open(fifo).expect("open");
            fifo.write_all(long.as_bytes()).expect("write");
            // held open: no end of file until the test ends
            std::thread::sleep(Duration::from_secs(30));
        });
        let done = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let wanted: HashSet<_> = [
                StepKey::new(5, StepId(0)),
                StepKey::new(7, StepId(12)),
                StepKey::new(7, StepId(123)),
            ]
            .into();
            let me = nix::unistd::getuid().as_raw();
            let _ = done
                .0
                .send(procs(&root).stepds(&wanted, me, &AtomicBool::new(false)));
        });
        let found = done.1.recv_timeout(Duration::from_secs(10));
        assert_eq!(
            found.ok(),
            Some([(StepKey::new(5, StepId(0)), vec![50])].into())
        );
        drop(writer);
    }
}
