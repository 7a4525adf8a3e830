//! `gpu_probe [LIBRARY [SECONDS]]`: what rust_gpu reads from this node's NVIDIA GPUs,
//! through the same binding and at the same pace as its poller (every 0.25 s), for
//! SECONDS (default 10): per GPU the energy its counter gained and the power it last
//! showed, and per process its use of the GPU (SM utilization over time) and its part of
//! the GPU's use, the figure a shared GPU's dynamic energy is split by. LIBRARY is what
//! `EnergyGpuNvmlLibrary` would name (default `libnvidia-ml.so.1`).
//!
//! For an admin checking a node, and for the real-GPU check in `tests/hardware`.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::thread::sleep;
use std::time::{Duration, Instant};

use slurm_energy_gpu_libs::open_nvml;

const PERIOD: Duration = Duration::from_millis(250);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let library = args.get(1).map_or("libnvidia-ml.so.1", String::as_str);
    let seconds: f64 = match args.get(2).map(|s| s.parse()) {
        None => 10.0,
        Some(Ok(s)) if s > 0.0 => s,
        Some(_) => {
            eprintln!("gpu_probe: SECONDS must be a positive number");
            return ExitCode::from(2);
        }
    };
    let mut nvml = match open_nvml(library) {
        Ok(nvml) => nvml,
        Err(e) => {
            eprintln!("gpu_probe: {library}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let devices = match nvml.devices() {
        Ok(devices) => devices,
        Err(e) => {
            eprintln!("gpu_probe: listing the GPUs: {e}");
            return ExitCode::FAILURE;
        }
    };
    let first: Vec<Option<u64>> = devices
        .iter()
        .map(|d| nvml.energy_uj(d.index).ok())
        .collect();
    let mut used: Vec<BTreeMap<u32, u64>> = vec![BTreeMap::new(); devices.len()];
    let start = Instant::now();
    let mut reads = 0u32;
    while start.elapsed().as_secs_f64() < seconds {
        for (k, d) in devices.iter().enumerate() {
            match nvml.process_use(d.index) {
                Ok(list) => used[k].extend(list),
                Err(e) if reads == 0 => println!("GPU {}: process use: {e}", d.index),
                Err(_) => {}
            }
        }
        reads += 1;
        sleep(PERIOD);
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!("{reads} reads over {elapsed:.2} s");
    for (k, d) in devices.iter().enumerate() {
        let energy = match (first[k], nvml.energy_uj(d.index)) {
            (Some(a), Ok(b)) => format!("{:.3} J", b.saturating_sub(a) as f64 / 1e6),
            (_, Err(e)) => format!("unavailable ({e})"),
            (None, Ok(_)) => "unavailable at the start".to_string(),
        };
        let power = nvml
            .power_w(d.index)
            .map_or_else(|e| format!("unavailable ({e})"), |w| format!("{w:.1} W"));
        let file = d.file.map_or("unknown".to_string(), |(major, minor)| {
            format!("{major}:{minor}")
        });
        println!(
            "GPU {} ({}, device file {file}): energy {energy}, power now {power}",
            d.index, d.name
        );
        let total: u64 = used[k].values().sum();
        for (pid, busy) in &used[k] {
            println!(
                "  pid {pid}: use {busy} %·ms ({:.1}% of the GPU's use, {:.1}% SM utilization on average over the run)",
                100.0 * *busy as f64 / total.max(1) as f64,
                *busy as f64 / (elapsed * 1000.0)
            );
        }
    }
    ExitCode::SUCCESS
}
