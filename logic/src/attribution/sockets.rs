//! The step sockets in SlurmdSpoolDir as slurmd's samples see them, read again only when
//! one came or went. A node with hundreds of steps has hundreds of sockets there, and
//! reading the directory was a quarter of a sample's time at 256 jobs
//! (`keeper::tests::attribution_cost_per_sample`); the kernel says when a name changes
//! (inotify), so the directory is read at a sample only where one may be a step's.
//!
//! The events are taken before the directory is read, so a socket made while it is read
//! is seen by this read or, at the latest, by the next sample's. Where the kernel cannot
//! say (no inotify instance left, its queue overflowed, the directory replaced), the
//! directory is read at every sample, as before.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::{StepKey, present_steps, socket_step};

/// The names' changes that may be a step's socket coming or going.
const CHANGES: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

/// Events after which the watch says nothing more of the directory's names. (An overflow
/// of the queue, which steps started by the thousand could cause, only lost events: it
/// names nothing, so the directory is read, and the watch goes on.)
const WATCH_LOST: AddWatchFlags = AddWatchFlags::IN_IGNORED
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_UNMOUNT);

/// The directory is read at least every this many samples (about a minute of ledger
/// updates) whatever the kernel says: a change no event told (a file system that does not
/// say them all) is then a minute late, not forever.
const READ_AT_LEAST_EVERY: u32 = 64;

/// The most reads of the kernel's events at one sample: it has told all it had by then or
/// the directory is read anyway (a sample never loops on a watch that keeps answering).
const MOST_READS: u32 = 64;

/// The present steps' sockets, kept between samples.
pub(crate) struct StepSockets {
    spool: PathBuf,
    /// Told of the directory's names; `None` where that cannot be had (read at every
    /// sample).
    watch: Option<Inotify>,
    /// The sockets as last read, in job order.
    present: BTreeMap<StepKey, PathBuf>,
    /// Refreshes since the directory was last read; `None` before the first read.
    kept_for: Option<u32>,
}

impl StepSockets {
    /// The step sockets of SlurmdSpoolDir `spool`.
    pub(crate) fn new(spool: &Path) -> Self {
        let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .and_then(|watch| watch.add_watch(spool, CHANGES).map(|_| watch));
        if let Err(e) = &watch {
            log::info!(
                "{}: no notice of new steps ({e}); the directory is read at every sample",
                spool.display()
            );
        }
        Self {
            spool: spool.to_path_buf(),
            watch: watch.ok(),
            present: BTreeMap::new(),
            kept_for: None,
        }
    }

    /// Brings [`Self::current`] up to now: the directory is read again where a name that
    /// may be a step's changed since the last read (or [`READ_AT_LEAST_EVERY`]). Returns
    /// whether it was read: where not, the sockets are those of the last call.
    pub(crate) fn refresh(&mut self) -> bool {
        let changed = self.changed();
        match &mut self.kept_for {
            Some(kept) if !changed && *kept + 1 < READ_AT_LEAST_EVERY => {
                *kept += 1;
                false
            }
            kept => {
                self.present = present_steps(&self.spool);
                *kept = Some(0);
                true
            }
        }
    }

    /// The sockets as of the last [`Self::refresh`], in job order.
    pub(crate) fn current(&self) -> &BTreeMap<StepKey, PathBuf> {
        &self.present
    }

