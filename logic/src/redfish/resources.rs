//! What the Redfish resources say, as pure functions over their JSON: which reading a
//! chassis offers (best first) and its value.
//!
//! Best is an energy counter: `EnvironmentMetrics` `EnergyJoules` (or `EnergykWh`), or a
//! `Sensors` member whose `ReadingType` is `EnergyJoules`/`EnergykWh`/`EnergyWh`. Else power:
//! `EnvironmentMetrics` `PowerWatts`, then the deprecated `Power` resource's
//! `PowerControl[].PowerConsumedWatts` (summed, as CEEMS does).
//!
//! Beside the reading, what the resource states as the most the chassis may draw: the
//! `PowerControl[].PowerCapacityWatts` of the `Power` resource, `EnvironmentMetrics`'
//! `PowerLimitWatts.AllowableMax`: readings far above it are no power
//! ([`crate::power::Bound`]).

use serde_json::Value;

/// How one chassis is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// `EnvironmentMetrics` with an energy counter (and `PowerWatts` where present).
    MetricsEnergy {
        /// The resource's path on the BMC.
        path: String,
    },
    /// A `Sensors` member of an energy reading type.
    SensorEnergy {
        /// The resource's path on the BMC.
        path: String,
    },
    /// `EnvironmentMetrics` `PowerWatts`.
    MetricsPower {
        /// The resource's path on the BMC.
        path: String,
    },
    /// The deprecated `Power` resource.
    LegacyPower {
        /// The resource's path on the BMC.
        path: String,
    },
}

impl Method {
    /// The resource's path on the BMC.
    pub fn path(&self) -> &str {
        match self {
            Method::MetricsEnergy { path }
            | Method::SensorEnergy { path }
            | Method::MetricsPower { path }
            | Method::LegacyPower { path } => path,
        }
    }

    /// Whether it reads an energy counter (else power, which is integrated).
    pub fn counts_energy(&self) -> bool {
        matches!(
            self,
            Method::MetricsEnergy { .. } | Method::SensorEnergy { .. }
        )
    }

    /// For the log.
    pub fn describe(&self) -> String {
        match self {
            Method::MetricsEnergy { path } => {
                format!("energy counter {path} (EnergyJoules/EnergykWh)")
            }
            Method::SensorEnergy { path } => format!("energy sensor {path}"),
            Method::MetricsPower { path } => format!("power {path} (PowerWatts), integrated"),
            Method::LegacyPower { path } => {
                format!("power {path} (PowerControl PowerConsumedWatts, deprecated), integrated")
            }
        }
    }

    /// What this resource says now.
    pub fn read(&self, doc: &Value) -> Result<ChassisReading, String> {
        let reading = match self {
            Method::MetricsEnergy { .. } => ChassisReading {
                energy_j: metrics_energy_j(doc),
                watts: metrics_watts(doc),
                capacity_w: metrics_capacity_watts(doc),
            },
            Method::SensorEnergy { .. } => ChassisReading {
                energy_j: sensor_energy_j(doc),
                watts: None,
                capacity_w: None,
            },
            Method::MetricsPower { .. } => ChassisReading {
                energy_j: None,
                watts: metrics_watts(doc),
                capacity_w: metrics_capacity_watts(doc),
            },
            Method::LegacyPower { .. } => ChassisReading {
                energy_j: None,
                watts: legacy_watts(doc),
                capacity_w: legacy_capacity_watts(doc),
            },
        };
        let usable = if self.counts_energy() {
            reading.energy_j.is_some()
        } else {
            reading.watts.is_some()
        };
        if usable {
            Ok(reading)
        } else {
            Err(format!("{} has no usable reading now", self.path()))
        }
    }
}

/// One chassis' figures at one read.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ChassisReading {
    pub energy_j: Option<f64>,
    pub watts: Option<f64>,
    /// The most the chassis may draw, as the resource states it.
    pub capacity_w: Option<f64>,
}

/// A finite, non-negative number.
fn number(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite() && *x >= 0.0)
}

