//! The rust_gpu keys of acct_gather.conf.

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
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GpuConfig {
        /// NVML to load; `None`: NVIDIA GPUs are not read.
        pub nvml: Option<String> = Some(DEFAULT_NVML.into()), {
            KEY_NVML = "EnergyGpuNvmlLibrary": parse(library), show(shown_library);
        }
        /// amd-smi to load; `None`: AMD GPUs are not read.
        pub amd: Option<String> = Some(DEFAULT_AMD.into()), {
            KEY_AMD = "EnergyGpuAmdLibrary": parse(library), show(shown_library);
        }
        /// The most one GPU may draw; `None`: `DEFAULT_MAX_WATTS`.
        pub max_watts: Option<u32> = None, {
            KEY_MAX_WATTS = "EnergyGpuMaxWatts": parse(|k, v| parse_max_watts(k, v).map(Some)),
                show(|w| show_max_watts(*w, DEFAULT_MAX_WATTS, false));
        }
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
                (KEY_MAX_WATTS, "5000".to_string())
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
