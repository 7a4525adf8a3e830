//! The rust_hwmon keys of acct_gather.conf.

use std::path::PathBuf;

use crate::config::{ConfigError, KeyValues, config_keys};
use crate::power::{parse_max_watts, show_max_watts};

/// More than any node draws: a power reading above it, or a counter rising faster, is no
/// node's (a GH200 node of four modules draws up to about 4 x 1000 W).
pub(super) const DEFAULT_MAX_WATTS: u32 = 20_000;

const DEFAULT_DIR: &str = "/sys/class/hwmon";

/// What `EnergyHwmonSensors` names when not set: the platform's default.
const AUTO: &str = "auto";

config_keys! {
    /// rust_hwmon's acct_gather.conf keys: where hwmon is, which sensors count.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct HwmonConfig {
        /// The kernel's hwmon class directory, whose power and energy sensors are read: an
        /// absolute path.
        pub dir: PathBuf = PathBuf::from(DEFAULT_DIR), {
            KEY_DIR = "EnergyHwmonDir": parse(|k, v| {
                if !v.starts_with('/') {
                    return Err(ConfigError::new(k, v, "expected an absolute directory path"));
                }
                Ok(PathBuf::from(v))
            }),
            show(|d| d.display().to_string());
        }
        /// Which sensors make the node's energy. `auto`: on Grace Hopper (GH200, GB200's
        /// Grace) the module rails ("Module Power Socket N", each whole superchip), on
        /// Grace the CPU sockets ("Grace Power Socket N"), elsewhere every ACPI power meter
        /// (chip `power_meter`); the other Grace rails are reported beside the node, never
        /// added. Or the sensors named, separated by commas: by label (`powerN_label`,
        /// `powerN_oem_info`), chip name, or rail kind (`module`, `grace`, `cpu`, `sysio`,
        /// `power_meter`). slurmd's log says which sensors are counted.
        pub sensors: Vec<String> = Vec::new(), {
            KEY_SENSORS = "EnergyHwmonSensors": parse(|k, v| parse_sensors(k, v)),
            show(|names| if names.is_empty() { AUTO.to_string() } else { names.join(",") });
        }
        /// The most power the node can draw, in whole watts: a power reading above it, or
        /// an energy counter rising faster, is not counted as energy.
        pub max_watts: Option<u32> = None, {
            KEY_MAX_WATTS = "EnergyHwmonMaxWatts": parse(|k, v| parse_max_watts(k, v).map(Some)),
                show(|w| show_max_watts(*w, DEFAULT_MAX_WATTS, false));
        }
    }
}

/// `auto`, or a comma-separated list of labels, chip names or rail kinds.
fn parse_sensors(key: &'static str, v: &str) -> Result<Vec<String>, ConfigError> {
    if v.eq_ignore_ascii_case(AUTO) {
        return Ok(Vec::new());
    }
    let names: Vec<String> = v.split(',').map(|n| n.trim().to_string()).collect();
    if names
        .iter()
        .any(|n| n.is_empty() || n.chars().any(char::is_control))
    {
        return Err(ConfigError::new(
            key,
            v,
            "expected auto, or sensor labels, chip names or rail kinds separated by commas",
        ));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_errors_name_the_key() {
        let mut values = KeyValues::new();
        let c = HwmonConfig::parse(&values).expect("default");
        assert_eq!(c.dir, PathBuf::from("/sys/class/hwmon"));
        assert!(c.sensors.is_empty());
        values.set(KEY_DIR, "hwmon");
        let e = HwmonConfig::parse(&values).expect_err("relative");
        assert!(e.to_string().contains("EnergyHwmonDir=hwmon"), "{e}");
        values.set(KEY_DIR, "/tmp/hwmon");
        values.set(KEY_SENSORS, "Module Power Socket 0, module");
        let c = HwmonConfig::parse(&values).expect("valid");
        assert_eq!(c.sensors, ["Module Power Socket 0", "module"]);
        assert_eq!(
            c.show(),
            vec![
                (KEY_DIR, "/tmp/hwmon".to_string()),
                (KEY_SENSORS, "Module Power Socket 0,module".to_string()),
                (KEY_MAX_WATTS, "20000".to_string())
            ]
        );
        values.set(KEY_SENSORS, "module,,grace");
        let e = HwmonConfig::parse(&values).expect_err("empty name");
        assert!(
            e.to_string().contains("EnergyHwmonSensors=module,,grace"),
            "{e}"
        );
        values.set(KEY_SENSORS, "AUTO");
        assert!(
            HwmonConfig::parse(&values)
                .expect("auto")
                .sensors
                .is_empty()
        );
        values.set(KEY_MAX_WATTS, "0");
        let e = HwmonConfig::parse(&values).expect_err("no watts");
        assert!(e.to_string().contains("EnergyHwmonMaxWatts=0"), "{e}");
    }
}
