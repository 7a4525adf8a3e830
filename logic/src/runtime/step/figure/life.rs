//! Which read of its step's life a call is, decided sans-IO: what the step's process
//! showed at the call in (plain values the shell read from /proc and the spool), the
//! figure to ask slurmd for out ([`Want`]). Its tests need no file and no /proc.

use crate::exchange::ask::Want;

/// What the step's process showed at a call.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Seen {
    /// The call comes from one of Slurm's periodic polls (a thread `acctg*`).
    pub periodic: bool,
    /// The step has tasks (its slurmstepd has children), or is known to ([`Life::looks_for_tasks`]).
    pub tasks: bool,
    /// For an extern step whose job's steps were looked for ([`Life::looks_for_siblings`]):
    /// whether another step of its job is present; `None` otherwise.
    pub siblings: Option<bool>,
    /// The call comes from slurmstepd's main thread (read where `siblings` is known).
    pub main_thread: bool,
    /// slurmd's last update is older than a figure is brought forward (read once the step
    /// counted a figure).
    pub late: bool,
}

/// Where a step is in its life, as its reads saw it.
#[derive(Debug, Default)]
pub(super) struct Life {
    /// Whether a read saw its tasks: their end is then its last edge.
    had_tasks: bool,
    /// An extern step: whether a read saw another step of its job.
    saw_siblings: bool,
    /// Whether it asked for its last figure ([`Want::Last`]), which it does once.
    said_last: bool,
}

impl Life {
    /// Whether a call must look for the step's tasks: a periodic poll of a step whose tasks
    /// were seen is no edge whatever its tasks are now (its main thread takes the last
    /// read), so they are not looked for, a walk of its threads in /proc at each of
    /// Slurm's polls. Where this says no, [`Seen::tasks`] is `true`.
    pub(super) fn looks_for_tasks(&self, periodic: bool) -> bool {
        !(periodic && self.had_tasks)
    }

    /// Whether a call must look for its job's other steps: only a step that never had
    /// tasks and has not made its last read (25.05's extern step, whose main thread makes
    /// its last read once its job's other steps are gone), at each read until then.
    pub(super) fn looks_for_siblings(&self, tasks: bool) -> bool {
        !self.had_tasks && !tasks && !self.said_last
    }

    /// What the read `seen` asks slurmd for, by a step that `counted` a figure before (its
    /// figures brought forward to the call if `brings_forward`), whose slurmstepd is
    /// `stepd`. At the step's edges (before its tasks start, after they end) the figure is
    /// the step's first or last: it needs a ledger sampled now, and the step waits for it
    /// (in slurmstepd's own threads). While tasks run, a read other than Slurm's periodic
    /// polls (sstat's) asks for a fresh ledger where plugins are stacked, whose figures are
    /// not brought forward, or where the ledger is late: but it never waits, since slurmd
    /// holds an RPC thread for an sstat until the step answers.
    pub(super) fn want(
        &mut self,
        seen: Seen,
        counted: bool,
        brings_forward: bool,
        stepd: u32,
    ) -> Want {
        // its tasks were seen and are gone, or it is an extern step its job's other steps
        // have left and its main thread reads: the step ends, and this is its last read
        // (said once; Slurm's reads after it find the same figure)
        let ended = if self.had_tasks {
            !seen.tasks
        } else {
            !seen.tasks && !self.said_last && self.left_alone(seen.siblings) && seen.main_thread
        };
        let last = ended && !self.said_last;
        self.had_tasks |= seen.tasks;
        let (edge, asks) = if counted {
            (
                !seen.periodic && !seen.tasks,
                !seen.periodic && seen.tasks && (!brings_forward || seen.late),
            )
        } else {
            (!seen.tasks, false)
        };
        self.said_last |= edge && last;
        match (edge, last, asks) {
            (true, true, _) => Want::Last { stepd },
            (true, false, _) => Want::Fresh,
            (false, _, true) => Want::Refresh,
            (false, _, false) => Want::Current,
        }
    }

