//! RAPL through the kernel's perf PMU (`power/energy-pkg`, `power/energy-ram`): the same
//! registers the rust_rapl plugin reads, through another path than powercap or the MSR files.

use std::io;
use std::path::Path;

use super::reader::{Quantity, Reader, Scope, Slot, Unavailable, boxed};
use super::site::NodeConf;
use crate::ffi::perf_event::Counter;

/// Where the kernel lists the RAPL perf PMU.
pub const PERF_POWER_PMU: &str = "/sys/bus/event_source/devices/power";

/// RAPL's perf counters, opened and read once.
pub(super) fn slot(site: &NodeConf) -> Slot {
    Slot {
        name: "rapl-perf",
        scope: Scope::Packages,
        reader: RaplPerfReader::open(site.perf_pmu, site.rapl_dram).map(boxed),
    }
}

/// The RAPL perf PMU as sysfs lists it.
#[derive(Debug, Clone, PartialEq)]
struct PerfPmu {
    pmu_type: u32,
    /// One CPU per package (the PMU's `cpumask`).
    cpus: Vec<u32>,
    events: Vec<PerfEvent>,
}

#[derive(Debug, Clone, PartialEq)]
struct PerfEvent {
    /// `energy-pkg`, `energy-ram`.
    name: &'static str,
    config: u64,
    /// Joules per count.
    scale: f64,
}

/// The PMU in `dir`: its type, CPUs and the events `energy-pkg` (required) and, with
/// `dram`, `energy-ram` where the machine has it.
fn perf_pmu(dir: &Path, dram: bool) -> Result<PerfPmu, Unavailable> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).map(|s| s.trim().to_string());
    let pmu_type = match read("type") {
        Ok(t) => t.parse().map_err(|_| {
            Unavailable::Failed(format!("{}/type is {t:?}, not a number", dir.display()))
        })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Unavailable::Absent(format!(
                "no RAPL perf PMU at {} (not an Intel or AMD CPU with RAPL, or a kernel \
                 without it)",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(Unavailable::Failed(format!("{}/type: {e}", dir.display())));
        }
    };
    let cpus = read("cpumask")
        .ok()
        .and_then(|m| cpu_list(&m))
        .ok_or_else(|| Unavailable::Failed(format!("{}/cpumask is unreadable", dir.display())))?;
    let mut events = Vec::new();
    let names: &[&'static str] = if dram {
        &["energy-pkg", "energy-ram"]
    } else {
        &["energy-pkg"]
    };
    for &name in names {
        let Ok(spec) = read(&format!("events/{name}")) else {
            if name == "energy-pkg" {
                return Err(Unavailable::Absent(format!(
                    "{} has no energy-pkg event",
                    dir.display()
                )));
            }
            continue;
        };
        let bad =
            |what: &str| Unavailable::Failed(format!("{}/events/{name}{what}", dir.display()));
        let config = event_config(&spec).ok_or_else(|| bad(&format!(" is {spec:?}")))?;
        let scale: f64 = read(&format!("events/{name}.scale"))
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|s: &f64| s.is_finite() && *s > 0.0)
            .ok_or_else(|| bad(".scale is unreadable"))?;
        let unit = read(&format!("events/{name}.unit")).unwrap_or_default();
        if unit != "Joules" {
            return Err(bad(&format!(".unit is {unit:?}, not Joules")));
        }
        events.push(PerfEvent {
            name,
            config,
            scale,
        });
    }
    Ok(PerfPmu {
        pmu_type,
        cpus,
        events,
    })
}

/// `event=0x02` (the power PMU's events name no other field).
fn event_config(spec: &str) -> Option<u64> {
    let value = spec
        .split(',')
        .find_map(|t| t.trim().strip_prefix("event="))?;
    match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => value.parse().ok(),
    }
}

/// A sysfs CPU list: `0`, `0,36`, `0-1,4`.
fn cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

struct RaplPerfReader {
    counters: Vec<(Counter, f64)>,
    events: String,
}

impl RaplPerfReader {
    fn open(dir: &Path, dram: bool) -> Result<RaplPerfReader, Unavailable> {
        let pmu = perf_pmu(dir, dram)?;
        let mut counters = Vec::new();
        for event in &pmu.events {
            for &cpu in &pmu.cpus {
                let counter = Counter::open(pmu.pmu_type, event.config, cpu).map_err(|e| {
                    let what = format!(
                        "perf_event_open({}/{}/, cpu {cpu}): {e}",
                        "power", event.name
                    );
                    match e.raw_os_error() {
                        Some(libc::EACCES) | Some(libc::EPERM) => Unavailable::Denied(format!(
                            "{what}: system-wide perf events need root or CAP_PERFMON \
                             (or kernel.perf_event_paranoid <= 0)"
                        )),
                        _ => Unavailable::Failed(what),
                    }
                })?;
                counters.push((counter, event.scale));
            }
        }
        let events = pmu
            .events
            .iter()
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", ");
        let mut reader = RaplPerfReader {
            counters,
            events: format!("{events} on CPUs {:?}", pmu.cpus),
        };
        reader.read()?;
        Ok(reader)
    }
}

impl Reader for RaplPerfReader {
    fn path(&self) -> String {
        format!("perf events power/{}", self.events)
    }
    fn scope(&self) -> Scope {
        Scope::Packages
    }
    fn quantity(&self) -> Quantity {
        Quantity::Energy
    }
    fn read(&mut self) -> Result<f64, Unavailable> {
        let mut joules = 0.0;
        for (counter, scale) in &mut self.counters {
            let count = counter
                .read()
                .map_err(|e| Unavailable::Failed(format!("reading a perf counter: {e}")))?;
            joules += count as f64 * *scale;
        }
        Ok(joules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_perf_pmu_is_read_from_sysfs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("power");
        let absent = perf_pmu(&dir, true).expect_err("no PMU");
        assert_eq!(absent.status(), "absent");
        std::fs::create_dir_all(dir.join("events")).expect("mkdir");
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).expect("write");
        write("type", "23\n");
        write("cpumask", "0,36\n");
        write("events/energy-pkg", "event=0x02\n");
        write("events/energy-pkg.scale", "2.3283064365386962890625e-10\n");
        write("events/energy-pkg.unit", "Joules\n");
        // no energy-ram: a package-only machine
        let pmu = perf_pmu(&dir, true).expect("a PMU");
        assert_eq!(pmu.pmu_type, 23);
        assert_eq!(pmu.cpus, [0, 36]);
        assert_eq!(pmu.events.len(), 1);
        assert_eq!(pmu.events[0].config, 2);
        assert_eq!(pmu.events[0].scale, 2f64.powi(-32));
        write("events/energy-ram", "event=0x03\n");
        write("events/energy-ram.scale", "6.103515625e-5\n");
        write("events/energy-ram.unit", "Joules\n");
        let pmu = perf_pmu(&dir, true).expect("a PMU");
        assert_eq!(
            pmu.events
                .iter()
                .map(|e| (e.name, e.config))
                .collect::<Vec<_>>(),
            [("energy-pkg", 2), ("energy-ram", 3)]
        );
        assert_eq!(perf_pmu(&dir, false).expect("a PMU").events.len(), 1);
        write("events/energy-ram.unit", "Watts\n");
        assert_eq!(
            perf_pmu(&dir, true).expect_err("bad unit").status(),
            "failed"
        );
        assert_eq!(cpu_list("0-2,8"), Some(vec![0, 1, 2, 8]));
        assert_eq!(cpu_list(""), None);
    }
}
