//! Which Slurm program loaded the plugin.

/// Only slurmd and slurmstepd measure; slurmctld loads the plugin for its
/// configuration only.
pub fn measures_here() -> bool {
    in_slurmd() || in_slurmstepd()
}

pub fn in_slurmd() -> bool {
    // SAFETY: a plain getter exported by libslurmfull in every release.
    unsafe { slurm_sys::slurm_running_in_slurmd() }
}

pub fn in_slurmstepd() -> bool {
    // SAFETY: a plain getter exported by libslurmfull in every release.
    unsafe { slurm_sys::slurm_running_in_slurmstepd() }
}
