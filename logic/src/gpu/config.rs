//! The rust_gpu keys of acct_gather.conf.

use crate::attribution::{self, idle_watts, shown_idle_watts};
use crate::config::{ConfigError, KeyValues, config_keys};
use crate::power::{parse_max_watts, show_max_watts};

/// More than any GPU draws (the largest draw about 1.2 kW): a power reading above it, or a
/// counter rising faster, is no GPU's.
pub(super) const DEFAULT_MAX_WATTS: u32 = 5_000;

/// What the NVIDIA driver installs (the soname, found through the loader's path).
const DEFAULT_NVML: &str = "libnvidia-ml.so.1";
/// ROCm's amd-smi library (in /opt/rocm/lib, which ROCm adds to the loader's path).
const DEFAULT_AMD: &str = "libamd_smi.so";
/// Turns one vendor off, e.g. on nodes that have only the other's GPUs.
const NONE: &str = "none";

config_keys! {
    #[derive(Debug, Clone, PartialEq)]
    pub struct GpuConfig {
        /// The NVIDIA Management Library (NVML) that rust_gpu loads to read NVIDIA GPUs: a
        /// file name the dynamic loader searches for, an absolute path, or `none` to read
        /// no NVIDIA GPU (on nodes with only AMD GPUs, say).
        pub nvml: Option<String> = Some(DEFAULT_NVML.into()), {
            KEY_NVML = "EnergyGpuNvmlLibrary": parse(library), show(shown_library);
        }
        /// ROCm's amd-smi library that rust_gpu loads to read AMD GPUs: a file name the
        /// dynamic loader searches for (ROCm puts `/opt/rocm/lib` on its path), an absolute
        /// path, or `none` to read no AMD GPU.
        pub amd: Option<String> = Some(DEFAULT_AMD.into()), {
            KEY_AMD = "EnergyGpuAmdLibrary": parse(library), show(shown_library);
        }
        /// The most power one GPU can draw, in whole watts: a GPU's energy counter rising
        /// faster (a reset, a bad read) is not counted as energy; on a GPU without an
        /// energy counter, a power reading above it is dropped and bridged from the
        /// readings around it.
        pub max_watts: Option<u32> = None, {
            KEY_MAX_WATTS = "EnergyGpuMaxWatts": parse(|k, v| parse_max_watts(k, v).map(Some)),
                show(|w| show_max_watts(*w, DEFAULT_MAX_WATTS, false));
        }
        /// Each GPU's idle power in watts. Of a GPU that several jobs share (`gres/shard`,
        /// `gres/mps`, MIG instances) the idle part goes by the shares each job holds, the
        /// rest by each job's use, whatever `EnergyAttribution` says; a GPU one job holds
        /// alone is all that job's. One figure for every GPU that reads the file: set it
        /// only where all are of one model. Not set: each GPU learns its own, the lowest
        /// power it held over 10 s. rust_gpu does not read the node meter's
        /// `EnergyAttributionIdleWatts`.
        pub idle_watts: Option<f64> = None, {
            KEY_IDLE_WATTS = "EnergyGpuIdleWatts": parse(idle_watts), show(shown_idle_watts);
        }
    }
    check: GpuConfig::check;
}

impl GpuConfig {
    /// The node meter's idle key set for a GPU, as it was read before the GPUs had theirs:
    /// it says which key is whose (the GPUs' idle power is then learned).
    fn check(&self, values: &KeyValues) -> Result<(), ConfigError> {
        if self.idle_watts.is_none() && values.get(attribution::IDLE_KEY).is_some() {
            log::info!(
                "{} is the node meter's static power, which rust_gpu does not read; each GPU's \
                 idle power is {KEY_IDLE_WATTS} (not set: learned per GPU)",
                attribution::IDLE_KEY
            );
        }
        Ok(())
    }
}

/// A library as dlopen takes it: a file name searched on the loader's path, or an
/// absolute path; `none` turns the vendor off.
fn library(key: &'static str, v: &str) -> Result<Option<String>, ConfigError> {
    if v.eq_ignore_ascii_case(NONE) {
        return Ok(None);
    }
    if v.is_empty() || (v.contains('/') && !v.starts_with('/')) {
        return Err(ConfigError::new(
            key,
            v,
            "expected a library file name, an absolute path, or none",
        ));
    }
    Ok(Some(v.to_string()))
}

fn shown_library(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| NONE.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_none_and_errors() {
        let mut values = KeyValues::new();
        let c = GpuConfig::parse(&values).expect("default");
        assert_eq!(c.nvml.as_deref(), Some("libnvidia-ml.so.1"));
        assert_eq!(c.amd.as_deref(), Some("libamd_smi.so"));
        values.set(KEY_AMD, "None");
        values.set(KEY_NVML, "/opt/nvml/libnvidia-ml.so.1");
        let c = GpuConfig::parse(&values).expect("valid");
        assert_eq!(
            c.show(),
            vec![
                (KEY_NVML, "/opt/nvml/libnvidia-ml.so.1".to_string()),
                (KEY_AMD, "none".to_string()),
                (KEY_MAX_WATTS, "5000".to_string()),
                (KEY_IDLE_WATTS, "(learned)".to_string())
            ]
        );
        values.set(KEY_MAX_WATTS, "1200");
        assert_eq!(
            GpuConfig::parse(&values).expect("valid").max_watts,
            Some(1200)
        );
        values.set(KEY_MAX_WATTS, "1.2kW");
        let e = GpuConfig::parse(&values).expect_err("not whole watts");
        assert!(e.to_string().contains("EnergyGpuMaxWatts=1.2kW"), "{e}");
        values.set(KEY_MAX_WATTS, "1200");
        values.set(KEY_NVML, "lib/libnvidia-ml.so");
        let e = GpuConfig::parse(&values).expect_err("relative path");
        assert!(
            e.to_string()
                .contains("EnergyGpuNvmlLibrary=lib/libnvidia-ml.so"),
            "{e}"
        );
    }
}
