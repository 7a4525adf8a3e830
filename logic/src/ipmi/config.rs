//! The rust_ipmi keys of acct_gather.conf: Slurm's ipmi plugin keys, with their meaning,
//! plus `EnergyIPMIHost` for out-of-band access. A working acct_gather.conf of Slurm's
//! plugin keeps working: the freeipmi tuning keys it has are accepted, and a notice says
//! they have no effect here.

use std::path::PathBuf;
use std::time::Duration;

pub(super) use crate::config::Secret;
use crate::config::{
    ConfigError, KeyValues, absolute_path, boolean, both_passwords, config_keys, period_secs,
    shown_password_file, yes_no,
};
use crate::power::{parse_max_watts, show_max_watts};

/// Slurm's plugin reads one of several variables; only Watts makes energy, so the key is
/// accepted with that value alone.
pub(crate) const KEY_VARIABLE: &str = "EnergyIPMIVariable";

/// Keys of Slurm's ipmi plugin that tune freeipmi; accepted, without effect.
pub(crate) const IGNORED_KEYS: [&str; 20] = [
    "EnergyIPMIDriverType",
    "EnergyIPMIDisableAutoProbe",
    "EnergyIPMIDriverAddress",
    "EnergyIPMIRegisterSpacing",
    "EnergyIPMIProtocolVersion",
    "EnergyIPMIPrivilegeLevel",
    "EnergyIPMIAuthenticationType",
    "EnergyIPMICipherSuiteId",
    "EnergyIPMISessionTimeout",
    "EnergyIPMIRetransmissionTimeout",
    "EnergyIPMIWorkaroundFlags",
    "EnergyIPMIRereadSdrCache",
    "EnergyIPMIIgnoreNonInterpretableSensors",
    "EnergyIPMIBridgeSensors",
    "EnergyIPMIInterpretOemData",
    "EnergyIPMISharedSensors",
    "EnergyIPMIDiscreteReading",
    "EnergyIPMIIgnoreScanningDisabled",
    "EnergyIPMIAssumeBmcOwner",
    "EnergyIPMIEntitySensorNames",
];

/// Every key registered with Slurm: an acct_gather.conf key no plugin registers is fatal
/// to the daemons, so Slurm's freeipmi keys are registered too.
pub(crate) const KEYS: &[&str] = &{
    const USED: &[&str] = IpmiConfig::KEYS;
    let mut all = [""; USED.len() + 1 + IGNORED_KEYS.len()];
    let mut i = 0;
    while i < all.len() {
        all[i] = if i < USED.len() {
            USED[i]
        } else if i == USED.len() {
            KEY_VARIABLE
        } else {
            IGNORED_KEYS[i - USED.len() - 1]
        };
        i += 1;
    }
    all
};

const DEFAULT_DEVICE: &str = "/dev/ipmi0";
const DEFAULT_LAN_PORT: u16 = 623;
/// Slurm's default is 30 s. Between two samples the power is interpolated, so a power step
/// costs up to half a period of that step: at 10 s a job whose power steps by 200 W was off
/// by up to 1 kJ. At 1 s it is within 100 J, for one DCMI request (or one per configured
/// sensor) a second, which BMCs answer in milliseconds; it also keeps the session alive.
const DEFAULT_FREQUENCY: u32 = 1;
/// Slurm's default is no. Yes brings the energy from the last sample up to the moment it
/// is read, at the last power, so a step's final figure is current, not a period old.
const DEFAULT_CALC_ADJUSTMENT: bool = true;
const DEFAULT_TIMEOUT: u32 = 10;
/// A reading above this is no node's where the BMC states no power limit: more than the
/// largest 8-GPU servers draw (about 14 kW), less than the 65 535 W of a 16-bit reading
/// of all ones.
pub(super) const DEFAULT_MAX_WATTS: u32 = 20_000;

/// Which readings make the node's power, in the syntax of Slurm's plugin: `Node=DCMI` (DCMI
/// Get Power Reading), `Node=DCMI_ENHANCED` (its enhanced statistics mode), or `Node=` SDR
/// record ids separated by commas, whose Watts sensors are summed (`Node=16,19`). `Node` is
/// required; other labels, separated by `;` (`Node=16,19;Socket0=16`), are accepted and not
/// used. Not set: DCMI where the BMC has it, else the first Watts sensor of its SDR.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PowerSensors {
    /// DCMI where the BMC supports it, else the first Watts sensor.
    #[default]
    Auto,
    /// DCMI Get Power Reading; `enhanced` uses the enhanced statistics mode.
    Dcmi { enhanced: bool },
    /// These SDR record ids, summed.
    Records(Vec<u16>),
}

