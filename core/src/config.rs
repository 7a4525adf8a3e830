//! acct_gather.conf values as Slurm hands them over, and the errors that name bad ones.

use std::collections::HashMap;
use std::time::Duration;

/// The raw string value of each key a source declared; absent keys are not in the map.
#[derive(Debug, Default, Clone)]
pub struct KeyValues(HashMap<&'static str, String>);

impl KeyValues {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<String>) {
        self.0.insert(key, value.into());
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.trim())
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("acct_gather.conf: invalid {key}={value}: {reason}")]
pub struct ConfigError {
    pub key: &'static str,
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: &'static str, value: &str, reason: impl Into<String>) -> Self {
        Self {
            key,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// A sampling period in seconds, fractions accepted, from 0.1 to `max_secs`: energy between
/// two samples is interpolated, and a power step costs up to half a period of that step.
pub fn period_secs(key: &'static str, v: &str, max_secs: u64) -> Result<Duration, ConfigError> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (0.1..=max_secs as f64).contains(s))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| ConfigError::new(key, v, format!("expected seconds from 0.1 to {max_secs}")))
}
