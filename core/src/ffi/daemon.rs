//! Which Slurm program loaded the plugin.

pub fn in_slurmd() -> bool {
    // SAFETY: a plain getter exported by libslurmfull in every release.
    unsafe { slurm_sys::slurm_running_in_slurmd() }
}

pub fn in_slurmstepd() -> bool {
    // SAFETY: a plain getter exported by libslurmfull in every release.
    unsafe { slurm_sys::slurm_running_in_slurmstepd() }
}
