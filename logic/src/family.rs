//! The family's plugins, each declared once ([`family!`] below): its name after
//! `acct_gather_energy/`, the acct_gather.conf keys it registers and parses, and what it
//! measures, in words. Everything that says something of a plugin reads its entry: the keys
//! every plugin registers (here), `senergy check --conf`'s groups (`crate::conf_file`), the
//! key reference, the plugin's `plugin_type` (`energy_plugin!` takes it from
//! [`FamilyMember::KIND`]), and senergy's `measured` and `check`, which
//! match on [`PluginKind`] without a catch-all arm, so that a plugin they do not handle is
//! a compile error.
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
use crate::config::{ConfigError, KeyValues};
use crate::gpu::GpuConfig;
use crate::hwmon::HwmonConfig;
use crate::ipmi::{self, IpmiConfig};
use crate::metrics;
use crate::plugin::Plugin;
use crate::pm_counters::PmCountersConfig;
use crate::rapl::RaplConfig;
use crate::redfish::RedfishConfig;
use crate::variorum::VariorumConfig;

/// One plugin's entry: what [`family!`] makes of its declaration.
pub(crate) struct Entry {
    /// Its name after `acct_gather_energy/`: `rust_rapl`.
    pub(crate) name: &'static str,
    /// Every key it registers with Slurm (its `Plugin::KEYS`): its configuration's, and
    /// for rust_ipmi the keys of Slurm's own plugin it takes and ignores.
    pub(crate) registers: &'static [&'static str],
    /// The keys its configuration parses (`config_keys!`'s `KEYS`).
    pub(crate) parsed: &'static [&'static str],
    /// Its configuration's parse, as slurmd runs it (`senergy check --conf`).
    pub(crate) parse: fn(&KeyValues) -> Result<(), ConfigError>,
    /// Its keys' text and defaults, for the key reference (docs/keys.md).
    #[cfg(test)]
    pub(crate) reference: fn() -> Vec<crate::config::KeyDoc>,
    /// What its figure covers, in words, for senergy's reports.
    pub(crate) measures: &'static str,
}

/// A plugin's descriptor (what its `energy_plugin!` call names) as a member of the family:
/// which entry is its own. `family!` implements it for each descriptor it declares.
pub trait FamilyMember: Plugin {
    /// Its entry: its name (the plugin's `plugin_type` is `acct_gather_energy/` and it),
    /// keys and what it measures.
    const KIND: PluginKind;
}

