//! Node energy from RAPL counters, through powercap sysfs or MSRs, on Intel and AMD.

mod config;
mod domain;
mod msr;
mod powercap;
mod topology;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use config::{KEY_DOMAINS, RaplConfig, SourceChoice};
pub(crate) use domain::Domain;
pub use topology::parse_cpuinfo;

use crate::config::{ConfigError, KeyValues};
use crate::counter::{Advance, WrappingCounter};
use crate::plugin::{Opened, Plugin};
use crate::source::{HardwareCount, Reading, Source};

/// Sample at least this many times per shortest wrap at maximum power.
const SAMPLES_PER_WRAP: f64 = 4.0;
const MIN_PERIOD: Duration = Duration::from_millis(50);
/// Sample at least this often even when counters wrap slowly: a reset or a bad read is
/// only told apart from a wrap when it jumps further than the maximum power allows since
/// the previous read, so the period bounds what an undetected glitch could cost. One
/// `pread` per counter per second is negligible.
const MAX_PERIOD: Duration = Duration::from_secs(1);

/// Where the kernel's files are; tests point these at temp trees.
#[derive(Debug, Clone)]
pub struct SystemPaths {
    /// Where `/sys` is.
    pub sys: PathBuf,
    /// Where `/proc/cpuinfo` is.
    pub cpuinfo: PathBuf,
}

impl Default for SystemPaths {
    fn default() -> Self {
        Self {
            sys: PathBuf::from("/sys"),
            cpuinfo: PathBuf::from("/proc/cpuinfo"),
        }
    }
}

/// A counter's unit: one count is `uj_numerator / 2^shift` microjoules, so conversion of a
/// count total is exact integer arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unit {
    uj_numerator: u64,
    shift: u32,
}

impl Unit {
    const MICROJOULE: Unit = Unit {
        uj_numerator: 1,
        shift: 0,
    };

    fn esu(esu: u32) -> Unit {
        Unit {
            uj_numerator: 1_000_000,
            shift: esu,
        }
    }

    fn to_uj(self, units: u64) -> u64 {
        let uj = (u128::from(units) * u128::from(self.uj_numerator)) >> self.shift;
        u64::try_from(uj).unwrap_or(u64::MAX)
    }

    fn uj_per_unit(self) -> f64 {
        self.uj_numerator as f64 / (1u64 << self.shift) as f64
    }
}

#[derive(Debug)]
enum Raw {
    Msr(msr::Register),
    Powercap(powercap::EnergyFile),
}

impl Raw {
    fn read(&self) -> std::io::Result<u64> {
        match self {
            Raw::Msr(r) => r.read_raw(),
            Raw::Powercap(f) => f.read_raw(),
        }
    }
}

#[derive(Debug)]
struct DomainCounter {
    label: String,
    domain: Domain,
    raw: Raw,
    unit: Unit,
    modulus: u64,
    counter: WrappingCounter,
}

impl DomainCounter {
    fn new(label: String, domain: Domain, raw: Raw, unit: Unit, modulus: u64) -> Self {
        let max_units_per_sec = domain.max_watts() * 1e6 / unit.uj_per_unit();
        Self {
            label,
            domain,
            raw,
            unit,
            modulus,
            counter: WrappingCounter::new(modulus, max_units_per_sec),
        }
    }

    /// Advances the counter by a raw read; what is worth a log line about it.
    fn judge(&mut self, raw: u64, now: Instant) -> Option<String> {
        let label = &self.label;
        let joules = |units: u64| self.unit.to_uj(units) as f64 / 1e6;
        match self.counter.advance(raw, now) {
            Advance::Started | Advance::Counted { .. } | Advance::Burst | Advance::Held => None,
            Advance::Behind { by } => Some(format!(
                "{label}: the counter read {raw}, {:.1} J behind its last good value: one of \
                 the two is a bad read; nothing is counted until it passes that value again",
                joules(by)
            )),
            Advance::Suspect { raw_delta } => Some(format!(
                "{label}: the counter read {raw}, {}: a reset or a bad read, not a wrap; \
                 nothing is counted for it until the next reads tell which",
                match raw_delta {
                    Some(delta) => format!(
                        "{delta} units on from its last good value, more than {} W can produce",
                        self.domain.max_watts()
                    ),
                    None => format!("outside its range (0 to {})", self.modulus - 1),
                }
            )),
            Advance::Recovered { units } => Some(format!(
                "{label}: the counter continues its last good value ({:.1} J on): the read(s) \
                 before were bad and are ignored",
                joules(units)
            )),
            Advance::Reset { gap, units } => Some(format!(
                "{label}: the counter was reset; counting goes on from its new value ({:.1} J \
                 since), and the {:.1} s gap before it is estimated from the power measured \
                 after it",
                joules(units),
                gap.as_secs_f64()
            )),
        }
    }

