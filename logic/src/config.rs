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

    /// Each key given, with its value, in the order of the keys' names.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let mut given: Vec<_> = self.0.iter().map(|(k, v)| (*k, v.trim())).collect();
        given.sort_unstable();
        given.into_iter()
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

/// `yes` or `no`, as [`boolean`] reads them back.
pub fn yes_no(b: &bool) -> String {
    if *b { "yes" } else { "no" }.into()
}

/// A configuration's keys, declared once: from one table it makes the struct, its
/// `Default`, each key's `pub const`, the key list (`KEYS`, in table order) registered
/// with Slurm, `parse` from acct_gather.conf's pairs and `show` for `scontrol show
/// config`, both in table order, so that a key is added in one place.
///
/// Each field names its default and one or more keys; each key its parser,
/// `fn(key, value) -> Result<field type, ConfigError>`, and how the field shows under it,
/// `fn(&field type) -> String`. A key without `show` is never shown (a password). A field
/// given by several keys takes the first one's value in table order, every one given
/// being checked. An optional `check`, `fn(&Self, &KeyValues) -> Result<(), ConfigError>`,
/// then judges keys together. The module imports `KeyValues` and `ConfigError`, which
/// the expansion names.
macro_rules! config_keys {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                pub $field:ident: $ty:ty = $default:expr, {
                    $( $konst:ident = $key:literal: parse($parse:expr) $(, show($show:expr))?; )+
                }
            )*
        }
        $(check: $check:expr;)?
    ) => {
        // the key names, public wherever the table's module is (a private module's stay inside)
        $( $( #[allow(unreachable_pub)] pub const $konst: &str = $key; )+ )*

        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: $default, )* }
            }
        }

        impl $name {
            /// Its acct_gather.conf keys.
            pub const KEYS: &'static [&'static str] = &[$( $( $konst, )+ )*];

            /// Validates the keys given; an error names the key and the value.
            pub fn parse(
                values: &KeyValues,
            ) -> Result<Self, ConfigError> {
                let mut config = Self::default();
                $(
                    let mut first: Option<$ty> = None;
                    $(
                        if let Some(v) = values.get($konst) {
                            let parse: fn(&'static str, &str) -> Result<$ty, ConfigError> = $parse;
                            let value = parse($konst, v)?;
                            if first.is_none() {
                                first = Some(value);
                            }
                        }
                    )+
                    if let Some(value) = first {
                        config.$field = value;
                    }
                )*
                $( let check: fn(&Self, &KeyValues) -> Result<(), ConfigError> = $check;
                   check(&config, values)?; )?
                Ok(config)
            }

            /// `(key, value)` for `scontrol show config`, defaults included.
            pub fn show(&self) -> Vec<(&'static str, String)> {
                let mut shown = Vec::new();
                $( $( $(
                    let show: fn(&$ty) -> String = $show;
                    shown.push(($konst, show(&self.$field)));
                )? )+ )*
                shown
            }
        }
    };
}
pub(crate) use config_keys;
