//! The one check of a directory slurmd and its slurmstepds trust: SlurmdSpoolDir (the
//! ledger, the step sockets), the grants' directory in it, the doorbell's.
//!
//! slurmd and slurmstepd run as root, and what they read in such a directory decides
//! figures (the ledger, a step's grant), what they write there others could redirect (a
//! name swapped for a link). A directory is trusted when it is a directory itself (a link
//! to one is not: whoever planted it chose where it points), belongs to a user Slurm itself
//! trusts, and no one else holds the permission bits that matter: write for a directory
//! whose files are read (anyone who can write it can rename their own file over any name in
//! it), any access for one that holds a socket (connecting needs only search permission on
//! the directory).
//!
//! The users Slurm trusts: this process's (root in production; the tests' user in tests),
//! root, and SlurmUser, once the daemon or `senergy` has said who that is
//! ([`trust_slurm_user`]). SlurmUser runs slurmctld, which decides every job's user and
//! resources: whoever is SlurmUser already holds the cluster. Debian's and Ubuntu's slurmd
//! packages make SlurmdSpoolDir (`/var/lib/slurm/slurmd`) SlurmUser's (`slurm:slurm`, 0755),
//! so refusing that user would refuse every such node. A job's owner is never one of them
//! (root's jobs aside, which can do anything): a directory they own, or may write, is
//! refused.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Nobody else may write the directory: it holds files that are read.
pub(crate) const NO_WRITE: u32 = 0o022;
/// Nobody else may enter the directory: it holds a socket only its owner may reach.
pub(crate) const NO_ACCESS: u32 = 0o077;

/// No SlurmUser known yet: `uid_t`'s -1, which no user has.
const NO_SLURM_USER: u32 = u32::MAX;

/// SlurmUser's uid, as the daemon's or `senergy`'s slurm.conf says (it can change at a
/// reconfiguration, so the last said is kept).
static SLURM_USER: AtomicU32 = AtomicU32::new(NO_SLURM_USER);

/// Trusts directories of SlurmUser `uid` as this process's own (see the module's text).
pub fn trust_slurm_user(uid: u32) {
    SLURM_USER.store(uid, Ordering::Relaxed);
}

/// The users whose directories are trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustedUsers {
    /// This process's effective uid.
    me: u32,
    /// SlurmUser's uid, where known.
    slurm_user: Option<u32>,
}

impl TrustedUsers {
    /// This process's: its own user, root, and SlurmUser where [`trust_slurm_user`] said.
    fn of_this_process() -> Self {
        let slurm_user = SLURM_USER.load(Ordering::Relaxed);
        Self {
            me: nix::unistd::geteuid().as_raw(),
            slurm_user: (slurm_user != NO_SLURM_USER).then_some(slurm_user),
        }
    }

    fn trust(&self, owner: u32) -> bool {
        owner == self.me || owner == 0 || Some(owner) == self.slurm_user
    }
}

impl std::fmt::Display for TrustedUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "root")?;
        if self.me != 0 {
            write!(f, ", this process's user (uid {})", self.me)?;
        }
        match self.slurm_user {
            Some(uid) if uid != 0 && uid != self.me => write!(f, " or SlurmUser (uid {uid})"),
            Some(_) => Ok(()),
            None => write!(f, " (SlurmUser not known)"),
        }
    }
}

/// Whether `owner` is one of the users Slurm trusts (this process's, root, SlurmUser):
/// the owner a file slurmd takes a secret from must be (`config::read_password_file`).
pub(crate) fn trusted_owner(owner: u32) -> Result<(), TrustedUsers> {
    let users = TrustedUsers::of_this_process();
    if users.trust(owner) {
        Ok(())
    } else {
        Err(users)
    }
}

/// Whether a directory of `owner` with permission bits `mode` is trusted by `users` where
/// no one else may hold any of the bits `refused`.
fn trusted(users: TrustedUsers, owner: u32, mode: u32, refused: u32) -> bool {
    users.trust(owner) && mode & refused == 0
}

/// Why a directory is not trusted.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is not trusted (owner uid {uid}, mode {mode:o}{kind}): the rule is a directory, \
         not a link, owned by {users}, that no other user or group can {what}",
        path.display(),
        what = if *refused == NO_WRITE { "write" } else { "enter" }
    )]
    Untrusted {
        path: PathBuf,
        users: TrustedUsers,
        uid: u32,
        mode: u32,
        /// `", a link"` or `", not a directory"` where it is no directory.
        kind: &'static str,
        refused: u32,
    },
}

/// Whether `path` is a directory (not followed if a link) of a trusted user in which no
/// one else holds any of the bits `refused` ([`NO_WRITE`], [`NO_ACCESS`]).
pub(crate) fn check(path: &Path, refused: u32) -> Result<(), DirError> {
    check_for(TrustedUsers::of_this_process(), path, refused)
}

