//! Which steps run on the node at each of slurmd's ledger updates, and where: each step's
//! socket in SlurmdSpoolDir ([`present_steps`]), its slurmstepd (found in /proc by the socket
//! it holds: [`procs::Scans`]), its cgroup (from where that slurmstepd runs:
//! [`CgroupTree::step_cgroup`]), when it started, and who runs its job (from Slurm's step
//! record: [`Grant`]). The ledger's keeper charges what this finds.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::cgroup::{CgroupTree, StepCgroup};
use super::grant::{Grant, Owner};
use super::procs::{self, Procs};
use super::sockets::StepSockets;
use super::{StepId, StepKey};

/// Ended steps' grants are swept at every this many samples (about a minute of ledger
/// updates).
const GRANT_SWEEP_SAMPLES: u64 = 60;

/// How many samples apart the search for a step's slurmstepd is repeated, at most, while
/// it is not found: a stale socket must not cost a pass over /proc at every sample.
const MAX_SEARCH_GAP: u64 = 64;
/// A step whose socket is younger than this is searched for at every sample until found:
/// until then its job has no share (the others would be charged its part), and a loaded
/// node can take seconds to title a new slurmstepd. Only an older socket backs off.
const YOUNG_SOCKET: Duration = Duration::from_secs(60);

/// Whether the socket at `path` was made less than [`YOUNG_SOCKET`] ago (or its age is
/// unknown: searched as a new one).
fn young_socket(path: &Path) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < YOUNG_SOCKET)
}

/// What is known of where a step runs.
#[derive(Debug, Clone, PartialEq)]
enum Place {
    /// Its slurmstepd is not found (not yet titled, or gone): searched again at sample
    /// `next`, `gap` samples after the last search.
    Unseen { next: u64, gap: u64 },
    /// Its slurmstepd, not yet in the step's cgroup (under v2 it first waits in `system/`).
    Stepd(u32),
    /// Its slurmstepd, and the step's cgroup.
    Found(u32, Box<StepCgroup>),
}

impl Place {
    /// Its slurmstepd, once found.
    fn stepd(&self) -> Option<u32> {
        match self {
            Self::Stepd(pid) | Self::Found(pid, _) => Some(*pid),
            Self::Unseen { .. } => None,
        }
    }
}

/// Finds the node's steps at each sample, remembering where each runs while it is present.
pub(crate) struct Steps {
    spool: PathBuf,
    /// The steps' sockets, which say which steps are present.
    sockets: StepSockets,
    /// The cgroup tree the steps' cgroups are read in, in shared mode; without it no
    /// cgroup is read.
    tree: Option<CgroupTree>,
    procs: Procs,
    /// Where each present step runs, dropped with the step; in job order, as the steps.
    places: BTreeMap<StepKey, Place>,
    /// When each present step's slurmstepd started (its process's start once found, its
    /// socket's time until then).
    starts: HashMap<StepKey, Option<SystemTime>>,
    /// Samples taken, the clock of [`Place::Unseen`].
    samples: u64,
    /// The searches of /proc for slurmstepds, [`procs::SCAN_GAP`] apart at least.
    scans: procs::Scans,
    /// slurmd's user, which its slurmstepds run as.
    stepd_uid: u32,
}

/// A step present at a sample.
pub(crate) struct Step<'a> {
    pub(crate) key: StepKey,
    /// Its slurmstepd, once found.
    pub(crate) stepd: Option<u32>,
    /// Its cgroup, once found (never without a cgroup tree).
    pub(crate) cgroup: Option<&'a mut StepCgroup>,
    /// When its slurmstepd started, as far as known.
    pub(crate) started: Option<SystemTime>,
}

/// What a sample finds: the present steps, and the processes they were found among.
pub(crate) struct Present<'a> {
    /// In job order.
    pub(crate) steps: Vec<Step<'a>>,
    /// The view of /proc the steps were found in, where their devices' users are looked up.
    pub(crate) procs: &'a Procs,
}

