//! Safe records into Slurm's `acct_gather_energy_t` (whose layout depends on the release).

use slurm_sys::{EnergyFieldsExt, NO_VAL, NO_VAL64, acct_gather_energy_t};

use slurm_energy_logic::EnergyRecord;

pub fn write(dst: &mut acct_gather_energy_t, record: &EnergyRecord) {
    dst.consumed_energy = record.consumed_j.unwrap_or(NO_VAL64);
    dst.base_consumed_energy = record.base_consumed_j;
    dst.previous_consumed_energy = record.previous_consumed_j;
    dst.current_watts = record.current_watts.unwrap_or(NO_VAL);
    dst.ave_watts = record.ave_watts;
    dst.poll_time = record.poll_time;
    dst.set_slurmd_start_time(record.start_time);
    dst.clear_last_adjustment();
}
