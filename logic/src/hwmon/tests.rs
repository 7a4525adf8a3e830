use std::fs;
use std::path::Path;

use super::*;
use crate::source::Source;

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).expect("mkdir");
    }
    fs::write(path, format!("{text}\n")).expect("write");
}

/// A Grace Hopper node of `sockets` superchips as the kernel lays it out: one ACPI power
/// meter a rail, `power1_average` in µW over `power1_average_interval` ms.
fn grace_hopper(root: &Path, sockets: u32) {
    let mut n = 0;
    for s in 0..sockets {
        for rail in ["Module", "Grace", "CPU", "SysIO"] {
            let dir = root.join(format!("hwmon{n}"));
            write(&dir.join("name"), "power_meter");
            write(
                &dir.join("power1_oem_info"),
                &format!("{rail} Power Socket {s}"),
            );
            write(&dir.join("power1_average_interval"), "1000");
            write(&dir.join("power1_average"), "0");
            n += 1;
        }
    }
}

/// Sets the mean power of hwmon`n`.
fn set(root: &Path, n: u32, watts: f64) {
    let uw = (watts * 1e6) as u64;
    write(
        &root.join(format!("hwmon{n}/power1_average")),
        &uw.to_string(),
    );
}

fn config(root: &Path) -> HwmonSettings {
    HwmonSettings {
        keys: HwmonConfig {
            dir: root.into(),
            ..HwmonConfig::default()
        },
        beside_gpus: false,
    }
}

/// A poller and readout over `root`, driven round by round.
struct Driven {
    polling: HwmonPolling,
    readout: HwmonReadout,
    figures: Figures,
    t0: Instant,
}

