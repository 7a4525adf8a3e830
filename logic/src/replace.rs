//! The one way slurmd writes a file (the ledger, the metrics file): whole, through a
//! temporary file it creates itself, renamed over the old one, every name resolved in a
//! directory held open.
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
//! A path is looked up again at each use: whoever can write the directory's parent, or any
//! ancestor's, can swap a link in for the directory between two writes and make root write,
//! and at slurmd's stop delete, the file's name wherever the link points. A [`Directory`] is
//! opened once, and its files are created, renamed and removed relative to it
//! (`openat`/`renameat`/`unlinkat`): whatever becomes of the path afterwards, root writes
//! only in the directory it opened. [`Directory::open_checked`] also refuses a path with a
//! link anywhere in it and says which of its directories others than root can write.
//!
//! Nothing is synced to disk: what must survive is slurmd, not the node (see
//! [`crate::ledger`]); a file torn by a power cut is refused by its reader.

use std::collections::hash_map::RandomState;
use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use nix::unistd::{Gid, UnlinkatFlags, fchown, geteuid, unlinkat};

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

/// A temporary name for the file `name` in its directory, unpredictable (std's hasher keys
/// come from the operating system's random source, fresh per call), hidden (a leading dot)
/// and ending in `.tmp`, which node_exporter's textfile collector skips (it reads `*.prom`).
fn temporary_name(name: &str) -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    format!(".{name}.{:016x}{SUFFIX}", hasher.finish())
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

/// Why a directory was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DirectoryError {
    #[error(
        "{0} is a symbolic link: name the directory it points to (root would follow a link whoever can write {0}'s parent may change)"
    )]
    Link(PathBuf),
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("{0} is not an absolute path without . or .. in it")]
    NotPlain(PathBuf),
    #[error("cannot open {0}: {1}")]
    Io(PathBuf, io::Error),
}

/// A directory of the path [`Directory::open_checked`] opened that others than root (and
/// this process's user) can write: they can replace what is in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exposure {
    pub path: PathBuf,
    /// The directory the files go in, rather than one of its ancestors.
    pub is_target: bool,
    pub owner: u32,
    pub mode: u32,
}

impl fmt::Display for Exposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (path, mode, owner) = (self.path.display(), self.mode, self.owner);
        if self.is_target {
            write!(
                f,
                "{path} (mode {mode:04o}, owner uid {owner}) can be written by others than root: \
                 they can remove or replace the file slurmd writes there"
            )
        } else {
            write!(
                f,
                "{path} (mode {mode:04o}, owner uid {owner}), a directory above the one slurmd \
                 writes in, can be written by others than root without the sticky bit: they \
                 can move what is below it"
            )
        }
    }
}

/// The bits of a `stat` mode this module reads.
const WRITABLE_BY_OTHERS: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Whether a directory of `stat` lets others than root and `me` change what is in it: as
/// its owner, or by group or other write bits; for an ancestor not where the sticky bit
/// keeps others from moving entries they do not own (`/tmp`), which a rename in the target
/// itself would not stop.
fn exposure(path: &Path, stat: &FileStat, me: u32, is_target: bool) -> Option<Exposure> {
    let mode = stat.st_mode & 0o7777;
    let foreign_owner = stat.st_uid != 0 && stat.st_uid != me;
    let writable = mode & WRITABLE_BY_OTHERS != 0 && (is_target || mode & STICKY == 0);
    (foreign_owner || writable).then(|| Exposure {
        path: path.to_path_buf(),
        is_target,
        owner: stat.st_uid,
        mode,
    })
}

fn is_link(stat: &FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
}

const DIRECTORY: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_CLOEXEC);

/// A directory held open: every file is created, renamed and removed in it by name, so a
/// link swapped in for it or for an ancestor after it was opened changes nothing.
#[derive(Debug)]
pub(crate) struct Directory {
    fd: OwnedFd,
    /// The path it was opened at, for messages.
    path: PathBuf,
}

