//! What Slurm granted a step on this node, from Slurm's own step record: its user and the
//! GPUs, shards and MPS shares it holds, as its slurmstepd reads them at
//! `ENERGY_DATA_STEP_PTR` (the record `slurmstepd` builds from the launch credential
//! slurmctld signed), and hands to slurmd through a file only root can write.
//!
//! Nothing here comes from a task: a job's owner can exec with any environment, and a
//! task's `SLURM_JOB_GPUS` or `CUDA_VISIBLE_DEVICES` is theirs to write. The step record
//! is Slurm's: the same on every release and in every configuration (cgroup v1 or v2,
//! with or without `ConstrainDevices`), since it is what Slurm's own GRES plugins
//! constrain and fill the tasks' environment from.
//!
//! slurmstepd runs as root and writes `<SlurmdSpoolDir>/energy-grants/<job>.<step>`;
//! slurmd reads it when it first meets the step and removes it once the step has been
//! gone a while. The directory is created by root with mode 0700, and a directory or file
//! anyone else could have written is not trusted.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::gres::Allocation;
use super::procs::{PROC_ROOT, Procs};
use super::{StepId, StepKey};
use crate::replace::{self, Access};
use crate::trusted_dir::{self, DirError, NO_WRITE};

/// The directory of grants in SlurmdSpoolDir.
const DIR: &str = "energy-grants";

/// The suffix of a job's grant on this node (`<job>.job`), which names no step.
const JOB: &str = "job";

/// A grant is read once, when slurmd meets its step; one much larger is not Slurm's.
const MAX_BYTES: u64 = 64 * 1024;

/// A grant stays this long after its step is gone: slurmstepd writes it before its step's
/// socket appears, and slurmd may meet the step late.
pub(crate) const KEPT_AFTER_STEP: Duration = Duration::from_secs(60);

/// One kind of GRES a step holds on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GresHeld {
    /// `gpu`, `shard` or `mps`.
    pub name: String,
    /// How many on this node (GPUs, shards, MPS units).
    pub count: u64,
    /// The GRES indexes of the GPUs they are on (Slurm's bitmap for this node).
    pub indexes: Vec<u32>,
}

/// A job's owner, as Slurm's step record says (a [`Grant`]): never what its tasks'
/// environment says, which is the owner's to write. The record names no account or
/// partition.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Owner {
    pub user: String,
}

/// What Slurm granted one step on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The job's id.
    pub job: u32,
    /// The step's id within the job.
    pub step: u32,
    /// The step's user, as Slurm launched it.
    pub uid: u32,
    /// The step's user's name.
    pub user: String,
    /// The GPUs (gres) the step holds on this node.
    pub gres: Vec<GresHeld>,
    /// The slurmstepd that wrote it: slurmd checks that one process is alive instead of
    /// searching all of /proc for it ([`crate::Scans`]). `None` in a job's grant, and in one
    /// a plugin of before wrote (its step is then searched for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stepd: Option<StepdId>,
}

/// One process, as a pid given again later cannot pose as it: its pid and when it started
/// (clock ticks after boot, `/proc/<pid>/stat`'s 22nd field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepdId {
    /// Its process id.
    pub pid: u32,
    /// When it started, in clock ticks after boot.
    pub start: u64,
}

impl StepdId {
    /// The calling process; `None` where /proc does not say when it started.
    pub fn own() -> Option<Self> {
        let pid = std::process::id();
        let start = Procs::from_path(Path::new(PROC_ROOT)).start_ticks(pid)?;
        Some(Self { pid, start })
    }

    /// Whether the process is still alive under `procs`, as the same process (its start
    /// unchanged), and runs as real uid `uid` (slurmd's user, as slurmstepd does).
    pub fn alive(self, procs: &Procs, uid: u32) -> bool {
        procs.start_ticks(self.pid) == Some(self.start) && procs.uid(self.pid) == Some(uid)
    }
}

/// Why a grant could not be published.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: no step's GPUs are published there")]
    Untrusted(#[from] DirError),
}

impl Grant {
    /// The step's id, typed.
    pub fn step_id(&self) -> StepId {
        StepId(self.step)
    }

    /// The GPUs it holds and how much of each: whole GPUs where it holds `gpu`, else the
    /// GPUs under its shards or MPS share, with their count as its shares.
    pub fn allocation(&self) -> Allocation {
        let held = |name: &str| self.gres.iter().find(|g| g.name == name);
        if let Some(gpu) = held("gpu").filter(|g| !g.indexes.is_empty()) {
            return Allocation {
                gpus: gpu.indexes.clone(),
                shares: None,
            };
        }
        match held("shard").or_else(|| held("mps")) {
            Some(shared) if !shared.indexes.is_empty() && shared.count > 0 => Allocation {
                gpus: shared.indexes.clone(),
                shares: Some(shared.count as f64),
            },
            _ => Allocation::default(),
        }
    }

