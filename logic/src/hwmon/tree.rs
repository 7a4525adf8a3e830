//! The hwmon class directory: its chips (`hwmonN`), their power and energy channels, and
//! one read of a channel.
//!
//! The kernel's hwmon sysfs interface (Documentation/hwmon/sysfs-interface.rst):
//! `energyN_input` is a counter in microjoules; `powerN_average` a mean power in
//! microwatts over `powerN_average_interval` milliseconds (the ACPI power meter,
//! drivers/hwmon/acpi_power_meter.c: `power1_average`, `power1_average_interval`,
//! `power1_oem_info`, `power1_model_number`, ...); `powerN_input` an instantaneous power in
//! microwatts; `powerN_label` names a channel, as an ACPI meter's `powerN_oem_info` does
//! (NVIDIA Grace: "Module Power Socket 0", "Grace Power Socket 0", ...). The chip's
//! `name` is the driver's (`power_meter` for ACPI). The attributes sit in `hwmonN/`, or in
//! `hwmonN/device/` where a driver creates them on its device (acpi_power_meter before
//! Linux 6.x).

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a channel measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Input {
    /// `energyN_input`: a counter, microjoules.
    Energy(PathBuf),
    /// `powerN_average` (`interval`: `powerN_average_interval`, where there is one) or
    /// `powerN_input` (no interval: the power at the instant read), microwatts.
    Power {
        file: PathBuf,
        interval: Option<PathBuf>,
    },
}

/// One power or energy channel of a chip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Channel {
    /// `hwmonN/power1_average` (or `hwmonN/device/...`), for the log and the errors.
    pub what: String,
    /// The chip's `name`.
    pub chip: String,
    /// `powerN_label`, else `powerN_oem_info` (`energyN_label` for a counter).
    pub label: Option<String>,
    pub input: Input,
}

/// A value that could not be read, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ReadError {
    #[error("{what}: {error}")]
    Io { what: String, error: String },
    #[error("{what}: cannot read {text:?} as {unit}")]
    Garbage {
        what: String,
        text: String,
        unit: &'static str,
    },
}

/// A sysfs attribute, read in one `read` (what the kernel returns at once).
fn read_text(path: &Path) -> io::Result<String> {
    let mut buf = [0u8; 256];
    let mut f = fs::File::open(path)?;
    let n = f.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// A whole number in `unit`, the whole attribute (one line); an error names `what`.
pub(super) fn read_number(path: &Path, what: &str, unit: &'static str) -> Result<u64, ReadError> {
    let text = read_text(path).map_err(|e| ReadError::Io {
        what: what.to_string(),
        error: e.to_string(),
    })?;
    text.trim().parse().map_err(|_| ReadError::Garbage {
        what: what.to_string(),
        text: text.trim().chars().take(40).collect(),
        unit,
    })
}

impl Channel {
    /// The averaging interval now, where the channel has one; an unreadable or zero one is
    /// none (the power is then taken as at the instant read).
    pub(super) fn interval(&self) -> Option<Duration> {
        let Input::Power {
            interval: Some(path),
            ..
        } = &self.input
        else {
            return None;
        };
        read_number(path, "", "milliseconds")
            .ok()
            .filter(|ms| (1..=3_600_000).contains(ms))
            .map(Duration::from_millis)
    }
}

/// A readable text attribute, trimmed, if not empty.
fn text_attribute(path: &Path) -> Option<String> {
    let text = read_text(path).ok()?;
    let text = text.trim();
    (!text.is_empty() && !text.chars().any(char::is_control)).then(|| text.to_string())
}

/// The number of `hwmonN`.
fn hwmon_number(name: &str) -> Option<u32> {
    name.strip_prefix("hwmon")?.parse().ok()
}

/// `(kind, N, attribute)` of `energyN_input`, `powerN_average`, `powerN_input`.
fn channel_file(name: &str) -> Option<(&'static str, u32, &'static str)> {
    for (kind, attr) in [
        ("energy", "input"),
        ("power", "average"),
        ("power", "input"),
    ] {
        let n = name
            .strip_prefix(kind)
            .and_then(|rest| rest.strip_suffix(&format!("_{attr}") as &str))
            .and_then(|n| n.parse().ok());
        if let Some(n) = n {
            return Some((kind, n, attr));
        }
    }
    None
}

/// The channels of one chip directory `dir` (`hwmonN` or `hwmonN/device`), as `shown`
/// (`hwmonN` or `hwmonN/device`) in the log.
fn channels_in(dir: &Path, shown: &str, chip: &str) -> Vec<Channel> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(&'static str, u32, &'static str)> = entries
        .flatten()
        .filter_map(|e| channel_file(e.file_name().to_str()?))
        .collect();
    // by channel, `average` before `input` for one channel number
    found.sort_by_key(|(kind, n, attr)| (*kind, *n, *attr != "average"));
    // a counter where the chip has one; else each power channel once, its mean first
    let energy = found.iter().any(|(kind, ..)| *kind == "energy");
    let mut channels: Vec<Channel> = Vec::new();
    let mut taken: Vec<u32> = Vec::new();
    for (kind, n, attr) in found {
        if (energy && kind != "energy") || taken.contains(&n) {
            continue;
        }
        taken.push(n);
        let file = dir.join(format!("{kind}{n}_{attr}"));
        let label = text_attribute(&dir.join(format!("{kind}{n}_label")))
            .or_else(|| text_attribute(&dir.join(format!("{kind}{n}_oem_info"))));
        let input = if kind == "energy" {
            Input::Energy(file)
        } else {
            let interval = dir.join(format!("power{n}_average_interval"));
            Input::Power {
                file,
                interval: (attr == "average" && interval.exists()).then_some(interval),
            }
        };
        channels.push(Channel {
            what: format!("{shown}/{kind}{n}_{attr}"),
            chip: chip.to_string(),
            label,
            input,
        });
    }
    channels
}

