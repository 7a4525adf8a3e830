//! The runtime's [`Host`] inside a Slurm daemon.

use super::daemon;
use super::slurmd_node::SlurmdNode;
use crate::attribution::Site;
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
        super::slurm_conf::energy_plugin_count().unwrap_or(1)
    }

    fn attribution_site(&self) -> Result<Site, String> {
        super::slurm_conf::attribution_site()
    }
}
