//! The rust_variorum keys of acct_gather.conf.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{ConfigError, KeyValues, config_keys, period_secs};
use crate::power::{parse_max_watts, show_max_watts};

/// A node power reading above this is no node's: more than the largest 8-GPU servers draw
/// (about 14 kW).
pub(super) const DEFAULT_MAX_WATTS: u32 = 20_000;

/// Variorum sets no SONAME version, so this is the name every install has; a bare name
/// lets the dynamic loader search (`LD_LIBRARY_PATH`, ld.so.cache), as pyVariorum does.
pub(super) const DEFAULT_LIBRARY: &str = "libvariorum.so";
/// The sampler executable's name; by default it is installed beside the plugin.
pub(super) const SAMPLER_FILE_NAME: &str = "acct_gather_energy_rust_variorum_sampler";

/// A power step costs up to half a period of that step (samples are interpolated): at the
/// former 10 s a job whose power stepped from 150 to 350 W mid-job lost 10%. One library
/// call a second costs the sampler well under 1% of a core.
const DEFAULT_PERIOD_SECS: u64 = 1;
const DEFAULT_TIMEOUT_SECS: u64 = 10;
/// Upper bound for the two durations: larger values are typing errors, and bounding them
/// keeps every `Instant + Duration` far from overflow.
const MAX_SECS: u64 = 86_400;

/// The sampler executable that goes with a plugin installed in `plugin_dir`.
pub(super) fn default_sampler_path(plugin_dir: &Path) -> PathBuf {
    plugin_dir.join(SAMPLER_FILE_NAME)
}

config_keys! {
    /// rust_variorum's acct_gather.conf keys: the library, the sampler and its pace.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct VariorumConfig {
        /// The Variorum library the sampler loads (Variorum 0.4 to 0.8): an absolute path,
        /// or a bare file name the dynamic loader searches for (LD_LIBRARY_PATH,
        /// ld.so.cache).
        pub library: String = DEFAULT_LIBRARY.into(), {
            KEY_LIBRARY = "EnergyVariorumLibrary": parse(|k, v| {
                // A relative path with a slash would be resolved against slurmd's working
                // directory, which is rarely what was meant.
                let bare_name = !v.is_empty() && !v.contains('/');
                if !(bare_name || v.starts_with('/')) || v.contains('\0') {
                    return Err(ConfigError::new(
                        k,
                        v,
                        "expected an absolute path (e.g. /opt/variorum/lib/libvariorum.so) \
                         or a bare file name for the dynamic loader to search",
                    ));
                }
                Ok(v.to_string())
            }),
            show(String::clone);
        }
        /// Seconds between two samples of the node's power, fractions accepted: how often
        /// the sampler calls Variorum. Energy between samples is interpolated, so a power
        /// step costs up to half a period of that step.
        pub period: Duration = Duration::from_secs(DEFAULT_PERIOD_SECS), {
            KEY_FREQUENCY = "EnergyVariorumFrequency": parse(|k, v| period_secs(k, v, MAX_SECS)),
                show(|p| p.as_secs_f64().to_string());
        }
        /// The helper program that loads Variorum and samples it outside slurmd, so that an
        /// exit, a crash or a hang of the library ends only the helper, which slurmd
        /// restarts: an absolute path. Not set: `acct_gather_energy_rust_variorum_sampler`
        /// in the plugin's own directory, where the package installs it.
        pub sampler: Option<PathBuf> = None, {
            KEY_SAMPLER = "EnergyVariorumSampler": parse(|k, v| {
                if !v.starts_with('/') || v.ends_with('/') || v.contains('\0') {
                    return Err(ConfigError::new(
                        k,
                        v,
                        format!("expected the absolute path of the {SAMPLER_FILE_NAME} executable"),
                    ));
                }
                Ok(Some(PathBuf::from(v)))
            }),
            show(|s| match sampler_path(s) {
                Ok(path) => path.display().to_string(),
                Err(_) => format!("{SAMPLER_FILE_NAME} beside the plugin"),
            });
        }
        /// Whole seconds slurmd waits for a sample before it kills the sampler and starts
        /// another.
        pub timeout: Duration = Duration::from_secs(DEFAULT_TIMEOUT_SECS), {
            KEY_TIMEOUT = "EnergyVariorumTimeout": parse(seconds), show(|t| t.as_secs().to_string());
        }
        /// The most power the node can draw, in whole watts: a reading above it (a glitch)
        /// is dropped, never counted as energy, and bridged from the readings around it.
        pub max_watts: Option<u32> = None, {
            KEY_MAX_WATTS = "EnergyVariorumMaxWatts": parse(|k, v| parse_max_watts(k, v).map(Some)),
                show(|w| show_max_watts(*w, DEFAULT_MAX_WATTS, false));
        }
    }
}

