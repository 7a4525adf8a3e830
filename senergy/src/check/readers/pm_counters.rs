//! A Cray EX/XC node controller's counter in `/sys/cray/pm_counters` (or the directory
//! acct_gather.conf gives rust_pm_counters): the whole node's joules, with the time of the
//! controller's scan that took them.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use slurm_energy_logic::{PmCountersConfig, parse_pm_counters_value};

use super::reader::{Quantity, Reader, Scope, Slot, Unavailable, boxed};
use super::site::{NodeConf, configured};

/// The counter in the directory the plugin would read.
pub(super) fn slot(site: &NodeConf) -> Slot {
    let dir = configured::<PmCountersPlugin>(site)
        .map(|c| c.dir)
        .unwrap_or_else(|_| PmCountersConfig::default().dir);
    Slot {
        name: "pm_counters",
        scope: Scope::WholeNode,
        reader: PmCountersReader::open(dir).map(boxed),
    }
}

/// The plugin, for its configuration keys.
type PmCountersPlugin = slurm_energy_logic::PmCounters;

struct PmCountersReader {
    file: PathBuf,
    /// The controller's scan time of the last value read.
    scanned: Option<std::time::SystemTime>,
}

impl PmCountersReader {
    fn open(dir: PathBuf) -> Result<PmCountersReader, Unavailable> {
        if !dir.is_dir() {
            return Err(Unavailable::Absent(format!(
                "no node controller files at {} (not a Cray EX/XC node)",
                dir.display()
            )));
        }
        let mut reader = PmCountersReader {
            file: dir.join("energy"),
            scanned: None,
        };
        reader.read()?;
        Ok(reader)
    }
}

impl Reader for PmCountersReader {
    fn path(&self) -> String {
        format!("{} (the node controller's counter)", self.file.display())
    }
    fn scope(&self) -> Scope {
        Scope::WholeNode
    }
    fn quantity(&self) -> Quantity {
        Quantity::Energy
    }
    fn stamped(&self) -> Option<std::time::SystemTime> {
        self.scanned
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let text = std::fs::read_to_string(&self.file).map_err(|e| {
            let what = format!("{}: {e}", self.file.display());
            match e.kind() {
                io::ErrorKind::PermissionDenied => Unavailable::Denied(what),
                _ => Unavailable::Failed(what),
            }
        })?;
        let value = parse_pm_counters_value(&text, "J");
        self.scanned = value
            .as_ref()
            .and_then(|v| std::time::UNIX_EPOCH.checked_add(Duration::from_micros(v.at_us)));
        value.map(|v| v.value as f64).ok_or_else(|| {
            Unavailable::Failed(format!(
                "{} holds {:?}, not `JOULES J MICROSECONDS us`",
                self.file.display(),
                text.trim()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pm_counters_files_are_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let absent = PmCountersReader::open(tmp.path().join("none"))
            .err()
            .expect("absent");
        assert_eq!(absent.status(), "absent");
        std::fs::write(tmp.path().join("energy"), "123456 J 1700000000000000 us\n").expect("write");
        let mut reader = PmCountersReader::open(tmp.path().to_path_buf()).expect("opened");
        assert_eq!(reader.read(), Ok(123_456.0));
        std::fs::write(tmp.path().join("energy"), "garbage\n").expect("write");
        assert_eq!(reader.read().expect_err("garbage").status(), "failed");
    }
}
