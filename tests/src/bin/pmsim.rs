//! `pmsim`: a simulated HPE Cray EX node controller that knows the true joules.
//!
//! ```text
//! pmsim run DIR [--watts W] [--accels N] [--hz HZ]   write DIR/pm_counters as the controller does
//! pmsim set DIR WATTS                                change the node's power
//! pmsim glitch DIR restart|vanish|garbage|stale [SECONDS]
//! pmsim truth DIR                                    print the true node joules
//! ```
//! `run` writes, like `/sys/cray/pm_counters` (Cray-HPE docs-csm, "User Access to Compute
//! Node Power Data"): `energy`, `power`, `cpu_energy`, `cpu_power`, `memory_energy`,
//! `memory_power`, `accelN_energy`, `accelN_power` (`VALUE J|W TIMESTAMP us`, one scan
//! time for all), `power_cap`, `freshness` (counts scans), `generation`, `startup`,
//! `version`, `raw_scan_hz`, at HZ scans a second (10, as the controller). Each file is
//! replaced whole (a sysfs read is atomic per file); `freshness` is written last. The cpu
//! draws half the node's power, memory a tenth, each accelerator a tenth.
//! Glitches: `restart` (the controller restarts: counters from zero, new `startup`,
//! `freshness` from zero), `vanish` (no `energy` file), `garbage` (`energy` unreadable),
//! `stale` (no scans) for SECONDS (default 3).
//! DIR/truth holds "NODE_J cpu=J memory=J accelN=J"; DIR/power.log `"<unix ns> <watts>"` per
//! change. A change of power counts from the moment `set` made it (its time is in DIR/power),
//! not from the next scan, as a real node's power falls the moment its work stops.

use std::fs;
use std::path::Path;
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
        _ => Err("usage: pmsim run|set|glitch|truth DIR ... (see the source header)".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmsim: {e}");
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

struct Meter {
    prefix: String,
    share: f64,
    /// True joules since the simulator started.
    joules: f64,
    /// Joules at the controller's last start: the counter shows `joules - since`.
    since: f64,
}

fn run(dir: &Path, args: &[String]) -> Result<(), String> {
    energy_tests::hardware_time::keep_hardware_time();
    let (mut watts, mut accels, mut hz) = (0.0_f64, 2_u32, 10.0_f64);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value: f64 = it
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or(format!("{flag} needs a number"))?;
        match flag.as_str() {
            "--watts" => watts = value,
            "--accels" => accels = value as u32,
            "--hz" => hz = value,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    let pm = dir.join("pm_counters");
    fs::create_dir_all(&pm).map_err(|e| e.to_string())?;
    let mut meters = vec![Meter {
        prefix: String::new(),
        share: 1.0,
        joules: 0.0,
        since: 0.0,
    }];
    for (prefix, share) in [("cpu_", 0.5), ("memory_", 0.1)] {
        meters.push(Meter {
            prefix: prefix.into(),
            share,
            joules: 0.0,
            since: 0.0,
        });
    }
    for n in 0..accels {
        meters.push(Meter {
            prefix: format!("accel{n}_"),
            share: 0.1,
            joules: 0.0,
            since: 0.0,
        });
    }
    let mut startup = unix_us();
    let mut freshness: u64 = 0;
    for (name, text) in [
        ("generation", "1".to_string()),
        ("version", "2".into()),
        ("raw_scan_hz", format!("{hz}")),
        ("power_cap", "0 W".into()),
        ("startup", startup.to_string()),
    ] {
        write_atomic(&pm.join(name), &format!("{text}\n"))?;
    }
    let power_file = dir.join("power");
    write_atomic(&power_file, &format!("{watts}\n"))?;
    inbox::append_line(
        &dir.join("power.log"),
        &format!("{} {watts}", unix_us() * 1000),
    )?;
    let mut commands = Inbox::open(&dir.join("commands"));
    let (mut vanished, mut garbage, mut stale): (
        Option<Instant>,
        Option<Instant>,
        Option<Instant>,
    ) = (None, None, None);
    let tick = Duration::from_secs_f64(1.0 / hz);
    let mut last = Instant::now();
    fs::write(dir.join("pid"), format!("{}\n", std::process::id())).map_err(|e| e.to_string())?;
    let mut changed_us = None;
    loop {
        let now = Instant::now();
        let now_us = unix_us();
        // a change of power counts from the moment `set` made it, not from this tick: a
        // job's last command sets 0 W and its step's last read follows within milliseconds
        // (a real node's power falls as its work stops); the energy until then is the
        // old power's
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
            for m in &mut meters {
                m.joules += watts * m.share * before;
            }
            (watts, changed_us, from) = (w, at_us, at);
        }
        last = now;
        let dt = now.duration_since(from).as_secs_f64();
        for m in &mut meters {
            m.joules += watts * m.share * dt;
        }
        for line in commands.take() {
            let mut words = line.split_whitespace();
            let what = words.next().unwrap_or("");
            let secs: f64 = words.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
            let until = Some(now + Duration::from_secs_f64(secs));
            match what {
                "restart" => {
                    for m in &mut meters {
                        m.since = m.joules;
                    }
                    startup = unix_us();
                    freshness = 0;
                    write_atomic(&pm.join("startup"), &format!("{startup}\n"))?;
                }
                "vanish" => vanished = until,
                "garbage" => garbage = until,
                "stale" => stale = until,
                _ => {}
            }
        }
        let active = |t: Option<Instant>| t.is_some_and(|t| now < t);
        if !active(stale) {
            let at = unix_us();
            freshness += 1;
            for m in &meters {
                let energy = pm.join(format!("{}energy", m.prefix));
                if m.prefix.is_empty() && active(vanished) {
                    let _ = fs::remove_file(&energy);
                } else if m.prefix.is_empty() && active(garbage) {
                    write_atomic(&energy, "\u{1}garbage\u{0}\n")?;
                } else {
                    let counter = (m.joules - m.since).floor() as u64;
                    write_atomic(&energy, &format!("{counter} J {at} us\n"))?;
                }
                let power = (watts * m.share).round() as u64;
                write_atomic(
                    &pm.join(format!("{}power", m.prefix)),
                    &format!("{power} W {at} us\n"),
                )?;
            }
            write_atomic(&pm.join("freshness"), &format!("{freshness}\n"))?;
        }
        let parts: Vec<String> = meters[1..]
            .iter()
            .map(|m| format!("{}={:.6}", m.prefix.trim_end_matches('_'), m.joules))
            .collect();
        write_atomic(
            &dir.join("truth"),
            &format!("{:.6} {}\n", meters[0].joules, parts.join(" ")),
        )?;
        std::thread::sleep(tick.saturating_sub(now.elapsed()));
    }
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
