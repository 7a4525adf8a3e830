//! The acct_gather.conf keys of the whole family, registered by each of its plugins.
//!
//! Slurm's `acct_gather_conf_init` is fatal at a key no loaded plugin registered, so a
//! file that configures several plugins of the family (one acct_gather.conf pushed to
//! CPU-only and GPU nodes, the README's block) would stop every daemon whose plugin lacks
//! one of them. Every plugin therefore registers every key of the family, reads its own
//! and the runtime's, and says at debug level which others it ignores. A key registered twice
//! (two stacked plugins) is one key to Slurm's parser (`parse_config.c`, 22.05 to 26.05):
//! the later entry heads its hash chain, so the file's value is stored in it and every
//! lookup (each plugin's `conf_set`, the table packed for slurmstepd) finds it there.

use crate::attribution::{self, job_record::StepRecordConfig};
use crate::gpu::GpuConfig;
use crate::hwmon::HwmonConfig;
use crate::ipmi;
use crate::metrics;
use crate::pm_counters::PmCountersConfig;
use crate::rapl::RaplConfig;
use crate::redfish::RedfishConfig;
use crate::variorum::VariorumConfig;

/// Each plugin of the family, by its name after `acct_gather_energy/`, with the keys it
/// reads (its `Plugin::KEYS`).
pub(crate) const PLUGINS: [(&str, &[&str]); 7] = [
    ("rust_rapl", RaplConfig::KEYS),
    ("rust_ipmi", ipmi::KEYS),
    ("rust_variorum", VariorumConfig::KEYS),
    ("rust_gpu", GpuConfig::KEYS),
    ("rust_pm_counters", PmCountersConfig::KEYS),
    ("rust_redfish", RedfishConfig::KEYS),
    ("rust_hwmon", HwmonConfig::KEYS),
];

/// The keys of the runtime every plugin reads beside its source's: attribution, Slurm's
/// step record, the metrics file.
pub(crate) const RUNTIME: [&[&str]; 3] = [attribution::KEYS, StepRecordConfig::KEYS, metrics::KEYS];

/// Every key of the family, each once: the runtime's, then each plugin's. What every
/// plugin registers with Slurm and reads from the parsed file.
pub fn keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for key in RUNTIME
        .iter()
        .chain(PLUGINS.iter().map(|(_, keys)| keys))
        .flat_map(|keys| keys.iter())
    {
        if !keys.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            keys.push(key);
        }
    }
    keys
}

/// The family's plugins, by their names after `acct_gather_energy/`.
pub fn plugins() -> Vec<&'static str> {
    PLUGINS.iter().map(|(name, _)| *name).collect()
}

/// The plugin of the family whose key `key` is, if any.
pub(crate) fn owner(key: &str) -> Option<&'static str> {
    PLUGINS
        .iter()
        .find(|(_, keys)| keys.iter().any(|k| k.eq_ignore_ascii_case(key)))
        .map(|(name, _)| *name)
}

/// Whether a plugin reading `own` keys reads `key`: its own or the runtime's.
pub(crate) fn reads(own: &[&str], key: &str) -> bool {
    own.iter()
        .chain(RUNTIME.iter().flat_map(|keys| keys.iter()))
        .any(|k| k.eq_ignore_ascii_case(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_every_plugin_and_the_runtime_once() {
        let all = keys();
        for (name, own) in PLUGINS {
            for key in own {
                assert!(all.contains(key), "{name}'s {key}");
                assert_eq!(owner(key), Some(name), "{key}");
            }
        }
        for key in RUNTIME.iter().flat_map(|keys| keys.iter()) {
            assert!(all.contains(key), "{key}");
            assert_eq!(owner(key), None, "the runtime's {key} is no plugin's");
        }
        // Slurm's keys are case-insensitive: no two plugins may share one, in any case
        let mut lower: Vec<String> = PLUGINS
            .iter()
            .flat_map(|(_, keys)| keys.iter())
            .chain(RUNTIME.iter().flat_map(|keys| keys.iter()))
            .map(|k| k.to_ascii_lowercase())
            .collect();
        let n = lower.len();
        lower.sort();
        lower.dedup();
        assert_eq!(lower.len(), n, "a key is declared twice");
        assert_eq!(all.len(), n);
    }

    /// The table names each plugin's `Plugin::KEYS`, not a copy.
    #[test]
    fn the_table_is_each_plugins_keys() {
        use crate::plugin::Plugin;
        fn of(name: &str) -> &'static [&'static str] {
            PLUGINS.iter().find(|(n, _)| *n == name).expect(name).1
        }
        assert_eq!(of("rust_rapl"), crate::rapl::Rapl::KEYS);
        assert_eq!(of("rust_variorum"), crate::variorum::Variorum::KEYS);
        assert_eq!(of("rust_pm_counters"), crate::pm_counters::PmCounters::KEYS);
        assert_eq!(of("rust_hwmon"), crate::hwmon::Hwmon::KEYS);
        #[cfg(feature = "ipmi")]
        assert_eq!(of("rust_ipmi"), crate::ipmi::Ipmi::KEYS);
        #[cfg(feature = "gpu")]
        assert_eq!(of("rust_gpu"), crate::gpu::Gpus::KEYS);
        #[cfg(feature = "redfish")]
        assert_eq!(of("rust_redfish"), crate::redfish::Redfish::KEYS);
    }

    #[test]
    fn a_plugin_reads_its_own_and_the_runtimes_keys_only() {
        let rapl = RaplConfig::KEYS;
        assert!(reads(rapl, "EnergyRaplSource"));
        assert!(reads(rapl, attribution::MODE_KEY));
        assert!(reads(rapl, "energymetricsfile"));
        assert!(!reads(rapl, "EnergyRedfishUrl"));
        assert!(!reads(rapl, "EnergyIPMIHost"));
    }
}
