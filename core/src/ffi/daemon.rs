//! Which Slurm program loaded the plugin.

pub fn in_slurmd() -> bool {
    slurm_sys::running_in_slurmd()
}

pub fn in_slurmstepd() -> bool {
    slurm_sys::running_in_slurmstepd()
}
