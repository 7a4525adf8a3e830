//! Hand mirrors of Slurm types and functions that are not in the installed public headers.
//!
//! Each item names the Slurm source file it mirrors. Layouts that changed between releases
//! are selected by the cfgs `build.rs` derives from `SLURM_VERSION_NUMBER`. CI checks every
//! value here that Slurm's headers define (offsets, sizes, enum values, magics) against the
//! headers of each release it builds: `ci/slurm-layout.sh` measures them, the example
//! `step-record-layout` compares (docs/testing.md, "Slurm's internal layouts").

use core::ffi::{c_char, c_int, c_void};

/// `NO_VAL`/`NO_VAL64` (`slurm/slurm.h`): "no value". bindgen types the 64-bit macro as
/// `i32` (-2), so both are spelled here with the types of the fields they fill.
pub const NO_VAL: u32 = 0xffff_fffe;
pub const NO_VAL64: u64 = 0xffff_ffff_ffff_fffe;

/// `slurm_parser_enum_t` (`src/common/parse_config.h`), unchanged 22.05 -> master.
pub const S_P_STRING: c_int = 1;

/// `log_level_t` (`src/common/log.h`), unchanged 22.05 -> master.
pub mod log_level {
    use core::ffi::c_int;
    pub const ERROR: c_int = 2;
    pub const INFO: c_int = 3;
    pub const VERBOSE: c_int = 4;
    pub const DEBUG: c_int = 5;
    pub const DEBUG2: c_int = 6;
}

/// Daemon bits of `slurm_daemon` and `run_in_daemon()` (`src/common/run_in_daemon.h`),
/// the same from 25.05 (where they appear) to 26.05.
pub mod daemon_bit {
    pub const SLURMCTLD: u32 = 1 << 3;
    pub const SLURMD: u32 = 1 << 4;
    pub const SLURMSTEPD: u32 = 1 << 5;
}

/// `ACCT_GATHER_PROFILE_ENERGY` (`slurm/slurm.h`), bit 1 of the profile mask in every
/// release. Mirrored by hand: from 23.02 the header spells it `SLURM_BIT(1)`, a
/// function-like macro bindgen does not evaluate.
pub const ACCT_GATHER_PROFILE_ENERGY: u32 = 1 << 1;
/// `enum acct_gather_profile_info` value `ACCT_GATHER_PROFILE_RUNNING`.
pub const ACCT_GATHER_PROFILE_RUNNING: c_int = 2;
/// `acct_gather_profile_field_type_t` value `PROFILE_FIELD_UINT64`.
pub const PROFILE_FIELD_UINT64: c_int = 1;
/// `NO_PARENT` for `acct_gather_profile_g_create_dataset`.
pub const PROFILE_NO_PARENT: i64 = -1;

/// `s_p_options_t` (`src/common/parse_config.h`): 40 bytes in 22.05, 56 from 23.02.
/// Only `key` and `type_` are ever set by the plugins; the rest stay NULL.
#[repr(C)]
pub struct s_p_options_t {
    pub key: *const c_char,
    pub type_: c_int,
    pub handler: *mut c_void,
    pub destroy: *mut c_void,
    pub line_options: *mut c_void,
    #[cfg(slurm_sp_options_pack)]
    pub pack: *mut c_void,
    #[cfg(slurm_sp_options_pack)]
    pub unpack: *mut c_void,
}

#[cfg(not(slurm_sp_options_pack))]
const _: () = assert!(core::mem::size_of::<s_p_options_t>() == 40);
#[cfg(slurm_sp_options_pack)]
const _: () = assert!(core::mem::size_of::<s_p_options_t>() == 56);
const _: () = assert!(core::mem::offset_of!(s_p_options_t, type_) == 8);

impl s_p_options_t {
    /// An option entry; `key == NULL` terminates an array.
    pub const fn new(key: *const c_char, type_: c_int) -> Self {
        Self {
            key,
            type_,
            handler: core::ptr::null_mut(),
            destroy: core::ptr::null_mut(),
            line_options: core::ptr::null_mut(),
            #[cfg(slurm_sp_options_pack)]
            pack: core::ptr::null_mut(),
            #[cfg(slurm_sp_options_pack)]
            unpack: core::ptr::null_mut(),
        }
    }
}

/// Opaque `s_p_hashtbl_t`.
#[repr(C)]
pub struct s_p_hashtbl_t {
    _private: [u8; 0],
}

/// Opaque `struct xlist` (`List` up to 24.05, `list_t` from 24.11: same ABI).
#[repr(C)]
pub struct xlist {
    _private: [u8; 0],
}

