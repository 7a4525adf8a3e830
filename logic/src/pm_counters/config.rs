//! The rust_pm_counters key of acct_gather.conf.

use std::path::PathBuf;

use crate::config::{ConfigError, KeyValues};

pub const KEY_DIR: &str = "EnergyPmCountersDir";
pub const KEYS: &[&str] = &[KEY_DIR];

const DEFAULT_DIR: &str = "/sys/cray/pm_counters";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmCountersConfig {
    /// Where the node controller's files are.
    pub dir: PathBuf,
}

impl Default for PmCountersConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from(DEFAULT_DIR),
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
        Ok(c)
    }

    pub fn show(&self) -> Vec<(&'static str, String)> {
        vec![(KEY_DIR, self.dir.display().to_string())]
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
            vec![(KEY_DIR, "/tmp/pm".to_string())]
        );
    }
}
