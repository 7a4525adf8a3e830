//! `acct_gather_energy/rust_ipmi`: node power from the BMC over IPMI (DCMI Get Power
//! Reading or SDR power sensors), in-band or out of band (RMCP+), polled by one thread in
//! slurmd; steps read its ledger. Configuration keys: see `conf/acct_gather.conf.rust_ipmi`.

slurm_energy::energy_plugin! {
    name: "AcctGatherEnergy IPMI plugin (Rust)",
    plugin: slurm_energy::Ipmi,
}