/// `config_key_pair_t` (`src/common/read_config.h`), unchanged 22.05 -> master.
#[repr(C)]
pub struct config_key_pair_t {
    pub name: *mut c_char,
    pub value: *mut c_char,
}
const _: () = assert!(core::mem::size_of::<config_key_pair_t>() == 16);
const _: () = assert!(core::mem::offset_of!(config_key_pair_t, value) == 8);

/// `acct_gather_profile_dataset_t` (`acct_gather_profile.h`), unchanged 22.05 -> master.
#[repr(C)]
pub struct acct_gather_profile_dataset_t {
    pub name: *const c_char,
    pub type_: c_int,
}
const _: () = assert!(core::mem::size_of::<acct_gather_profile_dataset_t>() == 16);
const _: () = assert!(core::mem::offset_of!(acct_gather_profile_dataset_t, type_) == 8);

unsafe extern "C" {
    pub fn slurm_xcalloc(
        count: usize,
        size: usize,
        clear: bool,
        try_: bool,
        file: *const c_char,
        line: c_int,
        func: *const c_char,
    ) -> *mut c_void;
    pub fn slurm_xfree(ptr: *mut *mut c_void);
    pub fn slurm_xstrdup(s: *const c_char) -> *mut c_char;
    /// Returns `void *` up to 24.05 and `void` from 24.11; declared without a result,
    /// which is right for both.
    pub fn slurm_list_append(list: *mut xlist, item: *mut c_void);

    pub fn slurm_log_var(level: c_int, fmt: *const c_char, ...);
    pub fn slurm_error(fmt: *const c_char, ...) -> c_int;
    pub fn slurm_get_log_level() -> c_int;

    /// Up to 24.11 (`src/common/run_in_daemon.c`); from 25.05 these are macros over
    /// `slurm_run_in_daemon`, and libslurmfull exports neither.
    #[cfg(not(slurm_run_in_daemon_mask))]
    pub fn slurm_running_in_slurmd() -> bool;
    #[cfg(not(slurm_run_in_daemon_mask))]
    pub fn slurm_running_in_slurmstepd() -> bool;
    /// From 25.05: true if this process is one of the daemons in the `IS_*` mask (each
    /// daemon defines `slurm_daemon`). Up to 24.11 the same symbol takes three pointers.
    #[cfg(slurm_run_in_daemon_mask)]
    pub fn slurm_run_in_daemon(daemons: u32) -> bool;

    pub fn slurm_transfer_s_p_options(
        full_options: *mut *mut s_p_options_t,
        options: *mut s_p_options_t,
        full_options_cnt: *mut c_int,
    );
    pub fn slurm_s_p_get_string(
        value: *mut *mut c_char,
        key: *const c_char,
        tbl: *const s_p_hashtbl_t,
    ) -> c_int;

    /// Frees the records `slurm_get_node_energy` allocated (`acct_gather_energy.h`,
    /// under src/common before 23.02, src/interfaces after).
    pub fn acct_gather_energy_destroy(energy: *mut crate::acct_gather_energy_t);

    pub fn acct_gather_profile_g_get(info_type: c_int, data: *mut c_void) -> c_int;
    pub fn acct_gather_profile_g_create_dataset(
        name: *const c_char,
        parent: i64,
        dataset: *mut acct_gather_profile_dataset_t,
    ) -> c_int;
    pub fn acct_gather_profile_g_add_sample_data(
        dataset_id: c_int,
        data: *mut c_void,
        sample_time: libc_time_t,
    ) -> c_int;
}

/// `time_t` on the LP64 Linux targets Slurm supports.
pub type libc_time_t = i64;

