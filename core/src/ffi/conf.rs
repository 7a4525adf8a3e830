//! acct_gather.conf keys through Slurm's parser, and their values for `scontrol show config`.
//!
//! Every key is registered as a string and validated in Rust, so that an error names the
//! key and the value instead of Slurm's generic parse failure.

use core::ffi::{c_char, c_int, c_void};
use std::ffi::CStr;

use slurm_sys::{
    S_P_STRING, config_key_pair_t, s_p_hashtbl_t, s_p_options_t, slurm_list_append,
    slurm_s_p_get_string, slurm_transfer_s_p_options, slurm_xcalloc, slurm_xfree, slurm_xstrdup,
    xlist,
};

use super::c_string;
use slurm_energy_logic::KeyValues;

/// Appends `keys` to Slurm's option table (`transfer_s_p_options` copies the entries and
/// duplicates the key strings, so ours only need to live for the call).
///
/// # Safety
/// `full_options` and `full_options_cnt` are the pointers Slurm passed to `conf_options`.
pub unsafe fn register(
    keys: &[&'static str],
    full_options: *mut *mut s_p_options_t,
    full_options_cnt: *mut c_int,
) {
    if full_options.is_null() || full_options_cnt.is_null() {
        return;
    }
    let names: Vec<_> = keys.iter().map(|k| c_string(k)).collect();
    let mut options: Vec<s_p_options_t> = names
        .iter()
        .map(|n| s_p_options_t::new(n.as_ptr(), S_P_STRING))
        .chain(std::iter::once(s_p_options_t::new(std::ptr::null(), 0)))
        .collect();
    // SAFETY: a NULL-key-terminated array of the release's s_p_options_t layout.
    unsafe { slurm_transfer_s_p_options(full_options, options.as_mut_ptr(), full_options_cnt) };
}

/// The values present in the parsed file. `tbl` is NULL when there is no acct_gather.conf.
///
/// # Safety
/// `tbl` is NULL or the table Slurm passed to `conf_set`.
pub unsafe fn values(keys: &[&'static str], tbl: *const s_p_hashtbl_t) -> KeyValues {
    let mut values = KeyValues::new();
    if tbl.is_null() {
        return values;
    }
    for &key in keys {
        let name = c_string(key);
        let mut value: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid table and key; on success Slurm hands us an xmalloc'd string.
        let found = unsafe { slurm_s_p_get_string(&mut value, name.as_ptr(), tbl) } != 0;
        if found && !value.is_null() {
            // SAFETY: NUL-terminated string from Slurm, freed with Slurm's allocator.
            unsafe {
                values.set(key, CStr::from_ptr(value).to_string_lossy().into_owned());
                slurm_xfree((&mut value as *mut *mut c_char).cast::<*mut c_void>());
            }
        }
    }
    values
}

/// Appends `key = value` pairs to the list `scontrol show config` prints.
///
/// # Safety
/// `data` is the pointer Slurm passed to `conf_values` (a `List *`).
pub unsafe fn show(data: *mut *mut xlist, pairs: &[(&'static str, String)]) {
    // SAFETY: checked for NULL before the read.
    if data.is_null() || unsafe { (*data).is_null() } {
        return;
    }
    // SAFETY: as above.
    let list = unsafe { *data };
    for (key, value) in pairs {
        let (key, value) = (c_string(key), c_string(value));
        // SAFETY: the list's destructor frees pairs, names and values with xfree, so all
        // three come from Slurm's allocator.
        unsafe {
            let pair = slurm_xcalloc(
                1,
                size_of::<config_key_pair_t>(),
                true,
                false,
                c"conf.rs".as_ptr(),
                line!() as c_int,
                c"show".as_ptr(),
            )
            .cast::<config_key_pair_t>();
            if pair.is_null() {
                return;
            }
            (*pair).name = slurm_xstrdup(key.as_ptr());
            (*pair).value = slurm_xstrdup(value.as_ptr());
            slurm_list_append(list, pair.cast());
        }
    }
}
