//! When a grant refused for permission is tried again: slurmstepd's privilege drop (who
//! this process is before and after a try, [`Identity`]) and the loop that tries until the
//! grant is written, given up, or the plugin closes ([`until_written`]). Apart from how a
//! grant is published so that the rule for a retry, and its tests, read in one place.

use std::time::{Duration, Instant};

use nix::unistd::ResUid;

use super::Stop;
use crate::attribution::grant::GrantError;
use crate::trusted_dir::DirError;

/// Refusals in a row, each begun and ended as root, after which a grant refused for
/// permission is given up: not a privilege drop (one that began and ended within a try
/// would need it to recur this many times).
const ROOT_REFUSALS: u32 = 4;

/// Who this process is, as far as writing root's directory goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Identity {
    /// Effective root.
    Root,
    /// Root dropped to `euid` for a while (slurmstepd's `seteuid` around the step's I/O
    /// files): its real or saved uid is root's, so it will be root again.
    Dropped { euid: u32 },
    /// A user who cannot be root again (slurmd run as a user, the tests' user).
    User,
}

impl Identity {
    fn of(ids: ResUid) -> Self {
        match (
            ids.effective.is_root(),
            ids.real.is_root() || ids.saved.is_root(),
        ) {
            (true, _) => Self::Root,
            (false, true) => Self::Dropped {
                euid: ids.effective.as_raw(),
            },
            (false, false) => Self::User,
        }
    }

    /// This process's, now.
    pub(super) fn now() -> Self {
        nix::unistd::getresuid().map_or(Self::User, Self::of)
    }
}

/// Whether `error` is a refusal for permission (`EACCES`, `EPERM`): what a grant meets
/// when written as a user into root's 0700 directory, or its creation in SlurmdSpoolDir.
pub(super) fn for_permission(error: &GrantError) -> bool {
    let source = match error {
        GrantError::Io { source, .. } => source,
        GrantError::Untrusted(DirError::Io { source, .. }) => source,
        GrantError::Untrusted(DirError::Untrusted { .. }) => return false,
    };
    source.kind() == std::io::ErrorKind::PermissionDenied
}

/// What follows a refused try, by who this process was when it began (`before`) and
/// when it ended (`after`), and how many refusals in a row before it began and ended as
/// root (`as_root`, counted here).
fn retried(error: &GrantError, before: Identity, after: Identity, as_root: &mut u32) -> bool {
    if !for_permission(error) || before == Identity::User || after == Identity::User {
        return false;
    }
    if before == Identity::Root && after == Identity::Root {
        *as_root += 1;
        return *as_root < ROOT_REFUSALS;
    }
    *as_root = 0;
    true
}