/// Where slurmstepd's step record (`stepd_step_rec_t`, `src/slurmd/slurmstepd/slurmstepd_job.h`)
/// and the GRES states it points to (`gres_state_t`, `gres_job_state_t`,
/// `gres_step_state_t`: `src/common/gres.h` in 22.05, `src/interfaces/gres.h` from 23.02)
/// keep what slurmstepd hands the plugin at `ENERGY_DATA_STEP_PTR`: byte offsets on 64-bit
/// Linux, measured with `offsetof` over each release's own headers ([`MEASURED_RELEASES`]).
/// None of these structs holds a field under `#if`, so a release's layout is its headers'.
/// A release of a series never measured has no layout ([`step_record_layout`]): its record
/// is not read at all. Whoever reads through a layout still checks what it reads (the
/// step's ids, its user, the lists' and bitmaps' magic), through reads that cannot fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepRecordLayout {
    /// `stepd_step_rec_t.step_id`, a `slurm_step_id_t`.
    pub step_id: usize,
    /// `slurm_step_id_t.job_id` and `.step_id` within it (24.11 put a 64-bit SLUID first).
    pub step_id_job: usize,
    pub step_id_step: usize,
    /// `stepd_step_rec_t.uid` (`uid_t`) and `.user_name` (`char *`).
    pub uid: usize,
    pub user_name: usize,
    /// `stepd_step_rec_t.job_gres_list` and `.step_gres_list` (`list_t *` of `gres_state_t`,
    /// this node's part of the credential's lists: `get_cred_gres()`).
    pub job_gres_list: usize,
    pub step_gres_list: usize,
    /// `gres_state_t.plugin_id` (`uint32_t`, `gres_build_id(name)`) and `.gres_data`.
    pub gres_plugin_id: usize,
    pub gres_data: usize,
    /// `gres_job_state_t`: `node_cnt` (`uint32_t`), `gres_bit_alloc` (`bitstr_t **`, one
    /// bitmap of GRES indexes per node), `gres_cnt_node_alloc` (`uint64_t *`, per node).
    pub job_node_cnt: usize,
    pub job_bit_alloc: usize,
    pub job_cnt_node_alloc: usize,
    /// The same three in `gres_step_state_t`.
    pub step_node_cnt: usize,
    pub step_bit_alloc: usize,
    pub step_cnt_node_alloc: usize,
}

/// `LIST_MAGIC` (`src/common/list.c`), the first field of every `list_t` in every release.
pub const LIST_MAGIC: u32 = 0xDEAD_BEEF;
/// `list_t.head` (`struct listNode *`), at 8 in every release: after the 32-bit magic and
/// padding up to 24.05, after the magic and the 32-bit count from 25.05.
pub const LIST_HEAD: usize = 8;
/// `struct listNode`, the same in every release: `void *data` at 0, `next` at 8.
pub const LIST_NODE_DATA: usize = 0;
pub const LIST_NODE_NEXT: usize = 8;

/// `bitstr_t` (`src/common/bitstring.[ch]`), the same in every release on 64-bit
/// little-endian Linux: 64-bit words, the first `BITSTR_MAGIC` (set by every `bit_alloc`),
/// the second the number of bits, then the bits, bit `b` at `1 << (b % 64)` of word
/// `2 + b / 64`.
pub const BITSTR_MAGIC: i64 = 0x4243_4445;
pub const BITSTR_OVERHEAD: usize = 2;

/// The step record's layout of each measured release, each entry the line
/// `ci/slurm-layout.sh --rust SOURCE` printed for that release's source: measured with
/// `offsetof` over its configured headers, not written by hand. Adding a release is
/// running that script once over its tarball or tree and pasting its line here, in order;
/// CI (ci/test.sh) measures every release it builds and fails where its headers and this
/// table disagree (the example `step-record-layout`, docs/testing.md).
#[rustfmt::skip]
const MEASURED_LAYOUTS: [(u32, StepRecordLayout); 8] = [
    (0x16_05_08, StepRecordLayout { step_id: 112, step_id_job: 0, step_id_step: 8, uid: 352, user_name: 360, job_gres_list: 648, step_gres_list: 656, gres_plugin_id: 4, gres_data: 8, job_node_cnt: 112, job_bit_alloc: 120, job_cnt_node_alloc: 128, step_node_cnt: 96, step_bit_alloc: 112, step_cnt_node_alloc: 88 }), // 22.05.8
    (0x17_02_07, StepRecordLayout { step_id: 112, step_id_job: 0, step_id_step: 8, uid: 352, user_name: 360, job_gres_list: 736, step_gres_list: 744, gres_plugin_id: 4, gres_data: 8, job_node_cnt: 112, job_bit_alloc: 120, job_cnt_node_alloc: 128, step_node_cnt: 96, step_bit_alloc: 112, step_cnt_node_alloc: 88 }), // 23.02.7
    (0x17_0B_04, StepRecordLayout { step_id: 112, step_id_job: 0, step_id_step: 8, uid: 368, user_name: 376, job_gres_list: 752, step_gres_list: 760, gres_plugin_id: 4, gres_data: 8, job_node_cnt: 120, job_bit_alloc: 128, job_cnt_node_alloc: 136, step_node_cnt: 96, step_bit_alloc: 112, step_cnt_node_alloc: 88 }), // 23.11.4
    (0x18_05_08, StepRecordLayout { step_id: 112, step_id_job: 0, step_id_step: 8, uid: 368, user_name: 376, job_gres_list: 752, step_gres_list: 760, gres_plugin_id: 4, gres_data: 8, job_node_cnt: 136, job_bit_alloc: 144, job_cnt_node_alloc: 152, step_node_cnt: 96, step_bit_alloc: 112, step_cnt_node_alloc: 88 }), // 24.05.8
    (0x18_0B_05, StepRecordLayout { step_id: 112, step_id_job: 8, step_id_step: 16, uid: 376, user_name: 384, job_gres_list: 760, step_gres_list: 768, gres_plugin_id: 4, gres_data: 8, job_node_cnt: 136, job_bit_alloc: 144, job_cnt_node_alloc: 152, step_node_cnt: 96, step_bit_alloc: 112, step_cnt_node_alloc: 88 }), // 24.11.5
    (0x19_05_08, StepRecordLayout { step_id: 112, step_id_job: 8, step_id_step: 16, uid: 384, user_name: 392, job_gres_list: 768, step_gres_list: 776, gres_plugin_id: 4, gres_data: 8, job_node_cnt: 136, job_bit_alloc: 144, job_cnt_node_alloc: 152, step_node_cnt: 96, step_bit_alloc: 112, step_cnt_node_alloc: 88 }), // 25.05.8
    (0x19_0B_07, StepRecordLayout { step_id: 112, step_id_job: 8, step_id_step: 16, uid: 384, user_name: 392, job_gres_list: 768, step_gres_list: 776, gres_plugin_id: 4, gres_data: 8, job_node_cnt: 136, job_bit_alloc: 144, job_cnt_node_alloc: 152, step_node_cnt: 96, step_bit_alloc: 112, step_cnt_node_alloc: 88 }), // 25.11.7
    (0x1A_05_03, StepRecordLayout { step_id: 112, step_id_job: 8, step_id_step: 16, uid: 384, user_name: 392, job_gres_list: 768, step_gres_list: 776, gres_plugin_id: 4, gres_data: 8, job_node_cnt: 136, job_bit_alloc: 144, job_cnt_node_alloc: 152, step_node_cnt: 96, step_bit_alloc: 112, step_cnt_node_alloc: 88 }), // 26.05.3
];

