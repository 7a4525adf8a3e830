//! slurmstepd's `ENERGY_DATA_STEP_PTR`: what its step was granted on this node, published
//! for slurmd ([`Grant::publish`]). From Slurm's step record where it is read; where it is
//! refused (a release whose layout was never measured, a record that failed its checks)
//! or not to be read (`EnergyStepRecord=no`), from slurmctld's record of the job
//! ([`job_record`]), asked on a thread of its own: Slurm's call never waits for slurmctld.
//!
//! The grant is written into root's 0700 directory, and slurmstepd is not always root:
//! while it opens a step's `--output`, `--error` or `--input` it runs as the step's user
//! (`seteuid`, which glibc applies to every thread), and a FIFO holds that open for as long
//! as the user who reads it likes. A grant refused then is tried again, on a thread of its
//! own ([`Publishers`]), every [`RETRY_EVERY`], until slurmstepd is root again: a lost grant
//! would leave the step's GPUs' static power to the jobs beside it.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::unistd::{Uid, User};

mod retry;

use super::Host;
use crate::attribution::StepKey;
use crate::attribution::grant::{Grant, StepdId};
use crate::attribution::job_record::{self, RETRY_AFTER, STEP_RECORD_KEY, StepRecordConfig};
use crate::guard::guard;
use retry::{Identity, for_permission, until_written};

/// How often a grant refused during a privilege drop is tried again: slurmd meets the
/// grant within this of slurmstepd's return to root.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// Why Slurm's step record was not read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordRefused {
    /// This build has no layout of the running release's record (a release newer than
    /// the build's table, a pre-release): nothing is wrong, the step is charged from
    /// slurmctld's record, and the log says so as information.
    #[error("{0}")]
    NotMeasured(String),
    /// The record failed a check or could not be read: the build's layout is wrong for it.
    #[error("{0}")]
    Failed(String),
}

/// The threads that publish this slurmstepd's grant: stopped and joined when the plugin's
/// state is dropped (`fini`), so that none runs on once Slurm unloads the plugin.
#[derive(Default)]
pub(super) struct Publishers {
    stop: Arc<Stop>,
    threads: Vec<JoinHandle<()>>,
}

impl Publishers {
    /// Runs `f` on a thread named `name` behind the panic guard (`what` names it there).
    fn spawn(
        &mut self,
        name: &str,
        what: &'static str,
        f: impl FnOnce(&Stop) + Send + 'static,
    ) -> std::io::Result<()> {
        let stop = Arc::clone(&self.stop);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || guard(what, (), || f(&stop)))?;
        self.threads.push(thread);
        Ok(())
    }
}

impl Drop for Publishers {
    fn drop(&mut self) {
        self.stop.stop();
        for thread in self.threads.drain(..) {
            // its panics were caught by the guard
            let _ = thread.join();
        }
    }
}

/// Tells the publishers' waits that the plugin is closing.
#[derive(Default)]
struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_all();
    }

    /// Waits `period`, or less if stopped meanwhile; whether stopped.
    fn wait(&self, period: Duration) -> bool {
        let stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        let (stopped, _) = self
            .wake
            .wait_timeout_while(stopped, period, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        *stopped
    }
}

/// Publishes `grant`, tried again on a thread of `publishers` where a privilege drop
/// refuses it: Slurm's call never waits.
fn publish_now_or_later(publishers: &mut Publishers, spool: &Path, grant: Grant) {
    let first = match grant.publish(spool) {
        Ok(()) => return,
        Err(e) => e,
    };
    // the thread tries again at once: the drop may have ended meanwhile
    if !for_permission(&first) || Identity::now() == Identity::User {
        return no_grant(&grant, &first.to_string());
    }
    let spool = spool.to_path_buf();
    let step = format!("{}.{}", grant.job, grant.step_id().name());
    let spawned = publishers.spawn("energy-grant", "the grant's thread", {
        let step = step.clone();
        move |stop| write_until_written(&step, stop, &spool, &grant)
    });
    if let Err(e) = spawned {
        log::error!(
            "step {step}: {first}, and no thread can try again ({e}); slurmd cannot tell \
             which GPUs it holds"
        );
    }
}

