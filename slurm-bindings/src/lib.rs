//! Raw bindings for Slurm `acct_gather_energy` plugins.
//!
//! Public types come from bindgen over the installed `slurm/slurm.h` (see `build.rs`);
//! internal types Slurm does not install are mirrored by hand in [`internal`] and their
//! layout is asserted at compile time. Every function declared here is exported by
//! `libslurmfull` in every supported release: a Rust cdylib binds all its symbols when it
//! is `dlopen`ed, so one missing symbol in slurmctld, slurmd or slurmstepd would make the
//! plugin fail to load there. The slurmdb API declarations (`slurmdb_*`, `slurm_list_*`,
//! `slurm_init`) are for senergy, which links libslurm; the plugins never call them, and an
//! unused declaration binds no symbol.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

#[doc(hidden)]
mod bindings {
    #![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
    #![allow(
        clippy::all,
        clippy::undocumented_unsafe_blocks,
        unsafe_op_in_unsafe_fn
    )]
    use super::internal::xlist;
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
pub use bindings::*;

mod compat;
pub mod internal;

pub use compat::{
    EnergyFieldsExt, SHOW_DETAIL, load_job, running_in_slurmd, running_in_slurmstepd,
};
pub use internal::*;

pub const SLURM_SUCCESS: core::ffi::c_int = 0;
pub const SLURM_ERROR: core::ffi::c_int = -1;
