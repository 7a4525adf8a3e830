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

/// rust_rapl's configuration: its keys, and what the plugins stacked beside it leave it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RaplSettings {
    /// Its acct_gather.conf keys.
    pub keys: RaplConfig,
    /// rust_gpu is stacked beside it: an MI300A socket's package is rust_gpu's
    /// (`crate::stack`).
    pub beside_gpus: bool,
}

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
        RaplConfig::parse(values).map(|keys| RaplSettings {
            keys,
            beside_gpus: false,
        })
    }

    fn show_config(config: &RaplSettings) -> Vec<(&'static str, String)> {
        config.keys.show()
    }

    fn stacked(config: &RaplSettings, plugins: &[String]) -> RaplSettings {
        RaplSettings {
            beside_gpus: crate::stack::leaves_to_gpus(plugins),
            ..config.clone()
        }
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
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;

    const AMD_UNIT: u64 = 0xC001_0299;
    const AMD_PKG: u64 = 0xC001_029B;

    fn msr_config(root: &Path) -> RaplConfig {
        RaplConfig {
            source: SourceChoice::Msr,
            msr_device: format!("{}/msr%d", root.display()),
            domains: None,
        }
    }

    #[test]
    fn amd_msr_two_packages_exact_energy_across_wraps() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let paths = fake::cpus(root, &[0, 0, 1, 1], "AuthenticAMD", 0x19, 1);
        // ESU 16: one count is 2^-16 J
        for cpu in [0, 2] {
            fake::msr(root, cpu, AMD_UNIT, 0x0004_1003);
            fake::msr(root, cpu, AMD_PKG, 0xFFFF_0000);
        }
        let mut rapl = RaplCounters::open_at(&msr_config(root), &paths).expect("open");
        assert!(
            rapl.describe().contains("package-0, package-1"),
            "{}",
            rapl.describe()
        );
        let t0 = Instant::now();
        assert_eq!(rapl.poll(t0).energy_uj, 0);
        // package 0 wraps: +0x10000 + 0x8000 counts = 1.5 J; package 1 +1 J
        fake::msr(root, 0, AMD_PKG, 0x8000);
        fake::msr(root, 2, AMD_PKG, 0xFFFF_0000 + 0x1_0000);
        let r = rapl.poll(t0 + Duration::from_millis(100));
        assert!(r.complete);
        assert_eq!(r.energy_uj, 2_500_000);
        // 4 samples per shortest wrap would be 65536 J / 1000 W / 4 = 16 s: capped
        assert_eq!(rapl.sample_period(), MAX_PERIOD);
    }

    #[test]
    fn intel_server_dram_counts_in_its_fixed_unit() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let paths = fake::cpus(root, &[0], "GenuineIntel", 6, 85);
        fake::msr(root, 0, 0x606, 0x000A_0E03); // ESU 14
        fake::msr(root, 0, 0x611, 0);
        fake::msr(root, 0, 0x619, 0);
        let mut rapl = RaplCounters::open_at(&msr_config(root), &paths).expect("open");
        let t0 = Instant::now();
        rapl.poll(t0);
        fake::msr(root, 0, 0x611, 1 << 14); // 1 J in package units
        fake::msr(root, 0, 0x619, 1 << 16); // 1 J in the fixed DRAM unit
        let r = rapl.poll(t0 + Duration::from_millis(100));
        // Slurm <= 24.11 would report 1 J + 4 J here
        assert_eq!(r.energy_uj, 2_000_000);
    }

    #[test]
    fn a_failed_read_is_incomplete_and_catches_up() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let paths = fake::cpus(root, &[0], "AuthenticAMD", 0x17, 1);
        fake::msr(root, 0, AMD_UNIT, 0x0004_1003);
        fake::msr(root, 0, AMD_PKG, 100);
        let mut rapl = RaplCounters::open_at(&msr_config(root), &paths).expect("open");
        let t0 = Instant::now();
        rapl.poll(t0);
        // the register vanishes: the file shrinks below it
        let file = fs::OpenOptions::new()
            .write(true)
            .open(root.join("msr0"))
            .expect("open");
        file.set_len(AMD_PKG).expect("truncate");
        let r = rapl.poll(t0 + Duration::from_secs(1));
        assert!(!r.complete && r.problems[0].contains("package-0"), "{r:?}");
        fake::msr(root, 0, AMD_PKG, 100 + (3 << 16));
        let r = rapl.poll(t0 + Duration::from_secs(2));
        assert!(r.complete);
        assert_eq!(r.energy_uj, 3_000_000);
    }

    /// A counter at 200 W read every 0.5 s shows a wrong constant, 1000 J behind, for
    /// 1.5 s (the cluster case that cost a job 17%): `write(raw_units)` sets what it reads.
    fn bogus_constant_run(rapl: &mut RaplCounters, units_per_j: u64, write: impl Fn(u64)) {
        let start = 5_000 * units_per_j;
        let truth = |s: f64| start + (200.0 * s) as u64 * units_per_j;
        let bogus = truth(5.0) - 1000 * units_per_j;
        let t0 = Instant::now();
        let mut problems = Vec::new();
        for k in 0..=20 {
            let s = 0.5 * f64::from(k);
            write(if (5.0..6.5).contains(&s) {
                bogus
            } else {
                truth(s)
            });
            let r = rapl.poll(t0 + Duration::from_secs_f64(s));
            assert!(r.complete, "{r:?}");
            problems.extend(r.problems);
        }
        assert_eq!(
            rapl.poll(t0 + Duration::from_secs(10)).energy_uj,
            2_000_000_000
        );
        assert!(
            problems.len() == 2
                && problems[0].contains("a reset or a bad read, not a wrap")
                && problems[1].contains("continues its last good value"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_bogus_msr_read_costs_nothing_on_amd() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let paths = fake::cpus(root, &[0], "AuthenticAMD", 0x19, 1);
        fake::msr(root, 0, AMD_UNIT, 0x0004_1003); // ESU 16
        fake::msr(root, 0, AMD_PKG, 0);
        let mut rapl = RaplCounters::open_at(&msr_config(root), &paths).expect("open");
        bogus_constant_run(&mut rapl, 1 << 16, |raw| fake::msr(root, 0, AMD_PKG, raw));
    }

    #[test]
    fn a_bogus_powercap_read_costs_nothing_on_intel() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let sys = tmp.path().join("sys");
        let dir = sys.join("class/powercap/intel-rapl:0");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("name"), "package-0\n").expect("w");
        fs::write(dir.join("max_energy_range_uj"), "262143328850\n").expect("w");
        fs::write(dir.join("energy_uj"), "0\n").expect("w");
        let paths = SystemPaths {
            sys,
            cpuinfo: tmp.path().join("none"),
        };
        let mut rapl = RaplCounters::open_at(&RaplConfig::default(), &paths).expect("powercap");
        bogus_constant_run(&mut rapl, 1_000_000, |uj| {
            fs::write(dir.join("energy_uj"), format!("{uj}\n")).expect("w")
        });
    }

    /// Stacked with rust_gpu on MI300A APUs, rust_rapl leaves the sockets' packages to
    /// rust_gpu (amd-smi's socket energy covers the CPU cores): it counts what is left,
    /// here nothing. Alone, or on another CPU, it counts the package as ever.
    #[test]
    fn beside_rust_gpu_an_mi300a_package_is_left_to_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let sys = tmp.path().join("sys");
        let dir = sys.join("class/powercap/intel-rapl:0");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("name"), "package-0\n").expect("w");
        fs::write(dir.join("max_energy_range_uj"), "262143328850\n").expect("w");
        let cpuinfo = tmp.path().join("cpuinfo");
        let run = |model: &str, beside_gpus: bool| {
            fs::write(
                &cpuinfo,
                format!("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: {model}\n"),
            )
            .expect("w");
            fs::write(dir.join("energy_uj"), "1000000\n").expect("w");
            let paths = SystemPaths {
                sys: sys.clone(),
                cpuinfo: cpuinfo.clone(),
            };
            let settings = RaplSettings {
                keys: RaplConfig::default(),
                beside_gpus,
            };
            let Opened { mut source, .. } = Rapl::open_at(&settings, &paths).expect("opened");
            let t0 = Instant::now();
            source.poll(t0);
            fs::write(dir.join("energy_uj"), "3000000\n").expect("w");
            let reading = source.poll(t0 + Duration::from_secs(1));
            assert!(reading.complete);
            (reading.energy_uj, source.describe())
        };
        let apu = "AMD Instinct MI300A Accelerated Processing Unit";
        let (uj, described) = run(apu, true);
        assert_eq!(uj, 0, "the socket is rust_gpu's");
        assert!(described.contains("no counter"), "{described}");
        assert!(described.contains("left to rust_gpu"), "{described}");
        assert_eq!(
            run(apu, false).0,
            2_000_000,
            "alone, the package is counted"
        );
        let epyc = "AMD EPYC 9654 96-Core Processor";
        assert_eq!(
            run(epyc, true).0,
            2_000_000,
            "no GPU covers an EPYC's package"
        );
    }

    #[test]
    fn powercap_package_and_dram_with_the_kernel_range() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let sys = tmp.path().join("sys");
        let zone = |id: &str, name: &str, energy: u64, range: u64| {
            let dir = sys.join("class/powercap").join(id);
            fs::create_dir_all(&dir).expect("mkdir");
            fs::write(dir.join("name"), format!("{name}\n")).expect("w");
            fs::write(dir.join("energy_uj"), format!("{energy}\n")).expect("w");
            fs::write(dir.join("max_energy_range_uj"), format!("{range}\n")).expect("w");
        };
        zone("intel-rapl:0", "package-0", 999_000, 999_999);
        zone("intel-rapl:0:0", "dram", 10, 999_999);
        let paths = SystemPaths {
            sys: sys.clone(),
            cpuinfo: tmp.path().join("none"),
        };
        let mut rapl =
            RaplCounters::open_at(&RaplConfig::default(), &paths).expect("auto -> powercap");
        let t0 = Instant::now();
        rapl.poll(t0);
        // package wraps at 999_999 -> 0: 1_000 uJ to the top, +500 after
        zone("intel-rapl:0", "package-0", 500, 999_999);
        zone("intel-rapl:0:0", "dram", 20, 999_999);
        let r = rapl.poll(t0 + Duration::from_millis(10));
        assert_eq!(r.energy_uj, 1_500 + 10);
        // 1 J range at 1000 W: one wrap per ms, sampling clamps to the minimum
        assert_eq!(rapl.sample_period(), MIN_PERIOD);
    }

    #[test]
    fn missing_hardware_or_domains_say_why() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let paths = fake::cpus(root, &[0], "AuthenticAMD", 0x19, 1);
        let auto = RaplConfig {
            source: SourceChoice::Auto,
            ..msr_config(root)
        };
        let err = RaplCounters::open_at(&auto, &paths).expect_err("no hardware");
        assert!(err.contains("powercap") && err.contains("msr0"), "{err}");

        fake::msr(root, 0, AMD_UNIT, 0x0004_1003);
        fake::msr(root, 0, AMD_PKG, 1);
        let mut config = msr_config(root);
        config.domains = Some(vec![Domain::Package, Domain::Dram]);
        let err = RaplCounters::open_at(&config, &paths).expect_err("AMD has no DRAM domain");
        assert!(err.contains("dram"), "{err}");
    }
}
