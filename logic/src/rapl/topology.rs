//! Which CPU packages exist, one CPU to read each package's MSRs through, and the CPU model.

use std::fs;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Package {
    pub id: u32,
    /// The first online CPU of the package.
    pub first_cpu: u32,
}

/// Packages in id order, from `<sys>/devices/system/cpu`. Ids need not be contiguous.
pub(super) fn packages(sys: &Path) -> Result<Vec<Package>, String> {
    let cpu_dir = sys.join("devices/system/cpu");
    let online_path = cpu_dir.join("online");
    let cpus = match fs::read_to_string(&online_path) {
        Ok(text) => parse_cpu_list(&text)
            .ok_or_else(|| format!("cannot parse {}: {:?}", online_path.display(), text.trim()))?,
        Err(_) => listed_cpus(&cpu_dir)?,
    };
    let mut packages: Vec<Package> = Vec::new();
    for cpu in cpus {
        let path = cpu_dir.join(format!("cpu{cpu}/topology/physical_package_id"));
        let Ok(text) = fs::read_to_string(&path) else {
            continue; // an offline or hot-removed CPU
        };
        let id: i64 = text
            .trim()
            .parse()
            .map_err(|_| format!("cannot parse {}: {:?}", path.display(), text.trim()))?;
        let id = u32::try_from(id.max(0)).unwrap_or(0);
        if !packages.iter().any(|p| p.id == id) {
            packages.push(Package { id, first_cpu: cpu });
        }
    }
    if packages.is_empty() {
        return Err(format!("no CPU package found under {}", cpu_dir.display()));
    }
    packages.sort_by_key(|p| p.id);
    Ok(packages)
}

fn listed_cpus(cpu_dir: &Path) -> Result<Vec<u32>, String> {
    let entries =
        fs::read_dir(cpu_dir).map_err(|e| format!("cannot list {}: {e}", cpu_dir.display()))?;
    let mut cpus: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
        .collect();
    cpus.sort_unstable();
    Ok(cpus)
}

/// CPU numbers at or above this are no CPU's: more than any kernel's `NR_CPUS` (8192 at
/// most). A list naming one is garbage, and `0-4294967295` would otherwise be a list of
/// four billion CPUs (16 GiB).
const MAX_CPUS: u32 = 1 << 16;

/// Parses the kernel's CPU list format: `0-3,8,10-11`.
pub(super) fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        if a > b || b >= MAX_CPUS || cpus.len() + (b - a) as usize >= MAX_CPUS as usize {
            return None;
        }
        cpus.extend(a..=b);
    }
    Some(cpus)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuModel {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
}

/// The first processor's field `name` in `/proc/cpuinfo`'s `text`.
fn cpuinfo_field(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == name).then(|| value.trim().to_string())
    })
}

/// The first CPU's `model name` in `/proc/cpuinfo`'s `text`.
pub(crate) fn model_name(text: &str) -> Option<String> {
    cpuinfo_field(text, "model name")
}

/// The first processor's vendor, family and model from `/proc/cpuinfo` text.
pub fn parse_cpuinfo(text: &str) -> Option<CpuModel> {
    let field = |name: &str| cpuinfo_field(text, name);
    Some(CpuModel {
        vendor: field("vendor_id")?,
        family: field("cpu family")?.parse().ok()?,
        model: field("model")?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn fake_cpu(sys: &Path, cpu: u32, package: i32) {
        let dir = sys.join(format!("devices/system/cpu/cpu{cpu}/topology"));
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("physical_package_id"), format!("{package}\n")).expect("write");
    }

    #[test]
    fn first_online_cpu_per_package_with_sparse_ids() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let sys = tmp.path();
        // cpu0 offline; packages 0 and 3 (non-contiguous); cpus interleaved
        for (cpu, pkg) in [(0, 0), (1, 3), (2, 0), (3, 3), (4, 0)] {
            fake_cpu(sys, cpu, pkg);
        }
        fs::write(sys.join("devices/system/cpu/online"), "1-4\n").expect("write");
        let pkgs = packages(sys).expect("packages");
        assert_eq!(
            pkgs,
            vec![
                Package {
                    id: 0,
                    first_cpu: 2
                },
                Package {
                    id: 3,
                    first_cpu: 1
                }
            ]
        );
    }

    #[test]
    fn without_online_file_every_listed_cpu_counts() {
        let tmp = tempfile::tempdir().expect("tempdir");
        fake_cpu(tmp.path(), 10, 1);
        fake_cpu(tmp.path(), 2, 1);
        let pkgs = packages(tmp.path()).expect("packages");
        assert_eq!(
            pkgs,
            vec![Package {
                id: 1,
                first_cpu: 2
            }]
        );
    }

    #[test]
    fn no_cpus_is_an_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert!(packages(tmp.path()).is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,5,7-8\n"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        // no CPU is numbered that high: not four billion of them
        assert_eq!(parse_cpu_list("0-4294967295"), None);
        assert_eq!(parse_cpu_list("0-60000,0-60000"), None);
    }

    #[test]
    fn cpuinfo_first_processor() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n\
                    model name\t: AMD EPYC\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n";
        assert_eq!(
            parse_cpuinfo(text),
            Some(CpuModel {
                vendor: "AuthenticAMD".into(),
                family: 25,
                model: 17
            })
        );
        assert_eq!(parse_cpuinfo("processor : 0\n"), None);
    }
}