    /// The shortest time in which the counter can wrap.
    fn shortest_wrap(&self) -> Duration {
        let range_j = self.unit.to_uj(self.modulus) as f64 / 1e6;
        Duration::from_secs_f64((range_j / self.domain.max_watts()).max(0.0))
    }
}

/// The RAPL counters a node's energy is read from.
#[derive(Debug)]
pub struct RaplCounters {
    counters: Vec<DomainCounter>,
    how: String,
}

/// The rust_rapl plugin: the node's RAPL counters.
pub struct Rapl;

/// rust_rapl's configuration: its keys, and whether rust_gpu takes an MI300A socket's
/// package (`crate::stack`).
pub type RaplSettings = crate::stack::Stacked<RaplConfig>;

impl Rapl {
    /// Opens the counters the configuration asks for, under the given system paths, to be
    /// sampled often enough that none wraps unseen.
    pub fn open_at(
        settings: &RaplSettings,
        paths: &SystemPaths,
    ) -> Result<Opened<RaplCounters>, String> {
        let mut counters = RaplCounters::open_at(&settings.keys, paths)?;
        if settings.beside_gpus {
            counters.leave_apu_packages(paths);
        }
        Ok(Opened {
            sample_period: counters.sample_period(),
            source: counters,
        })
    }
}

impl Plugin for Rapl {
    type Config = RaplSettings;
    type Source = RaplCounters;
    const KEYS: &'static [&'static str] = RaplConfig::KEYS;

    fn parse_config(values: &KeyValues) -> Result<RaplSettings, ConfigError> {
        RaplConfig::parse(values).map(RaplSettings::alone)
    }

    fn show_config(config: &RaplSettings) -> Vec<(&'static str, String)> {
        config.keys.show()
    }

    fn stacked(config: &RaplSettings, plugins: &[String]) -> RaplSettings {
        config.among(plugins)
    }

    fn open(config: &RaplSettings) -> Result<Opened<RaplCounters>, String> {
        Self::open_at(config, &SystemPaths::default())
    }
}

impl Source for RaplCounters {
    fn describe(&self) -> String {
        let labels: Vec<&str> = self.counters.iter().map(|c| c.label.as_str()).collect();
        let counted = match labels.is_empty() {
            true => "no counter".to_string(),
            false => labels.join(", "),
        };
        format!(
            "{}: {counted}; sampling every {:.2} s",
            self.how,
            self.sample_period().as_secs_f64()
        )
    }

    fn poll(&mut self, now: Instant) -> Reading {
        let mut reading = Reading {
            energy_uj: 0,
            complete: true,
            ..Reading::default()
        };
        for c in &mut self.counters {
            match c.raw.read() {
                Ok(raw) => {
                    if let Some(problem) = c.judge(raw, now) {
                        reading.problems.push(problem);
                    }
                }
                Err(e) => {
                    reading.complete = false;
                    reading.problems.push(format!("{}: {e}", c.label));
                }
            }
            reading.energy_uj = reading
                .energy_uj
                .saturating_add(c.unit.to_uj(c.counter.total_units()));
            reading.unsettled |= !c.counter.settled();
            if let Some(value) = c.counter.published_value() {
                reading.counts.push(HardwareCount {
                    name: c.label.clone(),
                    value_uj: c.unit.to_uj(value),
                    wraps_at_uj: Some(c.unit.to_uj(c.modulus)),
                    max_watts: c.domain.max_watts(),
                });
            }
        }
        // a gap is bridged by every counter or none
        if reading.counts.len() != self.counters.len() {
            reading.counts.clear();
        }
        reading
    }
}

