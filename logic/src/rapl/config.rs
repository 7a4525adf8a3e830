//! The rust_rapl keys of acct_gather.conf.

use std::path::PathBuf;

use super::domain::Domain;
use crate::config::{ConfigError, KeyValues, config_keys};

const DEFAULT_MSR_DEVICE: &str = "/dev/cpu/%d/msr";

/// Which counters rust_rapl reads (`EnergyRAPLSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SourceChoice {
    /// powercap when its counters are readable, else MSRs.
    #[default]
    Auto,
    /// The kernel's powercap files (`intel-rapl`).
    Powercap,
    /// The MSRs, through `/dev/cpu/N/msr`.
    Msr,
}

impl SourceChoice {
    fn as_str(self) -> &'static str {
        match self {
            SourceChoice::Auto => "auto",
            SourceChoice::Powercap => "powercap",
            SourceChoice::Msr => "msr",
        }
    }
}

config_keys! {
    /// rust_rapl's acct_gather.conf keys: which counters it reads, and where.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RaplConfig {
        /// Where the CPUs' RAPL energy counters are read: `powercap`, the kernel's files
        /// under `/sys/class/powercap`; `msr`, the CPUs' model-specific registers, through
        /// `EnergyRaplMsrDevice` (it needs the `msr` kernel module); `auto`, powercap where
        /// its counters are readable, else the MSRs. slurmd's log says which was chosen and
        /// why another was not.
        pub source: SourceChoice = SourceChoice::Auto, {
            KEY_SOURCE = "EnergyRaplSource": parse(|k, v| {
                [SourceChoice::Auto, SourceChoice::Powercap, SourceChoice::Msr]
                    .into_iter()
                    .find(|c| c.as_str().eq_ignore_ascii_case(v))
                    .ok_or_else(|| ConfigError::new(k, v, "expected auto, powercap or msr"))
            }),
            show(|s| s.as_str().into());
        }
        /// The device file of each CPU's MSRs, read with `EnergyRaplSource=msr` (or `auto`
        /// without readable powercap counters): an absolute path in which `%d`, once,
        /// stands for the CPU number; `/dev/cpu/%d/msr_safe` for msr-safe.
        pub msr_device: String = DEFAULT_MSR_DEVICE.into(), {
            KEY_MSR_DEVICE = "EnergyRaplMsrDevice": parse(|k, v| {
                if !v.starts_with('/') || v.matches("%d").count() != 1 || v.contains("%%") {
                    return Err(ConfigError::new(
                        k,
                        v,
                        "expected an absolute path with one %d for the CPU number, \
                         e.g. /dev/cpu/%d/msr_safe",
                    ));
                }
                Ok(v.to_string())
            }),
            show(String::clone);
        }
        /// The RAPL domains whose energy, summed over the sockets, is the node's: one or
        /// more of `package`, `dram` and `psys`, separated by commas. `psys` is the whole
        /// platform (Intel client parts) and includes the package: listed with `package`,
        /// the package is counted twice (a warning). A domain listed that the CPUs do not
        /// have is an error. Not set: `package`, and `dram` where the CPUs have it.
        pub domains: Option<Vec<Domain>> = None, {
            KEY_DOMAINS = "EnergyRaplDomains": parse(|_, v| parse_domains(v).map(Some)),
            show(|d| match d {
                Some(list) => list.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(","),
                None => "package,dram(where present)".into(),
            });
        }
    }
}

impl RaplConfig {
    /// The MSR device file of `cpu`.
    pub fn msr_path(&self, cpu: u32) -> PathBuf {
        PathBuf::from(self.msr_device.replacen("%d", &cpu.to_string(), 1))
    }
}

fn parse_domains(v: &str) -> Result<Vec<Domain>, ConfigError> {
    let mut domains = Vec::new();
    for word in v.split(',') {
        let domain: Domain = word.parse().map_err(|()| {
            ConfigError::new(
                KEY_DOMAINS,
                v,
                format!(
                    "unknown domain {:?}; expected package, dram or psys",
                    word.trim()
                ),
            )
        })?;
        if domains.contains(&domain) {
            return Err(ConfigError::new(
                KEY_DOMAINS,
                v,
                format!("{domain} is listed twice"),
            ));
        }
        domains.push(domain);
    }
    Ok(domains)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&'static str, &str)]) -> Result<RaplConfig, ConfigError> {
        let mut values = KeyValues::new();
        for (k, v) in pairs {
            values.set(k, *v);
        }
        RaplConfig::parse(&values)
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).expect("defaults");
        assert_eq!(c, RaplConfig::default());
        assert_eq!(c.msr_path(3), PathBuf::from("/dev/cpu/3/msr"));
    }

    #[test]
    fn valid_values() {
        let c = parse(&[
            (KEY_SOURCE, "MSR"),
            (KEY_MSR_DEVICE, "/dev/cpu/%d/msr_safe"),
            (KEY_DOMAINS, "package, dram,psys"),
        ])
        .expect("valid");
        assert_eq!(c.source, SourceChoice::Msr);
        assert_eq!(c.msr_path(12), PathBuf::from("/dev/cpu/12/msr_safe"));
        assert_eq!(
            c.domains,
            Some(vec![Domain::Package, Domain::Dram, Domain::Psys])
        );
    }

    #[test]
    fn errors_name_the_key_and_the_value() {
        let cases = [
            (KEY_SOURCE, "sysfs"),
            (KEY_MSR_DEVICE, "/dev/cpu/0/msr"),
            (KEY_MSR_DEVICE, "dev/%d/msr"),
            (KEY_MSR_DEVICE, "/dev/%d/%d"),
            (KEY_DOMAINS, "package,gpu"),
            (KEY_DOMAINS, "dram,dram"),
            (KEY_DOMAINS, ""),
        ];
        for (key, value) in cases {
            let err = parse(&[(key, value)]).expect_err(value);
            let text = err.to_string();
            assert!(text.contains(&format!("{key}={value}")), "{text}");
        }
    }
}
