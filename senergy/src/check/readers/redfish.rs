//! A Redfish BMC by its own request, configured as rust_redfish is: its energy counter where
//! the BMC keeps one, else its power now.

use slurm_energy_logic::{RedfishBmc, Sensor};
use std::time::Instant;

use super::reader::{Quantity, Reader, Scope, Slot, Unavailable, boxed};
use super::site::{NodeConf, configured};

/// The BMC acct_gather.conf names (`EnergyRedfishUrl`).
pub(super) fn slot(site: &NodeConf) -> Slot {
    Slot {
        name: "redfish",
        scope: Scope::WholeNode,
        reader: RedfishReader::open(site).map(boxed),
    }
}

struct RedfishReader {
    bmc: RedfishBmc,
    url: String,
    counts: bool,
}

impl RedfishReader {
    fn open(site: &NodeConf) -> Result<RedfishReader, Unavailable> {
        let config =
            configured::<slurm_energy_logic::Redfish>(site).map_err(Unavailable::Failed)?;
        let url = config.url.clone().ok_or_else(|| {
            Unavailable::Absent("acct_gather.conf names no EnergyRedfishUrl".into())
        })?;
        // the password from EnergyRedfishPasswordFile where set, which root alone may read
        let config = config.with_password().map_err(Unavailable::Failed)?;
        let bmc = RedfishBmc::connect(&config)
            .map_err(|e| Unavailable::Failed(format!("{url}: {e}")))?
            .sensor;
        let mut reader = RedfishReader {
            bmc,
            url,
            counts: false,
        };
        let sample = reader.sample()?;
        reader.counts = sample.energy_j.is_some();
        Ok(reader)
    }

    fn sample(&mut self) -> Result<slurm_energy_logic::Sample, Unavailable> {
        self.bmc
            .poll(Instant::now())
            .map_err(|e| Unavailable::Failed(format!("{}: {e}", self.url)))
    }
}

impl Reader for RedfishReader {
    fn path(&self) -> String {
        format!("{} ({})", self.url, self.bmc.describe())
    }
    fn scope(&self) -> Scope {
        Scope::WholeNode
    }
    fn quantity(&self) -> Quantity {
        if self.counts {
            Quantity::Energy
        } else {
            Quantity::Power
        }
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let sample = self.sample()?;
        match (self.counts, sample.energy_j) {
            (true, Some(j)) => Ok(j),
            (true, None) => Err(Unavailable::Failed(format!(
                "{}: the energy counter went away",
                self.url
            ))),
            (false, _) => Ok(sample.watts),
        }
    }
}
