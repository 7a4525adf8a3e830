//! `acct_gather_energy/rust_rapl`: node energy from RAPL counters (powercap sysfs or MSRs),
//! on Intel and AMD. Configuration keys: see `conf/acct_gather.conf.rust_rapl`.

slurm_energy::energy_plugin! {
    name: "AcctGatherEnergy RAPL plugin (Rust)",
    plugin: slurm_energy::Rapl,
}
