//! Fields of `acct_gather_energy_t` that exist only in some releases.

use crate::acct_gather_energy_t;

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

#[cfg(not(slurm_energy_start_time))]
const _: () = assert!(core::mem::size_of::<acct_gather_energy_t>() == 48);
#[cfg(all(slurm_energy_start_time, not(slurm_energy_last_adjustment)))]
const _: () = assert!(core::mem::size_of::<acct_gather_energy_t>() == 56);
#[cfg(slurm_energy_last_adjustment)]
const _: () = assert!(core::mem::size_of::<acct_gather_energy_t>() == 64);
