//! acct_gather.conf values as Slurm hands them over, and the errors that name bad ones.

use std::collections::HashMap;

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
