//! slurmctld's record of a job through libslurm's public API (`slurm_load_job` with
//! `SHOW_DETAIL`, as `scontrol show job -d`): the job's user, nodes and each node's GRES
//! indexes, copied out of the answer's `job_info_t` of the release built for (public in
//! `slurm.h`, its layout bindgen's) before the answer is freed.

use core::ffi::{CStr, c_char};
use std::ptr;

use slurm_sys::{SHOW_DETAIL, SLURM_SUCCESS, job_info_msg_t, slurm_free_job_info_msg};

use slurm_energy_logic::JobRecord;

/// More per-node strings than this is no job's node list.
const MAX_NODES: u32 = 1 << 20;

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a NUL-terminated string of libslurm's answer, alive until it is freed.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Asks slurmctld for its record of `job` (blocks for the RPC: never on Slurm's call).
pub fn load(job: u32) -> Result<JobRecord, String> {
    let mut answer: *mut job_info_msg_t = ptr::null_mut();
    // SAFETY: `answer` is where libslurm stores its answer, freed below.
    let rc = unsafe { slurm_sys::load_job(&mut answer, job, SHOW_DETAIL) };
    if rc != SLURM_SUCCESS {
        // libslurm leaves its error in this thread's errno (slurm_get_errno() is errno,
        // and gone from 26.05's headers)
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: a plain lookup of the error's text, a static string.
        let why = text(unsafe { slurm_sys::slurm_strerror(errno) });
        if !answer.is_null() {
            // SAFETY: an answer libslurm allocated.
            unsafe { slurm_free_job_info_msg(answer) };
        }
        return Err(format!("slurm_load_job({job}): {why}"));
    }
    // SAFETY: on success libslurm's answer, NULL or a job_info_msg_t of this release.
    let Some(msg) = (unsafe { answer.as_ref() }) else {
        return Err(format!("slurm_load_job({job}): no answer"));
    };
    let found = copy_out(msg, job);
    // SAFETY: the answer libslurm allocated, no longer referenced.
    unsafe { slurm_free_job_info_msg(answer) };
    found
}

/// The record of `job` in the answer `msg` (a job array's or heterogeneous job's answer
/// holds several records).
fn copy_out(msg: &job_info_msg_t, job: u32) -> Result<JobRecord, String> {
    let records: &[slurm_sys::slurm_job_info_t] = match msg.job_array {
        array if array.is_null() || msg.record_count == 0 => &[],
        // SAFETY: libslurm's array of record_count records.
        array => unsafe { std::slice::from_raw_parts(array, msg.record_count as usize) },
    };
    let Some(info) = records.iter().find(|r| r.job_id == job) else {
        return Err(format!(
            "slurmctld's answer holds no record of job {job} ({} records)",
            records.len()
        ));
    };
    if info.gres_detail_cnt > MAX_NODES {
        return Err(format!(
            "slurmctld's record of job {job} has {} GRES details: not a job's",
            info.gres_detail_cnt
        ));
    }
    let gres_detail = match info.gres_detail_str {
        details if details.is_null() => Vec::new(),
        // SAFETY: libslurm's array of gres_detail_cnt strings (each NULL or a string).
        details => unsafe { std::slice::from_raw_parts(details, info.gres_detail_cnt as usize) }
            .iter()
            .map(|&d| text(d))
            .collect(),
    };
    Ok(JobRecord {
        job,
        uid: info.user_id,
        nodes: text(info.nodes),
        gres_detail,
    })
}
