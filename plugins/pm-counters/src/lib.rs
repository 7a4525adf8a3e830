//! `acct_gather_energy/rust_pm_counters`: node energy from an HPE Cray EX node controller's
//! meter (`/sys/cray/pm_counters`), with cpu, memory and accelerator energy beside it.
//! Configuration keys: see `conf/acct_gather.conf.rust_pm_counters`.

slurm_energy::energy_plugin! {
    name: "AcctGatherEnergy HPE Cray pm_counters plugin (Rust)",
    plugin: slurm_energy::PmCounters,
}
