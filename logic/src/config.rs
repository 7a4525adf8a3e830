//! acct_gather.conf values as Slurm hands them over, and the errors that name bad ones.

use std::collections::HashMap;
use std::fmt;
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

/// The value of `key` in the text of a Slurm configuration file (cgroup.conf,
/// acct_gather.conf): the last one given, as Slurm's parser keeps; keys are
/// case-insensitive and `#` starts a comment.
pub fn file_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|l| l.split('#').next()?.split_once('='))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case(key))
        .map(|(_, value)| value.trim())
        .rfind(|value| !value.is_empty())
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

/// A password that never appears in a log or `scontrol show config`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: &str) -> Self {
        Self(text.to_string())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hidden>")
    }
}

/// yes/no, true/false, on/off, 1/0.
pub fn boolean(key: &'static str, v: &str) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "yes" | "true" | "1" | "on" => Ok(true),
        "no" | "false" | "0" | "off" => Ok(false),
        _ => Err(ConfigError::new(key, v, "expected yes or no")),
    }
}
