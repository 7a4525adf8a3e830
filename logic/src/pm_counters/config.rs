//! The rust_pm_counters key of acct_gather.conf.

use std::path::PathBuf;

use crate::config::{ConfigError, KeyValues};

pub const KEY_DIR: &str = "EnergyPmCountersDir";
pub const KEY_MAX_WATTS: &str = "EnergyPmCountersMaxWatts";
pub(super) const KEYS: &[&str] = &[KEY_DIR, KEY_MAX_WATTS];

/// More than any node draws: a power reading above it, or a counter rising faster, is no
/// node's.
pub(super) const DEFAULT_MAX_WATTS: u32 = 50_000;

const DEFAULT_DIR: &str = "/sys/cray/pm_counters";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmCountersConfig {
    /// Where the node controller's files are.
    pub dir: PathBuf,
    /// The most the node may draw; `None`: [`DEFAULT_MAX_WATTS`].
    pub max_watts: Option<u32>,
}

impl Default for PmCountersConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from(DEFAULT_DIR),
            max_watts: None,
        }
    }
}

impl PmCountersConfig {
    pub fn parse(values: &KeyValues) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        if let Some(v) = values.get(KEY_DIR) {
            if !v.starts_with('/') {
                return Err(ConfigError::new(
                    KEY_DIR,
                    v,
                    "expected an absolute directory path",
                ));
            }
            c.dir = PathBuf::from(v);
        }
        if let Some(v) = values.get(KEY_MAX_WATTS) {
            c.max_watts = Some(crate::power::parse_max_watts(KEY_MAX_WATTS, v)?);
        }
        Ok(c)
    }

    pub fn show(&self) -> Vec<(&'static str, String)> {
        vec![
            (KEY_DIR, self.dir.display().to_string()),
            (
                KEY_MAX_WATTS,
                crate::power::show_max_watts(self.max_watts, DEFAULT_MAX_WATTS, false),
            ),
        ]
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
