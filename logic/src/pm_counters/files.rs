//! The node controller's files and one consistent scan of them.
//!
//! Each value file reads like `123456 J 1734094386462336 us`: the value, its unit, and the
//! time of the controller's scan in microseconds. `freshness` counts scans (about 10 per
//! second) and `startup` changes when the controller restarts (its counters start again
//! from zero). A scan is consistent when `freshness` did not change while the files were
//! read and every value carries the same scan time; otherwise it is read again.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Reads of a scan that keeps changing before it is taken as it is (with a problem noted).
const ATTEMPTS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value {
    pub value: u64,
    /// The controller's scan time, microseconds since the epoch.
    pub at_us: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum FileError {
    #[error("{file}: {error}")]
    Io { file: String, error: String },
    #[error("{file}: cannot read {text:?} as \"VALUE {unit} TIMESTAMP us\"")]
    Garbage {
        file: String,
        text: String,
        unit: &'static str,
    },
}

/// Parses `VALUE UNIT TIMESTAMP us` with the expected unit (`J` or `W`).
pub fn parse_value(text: &str, unit: &str) -> Option<Value> {
    let mut words = text.split_whitespace();
    let value = words.next()?.parse().ok()?;
    if words.next()? != unit {
        return None;
    }
    let at_us = words.next()?.parse().ok()?;
    (words.next()? == "us" && words.next().is_none()).then_some(Value { value, at_us })
}

/// One energy/power pair: the node's (`energy`, `power`) or a part's (`cpu_energy`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pair {
    /// `""` for the node, else the file prefix (`cpu`, `memory`, `accel0`).
    pub prefix: String,
}

impl Pair {
    fn file(&self, what: &str) -> String {
        if self.prefix.is_empty() {
            what.to_string()
        } else {
            format!("{}_{what}", self.prefix)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PairValues {
    pub energy_j: Value,
    pub watts: Value,
}

/// One scan: the node's pair, then each part's in the order asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Scan {
    pub startup: String,
    pub node: Result<PairValues, FileError>,
    pub parts: Vec<Result<PairValues, FileError>>,
    /// The scan kept changing while it was read: values may come from different scans.
    pub torn: bool,
}

impl Scan {
    fn scan_times(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(&self.node)
            .chain(&self.parts)
            .flatten()
            .flat_map(|p| [p.energy_j.at_us, p.watts.at_us])
    }

    fn of_one_scan(&self) -> bool {
        let mut times = self.scan_times();
        let first = times.next();
        times.all(|t| Some(t) == first)
    }
}

/// The directory of a node controller.
#[derive(Debug, Clone)]
pub(super) struct Files {
    pub dir: PathBuf,
}

impl Files {
    fn read(&self, name: &str) -> Result<String, FileError> {
        read_text(&self.dir.join(name)).map_err(|e| FileError::Io {
            file: name.to_string(),
            error: e.to_string(),
        })
    }

    fn value(&self, name: &str, unit: &'static str) -> Result<Value, FileError> {
        let text = self.read(name)?;
        parse_value(&text, unit).ok_or_else(|| FileError::Garbage {
            file: name.to_string(),
            text: text.trim().chars().take(60).collect(),
            unit,
        })
    }

    fn pair(&self, pair: &Pair) -> Result<PairValues, FileError> {
        Ok(PairValues {
            energy_j: self.value(&pair.file("energy"), "J")?,
            watts: self.value(&pair.file("power"), "W")?,
        })
    }

    /// The parts beside the node whose files are there: `cpu`, `memory`, `accelN`.
    pub(super) fn parts(&self) -> io::Result<Vec<Pair>> {
        let mut accels: Vec<u32> = fs::read_dir(&self.dir)?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_prefix("accel")?
                    .strip_suffix("_energy")?
                    .parse()
                    .ok()
            })
            .collect();
        accels.sort_unstable();
        let mut parts: Vec<Pair> = ["cpu", "memory"]
            .into_iter()
            .filter(|p| self.dir.join(format!("{p}_energy")).exists())
            .map(|p| Pair { prefix: p.into() })
            .collect();
        parts.extend(accels.into_iter().map(|n| Pair {
            prefix: format!("accel{n}"),
        }));
        Ok(parts)
    }

