//! `hwmonsim`: the kernel's hwmon class as NVIDIA Grace Hopper, Grace or an x86 server with
//! an ACPI power meter shows it, knowing the true joules.
//!
//! ```text
//! hwmonsim run DIR [--platform gh200|grace|acpi] [--sockets N] [--watts W]
//!                  [--interval-ms MS] [--on-device 1]      write DIR/hwmon
//! hwmonsim set DIR WATTS                                   change the node's power
//! hwmonsim glitch DIR vanish|garbage [SECONDS]             the first counted sensor
//! hwmonsim truth DIR                                       print the true joules
//! ```
//! `run` writes one ACPI power meter per rail, as drivers/hwmon/acpi_power_meter.c lays it
//! out (Documentation/hwmon/acpi_power_meter.rst): `hwmonK/name` (`power_meter`),
//! `power1_average` (µW, the mean power over the last averaging interval, updated once an
//! interval), `power1_average_interval` (ms), `power1_oem_info` (NVIDIA's rail names, Grace
//! Performance Tuning Guide: "Module Power Socket N", "Grace Power Socket N", "CPU Power
//! Socket N", "SysIO Power Socket N"), `power1_model_number`, `power1_serial_number`,
//! `power1_is_battery`, `power1_accuracy`. `--on-device 1` puts the attributes in
//! `hwmonK/device/` as kernels before 6.x did. A temperature sensor (`acpitz`) sits
//! beside them, as on every machine.
//! The node's power W is the modules' (gh200, split evenly between sockets; each module's
//! Grace socket draws 30% of it, whose CPU rail 20% and SysIO rail 5%), the Grace sockets'
//! (grace: CPU 70%, SysIO 15% of a socket), or the one meter's (acpi).
//! Glitches: `vanish` removes the first counted rail's `power1_average` for SECONDS
//! (default 3), `garbage` makes it unreadable; both come back with the mean of the interval
//! they end in.
//! DIR/truth: "NODE_J module=J grace=J cpu=J sysio=J" (the rails' sums; none on acpi);
//! DIR/power.log `"<unix ns> <watts>"` per change. A change counts from the moment `set`
//! made it (DIR/power holds its time), not from the next update.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use energy_tests::inbox::{self, Inbox};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") if args.len() >= 2 => run(Path::new(&args[1]), &args[2..]),
        Some("set") if args.len() == 3 => set(Path::new(&args[1]), &args[2]),
        Some("glitch") if args.len() >= 3 => glitch(Path::new(&args[1]), &args[2..]),
        Some("truth") if args.len() == 2 => fs::read_to_string(Path::new(&args[1]).join("truth"))
            .map(|t| print!("{t}"))
            .map_err(|e| e.to_string()),
        _ => Err("usage: hwmonsim run|set|glitch|truth DIR ... (see the source header)".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hwmonsim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn unix_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// One rail: an ACPI power meter.
struct Rail {
    /// Where its attributes are (`hwmonK` or `hwmonK/device`).
    dir: PathBuf,
    /// `module`, `grace`, `cpu`, `sysio`; `""` for a server's one meter.
    kind: &'static str,
    /// Its share of the node's power.
    share: f64,
    /// True joules since the simulator started.
    joules: f64,
    /// Joules at the start of the averaging interval in progress.
    window_start_j: f64,
    /// Counted towards the node (the modules, the Grace sockets, the server's meter).
    counted: bool,
}

struct Options {
    platform: String,
    sockets: u32,
    watts: f64,
    interval_ms: u64,
    on_device: bool,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        platform: "gh200".into(),
        sockets: 1,
        watts: 0.0,
        interval_ms: 1000,
        on_device: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || -> Result<f64, String> {
            value.parse().map_err(|_| format!("{flag} needs a number"))
        };
        match flag.as_str() {
            "--platform" => o.platform = value.clone(),
            "--sockets" => o.sockets = number()? as u32,
            "--watts" => o.watts = number()?,
            "--interval-ms" => o.interval_ms = number()? as u64,
            "--on-device" => o.on_device = number()? != 0.0,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(o)
}

/// The rails of a platform, each with its labels, in hwmon's order.
fn layout(root: &Path, o: &Options) -> Result<Vec<(Rail, Option<String>)>, String> {
    let per_socket: &[(&str, &str, f64, bool)] = match o.platform.as_str() {
        "gh200" => &[
            ("module", "Module", 1.0, true),
            ("grace", "Grace", 0.3, false),
            ("cpu", "CPU", 0.2, false),
            ("sysio", "SysIO", 0.05, false),
        ],
        "grace" => &[
            ("grace", "Grace", 1.0, true),
            ("cpu", "CPU", 0.7, false),
            ("sysio", "SysIO", 0.15, false),
        ],
        "acpi" => &[("", "", 1.0, true)],
        other => return Err(format!("unknown platform {other}")),
    };
    let sockets = if o.platform == "acpi" {
        1
    } else {
        o.sockets.max(1)
    };
    let mut all = Vec::new();
    // hwmon0 is the temperature sensor every machine has
    let mut k = 1;
    for s in 0..sockets {
        for (kind, name, share, counted) in per_socket {
            let hwmon = root.join(format!("hwmon{k}"));
            let dir = if o.on_device {
                hwmon.join("device")
            } else {
                hwmon
            };
            let label = (!name.is_empty()).then(|| format!("{name} Power Socket {s}"));
            all.push((
                Rail {
                    dir,
                    kind,
                    share: share / f64::from(sockets),
                    joules: 0.0,
                    window_start_j: 0.0,
                    counted: *counted,
                },
                label,
            ));
            k += 1;
        }
    }
    Ok(all)
}

fn run(dir: &Path, args: &[String]) -> Result<(), String> {
    energy_tests::hardware_time::keep_hardware_time();
    let o = options(args)?;
    let root = dir.join("hwmon");
    fs::create_dir_all(root.join("hwmon0")).map_err(|e| e.to_string())?;
    write_atomic(&root.join("hwmon0/name"), "acpitz\n")?;
    write_atomic(&root.join("hwmon0/temp1_input"), "27800\n")?;
    let mut watts = o.watts;
    let mut rails: Vec<Rail> = Vec::new();
    for (n, (rail, label)) in layout(&root, &o)?.into_iter().enumerate() {
        fs::create_dir_all(&rail.dir).map_err(|e| e.to_string())?;
        for (name, text) in [
            ("name", "power_meter".to_string()),
            ("power1_average", "0".into()),
            ("power1_average_interval", o.interval_ms.to_string()),
            ("power1_average_interval_min", "50".into()),
            ("power1_average_interval_max", "3600000".into()),
            ("power1_accuracy", "98.0%".into()),
            ("power1_is_battery", "0".into()),
            ("power1_model_number", "hwmonsim".into()),
            ("power1_serial_number", format!("SIM{n:04}")),
            ("power1_oem_info", label.clone().unwrap_or_default()),
        ] {
            write_atomic(&rail.dir.join(name), &format!("{text}\n"))?;
        }
        rails.push(rail);
    }
    let power_file = dir.join("power");
    write_atomic(&power_file, &format!("{watts}\n"))?;
    inbox::append_line(
        &dir.join("power.log"),
        &format!("{} {watts}", unix_us() * 1000),
    )?;
    let mut commands = Inbox::open(&dir.join("commands"));
    let (mut vanished, mut garbage): (Option<Instant>, Option<Instant>) = (None, None);
    let interval = Duration::from_millis(o.interval_ms.max(1));
    // the truth is kept every 10 ms; the means are written once an interval
    let tick = interval.min(Duration::from_millis(10));
    let mut last = Instant::now();
    // the intervals tile the time from the start, as the firmware's: each ends one
    // interval after the last, whenever the write comes
    let mut window_end = last + interval;
    let mut written = last;
    fs::write(dir.join("pid"), format!("{}\n", std::process::id())).map_err(|e| e.to_string())?;
    let mut changed_us = None;
    loop {
        let now = Instant::now();
        let now_us = unix_us();
        let mut from = last;
        if let Ok(text) = fs::read_to_string(&power_file)
            && let Some((w, at_us)) = power_setting(&text)
            && (w != watts || at_us != changed_us)
        {
            let ago = at_us.map_or(0, |at| now_us.saturating_sub(at));
            let at = now
                .checked_sub(Duration::from_micros(ago as u64))
                .unwrap_or(last)
                .clamp(last, now);
            let before = at.duration_since(last).as_secs_f64();
            for r in &mut rails {
                r.joules += watts * r.share * before;
            }
            (watts, changed_us, from) = (w, at_us, at);
        }
        last = now;
        let dt = now.duration_since(from).as_secs_f64();
        for r in &mut rails {
            r.joules += watts * r.share * dt;
        }
        for line in commands.take() {
            let mut words = line.split_whitespace();
            let what = words.next().unwrap_or("");
            let secs: f64 = words.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
            let until = Some(now + Duration::from_secs_f64(secs));
            match what {
                "vanish" => vanished = until,
                "garbage" => garbage = until,
                _ => {}
            }
        }
        let active = |t: Option<Instant>| t.is_some_and(|t| now < t);
        if now >= window_end {
            // the mean of the interval just ended (over the time since the last write, the
            // energy the truth holds), as the firmware updates it
            let secs = now.duration_since(written).as_secs_f64();
            written = now;
            window_end += interval;
            let first = rails.iter().position(|r| r.counted);
            for (i, r) in rails.iter_mut().enumerate() {
                let mean_uw = ((r.joules - r.window_start_j) / secs * 1e6).round() as u64;
                r.window_start_j = r.joules;
                let file = r.dir.join("power1_average");
                if Some(i) == first && active(vanished) {
                    let _ = fs::remove_file(&file);
                } else if Some(i) == first && active(garbage) {
                    write_atomic(&file, "\u{1}garbage\n")?;
                } else {
                    write_atomic(&file, &format!("{mean_uw}\n"))?;
                }
            }
        }
        write_atomic(&dir.join("truth"), &truth(&rails))?;
        let next = (now + tick).min(window_end);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

/// "NODE_J kind=J ...": the counted rails' sum, then each kind's.
fn truth(rails: &[Rail]) -> String {
    let node: f64 = rails.iter().filter(|r| r.counted).map(|r| r.joules).sum();
    let mut kinds: Vec<(&str, f64)> = Vec::new();
    for r in rails.iter().filter(|r| !r.kind.is_empty()) {
        match kinds.iter_mut().find(|(k, _)| *k == r.kind) {
            Some((_, j)) => *j += r.joules,
            None => kinds.push((r.kind, r.joules)),
        }
    }
    let parts: Vec<String> = kinds.iter().map(|(k, j)| format!("{k}={j:.6}")).collect();
    format!("{node:.6} {}\n", parts.join(" "))
}

/// The power file: `WATTS [UNIX_US]`, the power and when it was set (none: `--watts`).
fn power_setting(text: &str) -> Option<(f64, Option<u128>)> {
    let mut words = text.split_whitespace();
    let watts = words.next()?.parse().ok()?;
    let at = match words.next() {
        Some(at) => Some(at.parse().ok()?),
        None => None,
    };
    Some((watts, at))
}

fn set(dir: &Path, watts: &str) -> Result<(), String> {
    let w: f64 = watts
        .parse()
        .map_err(|_| format!("{watts}: not a number of watts"))?;
    let at = unix_us();
    write_atomic(&dir.join("power"), &format!("{w} {at}\n"))?;
    inbox::append_line(&dir.join("power.log"), &format!("{} {w}", at * 1000))
}

fn glitch(dir: &Path, words: &[String]) -> Result<(), String> {
    inbox::append_line(&dir.join("commands"), &words.join(" "))
}