/// Every power and energy channel under `root`, chip by chip in the order of their
/// numbers.
pub(super) fn channels(root: &Path) -> io::Result<Vec<Channel>> {
    let mut chips: Vec<(u32, String)> = fs::read_dir(root)?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some((hwmon_number(&name)?, name))
        })
        .collect();
    chips.sort_unstable();
    let mut all = Vec::new();
    for (_, hwmon) in chips {
        let dir = root.join(&hwmon);
        let device = dir.join("device");
        let chip = text_attribute(&dir.join("name"))
            .or_else(|| text_attribute(&device.join("name")))
            .unwrap_or_default();
        let mut found = channels_in(&dir, &hwmon, &chip);
        if found.is_empty() {
            found = channels_in(&device, &format!("{hwmon}/device"), &chip);
        }
        all.extend(found);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).expect("mkdir");
        }
        fs::write(path, format!("{text}\n")).expect("write");
    }

    #[test]
    fn finds_channels_in_the_chip_or_on_its_device() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        // a Grace Hopper meter, as Linux 6.x lays it out
        write(&root.join("hwmon10/name"), "power_meter");
        write(&root.join("hwmon10/power1_average"), "400000000");
        write(&root.join("hwmon10/power1_average_interval"), "50");
        write(
            &root.join("hwmon10/power1_oem_info"),
            "Module Power Socket 0",
        );
        // an older kernel's: the attributes on the ACPI device
        write(&root.join("hwmon2/device/name"), "power_meter");
        write(&root.join("hwmon2/device/power1_average"), "300000000");
        write(&root.join("hwmon2/device/power1_average_interval"), "1000");
        // a temperature sensor only, and a chip with counters beside its power
        write(&root.join("hwmon0/name"), "acpitz");
        write(&root.join("hwmon0/temp1_input"), "27800");
        write(&root.join("hwmon3/name"), "amd_energy");
        write(&root.join("hwmon3/energy1_input"), "12345");
        write(&root.join("hwmon3/energy1_label"), "Esocket0");
        write(&root.join("hwmon3/power1_input"), "5");
        write(&root.join("hwmon4/name"), "ina3221");
        write(&root.join("hwmon4/power2_input"), "5000000");
        write(&root.join("hwmon4/power2_label"), "VDD_IN");
        let found = channels(root).expect("channels");
        let whats: Vec<&str> = found.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(
            whats,
            [
                "hwmon2/device/power1_average",
                "hwmon3/energy1_input",
                "hwmon4/power2_input",
                "hwmon10/power1_average"
            ]
        );
        assert_eq!(found[0].chip, "power_meter");
        assert_eq!(found[0].interval(), Some(Duration::from_millis(1000)));
        assert_eq!(found[1].label.as_deref(), Some("Esocket0"));
        assert!(matches!(found[1].input, Input::Energy(_)));
        assert_eq!(found[2].interval(), None);
        assert_eq!(found[3].label.as_deref(), Some("Module Power Socket 0"));
        assert_eq!(found[3].interval(), Some(Duration::from_millis(50)));
    }

    #[test]
    fn a_bad_value_is_named() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("power1_average");
        write(&file, "12x");
        let e = read_number(&file, "hwmon1/power1_average", "microwatts").expect_err("bad");
        assert_eq!(
            e.to_string(),
            "hwmon1/power1_average: cannot read \"12x\" as microwatts"
        );
        write(&file, "-5");
        assert!(read_number(&file, "w", "microwatts").is_err());
        fs::remove_file(&file).expect("rm");
        let e = read_number(&file, "hwmon1/power1_average", "microwatts").expect_err("gone");
        assert!(e.to_string().starts_with("hwmon1/power1_average: "), "{e}");
        write(&file, "412000000");
        assert_eq!(read_number(&file, "w", "microwatts"), Ok(412_000_000));
    }
}
