//! The Redfish BMC as a sensor ([`RedfishBmc`]): which reading each chassis offers; and the
//! rust_redfish plugin over it ([`Redfish`]).

use std::time::Instant;

use super::client::Client;
use super::config::{self, KEY_MAX_WATTS, RedfishConfig};
use super::resources::{self, Method};
use crate::config::{ConfigError, KeyValues};
use crate::plugin::{Opened, Plugin};
use crate::power::{Connected, Polled, Settings, sensor_backoff};
use crate::source::{Failure, Power, Sample, Sensor};

/// Sensors members looked at for an energy reading, at most (a chassis lists dozens).
const MAX_SENSORS_PROBED: usize = 64;

/// One chassis and what was last read from it, to derive the power from a counter that
/// comes without one.
struct Chassis {
    path: String,
    method: Method,
    last: Option<(Instant, f64)>,
    /// The most it may draw, as it stated at its last reading.
    capacity_w: Option<f64>,
}

/// A BMC reached over Redfish, and what is read of each of its chassis.
pub struct RedfishBmc {
    client: Client,
    chassis: Vec<Chassis>,
}

impl RedfishBmc {
    /// The best reading a chassis offers.
    fn choose(client: &Client, path: &str) -> Result<Option<Method>, String> {
        let doc = client.get(path)?;
        let metrics = match resources::link(&doc, "EnvironmentMetrics") {
            Some(p) => Some((client.get(&p)?, p)),
            None => None,
        };
        if let Some((m, p)) = &metrics
            && resources::metrics_energy_j(m).is_some()
        {
            return Ok(Some(Method::MetricsEnergy { path: p.clone() }));
        }
        if let Some(sensors) = resources::link(&doc, "Sensors") {
            for member in resources::members(&client.get(&sensors)?)
                .iter()
                .take(MAX_SENSORS_PROBED)
            {
                if resources::sensor_energy_j(&client.get(member)?).is_some() {
                    return Ok(Some(Method::SensorEnergy {
                        path: member.clone(),
                    }));
                }
            }
        }
        if let Some((m, p)) = &metrics
            && resources::metrics_watts(m).is_some()
        {
            return Ok(Some(Method::MetricsPower { path: p.clone() }));
        }
        if let Some(p) = resources::link(&doc, "Power")
            && resources::legacy_watts(&client.get(&p)?).is_some()
        {
            return Ok(Some(Method::LegacyPower { path: p }));
        }
        Ok(None)
    }

    /// Reads every chassis once: the summed counter (when every chassis has one) and power.
    fn read_all(&mut self) -> Result<Sample, String> {
        let mut energy_j = Some(0.0);
        let mut watts = 0.0;
        let mut at = Instant::now();
        for c in &mut self.chassis {
            let doc = self.client.get(c.method.path())?;
            let now = Instant::now();
            at = now;
            let r = c.method.read(&doc)?;
            energy_j = energy_j.zip(r.energy_j).map(|(a, b)| a + b);
            let derived = match (c.last, r.energy_j) {
                (Some((t0, e0)), Some(e)) if now > t0 && e >= e0 => {
                    Some((e - e0) / now.duration_since(t0).as_secs_f64())
                }
                _ => None,
            };
            watts += r.watts.or(derived).unwrap_or(0.0);
            c.last = r.energy_j.map(|e| (now, e));
            c.capacity_w = r.capacity_w;
        }
        Ok(Sample {
            watts,
            at,
            energy_j,
        })
    }
}

/// The rust_redfish plugin: the BMC polled by a thread in slurmd; steps read its ledger.
pub struct Redfish;

impl Plugin for Redfish {
    type Config = RedfishConfig;
    type Source = Polled<RedfishBmc>;
    const KEYS: &'static [&'static str] = RedfishConfig::KEYS;

    fn parse_config(values: &KeyValues) -> Result<RedfishConfig, ConfigError> {
        RedfishConfig::parse(values)
    }

    fn show_config(config: &RedfishConfig) -> Vec<(&'static str, String)> {
        config.show()
    }

    fn for_node(config: &RedfishConfig, node: &str) -> RedfishConfig {
        RedfishConfig {
            url: config
                .url
                .as_deref()
                .map(|u| crate::source::expand_node(u, node)),
            ..config.clone()
        }
    }

    fn open(config: &RedfishConfig) -> Result<Opened<Polled<RedfishBmc>>, String> {
        // read here, in slurmd only: slurmctld never opens the source, slurmstepd reads
        // slurmd's ledger
        let config = config.with_password()?;
        let settings = Settings {
            period: config.frequency,
            max_backoff: sensor_backoff(config.frequency),
            max_watts_key: KEY_MAX_WATTS,
            max_watts: config.max_watts,
            default_max_watts: config::DEFAULT_MAX_WATTS,
        };
        Polled::start(&settings, true, move || RedfishBmc::connect(&config))
    }
}

impl Sensor for RedfishBmc {
    fn describe(&self) -> String {
        let how: Vec<String> = self
            .chassis
            .iter()
            .map(|c| format!("{}: {}", c.path, c.method.describe()))
            .collect();
        format!(
            "Redfish BMC {} with {}; {}",
            self.client.base(),
            self.client.auth(),
            how.join("; ")
        )
    }

    fn poll(&mut self, _now: Instant) -> Power {
        self.read_all().map_err(Failure::Reconnect)
    }
}

impl RedfishBmc {
    /// Connects to the BMC, chooses what to read of each chassis, and reads each once (with
    /// what each states it may draw). Runs in the poller thread; may block up to the
    /// client's timeouts.
    pub fn connect(config: &RedfishConfig) -> Result<Connected<Self>, String> {
        let client = Client::connect(config)?;
        let collection = client.get("/redfish/v1/Chassis")?;
        let mut chassis = Vec::new();
        for path in resources::chosen_chassis(&collection, config.chassis.as_deref())? {
            match Self::choose(&client, &path)? {
                Some(method) => chassis.push(Chassis {
                    path,
                    method,
                    last: None,
                    capacity_w: None,
                }),
                None if config.chassis.is_some() => {
                    return Err(format!("{path} has no energy or power reading"));
                }
                None => log::info!("{path} has no energy or power reading; not counted"),
            }
        }
        if chassis.is_empty() {
            return Err("no chassis has an energy or power reading".into());
        }
        let mut bmc = RedfishBmc { client, chassis };
        // a first reading: the baseline of counters that come without a power reading
        bmc.read_all()?;
        Ok(Connected {
            stated_max_watts: bmc.stated_max_watts(),
            sensor: bmc,
        })
    }

    /// The chassis' stated capacities, summed as their power is, when every chassis read
    /// states one.
    fn stated_max_watts(&self) -> Option<(f64, String)> {
        let capacities: Option<Vec<f64>> = self.chassis.iter().map(|c| c.capacity_w).collect();
        capacities.map(|c| {
            (
                c.iter().sum(),
                "the chassis' stated PowerCapacityWatts (or PowerLimitWatts.AllowableMax)".into(),
            )
        })
    }
}
