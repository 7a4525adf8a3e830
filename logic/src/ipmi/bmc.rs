//! A BMC as a sensor of power ([`IpmiBmc`]): one session, opened by the poller and kept while
//! it works; and the rust_ipmi plugin over it ([`Ipmi`]).

use std::time::Instant;

use ipmi_rs::connection::{IpmiConnection, LogicalUnit, Message, Request, RequestTargetAddress};
use ipmi_rs::rmcp::Rmcp;
use ipmi_rs::storage::sdr::record::Record;

use super::config::{
    DEFAULT_MAX_WATTS, IpmiConfig, KEY_MAX_WATTS, KEY_PASSWORD, KEY_POWER_SENSORS, KEY_USERNAME,
    PowerSensors, Target,
};
use super::protocol::{self as p, WattsSensor};
use crate::config::{ConfigError, KeyValues};
use crate::plugin::Opened;
use crate::plugin::Plugin;
use crate::power::{Connected, Polled, Settings, sensor_backoff};
use crate::source::{Failure, Power, Sample, Sensor};

/// Enough for any real SDR repository; bounds a BMC that links its records in a loop.
const MAX_SDR_RECORDS: usize = 1024;
/// Completion code: the SDR reservation was cancelled (the repository changed).
const CC_RESERVATION_CANCELLED: u8 = 0xC5;

enum Link {
    Lan(Box<Rmcp>),
    Local(ipmi_rs::File),
}

#[derive(Debug)]
enum CallError {
    Transport(String),
    Completion(u8),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Transport(e) => write!(f, "{e}"),
            CallError::Completion(cc) => write!(f, "completion code {cc:#04x}"),
        }
    }
}

fn exchange<C: IpmiConnection>(
    c: &mut C,
    request: &mut Request,
) -> Result<(u8, Vec<u8>), CallError> {
    c.send_recv(request)
        .map(|r| (r.cc(), r.data().to_vec()))
        .map_err(|e| CallError::Transport(format!("{e:?}")))
}

impl Link {
    fn call(&mut self, netfn: u8, cmd: u8, lun: u8, data: Vec<u8>) -> Result<Vec<u8>, CallError> {
        let mut request = Request::new(
            Message::new_raw(netfn, cmd, data),
            RequestTargetAddress::Bmc(LogicalUnit::from_low_bits(lun)),
        );
        let (cc, data) = match self {
            Link::Lan(c) => exchange(c.as_mut(), &mut request)?,
            Link::Local(c) => exchange(c, &mut request)?,
        };
        if cc != 0 {
            return Err(CallError::Completion(cc));
        }
        Ok(data)
    }
}

enum Method {
    Dcmi { enhanced: bool },
    Sensors(Vec<WattsSensor>),
}

/// A BMC reached over IPMI, in-band or out of band, and how its power is read.
pub struct IpmiBmc {
    link: Link,
    method: Method,
    target: String,
}

/// The rust_ipmi plugin: the BMC polled by a thread in slurmd; steps read its ledger.
pub struct Ipmi;

impl IpmiBmc {
    fn open_link(config: &IpmiConfig) -> Result<(Link, String), String> {
        match &config.target {
            Target::Device(path) => ipmi_rs::File::new(path, config.timeout)
                .map(|f| (Link::Local(f), path.display().to_string()))
                .map_err(|e| {
                    format!(
                        "cannot open {}: {e} (is the ipmi_devintf module loaded?)",
                        path.display()
                    )
                }),
            Target::Lan { host, port } => {
                let text = format!("{host}:{port}");
                let mut rmcp = Rmcp::new((host.as_str(), *port), config.timeout)
                    .map_err(|e| format!("cannot reach the BMC at {text}: {e}"))?;
                rmcp.activate(
                    true,
                    config.username.as_deref(),
                    Some(config.password.expose().as_bytes()),
                )
                .map_err(|e| {
                    let e = format!("{e:?}");
                    if e.contains("AuthenticationFailed") {
                        format!(
                            "the BMC at {text} refused the login: check {KEY_USERNAME} and \
                             {KEY_PASSWORD} (the account must be an administrator: RMCP+ \
                             cipher suite 3)"
                        )
                    } else {
                        format!("cannot open an RMCP+ session with {text}: {e}")
                    }
                })?;
                Ok((Link::Lan(Box::new(rmcp)), format!("BMC {text} over RMCP+")))
            }
        }
    }

