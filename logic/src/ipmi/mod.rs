//! Node power from the BMC over IPMI (ipmi-rs): DCMI Get Power Reading or SDR power
//! sensors, in-band (`/dev/ipmi0`) or out of band (RMCP+).

mod bmc;
mod config;
#[cfg(test)]
mod proptests;
mod protocol;

pub use bmc::Bmc;
pub use config::{IpmiConfig, PowerSensors, Target};

/// The rust_ipmi source: the BMC polled by a thread in slurmd; steps read its ledger.
pub type Ipmi = Bmc;