/// Writes `grant` ([`until_written`]), logging a grant given up.
fn write_until_written(step: &str, stop: &Stop, spool: &Path, grant: &Grant) {
    if let Err(e) = until_written(step, stop, RETRY_EVERY, Identity::now, || {
        grant.publish(spool)
    }) {
        no_grant(grant, &e.to_string());
    }
}

/// Publishes the step's grant, from the step record at `address` when `config` reads it;
/// a thread any of it needs is one of `publishers`.
pub(super) fn publish(
    host: &dyn Host,
    config: StepRecordConfig,
    address: usize,
    publishers: &mut Publishers,
) {
    let refused = match config.read {
        true => match host.step_record(address) {
            Ok(grant) => {
                return match host.spool_dir() {
                    Ok(spool) => publish_now_or_later(publishers, &spool, signed(grant)),
                    Err(why) => no_grant(&grant, &why),
                };
            }
            Err(RecordRefused::NotMeasured(why)) => {
                log::info!("{why}");
                "Slurm's step record is not read".to_string()
            }
            Err(RecordRefused::Failed(why)) => {
                log::error!("{why}");
                "Slurm's step record is refused".to_string()
            }
        },
        false => format!("{STEP_RECORD_KEY}=no: Slurm's step record is not read"),
    };
    let Some(StepKey { job, step }) = host.own_step() else {
        log::error!(
            "{refused}, and this slurmstepd's title names no step: slurmd charges it no GPU"
        );
        return;
    };
    let name = format!("{job}.{}", step.name());
    let (load, spool) = match (host.job_records(), host.spool_dir()) {
        (Some(load), Ok(spool)) => (load, spool),
        (None, _) => {
            log::error!("step {name}: {refused}, and slurmctld cannot be asked here");
            return;
        }
        (_, Err(why)) => {
            log::error!("step {name}: {refused}, and {why}: slurmd charges it no GPU");
            return;
        }
    };
    log::info!(
        "step {name}: {refused}; its GPUs come from slurmctld's job record (all the job's \
         GPUs on this node: it cannot tell a step's own within its job)"
    );
    let node = host.node_name();
    let thread_name = name.clone();
    let asked = publishers.spawn("energy-jobrec", "the job record's thread", move |stop| {
        let pause = || stop.wait(RETRY_AFTER);
        let grant = job_record::job_grant(&spool, job, step, &node, load, user_name, pause);
        match grant {
            Ok(grant) => {
                log::info!(
                    "step {thread_name} holds GPUs {:?} on this node (GRES indexes, from \
                     slurmctld's job record)",
                    grant.allocation().gpus
                );
                write_until_written(&thread_name, stop, &spool, &signed(grant));
            }
            Err(why) => {
                log::error!("step {thread_name}: {why}; slurmd charges it no GPU")
            }
        }
    });
    if let Err(e) = asked {
        log::error!("step {name}: cannot start a thread to ask slurmctld ({e}): no GPU charged");
    }
}

/// The step's grant as this slurmstepd writes it: naming this process, which slurmd then
/// finds at once, without a search of /proc.
fn signed(grant: Grant) -> Grant {
    Grant {
        stepd: StepdId::own(),
        ..grant
    }
}

