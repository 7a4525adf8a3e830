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
    let mut rapl = RaplCounters::open_at(&RaplConfig::default(), &paths).expect("auto -> powercap");
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
