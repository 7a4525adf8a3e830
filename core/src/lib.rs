//! The shared core of the Rust `acct_gather_energy` plugins.
//!
//! Layers: [`ffi`] is the only place that touches Slurm (raw pointers, `unsafe`); it turns
//! Slurm's calls into calls on the safe [`runtime`], which keeps a [`meter`] sampling the
//! plugin's [`source::Source`] into [`accounting`]. Sources (`rapl`, ...) are plain Rust
//! over files, testable without Slurm or the hardware. Every background thread is a
//! [`worker::Worker`].

pub mod accounting;
pub mod config;
pub mod counter;
pub mod ffi;
mod guard;
#[cfg(feature = "ipmi")]
pub mod ipmi;
pub mod meter;
pub mod pm_counters;
pub mod power;
pub mod rapl;
#[cfg(feature = "redfish")]
pub mod redfish;
pub mod remote;
pub mod runtime;
pub mod source;
#[cfg(feature = "variorum")]
pub mod variorum;
pub mod worker;
