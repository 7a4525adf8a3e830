//! Which Slurm program loaded the plugin.

/// Only slurmd and slurmstepd measure; slurmctld loads the plugin for its
/// configuration only.
pub fn measures_here() -> bool {
    // SAFETY: plain getters exported by libslurmfull in every release.
    unsafe { slurm_sys::slurm_running_in_slurmd() || slurm_sys::slurm_running_in_slurmstepd() }
}
