//! The runtime's [`Host`] inside a Slurm daemon.

use super::daemon;
use super::slurmd_node::SlurmdNode;
use crate::meter::Metering;
use crate::runtime::{Daemon, Host, metered};

pub struct SlurmHost;

impl Host for SlurmHost {
    fn daemon(&self) -> Daemon {
        if daemon::in_slurmstepd() {
            Daemon::Slurmstepd
        } else if daemon::in_slurmd() {
            Daemon::Slurmd
        } else {
            Daemon::Other
        }
    }

    fn slurmd_node(&self, context_id: u16) -> Result<Box<dyn Metering>, String> {
        SlurmdNode::start(context_id).map(metered)
    }

    fn energy_plugins(&self) -> usize {
        energy_plugin_count().unwrap_or(1)
    }
}

/// The plugins `AcctGatherEnergyType` names, from the daemon's `slurm_conf` (looked up at
/// run time: a variable of libslurmfull that a plugin must not bind at load).
fn energy_plugin_count() -> Option<usize> {
    // SAFETY: dlsym with the default handle and a NUL-terminated name.
    let conf = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"slurm_conf".as_ptr()) };
    if conf.is_null() {
        return None;
    }
    // SAFETY: `slurm_conf` is libslurmfull's `slurm_conf_t`, laid out as in the headers the
    // plugin is built from (which must be the running release's); the daemon read
    // slurm.conf before it loaded energy plugins, and the string lives until exit.
    let names = unsafe {
        let types = (*conf.cast::<slurm_sys::slurm_conf_t>()).acct_gather_energy_type;
        if types.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(types)
            .to_string_lossy()
            .into_owned()
    };
    Some(names.split(',').filter(|n| !n.trim().is_empty()).count())
}