impl VariorumConfig {
    /// The sampler to run: the configured one, else the one beside the plugin.
    pub fn sampler_path(&self) -> Result<PathBuf, String> {
        sampler_path(&self.sampler)
    }
}

fn sampler_path(configured: &Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(path) = configured {
        return Ok(path.clone());
    }
    super::plugin_dir()
        .map(|dir| default_sampler_path(&dir))
        .ok_or_else(|| {
            format!(
                "{KEY_SAMPLER} is not set and the plugin's directory is unknown; \
                 set {KEY_SAMPLER}=/path/to/{SAMPLER_FILE_NAME}"
            )
        })
}

fn seconds(key: &'static str, v: &str) -> Result<Duration, ConfigError> {
    match v.parse::<u64>() {
        Ok(n) if (1..=MAX_SECS).contains(&n) => Ok(Duration::from_secs(n)),
        _ => Err(ConfigError::new(
            key,
            v,
            format!("expected whole seconds from 1 to {MAX_SECS}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&'static str, &str)]) -> Result<VariorumConfig, ConfigError> {
        let mut values = KeyValues::new();
        for (k, v) in pairs {
            values.set(k, *v);
        }
        VariorumConfig::parse(&values)
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).expect("defaults");
        assert_eq!(c, VariorumConfig::default());
        assert_eq!(c.library, "libvariorum.so");
        assert_eq!(c.period, Duration::from_secs(1));
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.sampler, None);
        assert_eq!(
            default_sampler_path(Path::new("/usr/lib/slurm")),
            PathBuf::from("/usr/lib/slurm/acct_gather_energy_rust_variorum_sampler")
        );
    }

    #[test]
    fn valid_values() {
        let c = parse(&[
            (KEY_LIBRARY, " /opt/variorum-0.8.0/lib/libvariorum.so "),
            (KEY_FREQUENCY, "30"),
            (
                KEY_SAMPLER,
                "/usr/libexec/slurm/acct_gather_energy_rust_variorum_sampler",
            ),
            (KEY_TIMEOUT, "5"),
            (KEY_MAX_WATTS, "3000"),
        ])
        .expect("valid");
        assert_eq!(c.max_watts, Some(3000));
        assert_eq!(c.library, "/opt/variorum-0.8.0/lib/libvariorum.so");
        assert_eq!(c.period, Duration::from_secs(30));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(
            c.sampler_path().expect("configured"),
            PathBuf::from("/usr/libexec/slurm/acct_gather_energy_rust_variorum_sampler")
        );
        let show = c.show();
        assert!(
            show.contains(&(KEY_FREQUENCY, "30".to_string())),
            "{show:?}"
        );
        assert_eq!(
            parse(&[(KEY_LIBRARY, "libvariorum.so.0")])
                .expect("bare")
                .library,
            "libvariorum.so.0"
        );
    }

    #[test]
    fn errors_name_the_key_and_the_value() {
        let cases = [
            (KEY_LIBRARY, ""),
            (KEY_LIBRARY, "lib/libvariorum.so"),
            (KEY_FREQUENCY, "0"),
            (KEY_FREQUENCY, "-5"),
            (KEY_FREQUENCY, "0.05"),
            (KEY_FREQUENCY, "ten"),
            (KEY_FREQUENCY, "86401"),
            (KEY_FREQUENCY, "99999999999999999999999"),
            (KEY_SAMPLER, "acct_gather_energy_rust_variorum_sampler"),
            (KEY_SAMPLER, "/usr/lib/slurm/"),
            (KEY_TIMEOUT, "0"),
            (KEY_TIMEOUT, "1s"),
            (KEY_MAX_WATTS, "0"),
            (KEY_MAX_WATTS, "-300"),
        ];
        for (key, value) in cases {
            let err = parse(&[(key, value)]).expect_err(value);
            let text = err.to_string();
            assert!(text.contains(&format!("{key}={value}")), "{text}");
        }
    }
}
