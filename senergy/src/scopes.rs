//! Emissions by GHG scope. Scope 2 is the electricity's: location-based (the grid's
//! intensity) and market-based (the site's contract), both on the facility's energy, the IT
//! energy accounting holds times the PUE. Scope 3 here is the embodied emissions of the
//! nodes, amortised per node-hour from the site's life-cycle assessment of each node class.
//! Every factor keeps where it came from (a flag, the site file), for the report's stamp.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::carbon::{Intensities, TariffError};
use slurm_energy_logic::hostlist;

/// Hours in a year of a node's lifetime (365 days).
pub const HOURS_PER_YEAR: f64 = 8760.0;

/// A factor that may vary over time: a series' value where it has one, the static value
/// elsewhere; none where neither holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Factor {
    pub value: Option<f64>,
    pub series: Option<Intensities>,
    pub origin: Origin,
}

/// Where a factor's static value and its series came from: a flag's name or `site file`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Origin {
    pub value_from: Option<&'static str>,
    pub series_path: Option<PathBuf>,
    pub series_from: Option<&'static str>,
}

impl Factor {
    pub fn is_set(&self) -> bool {
        self.value.is_some() || self.series.is_some()
    }

    fn at(&self, t: f64) -> Option<f64> {
        self.series.as_ref().and_then(|s| s.at(t)).or(self.value)
    }

    /// `{value, value_from, series, series_format, series_from}` for the JSON's stamp.
    fn json(&self) -> serde_json::Value {
        if !self.is_set() {
            return serde_json::Value::Null;
        }
        serde_json::json!({
            "value": self.value,
            "value_from": self.origin.value_from,
            "series": self.origin.series_path,
            "series_format": self.series.as_ref().map(|s| s.format),
            "series_from": self.origin.series_from,
        })
    }

    /// `350 gCO2e/kWh (--carbon-intensity)`, `series /x/grid.csv (site file), else 350 ...`.
    fn text(&self, unit: &str) -> Option<String> {
        let value = self
            .value
            .map(|v| format!("{v}{unit} ({})", self.origin.value_from.unwrap_or("given")));
        let series = self.series.as_ref().map(|s| {
            let path = self
                .origin
                .series_path
                .as_ref()
                .map(|p| format!(" {}", p.display()))
                .unwrap_or_default();
            format!(
                "{} series{path} ({})",
                s.format,
                self.origin.series_from.unwrap_or("given")
            )
        });
        match (series, value) {
            (Some(s), Some(v)) => Some(format!("{s}, else {v}")),
            (s, v) => s.or(v),
        }
    }
}

/// `amount` spread evenly over `[start, end)` (unix seconds), each moment's share times
/// the product of the factors then (a series' step or its static value). `None` if some
/// moment lacks a factor. A run of no length takes the factors at its start.
pub fn weighted(amount: f64, start: f64, end: f64, factors: &[&Factor]) -> Option<f64> {
    let product = |t: f64| factors.iter().map(|f| f.at(t)).product::<Option<f64>>();
    if end <= start || factors.iter().all(|f| f.series.is_none()) {
        return product(start).map(|f| amount * f);
    }
    let mut bounds = vec![start, end];
    for series in factors.iter().filter_map(|f| f.series.as_ref()) {
        bounds.extend(series.bounds(start, end));
    }
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    let duration = end - start;
    bounds
        .windows(2)
        .map(|w| product(w[0]).map(|f| amount * (w[1] - w[0]) / duration * f))
        .sum()
}

/// A node class of the site file (`[[node_class]]`): the nodes it holds, by name or by
/// feature, and its life-cycle assessment.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeClassEntry {
    pub name: String,
    /// A Slurm hostlist: `nid[001000-006859]`.
    pub nodes: Option<String>,
    /// Features of slurm.conf's NodeName lines: a node with any of them is of the class.
    #[serde(default)]
    pub features: Vec<String>,
    /// The embodied emissions of one node (manufacture, transport, its share of network
    /// and storage), kgCO2e.
    pub embodied_kgco2e: f64,
    pub lifetime_years: f64,
    /// The fraction of its lifetime a node is expected to run jobs, (0, 1].
    pub utilisation: f64,
    /// Where the figures come from (a study, a vendor's PCF), shown in the stamp.
    pub source: Option<String>,
}

