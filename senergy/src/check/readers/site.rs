//! What a node's readers are opened from: its name and acct_gather.conf, read as the plugins
//! read it.

use std::path::Path;

use slurm_energy_logic::Plugin;
use slurm_energy_logic::{KeyValues, file_value};

/// What the readers are opened from.
pub struct NodeConf<'a> {
    pub node: &'a str,
    /// acct_gather.conf's text (empty where there is none).
    pub acct_gather: &'a str,
    /// The perf PMU's sysfs directory ([`super::PERF_POWER_PMU`]).
    pub perf_pmu: &'a Path,
    /// Whether RAPL's DRAM domains count (what the plugin measures says so).
    pub rapl_dram: bool,
    /// Whether the plugins include rust_redfish (only then is a Redfish BMC configured).
    pub redfish: bool,
}

/// A source's configuration from acct_gather.conf, as the plugin reads it, for this node.
pub(super) fn configured<P: Plugin>(site: &NodeConf) -> Result<P::Config, String> {
    let mut values = KeyValues::new();
    for key in P::KEYS {
        if let Some(v) = file_value(site.acct_gather, key) {
            values.set(key, v);
        }
    }
    let config = P::parse_config(&values).map_err(|e| e.to_string())?;
    Ok(P::for_node(&config, site.node))
}