impl RaplCounters {
    /// How often to read the counters: `SAMPLES_PER_WRAP` times in the shortest wrap at
    /// maximum power, within `MIN_PERIOD` and `MAX_PERIOD`.
    fn sample_period(&self) -> Duration {
        self.counters
            .iter()
            .map(|c| c.shortest_wrap().div_f64(SAMPLES_PER_WRAP))
            .min()
            .unwrap_or(MAX_PERIOD)
            .clamp(MIN_PERIOD, MAX_PERIOD)
    }

    /// Opens the counters the configuration asks for, under the given system paths.
    fn open_at(config: &RaplConfig, paths: &SystemPaths) -> Result<Self, String> {
        let rapl = match config.source {
            SourceChoice::Powercap => Self::open_powercap(config, paths)?,
            SourceChoice::Msr => Self::open_msr(config, paths)?,
            SourceChoice::Auto => match Self::open_powercap(config, paths) {
                Ok(rapl) => rapl,
                Err(powercap) => Self::open_msr(config, paths)
                    .map_err(|msr| format!("powercap: {powercap}; MSR: {msr}"))?,
            },
        };
        if rapl.has(Domain::Psys) && rapl.has(Domain::Package) {
            log::warn!(
                "{KEY_DOMAINS} selects psys with package: psys already includes the package \
                 energy, so the node energy counts it twice"
            );
        }
        Ok(rapl)
    }

    /// Stacked with rust_gpu on AMD MI300A APUs (`crate::stack`): amd-smi's energy of each
    /// socket covers its CPU cores, which its package counter meters too; the packages are
    /// left to rust_gpu, which charges each socket to the jobs holding its
    /// GPU. Said once, with what is still counted here. Elsewhere nothing changes: no other
    /// CPU's package is inside a GPU's counter.
    fn leave_apu_packages(&mut self, paths: &SystemPaths) {
        let model = std::fs::read_to_string(&paths.cpuinfo)
            .ok()
            .and_then(|text| topology::model_name(&text));
        let Some(model) = model.filter(|m| m.to_ascii_uppercase().contains("MI300A")) else {
            return;
        };
        let (left, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.counters)
            .into_iter()
            .partition(|c| c.domain == Domain::Package);
        self.counters = kept;
        let left: Vec<&str> = left.iter().map(|c| c.label.as_str()).collect();
        let kept: Vec<&str> = self.counters.iter().map(|c| c.label.as_str()).collect();
        log::info!(
            "this node's CPUs are {model} APUs and rust_gpu is stacked beside rust_rapl: \
             amd-smi's energy of each socket covers its CPU cores, so {} {} counted by \
             rust_gpu, not here; rust_rapl counts {}",
            left.join(", "),
            if left.len() == 1 { "is" } else { "are" },
            match kept.is_empty() {
                true => "nothing (0 J, with nothing left to meter)".to_string(),
                false => kept.join(", "),
            }
        );
        self.how = format!("{} ({model}: packages left to rust_gpu)", self.how);
    }

    fn has(&self, domain: Domain) -> bool {
        self.counters.iter().any(|c| c.domain == domain)
    }