impl Present<'_> {
    /// The present steps.
    pub(crate) fn keys(&self) -> HashSet<StepKey> {
        self.steps.iter().map(|s| s.key).collect()
    }

    /// Whether `key` is a present step.
    pub(crate) fn contains(&self, key: &StepKey) -> bool {
        self.steps.binary_search_by_key(key, |s| s.key).is_ok()
    }

    /// Each slurmstepd found, to its job.
    pub(crate) fn stepds(&self) -> HashMap<u32, u32> {
        self.steps
            .iter()
            .filter_map(|s| Some((s.stepd?, s.key.job)))
            .collect()
    }
}

impl Steps {
    /// The steps of the node whose SlurmdSpoolDir is `spool`, their slurmstepds among the
    /// processes under `proc_root`, their cgroups in `tree` (none read without one).
    pub(crate) fn new(spool: &Path, tree: Option<CgroupTree>, proc_root: &Path) -> Self {
        Self {
            spool: spool.to_path_buf(),
            sockets: StepSockets::new(spool),
            tree,
            procs: Procs::from_path(proc_root),
            places: BTreeMap::new(),
            starts: HashMap::new(),
            samples: 0,
            scans: procs::Scans::default(),
            stepd_uid: nix::unistd::getuid().as_raw(),
        }
    }

