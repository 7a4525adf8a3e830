//! At most N of MailProg's summaries wait for accounting at once. Each
//! end-of-job mail is a process of its own (slurmctld runs up to 64 MailProgs, in its
//! 64 mail threads), so the count is kept by the kernel: N slot files in a directory of
//! SlurmUser's, each held by an exclusive `flock` for as long as a summary waits. A process
//! that ends, however it ends (slurmctld's kill at 120 s included), lets go of its slot
//! with its last descriptor; there is no count to leak. A summary that finds every slot
//! taken does not wait: its mail goes at once, with a line saying why it has no summary.
//!
//! The directory is `senergy-mail-slots` in slurmctld's StateSaveLocation, SlurmUser's by
//! Slurm's own rule, where MailProg (run as SlurmUser) writes and a job's owner cannot: an
//! owner who could hold the slots would leave everyone's mail without its summary. It is
//! made 0700, and refused if it is not a directory of this user's that no one else may write.

use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The summaries that may wait at once where the site file sets no `mail_summaries`: an
/// eighth of slurmctld's 64 mail threads (`MAX_MAIL_THREADS`, agent.c, 22.05 to 26.05), so
/// that 56 go on carrying mail at the mailer's pace whatever the waiting ones do.
pub const DEFAULT_SLOTS: u32 = 8;
/// The most: slurmctld never runs more MailProgs at once.
pub const MAX_SLOTS: u32 = 64;
/// The directory's name in StateSaveLocation.
pub const DIR_NAME: &str = "senergy-mail-slots";

/// A slot held: the lock goes with this value (and with the process).
#[derive(Debug)]
pub struct Slot {
    _held: Flock<File>,
}

#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("all {slots} summary slots in {} are held by summaries waiting for accounting (mail_summaries)", dir.display())]
    Busy { slots: u32, dir: PathBuf },
    #[error("cannot keep the summary slots in {}: {why}", dir.display())]
    Unusable { dir: PathBuf, why: String },
}

/// The slots' directory under StateSaveLocation `state_save`.
pub fn dir(state_save: &str) -> PathBuf {
    Path::new(state_save).join(DIR_NAME)
}

/// A free one of the `slots` slots in `dir` (made if absent), without waiting for one.
pub fn take(dir: &Path, slots: u32) -> Result<Slot, SlotError> {
    let unusable = |why: String| SlotError::Unusable {
        dir: dir.to_path_buf(),
        why,
    };
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(unusable(e.to_string())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| unusable(e.to_string()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(unusable(format!(
            "not a directory of uid {me} that only it may write (uid {}, mode {:o})",
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    for k in 0..slots {
        let path = dir.join(format!("slot.{k}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| unusable(format!("{}: {e}", path.display())))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Ok(Slot { _held: held }),
            Err((_, Errno::EWOULDBLOCK)) => continue,
            Err((_, e)) => return Err(unusable(format!("{}: {e}", path.display()))),
        }
    }
    Err(SlotError::Busy {
        slots,
        dir: dir.to_path_buf(),
    })
}

#[cfg(test)]
mod tests;
