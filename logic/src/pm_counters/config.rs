//! The rust_pm_counters key of acct_gather.conf.

use std::path::PathBuf;

use crate::config::{ConfigError, KeyValues, config_keys};
use crate::power::{parse_max_watts, show_max_watts};

/// More than any node draws: a power reading above it, or a counter rising faster, is no
/// node's.
pub(super) const DEFAULT_MAX_WATTS: u32 = 50_000;

const DEFAULT_DIR: &str = "/sys/cray/pm_counters";

config_keys! {
    /// rust_pm_counters' acct_gather.conf keys: where the counters are.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PmCountersConfig {
        /// The directory of the node controller's power and energy counters on HPE Cray EX
        /// nodes (`energy`, `power`, `cpu_energy`, `freshness`, ...): an absolute path.
        pub dir: PathBuf = PathBuf::from(DEFAULT_DIR), {
            KEY_DIR = "EnergyPmCountersDir": parse(|k, v| {
                if !v.starts_with('/') {
                    return Err(ConfigError::new(k, v, "expected an absolute directory path"));
                }
                Ok(PathBuf::from(v))
            }),
            show(|d| d.display().to_string());
        }
        /// The most power the node can draw, in whole watts: the energy counter rising
        /// faster (a controller restart, a bad read) is not counted as energy, and a power
        /// reading above it is never taken as the node's power, which estimates the energy
        /// of a gap.
        pub max_watts: Option<u32> = None, {
            KEY_MAX_WATTS = "EnergyPmCountersMaxWatts": parse(|k, v| parse_max_watts(k, v).map(Some)),
                show(|w| show_max_watts(*w, DEFAULT_MAX_WATTS, false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_errors() {
        let mut values = KeyValues::new();
        assert_eq!(
            PmCountersConfig::parse(&values).expect("default").dir,
            PathBuf::from("/sys/cray/pm_counters")
        );
        values.set(KEY_DIR, "pm_counters");
        let e = PmCountersConfig::parse(&values).expect_err("relative");
        assert!(
            e.to_string().contains("EnergyPmCountersDir=pm_counters"),
            "{e}"
        );
        values.set(KEY_DIR, " /tmp/pm ");
        assert_eq!(
            PmCountersConfig::parse(&values).expect("valid").show(),
            vec![
                (KEY_DIR, "/tmp/pm".to_string()),
                (KEY_MAX_WATTS, "50000".to_string())
            ]
        );
        values.set(KEY_MAX_WATTS, "4000");
        assert_eq!(
            PmCountersConfig::parse(&values).expect("valid").max_watts,
            Some(4000)
        );
        values.set(KEY_MAX_WATTS, "none");
        let e = PmCountersConfig::parse(&values).expect_err("not watts");
        assert!(
            e.to_string().contains("EnergyPmCountersMaxWatts=none"),
            "{e}"
        );
    }
}