    fn dcmi_watts(&mut self, enhanced: bool) -> Result<f64, String> {
        let data = self
            .link
            .call(
                p::NETFN_GROUP_EXT,
                p::CMD_DCMI_GET_POWER_READING,
                0,
                p::dcmi_power_request(enhanced),
            )
            .map_err(|e| format!("DCMI Get Power Reading: {e}"))?;
        p::parse_dcmi_power(&data).map(f64::from)
    }

    /// The active DCMI power limit; `None` where none is active, or the BMC has no DCMI
    /// power management (then the default bound applies: nothing to log).
    fn dcmi_power_limit(&mut self) -> Option<u16> {
        match self.link.call(
            p::NETFN_GROUP_EXT,
            p::CMD_DCMI_GET_POWER_LIMIT,
            0,
            p::dcmi_power_limit_request(),
        ) {
            Ok(data) => p::parse_dcmi_power_limit(&data).unwrap_or_else(|e| {
                log::debug!("DCMI Get Power Limit: {e}");
                None
            }),
            Err(CallError::Completion(p::CC_NO_ACTIVE_POWER_LIMIT)) => None,
            Err(e) => {
                log::debug!("DCMI Get Power Limit: {e}");
                None
            }
        }
    }

    fn sensor_watts(link: &mut Link, sensor: &WattsSensor) -> Result<f64, String> {
        let data = link
            .call(
                p::NETFN_SENSOR,
                p::CMD_GET_SENSOR_READING,
                sensor.lun,
                vec![sensor.number],
            )
            .map_err(|e| format!("reading sensor {} ({}): {e}", sensor.record_id, sensor.name))?;
        p::parse_sensor_reading(&data)
            .and_then(|raw| sensor.watts(raw))
            .map_err(|e| format!("sensor {} ({}): {e}", sensor.record_id, sensor.name))
    }

    /// Every SDR record, read 16 bytes at a time.
    fn sdr_records(&mut self) -> Result<Vec<Record>, String> {
        match self.walk_sdr() {
            Err(CallError::Completion(CC_RESERVATION_CANCELLED)) => self.walk_sdr(),
            other => other,
        }
        .map_err(|e| format!("reading the SDR repository: {e}"))
    }

    fn walk_sdr(&mut self) -> Result<Vec<Record>, CallError> {
        let call = |link: &mut Link, data| link.call(p::NETFN_STORAGE, p::CMD_GET_SDR, 0, data);
        let bad = |e: String| CallError::Transport(e);
        let reservation = p::parse_reservation(&self.link.call(
            p::NETFN_STORAGE,
            p::CMD_RESERVE_SDR_REPOSITORY,
            0,
            vec![],
        )?)
        .map_err(bad)?;
        let mut records = Vec::new();
        let mut id = 0u16;
        for _ in 0..MAX_SDR_RECORDS {
            let header = call(
                &mut self.link,
                p::get_sdr_request(reservation, id, 0, p::SDR_HEADER_LEN),
            )?;
            let (next, bytes) = p::parse_get_sdr(&header).map_err(bad)?;
            let Some(&body_len) = bytes.get(usize::from(p::SDR_HEADER_LEN) - 1) else {
                return Err(bad(format!("short header of SDR record {id}")));
            };
            let total = usize::from(p::SDR_HEADER_LEN) + usize::from(body_len);
            let mut record = bytes[..usize::from(p::SDR_HEADER_LEN)].to_vec();
            while record.len() < total {
                let offset = u8::try_from(record.len())
                    .map_err(|_| bad(format!("SDR record {id} is too long")))?;
                let want =
                    p::SDR_CHUNK.min(u8::try_from(total - record.len()).unwrap_or(p::SDR_CHUNK));
                let chunk = call(
                    &mut self.link,
                    p::get_sdr_request(reservation, id, offset, want),
                )?;
                let (_, bytes) = p::parse_get_sdr(&chunk).map_err(bad)?;
                if bytes.is_empty() {
                    return Err(bad(format!("empty chunk of SDR record {id}")));
                }
                record.extend_from_slice(bytes);
            }
            match p::parse_record(&record[..total]) {
                Ok(r) => records.push(r),
                Err(e) => log::debug!("skipping SDR record {id}: {e}"),
            }
            if next == p::SDR_LAST_RECORD {
                return Ok(records);
            }
            id = next;
        }
        Err(bad(format!("more than {MAX_SDR_RECORDS} SDR records")))
    }

