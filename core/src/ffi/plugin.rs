//! Slurm's calls into one plugin: pointers in, [`Runtime`] calls, pointers out.

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Mutex, PoisonError};

use slurm_sys::{
    SLURM_ERROR, SLURM_SUCCESS, acct_energy_type, acct_gather_energy_t, libc_time_t, s_p_hashtbl_t,
    s_p_options_t, xlist,
};

use super::host::SlurmHost;
use super::log::SlurmLogger;
use super::profile::Profile;
use super::{conf, energy};
use slurm_energy_logic::Plugin;
use slurm_energy_logic::guard;
use slurm_energy_logic::{Answer, Query, Runtime, Update};

/// One plugin as exported to Slurm: what its symbols call.
pub struct Exported<P: Plugin> {
    logger: SlurmLogger,
    runtime: Runtime<P, SlurmHost>,
    profile: Mutex<Profile>,
    /// The last `SENSOR_CNT` answer, by which Slurm sizes the arrays it passes with
    /// `STRUCT` and `JOULES_TASK` (0: never asked, so no more than one record is written).
    sized_for: AtomicU16,
}

fn status<T, E>(result: Result<T, E>) -> c_int {
    if result.is_ok() {
        SLURM_SUCCESS
    } else {
        SLURM_ERROR
    }
}

fn query(data_type: u32) -> Option<Query> {
    Some(match data_type {
        acct_energy_type::ENERGY_DATA_JOULES_TASK => Query::JoulesTask,
        acct_energy_type::ENERGY_DATA_NODE_ENERGY => Query::NodeEnergy,
        acct_energy_type::ENERGY_DATA_NODE_ENERGY_UP => Query::NodeEnergyUp,
        acct_energy_type::ENERGY_DATA_STRUCT => Query::Struct,
        acct_energy_type::ENERGY_DATA_LAST_POLL => Query::LastPoll,
        acct_energy_type::ENERGY_DATA_SENSOR_CNT => Query::SensorCount,
        _ => return None,
    })
}

/// What `set_data` tells with `data_type`; `data` is never dereferenced here.
fn update(data_type: u32, data: *mut c_void) -> Option<Update> {
    Some(match data_type {
        acct_energy_type::ENERGY_DATA_RECONFIG => Update::Reconfig,
        // slurmstepd's stepd_step_rec_t, read by its address without dereferencing it
        acct_energy_type::ENERGY_DATA_STEP_PTR => Update::StepRecord(data as usize),
        acct_energy_type::ENERGY_DATA_PROFILE => Update::Profile,
        _ => return None,
    })
}

impl<P: Plugin> Exported<P> {
    pub const fn new(plugin_type: &'static str) -> Self {
        Self {
            logger: SlurmLogger::new(plugin_type),
            runtime: Runtime::new(SlurmHost { plugin_type }),
            profile: Mutex::new(Profile::new()),
            sized_for: AtomicU16::new(0),
        }
    }

    pub fn init(&'static self) -> c_int {
        self.logger.install();
        slurm_energy_logic::on_abandon(super::location::keep_mapped);
        status(
            self.runtime
                .init(super::location::plugin_directory().as_deref()),
        )
    }

    pub fn fini(&self) -> c_int {
        status(self.runtime.fini())
    }

    pub fn update_node_energy(&self) -> c_int {
        status(self.runtime.update_node_energy())
    }

    /// # Safety
    /// `data` is what Slurm passes for `data_type` (slurm-abi.md §2.1).
    pub unsafe fn get_data(&self, data_type: u32, data: *mut c_void) -> c_int {
        if data.is_null() {
            return SLURM_ERROR;
        }
        let Some(query) = query(data_type) else {
            log::error!("get_data: unknown data type {data_type}");
            return SLURM_ERROR;
        };
        match self.runtime.get(query) {
            Ok(Answer::Record(record)) => {
                // SAFETY: these types pass one acct_gather_energy_t of this release's layout.
                let dst = unsafe { &mut *data.cast::<acct_gather_energy_t>() };
                energy::write(dst, &record)
            }
            Ok(Answer::Records(records)) => {
                let array = data.cast::<acct_gather_energy_t>();
                // the meter's records now may outnumber what Slurm was told (a reconfigure
                // between its SENSOR_CNT and this call): never more than the array holds
                let room = usize::from(self.sized_for.load(Ordering::SeqCst).max(1));
                for (i, record) in records.iter().take(room).enumerate() {
                    // SAFETY: STRUCT and JOULES_TASK pass an array that Slurm sized by our
                    // last SENSOR_CNT answer, `room` records (at least one).
                    energy::write(unsafe { &mut *array.add(i) }, record);
                }
            }
            // SAFETY: LAST_POLL passes a time_t.
            Ok(Answer::PollTime(t)) => unsafe { *data.cast::<libc_time_t>() = t },
            Ok(Answer::SensorCount(n)) => {
                self.sized_for.store(n, Ordering::SeqCst);
                // SAFETY: SENSOR_CNT passes a uint16_t.
                unsafe { *data.cast::<u16>() = n }
            }
            Err(_) => return SLURM_ERROR,
        }
        SLURM_SUCCESS
    }

    /// # Safety
    /// `data` is what Slurm passes for `data_type` (slurm-abi.md §2.1).
    pub unsafe fn set_data(&self, data_type: u32, data: *mut c_void) -> c_int {
        let Some(update) = update(data_type, data) else {
            log::error!("set_data: unknown data type {data_type}");
            return SLURM_ERROR;
        };
        match self.runtime.set(update) {
            Ok(Some(sample)) => guard("set_data", SLURM_ERROR, || {
                self.profile
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .send(sample.watts, &sample.parts, sample.poll_time);
                SLURM_SUCCESS
            }),
            Ok(None) => SLURM_SUCCESS,
            Err(_) => SLURM_ERROR,
        }
    }

    /// # Safety
    /// The pointers Slurm passes to `conf_options`.
    pub unsafe fn conf_options(&self, full: *mut *mut s_p_options_t, count: *mut c_int) {
        // SAFETY: forwarded from Slurm.
        guard("conf_options", (), || unsafe {
            conf::register(&slurm_energy_logic::family_keys(), full, count)
        });
    }

    /// # Safety
    /// `tbl` is NULL or the parsed acct_gather.conf Slurm passes to `conf_set`.
    pub unsafe fn conf_set(&self, context_id: c_int, tbl: *const s_p_hashtbl_t) {
        let values = guard("conf_set", None, || {
            // SAFETY: forwarded from Slurm.
            Some(unsafe { conf::values(&slurm_energy_logic::family_keys(), tbl) })
        });
        if let Some(values) = values {
            let _ = self
                .runtime
                .configure(u16::try_from(context_id).unwrap_or(0), &values);
        }
    }

    /// # Safety
    /// `data` is the `List *` Slurm passes to `conf_values`.
    pub unsafe fn conf_values(&self, data: *mut *mut xlist) {
        if let Ok(shown) = self.runtime.shown_config() {
            // SAFETY: forwarded from Slurm.
            guard("conf_values", (), || unsafe { conf::show(data, &shown) });
        }
    }
}
