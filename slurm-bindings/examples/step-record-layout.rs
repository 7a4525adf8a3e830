//! Checks internal.rs's layout table against what `ci/slurm-layout.sh` measured in the
//! headers of the Slurm this crate is built for (CI runs it for every release it builds):
//!
//!     ci/slurm-layout.sh SLURM_SOURCE >measured.txt
//!     cargo run -p slurm-sys --example step-record-layout -- measured.txt
//!
//! Each value the table or a constant of internal.rs gives is compared with the measured
//! one; any difference is named (field, both values) and the exit status is 1. A series the
//! table has no layout for passes (its step record is never read), with the line to paste.

use std::collections::BTreeMap;
use std::process::ExitCode;

use core::mem::{offset_of, size_of};
use slurm_sys::{
    ACCT_GATHER_PROFILE_ENERGY, ACCT_GATHER_PROFILE_RUNNING, BITSTR_MAGIC, BITSTR_OVERHEAD,
    LIST_HEAD, LIST_MAGIC, LIST_NODE_DATA, LIST_NODE_NEXT, PROFILE_FIELD_UINT64, PROFILE_NO_PARENT,
    S_P_STRING, SLURM_VERSION_NUMBER, StepRecordLayout, acct_gather_profile_dataset_t,
    config_key_pair_t, log_level, measured_release, s_p_options_t, step_record_layout,
};

/// The `key=value` pairs internal.rs gives for `layout` and for its other hand mirrors
/// (constants, sizes and offsets), in ci/slurm-layout.sh's names. The destructuring has no
/// `..`: a field added to the struct must be added here.
fn table_values(layout: StepRecordLayout) -> Vec<(&'static str, String)> {
    let StepRecordLayout {
        step_id,
        step_id_job,
        step_id_step,
        uid,
        user_name,
        job_gres_list,
        step_gres_list,
        gres_plugin_id,
        gres_data,
        job_node_cnt,
        job_bit_alloc,
        job_cnt_node_alloc,
        step_node_cnt,
        step_bit_alloc,
        step_cnt_node_alloc,
    } = layout;
    let offsets = [
        ("step_id", step_id),
        ("step_id_job", step_id_job),
        ("step_id_step", step_id_step),
        ("uid", uid),
        ("user_name", user_name),
        ("job_gres_list", job_gres_list),
        ("step_gres_list", step_gres_list),
        ("gres_plugin_id", gres_plugin_id),
        ("gres_data", gres_data),
        ("job_node_cnt", job_node_cnt),
        ("job_bit_alloc", job_bit_alloc),
        ("job_cnt_node_alloc", job_cnt_node_alloc),
        ("step_node_cnt", step_node_cnt),
        ("step_bit_alloc", step_bit_alloc),
        ("step_cnt_node_alloc", step_cnt_node_alloc),
        ("list_head", LIST_HEAD),
        ("list_node_data", LIST_NODE_DATA),
        ("list_node_next", LIST_NODE_NEXT),
        ("bitstr_overhead", BITSTR_OVERHEAD),
        ("sp_options_size", size_of::<s_p_options_t>()),
        ("sp_options_type", offset_of!(s_p_options_t, type_)),
        ("config_key_pair_size", size_of::<config_key_pair_t>()),
        (
            "config_key_pair_value",
            offset_of!(config_key_pair_t, value),
        ),
        (
            "profile_dataset_size",
            size_of::<acct_gather_profile_dataset_t>(),
        ),
        (
            "profile_dataset_type",
            offset_of!(acct_gather_profile_dataset_t, type_),
        ),
    ];
    let enums = [
        ("sp_string", i64::from(S_P_STRING)),
        ("profile_field_uint64", i64::from(PROFILE_FIELD_UINT64)),
        ("profile_no_parent", PROFILE_NO_PARENT),
        ("profile_running", i64::from(ACCT_GATHER_PROFILE_RUNNING)),
        ("profile_energy", i64::from(ACCT_GATHER_PROFILE_ENERGY)),
        ("log_level_error", i64::from(log_level::ERROR)),
        ("log_level_info", i64::from(log_level::INFO)),
        ("log_level_verbose", i64::from(log_level::VERBOSE)),
        ("log_level_debug", i64::from(log_level::DEBUG)),
        ("log_level_debug2", i64::from(log_level::DEBUG2)),
    ];
    let mut values: Vec<_> = offsets.iter().map(|&(k, v)| (k, v.to_string())).collect();
    values.extend(enums.iter().map(|&(k, v)| (k, v.to_string())));
    values.push(("list_magic", format!("{LIST_MAGIC:#x}")));
    values.push(("bitstr_magic", format!("{BITSTR_MAGIC:#x}")));
    values
}

fn release(version: u32) -> String {
    format!(
        "{}.{:02}.{}",
        version >> 16,
        (version >> 8) & 0xff,
        version & 0xff
    )
}

fn check(path: &str) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let measured: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    let measured_version = measured
        .get("version_number")
        .and_then(|v| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .ok_or_else(|| format!("{path} has no version_number=0x..."))?;
    if measured_version >> 8 != SLURM_VERSION_NUMBER >> 8 {
        return Err(format!(
            "{path} measured Slurm {}, but this build is for Slurm {}",
            release(measured_version),
            release(SLURM_VERSION_NUMBER)
        ));
    }
    let Some(layout) = step_record_layout(SLURM_VERSION_NUMBER) else {
        println!(
            "internal.rs has no step-record layout for Slurm {}'s series (its record is not \
             read); to add it, paste the line of `ci/slurm-layout.sh --rust` into MEASURED_LAYOUTS",
            release(SLURM_VERSION_NUMBER)
        );
        return Ok(Vec::new());
    };
    let table_release = measured_release(SLURM_VERSION_NUMBER).map_or_else(String::new, release);
    let values = table_values(layout);
    let mut differences: Vec<String> = measured
        .keys()
        .filter(|k| !matches!(**k, "release" | "version_number"))
        .filter(|k| !values.iter().any(|(key, _)| key == *k))
        .map(|k| format!("{k}: measured in {path}, but internal.rs keeps no such value"))
        .collect();
    for (key, value) in values {
        match measured.get(key) {
            Some(m) if *m == value => {}
            Some(m) => differences.push(format!(
                "{key}: the headers of Slurm {} say {m}, internal.rs ({table_release}'s entry) says {value}",
                release(measured_version)
            )),
            None => differences.push(format!("{key}: not measured in {path}")),
        }
    }
    Ok(differences)
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: step-record-layout MEASURED_FILE (the output of ci/slurm-layout.sh)");
        return ExitCode::from(2);
    };
    match check(&path) {
        Ok(differences) if differences.is_empty() => {
            println!(
                "Slurm {}: internal.rs's layout equals the headers' ({path})",
                release(SLURM_VERSION_NUMBER)
            );
            ExitCode::SUCCESS
        }
        Ok(differences) => {
            for d in &differences {
                eprintln!("step-record-layout: {d}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("step-record-layout: {e}");
            ExitCode::FAILURE
        }
    }
}
