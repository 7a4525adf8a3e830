//! `acct_gather_energy/rust_gpu`: the energy of the node's NVIDIA (NVML) and AMD (amd-smi)
//! GPUs; in a step, of the GPUs Slurm gave it. Stacks with rust_rapl.
//! Configuration keys: see `conf/acct_gather.conf.rust_gpu`.

slurm_energy::energy_plugin! {
    name: "AcctGatherEnergy GPU plugin (Rust)",
    plugin: slurm_energy::Gpus,
}
