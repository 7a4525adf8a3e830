//! `redfishsim`: the readings of a simulated Redfish BMC that knows the true joules.
//!
//! ```text
//! redfishsim run DIR MOCKUP [--watts W] [--hz HZ]   copy MOCKUP to DIR/mockup and keep its readings current
//! redfishsim set DIR WATTS                          change the node's power
//! redfishsim glitch DIR WATTS SECS                  report WATTS for SECS, the power unchanged
//! ```
//! `sushy-static -m DIR/mockup` serves the files and re-reads them on every GET. The node's
//! power is split evenly over the chassis; each chassis' `Power` resource gets
//! `PowerConsumedWatts`, its `EnvironmentMetrics` `PowerWatts` and (where the mockup has
//! it) the `EnergyJoules` counter, whole joules as BMCs report them. Files are replaced
//! whole (write, then rename). DIR/truth holds the true joules; DIR/power.log
//! `"<unix ns> <watts>"` per change. A glitch (DIR/glitch: `"<watts> <until unix ns>"`) makes
//! the readings (power, not the counter) say its watts until then while the truth goes on
//! at the node's power, as a BMC that answers nonsense for a while does.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") if args.len() >= 3 => run(Path::new(&args[1]), Path::new(&args[2]), &args[3..]),
        Some("set") if args.len() == 3 => set(Path::new(&args[1]), &args[2]),
        Some("glitch") if args.len() == 4 => glitch(Path::new(&args[1]), &args[2], &args[3]),
        _ => Err(
            "usage: redfishsim run DIR MOCKUP [--watts W] [--hz HZ] | set DIR WATTS | \
             glitch DIR WATTS SECS"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redfishsim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target).map_err(|e| format!("{}: {e}", target.display()))?;
        }
    }
    Ok(())
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

struct Chassis {
    power: Option<PathBuf>,
    metrics: Option<PathBuf>,
}

fn run(dir: &Path, mockup: &Path, args: &[String]) -> Result<(), String> {
    energy_tests::hardware_time::keep_hardware_time();
    let (mut watts, mut hz) = (0.0_f64, 10.0_f64);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value: f64 = it
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or(format!("{flag} needs a number"))?;
        match flag.as_str() {
            "--watts" => watts = value,
            "--hz" => hz = value,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    let root = dir.join("mockup");
    let _ = fs::remove_dir_all(&root);
    copy_tree(mockup, &root)?;
    let mut chassis = Vec::new();
    for entry in fs::read_dir(root.join("Chassis")).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            let file = |sub: &str| Some(path.join(sub).join("index.json")).filter(|p| p.exists());
            chassis.push(Chassis {
                power: file("Power"),
                metrics: file("EnvironmentMetrics"),
            });
        }
    }
    let power_file = dir.join("power");
    write_atomic(&power_file, &format!("{watts}\n"))?;
    fs::write(dir.join("power.log"), format!("{} {watts}\n", unix_ns()))
        .map_err(|e| e.to_string())?;
    let tick = Duration::from_secs_f64(1.0 / hz);
    let (mut joules, mut last) = (0.0_f64, Instant::now());
    loop {
        let now = Instant::now();
        joules += watts * now.duration_since(last).as_secs_f64();
        last = now;
        if let Ok(text) = fs::read_to_string(&power_file)
            && let Ok(w) = text.trim().parse()
        {
            watts = w;
        }
        // what the readings say: the node's power, or a glitch's while it lasts
        let shown = fs::read_to_string(dir.join("glitch"))
            .ok()
            .and_then(|t| {
                let (w, until) = t.trim().split_once(' ')?;
                (unix_ns() < until.parse::<u128>().ok()?).then_some(w.parse::<f64>().ok()?)
            })
            .unwrap_or(watts);
        let share = shown / chassis.len().max(1) as f64;
        let counter = (joules / chassis.len().max(1) as f64).floor();
        for c in &chassis {
            if let Some(p) = &c.power {
                let mut doc = read_json(p)?;
                if let Some(controls) = doc["PowerControl"].as_array_mut() {
                    for control in controls {
                        control["PowerConsumedWatts"] = share.into();
                    }
                }
                write_atomic(p, &doc.to_string())?;
            }
            if let Some(p) = &c.metrics {
                let mut doc = read_json(p)?;
                doc["PowerWatts"]["Reading"] = share.into();
                if doc.get("EnergyJoules").is_some() {
                    doc["EnergyJoules"]["Reading"] = counter.into();
                }
                write_atomic(p, &doc.to_string())?;
            }
        }
        write_atomic(&dir.join("truth"), &format!("{joules:.6}\n"))?;
        std::thread::sleep(tick.saturating_sub(now.elapsed()));
    }
}

fn glitch(dir: &Path, watts: &str, secs: &str) -> Result<(), String> {
    let w: f64 = watts
        .parse()
        .map_err(|_| format!("{watts}: not a number of watts"))?;
    let s: f64 = secs
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s > 0.0)
        .ok_or(format!("{secs}: not a number of seconds"))?;
    let until = unix_ns() + (s * 1e9) as u128;
    write_atomic(&dir.join("glitch"), &format!("{w:e} {until}\n"))
}

fn set(dir: &Path, watts: &str) -> Result<(), String> {
    let w: f64 = watts
        .parse()
        .map_err(|_| format!("{watts}: not a number of watts"))?;
    write_atomic(&dir.join("power"), &format!("{w}\n"))?;
    let line = format!("{} {w}\n", unix_ns());
    let log = dir.join("power.log");
    let mut text = fs::read_to_string(&log).unwrap_or_default();
    text.push_str(&line);
    fs::write(&log, text).map_err(|e| e.to_string())
}
