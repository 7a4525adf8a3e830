//! Slurm's step record, as slurmstepd hands it at `ENERGY_DATA_STEP_PTR`: the step's user
//! and its GPUs, shards and MPS share on this node ([`Grant`]), read where Slurm's own
//! GRES plugins read them (the credential's lists, this node's part).
//!
//! `stepd_step_rec_t` and the GRES states are internal to Slurm: their offsets for the
//! release built against are in [`slurm_sys::STEP_RECORD`]. What is read is checked
//! before the rest is trusted: the record's job and step must be this slurmstepd's own
//! (its title, set by Slurm before the call), each list must carry `list_t`'s magic, each
//! GRES state must be this node's alone (one node), and a bitmap must be of a sane size.
//! Any mismatch gives no grant and an error naming the release: never a guess.
//!
//! Slurm's list and bitmap functions are looked up at run time, as every symbol not
//! declared in the public headers of every release.

use core::ffi::{c_char, c_int, c_void};
use std::ffi::CStr;
use std::sync::OnceLock;

use slurm_sys::{LIST_MAGIC, STEP_RECORD, StepRecordLayout};

use crate::attribution::grant::{Grant, GresHeld};
use crate::attribution::{StepId, own_step};

/// The GRES that say which GPUs a step holds.
const GPU_GRES: [&str; 3] = ["gpu", "shard", "mps"];

/// A bitmap larger than this is not a node's GRES.
const MAX_BITS: i64 = 65_536;

/// `gres_build_id()` (gres.c, the same in every release): the id of a GRES plugin by name.
fn gres_build_id(name: &str) -> u32 {
    let mut id: u32 = 0;
    let mut shift = 0;
    for byte in name.bytes() {
        // C's `char` is signed on x86-64; GRES names are ASCII
        id = id.wrapping_add(u32::from(byte) << shift);
        shift = (shift + 8) % 32;
    }
    id
}

type ListIteratorCreate = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type ListNext = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type ListIteratorDestroy = unsafe extern "C" fn(*mut c_void);
type BitSize = unsafe extern "C" fn(*const i64) -> i64;
type BitTest = unsafe extern "C" fn(*const i64, i64) -> c_int;

/// libslurmfull's functions this reading calls.
struct Api {
    iterator_create: ListIteratorCreate,
    next: ListNext,
    iterator_destroy: ListIteratorDestroy,
    bit_size: BitSize,
    bit_test: BitTest,
}

fn api() -> Option<&'static Api> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    API.get_or_init(|| {
        let find = |name: &CStr| {
            // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the daemon's.
            let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!f.is_null()).then_some(f)
        };
        // SAFETY: each symbol is libslurmfull's function of this signature in every
        // release (slurm.h's list API; bitstring.h's `slurm_bit_*`).
        unsafe {
            Some(Api {
                iterator_create: std::mem::transmute::<*mut c_void, ListIteratorCreate>(find(
                    c"slurm_list_iterator_create",
                )?),
                next: std::mem::transmute::<*mut c_void, ListNext>(find(c"slurm_list_next")?),
                iterator_destroy: std::mem::transmute::<*mut c_void, ListIteratorDestroy>(find(
                    c"slurm_list_iterator_destroy",
                )?),
                bit_size: std::mem::transmute::<*mut c_void, BitSize>(find(c"slurm_bit_size")?),
                bit_test: std::mem::transmute::<*mut c_void, BitTest>(find(c"slurm_bit_test")?),
            })
        }
    })
    .as_ref()
}

/// A field of type `T` at `offset` bytes into the struct at `base`.
///
/// # Safety
/// `base` points to a live struct that has a `T` at `offset`.
unsafe fn field<T: Copy>(base: *const c_void, offset: usize) -> T {
    // SAFETY: per the caller; read unaligned, as nothing here asserts alignment.
    unsafe { base.cast::<u8>().add(offset).cast::<T>().read_unaligned() }
}

/// Which of a GRES state's layouts: a job's or a step's.
#[derive(Clone, Copy)]
enum Level {
    Job,
    Step,
}

