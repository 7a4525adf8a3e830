//! slurmstepd's `ENERGY_DATA_STEP_PTR`: what its step was granted on this node, published
//! for slurmd ([`Grant::publish`]). From Slurm's step record where it is read; where it is
//! refused (a release whose layout was never measured, a record that failed its checks)
//! or not to be read (`EnergyStepRecord=no`), from slurmctld's record of the job
//! ([`job_record`]), asked on a thread of its own: Slurm's call never waits for slurmctld.

use std::path::Path;

use nix::unistd::{Uid, User};

use super::Host;
use crate::attribution::StepKey;
use crate::attribution::grant::Grant;
use crate::attribution::job_record::{self, RETRY_AFTER, STEP_RECORD_KEY, StepRecordConfig};
use crate::guard::guard;

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

/// Publishes the step's grant, from the step record at `address` when `config` reads it.
pub(super) fn publish(host: &dyn Host, config: StepRecordConfig, address: usize) {
    let refused = match config.read {
        true => match host.step_record(address) {
            Ok(grant) => {
                return match host.spool_dir() {
                    Ok(spool) => write(&spool, &grant),
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
    let asked = std::thread::Builder::new()
        .name("energy-jobrec".into())
        .spawn(move || {
            guard("the job record's thread", (), || {
                let grant =
                    job_record::job_grant(&spool, job, step, &node, load, user_name, RETRY_AFTER);
                match grant {
                    Ok(grant) => {
                        log::info!(
                            "step {thread_name} holds GPUs {:?} on this node (GRES indexes, from \
                             slurmctld's job record)",
                            grant.allocation().gpus
                        );
                        write(&spool, &grant);
                    }
                    Err(why) => {
                        log::error!("step {thread_name}: {why}; slurmd charges it no GPU")
                    }
                }
            })
        });
    if let Err(e) = asked {
        log::error!("step {name}: cannot start a thread to ask slurmctld ({e}): no GPU charged");
    }
}

/// The name this node's user database gives `uid` (`getpwuid_r`).
fn user_name(uid: u32) -> Option<String> {
    User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

fn write(spool: &Path, grant: &Grant) {
    if let Err(e) = grant.publish(spool) {
        no_grant(grant, &e.to_string());
    }
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
        };
        let read = StepRecordConfig { read: true };
        let (spool, host) = stepd(Ok(own.clone()));
        publish(&host, read, 0x1000);
        assert_eq!(Grant::read(spool.path(), 7, StepId(0)), Some(own));

        let from_job = |spool| published(spool).map(|g| (g.gres, g.user));
        let root = Some((whole(&[1, 3]), "root".to_string()));
        let (spool, host) = stepd(Err(RecordRefused::NotMeasured(
            "Slurm 26.11.0: not measured".into(),
        )));
        publish(&host, read, 0x1000);
        assert_eq!(from_job(spool.path()), root);

        let (spool, host) = stepd(Err(RecordRefused::Failed("never asked".into())));
        publish(&host, StepRecordConfig { read: false }, 0x1000);
        assert_eq!(from_job(spool.path()), root);
        assert!(!host.record_read.load(Ordering::SeqCst));
    }
}
