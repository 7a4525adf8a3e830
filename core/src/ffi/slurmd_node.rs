//! In slurmstepd, the node's energy as the local slurmd reports it
//! (`slurm_get_node_energy`), for sources with one owner per node (a BMC session, a
//! Variorum sampler) that only slurmd opens.
//!
//! The RPC runs in a worker thread. A read asks the worker for a fresh answer and waits for
//! it at most `FRESH_WAIT`; slurmd answers from its cache in well under a millisecond, and
//! if it hangs or restarts the read returns the last answer and the step's figure goes
//! stale (unavailable) instead of the call blocking.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use slurm_sys::{
    EnergyFieldsExt, NO_VAL, NO_VAL64, SLURM_SUCCESS, acct_gather_energy_destroy,
    acct_gather_energy_t, slurm_get_node_energy,
};

use crate::remote::{NodeReport, RemoteTotal};
use crate::source::{EnergyReader, Reading, stale_after};
use crate::worker::{Control, Worker};

const FRESH_WAIT: Duration = Duration::from_millis(200);
/// The meter asks this often in between Slurm's polls, to keep the figure fresh and to see
/// slurmd restarts. Before 24.11 the record carries no start time, so a restart shows only
/// as a figure lower than the last one: asked every 2 s, a restarted slurmd (counting from
/// its first reading, a second or more after it starts) is seen below the old figure unless
/// the old slurmd had itself been measuring for only about as long.
const SAMPLE_PERIOD: Duration = Duration::from_secs(2);
/// After slurmd failed to answer (restarting?), ask again this soon, without waiting for a
/// poll: a restarted slurmd is then seen while its own figure is still small.
const RETRY: Duration = Duration::from_millis(500);

#[derive(Default)]
struct State {
    /// Requests made / answered, so a reader can wait for an answer newer than its request.
    requested: u64,
    answered: u64,
    total: RemoteTotal,
    last_ok: Option<Instant>,
    watts: Option<u32>,
    failing: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Readers wait here for answers.
    answered: Condvar,
}

pub struct SlurmdNode {
    shared: Arc<Shared>,
    /// Asks slurmd when woken by a reader (or every `RETRY` while slurmd fails). Declared
    /// last: dropped, it stops and joins the thread; an RPC in progress ends within
    /// Slurm's MessageTimeout.
    worker: Worker,
}

impl SlurmdNode {
    pub fn start(context_id: u16) -> Result<Self, String> {
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        let worker = Worker::spawn("slurmd-energy", move |control| {
            theirs.serve(control, context_id)
        })?;
        Ok(Self { shared, worker })
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn serve(&self, control: &Control, context_id: u16) {
        loop {
            let failing = self.lock().failing;
            if !control.wait(failing.then_some(RETRY)) {
                return;
            }
            let serving = self.lock().requested;
            let answer = ask_slurmd(context_id);
            let now = Instant::now();
            let mut state = self.lock();
            match answer {
                Ok(report) => {
                    if let Some(note) = state.total.update(report, now) {
                        log::warn!("{note}");
                    }
                    state.last_ok = Some(now);
                    state.watts = report.watts;
                    if state.failing {
                        log::info!("slurmd answers again");
                        state.failing = false;
                    }
                }
                Err(e) if !state.failing => {
                    log::error!("cannot get the node energy from slurmd: {e}");
                    state.failing = true;
                }
                Err(_) => {}
            }
            state.answered = serving;
            self.answered.notify_all();
        }
    }
}

fn ask_slurmd(context_id: u16) -> Result<NodeReport, String> {
    let mut count: u16 = 0;
    let mut energy: *mut acct_gather_energy_t = std::ptr::null_mut();
    // SAFETY: NULL host = this node's slurmd; on success Slurm allocates `count` records,
    // freed below with Slurm's allocator.
    let rc = unsafe {
        slurm_get_node_energy(std::ptr::null_mut(), context_id, 0, &mut count, &mut energy)
    };
    if rc != SLURM_SUCCESS || energy.is_null() || count == 0 {
        if !energy.is_null() {
            // SAFETY: allocated by Slurm for us.
            unsafe { acct_gather_energy_destroy(energy) };
        }
        return Err(format!(
            "slurm_get_node_energy returned {rc} with {count} records"
        ));
    }
    // SAFETY: at least one record.
    let node = unsafe { *energy };
    // SAFETY: allocated by Slurm for us, not used after.
    unsafe { acct_gather_energy_destroy(energy) };
    if node.consumed_energy == NO_VAL64 {
        return Err("slurmd has no energy reading".into());
    }
    Ok(NodeReport {
        consumed_j: node.consumed_energy,
        watts: (node.current_watts != NO_VAL).then_some(node.current_watts),
        started: node.slurmd_start_time(),
    })
}

impl EnergyReader for SlurmdNode {
    fn describe(&self) -> String {
        "node energy from the local slurmd".into()
    }

    fn read(&mut self, now: Instant) -> Reading {
        let mut state = self.shared.lock();
        state.requested += 1;
        let wanted = state.requested;
        self.worker.control().wake();
        let left = (now + FRESH_WAIT).saturating_duration_since(Instant::now());
        state = self
            .shared
            .answered
            .wait_timeout_while(state, left, |s| s.answered < wanted)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        let fresh = state.last_ok.is_some_and(|t| {
            Instant::now().saturating_duration_since(t) <= stale_after(SAMPLE_PERIOD)
        });
        Reading {
            energy_uj: state.total.total_uj(),
            complete: fresh,
            problems: if fresh || state.last_ok.is_none() {
                vec![]
            } else {
                vec!["slurmd has not answered for too long".into()]
            },
            watts: state.watts.map(f64::from),
            sensors: Vec::new(),
        }
    }

    fn sample_period(&self) -> Duration {
        SAMPLE_PERIOD
    }
}
