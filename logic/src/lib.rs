//! The logic of the Rust `acct_gather_energy` plugins, in safe Rust that knows nothing of
//! Slurm: it builds and unit-tests without Slurm's headers or libraries.
//!
//! The [`Runtime`] is one plugin's behaviour in one process: it opens the [`Plugin`]'s
//! [`Source`], keeps a `meter` polling it into `accounting` at the period opening it
//! returned ([`Opened`]), and splits a shared node's energy among its jobs
//! ([`Attribution`]). Sources (the counters [`Rapl`] opens, ...) are plain Rust over files,
//! testable without Slurm or the hardware. The module `scheduler` decides the threads: every
//! background thread is a `scheduler::worker::Worker`; those that poll sensors that may
//! block ([`Sensor`]) and the GPUs run the one loop of `scheduler::Poller`; every call from
//! Slurm runs behind the one panic [`guard()`].
//!
//! Slurm's side (exported symbols, raw pointers, logging into the daemon's log,
//! acct_gather.conf) is the crate `slurm-energy`, which drives the [`Runtime`] through its
//! [`Host`] and re-exports the plugins' descriptors.
//!
//! The modules are private: what other crates use is the list of `pub use` below, grouped
//! by the crate that uses it (docs/development.md says how to count it).
//!
//! `unsafe` is forbidden here. Hardware is reached through safe wrappers (nix's `pread`,
//! ioctls of ipmi-rs); C libraries that need `unsafe` calls run in the sampler crate
//! (Variorum, which may crash or exit) or, where made to be called in-process, in the
//! small crate `slurm-energy-gpu-libs` beside `gpu` (NVML and amd-smi, behind the safe
//! `gpu::GpuLibrary`). A source that needs a vendor crate is a feature (`ipmi`, `redfish`,
//! `gpu`); every source's acct_gather.conf keys build without it, since every plugin of the
//! family registers them all ([`family_keys`]).
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]
#![deny(missing_docs)]

mod accounting;
mod attribution;
mod conf_file;
mod config;
mod counter;
mod exchange;
mod family;
mod gpu;
mod guard;
pub mod hostlist;
mod hwmon;
mod ipmi;
mod ledger;
mod meter;
mod metrics;
mod plugin;
mod pm_counters;
mod power;
mod rapl;
mod redfish;
mod replace;
mod runtime;
mod scheduler;
mod source;
mod stack;
#[cfg(test)]
mod test_support;
mod trusted_dir;
pub mod variorum;

// The surface, by consumer: only what some crate outside uses. `hostlist` (senergy's scopes)
// and `variorum` (the wire the rust_variorum plugin shares with its sampler process) stay
// namespaces.

// core (slurm-energy): the runtime it drives through its Host, a plugin's keys and symbols,
// and what it reads from Slurm for attribution.
pub use accounting::EnergyRecord;
pub use attribution::grant::{Grant, GresHeld, StepdId};
pub use attribution::gres::GresOrder;
pub use attribution::job_record::{JobRecord, LoadJob};
pub use attribution::{Site, StepId, StepKey, cgroup_mountpoint, own_step, spool_for_node};
pub use config::KeyValues;
pub use family::keys as family_keys;
pub use family::{FamilyMember, PluginKind};
pub use guard::guard;
pub use metrics::PrivateData;
pub use plugin::{Opened, Plugin};
pub use runtime::{Answer, Daemon, Host, Query, RecordRefused, Runtime, Update};
pub use scheduler::worker::on_abandon;

// plugins/*: each plugin's descriptor (as the family declares them), and the sensor trait
// the variorum sampler's tests drive.
pub use family::descriptors::{self, *};
pub use source::{Failure, Sensor};

// senergy: the ledger and doorbell it reads, the configuration it checks, and the sources
// `senergy check` opens (the Redfish BMC by its own request).
pub use attribution::procs::Procs;
pub use conf_file::{Finding, Severity, check as check_acct_gather_conf, check_slurm_conf};
pub use config::file_value;
pub use exchange::doorbell::{Ring, doorbell_path, freshen, ring_without_waiting};
pub use family::plugins as family_plugins;
pub use hwmon::{HwmonConfig, counted_files as hwmon_counted_files};
pub use ipmi::{IpmiConfig, Target as IpmiTarget};
pub use ledger::{
    Breakdown, IdleHeld, Ledger, LedgerError, STATIC_POWER_SUSTAIN_SECS, ledger_path,
    unix as unix_time,
};
pub use pm_counters::{PmCountersConfig, parse_value as parse_pm_counters_value};
#[cfg(feature = "redfish")]
pub use redfish::RedfishBmc;
pub use source::{Sample, Source};
pub use trusted_dir::trust_slurm_user;

// tests (logic/tests, energy-tests' benchmarks): the parsers and configurations they drive
// with outside input.
pub use attribution::cgroup::{CgroupTree, JobDir, count_cpus};
pub use attribution::job_record::{StepRecordConfig, gres_on_node};
pub use attribution::procs::{Found, SCAN_GAP, SCAN_WAIT, Scans, TITLE_BYTES, search};
pub use attribution::{Attribution, KEYS as ATTRIBUTION_KEYS};
pub use config::ConfigError;
pub use ledger::Account;
pub use metrics::{KEYS as METRICS_KEYS, MetricsConfig};
pub use rapl::{
    KEY_DOMAINS as RAPL_KEY_DOMAINS, RaplConfig, RaplSettings, SourceChoice, SystemPaths,
    parse_cpuinfo,
};
#[cfg(feature = "redfish")]
pub use redfish::Method as RedfishMethod;
pub use redfish::RedfishConfig;
pub use source::Reading;