impl Driven {
    fn new(root: &Path) -> Self {
        let (polling, readout, _) = prepare(&config(root)).expect("prepare");
        Self {
            polling,
            readout,
            figures: Figures::default(),
            t0: Instant::now(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// A round at `ms`, then the reading at that instant.
    fn round(&mut self, ms: u64) -> Reading {
        let now = self.at(ms);
        let output = self.polling.round(now);
        HwmonPolling::publish(output, &mut self.figures);
        HwmonPolling::reading(&mut self.readout, &mut self.figures, now)
    }

    fn read(&mut self, ms: u64) -> Reading {
        let now = self.at(ms);
        HwmonPolling::reading(&mut self.readout, &mut self.figures, now)
    }
}

/// Reads every 0.1 s of meters whose 1 s intervals end at 0.35 s past each second: the
/// file shows the mean of the last interval ended before `ms`, which `power(n, end)`
/// gives for meter hwmon`n` and the interval ending at `end` (ms).
fn read_meters(
    d: &mut Driven,
    root: &Path,
    meters: u32,
    from: u64,
    to: u64,
    power: impl Fn(u32, i64) -> f64,
) -> Reading {
    let mut last = None;
    for ms in (from..=to).step_by(100) {
        let end = (ms as i64 + 650) / 1000 * 1000 - 650;
        for n in 0..meters {
            set(root, n, power(n, end));
        }
        last = Some(d.round(ms));
    }
    last.expect("a round")
}

#[test]
fn grace_hopper_counts_its_modules_and_reports_the_other_rails_beside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    grace_hopper(root, 2);
    // module 0 at 400 W (grace 120, cpu 80, sysio 30), module 1 at 500 W; module 0 steps to
    // 700 W from the interval ending at 3.35 s
    let power = |n: u32, end: i64| match n {
        0 if end >= 3350 => 700.0,
        0 => 400.0,
        1 => 120.0,
        2 => 80.0,
        3 | 7 => 30.0,
        4 => 500.0,
        5 => 130.0,
        _ => 90.0,
    };
    let mut d = Driven::new(root);
    let first = read_meters(&mut d, root, 8, 0, 0, power);
    assert!(first.complete);
    assert_eq!(first.energy_uj, 0);
    assert_eq!(first.watts, Some(900.0));
    let labels: Vec<&str> = first.parts.iter().map(|p| p.label).collect();
    assert_eq!(labels, ["Grace", "Cpu", "Sysio"]);
    let r = read_meters(&mut d, root, 8, 100, 5000, power);
    // each mean is the power from its publication (its interval's end, 3.35 s, dated
    // half-way between the reads at 3.3 and 3.4 s: the phase is not known before) to the
    // next: module 0 400 W for 3.35 s and 700 W for 1.65 s, module 1 500 W for 5 s
    let expected = 400.0 * 3.35 + 700.0 * 1.65 + 500.0 * 5.0;
    assert!(
        (r.energy_uj as f64 - expected * 1e6).abs() < 1e3,
        "{} µJ for {expected} J",
        r.energy_uj
    );
    assert_eq!(r.parts[0].energy_uj, Some(1_250_000_000));
    assert_eq!(r.parts[1].watts, Some(170.0));
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    let described = HwmonPolling::describe(&d.readout);
    assert!(
        described.contains(
            "hwmon0/power1_average (Module Power Socket 0) + hwmon4/power1_average (Module Power Socket 1)"
        ) && described.contains("parts Grace, Cpu, Sysio"),
        "{described}"
    );
}

#[test]
fn a_bad_or_vanished_value_is_named_unavailable_then_bridged() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(&root.join("hwmon0/name"), "power_meter");
    write(&root.join("hwmon0/power1_average_interval"), "1000");
    set(root, 0, 300.0);
    let mut d = Driven::new(root);
    for ms in (0..=1000).step_by(100) {
        d.round(ms);
    }
    assert_eq!(d.read(1000).energy_uj, 300_000_000);
    // garbage, then the file gone: nothing counted, and once the last reading is too old
    // (three intervals) the node is unavailable (incomplete), never 0
    write(&root.join("hwmon0/power1_average"), "not a number");
    d.round(2000);
    fs::remove_file(root.join("hwmon0/power1_average")).expect("rm");
    let r = d.round(3000);
    assert_eq!(r.energy_uj, 300_000_000);
    assert!(r.complete, "an interval's mean is read once an interval");
    let r = d.read(4001);
    assert!(!r.complete);
    assert_eq!(r.watts, None);
    assert!(
        r.problems[0].starts_with("hwmon0/power1_average"),
        "{:?}",
        r.problems
    );
    // back at 300 W 5 s later: the gap bridged, 300 W all along
    set(root, 0, 300.0);
    let r = d.round(6000);
    assert!(r.complete);
    assert_eq!(r.energy_uj, 1_800_000_000);
}

#[test]
fn a_bad_value_names_the_file_in_the_log_message() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(&root.join("hwmon3/name"), "power_meter");
    write(&root.join("hwmon3/power1_average"), "4e8");
    let (mut polling, ..) = prepare(&config(root)).expect("prepare");
    let e = polling.rails[0]
        .sample(Instant::now(), None)
        .expect_err("garbage");
    assert_eq!(
        e,
        "hwmon3/power1_average: cannot read \"4e8\" as microwatts"
    );
}

#[test]
fn an_energy_counter_is_counted_by_its_rise() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(&root.join("hwmon1/name"), "some_energy");
    write(&root.join("hwmon1/energy1_input"), "1000000000");
    write(&root.join("hwmon1/power1_input"), "5");
    let mut d = config(root);
    d.keys.sensors = vec!["some_energy".into()];
    d.keys.max_watts = Some(5000);
    let (polling, readout, _) = prepare(&d).expect("prepare");
    let mut d = Driven {
        polling,
        readout,
        figures: Figures::default(),
        t0: Instant::now(),
    };
    d.round(0);
    let mut uj = 1_000_000_000u64;
    for k in 1..=4 {
        // 250 W, then 100 W: the counter's rise, whatever the power between
        uj += if k <= 2 { 250_000_000 } else { 100_000_000 };
        write(&root.join("hwmon1/energy1_input"), &uj.to_string());
        d.round(1000 * k);
    }
    // the first interval gives the power only; the three after it are the rises
    assert_eq!(d.read(4000).energy_uj, 450_000_000);
}

