//! `acct_gather_energy/rust_hwmon`: node energy from the kernel's hwmon power and energy
//! sensors (`/sys/class/hwmon`): ACPI power meters, NVIDIA Grace and Grace Hopper rails,
//! energy counters. Configuration keys: see `conf/acct_gather.conf.rust_hwmon`.

slurm_energy::energy_plugin! {
    name: "AcctGatherEnergy hwmon plugin (Rust)",
    plugin: slurm_energy::Hwmon,
}
