//! The one way slurmd writes a file (the ledger, the metrics file): whole, through a
//! temporary file it creates itself, renamed over the old one.
//!
//! slurmd runs as root and writes into directories others may write (node_exporter's
//! textfile directory often belongs to node_exporter's user). A temporary file at a fixed
//! name (`<file>.tmp`) opened with a plain create follows a symbolic link planted there and
//! makes root overwrite whatever it points to. So the temporary file has a name no one can
//! guess, is created with `O_CREAT | O_EXCL | O_NOFOLLOW` (an existing name, a link
//! included, is refused, never opened), gets its mode and group on the open descriptor, and
//! is renamed over the target (a rename replaces a link at the target itself, never what
//! it points to). A reader sees the whole old file or the whole new one.
//!
//! Nothing is synced to disk: what must survive is slurmd, not the node (see
//! [`crate::ledger`]); a file torn by a power cut is refused by its reader.

use std::collections::hash_map::RandomState;
use std::fs::{self, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::unistd::{Gid, fchown, geteuid};

/// Who may read a file slurmd writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Its permission bits, set exactly (not masked by slurmd's umask).
    pub mode: u32,
    /// Its group, when not slurmd's.
    pub group: Option<u32>,
}

/// How many names are tried when one exists already: a name is 64 random bits, so a
/// second try is needed only when someone created files at names they could not guess.
const TRIES: usize = 8;
const SUFFIX: &str = ".tmp";

/// A temporary name for `file` in its directory, unpredictable (std's hasher keys come
/// from the operating system's random source, fresh per call), hidden (a leading dot) and
/// ending in `.tmp`, which node_exporter's textfile collector skips (it reads `*.prom`).
fn temporary_name(file: &Path) -> Option<PathBuf> {
    let name = file.file_name()?.to_str()?;
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    Some(file.with_file_name(format!(".{name}.{:016x}{SUFFIX}", hasher.finish())))
}

/// Whether `candidate` is a name [`temporary_name`] makes for a file named `name`.
fn is_temporary_of(candidate: &str, name: &str) -> bool {
    candidate
        .strip_prefix('.')
        .and_then(|c| c.strip_prefix(name))
        .and_then(|c| c.strip_prefix('.'))
        .and_then(|c| c.strip_suffix(SUFFIX))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Replaces `path` with `bytes`, readable as `access` says, through a temporary file
/// created exclusively beside it (never through a link: see the module's comment).
pub(crate) fn replace(path: &Path, bytes: &[u8], access: Access) -> io::Result<()> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the file name is not UTF-8 text or is missing",
        )
    };
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..TRIES {
        let tmp = temporary_name(path).ok_or_else(invalid)?;
        let file = OpenOptions::new()
            .write(true)
            // O_CREAT | O_EXCL: a name that exists, a link included, is refused
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&tmp);
        let mut file = match file {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                last = e;
                continue;
            }
            Err(e) => return Err(e),
        };
        let written = file
            .write_all(bytes)
            .and_then(|()| match access.group {
                Some(gid) => fchown(&file, None, Some(Gid::from_raw(gid))).map_err(io::Error::from),
                None => Ok(()),
            })
            // after the chown, which may clear bits; exactly the mode asked, whatever the umask
            .and_then(|()| file.set_permissions(fs::Permissions::from_mode(access.mode)))
            .and_then(|()| fs::rename(&tmp, path));
        if written.is_err() {
            // ours: created exclusively above (unlink removes a name, never follows it)
            let _ = fs::remove_file(&tmp);
        }
        return written;
    }
    Err(last)
}