    /// The steps present now, where each runs as far as found; every
    /// [`GRANT_SWEEP_SAMPLES`] the grants of ended steps are swept, and when `owners` is
    /// given it learns who runs each present job not in it yet.
    pub(crate) fn find(&mut self, owners: Option<&mut HashMap<u32, Owner>>) -> Present<'_> {
        // a sample of a node whose steps are all placed and whose sockets did not change
        // has nothing to locate: most samples, at a cost that grew with the steps
        if self.sockets.refresh() || !self.all_placed() {
            self.locate();
        }
        let present = self.sockets.current();
        if self.samples.is_multiple_of(GRANT_SWEEP_SAMPLES) {
            Grant::remove_ended(&self.spool, &present.keys().copied().collect());
        }
        // a job's owner is looked up only where it is shown
        if let Some(owners) = owners {
            learn_owners(&self.spool, present, owners);
        }
        self.samples += 1;
        // the places are the present steps' (or fewer), in the same order
        let mut places = self.places.iter_mut().peekable();
        let steps = present
            .keys()
            .map(|&key| {
                let place = places.next_if(|(k, _)| **k == key).map(|(_, p)| p);
                Step {
                    key,
                    stepd: place.as_ref().and_then(|p| p.stepd()),
                    cgroup: match place {
                        Some(Place::Found(_, cgroup)) => Some(&mut **cgroup),
                        _ => None,
                    },
                    started: self.starts.get(&key).copied().flatten(),
                }
            })
            .collect();
        Present {
            steps,
            procs: &self.procs,
        }
    }

    /// The present steps whose slurmstepd is one of `pids`.
    pub(crate) fn run_by(&self, pids: &[u32]) -> impl Iterator<Item = StepKey> {
        self.places
            .iter()
            .filter(|(_, place)| place.stepd().is_some_and(|pid| pids.contains(&pid)))
            .map(|(step, _)| *step)
    }

    /// Whether every step of the sockets last read is where it stays: its cgroup found
    /// (its slurmstepd where no cgroup is read). [`Self::locate`] then changes nothing.
    fn all_placed(&self) -> bool {
        self.places.len() == self.sockets.current().len()
            && self.places.values().all(|place| match place {
                Place::Found(..) => true,
                Place::Stepd(_) => self.tree.is_none(),
                Place::Unseen { .. } => false,
            })
    }

    /// Brings [`Self::places`] up to the present steps: forgets the ended ones, searches
    /// /proc once for the slurmstepds of those not seen yet (where a search may be made:
    /// [`procs::Scans`]), and reads the cgroup of each slurmstepd found whose step has none
    /// yet.
    fn locate(&mut self) {
        let present = self.sockets.current();
        let now = self.samples;
        self.places.retain(|step, _| present.contains_key(step));
        self.starts.retain(|step, _| present.contains_key(step));
        for (step, socket) in present {
            self.starts
                .entry(*step)
                .or_insert_with(|| fs::metadata(socket).and_then(|m| m.modified()).ok());
        }
        let search: HashSet<StepKey> = present
            .keys()
            .filter(|step| match self.places.get(step) {
                None => true,
                Some(Place::Unseen { next, .. }) => *next <= now,
                Some(_) => false,
            })
            .copied()
            .collect();
        // a step whose grant names its slurmstepd: that one process, alive or not
        let mut answers: HashMap<StepKey, Option<u32>> = HashMap::new();
        let mut scan: HashMap<StepKey, &Path> = HashMap::new();
        for step in &search {
            match Grant::read(&self.spool, step.job, step.step).and_then(|g| g.stepd) {
                Some(stepd) => {
                    let alive = stepd.alive(&self.procs, self.stepd_uid);
                    answers.insert(*step, alive.then_some(stepd.pid));
                }
                None => {
                    scan.insert(*step, present[step].as_path());
                }
            }
        }
        // the others: a pass over /proc (one at a time, SCAN_GAP apart, off this thread),
        // whose answer is for the steps not placed meanwhile
        if let Some(found) = self.scans.stepds(&self.procs, &scan, self.stepd_uid) {
            for step in found.searched {
                let unplaced = matches!(self.places.get(&step), None | Some(Place::Unseen { .. }));
                if present.contains_key(&step) && unplaced && !answers.contains_key(&step) {
                    answers.insert(step, found.stepds.get(&step).copied());
                }
            }
        }
        for (step, pid) in answers {
            let place = match (pid, self.places.get(&step)) {
                (Some(pid), _) => {
                    // charged from its process's start, not its socket's (made later)
                    if let Some(started) = self.procs.started(pid) {
                        self.starts.insert(step, Some(started));
                    }
                    Place::Stepd(pid)
                }
                (None, Some(Place::Unseen { gap, .. })) => {
                    let gap = if young_socket(&present[&step]) {
                        1
                    } else {
                        (gap * 2).min(MAX_SEARCH_GAP)
                    };
                    Place::Unseen {
                        next: now + gap,
                        gap,
                    }
                }
                (None, _) => Place::Unseen {
                    next: now + 1,
                    gap: 1,
                },
            };
            self.places.insert(step, place);
        }
        let Some(tree) = &self.tree else {
            return;
        };
        for (key, place) in &mut self.places {
            if let Place::Stepd(pid) = *place {
                match step_cgroup(tree, &self.procs, pid, key.step) {
                    Some(Some(cgroup)) => *place = Place::Found(pid, Box::new(cgroup)),
                    Some(None) => {}
                    // the slurmstepd is gone while its socket is not: look again
                    None => {
                        *place = Place::Unseen {
                            next: now + 1,
                            gap: 1,
                        }
                    }
                }
            }
        }
    }
}

/// Who runs each job of the `present` steps not yet in `owners`: the user Slurm launched
/// one of its steps as ([`Grant`] in `spool`), never what its tasks say.
fn learn_owners(
    spool: &Path,
    present: &BTreeMap<StepKey, PathBuf>,
    owners: &mut HashMap<u32, Owner>,
) {
    for &StepKey { job, step } in present.keys() {
        if owners.contains_key(&job) {
            continue;
        }
        if let Some(grant) = Grant::read(spool, job, step) {
            owners.insert(job, Owner { user: grant.user });
        }
    }
}

/// The step's cgroup from where its slurmstepd is (never a task's: see
/// [`CgroupTree::step_cgroup`]); `None` when the slurmstepd is gone.
fn step_cgroup(
    tree: &CgroupTree,
    procs: &Procs,
    stepd: u32,
    step: StepId,
) -> Option<Option<StepCgroup>> {
    Some(tree.step_cgroup(&procs.cgroup(stepd)?, step))
}

#[cfg(test)]
pub(crate) mod tests;
