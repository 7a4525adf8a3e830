//! The kernel's hwmon power sensors (`/sys/class/hwmon`, or the directory acct_gather.conf
//! gives rust_hwmon): the sensors the plugin counts (an ACPI power meter, Grace Hopper's
//! module rails, Grace's sockets), read here by senergy itself and summed: their mean
//! powers (µW), or their energy counters (µJ).

use std::io;
use std::path::PathBuf;

use slurm_energy_logic::{HwmonConfig, hwmon_counted_files};

use super::reader::{Quantity, Reader, Scope, Slot, Unavailable, boxed};
use super::site::{NodeConf, configured};

/// The sensors in the directory the plugin would read.
pub(super) fn slot(site: &NodeConf) -> Slot {
    let config = configured::<slurm_energy_logic::Hwmon>(site)
        .map(|c| c.keys)
        .unwrap_or_default();
    Slot {
        name: "hwmon",
        scope: Scope::WholeNode,
        reader: HwmonReader::open(&config).map(boxed),
    }
}

struct HwmonReader {
    files: Vec<PathBuf>,
    quantity: Quantity,
}

impl HwmonReader {
    fn open(config: &HwmonConfig) -> Result<HwmonReader, Unavailable> {
        let files = hwmon_counted_files(config).map_err(Unavailable::Absent)?;
        let energy = files.iter().all(|f| {
            f.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("energy"))
        });
        let mut reader = HwmonReader {
            files,
            quantity: if energy {
                Quantity::Energy
            } else {
                Quantity::Power
            },
        };
        reader.read()?;
        Ok(reader)
    }
}

impl Reader for HwmonReader {
    fn path(&self) -> String {
        let files: Vec<String> = self.files.iter().map(|f| f.display().to_string()).collect();
        format!("{} (hwmon, summed)", files.join(" + "))
    }
    fn scope(&self) -> Scope {
        Scope::WholeNode
    }
    fn quantity(&self) -> Quantity {
        self.quantity
    }
    /// Watts (the sum of the means), or joules (the sum of the counters).
    fn read(&mut self) -> Result<f64, Unavailable> {
        let mut sum = 0.0;
        for file in &self.files {
            let text = std::fs::read_to_string(file).map_err(|e| {
                let what = format!("{}: {e}", file.display());
                match e.kind() {
                    io::ErrorKind::PermissionDenied => Unavailable::Denied(what),
                    _ => Unavailable::Failed(what),
                }
            })?;
            let micro: u64 = text.trim().parse().map_err(|_| {
                Unavailable::Failed(format!(
                    "{} holds {:?}, not a whole number of micro-units",
                    file.display(),
                    text.trim()
                ))
            })?;
            sum += micro as f64 / 1e6;
        }
        Ok(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counted_sensors_are_read_and_summed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = HwmonConfig {
            dir: tmp.path().to_path_buf(),
            ..HwmonConfig::default()
        };
        let absent = HwmonReader::open(&config).err().expect("absent");
        assert_eq!(absent.status(), "absent");
        for (n, label, uw) in [
            (1, "Module Power Socket 0", "400000000"),
            (2, "Grace Power Socket 0", "100000000"),
            (3, "Module Power Socket 1", "250500000"),
        ] {
            let dir = tmp.path().join(format!("hwmon{n}"));
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::write(dir.join("name"), "power_meter\n").expect("name");
            std::fs::write(dir.join("power1_oem_info"), format!("{label}\n")).expect("label");
            std::fs::write(dir.join("power1_average"), format!("{uw}\n")).expect("power");
        }
        let mut reader = HwmonReader::open(&config).expect("opened");
        assert_eq!(reader.quantity(), Quantity::Power);
        assert_eq!(reader.read(), Ok(650.5));
        std::fs::write(tmp.path().join("hwmon3/power1_average"), "garbage\n").expect("write");
        assert_eq!(reader.read().expect_err("garbage").status(), "failed");
    }
}