/// Tries `write` until it succeeds, fails for anything but a privilege drop
/// ([`retried`]), or `stop` (fini), `every` apart; `identity` says who this process is.
/// A wait is logged once as `step`'s, and its end once.
pub(super) fn until_written(
    step: &str,
    stop: &Stop,
    every: Duration,
    identity: impl Fn() -> Identity,
    mut write: impl FnMut() -> Result<(), GrantError>,
) -> Result<(), GrantError> {
    let mut waited: Option<Instant> = None;
    let mut as_root = 0;
    loop {
        let before = identity();
        let error = match write() {
            Ok(()) => {
                if let Some(since) = waited {
                    log::info!(
                        "step {step}: its grant is written, {:.1} s after its first refusal",
                        since.elapsed().as_secs_f64()
                    );
                }
                return Ok(());
            }
            Err(e) => e,
        };
        let after = identity();
        if !retried(&error, before, after, &mut as_root) {
            return Err(error);
        }
        if waited.is_none() {
            let uid = match (before, after) {
                (Identity::Dropped { euid }, _) | (_, Identity::Dropped { euid }) => euid,
                _ => 0,
            };
            log::warn!(
                "step {step}: its grant cannot be written while slurmstepd runs as uid {uid} \
                 (it opens the step's --output, --error or --input as its user: {error}); \
                 tried again every {} ms until written",
                every.as_millis()
            );
            waited = Some(Instant::now());
        }
        if stop.wait(every) {
            return Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use nix::unistd::Uid;

    use super::*;

    fn refused(kind: std::io::ErrorKind) -> GrantError {
        GrantError::Io {
            path: PathBuf::from("/spool/energy-grants/7.0"),
            source: kind.into(),
        }
    }

    const DROPPED: Identity = Identity::Dropped { euid: 1000 };

    #[test]
    fn who_the_process_is_comes_from_its_three_uids() {
        let ids = |real, effective, saved| ResUid {
            real: Uid::from_raw(real),
            effective: Uid::from_raw(effective),
            saved: Uid::from_raw(saved),
        };
        assert_eq!(Identity::of(ids(0, 0, 0)), Identity::Root);
        // slurmstepd's seteuid around a step's I/O files
        assert_eq!(Identity::of(ids(0, 1000, 0)), DROPPED);
        assert_eq!(Identity::of(ids(1000, 1000, 0)), DROPPED);
        // never root again
        assert_eq!(Identity::of(ids(1000, 1000, 1000)), Identity::User);
    }

    /// Refusals for permission are tried again while root is dropped, and as root only a
    /// few times in a row; anything else, or a user who cannot be root, never.
    #[test]
    fn only_a_refusal_for_permission_while_root_is_dropped_is_tried_again() {
        use std::io::ErrorKind::{NotFound, PermissionDenied, StorageFull};
        let mut as_root = 0;
        let eacces = refused(PermissionDenied);
        let eperm = refused(std::io::Error::from_raw_os_error(libc::EPERM).kind());
        assert!(retried(&eacces, DROPPED, DROPPED, &mut as_root));
        assert!(retried(&eperm, DROPPED, DROPPED, &mut as_root));
        // the drop began or ended within the try
        assert!(retried(&eacces, Identity::Root, DROPPED, &mut as_root));
        assert!(retried(&eacces, DROPPED, Identity::Root, &mut as_root));
        // SlurmdSpoolDir or the grants' directory refused to the user
        let dir = GrantError::Untrusted(DirError::Io {
            path: PathBuf::from("/spool/energy-grants"),
            source: PermissionDenied.into(),
        });
        assert!(retried(&dir, DROPPED, DROPPED, &mut as_root));
        for other in [refused(NotFound), refused(StorageFull)] {
            assert!(!retried(&other, DROPPED, DROPPED, &mut as_root), "{other}");
        }
        let planted = GrantError::Untrusted(DirError::Untrusted {
            path: PathBuf::from("/spool/energy-grants"),
            users: crate::trusted_dir::trusted_owner(u32::MAX - 1).expect_err("nobody's"),
            uid: 1000,
            mode: 0o777,
            kind: "",
            refused: crate::trusted_dir::NO_WRITE,
        });
        assert!(!retried(&planted, DROPPED, DROPPED, &mut as_root));
        assert!(!retried(
            &eacces,
            Identity::User,
            Identity::User,
            &mut as_root
        ));
        // refused as root: given up at the ROOT_REFUSALS-th in a row
        let mut as_root = 0;
        for _ in 1..ROOT_REFUSALS {
            assert!(retried(
                &eacces,
                Identity::Root,
                Identity::Root,
                &mut as_root
            ));
        }
        assert!(!retried(
            &eacces,
            Identity::Root,
            Identity::Root,
            &mut as_root
        ));
        // a refusal while dropped starts the count again
        let mut as_root = ROOT_REFUSALS - 1;
        assert!(retried(&eacces, DROPPED, DROPPED, &mut as_root));
        assert!(retried(
            &eacces,
            Identity::Root,
            Identity::Root,
            &mut as_root
        ));
    }

    /// `until_written` with `refusals` refusals for `error` before the write succeeds,
    /// while the process is `identity`: what it returned, the tries, the time taken.
    fn tried(
        stop: &Stop,
        refusals: u32,
        error: std::io::ErrorKind,
        identity: Identity,
    ) -> (Result<(), String>, u32, Duration) {
        let start = Instant::now();
        let mut tries = 0;
        let result = until_written(
            "7.0",
            stop,
            Duration::from_millis(20),
            || identity,
            || {
                tries += 1;
                match tries > refusals {
                    true => Ok(()),
                    false => Err(refused(error)),
                }
            },
        );
        (result.map_err(|e| e.to_string()), tries, start.elapsed())
    }

    #[test]
    fn a_grant_refused_during_a_drop_is_written_once_root_is_back_or_given_up_at_fini() {
        use std::io::ErrorKind::{PermissionDenied, StorageFull};
        let stop = Stop::default();
        let (result, tries, took) = tried(&stop, 0, PermissionDenied, DROPPED);
        assert_eq!((result, tries), (Ok(()), 1));
        assert!(took < Duration::from_millis(200), "no wait: {took:?}");
        // 10 refusals 20 ms apart, then written
        let (result, tries, took) = tried(&stop, 10, PermissionDenied, DROPPED);
        assert_eq!((result, tries), (Ok(()), 11));
        assert!(took >= Duration::from_millis(200), "{took:?}");
        // not a drop: one try
        let (result, tries, _) = tried(&stop, 10, StorageFull, DROPPED);
        assert_eq!(tries, 1);
        assert!(result.is_err());
        let (result, tries, _) = tried(&stop, 10, PermissionDenied, Identity::User);
        assert_eq!(tries, 1);
        assert!(result.is_err());
        // refused as root: ROOT_REFUSALS tries
        let (result, tries, _) = tried(&stop, 10, PermissionDenied, Identity::Root);
        assert_eq!(tries, ROOT_REFUSALS);
        assert!(result.is_err());
        // a drop that outlasts the step: fini stops the tries at once
        let stop = Arc::new(Stop::default());
        let stopper = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                stop.stop();
            })
        };
        let (result, tries, took) = tried(&stop, u32::MAX, PermissionDenied, DROPPED);
        stopper.join().expect("stopper");
        // without the stop, refused for ever: it would never return
        assert!(result.is_err());
        assert!(tries >= 2, "{tries} tries in {took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
}