/// The releases whose step-record layout was measured with `offsetof` over their own
/// headers (`MEASURED_LAYOUTS`). A release of the same series (major and minor: 23.02.x)
/// shares its layout: Slurm changes these internal structs at major releases, and what the
/// plugin reads through it is checked before it is trusted. A release of any other series
/// is not guessed from its neighbours.
pub const MEASURED_RELEASES: [u32; MEASURED_LAYOUTS.len()] = {
    let mut releases = [0; MEASURED_LAYOUTS.len()];
    let mut i = 0;
    while i < releases.len() {
        releases[i] = MEASURED_LAYOUTS[i].0;
        i += 1;
    }
    releases
};

/// The measured release of `version`'s series, if any.
pub const fn measured_release(version: u32) -> Option<u32> {
    match measured_entry(version) {
        Some((release, _)) => Some(release),
        None => None,
    }
}

/// The step record's layout in `version` (a `SLURM_VERSION_NUMBER`), if its series was
/// measured; `None` otherwise: no nearest guess.
pub const fn step_record_layout(version: u32) -> Option<StepRecordLayout> {
    match measured_entry(version) {
        Some((_, layout)) => Some(layout),
        None => None,
    }
}

const fn measured_entry(version: u32) -> Option<(u32, StepRecordLayout)> {
    let mut i = 0;
    while i < MEASURED_LAYOUTS.len() {
        if MEASURED_LAYOUTS[i].0 >> 8 == version >> 8 {
            return Some(MEASURED_LAYOUTS[i]);
        }
        i += 1;
    }
    None
}

/// The layout of the release being built for, if its series was measured.
pub const STEP_RECORD: Option<StepRecordLayout> = step_record_layout(crate::SLURM_VERSION_NUMBER);

#[cfg(test)]
mod tests {
    use super::*;

    /// A release of a measured series has that series' layout; one of a series never
    /// measured (26.11, the next after the table; 21.08 before it; a 24.11 "x.y" that
    /// never was) has none, where the nearest measured layout used to be taken.
    #[test]
    fn only_a_measured_series_has_a_step_record_layout() {
        let measured = |v| step_record_layout(v).map(|l| (l.user_name, l.step_gres_list));
        assert_eq!(measured(0x16_05_08), Some((360, 656)));
        assert_eq!(measured(0x17_02_08), Some((360, 744)));
        assert_eq!(measured(0x18_0B_00), Some((384, 768)));
        assert_eq!(measured(0x1A_05_00), Some((392, 776)));
        for unmeasured in [0x1A_0B_00, 0x1B_05_00, 0x15_08_06, 0x18_0C_01] {
            assert_eq!(step_record_layout(unmeasured), None, "{unmeasured:#x}");
        }
        assert_eq!(measured_release(0x17_0B_0B), Some(0x17_0B_04));
    }
}
