//! Node power from the BMC over IPMI (ipmi-rs): DCMI Get Power Reading or SDR power
//! sensors, in-band (`/dev/ipmi0`) or out of band (RMCP+).

#[cfg(feature = "ipmi")]
mod bmc;
// the keys, in every build: each plugin of the family registers them (crate::family)
mod config;
#[cfg(all(test, feature = "ipmi"))]
mod proptests;
#[cfg(feature = "ipmi")]
mod protocol;

#[cfg(feature = "ipmi")]
pub use bmc::Ipmi;
pub(crate) use config::KEYS;
#[cfg(test)]
pub(crate) use config::{IGNORED_KEYS, KEY_VARIABLE};
pub use config::{IpmiConfig, Target};