/// A figure converted or summed from finite ones, unless it overflowed (a BMC's
/// `1e308` kWh is no reading, not an infinite one).
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// A power reading: any number, for the power screen to judge (a negative one is a glitch
/// it drops and logs once, not a broken session).
fn watts(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// The `@odata.id` of a link property (`"Power": {"@odata.id": "..."}`).
pub(super) fn link(doc: &Value, property: &str) -> Option<String> {
    doc.get(property)?
        .get("@odata.id")?
        .as_str()
        .map(str::to_string)
}

/// The members of a collection.
pub(super) fn members(doc: &Value) -> Vec<String> {
    doc.get("Members")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .filter_map(|e| e.get("@odata.id")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn metrics_energy_j(doc: &Value) -> Option<f64> {
    doc.get("EnergyJoules")
        .and_then(|e| number(e.get("Reading")?))
        .or_else(|| {
            doc.get("EnergykWh")
                .and_then(|e| number(e.get("Reading")?))
                .and_then(|kwh| finite(kwh * 3.6e6))
        })
}

pub(super) fn metrics_watts(doc: &Value) -> Option<f64> {
    doc.get("PowerWatts").and_then(|p| watts(p.get("Reading")?))
}

/// A `Sensor` resource's energy in joules, if its `ReadingType` is one of energy.
pub(super) fn sensor_energy_j(doc: &Value) -> Option<f64> {
    let scale = match doc.get("ReadingType")?.as_str()? {
        "EnergyJoules" => 1.0,
        "EnergyWh" => 3600.0,
        "EnergykWh" => 3.6e6,
        _ => return None,
    };
    number(doc.get("Reading")?).and_then(|r| finite(r * scale))
}

/// The deprecated `Power` resource: the sum of every `PowerControl` entry that reports.
pub(super) fn legacy_watts(doc: &Value) -> Option<f64> {
    let readings: Vec<f64> = doc
        .get("PowerControl")?
        .as_array()?
        .iter()
        .filter_map(|c| watts(c.get("PowerConsumedWatts")?))
        .collect();
    (!readings.is_empty())
        .then(|| readings.iter().sum())
        .and_then(finite)
}

/// The `Power` resource's stated capacity: the sum of every `PowerControl` entry's
/// `PowerCapacityWatts`, when every entry states one (a capacity missing from one entry
/// says nothing of the whole).
pub(super) fn legacy_capacity_watts(doc: &Value) -> Option<f64> {
    let controls = doc.get("PowerControl")?.as_array()?;
    let stated: Option<Vec<f64>> = controls
        .iter()
        .map(|c| number(c.get("PowerCapacityWatts")?).filter(|w| *w > 0.0))
        .collect();
    stated.filter(|s| !s.is_empty()).map(|s| s.iter().sum())
}

/// `EnvironmentMetrics`' stated limit: `PowerLimitWatts.AllowableMax`.
pub(super) fn metrics_capacity_watts(doc: &Value) -> Option<f64> {
    doc.get("PowerLimitWatts")
        .and_then(|p| number(p.get("AllowableMax")?))
        .filter(|w| *w > 0.0)
}

/// The chassis to read: the one named (by its `Id`, the last part of its path), or all.
pub(super) fn chosen_chassis(
    collection: &Value,
    named: Option<&str>,
) -> Result<Vec<String>, String> {
    let all = members(collection);
    match named {
        None if all.is_empty() => Err("the Chassis collection has no members".into()),
        None => Ok(all),
        Some(id) => all
            .iter()
            .find(|p| p.trim_end_matches('/').rsplit('/').next() == Some(id))
            .map(|p| vec![p.clone()])
            .ok_or_else(|| format!("no chassis {id:?} among {}", all.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn environment_metrics_energy_first_in_joules_or_kwh() {
        let doc = json!({"EnergyJoules": {"Reading": 1234.5}, "PowerWatts": {"Reading": 300}});
        assert_eq!(metrics_energy_j(&doc), Some(1234.5));
        assert_eq!(metrics_watts(&doc), Some(300.0));
        let kwh = json!({"EnergykWh": {"Reading": 0.5}});
        assert_eq!(metrics_energy_j(&kwh), Some(1.8e6));
        let null = json!({"EnergyJoules": {"Reading": null}, "PowerWatts": {"Reading": null}});
        assert_eq!(metrics_energy_j(&null), None);
        assert_eq!(metrics_watts(&null), None);
        // a negative power is the screen's to drop (logged once), not a broken session
        let negative = json!({"EnergyJoules": {"Reading": -3}, "PowerWatts": {"Reading": -3}});
        assert_eq!(metrics_energy_j(&negative), None);
        assert_eq!(metrics_watts(&negative), Some(-3.0));
    }

    #[test]
    fn legacy_power_sums_the_controls_that_report() {
        let doc = json!({"PowerControl": [
            {"PowerConsumedWatts": 200},
            {"PowerConsumedWatts": null},
            {"PowerConsumedWatts": 44.5}
        ]});
        assert_eq!(legacy_watts(&doc), Some(244.5));
        assert_eq!(legacy_watts(&json!({"PowerControl": []})), None);
        assert_eq!(legacy_watts(&json!("garbage")), None);
    }

    #[test]
    fn the_stated_capacity_of_every_control_or_none() {
        let doc = json!({"PowerControl": [
            {"PowerConsumedWatts": 200, "PowerCapacityWatts": 800},
            {"PowerConsumedWatts": 40, "PowerCapacityWatts": 150.5}
        ]});
        assert_eq!(legacy_capacity_watts(&doc), Some(950.5));
        let one_missing = json!({"PowerControl": [
            {"PowerConsumedWatts": 200, "PowerCapacityWatts": 800},
            {"PowerConsumedWatts": 40, "PowerCapacityWatts": null}
        ]});
        assert_eq!(legacy_capacity_watts(&one_missing), None);
        assert_eq!(
            legacy_capacity_watts(&json!({"PowerControl": [{"PowerCapacityWatts": 0}]})),
            None
        );
        let metrics =
            json!({"PowerWatts": {"Reading": 3}, "PowerLimitWatts": {"AllowableMax": 1200}});
        assert_eq!(metrics_capacity_watts(&metrics), Some(1200.0));
        let read = Method::LegacyPower { path: "/p".into() }
            .read(&doc)
            .expect("power");
        assert_eq!(read.capacity_w, Some(950.5));
    }

    #[test]
    fn sensors_of_energy_types_only() {
        assert_eq!(
            sensor_energy_j(&json!({"ReadingType": "EnergykWh", "Reading": 2})),
            Some(7.2e6)
        );
        assert_eq!(
            sensor_energy_j(&json!({"ReadingType": "Power", "Reading": 2})),
            None
        );
    }

    #[test]
    fn a_method_without_its_reading_is_an_error_naming_the_path() {
        let m = Method::MetricsEnergy {
            path: "/redfish/v1/Chassis/1/EnvironmentMetrics".into(),
        };
        let e = m
            .read(&json!({"PowerWatts": {"Reading": 3}}))
            .expect_err("no energy");
        assert!(e.contains("/Chassis/1/EnvironmentMetrics"), "{e}");
        let r = m
            .read(&json!({"EnergyJoules": {"Reading": 10}}))
            .expect("energy");
        assert_eq!(r.energy_j, Some(10.0));
    }

    #[test]
    fn chassis_all_or_the_one_named() {
        let c = json!({"Members": [
            {"@odata.id": "/redfish/v1/Chassis/1"},
            {"@odata.id": "/redfish/v1/Chassis/GPUBoard"}
        ]});
        assert_eq!(chosen_chassis(&c, None).expect("all").len(), 2);
        assert_eq!(
            chosen_chassis(&c, Some("GPUBoard")).expect("named"),
            ["/redfish/v1/Chassis/GPUBoard"]
        );
        let e = chosen_chassis(&c, Some("2")).expect_err("absent");
        assert!(
            e.contains("\"2\"") && e.contains("/Chassis/GPUBoard"),
            "{e}"
        );
        assert!(chosen_chassis(&json!({"Members": []}), None).is_err());
    }
}
