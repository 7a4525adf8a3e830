//! `acct_gather_energy/rust_variorum`: node power from LLNL Variorum. The library runs in
//! `acct_gather_energy_rust_variorum_sampler`, a helper process slurmd's poller starts and
//! supervises, so that Variorum's exits, crashes, noise and hangs never reach slurmd; steps
//! read its ledger. Configuration keys: see `conf/acct_gather.conf.rust_variorum`.

slurm_energy::energy_plugin! {
    name: "AcctGatherEnergy Variorum plugin (Rust)",
    plugin: slurm_energy::Variorum,
}