    /// Whether a name that may be a step's socket changed since the last call, or the
    /// watch cannot say (then dropped: the directory is read at every sample).
    fn changed(&mut self) -> bool {
        let Some(watch) = &self.watch else {
            return true;
        };
        let mut changed = false;
        for _ in 0..MOST_READS {
            match watch.read_events() {
                Ok(events) => {
                    for event in events {
                        if event.mask.intersects(WATCH_LOST) {
                            log::info!(
                                "{}: notice of new steps lost ({:?}); the directory is read \
                                 at every sample",
                                self.spool.display(),
                                event.mask
                            );
                            self.watch = None;
                            return true;
                        }
                        changed |= event
                            .name
                            .as_deref()
                            .and_then(OsStr::to_str)
                            .is_none_or(|name| socket_step(name).is_some());
                    }
                }
                Err(Errno::EAGAIN) => return changed,
                Err(Errno::EINTR) => {}
                Err(e) => {
                    log::info!(
                        "{}: notice of new steps failed ({e}); the directory is read at \
                         every sample",
                        self.spool.display()
                    );
                    self.watch = None;
                    return true;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::net::UnixListener;

    use super::*;
    use crate::attribution::StepId;

    fn keys(sockets: &mut StepSockets) -> Vec<StepKey> {
        sockets.refresh();
        sockets.current().keys().copied().collect()
    }

    /// Each step's socket is seen at the first sample after it is made, and gone at the
    /// first after it is removed; other files coming and going (the ledger's) are not a
    /// step's.
    #[test]
    fn sockets_made_and_removed_are_seen_at_the_next_sample() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut sockets = StepSockets::new(tmp.path());
        assert!(sockets.watch.is_some(), "inotify here");
        assert!(keys(&mut sockets).is_empty());
        let a = tmp.path().join("n1_7.4294967291");
        let _a = UnixListener::bind(&a).expect("socket");
        assert_eq!(keys(&mut sockets), vec![StepKey::new(7, StepId::BATCH)]);
        fs::write(tmp.path().join("energy-ledger.0.json"), "{}").expect("file");
        assert!(!sockets.changed(), "no step's name");
        let _b = UnixListener::bind(tmp.path().join("n1_9.0")).expect("socket");
        fs::remove_file(&a).expect("rm");
        assert_eq!(keys(&mut sockets), vec![StepKey::new(9, StepId(0))]);
        assert_eq!(keys(&mut sockets), vec![StepKey::new(9, StepId(0))]);
    }

    /// The directory is read again at every sample once its watch is lost: renamed away
    /// and back, the watch follows the old name no more.
    #[test]
    fn a_lost_watch_reads_the_directory_at_every_sample() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let spool = tmp.path().join("spool");
        fs::create_dir(&spool).expect("dir");
        let mut sockets = StepSockets::new(&spool);
        assert!(keys(&mut sockets).is_empty());
        let moved = tmp.path().join("moved");
        fs::rename(&spool, &moved).expect("mv");
        fs::create_dir(&spool).expect("a new spool");
        assert!(sockets.changed());
        assert!(sockets.watch.is_none());
        let _a = UnixListener::bind(spool.join("n1_3.0")).expect("socket");
        assert_eq!(keys(&mut sockets), vec![StepKey::new(3, StepId(0))]);
    }

    /// A change the kernel did not tell is seen within [`READ_AT_LEAST_EVERY`] samples.
    #[test]
    fn an_untold_change_is_seen_within_the_read_period() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut sockets = StepSockets::new(tmp.path());
        assert!(keys(&mut sockets).is_empty());
        let _a = UnixListener::bind(tmp.path().join("n1_5.0")).expect("socket");
        assert!(sockets.changed(), "told, and the notice taken away here");
        let seen_after = (1..=READ_AT_LEAST_EVERY).find(|_| !keys(&mut sockets).is_empty());
        assert_eq!(seen_after, Some(READ_AT_LEAST_EVERY));
    }

    /// A queue overflowed by thousands of names at once (steps started by the thousand)
    /// has the directory read, and the watch goes on.
    #[test]
    fn an_overflowed_queue_reads_the_directory_and_keeps_the_watch() {
        let most: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(16_384);
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut sockets = StepSockets::new(tmp.path());
        assert!(keys(&mut sockets).is_empty());
        for k in 0..=most.min(100_000) {
            fs::write(tmp.path().join(format!("f{k}")), "").expect("file");
        }
        let _a = UnixListener::bind(tmp.path().join("n1_6.0")).expect("socket");
        assert_eq!(keys(&mut sockets), vec![StepKey::new(6, StepId(0))]);
        assert!(sockets.watch.is_some(), "kept");
        // what is left of the burst is drained over the next samples, a bounded read each
        let quiet = (0..8).find(|_| !sockets.changed());
        assert!(quiet.is_some(), "the burst drained");
        assert!(sockets.watch.is_some(), "still kept");
    }

    /// Without a watch (no inotify instance left), every sample reads the directory.
    #[test]
    fn without_a_watch_each_sample_reads_the_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut sockets = StepSockets::new(tmp.path());
        sockets.watch = None;
        assert!(keys(&mut sockets).is_empty());
        let _a = UnixListener::bind(tmp.path().join("n1_4.0")).expect("socket");
        assert_eq!(keys(&mut sockets), vec![StepKey::new(4, StepId(0))]);
    }
}
