//! Samples for `--profile=energy` (HDF5/InfluxDB), as Slurm's rapl plugin sends them: a
//! dataset "Energy" with one field "Power" (watts).

use core::ffi::c_int;

use slurm_sys::{
    ACCT_GATHER_PROFILE_ENERGY, ACCT_GATHER_PROFILE_RUNNING, PROFILE_FIELD_UINT64,
    PROFILE_NO_PARENT, SLURM_ERROR, acct_gather_profile_dataset_t,
    acct_gather_profile_g_add_sample_data, acct_gather_profile_g_create_dataset,
    acct_gather_profile_g_get,
};

#[derive(Debug, Default)]
pub struct Profile {
    dataset: Option<c_int>,
}

impl Profile {
    pub const fn new() -> Self {
        Self { dataset: None }
    }

    pub fn send(&mut self, watts: u32, poll_time: i64) {
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
            let mut fields = [
                acct_gather_profile_dataset_t {
                    name: c"Power".as_ptr(),
                    type_: PROFILE_FIELD_UINT64,
                },
                acct_gather_profile_dataset_t {
                    name: std::ptr::null(),
                    type_: 0,
                },
            ];
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
        let mut sample: [u64; 1] = [u64::from(watts)];
        // SAFETY: one uint64 per declared field.
        unsafe {
            acct_gather_profile_g_add_sample_data(dataset, sample.as_mut_ptr().cast(), poll_time)
        };
    }
}
