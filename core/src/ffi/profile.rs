//! Samples for `--profile=energy` (HDF5/InfluxDB), as Slurm's rapl plugin sends them: a
//! dataset "Energy" with a field "Power" (the node's watts), and, as Slurm's ipmi plugin
//! names its sensors, one `"<label>Power"` per part of the node the source measures.

use core::ffi::c_int;
use std::ffi::CString;

use slurm_sys::{
    ACCT_GATHER_PROFILE_ENERGY, ACCT_GATHER_PROFILE_RUNNING, PROFILE_FIELD_UINT64,
    PROFILE_NO_PARENT, SLURM_ERROR, acct_gather_profile_dataset_t,
    acct_gather_profile_g_add_sample_data, acct_gather_profile_g_create_dataset,
    acct_gather_profile_g_get,
};

use slurm_energy_logic::EnergyRecord;

#[derive(Debug, Default)]
pub struct Profile {
    dataset: Option<c_int>,
}

impl Profile {
    pub const fn new() -> Self {
        Self { dataset: None }
    }

    /// `parts`: the node's parts, always the same list (fixed at the first reading); one
    /// that is unavailable now reports 0 W, as Slurm's plugins do.
    pub fn send(&mut self, watts: u32, parts: &[(&'static str, EnergyRecord)], poll_time: i64) {
        let mut running: u32 = 0;
        // SAFETY: RUNNING fills a uint32_t.
        unsafe {
            acct_gather_profile_g_get(
                ACCT_GATHER_PROFILE_RUNNING,
                (&mut running as *mut u32).cast(),
            )
        };
        if running & ACCT_GATHER_PROFILE_ENERGY == 0 {
            return;
        }
        let dataset = *self.dataset.get_or_insert_with(|| {
            let names: Vec<CString> = std::iter::once("Power".to_string())
                .chain(parts.iter().map(|(label, _)| format!("{label}Power")))
                .map(|n| super::c_string(&n))
                .collect();
            let mut fields: Vec<acct_gather_profile_dataset_t> = names
                .iter()
                .map(|name| acct_gather_profile_dataset_t {
                    name: name.as_ptr(),
                    type_: PROFILE_FIELD_UINT64,
                })
                .chain(std::iter::once(acct_gather_profile_dataset_t {
                    name: std::ptr::null(),
                    type_: 0,
                }))
                .collect();
            // SAFETY: a NULL-name-terminated field list, copied by the profile plugin.
            let id = unsafe {
                acct_gather_profile_g_create_dataset(
                    c"Energy".as_ptr(),
                    PROFILE_NO_PARENT,
                    fields.as_mut_ptr(),
                )
            };
            if id == SLURM_ERROR {
                log::error!("cannot create the energy profile dataset; no profile samples");
            }
            id
        });
        if dataset == SLURM_ERROR {
            return;
        }
        let mut sample: Vec<u64> = std::iter::once(u64::from(watts))
            .chain(
                parts
                    .iter()
                    .map(|(_, p)| u64::from(p.current_watts.unwrap_or(0))),
            )
            .collect();
        // SAFETY: one uint64 per declared field.
        unsafe {
            acct_gather_profile_g_add_sample_data(dataset, sample.as_mut_ptr().cast(), poll_time)
        };
    }
}