    fn file_name(job: u32, step: StepId) -> String {
        format!("{job}.{}", step.name())
    }

    /// The name of a job's grant on this node from slurmctld's job record: no step's.
    fn job_file_name(job: u32) -> String {
        format!("{job}.{JOB}")
    }

    /// Writes the grant for slurmd, replacing any earlier one of the same step, through
    /// the one way slurmd's files are written (`crate::replace`: never through a link).
    pub fn publish(&self, spool: &Path) -> Result<(), GrantError> {
        self.write(spool, &Self::file_name(self.job, self.step_id()))
    }

    /// Keeps it as its job's grant on this node, for the job's later steps (a grant from
    /// slurmctld's job record, `super::job_record`): slurmd never reads it as a step's.
    pub fn publish_for_job(&self, spool: &Path) -> Result<(), GrantError> {
        self.write(spool, &Self::job_file_name(self.job))
    }

    fn write(&self, spool: &Path, name: &str) -> Result<(), GrantError> {
        let dir = grants_dir(spool, true)?;
        let target = dir.join(name);
        let io = |source| GrantError::Io {
            path: target.clone(),
            source,
        };
        let text = serde_json::to_vec(self).map_err(|e| io(e.into()))?;
        let access = Access {
            mode: 0o600,
            group: None,
        };
        replace::replace(&target, &text, access).map_err(io)
    }

    /// The grant of `step` of `job`, if its slurmstepd published one in a directory only
    /// root could write; `None` otherwise (not yet, or not trusted: logged by the caller
    /// when it matters).
    pub fn read(spool: &Path, job: u32, step: StepId) -> Option<Self> {
        Self::read_file(spool, &Self::file_name(job, step))
            .filter(|grant| grant.job == job && grant.step_id() == step)
    }

    /// `job`'s grant on this node kept by [`Grant::publish_for_job`], if any.
    pub fn read_for_job(spool: &Path, job: u32) -> Option<Self> {
        Self::read_file(spool, &Self::job_file_name(job)).filter(|grant| grant.job == job)
    }

    fn read_file(spool: &Path, name: &str) -> Option<Self> {
        let dir = grants_dir(spool, false).ok()?;
        let path = dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() {
            return None;
        }
        let mut text = Vec::new();
        file.take(MAX_BYTES).read_to_end(&mut text).ok()?;
        serde_json::from_slice(&text)
            .inspect_err(|e| log::error!("{}: not a step's grant: {e}", path.display()))
            .ok()
    }

