//! The one check of a directory slurmd and its slurmstepds trust: SlurmdSpoolDir (the
//! ledger, the step sockets), the grants' directory in it, the doorbell's.
//!
//! slurmd and slurmstepd run as root, and what they read in such a directory decides
//! figures (the ledger, a step's grant), what they write there others could redirect (a
//! name swapped for a link). A directory is trusted when it is a directory itself (a link
//! to one is not: whoever planted it chose where it points), belongs to this process's
//! user (root in production; the tests' user in tests), and no one else holds the
//! permission bits that matter: write for a directory whose files are read (anyone who can
//! write it can rename their own file over any name in it), any access for one that holds
//! a socket (connecting needs only search permission on the directory).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Nobody else may write the directory: it holds files that are read.
pub(crate) const NO_WRITE: u32 = 0o022;
/// Nobody else may enter the directory: it holds a socket only its owner may reach.
pub(crate) const NO_ACCESS: u32 = 0o077;

/// Why a directory is not trusted.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is a link, or not a directory of slurmd's user (uid {me}) that others cannot \
         {what} (owner uid {uid}, mode {mode:o})",
        path.display(),
        what = if *refused == NO_WRITE { "write" } else { "enter" }
    )]
    Untrusted {
        path: PathBuf,
        me: u32,
        uid: u32,
        mode: u32,
        refused: u32,
    },
}

/// Whether `path` is a directory (not followed if a link) of this process's user in which
/// no one else holds any of the bits `refused` ([`NO_WRITE`], [`NO_ACCESS`]).
pub(crate) fn check(path: &Path, refused: u32) -> Result<(), DirError> {
    let meta = fs::symlink_metadata(path).map_err(|source| DirError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.permissions().mode() & 0o7777;
    if meta.is_dir() && meta.uid() == me && mode & refused == 0 {
        return Ok(());
    }
    Err(DirError::Untrusted {
        path: path.to_path_buf(),
        me,
        uid: meta.uid(),
        mode,
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
        assert!(why.to_string().contains("is a link"), "{why}");
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
}