/// Where the BMC is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// In-band through the local IPMI device.
    Device(PathBuf),
    /// Out of band, RMCP+.
    Lan {
        /// The BMC's host name or address.
        host: String,
        /// Its RMCP+ UDP port.
        port: u16,
    },
}

config_keys! {
    /// rust_ipmi's acct_gather.conf keys: which BMC, how reached, which sensors.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct IpmiConfig {
        /// Where the BMC is reached: out of band at `EnergyIPMIHost`, else in-band through
        /// `EnergyIPMIDriverDevice`; the host wins where both are given.
        pub target: Target = Target::Device(PathBuf::from(DEFAULT_DEVICE)), {
            /// The node's BMC on the network, read out of band (IPMI over LAN, RMCP+):
            /// `host`, `host:port` or `[IPv6 address]:port`, the port 623 where none is
            /// given. `%n` in it is the node's name and `%h` its host's, so that one file
            /// serves every node (`%n-bmc`). slurmd logs in with `EnergyIPMIUsername` and
            /// `EnergyIPMIPassword` (or `EnergyIPMIPasswordFile`). Set, it wins over
            /// `EnergyIPMIDriverDevice`. Not set: the node's own BMC is read in-band,
            /// through `EnergyIPMIDriverDevice`.
            KEY_HOST = "EnergyIPMIHost": parse(|_, v| parse_host(v)), show(|t| match t {
                Target::Device(_) => "(in-band)".into(),
                Target::Lan { host, port } => format!("{host}:{port}"),
            });
            /// The local IPMI device file through which slurmd reads the node's own BMC
            /// in-band (it needs the `ipmi_devintf` kernel module). Used where
            /// `EnergyIPMIHost` is not set.
            KEY_DRIVER_DEVICE = "EnergyIPMIDriverDevice": parse(|k, v| {
                if !v.starts_with('/') {
                    return Err(ConfigError::new(k, v, "expected an absolute device path"));
                }
                Ok(Target::Device(PathBuf::from(v)))
            }),
            show(|t| match t {
                Target::Device(d) => d.display().to_string(),
                Target::Lan { .. } => "(out-of-band)".into(),
            });
        }
        /// The BMC account slurmd logs in as out of band (with `EnergyIPMIHost`): at most
        /// 16 ASCII characters, an administrator account (RMCP+ with cipher suite 3 needs
        /// one). Not used in-band.
        pub username: Option<String> = None, {
            KEY_USERNAME = "EnergyIPMIUsername": parse(|_, v| Ok(Some(v.to_string()))),
                show(|u| u.clone().unwrap_or_default());
        }
        /// The password of `EnergyIPMIUsername`, out of band: at most 20 bytes. Never
        /// logged nor shown by `scontrol show config`, but acct_gather.conf holding it
        /// should be root's alone (mode `0600`): `EnergyIPMIPasswordFile` keeps it out of
        /// the file. Not with `EnergyIPMIPasswordFile`.
        pub password: Secret = Secret::default(), {
            KEY_PASSWORD = "EnergyIPMIPassword": parse(|k, v| {
                if v.len() > 20 {
                    // never echo the password itself
                    return Err(ConfigError::new(k, "<hidden>", "IPMI passwords are at most 20 bytes"));
                }
                Ok(Secret::new(v))
            });
        }
        /// A file whose first line is the BMC password (trailing spaces trimmed), read by
        /// slurmd as root when it opens the BMC, so that acct_gather.conf holds no password
        /// and can stay readable by users (senergy reads it). An absolute path to a regular
        /// file, not a link, of root (or SlurmUser) that only its owner may write: another
        /// is refused, and the node reports no energy; one every user may read is a
        /// warning. Not with `EnergyIPMIPassword`. `scontrol show config` shows its path.
        pub password_file: Option<PathBuf> = None, {
            KEY_PASSWORD_FILE = "EnergyIPMIPasswordFile": parse(absolute_path),
                show(shown_password_file);
        }
        /// Seconds between two readings of the BMC's power, fractions accepted (Slurm's
        /// plugin takes whole seconds and defaults to 30). Energy between readings is
        /// interpolated, so a power step costs up to half a period of that step; each
        /// reading is one DCMI request, or one per sensor of `EnergyIPMIPowerSensors`.
        pub frequency: Duration = Duration::from_secs(DEFAULT_FREQUENCY.into()), {
            // Slurm takes whole seconds; fractions are accepted too
            KEY_FREQUENCY = "EnergyIPMIFrequency": parse(|k, v| period_secs(k, v, 3600)),
                show(|f| f.as_secs_f64().to_string());
        }
        /// Whole seconds slurmd waits for the BMC to answer one request before it gives up
        /// and reconnects, backing off.
        pub timeout: Duration = Duration::from_secs(DEFAULT_TIMEOUT.into()), {
            KEY_TIMEOUT = "EnergyIPMITimeout":
                parse(|k, v| positive(k, v).map(|s| Duration::from_secs(s.into()))),
                show(|t| t.as_secs().to_string());
        }
        /// `yes`: a figure Slurm asks for between two readings is brought up to that moment
        /// at the last power read, so a step's final figure is current, not a period old
        /// (Slurm's plugin defaults to `no`). `no`: the figure is the last reading's.
        pub calc_adjustment: bool = DEFAULT_CALC_ADJUSTMENT, {
            KEY_CALC_ADJUSTMENT = "EnergyIPMICalcAdjustment": parse(boolean), show(yes_no);
        }
        /// Which readings make the node's power, in the syntax of Slurm's plugin:
        /// `Node=DCMI` (DCMI Get Power Reading), `Node=DCMI_ENHANCED` (its enhanced
        /// statistics mode), or `Node=` SDR record ids separated by commas, whose Watts
        /// sensors are summed (`Node=16,19`). Other labels, after a `;`
        /// (`Node=16,19;Socket0=16`), are accepted and not used. Not set: DCMI where the
        /// BMC has it, else the first Watts sensor of its SDR.
        pub sensors: PowerSensors = PowerSensors::Auto, {
            KEY_POWER_SENSORS = "EnergyIPMIPowerSensors": parse(|_, v| parse_power_sensors(v)),
                show(|s| match s {
                    PowerSensors::Auto => "(auto: DCMI, else the first Watts sensor)".into(),
                    PowerSensors::Dcmi { enhanced: false } => "Node=DCMI".into(),
                    PowerSensors::Dcmi { enhanced: true } => "Node=DCMI_ENHANCED".into(),
                    PowerSensors::Records(ids) => format!(
                        "Node={}",
                        ids.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
                    ),
                });
        }
        /// The most power the node can draw, in whole watts: a reading above it (a glitch,
        /// such as a BMC answering all ones) is dropped, never counted as energy, and
        /// bridged from the readings around it. Not set: the BMC's active DCMI power limit
        /// times 1.5, else 20 000 W. Slurm's plugin has no such key.
        pub max_watts: Option<u32> = None, {
            KEY_MAX_WATTS = "EnergyIPMIMaxWatts": parse(|k, v| parse_max_watts(k, v).map(Some)),
                show(|w| show_max_watts(*w, DEFAULT_MAX_WATTS, true));
        }
    }
    check: IpmiConfig::check;
}