/// Declares the family: for each plugin, one entry (`Variant { name, plugin, config,
/// measures }`, `registers` where it registers more keys than its configuration parses),
/// which makes its [`PluginKind`] variant, its [`Entry`] in [`PLUGINS`] (in the same order),
/// its descriptor's [`FamilyMember`] and its place in [`descriptors`].
macro_rules! family {
    ($(
        $(#[doc = $doc:literal])*
        $kind:ident {
            name: $name:literal,
            $(#[$built:meta])*
            plugin: $plugin:path,
            config: $config:ty,
            $(registers: $registers:expr,)?
            measures: $measures:literal $(,)?
        }
    ),+ $(,)?) => {
        /// A plugin of the family. senergy matches on it without a catch-all arm, so a
        /// plugin added here that it does not handle fails its build.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum PluginKind {
            $( $(#[doc = $doc])* $kind, )+
        }

        impl PluginKind {
            /// Every plugin of the family, in the order of its declaration.
            pub const ALL: &'static [PluginKind] = &[$( PluginKind::$kind, )+];
        }

        $(
            $(#[$built])*
            impl FamilyMember for $plugin {
                const KIND: PluginKind = PluginKind::$kind;
            }
        )+

        /// Each plugin's descriptor, what its `energy_plugin!` call names
        /// (`slurm_energy::Rapl`, ...): the crate's surface and core's re-export them whole,
        /// so a plugin declared here needs no line of its own there.
        pub mod descriptors {
            $( $(#[$built])* pub use $plugin; )+
        }

        /// Each plugin's entry, in the order of [`PluginKind`].
        pub(crate) const PLUGINS: &[Entry] = &[$(
            Entry {
                name: $name,
                registers: family!(@registers $config $(, $registers)?),
                parsed: <$config>::KEYS,
                parse: |values| <$config>::parse(values).map(|_| ()),
                #[cfg(test)]
                reference: <$config>::reference,
                measures: $measures,
            },
        )+];
    };
    (@registers $config:ty) => { <$config>::KEYS };
    (@registers $config:ty, $registers:expr) => { $registers };
}

// The family: each plugin declared once.
family! {
    /// `rust_rapl`: the CPU packages' and DRAM's RAPL counters.
    Rapl {
        name: "rust_rapl",
        plugin: crate::rapl::Rapl,
        config: RaplConfig,
        measures: "rapl: CPU packages+DRAM",
    },
    /// `rust_ipmi`: the node's power from its BMC (DCMI or SDR sensors).
    Ipmi {
        name: "rust_ipmi",
        #[cfg(feature = "ipmi")]
        plugin: crate::ipmi::Ipmi,
        config: IpmiConfig,
        registers: ipmi::KEYS,
        measures: "ipmi: whole node, as its BMC sees it",
    },
    /// `rust_variorum`: LLNL Variorum's node power, from its sampler process.
    Variorum {
        name: "rust_variorum",
        plugin: crate::variorum::Variorum,
        config: VariorumConfig,
        measures: "variorum: CPU packages+DRAM (Variorum's node power)",
    },
    /// `rust_gpu`: the GPUs' energy counters (NVML, amd-smi).
    Gpu {
        name: "rust_gpu",
        #[cfg(feature = "gpu")]
        plugin: crate::gpu::Gpus,
        config: GpuConfig,
        measures: "gpu: GPU boards",
    },
    /// `rust_pm_counters`: a Cray EX node controller's files.
    PmCounters {
        name: "rust_pm_counters",
        plugin: crate::pm_counters::PmCounters,
        config: PmCountersConfig,
        measures: "pm_counters: whole node, as its controller meters it",
    },
    /// `rust_redfish`: the node's power from its BMC's Redfish service.
    Redfish {
        name: "rust_redfish",
        #[cfg(feature = "redfish")]
        plugin: crate::redfish::Redfish,
        config: RedfishConfig,
        measures: "redfish: whole node, as its BMC sees it",
    },
    /// `rust_hwmon`: the kernel's hwmon power and energy sensors.
    Hwmon {
        name: "rust_hwmon",
        plugin: crate::hwmon::Hwmon,
        config: HwmonConfig,
        measures: "hwmon: the power meters hwmon shows (GH200: the modules)",
    },
}

impl PluginKind {
    const fn member(self) -> &'static Entry {
        &PLUGINS[self as usize]
    }

    /// Its name after `acct_gather_energy/`: `rust_rapl`.
    pub const fn name(self) -> &'static str {
        self.member().name
    }

    /// The keys it registers with Slurm (what its `Plugin::KEYS` is).
    pub const fn keys(self) -> &'static [&'static str] {
        self.member().registers
    }

    /// What its figure covers, in words: `rapl: CPU packages+DRAM`.
    pub const fn measures(self) -> &'static str {
        self.member().measures
    }

    /// The plugin a `plugin_type` names (`acct_gather_energy/rust_rapl` or `rust_rapl`),
    /// if it is one of the family's.
    pub fn named(plugin_type: &str) -> Option<PluginKind> {
        let name = plugin_type.rsplit('/').next().unwrap_or(plugin_type);
        PluginKind::ALL.iter().copied().find(|k| k.name() == name)
    }
}

/// The keys of the runtime every plugin reads beside its source's: attribution, Slurm's
/// step record, the metrics file.
pub(crate) const RUNTIME: [&[&str]; 3] = [attribution::KEYS, StepRecordConfig::KEYS, metrics::KEYS];

/// Every key of the family, each once: the runtime's, then each plugin's. What every
/// plugin registers with Slurm and reads from the parsed file.
pub fn keys() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for key in RUNTIME
        .iter()
        .chain(PLUGINS.iter().map(|member| &member.registers))
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
    PLUGINS.iter().map(|member| member.name).collect()
}

/// The plugin of the family whose key `key` is, if any.
pub(crate) fn owner(key: &str) -> Option<&'static str> {
    PLUGINS
        .iter()
        .find(|member| member.registers.iter().any(|k| k.eq_ignore_ascii_case(key)))
        .map(|member| member.name)
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
        for &Entry {
            name, registers, ..
        } in PLUGINS
        {
            for key in registers {
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
            .flat_map(|member| member.registers.iter())
            .chain(RUNTIME.iter().flat_map(|keys| keys.iter()))
            .map(|k| k.to_ascii_lowercase())
            .collect();
        let n = lower.len();
        lower.sort();
        lower.dedup();
        assert_eq!(lower.len(), n, "a key is declared twice");
        assert_eq!(all.len(), n);
    }

    /// Each descriptor names its own entry, and each entry is found by its name; what it
    /// parses, it registers.
    #[test]
    fn each_plugin_is_its_entry() {
        fn own<P: FamilyMember>(kind: PluginKind) {
            assert_eq!(P::KIND, kind);
            assert_eq!(
                P::KEYS,
                kind.keys(),
                "{kind:?}: the table names its Plugin::KEYS"
            );
        }
        own::<crate::rapl::Rapl>(PluginKind::Rapl);
        own::<crate::variorum::Variorum>(PluginKind::Variorum);
        own::<crate::pm_counters::PmCounters>(PluginKind::PmCounters);
        own::<crate::hwmon::Hwmon>(PluginKind::Hwmon);
        #[cfg(feature = "ipmi")]
        own::<crate::ipmi::Ipmi>(PluginKind::Ipmi);
        #[cfg(feature = "gpu")]
        own::<crate::gpu::Gpus>(PluginKind::Gpu);
        #[cfg(feature = "redfish")]
        own::<crate::redfish::Redfish>(PluginKind::Redfish);
        assert_eq!(PluginKind::Ipmi.keys(), ipmi::KEYS);
        assert_eq!(PluginKind::ALL.len(), PLUGINS.len());
        for &kind in PluginKind::ALL {
            assert_eq!(PluginKind::named(kind.name()), Some(kind));
            let prefixed = format!("acct_gather_energy/{}", kind.name());
            assert_eq!(PluginKind::named(&prefixed), Some(kind));
            assert!(kind.name().starts_with("rust_"), "{kind:?}");
            for key in kind.member().parsed {
                assert!(kind.keys().contains(key), "{kind:?}: {key}");
            }
        }
        assert_eq!(PluginKind::named("acct_gather_energy/ipmi"), None);
        assert_eq!(PluginKind::named("none"), None);
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
