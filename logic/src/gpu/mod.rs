//! GPU energy: NVIDIA through NVML, AMD through amd-smi, each GPU's own energy counter
//! (its power where it has none), and each process's use of each GPU.
//!
//! slurmd reads every GPU of the node, and its ledger charges each job the GPUs Slurm
//! allocated to it (a shared GPU split among its holders): see
//! [`crate::attribution::gres`] for how a step's GPUs are known, matched to the library's
//! GPUs by device file (NVIDIA's `/dev/nvidiaN` minor, the DRM render node's) or, where
//! Slurm detected them with the library, its order.
//!
//! Vendor libraries can block for seconds (a GPU falling off the bus), so only a poller
//! thread in this process calls them; Slurm's calls read what it published. An
//! in-process poller rather than a helper process (as rust_variorum has): NVML and
//! amd-smi are designed to be called in-process (Slurm's own gpu plugins do, in slurmd and
//! slurmstepd) and report errors by return code rather than crashing. A hung
//! call holds only the poller: its GPUs' readings go stale and become unavailable
//! (NO_VAL), never 0 J; a Slurm call waits for the poller at most `FRESH_WAIT`, and not
//! at all once a round is stuck.

// the keys, in every build: each plugin of the family registers them (crate::family); their
// parsing is rust_gpu's only, built with the feature
#[cfg_attr(not(feature = "gpu"), allow(dead_code, unreachable_pub))]
pub(crate) mod config;
/// The vendor libraries in safe terms: the crate `slurm-energy-gpu-libs`.
#[cfg(feature = "gpu")]
pub(crate) use slurm_energy_gpu_libs as library;
#[cfg(feature = "gpu")]
mod reader;

pub(crate) use config::GpuConfig;
#[cfg(feature = "gpu")]
pub use reader::Gpus;
