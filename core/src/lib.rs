//! The shared core of the Rust `acct_gather_energy` plugins.
//!
//! Layers: [`ffi`] is the only place that touches Slurm (raw pointers, `unsafe`); it turns
//! Slurm's calls into calls on the safe [`meter`], which samples an [`source::EnergySource`]
//! into [`accounting`]. Sources (`rapl`, ...) are plain Rust over files, testable without
//! Slurm or the hardware.

pub mod accounting;
pub mod config;
pub mod counter;
pub mod ffi;
#[cfg(feature = "ipmi")]
pub mod ipmi;
pub mod meter;
pub mod pm_counters;
pub mod power;
pub mod rapl;
#[cfg(feature = "redfish")]
pub mod redfish;
pub mod remote;
pub mod source;
#[cfg(feature = "variorum")]
pub mod variorum;