    /// One consistent scan (see the module's text).
    pub(super) fn scan(&self, parts: &[Pair]) -> Scan {
        let node = Pair {
            prefix: String::new(),
        };
        let mut attempts = 1;
        loop {
            let before = self.read("freshness").ok();
            let mut scan = Scan {
                startup: self.read("startup").unwrap_or_default().trim().to_string(),
                node: self.pair(&node),
                parts: parts.iter().map(|p| self.pair(p)).collect(),
                torn: false,
            };
            let after = self.read("freshness").ok();
            if before == after && scan.of_one_scan() {
                return scan;
            }
            if attempts == ATTEMPTS {
                scan.torn = true;
                return scan;
            }
            attempts += 1;
        }
    }
}

/// A sysfs attribute is read in one `read` (what the kernel returns at once); 128 bytes
/// hold any value line.
fn read_text(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut buf = [0u8; 128];
    let mut f = fs::File::open(path)?;
    let n = f.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_controllers_format() {
        assert_eq!(
            parse_value("123456 J 1734094386462336 us\n", "J"),
            Some(Value {
                value: 123456,
                at_us: 1734094386462336
            })
        );
        assert_eq!(
            parse_value("243 W 1734094386462336 us", "W").map(|v| v.value),
            Some(243)
        );
        for bad in [
            "",
            "123456",
            "123456 J",
            "123456 W 1734094386462336 us",
            "-5 J 1734094386462336 us",
            "12x J 1734094386462336 us",
            "123456 J 1734094386462336 ms",
            "123456 J 1734094386462336 us extra",
            "\u{0}\u{1}garbage",
        ] {
            assert_eq!(parse_value(bad, "J"), None, "{bad:?}");
        }
    }

    fn write(dir: &Path, name: &str, text: &str) {
        fs::write(dir.join(name), text).expect("write");
    }

    fn node_files(dir: &Path, energy: u64, at_us: u64) {
        write(dir, "freshness", "17\n");
        write(dir, "startup", "1734000000000000\n");
        write(dir, "energy", &format!("{energy} J {at_us} us\n"));
        write(dir, "power", &format!("300 W {at_us} us\n"));
    }

    #[test]
    fn finds_the_parts_in_order() {
        let tmp = tempfile::tempdir().expect("tempdir");
        node_files(tmp.path(), 1, 1);
        for f in [
            "accel10_energy",
            "accel2_energy",
            "memory_energy",
            "cpu_energy",
        ] {
            write(tmp.path(), f, "1 J 1 us\n");
        }
        let files = Files {
            dir: tmp.path().into(),
        };
        let prefixes: Vec<String> = files
            .parts()
            .expect("parts")
            .into_iter()
            .map(|p| p.prefix)
            .collect();
        assert_eq!(prefixes, ["cpu", "memory", "accel2", "accel10"]);
    }

    #[test]
    fn a_scan_mixing_two_controller_scans_is_torn() {
        let tmp = tempfile::tempdir().expect("tempdir");
        node_files(tmp.path(), 1000, 5);
        let files = Files {
            dir: tmp.path().into(),
        };
        let scan = files.scan(&[]);
        assert!(!scan.torn);
        assert_eq!(scan.node.as_ref().map(|n| n.energy_j.value), Ok(1000));
        assert_eq!(scan.startup, "1734000000000000");
        // power from a later scan than energy: never consistent
        write(tmp.path(), "power", "300 W 6 us\n");
        assert!(files.scan(&[]).torn);
    }

    #[test]
    fn a_missing_or_garbage_file_names_itself() {
        let tmp = tempfile::tempdir().expect("tempdir");
        node_files(tmp.path(), 1000, 5);
        let files = Files {
            dir: tmp.path().into(),
        };
        write(tmp.path(), "energy", "ENERGY J\n");
        let err = files.scan(&[]).node.expect_err("garbage");
        assert!(
            err.to_string()
                .starts_with("energy: cannot read \"ENERGY J\""),
            "{err}"
        );
        fs::remove_file(tmp.path().join("energy")).expect("rm");
        let err = files.scan(&[]).node.expect_err("gone");
        assert!(err.to_string().starts_with("energy: "), "{err}");
    }
}