/// A node class, checked, its hostlist expanded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClass {
    pub entry: NodeClassEntry,
    names: BTreeSet<String>,
}

impl NodeClass {
    /// Refuses, naming the class and key, a class that matches nothing or whose figures
    /// are out of range.
    pub fn new(entry: NodeClassEntry) -> Result<NodeClass, String> {
        let name = &entry.name;
        let bad = |key: &str, value: f64, range: &str| {
            Err(format!(
                "node_class {name:?}: {key} = {value}: must be {range}"
            ))
        };
        if name.is_empty() {
            return Err("node_class: name is empty".into());
        }
        if !(0.0..=1e9).contains(&entry.embodied_kgco2e) {
            return bad("embodied_kgco2e", entry.embodied_kgco2e, ">= 0 and <= 1e9");
        }
        if !(entry.lifetime_years > 0.0 && entry.lifetime_years <= 100.0) {
            return bad("lifetime_years", entry.lifetime_years, "> 0 and <= 100");
        }
        if !(entry.utilisation > 0.0 && entry.utilisation <= 1.0) {
            return bad("utilisation", entry.utilisation, "> 0 and <= 1");
        }
        let names = match &entry.nodes {
            Some(list) => hostlist::expand(list)
                .map_err(|e| format!("node_class {name:?}: nodes = {list:?}: {e}"))?
                .into_iter()
                .collect(),
            None => BTreeSet::new(),
        };
        if names.is_empty() && entry.features.is_empty() {
            return Err(format!(
                "node_class {name:?}: names neither nodes nor features: it would match no node"
            ));
        }
        Ok(NodeClass { entry, names })
    }

    /// kgCO2e per node-hour: embodied / (lifetime hours x utilisation).
    pub fn kg_per_node_hour(&self) -> f64 {
        let e = &self.entry;
        e.embodied_kgco2e / (e.lifetime_years * HOURS_PER_YEAR * e.utilisation)
    }

    fn holds(&self, node: &str, features: Option<&BTreeSet<String>>) -> bool {
        self.names.contains(node)
            || features.is_some_and(|f| self.entry.features.iter().any(|x| f.contains(x)))
    }

    fn json(&self) -> serde_json::Value {
        let e = &self.entry;
        serde_json::json!({
            "name": e.name,
            "nodes": e.nodes,
            "features": e.features,
            "embodied_kgco2e": e.embodied_kgco2e,
            "lifetime_years": e.lifetime_years,
            "utilisation": e.utilisation,
            "kg_per_node_hour": self.kg_per_node_hour(),
            "source": e.source,
        })
    }
}

/// Each node's features, as slurm.conf's NodeName lines give them.
pub type NodeFeatures = BTreeMap<String, BTreeSet<String>>;

/// The features of the nodes of a slurm.conf's text: `Features=` (or `Feature=`) of each
/// `NodeName=` line, a `NodeName=DEFAULT` line's for the lines after it that set none.
/// Keys are case-insensitive, `#` starts a comment, a line ending in `\` goes on. `Include`
/// files are not followed.
pub fn node_features(slurm_conf: &str) -> NodeFeatures {
    let joined = slurm_conf
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let mut out = NodeFeatures::new();
    let mut default: BTreeSet<String> = BTreeSet::new();
    for line in joined.lines() {
        let pairs: Vec<(String, &str)> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim_matches('"')))
            .collect();
        let Some((key, names)) = pairs.first() else {
            continue;
        };
        if key != "nodename" {
            continue;
        }
        let features = pairs
            .iter()
            .find(|(k, _)| k == "features" || k == "feature")
            .map(|(_, v)| {
                v.split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(String::from)
                    .collect()
            });
        if names.eq_ignore_ascii_case("default") {
            default = features.unwrap_or_default();
            continue;
        }
        let features = features.unwrap_or_else(|| default.clone());
        for node in hostlist::expand(names).unwrap_or_default() {
            out.insert(node, features.clone());
        }
    }
    out
}

