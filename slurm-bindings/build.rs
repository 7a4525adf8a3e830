//! Generates bindings from the headers of the Slurm the plugins will be loaded by.
//!
//! Slurm's loader accepts a plugin only if `plugin_version` equals its own
//! `SLURM_VERSION_NUMBER` (major, minor and micro), and `acct_gather_energy_t` changed
//! layout inside the 24.11 series, so everything here comes from the headers found at
//! `SLURM_INCLUDE_DIR` (default `SLURM_PREFIX/include` if `SLURM_PREFIX` is set, else
//! `/usr/include`) and never from a hard-coded table.

use std::env;
use std::fs;
use std::path::PathBuf;

/// Internal types mirrored by hand change layout at these releases.
const VERSION_CFGS: &[(u32, &str)] = &[
    // s_p_options_t gained pack/unpack hooks (40 -> 56 bytes).
    (0x17_02_00, "slurm_sp_options_pack"),
    // acct_gather_energy_t gained slurmd_start_time (Ticket 20207).
    (0x18_0B_00, "slurm_energy_start_time"),
    // acct_gather_energy_t gained last_adjustment mid-struct (Ticket 21593).
    (0x18_0B_04, "slurm_energy_last_adjustment"),
    // running_in_slurmd() & co. became macros over run_in_daemon(bitmask) (commit 209d878e9c).
    (0x19_05_00, "slurm_run_in_daemon_mask"),
    // slurm_load_job() takes a slurm_step_id_t (26.05's SLUIDs) instead of a job id.
    (0x1A_05_00, "slurm_load_job_step_id"),
];

fn main() {
    println!("cargo::rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo::rerun-if-env-changed=SLURM_PREFIX");
    println!("cargo::rerun-if-env-changed=SLURM_EXPECTED_VERSION");
    println!("cargo::rerun-if-changed=wrapper.h");
    for (_, cfg) in VERSION_CFGS {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }

    // SLURM_INCLUDE_DIR, else SLURM_PREFIX/include (a Slurm built with --prefix), else
    // the system's headers.
    let nonempty = |name: &str| env::var(name).ok().filter(|v| !v.is_empty());
    let include_dir = PathBuf::from(
        nonempty("SLURM_INCLUDE_DIR")
            .or_else(|| nonempty("SLURM_PREFIX").map(|p| format!("{p}/include")))
            .unwrap_or_else(|| "/usr/include".into()),
    );
    let version_header = include_dir.join("slurm/slurm_version.h");
    println!("cargo::rerun-if-changed={}", version_header.display());
    let version = match fs::read_to_string(&version_header) {
        Ok(text) => parse_version_number(&text).unwrap_or_else(|| {
            fail(&format!(
                "no SLURM_VERSION_NUMBER in {}",
                version_header.display()
            ))
        }),
        Err(e) => fail(&format!(
            "cannot read {}: {e}. Install Slurm's headers (Debian: libslurm-dev) \
             or set SLURM_INCLUDE_DIR to the include directory of the Slurm you build for",
            version_header.display()
        )),
    };
    check_expected_version(version);

    for (since, cfg) in VERSION_CFGS {
        if version >= *since {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
    println!("cargo::metadata=version_number={version}");

    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{}", include_dir.display()))
        .allowlist_type("acct_gather_energy_t")
        .allowlist_type("acct_energy_type")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_function("slurm_get_node_energy")
        // slurmstepd's GPUs from slurmctld's job record where the step record is not read
        .allowlist_type("job_info_msg_t")
        .allowlist_function("slurm_(load_job|free_job_info_msg)")
        // senergy reads accounting (and keeps its record in a job's AdminComment) through
        // libslurm's slurmdb API (the plugins never call these: an unused declaration binds
        // no symbol)
        .allowlist_type("slurmdb_(job_cond|job_rec|step_rec)_t")
        .allowlist_type("slurm_selected_step_t")
        .allowlist_type("slurm_conf_t")
        .allowlist_type("job_states")
        .allowlist_var("SLURM_(EXTERN_CONT|BATCH_SCRIPT|INTERACTIVE_STEP|PENDING_STEP)")
        .allowlist_var("JOB_STATE_BASE")
        .allowlist_function(
            "slurmdb_(connection_get|connection_close|connection_commit|jobs_get|job_modify)",
        )
        .allowlist_function("slurm_list_(create|destroy|iterator_create|iterator_destroy|next)")
        .allowlist_function("slurm_(init|strerror)")
        // the opaque list type and slurm_list_append are declared in internal.rs
        .blocklist_type("xlist")
        .constified_enum_module("acct_energy_type")
        .constified_enum_module("job_states")
        .derive_default(true)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen over {}: {e}", include_dir.display())));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap_or_else(|_| fail("OUT_DIR unset")));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("writing bindings: {e}")));
}

fn parse_version_number(header: &str) -> Option<u32> {
    header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#define"), Some("SLURM_VERSION_NUMBER"), Some(value)) => {
                u32::from_str_radix(value.trim_start_matches("0x"), 16).ok()
            }
            _ => None,
        }
    })
}

/// A site that builds for "its" Slurm can pin the release it expects
/// (`SLURM_EXPECTED_VERSION=22.05.8`): a plugin whose version would not match the
/// daemons is refused at build time instead of at slurmd start.
fn check_expected_version(found: u32) {
    let Ok(expected) = env::var("SLURM_EXPECTED_VERSION") else {
        return;
    };
    let found_text = format!(
        "{}.{:02}.{}",
        found >> 16,
        (found >> 8) & 0xff,
        found & 0xff
    );
    let parts: Vec<u32> = expected
        .split('.')
        .map(|p| p.parse().unwrap_or(u32::MAX))
        .collect();
    let wanted = match parts.as_slice() {
        [major, minor, micro] if *major < 256 && *minor < 256 && *micro < 256 => {
            (major << 16) | (minor << 8) | micro
        }
        _ => fail(&format!(
            "SLURM_EXPECTED_VERSION={expected} is not of the form MAJOR.MINOR.MICRO"
        )),
    };
    if wanted != found {
        fail(&format!(
            "the headers are Slurm {found_text} but SLURM_EXPECTED_VERSION={expected}: \
             the plugin would be refused by the daemons; point SLURM_INCLUDE_DIR at the \
             headers of Slurm {expected}"
        ));
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: slurm-sys: {message}");
    std::process::exit(1);
}
