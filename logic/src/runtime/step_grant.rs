//! slurmstepd's `ENERGY_DATA_STEP_PTR`: what its step was granted on this node, published
//! for slurmd ([`Grant::publish`]). From Slurm's step record where it is read; where it is
//! refused (a release whose layout was never measured, a record that failed its checks)
//! or not to be read (`EnergyStepRecord=no`), from slurmctld's record of the job
//! ([`job_record`]), asked on a thread of its own: Slurm's call never waits for slurmctld.

use std::path::Path;

use nix::unistd::{Uid, User};

use super::Host;
use crate::attribution::grant::Grant;
use crate::attribution::job_record::{self, RETRY_AFTER, STEP_RECORD_KEY, StepRecordConfig};
use crate::guard::guard;

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
            Err(why) => {
                log::error!("{why}");
                "Slurm's step record is refused".to_string()
            }
        },
        false => format!("{STEP_RECORD_KEY}=no: Slurm's step record is not read"),
    };
    let Some((job, step)) = host.own_step() else {
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