impl IpmiConfig {
    /// With the password read from `EnergyIPMIPasswordFile` where set: what slurmd (or
    /// `senergy check`, as root) logs in with. An error names the key and the path.
    pub fn with_password(&self) -> Result<Self, String> {
        let password = crate::config::password(
            &self.password,
            KEY_PASSWORD_FILE,
            self.password_file.as_deref(),
        )?;
        if password.expose().len() > 20 {
            return Err(format!(
                "{KEY_PASSWORD_FILE}={}: IPMI passwords are at most 20 bytes",
                self.password_file
                    .as_deref()
                    .map_or_else(String::new, |p| p.display().to_string())
            ));
        }
        Ok(Self {
            password,
            ..self.clone()
        })
    }

    /// What no one key tells: the user name's limit out of band, the variable, and Slurm's
    /// freeipmi keys, which have no effect here.
    fn check(&self, values: &KeyValues) -> Result<(), ConfigError> {
        both_passwords(KEY_PASSWORD, KEY_PASSWORD_FILE, values)?;
        if let Some(v) = values.get(KEY_VARIABLE)
            && !v.eq_ignore_ascii_case("watts")
        {
            return Err(ConfigError::new(
                KEY_VARIABLE,
                v,
                "only Watts makes energy; leave the key out",
            ));
        }
        if let (Target::Lan { .. }, Some(u)) = (&self.target, &self.username)
            && (u.len() > 16 || !u.is_ascii())
        {
            return Err(ConfigError::new(
                KEY_USERNAME,
                u,
                "IPMI user names are at most 16 ASCII characters",
            ));
        }
        for key in &IGNORED_KEYS {
            if values.get(key).is_some() {
                log::info!(
                    "{key} is accepted for compatibility with acct_gather_energy/ipmi and has no effect here"
                );
            }
        }
        Ok(())
    }
}

