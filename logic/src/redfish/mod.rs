//! Node energy from a Redfish BMC over HTTP(S): an energy counter where the BMC has one,
//! else its power, integrated (see `resources` for the order). Every chassis member is
//! read and summed unless one is named. One client (and session) lives in the poller
//! thread of [`crate::power::Polled`], so no Slurm call ever waits on the BMC; steps ask
//! slurmd.

#[cfg(feature = "redfish")]
mod bmc;
#[cfg(feature = "redfish")]
mod client;
// the keys, in every build: each plugin of the family registers them (crate::family)
mod config;
#[cfg(feature = "redfish")]
mod resources;

#[cfg(feature = "redfish")]
pub use bmc::{Redfish, RedfishBmc};
pub use config::RedfishConfig;
#[cfg(feature = "redfish")]
pub use resources::Method;