/// The embodied emissions of a run on `nodes` for `seconds`, each node at its class's
/// rate (the first class, in the site file's order, that holds it), and the classes used.
/// `None` where a node is of no class, or no node is known.
pub fn embodied_g(
    classes: &[NodeClass],
    features: &NodeFeatures,
    nodes: &[String],
    seconds: f64,
) -> (Option<f64>, Vec<String>) {
    let mut grams = 0.0;
    let mut used: Vec<String> = Vec::new();
    for node in nodes {
        let Some(class) = classes.iter().find(|c| c.holds(node, features.get(node))) else {
            return (None, Vec::new());
        };
        grams += class.kg_per_node_hour() * 1000.0 * seconds / 3600.0;
        if !used.contains(&class.entry.name) {
            used.push(class.entry.name.clone());
        }
    }
    ((!nodes.is_empty()).then_some(grams), used)
}

/// A run's emissions by scope (JSON's `emissions`); `None` where a factor is not set or
/// a figure is unknown, never 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Scopes {
    /// IT energy x PUE, J; `None` without a PUE.
    pub facility_energy_j: Option<f64>,
    /// Scope 2, location-based: facility energy x the grid's intensity, gCO2e.
    pub scope2_location_g: Option<f64>,
    /// Scope 2, market-based: facility energy x the contract's intensity, gCO2e.
    pub scope2_market_g: Option<f64>,
    /// Scope 3, the nodes' embodied emissions over the run, gCO2e.
    pub scope3_embodied_g: Option<f64>,
    /// Nodes x elapsed, hours.
    pub node_hours: Option<f64>,
    /// The node classes of the run's nodes (`,` between them); `None` in usage rows.
    pub node_class: Option<String>,
}

/// The factors of a report and where they came from: the site file (its path and
/// `version`) and each factor's origin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stamp {
    pub site_file: Option<PathBuf>,
    pub version: Option<String>,
}

/// What Scope 2 is computed on, in words.
pub fn basis(pue: &Factor) -> &'static str {
    if pue.is_set() {
        "scope 2 on the facility energy: IT energy x PUE"
    } else {
        "scope 2 on the IT energy (no PUE set)"
    }
}

/// The stamp as JSON (`factors`).
pub fn stamp_json(
    stamp: &Stamp,
    [location, market, pue]: [&Factor; 3],
    classes: &[NodeClass],
) -> serde_json::Value {
    serde_json::json!({
        "site_file": stamp.site_file,
        "version": stamp.version,
        "basis": basis(pue),
        "location_g_per_kwh": location.json(),
        "market_g_per_kwh": market.json(),
        "pue": pue.json(),
        "node_classes": classes.iter().map(NodeClass::json).collect::<Vec<_>>(),
    })
}

/// The stamp in one line (the table's `factors:` line, the CSV's `factors` column);
/// `None` where no factor is set.
pub fn stamp_text(
    stamp: &Stamp,
    [location, market, pue]: [&Factor; 3],
    classes: &[NodeClass],
) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(path) = &stamp.site_file {
        let version = stamp
            .version
            .as_ref()
            .map(|v| format!(" version {v}"))
            .unwrap_or_default();
        parts.push(format!("site file {}{version}", path.display()));
    }
    let any = [location, market, pue].iter().any(|f| f.is_set()) || !classes.is_empty();
    if !any {
        return None;
    }
    for (name, factor, unit) in [
        ("location", location, " gCO2e/kWh"),
        ("market", market, " gCO2e/kWh"),
        ("PUE", pue, ""),
    ] {
        if let Some(text) = factor.text(unit) {
            parts.push(format!("{name} {text}"));
        }
    }
    for c in classes {
        let source = c
            .entry
            .source
            .as_ref()
            .map(|s| format!(", {s}"))
            .unwrap_or_default();
        parts.push(format!(
            "embodied {} {:.6} kgCO2e/node-h = {} kg / ({} y x {HOURS_PER_YEAR} h x {} \
             utilisation) (site file{source})",
            c.entry.name,
            c.kg_per_node_hour(),
            c.entry.embodied_kgco2e,
            c.entry.lifetime_years,
            c.entry.utilisation
        ));
    }
    if pue.is_set() || market.is_set() || !classes.is_empty() {
        parts.push(basis(pue).into());
    }
    Some(parts.join("; "))
}

/// A PUE: from 1 (no overhead) to 10, beyond any data centre's.
pub fn check_pue(value: f64) -> Result<f64, TariffError> {
    if (1.0..=10.0).contains(&value) {
        Ok(value)
    } else {
        Err(TariffError::Pue { value })
    }
}

#[cfg(test)]
pub(crate) mod tests;