fn release() -> String {
    let v = slurm_sys::SLURM_VERSION_NUMBER;
    format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// What Slurm's step record at `step` grants this slurmstepd's step, or why it cannot be
/// read.
///
/// # Safety
/// `step` is NULL or the `stepd_step_rec_t *` slurmstepd passes at `ENERGY_DATA_STEP_PTR`,
/// of the release this plugin is built for (Slurm's loader refuses any other).
pub unsafe fn grant(step: *const c_void) -> Result<Grant, String> {
    if step.is_null() {
        return Err("no step record".into());
    }
    let api = api().ok_or("libslurmfull's list and bitmap functions are not found")?;
    let layout = STEP_RECORD;
    // SAFETY: the record's ids, at this release's offsets (checked against the title).
    let (job, step_id): (u32, u32) = unsafe {
        (
            field(step, layout.step_id + layout.step_id_job),
            field(step, layout.step_id + layout.step_id_step),
        )
    };
    let title = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let own = own_step(&String::from_utf8_lossy(&title).replace('\0', " "));
    if own != Some((job, StepId(step_id))) {
        return Err(format!(
            "Slurm's step record names step {job}.{step_id}, this slurmstepd is {own:?}: the \
             record is not laid out as in Slurm {} (the release built for)",
            release()
        ));
    }
    // SAFETY: the record's fields at this release's offsets, its ids having matched.
    let (uid, user, job_list, step_list) = unsafe {
        let user: *const c_char = field(step, layout.user_name);
        (
            field::<u32>(step, layout.uid),
            if user.is_null() {
                String::new()
            } else {
                CStr::from_ptr(user).to_string_lossy().into_owned()
            },
            field::<*mut c_void>(step, layout.job_gres_list),
            field::<*mut c_void>(step, layout.step_gres_list),
        )
    };
    // SAFETY: lists of the record, each checked for list_t's magic before it is walked.
    let mut gres = unsafe { held(api, &layout, step_list, Level::Step)? };
    // the batch, interactive and extern steps hold their job's GRES and Slurm gives them
    // no step list of their own; a step launched by srun holds only what its list says
    let whole_job = matches!(
        StepId(step_id),
        StepId::BATCH | StepId::INTERACTIVE | StepId::EXTERN
    );
    if gres.is_empty() && whole_job {
        // SAFETY: as above.
        gres = unsafe { held(api, &layout, job_list, Level::Job)? };
    }
    Ok(Grant {
        job,
        step: step_id,
        uid,
        user,
        gres,
    })
}

/// The GPU GRES a list of `gres_state_t` holds on this node.
///
/// # Safety
/// `list` is NULL or a `list_t *` of `gres_state_t` of this release, states of `level`.
unsafe fn held(
    api: &Api,
    layout: &StepRecordLayout,
    list: *mut c_void,
    level: Level,
) -> Result<Vec<GresHeld>, String> {
    if list.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: a list_t begins with its magic in every release.
    if unsafe { field::<u32>(list, 0) } != LIST_MAGIC {
        return Err(format!(
            "the step record's GRES list is not a Slurm list: the record is not laid out as \
             in Slurm {}",
            release()
        ));
    }
    let mut out = Vec::new();
    // SAFETY: a valid list (its magic checked); the iterator is destroyed below.
    let iterator = unsafe { (api.iterator_create)(list) };
    if iterator.is_null() {
        return Ok(out);
    }
    loop {
        // SAFETY: the iterator of this list, not yet destroyed.
        let state = unsafe { (api.next)(iterator) };
        if state.is_null() {
            break;
        }
        // SAFETY: an element of a GRES list is a gres_state_t of this release.
        let result = unsafe { gres_state(api, layout, state, level) };
        match result {
            Ok(Some(h)) => out.push(h),
            Ok(None) => {}
            Err(e) => {
                // SAFETY: the iterator of this list.
                unsafe { (api.iterator_destroy)(iterator) };
                return Err(e);
            }
        }
    }
    // SAFETY: the iterator of this list.
    unsafe { (api.iterator_destroy)(iterator) };
    Ok(out)
}

/// One `gres_state_t`, if of a GPU GRES.
///
/// # Safety
/// `state` is a live `gres_state_t *` of this release whose data is of `level`.
unsafe fn gres_state(
    api: &Api,
    layout: &StepRecordLayout,
    state: *mut c_void,
    level: Level,
) -> Result<Option<GresHeld>, String> {
    // SAFETY: per the caller.
    let (plugin_id, data): (u32, *mut c_void) = unsafe {
        (
            field(state, layout.gres_plugin_id),
            field(state, layout.gres_data),
        )
    };
    let Some(name) = GPU_GRES.iter().find(|n| gres_build_id(n) == plugin_id) else {
        return Ok(None);
    };
    if data.is_null() {
        return Ok(None);
    }
    let (node_cnt, bits, counts) = match level {
        Level::Job => (
            layout.job_node_cnt,
            layout.job_bit_alloc,
            layout.job_cnt_node_alloc,
        ),
        Level::Step => (
            layout.step_node_cnt,
            layout.step_bit_alloc,
            layout.step_cnt_node_alloc,
        ),
    };
    // SAFETY: the state's data at this release's offsets.
    let (nodes, bit_alloc, cnt_alloc): (u32, *const *const i64, *const u64) = unsafe {
        (
            field(data, node_cnt),
            field(data, bits),
            field(data, counts),
        )
    };
    // slurmstepd keeps this node's part of the credential's lists: one node
    if nodes != 1 {
        return Err(format!(
            "the step record's {name} GRES covers {nodes} nodes, not this node alone: the \
             record is not laid out as in Slurm {}",
            release()
        ));
    }
    let count = if cnt_alloc.is_null() {
        0
    } else {
        // SAFETY: a per-node array of one element.
        unsafe { *cnt_alloc }
    };
    let bitmap = if bit_alloc.is_null() {
        std::ptr::null()
    } else {
        // SAFETY: a per-node array of one element.
        unsafe { *bit_alloc }
    };
    let mut indexes = Vec::new();
    if !bitmap.is_null() {
        // SAFETY: a Slurm bitmap.
        let size = unsafe { (api.bit_size)(bitmap) };
        if !(0..=MAX_BITS).contains(&size) {
            return Err(format!(
                "the step record's {name} bitmap has {size} bits: the record is not laid out \
                 as in Slurm {}",
                release()
            ));
        }
        for bit in 0..size {
            // SAFETY: a bit within the bitmap's size.
            if unsafe { (api.bit_test)(bitmap, bit) } != 0 {
                indexes.push(bit as u32);
            }
        }
    }
    Ok(Some(GresHeld {
        name: (*name).to_string(),
        count,
        indexes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids Slurm's `gres_build_id()` gives (computed with Slurm's own C function).
    #[test]
    fn gres_ids_are_slurms() {
        assert_eq!(gres_build_id("gpu"), 7696487);
        assert_eq!(gres_build_id("shard"), 1_918_986_455);
        assert_eq!(gres_build_id("mps"), 7565421);
    }
}