    /// Whether this is an extern step whose job's other steps, seen before, are all gone
    /// (`siblings`: whether any is present now). From 25.05 the extern step runs no task
    /// of its own: its main thread waits for the job's other steps to end, then makes the
    /// step's last read. Its main thread reads at no other moment once they have begun
    /// (sstat's reads and the periodic polls come from other threads).
    fn left_alone(&mut self, siblings: Option<bool>) -> bool {
        let Some(siblings) = siblings else {
            return false;
        };
        self.saw_siblings |= siblings;
        self.saw_siblings && !siblings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPD: u32 = 40;

    fn seen(periodic: bool, tasks: bool) -> Seen {
        Seen {
            periodic,
            tasks,
            ..Seen::default()
        }
    }

    /// A batch step's life: its first read before its tasks (fresh), Slurm's polls while
    /// they run (current, tasks not looked for), an sstat read (current: brought forward,
    /// the ledger on time), the read as its tasks end (last, once), the reads after it.
    #[test]
    fn a_steps_edges_are_fresh_and_last_and_its_polls_current() {
        let mut life = Life::default();
        assert!(life.looks_for_tasks(false));
        assert_eq!(
            life.want(seen(false, false), false, true, STEPD),
            Want::Fresh
        );
        assert_eq!(
            life.want(seen(false, true), true, true, STEPD),
            Want::Current
        );
        assert!(!life.looks_for_tasks(true), "a poll once tasks were seen");
        assert_eq!(
            life.want(seen(true, true), true, true, STEPD),
            Want::Current
        );
        assert_eq!(
            life.want(seen(false, false), true, true, STEPD),
            Want::Last { stepd: STEPD }
        );
        assert_eq!(
            life.want(seen(false, false), true, true, STEPD),
            Want::Fresh,
            "said once"
        );
        assert_eq!(
            life.want(seen(true, false), true, true, STEPD),
            Want::Current
        );
    }

    /// An sstat read while tasks run refreshes where figures are not brought forward
    /// (stacked plugins) or the ledger is late, and never waits.
    #[test]
    fn an_sstat_read_refreshes_where_stacked_or_late() {
        let mut life = Life::default();
        life.want(seen(false, true), false, true, STEPD);
        let late = Seen {
            late: true,
            ..seen(false, true)
        };
        assert_eq!(life.want(late, true, true, STEPD), Want::Refresh);
        assert_eq!(
            life.want(seen(false, true), true, false, STEPD),
            Want::Refresh
        );
        assert_eq!(
            life.want(seen(false, true), true, true, STEPD),
            Want::Current
        );
        assert!(!Want::Refresh.waits());
    }

    /// 25.05's extern step has no tasks: its last read is its main thread's once its job's
    /// other steps, seen before, are gone; not before they were seen, not from another
    /// thread, and not for a step that is no extern step (`siblings` unknown).
    #[test]
    fn an_extern_steps_last_read_is_its_main_threads_once_left_alone() {
        let mut life = Life::default();
        let extern_read = |siblings, main_thread| Seen {
            siblings: Some(siblings),
            main_thread,
            ..Seen::default()
        };
        assert!(life.looks_for_siblings(false));
        assert_eq!(
            life.want(extern_read(false, true), false, true, STEPD),
            Want::Fresh
        );
        assert_eq!(
            life.want(extern_read(false, true), true, true, STEPD),
            Want::Fresh,
            "none seen yet"
        );
        assert_eq!(
            life.want(extern_read(true, true), true, true, STEPD),
            Want::Fresh
        );
        assert_eq!(
            life.want(extern_read(false, false), true, true, STEPD),
            Want::Fresh,
            "another thread"
        );
        assert_eq!(
            life.want(extern_read(false, true), true, true, STEPD),
            Want::Last { stepd: STEPD }
        );
        assert!(!life.looks_for_siblings(false), "after its last read");
        let mut other = Life::default();
        other.want(seen(false, false), false, true, STEPD);
        assert_eq!(
            other.want(seen(false, false), true, true, STEPD),
            Want::Fresh
        );
    }
}
