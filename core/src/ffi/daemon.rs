//! Which Slurm program loaded the plugin.

/// Only slurmd and slurmstepd measure; slurmctld loads the plugin for its
/// configuration only.
pub fn measures_here() -> bool {
    in_slurmd() || in_slurmstepd()
}

pub fn in_slurmd() -> bool {
    slurm_sys::running_in_slurmd()
}

pub fn in_slurmstepd() -> bool {
    slurm_sys::running_in_slurmstepd()
}