impl Directory {
    /// The directory `file` is in, as its path names it now (links followed).
    fn of(file: &Path) -> io::Result<(Self, &str)> {
        let (Some(dir), Some(name)) = (file.parent(), file.file_name().and_then(OsStr::to_str))
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the file name is not UTF-8 text or is missing",
            ));
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let fd = openat(AT_FDCWD, dir, DIRECTORY, Mode::empty())?;
        let path = dir.to_path_buf();
        Ok((Self { fd, path }, name))
    }

    /// Opens `path`, an absolute directory, walking down from `/` without following a link
    /// (`O_DIRECTORY | O_NOFOLLOW` at each step): a link anywhere on the way is refused.
    /// Also says which of the directories on the way others can write (see [`Exposure`]).
    pub(crate) fn open_checked(path: &Path) -> Result<(Self, Vec<Exposure>), DirectoryError> {
        let io = |at: &Path, e: Errno| DirectoryError::Io(at.to_path_buf(), e.into());
        let me = geteuid().as_raw();
        let mut at = PathBuf::from("/");
        let mut fd = openat(AT_FDCWD, "/", DIRECTORY, Mode::empty()).map_err(|e| io(&at, e))?;
        let mut exposed = Vec::new();
        let mut components = path.components();
        if components.next() != Some(Component::RootDir) {
            return Err(DirectoryError::NotPlain(path.to_path_buf()));
        }
        for component in components {
            let Component::Normal(name) = component else {
                return Err(DirectoryError::NotPlain(path.to_path_buf()));
            };
            // `at` was a directory we passed through: an ancestor
            let stat = fstat(&fd).map_err(|e| io(&at, e))?;
            exposed.extend(exposure(&at, &stat, me, false));
            let next = openat(&fd, name, DIRECTORY | OFlag::O_NOFOLLOW, Mode::empty());
            at.push(name);
            fd = match next {
                Ok(next) => next,
                // O_NOFOLLOW on a link: ELOOP, or ENOTDIR where O_DIRECTORY is checked first
                Err(e @ (Errno::ELOOP | Errno::ENOTDIR)) => {
                    let linked =
                        fstatat(&fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|s| is_link(&s));
                    return Err(if linked {
                        DirectoryError::Link(at)
                    } else if e == Errno::ENOTDIR {
                        DirectoryError::NotADirectory(at)
                    } else {
                        io(&at, e)
                    });
                }
                Err(e) => return Err(io(&at, e)),
            };
        }
        let stat = fstat(&fd).map_err(|e| io(&at, e))?;
        exposed.extend(exposure(&at, &stat, me, true));
        Ok((Self { fd, path: at }, exposed))
    }

    /// The path it was opened at.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces its file `name` with `bytes`, readable as `access` says, through a
    /// temporary file created exclusively beside it (never through a link: see the
    /// module's comment).
    pub(crate) fn replace(&self, name: &str, bytes: &[u8], access: Access) -> io::Result<()> {
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..TRIES {
            let tmp = temporary_name(name);
            // O_CREAT | O_EXCL: a name that exists, a link included, is refused
            let flags = OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            let mut file = match openat(
                &self.fd,
                tmp.as_str(),
                flags,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => File::from(fd),
                Err(Errno::EEXIST) => {
                    last = Errno::EEXIST.into();
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let written = file
                .write_all(bytes)
                .and_then(|()| match access.group {
                    Some(gid) => {
                        fchown(&file, None, Some(Gid::from_raw(gid))).map_err(io::Error::from)
                    }
                    None => Ok(()),
                })
                // after the chown, which may clear bits; exactly the mode asked, whatever the umask
                .and_then(|()| file.set_permissions(fs::Permissions::from_mode(access.mode)))
                .and_then(|()| {
                    renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(io::Error::from)
                });
            if written.is_err() {
                // ours: created exclusively above (unlink removes a name, never follows it)
                let _ = self.remove(&tmp);
            }
            return written;
        }
        Err(last)
    }

    /// Removes its entry `name` (a link is removed, not what it points to).
    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir).map_err(io::Error::from)
    }

    /// Removes the temporary files that a writer of its file `name` killed between create
    /// and rename left in it: names of [`temporary_name`]'s pattern that are regular files
    /// of this process's user (a link or another's file is left alone). Called when a
    /// writer starts, so a crash leaves at most one until the next start.
    pub(crate) fn sweep(&self, name: &str) {
        let Ok(mut entries) = Dir::openat(&self.fd, ".", DIRECTORY, Mode::empty()) else {
            return;
        };
        let me = geteuid().as_raw();
        let leftovers: Vec<String> = entries
            .iter()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str().ok().map(str::to_string))
            .filter(|candidate| is_temporary_of(candidate, name))
            .collect();
        for candidate in leftovers {
            // lstat: a link is seen as a link, not as what it points to
            let ours = fstatat(&self.fd, candidate.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|s| {
                    SFlag::from_bits_truncate(s.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
                        && s.st_uid == me
                });
            if ours {
                let _ = self.remove(&candidate);
            }
        }
    }
}

/// Replaces `path` with `bytes` in the directory its path names now ([`Directory::replace`]).
pub(crate) fn replace(path: &Path, bytes: &[u8], access: Access) -> io::Result<()> {
    let (dir, name) = Directory::of(path)?;
    dir.replace(name, bytes, access)
}

/// Removes what a killed writer of `path` left beside it ([`Directory::sweep`]).
pub(crate) fn sweep(path: &Path) {
    if let Ok((dir, name)) = Directory::of(path) {
        dir.sweep(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, symlink};

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

    /// The directories on the way that others can write are named: the target when group
    /// or others can write it (node_exporter's group often can), an ancestor only without
    /// the sticky bit; a file on the way is no directory, and `..` is refused.
    #[test]
    fn the_directories_others_can_write_are_named() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let open = tmp.path().join("open");
        let sticky = open.join("sticky");
        let target = sticky.join("textfile");
        fs::create_dir_all(&target).expect("dirs");
        for (dir, mode) in [(&open, 0o777), (&sticky, 0o1777), (&target, 0o775)] {
            fs::set_permissions(dir, fs::Permissions::from_mode(mode)).expect("chmod");
        }
        let (dir, exposed) = Directory::open_checked(&target).expect("opened");
        assert_eq!(dir.path(), target);
        let ours: Vec<_> = exposed
            .iter()
            .filter(|e| e.path.starts_with(tmp.path()))
            .map(|e| (e.path.clone(), e.is_target, e.mode))
            .collect();
        assert_eq!(
            ours,
            [(open.clone(), false, 0o777), (target.clone(), true, 0o775)]
        );
        assert!(
            exposed[exposed.len() - 1]
                .to_string()
                .contains("others than root")
        );
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).expect("chmod");
        let (_, exposed) = Directory::open_checked(&target).expect("opened");
        assert!(!exposed.iter().any(|e| e.is_target), "{exposed:?}");
        let file = target.join("energy.prom");
        fs::write(&file, "").expect("file");
        assert!(matches!(
            Directory::open_checked(&file),
            Err(DirectoryError::NotADirectory(p)) if p == file
        ));
        assert!(matches!(
            Directory::open_checked(&target.join("..")),
            Err(DirectoryError::NotPlain(_))
        ));
    }
}
