//! `energy-driver`: loads the acct_gather_energy plugin named in a slurm.conf through
//! Slurm's own framework (`slurm_conf_init`, `acct_gather_conf_init`, which runs the
//! plugin's `conf_options`/`conf_set` over acct_gather.conf, then the
//! `acct_gather_energy_g_*` calls slurmd and slurmstepd make), and prints one line per call.
//!
//! ```text
//! energy-driver SLURM_CONF PROGRAM CMD...
//!   PROGRAM  slurmd | slurmstepd | slurmctld   (what running_in_*() will answer)
//!   CMD      update | node | step | struct | joules | sensors | last-poll | profile
//!            | config | sleep=MS | bench=N | bench-step=N | probe=N
//! ```
//! An energy line reads `node consumed=J current=W ave=W poll=T` with `NO_VAL` spelled
//! `unavailable`; `struct` and `joules` print the node's record, then `struct[i]` for each
//! further record (the node's parts) of the SENSOR_CNT Slurm's energy RPC asks for. `bench=N` times N rounds of `update` + `node` and prints ns per round;
//! `bench-step=N` times N `get_sum(NODE_ENERGY_UP)`, a step's poll in slurmstepd; `probe=N`
//! makes N rounds of `update` + `node` 100 ms apart and prints the slowest call, in µs.
//! With `ENERGY_DRIVER_READY=FILE` it writes FILE once the plugin is loaded and
//! configured, before the first command.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use slurm_sys::{
    NO_VAL, NO_VAL64, acct_energy_type as kind, acct_gather_energy_t, config_key_pair_t,
    daemon_bit, xlist,
};

unsafe extern "C" {
    fn slurm_conf_init(file: *const c_char) -> c_int;
    fn acct_gather_conf_init() -> c_int;
    fn acct_gather_conf_destroy() -> c_int;
    fn acct_gather_conf_values() -> *mut xlist;
    fn acct_gather_energy_g_update_node_energy() -> c_int;
    fn acct_gather_energy_g_get_sum(data_type: u32, energy: *mut acct_gather_energy_t) -> c_int;
    fn acct_gather_energy_g_get_data(context: c_int, data_type: u32, data: *mut c_void) -> c_int;
    fn acct_gather_energy_g_set_data(data_type: u32, data: *mut c_void) -> c_int;
    fn slurm_list_iterator_create(list: *mut xlist) -> *mut c_void;
    fn slurm_list_next(it: *mut c_void) -> *mut c_void;
    fn slurm_list_iterator_destroy(it: *mut c_void);
    fn slurm_list_destroy(list: *mut xlist);
    fn slurm_log_var(level: c_int, fmt: *const c_char, ...);
}

fn show(label: &str, e: &acct_gather_energy_t) {
    let consumed = if e.consumed_energy == NO_VAL64 {
        "unavailable".to_string()
    } else {
        e.consumed_energy.to_string()
    };
    let current = if e.current_watts == NO_VAL {
        "unavailable".to_string()
    } else {
        e.current_watts.to_string()
    };
    println!(
        "{label} consumed={consumed} current={current} ave={} poll={}",
        e.ave_watts, e.poll_time
    );
}

