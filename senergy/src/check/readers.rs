//! The independent readers `senergy check --compare` sets beside slurmd's figure: each reads
//! the node's hardware through another path than the plugin's. RAPL through the kernel's
//! perf PMU (not powercap, not the MSR files); the BMC through `ipmitool` or FreeIPMI's
//! `ipmi-dcmi`; GPUs through `nvidia-smi` and `amd-smi`; a Redfish BMC by its own request;
//! a Cray node controller's pm_counters files; hwmon's power meters. Each says what it covers; one that is not
//! there, or may not be read, says so ([`Unavailable`]) and is never an error of the check.
//! This module opens the readers a node may have; [`reader`] says what a reader is, [`site`]
//! what they are opened from; each kind of reader is a module of its own, whose parsers
//! take the tools' real output formats and are unit-tested there.

mod gpu;
mod hwmon;
mod ipmi;
mod pm_counters;
mod rapl_perf;
mod reader;
mod redfish;
mod site;
mod tool;

use slurm_energy_logic::{Plugin, PluginKind, hwmon_counted_files};

pub use rapl_perf::PERF_POWER_PMU;
pub use reader::{Quantity, Reader, Scope, Slot, Unavailable};
pub use site::NodeConf;
use site::configured;

/// Every reader this node may have, each opened and read once.
pub fn open_all(site: &NodeConf) -> Vec<Slot> {
    let mut slots = vec![rapl_perf::slot(site), ipmi::slot(site)];
    if site.redfish {
        slots.push(redfish::slot(site));
    }
    slots.push(pm_counters::slot(site));
    slots.push(hwmon::slot(site));
    slots.extend(gpu::slots());
    slots
}

/// Where slurmd has no reading from `plugin_type`: its source probed directly, as the
/// plugin opens it (RAPL, pm_counters, hwmon) or through the independent readers of its
/// hardware (BMC, Redfish, GPUs); what was found, or why nothing. Each plugin of the family
/// has its arm (a plugin without one does not compile).
pub fn probe(plugin_type: &str, site: &NodeConf) -> Result<String, String> {
    use slurm_energy_logic::Source;
    fn open<P: Plugin>(site: &NodeConf) -> Result<String, String> {
        let config = configured::<P>(site)?;
        P::open(&config).map(|opened| opened.source.describe())
    }
    let Some(kind) = PluginKind::named(plugin_type) else {
        return Err(format!("{plugin_type}: no probe"));
    };
    let slots = match kind {
        PluginKind::Rapl => return open::<slurm_energy_logic::Rapl>(site),
        PluginKind::PmCounters => return open::<slurm_energy_logic::PmCounters>(site),
        PluginKind::Hwmon => {
            let config = configured::<slurm_energy_logic::Hwmon>(site)?;
            return hwmon_counted_files(&config.keys).map(|files| {
                let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
                format!("hwmon power sensors {}", files.join(" + "))
            });
        }
        PluginKind::Ipmi => vec![ipmi::slot(site)],
        PluginKind::Redfish => vec![redfish::slot(site)],
        PluginKind::Gpu => gpu::slots(),
        PluginKind::Variorum => vec![rapl_perf::slot(site)],
    };
    let (found, missing): (Vec<_>, Vec<_>) = slots.into_iter().partition(|s| s.reader.is_ok());
    if let Some(slot) = found.first()
        && let Ok(reader) = &slot.reader
    {
        return Ok(format!("{} answers: {}", slot.name, reader.path()));
    }
    Err(missing
        .iter()
        .filter_map(|s| s.reader.as_ref().err())
        .map(|u| format!("{} ({})", u.detail(), u.status()))
        .collect::<Vec<_>>()
        .join("; "))
}