    fn choose_method(&mut self, wanted: &PowerSensors) -> Result<Method, String> {
        match wanted {
            PowerSensors::Dcmi { enhanced } => {
                self.dcmi_watts(*enhanced)?;
                Ok(Method::Dcmi {
                    enhanced: *enhanced,
                })
            }
            PowerSensors::Records(ids) => {
                let records = self.sdr_records()?;
                let sensors = ids
                    .iter()
                    .map(|id| {
                        let record = records
                            .iter()
                            .find(|r| r.header.id.value() == *id)
                            .ok_or_else(|| {
                                format!("{KEY_POWER_SENSORS}: the BMC has no SDR record {id}")
                            })?;
                        WattsSensor::from_record(record)
                            .map_err(|e| format!("{KEY_POWER_SENSORS}: {e}"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Method::Sensors(sensors))
            }
            PowerSensors::Auto => match self.dcmi_watts(false) {
                Ok(_) => Ok(Method::Dcmi { enhanced: false }),
                Err(dcmi) => {
                    let records = self.sdr_records()?;
                    let sensor = records
                        .iter()
                        .find_map(|r| WattsSensor::from_record(r).ok())
                        .ok_or_else(|| {
                            format!("no DCMI power reading ({dcmi}) and no Watts sensor in the SDR")
                        })?;
                    Ok(Method::Sensors(vec![sensor]))
                }
            },
        }
    }
}

impl Plugin for Ipmi {
    type Config = IpmiConfig;
    type Source = Polled<IpmiBmc>;
    const KEYS: &'static [&'static str] = super::config::KEYS;

    fn parse_config(values: &KeyValues) -> Result<IpmiConfig, ConfigError> {
        IpmiConfig::parse(values)
    }

    fn show_config(config: &IpmiConfig) -> Vec<(&'static str, String)> {
        config.show()
    }

    fn for_node(config: &IpmiConfig, node: &str) -> IpmiConfig {
        let target = match &config.target {
            Target::Lan { host, port } => Target::Lan {
                host: crate::source::expand_node(host, node),
                port: *port,
            },
            device => device.clone(),
        };
        IpmiConfig {
            target,
            ..config.clone()
        }
    }

    fn open(config: &IpmiConfig) -> Result<Opened<Polled<IpmiBmc>>, String> {
        // read here, in slurmd only: slurmctld never opens the source, slurmstepd reads
        // slurmd's ledger
        let config = config.with_password()?;
        let settings = Settings {
            period: config.frequency,
            max_backoff: sensor_backoff(config.frequency),
            max_watts_key: KEY_MAX_WATTS,
            max_watts: config.max_watts,
            default_max_watts: DEFAULT_MAX_WATTS,
        };
        Polled::start(&settings, config.calc_adjustment, move || {
            IpmiBmc::connect(&config)
        })
    }
}

impl IpmiBmc {
    /// Connects to the BMC, chooses how to read its power, and reads the power limit it
    /// enforces. Runs in the poller thread; may block up to the BMC's own timeouts.
    pub fn connect(config: &IpmiConfig) -> Result<Connected<Self>, String> {
        let (mut link, target) = Self::open_link(config)?;
        if matches!(link, Link::Lan(_)) {
            // Sessions start at USER; some BMCs (ipmi_sim) want ADMIN for DCMI. A BMC that
            // refuses keeps the session as it is.
            let _ = link.call(
                p::NETFN_APP,
                p::CMD_SET_SESSION_PRIVILEGE,
                0,
                vec![p::PRIVILEGE_ADMIN],
            );
        }
        let mut bmc = IpmiBmc {
            link,
            method: Method::Dcmi { enhanced: false },
            target,
        };
        bmc.method = bmc.choose_method(&config.sensors)?;
        let stated_max_watts = bmc
            .dcmi_power_limit()
            .map(|w| (f64::from(w), "the BMC's active DCMI power limit".into()));
        Ok(Connected {
            sensor: bmc,
            stated_max_watts,
        })
    }
}

impl Sensor for IpmiBmc {
    fn describe(&self) -> String {
        match &self.method {
            Method::Dcmi { enhanced: false } => format!("{}: DCMI power reading", self.target),
            Method::Dcmi { enhanced: true } => {
                format!("{}: DCMI enhanced power reading", self.target)
            }
            Method::Sensors(s) => format!(
                "{}: sum of SDR sensors {}",
                self.target,
                s.iter()
                    .map(|s| format!("{} ({})", s.record_id, s.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn poll(&mut self, _now: Instant) -> Power {
        match &self.method {
            Method::Dcmi { enhanced } => self.dcmi_watts(*enhanced),
            Method::Sensors(sensors) => sensors
                .iter()
                .map(|s| Self::sensor_watts(&mut self.link, s))
                .sum(),
        }
        .map(Sample::now)
        .map_err(Failure::Reconnect)
    }
}
