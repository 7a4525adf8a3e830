//! nvml.h's names that both NVML modules use: the GPUs' ([`super::nvml`]) and their MIG
//! instances' and GPM's ([`super::nvml_mig`]), which the first builds on.

use std::ffi::{c_int, c_void};

/// `NVML_SUCCESS`, the `nvmlReturn_t` of a call that worked.
pub(super) const NVML_SUCCESS: c_int = 0;

/// `nvmlDevice_t`: an opaque pointer.
pub(super) type NvmlDevice = *mut c_void;