    /// Removes the grants of steps not in `present` that were written more than
    /// `KEPT_AFTER_STEP` ago, jobs' grants once no step of the job is present, and
    /// temporary files left by a slurmstepd that died writing one (their names are no
    /// step's).
    pub fn remove_ended(spool: &Path, present: &HashSet<StepKey>) {
        let Ok(dir) = grants_dir(spool, false) else {
            return;
        };
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let live = match name.split_once('.') {
                Some((job, JOB)) => job
                    .parse::<u32>()
                    .is_ok_and(|job| present.iter().any(|k| k.job == job)),
                Some((job, step)) => job
                    .parse()
                    .ok()
                    .zip(StepId::parse(step))
                    .is_some_and(|(job, step)| present.contains(&StepKey { job, step })),
                None => false,
            };
            let old = entry
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > KEPT_AFTER_STEP);
            if !live && old {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// The grants' directory in `spool`, created (mode 0700) when `create` and missing; an
/// error unless it is a directory of this process's user that nobody else can write.
fn grants_dir(spool: &Path, create: bool) -> Result<PathBuf, GrantError> {
    let path = spool.join(DIR);
    if create {
        trusted_dir::create(&path, NO_WRITE)?;
    } else {
        trusted_dir::check(&path, NO_WRITE)?;
    }
    Ok(path)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::PermissionsExt;
    use std::time::SystemTime;

    /// A grant of GPU `index` whole.
    pub(crate) fn whole(job: u32, step: StepId, index: u32) -> Grant {
        grant(job, step, vec![held("gpu", 1, &[index])])
    }

    /// A grant of `count` shards of GPU `index`.
    pub(crate) fn shards(job: u32, step: StepId, count: u64, index: u32) -> Grant {
        grant(job, step, vec![held("shard", count, &[index])])
    }

    /// A grant of `gres` to alice's step.
    pub(crate) fn grant(job: u32, step: StepId, gres: Vec<GresHeld>) -> Grant {
        Grant {
            job,
            step: step.0,
            uid: 1000,
            user: "alice".into(),
            gres,
            stepd: None,
        }
    }

    pub(crate) fn held(name: &str, count: u64, indexes: &[u32]) -> GresHeld {
        GresHeld {
            name: name.into(),
            count,
            indexes: indexes.to_vec(),
        }
    }

    #[test]
    fn a_grant_names_whole_gpus_or_the_gpus_under_its_shares() {
        let whole = grant(7, StepId(0), vec![held("gpu", 2, &[0, 3])]);
        assert_eq!(
            whole.allocation(),
            Allocation {
                gpus: vec![0, 3],
                shares: None
            }
        );
        let shards = grant(7, StepId(0), vec![held("shard", 4, &[1])]);
        assert_eq!(
            shards.allocation(),
            Allocation {
                gpus: vec![1],
                shares: Some(4.0)
            }
        );
        let mps = grant(7, StepId::BATCH, vec![held("mps", 200, &[2])]);
        assert_eq!(mps.allocation().shares, Some(200.0));
        assert_eq!(
            grant(7, StepId(1), vec![]).allocation(),
            Allocation::default()
        );
    }

    #[test]
    fn grants_are_read_back_only_from_a_directory_nobody_else_writes() {
        let spool = tempfile::tempdir().expect("tempdir");
        let g = grant(42, StepId::BATCH, vec![held("gpu", 1, &[1])]);
        g.publish(spool.path()).expect("publish");
        assert_eq!(
            Grant::read(spool.path(), 42, StepId::BATCH),
            Some(g.clone())
        );
        assert_eq!(Grant::read(spool.path(), 42, StepId(0)), None);
        let dir = spool.path().join(DIR);
        let mode = fs::metadata(&dir).expect("dir").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // a group- or world-writable directory could hold anyone's file
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).expect("chmod");
        assert_eq!(Grant::read(spool.path(), 42, StepId::BATCH), None);
        assert!(matches!(
            g.publish(spool.path()),
            Err(GrantError::Untrusted(DirError::Untrusted { .. }))
        ));
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        // a planted link is never followed, for reading or writing
        let outside = spool.path().join("outside");
        fs::write(&outside, "keep").expect("write");
        let target = dir.join("43.0");
        std::os::unix::fs::symlink(&outside, &target).expect("symlink");
        assert_eq!(Grant::read(spool.path(), 43, StepId(0)), None);
        grant(43, StepId(0), vec![])
            .publish(spool.path())
            .expect("publish");
        assert_eq!(fs::read_to_string(&outside).expect("read"), "keep");
        assert!(Grant::read(spool.path(), 43, StepId(0)).is_some());
    }

    #[test]
    fn ended_steps_grants_are_removed_after_a_while() {
        let spool = tempfile::tempdir().expect("tempdir");
        for step in [StepId(0), StepId(1)] {
            grant(5, step, vec![])
                .publish(spool.path())
                .expect("publish");
        }
        // jobs' grants from slurmctld's record, of a job still here and of one gone
        for job in [5, 6] {
            grant(job, StepId(0), vec![])
                .publish_for_job(spool.path())
                .expect("publish");
        }
        assert_eq!(Grant::read(spool.path(), 6, StepId(0)), None);
        let present: HashSet<StepKey> = [StepKey::new(5, StepId(0))].into_iter().collect();
        // young: kept even though step 1 is gone
        Grant::remove_ended(spool.path(), &present);
        assert!(Grant::read(spool.path(), 5, StepId(1)).is_some());
        let old = SystemTime::now() - KEPT_AFTER_STEP - Duration::from_secs(1);
        for step in ["5.0", "5.1", "5.job", "6.job"] {
            File::options()
                .write(true)
                .open(spool.path().join(DIR).join(step))
                .and_then(|f| f.set_modified(old))
                .expect("age");
        }
        Grant::remove_ended(spool.path(), &present);
        assert!(Grant::read(spool.path(), 5, StepId(0)).is_some());
        assert!(Grant::read(spool.path(), 5, StepId(1)).is_none());
        assert!(Grant::read_for_job(spool.path(), 5).is_some());
        assert!(Grant::read_for_job(spool.path(), 6).is_none());
    }
}
