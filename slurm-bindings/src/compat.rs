//! What exists only in some releases: fields of `acct_gather_energy_t`, and how to ask
//! which daemon loaded us.

use crate::acct_gather_energy_t;

/// `running_in_slurmd()`: an exported function up to 24.11, a macro over
/// `run_in_daemon(IS_SLURMD)` from 25.05.
#[cfg(not(slurm_run_in_daemon_mask))]
pub fn running_in_slurmd() -> bool {
    // SAFETY: a plain getter libslurmfull exports up to 24.11.
    unsafe { crate::slurm_running_in_slurmd() }
}
#[cfg(slurm_run_in_daemon_mask)]
pub fn running_in_slurmd() -> bool {
    // SAFETY: reads the process's daemon mask; exported from 25.05.
    unsafe { crate::slurm_run_in_daemon(crate::daemon_bit::SLURMD) }
}

/// `running_in_slurmstepd()`, as [`running_in_slurmd`].
#[cfg(not(slurm_run_in_daemon_mask))]
pub fn running_in_slurmstepd() -> bool {
    // SAFETY: a plain getter libslurmfull exports up to 24.11.
    unsafe { crate::slurm_running_in_slurmstepd() }
}
#[cfg(slurm_run_in_daemon_mask)]
pub fn running_in_slurmstepd() -> bool {
    // SAFETY: reads the process's daemon mask; exported from 25.05.
    unsafe { crate::slurm_run_in_daemon(crate::daemon_bit::SLURMSTEPD) }
}

/// Setters that compile to nothing where the release lacks the field.
pub trait EnergyFieldsExt {
    /// `slurmd_start_time` (24.11+): lets consumers detect a slurmd restart.
    fn set_slurmd_start_time(&mut self, start: i64);
    /// `last_adjustment` (24.11.4+): only the ipmi CalcAdjustment logic uses it.
    fn clear_last_adjustment(&mut self);
    /// `slurmd_start_time` (24.11+) of a record slurmd sent (`slurm_get_node_energy`):
    /// it changes when slurmd restarts. `None` where the release lacks the field.
    fn slurmd_start_time(&self) -> Option<i64>;
}

impl EnergyFieldsExt for acct_gather_energy_t {
    #[allow(unused_variables)]
    fn set_slurmd_start_time(&mut self, start: i64) {
        #[cfg(slurm_energy_start_time)]
        {
            self.slurmd_start_time = start;
        }
    }

    fn clear_last_adjustment(&mut self) {
        #[cfg(slurm_energy_last_adjustment)]
        {
            self.last_adjustment = 0;
        }
    }

    fn slurmd_start_time(&self) -> Option<i64> {
        #[cfg(slurm_energy_start_time)]
        {
            Some(self.slurmd_start_time)
        }
        #[cfg(not(slurm_energy_start_time))]
        {
            None
        }
    }
}

// The layouts of reference/slurm-abi.md §2.3, checked against the headers being built
// against: 22.05-24.05, 24.11.0-3, and 24.11.4 up to 26.05 (last_adjustment mid-struct).
#[cfg(not(slurm_energy_start_time))]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<acct_gather_energy_t>() == 48);
    assert!(offset_of!(acct_gather_energy_t, consumed_energy) == 16);
    assert!(offset_of!(acct_gather_energy_t, current_watts) == 24);
    assert!(offset_of!(acct_gather_energy_t, previous_consumed_energy) == 32);
    assert!(offset_of!(acct_gather_energy_t, poll_time) == 40);
};
#[cfg(all(slurm_energy_start_time, not(slurm_energy_last_adjustment)))]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<acct_gather_energy_t>() == 56);
    assert!(offset_of!(acct_gather_energy_t, previous_consumed_energy) == 32);
    assert!(offset_of!(acct_gather_energy_t, poll_time) == 40);
    assert!(offset_of!(acct_gather_energy_t, slurmd_start_time) == 48);
};
#[cfg(slurm_energy_last_adjustment)]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<acct_gather_energy_t>() == 64);
    assert!(offset_of!(acct_gather_energy_t, consumed_energy) == 16);
    assert!(offset_of!(acct_gather_energy_t, current_watts) == 24);
    assert!(offset_of!(acct_gather_energy_t, last_adjustment) == 32);
    assert!(offset_of!(acct_gather_energy_t, previous_consumed_energy) == 40);
    assert!(offset_of!(acct_gather_energy_t, poll_time) == 48);
    assert!(offset_of!(acct_gather_energy_t, slurmd_start_time) == 56);
};

/// `SHOW_DETAIL` (slurm.h; `SLURM_BIT(1)` from 26.11, which bindgen cannot expand): the
/// same bit in every release.
pub const SHOW_DETAIL: u16 = 1 << 1;

/// `slurm_load_job(resp, job_id, show_flags)`: by job id up to 25.11, by a
/// `slurm_step_id_t` naming the job from 26.05 (its header's `slurm_load_job_jid`).
///
/// # Safety
/// `resp` is where libslurm may store the answer, freed with `slurm_free_job_info_msg`.
pub unsafe fn load_job(
    resp: *mut *mut crate::job_info_msg_t,
    job_id: u32,
    show_flags: u16,
) -> core::ffi::c_int {
    #[cfg(not(slurm_load_job_step_id))]
    {
        // SAFETY: forwarded.
        unsafe { crate::slurm_load_job(resp, job_id, show_flags) }
    }
    #[cfg(slurm_load_job_step_id)]
    {
        // SLURM_STEP_ID_INITIALIZER with the job's id
        let step = crate::slurm_step_id_t {
            job_id,
            step_het_comp: crate::NO_VAL,
            step_id: crate::NO_VAL,
            ..Default::default()
        };
        // SAFETY: forwarded.
        unsafe { crate::slurm_load_job(resp, step, show_flags) }
    }
}
