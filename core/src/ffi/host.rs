//! The runtime's [`Host`] inside a Slurm daemon.

use std::path::PathBuf;

use super::daemon;
use slurm_energy_logic::Grant;
use slurm_energy_logic::GresOrder;
use slurm_energy_logic::LoadJob;
use slurm_energy_logic::PrivateData;
use slurm_energy_logic::{Daemon, Host, RecordRefused};
use slurm_energy_logic::{Site, StepKey};

/// `plugin_type`: the plugin's `acct_gather_energy/<kind>`.
pub struct SlurmHost {
    pub plugin_type: &'static str,
}

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

    fn spool_dir(&self) -> Result<PathBuf, String> {
        super::slurm_conf::spool_dir()
    }

    fn slurm_user(&self) -> Option<u32> {
        super::slurm_conf::slurm_user()
    }

    fn energy_plugins(&self) -> usize {
        super::slurm_conf::energy_plugin_count().unwrap_or(1)
    }

    fn energy_plugin_types(&self) -> Vec<String> {
        super::slurm_conf::energy_plugin_types()
    }

    fn attribution_site(&self) -> Result<Site, String> {
        super::slurm_conf::attribution_site()
    }

    fn gres_order(&self) -> Result<GresOrder, String> {
        super::slurm_conf::gres_order()
    }

    fn node_name(&self) -> String {
        super::slurm_conf::node_name()
    }

    fn private_data(&self) -> PrivateData {
        super::slurm_conf::private_data()
    }

    fn step_record(&self, address: usize) -> Result<Grant, RecordRefused> {
        super::step_record::grant(address)
    }

    fn own_step(&self) -> Option<StepKey> {
        super::step_record::own_step()
    }

    fn job_records(&self) -> Option<LoadJob> {
        Some(super::job_record::load)
    }

    fn plugin_kind(&self) -> &'static str {
        self.plugin_type
            .strip_prefix("acct_gather_energy/")
            .unwrap_or(self.plugin_type)
    }
}