/// The name this node's user database gives `uid` (`getpwuid_r`).
fn user_name(uid: u32) -> Option<String> {
    User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

fn no_grant(grant: &Grant, why: &str) {
    log::error!(
        "step {}.{}: {why}; slurmd cannot tell which GPUs it holds",
        grant.job,
        grant.step_id().name()
    );
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::attribution::grant::GresHeld;
    use crate::attribution::job_record::{JobRecord, LoadJob};
    use crate::attribution::{StepId, StepKey};
    use crate::runtime::Daemon;

    /// slurmstepd of step 7.0 on node n1, whose step record says `record`.
    struct Stepd {
        spool: PathBuf,
        record: Result<Grant, RecordRefused>,
        record_read: AtomicBool,
    }

    impl Host for Stepd {
        fn daemon(&self) -> Daemon {
            Daemon::Slurmstepd
        }

        fn spool_dir(&self) -> Result<PathBuf, String> {
            Ok(self.spool.clone())
        }

        fn node_name(&self) -> String {
            "n1".into()
        }

        fn step_record(&self, _address: usize) -> Result<Grant, RecordRefused> {
            self.record_read.store(true, Ordering::SeqCst);
            self.record.clone()
        }

        fn own_step(&self) -> Option<StepKey> {
            Some(StepKey::new(7, StepId(0)))
        }

        fn job_records(&self) -> Option<LoadJob> {
            Some(|job| {
                Ok(JobRecord {
                    job,
                    uid: 0,
                    nodes: "n[0-1]".into(),
                    gres_detail: vec!["gpu:1(IDX:0)".into(), "gpu:2(IDX:1,3)".into()],
                })
            })
        }
    }

    fn whole(indexes: &[u32]) -> Vec<GresHeld> {
        vec![GresHeld {
            name: "gpu".into(),
            count: indexes.len() as u64,
            indexes: indexes.to_vec(),
        }]
    }

    /// The grant slurmd would read for step 7.0, waited for up to 5 s.
    fn published(spool: &std::path::Path) -> Option<Grant> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Some(grant) = Grant::read(spool, 7, StepId(0)) {
                return Some(grant);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn stepd(record: Result<Grant, RecordRefused>) -> (tempfile::TempDir, Stepd) {
        let spool = tempfile::tempdir().expect("tempdir");
        let host = Stepd {
            spool: spool.path().to_path_buf(),
            record,
            record_read: AtomicBool::new(false),
        };
        (spool, host)
    }

    /// The step record where it is read; slurmctld's job record (this node's GPUs of the
    /// job) where it is refused, or never read with `EnergyStepRecord=no`.
    #[test]
    fn a_refused_or_unread_step_record_gives_the_jobs_gpus_from_slurmctld() {
        let own = Grant {
            job: 7,
            step: 0,
            uid: 1000,
            user: "alice".into(),
            gres: whole(&[3]),
            stepd: None,
        };
        let read = StepRecordConfig { read: true };
        let mut publishers = Publishers::default();
        let (spool, host) = stepd(Ok(own.clone()));
        publish(&host, read, 0x1000, &mut publishers);
        // signed by this process, which slurmd then checks alone
        let signed = Grant::read(spool.path(), 7, StepId(0)).expect("published");
        assert_eq!(signed.stepd.map(|s| s.pid), Some(std::process::id()));
        assert_eq!(signed.stepd, StepdId::own());
        assert_eq!(
            Grant {
                stepd: None,
                ..signed
            },
            own
        );

        let from_job = |spool| published(spool).map(|g| (g.gres, g.user));
        let root = Some((whole(&[1, 3]), "root".to_string()));
        let (spool, host) = stepd(Err(RecordRefused::NotMeasured(
            "Slurm 26.11.0: not measured".into(),
        )));
        publish(&host, read, 0x1000, &mut publishers);
        assert_eq!(from_job(spool.path()), root);

        let (spool, host) = stepd(Err(RecordRefused::Failed("never asked".into())));
        publish(
            &host,
            StepRecordConfig { read: false },
            0x1000,
            &mut publishers,
        );
        assert_eq!(from_job(spool.path()), root);
        assert!(!host.record_read.load(Ordering::SeqCst));
    }

    /// Where the test below, run again in a process of its own, finds its SlurmdSpoolDir:
    /// it changes that process's uids, never the test harness's.
    const DROP_CHILD: &str = "ENERGY_TESTS_GRANT_DROP_SPOOL";

    /// slurmstepd of a step whose `--output` is a FIFO: it runs as the step's user
    /// (seteuid, every thread) until the FIFO is opened, and its grant is written then.
    /// Before this fix the grant was refused once and lost.
    #[test]
    fn a_grant_refused_while_slurmstepd_runs_as_the_user_is_written_when_it_is_root_again() {
        let own = Grant {
            job: 7,
            step: 0,
            uid: 65534,
            user: "nobody".into(),
            gres: whole(&[3]),
            stepd: None,
        };
        if let Some(spool) = std::env::var_os(DROP_CHILD) {
            return drop_root_and_publish(PathBuf::from(spool), own);
        }
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("ENERGY_TESTS_ALLOW_SKIP").is_some(),
                "dropping root needs root (ENERGY_TESTS_ALLOW_SKIP=1 skips)"
            );
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let spool = tempfile::tempdir().expect("tempdir");
        // as on a node: SlurmdSpoolDir root's 0755, its grants' directory root's 0700
        std::fs::set_permissions(spool.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        Grant {
            job: 1,
            ..own.clone()
        }
        .publish(spool.path())
        .expect("published as root");
        let name = module_path!().split_once("::").expect("a module path").1;
        let child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "--nocapture", "--test-threads=1"])
            .arg(format!(
                "{name}::a_grant_refused_while_slurmstepd_runs_as_the_user_is_written_when_it_is_root_again"
            ))
            .env(DROP_CHILD, spool.path())
            .output()
            .expect("the test binary runs");
        let said = String::from_utf8_lossy(&child.stdout).to_string()
            + &String::from_utf8_lossy(&child.stderr);
        assert!(child.status.success(), "{said}");
        assert!(said.contains("1 passed"), "{said}");
        // what the child published, read back as slurmd would, signed by the child
        let signed = Grant::read(spool.path(), 7, StepId(0)).expect("published");
        assert!(signed.stepd.is_some_and(|s| s.pid != std::process::id()));
        assert_eq!(
            Grant {
                stepd: None,
                ..signed
            },
            own
        );
        assert_eq!(Grant::read(spool.path(), 8, StepId(0)), None);
    }

    /// The child's part: publishes step 7.0's grant as slurmstepd does while it runs as
    /// uid 65534 for 600 ms, then step 8.0's during a drop that outlasts the plugin.
    fn drop_root_and_publish(spool: PathBuf, own: Grant) {
        use nix::unistd::seteuid;
        let (user, root) = (Uid::from_raw(65534), Uid::from_raw(0));
        let read = StepRecordConfig { read: true };
        let stepd = |grant| Stepd {
            spool: spool.clone(),
            record: Ok(grant),
            record_read: AtomicBool::new(false),
        };
        let mut publishers = Publishers::default();
        seteuid(user).expect("seteuid");
        publish(&stepd(own.clone()), read, 0x1000, &mut publishers);
        std::thread::sleep(Duration::from_millis(600));
        seteuid(root).expect("seteuid(0)");
        let signed = Grant {
            stepd: StepdId::own(),
            ..own.clone()
        };
        assert_eq!(published(&spool), Some(signed));
        // a drop that outlasts the step: fini stops and joins the thread at once
        seteuid(user).expect("seteuid");
        let other = Grant { job: 8, ..own };
        publish(&stepd(other), read, 0x1000, &mut publishers);
        std::thread::sleep(Duration::from_millis(300));
        let start = Instant::now();
        drop(publishers);
        let took = start.elapsed();
        seteuid(root).expect("seteuid(0)");
        // without the stop the join would wait for root, given back only after it
        assert!(took < Duration::from_secs(2), "fini waited {took:?}");
    }
}
