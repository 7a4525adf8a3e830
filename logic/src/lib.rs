//! The logic of the Rust `acct_gather_energy` plugins, in safe Rust that knows nothing of
//! Slurm: it builds and unit-tests without Slurm's headers or libraries.
//!
//! The [`runtime`] is one plugin's behaviour in one process: it opens the [`plugin::Plugin`]'s
//! [`source::Source`], keeps a `meter` polling it into [`accounting`], and splits a shared
//! node's energy among its jobs ([`attribution`]). Sources (`rapl`, ...) are plain Rust over
//! files, testable without Slurm or the hardware. The [`scheduler`] decides the threads:
//! every background thread is a [`scheduler::worker::Worker`]; those that poll sources that
//! may block run the one loop of `scheduler::Poller`; every call from Slurm runs behind
//! the one panic [`guard`].
//!
//! Slurm's side (exported symbols, raw pointers, logging into the daemon's log,
//! acct_gather.conf) is the crate `slurm-energy`, which drives the [`runtime`] through its
//! [`runtime::Host`] and re-exports these modules.
//!
//! `unsafe` is forbidden here. Hardware is reached through safe wrappers (nix's `pread`,
//! ioctls of ipmi-rs); C libraries that need `unsafe` calls run in the sampler crate
//! (Variorum, which may crash or exit) or, where made to be called in-process, in the
//! small crate `slurm-energy-gpu-libs` beside `gpu` (NVML and amd-smi, behind the safe
//! `gpu::GpuLibrary`). A source that needs a vendor crate is a feature (`ipmi`, `redfish`,
//! `gpu`); every source's acct_gather.conf keys build without it, since every plugin of the
//! family registers them all ([`family`]).
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod accounting;
pub mod attribution;
pub mod config;
mod counter;
pub mod family;
pub mod gpu;
pub mod guard;
pub mod hostlist;
pub mod ipmi;
pub mod ledger;
mod meter;
pub mod metrics;
pub mod plugin;
pub mod pm_counters;
pub mod power;
pub mod rapl;
pub mod redfish;
mod replace;
pub mod runtime;
pub mod scheduler;
pub mod source;
pub mod trusted_dir;
pub mod variorum;