fn check_for(users: TrustedUsers, path: &Path, refused: u32) -> Result<(), DirError> {
    let meta = fs::symlink_metadata(path).map_err(|source| DirError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.is_dir() && trusted(users, meta.uid(), mode, refused) {
        return Ok(());
    }
    Err(DirError::Untrusted {
        path: path.to_path_buf(),
        users,
        uid: meta.uid(),
        mode,
        kind: if meta.file_type().is_symlink() {
            ", a link"
        } else if meta.is_dir() {
            ""
        } else {
            ", not a directory"
        },
        refused,
    })
}

/// Creates `path` with mode 0700 where missing (a mode the umask can only narrow), then
/// [`check`]s it: one that was there already is trusted only as [`check`] says.
pub(crate) fn create(path: &Path, refused: u32) -> Result<(), DirError> {
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(DirError::Io {
            path: path.to_path_buf(),
            source: e,
        }),
        _ => check(path, refused),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_others_may_write_or_enter_or_a_link_is_not_trusted() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("d");
        create(&dir, NO_ACCESS).expect("created");
        let mode = fs::metadata(&dir).expect("dir").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let chmod = |mode| fs::set_permissions(&dir, fs::Permissions::from_mode(mode));
        chmod(0o755).expect("chmod");
        check(&dir, NO_WRITE).expect("others may read a directory of read files");
        assert!(matches!(
            check(&dir, NO_ACCESS),
            Err(DirError::Untrusted { mode: 0o755, .. })
        ));
        for writable in [0o775, 0o757, 0o1777] {
            chmod(writable).expect("chmod");
            assert!(check(&dir, NO_WRITE).is_err(), "{writable:o}");
        }
        chmod(0o700).expect("chmod");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        let why = check(&link, NO_WRITE).expect_err("a link");
        assert!(why.to_string().contains(", a link)"), "{why}");
        assert!(matches!(
            create(&link, NO_WRITE),
            Err(DirError::Untrusted { .. })
        ));
        let file = tmp.path().join("file");
        fs::write(&file, "").expect("file");
        assert!(check(&file, NO_WRITE).is_err());
        assert!(matches!(
            check(&tmp.path().join("missing"), NO_WRITE),
            Err(DirError::Io { .. })
        ));
    }

    /// A uid no account of a test machine has.
    const SLURM: u32 = 64_123;
    const JOB_OWNER: u32 = 64_124;

    #[test]
    fn root_this_process_and_slurm_user_are_trusted_and_no_one_else() {
        let users = TrustedUsers {
            me: 0,
            slurm_user: Some(SLURM),
        };
        // Debian's /var/lib/slurm/slurmd: slurm:slurm 0755
        assert!(trusted(users, SLURM, 0o755, NO_WRITE));
        assert!(trusted(users, 0, 0o755, NO_WRITE));
        // what SlurmUser's group or anyone else may write is a job owner's to swap
        assert!(!trusted(users, SLURM, 0o775, NO_WRITE));
        assert!(!trusted(users, SLURM, 0o1777, NO_WRITE));
        assert!(!trusted(users, JOB_OWNER, 0o755, NO_WRITE));
        assert!(!trusted(users, SLURM, 0o711, NO_ACCESS));
        let unknown = TrustedUsers {
            me: 0,
            slurm_user: None,
        };
        assert!(!trusted(unknown, SLURM, 0o755, NO_WRITE));
        let tests_user = TrustedUsers {
            me: 1000,
            slurm_user: Some(0),
        };
        assert!(trusted(tests_user, 1000, 0o700, NO_ACCESS));
        assert!(trusted(tests_user, 0, 0o755, NO_WRITE));
        assert!(!trusted(tests_user, 1001, 0o700, NO_WRITE));
    }

    #[test]
    fn the_refusal_names_the_rule() {
        let users = TrustedUsers {
            me: 0,
            slurm_user: Some(SLURM),
        };
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
        let why = check_for(users, tmp.path(), NO_WRITE)
            .expect_err("anyone may write it")
            .to_string();
        assert!(
            why.ends_with(&format!(
                "mode 777): the rule is a directory, not a link, owned by root or SlurmUser \
                 (uid {SLURM}), that no other user or group can write"
            )),
            "{why}"
        );
        let unknown = TrustedUsers {
            me: 1000,
            slurm_user: None,
        };
        assert_eq!(
            unknown.to_string(),
            "root, this process's user (uid 1000) (SlurmUser not known)"
        );
    }

    /// A spool directory as Debian's slurmd package makes it, `slurm:slurm` 0755, where
    /// slurmd runs as root: trusted once SlurmUser is known, and only then (needs root to
    /// give the directory away).
    #[test]
    fn a_spool_dir_of_slurm_user_as_debian_makes_it_is_trusted() {
        if !crate::test_support::root_or_skip("giving a directory to another user") {
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let spool = tmp.path().join("slurmd");
        fs::create_dir(&spool).expect("dir");
        fs::set_permissions(&spool, fs::Permissions::from_mode(0o755)).expect("chmod");
        let chown = |uid| {
            nix::unistd::chown(&spool, Some(nix::unistd::Uid::from_raw(uid)), None).expect("chown")
        };
        chown(SLURM);
        let root = |slurm_user| TrustedUsers { me: 0, slurm_user };
        assert!(check_for(root(None), &spool, NO_WRITE).is_err());
        check_for(root(Some(SLURM)), &spool, NO_WRITE).expect("SlurmUser's spool");
        chown(JOB_OWNER);
        assert!(check_for(root(Some(SLURM)), &spool, NO_WRITE).is_err());
        trust_slurm_user(SLURM);
        assert_eq!(TrustedUsers::of_this_process(), root(Some(SLURM)));
    }
}
