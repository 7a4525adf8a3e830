//! What the GPU energy source needs from a vendor library (NVML, amd-smi), in safe
//! terms: [`GpuLibrary`], and the two that load and call the real libraries,
//! [`open_nvml`] and [`open_amd_smi`].
//!
//! The GPU source (`gpu` of `slurm-energy-logic`, which forbids `unsafe`) holds only
//! these; the C calls are in `vendors`, the one module of this crate allowed `unsafe`
//! (every block with its `// SAFETY:`).
#![deny(unsafe_code)]

// The one exception: dlopen, dlsym and the calls into NVML and amd-smi.
#[allow(unsafe_code)]
mod vendors;

pub use vendors::{open_amd_smi, open_nvml};

/// Linux character-device majors of GPU device files, as Slurm's gres.conf `File=` names
/// them and a devices cgroup lists them: `/dev/nvidiaN` (NVIDIA's fixed major) and
/// `/dev/dri/renderDN` (DRM).
pub const NVIDIA_MAJOR: u32 = 195;
pub const DRM_MAJOR: u32 = 226;

/// One GPU as its library enumerates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The library's index (enumeration order, which is not Slurm's).
    pub index: u32,
    /// The device file that gives access to this GPU: `(major, minor)`, as gres.conf's
    /// `File=` names it; `None` when the library cannot tell.
    pub file: Option<(u32, u32)>,
    /// For the log, and what its energy counter covers: the product and UUID (NVML), or
    /// the PCI bus id.
    pub name: String,
}

/// One MIG instance of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigInstance {
    pub gpu_instance: u32,
    pub compute_instance: u32,
    /// `MIG-...`, as `CUDA_VISIBLE_DEVICES` names it.
    pub uuid: String,
    /// Its streaming multiprocessors.
    pub sms: u32,
}

/// Why a GPU gave no figure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// This GPU has no such counter (NVML before Volta): read the power instead.
    #[error("not supported")]
    NotSupported,
    /// Fell off the bus or otherwise inaccessible until a reset.
    #[error("the GPU is lost")]
    Lost,
    #[error("{0}")]
    Failed(String),
}

/// A vendor library, opened (and initialised) in the poller thread.
pub trait GpuLibrary: Send {
    /// `NVML`, `amd-smi`.
    fn vendor(&self) -> &'static str;
    /// The GPUs it sees.
    fn devices(&mut self) -> Result<Vec<Device>, GpuError>;
    /// The GPU's energy counter in microjoules (it restarts when the driver reloads).
    fn energy_uj(&mut self, index: u32) -> Result<u64, GpuError>;
    /// The GPU's power draw in watts.
    fn power_w(&mut self, index: u32) -> Result<f64, GpuError>;
    /// Each process's use of the GPU so far, `(pid, use)`, cumulative since the library
    /// was opened, in the vendor's unit (NVML: SM utilization over time, percent-
    /// milliseconds; amd-smi: graphics-engine nanoseconds). `NotSupported` where the
    /// GPU reports none (MIG-enabled GPUs).
    fn process_use(&mut self, _index: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        Err(GpuError::NotSupported)
    }
    /// The GPU's MIG instances; empty where MIG is off or unsupported.
    fn mig_instances(&mut self, _index: u32) -> Result<Vec<MigInstance>, GpuError> {
        Ok(Vec::new())
    }
    /// Each MIG instance's SM activity so far, by GPU instance id: cumulative
    /// percent-milliseconds (NVML's GPM, Hopper and later). `NotSupported` where the GPU
    /// reports none.
    fn mig_activity(&mut self, _index: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        Err(GpuError::NotSupported)
    }
}
