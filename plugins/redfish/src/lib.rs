//! `acct_gather_energy/rust_redfish`: node energy from a Redfish BMC (an energy counter
//! where the BMC has one, else its power integrated), polled by a thread in slurmd; steps
//! read its ledger. Configuration keys: see `conf/acct_gather.conf.rust_redfish`.

slurm_energy::energy_plugin! {
    name: "AcctGatherEnergy Redfish plugin (Rust)",
    plugin: slurm_energy::Redfish,
}