#[test]
fn no_sensor_says_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(&root.join("hwmon0/name"), "acpitz");
    write(&root.join("hwmon0/temp1_input"), "27800");
    let e = prepare(&config(root)).err().expect("no sensor");
    assert!(e.contains("EnergyHwmonSensors"), "{e}");
    let e = prepare(&config(&root.join("missing")))
        .err()
        .expect("no dir");
    assert!(e.contains("missing") && e.contains(KEY_DIR), "{e}");
}

/// A read that never returns (a power meter whose ACPI method hangs: here a FIFO no one
/// writes) blocks the poller only: Slurm's read returns at once, the node unavailable.
#[test]
fn a_frozen_read_never_blocks_a_slurm_call() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(&root.join("hwmon0/name"), "power_meter");
    nix::unistd::mkfifo(
        &root.join("hwmon0/power1_average"),
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .expect("mkfifo");
    let mut opened = Hwmon::open(&config(root)).expect("open");
    let called = Instant::now();
    let r = opened.source.poll(Instant::now());
    assert!(called.elapsed() < Duration::from_millis(500));
    assert!(!r.complete);
    // the poller stays blocked in the FIFO: its thread is left to the process's end
    std::mem::forget(opened);
}

/// Stacked with rust_gpu on Grace Hopper (either order of AcctGatherEnergyType), the
/// modules are rust_gpu's: rust_hwmon counts none (0 J, a true figure, not unavailable)
/// and reports every rail beside the node; alone, or told its sensors, it counts them.
#[test]
fn stacked_with_rust_gpu_on_grace_hopper_the_modules_are_left_to_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    grace_hopper(root, 1);
    for (n, w) in [(0, 400.0), (1, 120.0), (2, 80.0), (3, 30.0)] {
        set(root, n, w);
    }
    for order in [
        "acct_gather_energy/rust_hwmon,acct_gather_energy/rust_gpu",
        "acct_gather_energy/rust_gpu,acct_gather_energy/rust_hwmon",
    ] {
        let plugins: Vec<String> = order.split(',').map(String::from).collect();
        let settings = Hwmon::stacked(&config(root), &plugins);
        let (polling, readout, _) = prepare(&settings).expect("prepare");
        let mut d = Driven {
            polling,
            readout,
            figures: Figures::default(),
            t0: Instant::now(),
        };
        d.round(0);
        let r = d.round(1000);
        assert!(r.complete);
        assert_eq!(r.energy_uj, 0, "{order}");
        assert_eq!(r.watts, Some(0.0));
        let labels: Vec<&str> = r.parts.iter().map(|p| p.label).collect();
        assert_eq!(labels, ["Module", "Grace", "Cpu", "Sysio"]);
        assert_eq!(r.parts[0].energy_uj, Some(400_000_000));
        let described = HwmonPolling::describe(&d.readout);
        assert!(described.contains("no sensor counted"), "{described}");
    }
    // alone: the modules
    let alone = Hwmon::stacked(&config(root), &["acct_gather_energy/rust_hwmon".into()]);
    assert!(!alone.beside_gpus);
    // named by the admin: as named, stacked or not
    let mut named = config(root);
    named.keys.sensors = vec!["grace".into()];
    let named = Hwmon::stacked(&named, &["acct_gather_energy/rust_gpu".into()]);
    let (_, readout, _) = prepare(&named).expect("prepare");
    assert!(HwmonPolling::describe(&readout).contains("(Grace Power Socket 0)"));
}

/// The averaging interval is an ACPI method call each time it is read: read at the first
/// round, then again only once `INTERVAL_REREAD` has passed.
#[test]
fn the_interval_is_read_again_only_every_ten_seconds() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(&root.join("hwmon0/name"), "power_meter");
    write(&root.join("hwmon0/power1_average_interval"), "1000");
    set(root, 0, 300.0);
    let (mut polling, ..) = prepare(&config(root)).expect("prepare");
    let t0 = Instant::now();
    let rail = &mut polling.rails[0];
    assert_eq!(rail.window(t0), Some(Duration::from_secs(1)));
    write(&root.join("hwmon0/power1_average_interval"), "250");
    assert_eq!(
        rail.window(t0 + Duration::from_secs(9)),
        Some(Duration::from_secs(1))
    );
    assert_eq!(
        rail.window(t0 + INTERVAL_REREAD),
        Some(Duration::from_millis(250))
    );
}