/// Removes the temporary files that a writer of `path` killed between create and rename
/// left beside it: names of [`temporary_name`]'s pattern that are regular files of this
/// process's user (a link or another's file is left alone). Called when a writer starts,
/// so a crash leaves at most one until the next start.
pub(crate) fn sweep(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let me = geteuid().as_raw();
    for entry in entries.flatten() {
        let candidate = entry.file_name();
        if !candidate.to_str().is_some_and(|c| is_temporary_of(c, name)) {
            continue;
        }
        // lstat: a link is seen as a link, not as what it points to
        let ours = fs::symlink_metadata(entry.path())
            .is_ok_and(|m| m.file_type().is_file() && m.uid() == me);
        if ours {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const READABLE: Access = Access {
        mode: 0o644,
        group: None,
    };

    /// Links planted at the old fixed temporary names and at names of the new pattern
    /// (as if guessed) point outside the directory: the file outside is untouched, and
    /// the target gets the text.
    #[test]
    fn a_planted_link_is_never_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, outside) = (tmp.path().join("textfile"), tmp.path().join("shadow"));
        fs::create_dir(&dir).expect("dir");
        fs::write(&outside, "root:secret\n").expect("outside");
        let target = dir.join("energy.prom");
        let mut planted = vec![
            dir.join("energy.prom.tmp"),
            dir.join("energy.prom.new"),
            dir.join(".energy.prom.tmp"),
        ];
        planted.extend(
            ["0000000000000000", "ffffffffffffffff", "0123456789abcdef"]
                .iter()
                .map(|hex| dir.join(format!(".energy.prom.{hex}.tmp"))),
        );
        for link in &planted {
            symlink(&outside, link).expect("link");
        }
        for round in 0..50 {
            replace(&target, format!("a {round}\n").as_bytes(), READABLE).expect("replaced");
        }
        assert_eq!(fs::read_to_string(&target).expect("target"), "a 49\n");
        assert_eq!(
            fs::read_to_string(&outside).expect("outside"),
            "root:secret\n"
        );
        let mode = fs::metadata(&target).expect("target").permissions().mode();
        assert_eq!(mode & 0o7777, 0o644);
        // a link planted at the target itself is replaced, not written through
        fs::remove_file(&target).expect("target");
        symlink(&outside, &target).expect("link");
        replace(&target, b"a 50\n", READABLE).expect("replaced");
        assert!(fs::symlink_metadata(&target).expect("target").is_file());
        assert_eq!(
            fs::read_to_string(&outside).expect("outside"),
            "root:secret\n"
        );
        // nothing of ours is left beside it; the planted links are still there
        let left: Vec<String> = fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "energy.prom")
            .collect();
        assert_eq!(left.len(), planted.len(), "{left:?}");
    }

    #[test]
    fn the_mode_is_exact_and_a_group_is_set() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let target = tmp.path().join("ledger.json");
        replace(
            &target,
            b"{}",
            Access {
                mode: 0o600,
                group: None,
            },
        )
        .expect("replaced");
        let meta = fs::metadata(&target).expect("target");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        // this process's own group: allowed to any user
        let gid = nix::unistd::getegid().as_raw();
        let access = Access {
            mode: 0o640,
            group: Some(gid),
        };
        replace(&target, b"{}", access).expect("replaced");
        let meta = fs::metadata(&target).expect("target");
        assert_eq!(
            (meta.permissions().mode() & 0o7777, meta.gid()),
            (0o640, gid)
        );
    }

    /// A crashed writer's temporary files go at the next start; links, others' names and
    /// other files' temporaries stay.
    #[test]
    fn leftovers_of_a_crash_are_swept_links_are_not() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let target = tmp.path().join("energy.prom");
        let outside = tmp.path().join("outside");
        fs::write(&outside, "keep").expect("outside");
        let leftover = tmp.path().join(".energy.prom.00112233aabbccdd.tmp");
        fs::write(&leftover, "half a fi").expect("leftover");
        let link = tmp.path().join(".energy.prom.44556677aabbccdd.tmp");
        symlink(&outside, &link).expect("link");
        let others = [
            tmp.path()
                .join(".energy.rust_gpu.prom.00112233aabbccdd.tmp"),
            tmp.path().join(".energy.prom.short.tmp"),
            tmp.path().join("energy.prom.tmp"),
        ];
        for other in &others {
            fs::write(other, "x").expect("other");
        }
        sweep(&target);
        assert!(!leftover.exists());
        assert!(fs::symlink_metadata(&link).is_ok(), "the link stays");
        assert_eq!(fs::read_to_string(&outside).expect("outside"), "keep");
        for other in &others {
            assert!(other.exists(), "{}", other.display());
        }
    }
}