/// Makes libslurmfull's `running_in_*()` answer as in daemon `program`: up to 24.11 they
/// compare `slurm_prog_name`; from 25.05 they test the bit mask `slurm_daemon` that each
/// daemon defines (`run_in_daemon.h`). Looked up at run time, so one driver source links
/// against every release.
fn act_as(program: CString) -> Result<(), String> {
    let bit = match program.to_bytes() {
        b"slurmctld" => daemon_bit::SLURMCTLD,
        b"slurmd" => daemon_bit::SLURMD,
        b"slurmstepd" => daemon_bit::SLURMSTEPD,
        _ => return Err(format!("unknown program {program:?}")),
    };
    // SAFETY: dlsym on the global scope; each symbol, where found, is the variable
    // run_in_daemon() reads (uint32_t mask, or char *name), and no other thread runs yet.
    unsafe {
        let mask = libc::dlsym(libc::RTLD_DEFAULT, c"slurm_daemon".as_ptr());
        if !mask.is_null() {
            *mask.cast::<u32>() = bit;
            return Ok(());
        }
        let name = libc::dlsym(libc::RTLD_DEFAULT, c"slurm_prog_name".as_ptr());
        if name.is_null() {
            return Err("libslurmfull has neither slurm_daemon nor slurm_prog_name".into());
        }
        *name.cast::<*mut c_char>() = program.into_raw();
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: energy-driver SLURM_CONF slurmd|slurmstepd|slurmctld CMD...");
        return ExitCode::from(2);
    }
    let (Ok(conf), Ok(program)) = (
        CString::new(args[1].as_str()),
        CString::new(args[2].as_str()),
    ) else {
        return ExitCode::from(2);
    };
    if let Err(e) = act_as(program) {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    // SAFETY: single-threaded start-up; Slurm's globals are set before any Slurm call reads
    // them, and the strings live until exit.
    unsafe {
        slurm_log_var(
            3,
            c"%s".as_ptr(),
            c"energy-driver: logging to stderr".as_ptr(),
        );
        if slurm_conf_init(conf.as_ptr()) != 0 {
            eprintln!("slurm_conf_init failed");
            return ExitCode::FAILURE;
        }
        if acct_gather_conf_init() != 0 {
            eprintln!("acct_gather_conf_init failed");
            return ExitCode::FAILURE;
        }
    }
    // The plugin is loaded and configured: say so to whoever waits (the tests'
    // `driver`). Start-up time differs by release: 23.02's slurm_conf_init loads
    // auth/munge, whose init in a daemon (slurmd, slurmctld) probes munged, and
    // without one the munge library retries for about 2 s.
    if let Some(ready) = std::env::var_os("ENERGY_DRIVER_READY")
        && let Err(e) = std::fs::write(&ready, b"ready\n")
    {
        eprintln!(
            "energy-driver: cannot write {}: {e}",
            ready.to_string_lossy()
        );
        return ExitCode::FAILURE;
    }
    for cmd in &args[3..] {
        let mut energy = acct_gather_energy_t::default();
        // SAFETY: each call passes what acct_gather_energy.h defines for its type.
        unsafe {
            match cmd.as_str() {
                "update" => println!("update rc={}", acct_gather_energy_g_update_node_energy()),
                "node" => {
                    acct_gather_energy_g_get_sum(kind::ENERGY_DATA_NODE_ENERGY, &mut energy);
                    show("node", &energy);
                }
                "step" => {
                    acct_gather_energy_g_get_sum(kind::ENERGY_DATA_NODE_ENERGY_UP, &mut energy);
                    show("step", &energy);
                }
                "struct" | "joules" => {
                    let t = if cmd == "struct" {
                        kind::ENERGY_DATA_STRUCT
                    } else {
                        kind::ENERGY_DATA_JOULES_TASK
                    };
                    // as slurmd's energy RPC does: an array of SENSOR_CNT records
                    let mut count: u16 = 0;
                    acct_gather_energy_g_get_data(
                        0,
                        kind::ENERGY_DATA_SENSOR_CNT,
                        (&mut count as *mut u16).cast(),
                    );
                    let mut records =
                        vec![acct_gather_energy_t::default(); usize::from(count.max(1))];
                    acct_gather_energy_g_get_data(0, t, records.as_mut_ptr().cast());
                    show(cmd, &records[0]);
                    for (i, part) in records.iter().enumerate().skip(1) {
                        show(&format!("{cmd}[{i}]"), part);
                    }
                }
                "sensors" => {
                    let mut count: u16 = 0;
                    acct_gather_energy_g_get_data(
                        0,
                        kind::ENERGY_DATA_SENSOR_CNT,
                        (&mut count as *mut u16).cast(),
                    );
                    println!("sensors count={count}");
                }
                "last-poll" => {
                    let mut t: i64 = 0;
                    acct_gather_energy_g_get_data(
                        0,
                        kind::ENERGY_DATA_LAST_POLL,
                        (&mut t as *mut i64).cast(),
                    );
                    println!("last-poll time={t}");
                }
                "profile" => {
                    let mut delta: c_int = 0;
                    let rc = acct_gather_energy_g_set_data(
                        kind::ENERGY_DATA_PROFILE,
                        (&mut delta as *mut c_int).cast(),
                    );
                    println!("profile rc={rc}");
                }
                "config" => print_config(),
                other => {
                    if let Some(ms) = other.strip_prefix("sleep=").and_then(|v| v.parse().ok()) {
                        std::thread::sleep(Duration::from_millis(ms));
                    } else if let Some(n) = other
                        .strip_prefix("bench=")
                        .and_then(|v| v.parse::<u32>().ok())
                    {
                        bench(n, kind::ENERGY_DATA_NODE_ENERGY, true);
                    } else if let Some(n) = other
                        .strip_prefix("bench-step=")
                        .and_then(|v| v.parse::<u32>().ok())
                    {
                        bench(n, kind::ENERGY_DATA_NODE_ENERGY_UP, false);
                    } else if let Some(n) = other
                        .strip_prefix("probe=")
                        .and_then(|v| v.parse::<u32>().ok())
                    {
                        probe(n);
                    } else {
                        eprintln!("unknown command {other}");
                        return ExitCode::from(2);
                    }
                }
            }
        }
    }
    // SAFETY: unloads the plugin (its fini) as slurmd does at shutdown.
    unsafe { acct_gather_conf_destroy() };
    println!("done");
    ExitCode::SUCCESS
}

/// # Safety
/// The framework is initialised.
unsafe fn bench(rounds: u32, data_type: u32, update: bool) {
    let mut energy = acct_gather_energy_t::default();
    let start = Instant::now();
    for _ in 0..rounds {
        // SAFETY: as in main.
        unsafe {
            if update {
                acct_gather_energy_g_update_node_energy();
            }
            acct_gather_energy_g_get_sum(data_type, &mut energy);
        }
    }
    let ns = start.elapsed().as_nanos() / u128::from(rounds.max(1));
    println!("bench rounds={rounds} ns_per_round={ns}");
}

/// # Safety
/// The framework is initialised.
unsafe fn probe(rounds: u32) {
    let mut energy = acct_gather_energy_t::default();
    let mut slowest = Duration::ZERO;
    for _ in 0..rounds {
        for call in 0..2 {
            let start = Instant::now();
            // SAFETY: as in main.
            unsafe {
                if call == 0 {
                    acct_gather_energy_g_update_node_energy();
                } else {
                    acct_gather_energy_g_get_sum(kind::ENERGY_DATA_NODE_ENERGY, &mut energy);
                }
            }
            slowest = slowest.max(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    show("probe-last", &energy);
    println!("probe rounds={rounds} slowest_us={}", slowest.as_micros());
}

/// # Safety
/// The framework is initialised.
unsafe fn print_config() {
    // SAFETY: the list and its config_key_pair_t items belong to Slurm until destroyed.
    unsafe {
        let list = acct_gather_conf_values();
        if list.is_null() {
            println!("config none");
            return;
        }
        let it = slurm_list_iterator_create(list);
        loop {
            let item = slurm_list_next(it).cast::<config_key_pair_t>();
            if item.is_null() {
                break;
            }
            let text = |p: *mut c_char| {
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            println!("config {}={}", text((*item).name), text((*item).value));
        }
        slurm_list_iterator_destroy(it);
        slurm_list_destroy(list);
    }
}