    fn open_powercap(config: &RaplConfig, paths: &SystemPaths) -> Result<Self, String> {
        let (zones, problems) = powercap::zones(&paths.sys);
        let counters: Vec<DomainCounter> = zones
            .into_iter()
            .filter(|z| wanted(config, z.domain))
            .map(|z| {
                DomainCounter::new(
                    z.name,
                    z.domain,
                    Raw::Powercap(z.energy),
                    Unit::MICROJOULE,
                    z.max_energy_range_uj.saturating_add(1),
                )
            })
            .collect();
        let how = format!("powercap {}", paths.sys.join("class/powercap").display());
        Self::checked(counters, config, &how)
            .map_err(|e| {
                [e].into_iter()
                    .chain(problems)
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .map(|counters| RaplCounters { counters, how })
    }

    fn open_msr(config: &RaplConfig, paths: &SystemPaths) -> Result<Self, String> {
        let cpuinfo = std::fs::read_to_string(&paths.cpuinfo)
            .map_err(|e| format!("cannot read {}: {e}", paths.cpuinfo.display()))?;
        let cpu = parse_cpuinfo(&cpuinfo).ok_or_else(|| {
            format!(
                "no vendor_id/cpu family/model in {}",
                paths.cpuinfo.display()
            )
        })?;
        let layout = msr::Layout::for_cpu(&cpu)?;
        let packages = topology::packages(&paths.sys)?;
        let mut counters = Vec::new();
        for (index, package) in packages.iter().enumerate() {
            let device = msr::Device::open(&config.msr_path(package.first_cpu))?;
            let unit_register = device.read(layout.unit).map_err(|e| {
                format!(
                    "cannot read the RAPL unit register {:#x} from {}: {e}",
                    layout.unit,
                    device.path().display()
                )
            })?;
            if unit_register == 0 {
                return Err(format!(
                    "the RAPL unit register {:#x} of {} reads 0: RAPL is not enabled",
                    layout.unit,
                    device.path().display()
                ));
            }
            let esu = msr::energy_status_unit(unit_register);
            for domain in Domain::ALL {
                // the platform counter is one per system: read it through the first package
                let Some(address) = layout.register(domain) else {
                    continue;
                };
                if !wanted(config, domain) || (domain == Domain::Psys && index > 0) {
                    continue;
                }
                let register = msr::Register {
                    device: Arc::clone(&device),
                    address,
                };
                if register.read_raw().is_err() {
                    continue; // the domain does not exist on this part
                }
                let unit = match (domain, layout.dram_esu) {
                    (Domain::Dram, Some(dram_esu)) => Unit::esu(dram_esu),
                    _ => Unit::esu(esu),
                };
                let label = match domain {
                    Domain::Psys => "psys".to_string(),
                    _ => format!("{domain}-{}", package.id),
                };
                counters.push(DomainCounter::new(
                    label,
                    domain,
                    Raw::Msr(register),
                    unit,
                    msr::COUNTER_MODULUS,
                ));
            }
        }
        let how = format!(
            "{} MSRs via {} ({} family {:#x} model {:#x}, {} package(s))",
            layout.vendor,
            config.msr_device,
            cpu.vendor,
            cpu.family,
            cpu.model,
            packages.len()
        );
        Self::checked(counters, config, &how).map(|counters| RaplCounters { counters, how })
    }

    /// Every explicitly requested domain must exist; without a request, a package must.
    fn checked(
        counters: Vec<DomainCounter>,
        config: &RaplConfig,
        how: &str,
    ) -> Result<Vec<DomainCounter>, String> {
        let required: Vec<Domain> = config
            .domains
            .clone()
            .unwrap_or_else(|| vec![Domain::Package]);
        for domain in required {
            if !counters.iter().any(|c| c.domain == domain) {
                return Err(format!("no readable {domain} counter in {how}"));
            }
        }
        Ok(counters)
    }
}

fn wanted(config: &RaplConfig, domain: Domain) -> bool {
    match &config.domains {
        Some(list) => list.contains(&domain),
        None => matches!(domain, Domain::Package | Domain::Dram),
    }
}

/// Writes fake RAPL hardware for tests: sysfs topology, cpuinfo, MSR files, powercap zones.
#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::fs;
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    pub(crate) fn cpus(
        root: &Path,
        packages: &[i32],
        vendor: &str,
        family: u32,
        model: u32,
    ) -> SystemPaths {
        let sys = root.join("sys");
        for (cpu, pkg) in packages.iter().enumerate() {
            let dir = sys.join(format!("devices/system/cpu/cpu{cpu}/topology"));
            fs::create_dir_all(&dir).expect("mkdir");
            fs::write(dir.join("physical_package_id"), format!("{pkg}\n")).expect("write");
        }
        let cpuinfo = root.join("cpuinfo");
        fs::write(
            &cpuinfo,
            format!("processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"),
        )
        .expect("cpuinfo");
        SystemPaths { sys, cpuinfo }
    }

    pub(crate) fn msr(root: &Path, cpu: u32, register: u64, value: u64) {
        let path = root.join(format!("msr{cpu}"));
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .expect("open msr");
        file.write_all_at(&value.to_le_bytes(), register)
            .expect("write msr");
    }
}

#[cfg(test)]
mod tests;