fn parse_host(v: &str) -> Result<Target, ConfigError> {
    let err = |why: &str| ConfigError::new(KEY_HOST, v, why);
    // [v6::addr]:port, host:port, or host
    let (host, port) = if let Some(rest) = v.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(|| err("unclosed ["))?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err(err("expected [address]:port")),
        }
    } else if v.matches(':').count() == 1 {
        let (h, p) = v
            .split_once(':')
            .ok_or_else(|| err("expected host[:port]"))?;
        (h, Some(p))
    } else {
        (v, None)
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(err("expected host[:port]"));
    }
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| err("the port must be 1-65535"))?,
        None => DEFAULT_LAN_PORT,
    };
    Ok(Target::Lan {
        host: host.to_string(),
        port,
    })
}

fn positive(key: &'static str, v: &str) -> Result<u32, ConfigError> {
    v.parse::<u32>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| ConfigError::new(key, v, "expected a whole number of seconds, at least 1"))
}

/// Slurm's syntax: `Node=DCMI`, `Node=DCMI_ENHANCED`, `Node=16,19;Socket0=16`. The node's
/// power is the sum of the `Node` sensors; other labels are accepted and not used.
pub(super) fn parse_power_sensors(v: &str) -> Result<PowerSensors, ConfigError> {
    let err = |why: String| ConfigError::new(KEY_POWER_SENSORS, v, why);
    let mut node = None;
    for part in v.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (label, list) = part
            .split_once('=')
            .ok_or_else(|| err(format!("{part:?} is not LABEL=ids")))?;
        let label = label.trim();
        if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(err(format!("bad label {label:?}")));
        }
        let sensors = match list.trim() {
            l if l.eq_ignore_ascii_case("DCMI") => PowerSensors::Dcmi { enhanced: false },
            l if l.eq_ignore_ascii_case("DCMI_ENHANCED") => PowerSensors::Dcmi { enhanced: true },
            l => PowerSensors::Records(
                l.split(',')
                    .map(|id| {
                        id.trim()
                            .parse::<u16>()
                            .map_err(|_| err(format!("{:?} is not a sensor record id", id.trim())))
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        if label.eq_ignore_ascii_case("Node") {
            if node.is_some() {
                return Err(err("Node is given twice".into()));
            }
            node = Some(sensors);
        }
    }
    node.ok_or_else(|| err("Node=... is required (the sensors that make the node's power)".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&'static str, &str)]) -> Result<IpmiConfig, ConfigError> {
        let mut values = KeyValues::new();
        for (k, v) in pairs {
            values.set(k, *v);
        }
        IpmiConfig::parse(&values)
    }

    /// One acct_gather.conf for a cluster of BMCs named after their nodes.
    #[test]
    #[cfg(feature = "ipmi")]
    fn the_host_names_each_nodes_own_bmc() {
        use crate::plugin::Plugin;
        let c = parse(&[(KEY_HOST, "%n-ipmi:6230")]).expect("valid");
        let mine = super::super::Ipmi::for_node(&c, "node17");
        assert_eq!(
            mine.target,
            Target::Lan {
                host: "node17-ipmi".into(),
                port: 6230
            }
        );
        // in band there is no host to name
        let local = parse(&[]).expect("defaults");
        assert_eq!(super::super::Ipmi::for_node(&local, "n1"), local);
    }

    #[test]
    fn defaults_are_in_band() {
        let c = parse(&[]).expect("defaults");
        assert_eq!(c.target, Target::Device("/dev/ipmi0".into()));
        assert_eq!(c.frequency, Duration::from_secs(1));
        assert!(c.calc_adjustment);
        assert_eq!(c.sensors, PowerSensors::Auto);
    }

    #[test]
    fn out_of_band_and_slurm_keys() {
        let c = parse(&[
            (KEY_HOST, "bmc-n1:9623"),
            (KEY_USERNAME, "slurm"),
            (KEY_PASSWORD, "s3cret"),
            (KEY_FREQUENCY, "0.5"),
            (KEY_CALC_ADJUSTMENT, "Yes"),
            (KEY_POWER_SENSORS, "Node=16,19;Socket0=16"),
            ("EnergyIPMIWorkaroundFlags", "16"),
        ])
        .expect("valid");
        assert_eq!(
            c.target,
            Target::Lan {
                host: "bmc-n1".into(),
                port: 9623
            }
        );
        assert_eq!(c.sensors, PowerSensors::Records(vec![16, 19]));
        assert_eq!(c.frequency, Duration::from_millis(500));
        assert!(c.calc_adjustment);
        assert_eq!(
            parse(&[(KEY_HOST, "[fe80::1]")]).expect("v6").target,
            Target::Lan {
                host: "fe80::1".into(),
                port: 623
            }
        );
        assert_eq!(
            parse_power_sensors("Node=DCMI_ENHANCED"),
            Ok(PowerSensors::Dcmi { enhanced: true })
        );
    }

    #[test]
    fn the_password_is_never_shown() {
        let c = parse(&[(KEY_PASSWORD, "topsecret"), (KEY_HOST, "h")]).expect("valid");
        assert!(!format!("{c:?}").contains("topsecret"));
        assert!(
            c.show()
                .iter()
                .all(|(k, v)| *k != KEY_PASSWORD && !v.contains("topsecret"))
        );
        let long = "x".repeat(21);
        let err = parse(&[(KEY_PASSWORD, &long)]).expect_err("too long");
        assert!(!err.to_string().contains(&long));
    }

    /// The password from a root-only file: read when the BMC is opened, never shown; the
    /// file's path is.
    #[test]
    fn the_password_file_is_read_at_open_and_only_its_path_shown() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bmc.pass");
        std::fs::write(&path, "topsecret\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let file = path.display().to_string();
        let c = parse(&[(KEY_HOST, "h"), (KEY_PASSWORD_FILE, &file)]).expect("valid");
        assert_eq!(c.password.expose(), "", "not read at parse");
        assert!(c.show().contains(&(KEY_PASSWORD_FILE, file.clone())));
        let opened = c.with_password().expect("readable");
        assert_eq!(opened.password.expose(), "topsecret");
        assert!(opened.show().iter().all(|(_, v)| !v.contains("topsecret")));
        let e = parse(&[(KEY_PASSWORD, "topsecret"), (KEY_PASSWORD_FILE, &file)])
            .expect_err("both")
            .to_string();
        assert!(e.contains("EnergyIPMIPasswordFile") && e.contains("EnergyIPMIPassword is set"));
        assert!(!e.contains("topsecret"), "{e}");
        std::fs::write(&path, "x".repeat(21)).expect("write");
        let e = c.with_password().expect_err("too long");
        assert!(e.contains(&file) && !e.contains("xxxx"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let e = c.with_password().expect_err("writable by others");
        assert!(
            e.starts_with(&format!("EnergyIPMIPasswordFile={file}: ")),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_key_and_value() {
        for (key, value) in [
            (KEY_FREQUENCY, "0"),
            (KEY_FREQUENCY, "0.01"),
            (KEY_FREQUENCY, "ten"),
            (KEY_TIMEOUT, "-1"),
            (KEY_CALC_ADJUSTMENT, "maybe"),
            (KEY_POWER_SENSORS, "Socket0=16"),
            (KEY_POWER_SENSORS, "Node=16,x"),
            (KEY_POWER_SENSORS, "Node"),
            (KEY_HOST, "bmc:0"),
            (KEY_HOST, "bmc:http"),
            (KEY_VARIABLE, "Temp"),
            (KEY_DRIVER_DEVICE, "ipmi0"),
        ] {
            let text = parse(&[(key, value)]).expect_err(value).to_string();
            assert!(text.contains(&format!("{key}={value}")), "{text}");
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text for any key parses or names the key; never panics, never echoes a
        /// password.
        #[test]
        fn any_value_parses_or_names_its_key(key in proptest::sample::select(KEYS.to_vec()), value in ".{0,40}") {
            let mut values = KeyValues::new();
            values.set(key, value.clone());
            if let Err(e) = IpmiConfig::parse(&values) {
                prop_assert_eq!(e.key, key);
                if key == KEY_PASSWORD {
                    prop_assert!(!e.to_string().contains(&value) || value.is_empty() || "<hidden>".contains(&value));
                }
            }
        }

        /// Generated valid sensor lists round-trip.
        #[test]
        fn record_lists_round_trip(ids in proptest::collection::vec(any::<u16>(), 1..8), extra in "[A-Za-z0-9_]{1,8}") {
            let list = ids.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
            let text = format!("{extra}=1;Node={list}");
            let parsed = parse_power_sensors(&text);
            if extra.eq_ignore_ascii_case("Node") {
                prop_assert!(parsed.is_err());
            } else {
                prop_assert_eq!(parsed, Ok(PowerSensors::Records(ids)));
            }
        }

        #[test]
        fn hosts_with_ports_round_trip(host in "[a-z][a-z0-9.-]{0,20}", port in 1u16..) {
            prop_assert_eq!(parse_host(&format!("{host}:{port}")), Ok(Target::Lan { host, port }));
        }
    }
}
