//! RAPL through the powercap class (`/sys/class/powercap/intel-rapl:N[:M]`), which the
//! kernel provides for Intel and, on recent kernels, AMD.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::domain::Domain;

/// One zone with an energy counter.
#[derive(Debug)]
pub(super) struct Zone {
    pub name: String,
    pub domain: Domain,
    /// `energy_uj` runs from 0 to `max_energy_range_uj` inclusive, then wraps.
    pub max_energy_range_uj: u64,
    pub energy: EnergyFile,
}

/// All RAPL zones under `<sys>/class/powercap`, whose counters can be read, in path order.
/// Zones that cannot be used are returned as reasons.
pub(super) fn zones(sys: &Path) -> (Vec<Zone>, Vec<String>) {
    let class = sys.join("class/powercap");
    let mut dirs: Vec<PathBuf> = match fs::read_dir(&class) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("intel-rapl:"))
            .map(|e| e.path())
            .collect(),
        Err(e) => {
            return (
                vec![],
                vec![format!("cannot list {}: {e}", class.display())],
            );
        }
    };
    // sub-zones (intel-rapl:0:0) are listed flat in the class directory too
    dirs.sort();
    let mut zones = Vec::new();
    let mut problems = Vec::new();
    for dir in dirs {
        match zone(&dir) {
            Ok(Some(z)) => zones.push(z),
            Ok(None) => {}
            Err(e) => problems.push(e),
        }
    }
    if zones.is_empty() && problems.is_empty() {
        problems.push(format!("no RAPL zone under {}", class.display()));
    }
    (zones, problems)
}

fn zone(dir: &Path) -> Result<Option<Zone>, String> {
    let read = |file: &str| {
        fs::read_to_string(dir.join(file))
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("cannot read {}: {e}", dir.join(file).display()))
    };
    let name = read("name")?;
    let domain = if name.starts_with("package") {
        Domain::Package
    } else if name == "dram" {
        Domain::Dram
    } else if name == "psys" {
        Domain::Psys
    } else {
        return Ok(None); // core/uncore are parts of the package
    };
    let range_text = read("max_energy_range_uj")?;
    let max_energy_range_uj = range_text.parse().map_err(|_| {
        format!(
            "cannot parse {}: {range_text:?}",
            dir.join("max_energy_range_uj").display()
        )
    })?;
    let energy = EnergyFile::open(&dir.join("energy_uj"))?;
    energy
        .read_raw()
        .map_err(|e| format!("cannot read {}: {e}", energy.path.display()))?;
    Ok(Some(Zone {
        name,
        domain,
        max_energy_range_uj,
        energy,
    }))
}

/// An `energy_uj` file, opened once and re-read with `pread` at offset 0.
#[derive(Debug)]
pub(super) struct EnergyFile {
    file: File,
    path: PathBuf,
}

impl EnergyFile {
    pub(super) fn open(path: &Path) -> Result<Self, String> {
        File::open(path)
            .map(|file| Self {
                file,
                path: path.to_path_buf(),
            })
            .map_err(|e| {
                let advice = if e.kind() == io::ErrorKind::PermissionDenied {
                    " (energy_uj is readable by root only)"
                } else {
                    ""
                };
                format!("cannot open {}: {e}{advice}", path.display())
            })
    }

    pub(super) fn read_raw(&self) -> io::Result<u64> {
        let mut buf = [0u8; 24];
        let n = nix::sys::uio::pread(&self.file, &mut buf, 0).map_err(io::Error::from)?;
        parse_decimal(&buf[..n]).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} does not hold a number", self.path.display()),
            )
        })
    }
}

/// Parses `123456\n` without allocating.
fn parse_decimal(bytes: &[u8]) -> Option<u64> {
    let digits = bytes.trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit()
            .then(|| acc.checked_mul(10)?.checked_add(u64::from(b - b'0')))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn fake_zone(sys: &Path, id: &str, name: &str, energy: u64, range: u64) {
        let dir = sys.join("class/powercap").join(id);
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("name"), format!("{name}\n")).expect("name");
        fs::write(dir.join("energy_uj"), format!("{energy}\n")).expect("energy");
        fs::write(dir.join("max_energy_range_uj"), format!("{range}\n")).expect("range");
    }

    #[test]
    fn finds_package_dram_and_psys_zones_and_skips_core() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let sys = tmp.path();
        fake_zone(sys, "intel-rapl:0", "package-0", 10, 262_143_328_850);
        fake_zone(sys, "intel-rapl:0:0", "core", 5, 262_143_328_850);
        fake_zone(sys, "intel-rapl:0:1", "dram", 7, 65_712_999_613);
        fake_zone(sys, "intel-rapl:1", "psys", 9, 262_143_328_850);
        fake_zone(sys, "intel-rapl-mmio:0", "package-0", 1, 1);
        let (zones, problems) = zones(sys);
        assert!(problems.is_empty(), "{problems:?}");
        let found: Vec<_> = zones.iter().map(|z| (z.name.as_str(), z.domain)).collect();
        assert_eq!(
            found,
            vec![
                ("package-0", Domain::Package),
                ("dram", Domain::Dram),
                ("psys", Domain::Psys)
            ]
        );
        assert_eq!(zones[1].max_energy_range_uj, 65_712_999_613);
        assert_eq!(zones[1].energy.read_raw().expect("read"), 7);
    }

    #[test]
    fn unreadable_or_garbled_zones_are_reported() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let sys = tmp.path();
        fake_zone(sys, "intel-rapl:0", "package-0", 10, 100);
        fs::write(
            sys.join("class/powercap/intel-rapl:0/max_energy_range_uj"),
            "x",
        )
        .expect("w");
        let (zones, problems) = zones(sys);
        assert!(zones.is_empty());
        assert!(problems[0].contains("max_energy_range_uj"), "{problems:?}");
        let (_, problems) = super::zones(&sys.join("nothing"));
        assert!(problems[0].contains("cannot list"));
    }

    #[test]
    fn decimal_parsing() {
        assert_eq!(parse_decimal(b"123456\n"), Some(123_456));
        assert_eq!(parse_decimal(b" 0 "), Some(0));
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"12a"), None);
        assert_eq!(parse_decimal(b"99999999999999999999999"), None);
    }
}
