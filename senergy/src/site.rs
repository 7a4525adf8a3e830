//! The site file (`/etc/slurm/senergy.conf`) and the tariff it makes with the flags: each
//! factor of every scope, the price, and the stamp that says where they came from. Apart
//! from [`crate::carbon`] (the intensity series it reads) and [`crate::scopes`] (how the
//! factors make emissions), which both stand without it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::carbon::{Intensities, JOULES_PER_KWH, TariffError, is_figure};
use crate::scopes::{self, Factor, NodeClass, NodeClassEntry, NodeFeatures, Origin, Stamp};

/// The site file (`/etc/slurm/senergy.conf`, TOML).
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SiteFile {
    /// gCO2e per kWh, used for the hours the CSV does not cover.
    pub carbon_intensity: Option<f64>,
    /// An intensity series: `time,g_co2e_per_kwh` (unix seconds or RFC 3339), or an
    /// Electricity Maps or RTE éCO2mix export as downloaded (from ODRE, or the `.xls` in
    /// rte-france.com's zip files).
    pub carbon_intensity_csv: Option<PathBuf>,
    pub price_per_kwh: Option<f64>,
    pub currency: Option<String>,
    /// The Prometheus that scrapes the nodes' metrics files (`EnergyMetricsFile`).
    pub prometheus_url: Option<String>,
    /// The site's name for this set of factors, stamped in every report.
    pub version: Option<String>,
    /// Scope 2 market-based: the contract's gCO2e per kWh, and its series.
    pub market_intensity: Option<f64>,
    pub market_intensity_csv: Option<PathBuf>,
    /// The facility's power usage effectiveness, and its series (`time,pue`).
    pub pue: Option<f64>,
    pub pue_csv: Option<PathBuf>,
    /// The real mailer `senergy mail` hands every mail to [default: /usr/bin/mail].
    pub mailer: Option<PathBuf>,
    /// How many of `senergy mail`'s summaries may wait for accounting at once, 1 to 64
    /// [default: 8] ([`crate::slots`]); the other end-of-job mails go at once without one.
    pub mail_summaries: Option<u32>,
    /// Scope 3: `[[node_class]]` tables.
    #[serde(default)]
    pub node_class: Vec<NodeClassEntry>,
}

impl SiteFile {
    pub fn parse(path: &Path, text: &str) -> Result<SiteFile, TariffError> {
        let site: SiteFile = toml::from_str(text).map_err(|e| TariffError::Config {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().replace('\n', " "),
        })?;
        if let Some(n) = site
            .mail_summaries
            .filter(|n| !(1..=crate::slots::MAX_SLOTS).contains(n))
        {
            return Err(TariffError::Config {
                path: path.to_path_buf(),
                message: format!(
                    "mail_summaries = {n}: from 1 to {} (slurmctld runs at most {} MailProgs)",
                    crate::slots::MAX_SLOTS,
                    crate::slots::MAX_SLOTS
                ),
            });
        }
        Ok(site)
    }
}

/// Where a job's emissions and cost come from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tariff {
    /// Scope 2 location-based: the grid's gCO2e/kWh.
    pub location: Factor,
    /// Scope 2 market-based: the contract's gCO2e/kWh.
    pub market: Factor,
    pub pue: Factor,
    /// Scope 3: the node classes, in the site file's order.
    pub classes: Vec<NodeClass>,
    /// The nodes' features (slurm.conf), where a class matches by feature.
    pub node_features: NodeFeatures,
    pub stamp: Stamp,
    pub price_per_kwh: Option<f64>,
    pub currency: String,
}

impl Tariff {
    pub fn new(
        intensity: Option<f64>,
        series: Option<Intensities>,
        price_per_kwh: Option<f64>,
        currency: Option<String>,
    ) -> Result<Tariff, TariffError> {
        for (what, value) in [
            ("carbon_intensity", intensity),
            ("price_per_kwh", price_per_kwh),
        ] {
            if let Some(value) = value.filter(|v| !is_figure(*v)) {
                return Err(TariffError::OutOfRange { what, value });
            }
        }
        Ok(Tariff {
            location: Factor {
                value: intensity,
                series,
                origin: Origin::default(),
            },
            price_per_kwh,
            currency: currency.unwrap_or_default(),
            ..Tariff::default()
        })
    }

    /// The market-based factor, checked as the location-based one is.
    pub fn with_market(mut self, market: Factor) -> Result<Tariff, TariffError> {
        if let Some(value) = market.value.filter(|v| !is_figure(*v)) {
            return Err(TariffError::OutOfRange {
                what: "market_intensity",
                value,
            });
        }
        self.market = market;
        Ok(self)
    }

    /// The PUE, each of its values from 1 to 10.
    pub fn with_pue(mut self, pue: Factor) -> Result<Tariff, TariffError> {
        for value in pue
            .value
            .into_iter()
            .chain(pue.series.iter().flat_map(|s| s.values()))
        {
            scopes::check_pue(value)?;
        }
        self.pue = pue;
        Ok(self)
    }

    /// The node classes of the site file at `path`, each checked.
    pub fn with_classes(
        mut self,
        path: &Path,
        entries: Vec<NodeClassEntry>,
    ) -> Result<Tariff, TariffError> {
        self.classes = entries
            .into_iter()
            .map(NodeClass::new)
            .collect::<Result<_, _>>()
            .map_err(|message| TariffError::Config {
                path: path.to_path_buf(),
                message,
            })?;
        Ok(self)
    }

    /// Whether some factor varies over time (then when the energy was spent matters).
    pub fn varies(&self) -> bool {
        [&self.location, &self.market, &self.pue]
            .iter()
            .any(|f| f.series.is_some())
    }

    /// Whether a factor beyond the location-based intensity is set: the reports then
    /// show the emissions by scope.
    pub fn has_scopes(&self) -> bool {
        self.market.is_set() || self.pue.is_set() || !self.classes.is_empty()
    }

    /// The Scope 2 factors: location, market, PUE.
    pub fn factors(&self) -> [&Factor; 3] {
        [&self.location, &self.market, &self.pue]
    }

    /// gCO2e of `joules` spent evenly over `[start, end)` (unix seconds): each piece of the
    /// run at the series' intensity then, the static one where the series has none. `None`
    /// if some piece has neither. The IT energy's, location-based (before any PUE).
    pub fn emissions_g(&self, joules: f64, start: f64, end: f64) -> Option<f64> {
        scopes::weighted(joules / JOULES_PER_KWH, start, end, &[&self.location])
    }

    pub fn cost(&self, joules: f64) -> Option<f64> {
        self.price_per_kwh.map(|p| joules / JOULES_PER_KWH * p)
    }

    /// The intensity in words for reports ("350 gCO2e/kWh", "... series, else 350").
    pub fn intensity_text(&self) -> Option<String> {
        match (&self.location.series, self.location.value) {
            (Some(s), Some(g)) => Some(format!("{} series, else {g} gCO2e/kWh", s.format)),
            (Some(s), None) => Some(format!("{} series", s.format)),
            (None, Some(g)) => Some(format!("{g} gCO2e/kWh")),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests;
