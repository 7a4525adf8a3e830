//! One plugin's state in one process, and what each Slurm call does with it.

use core::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use slurm_sys::{
    SLURM_ERROR, SLURM_SUCCESS, acct_energy_type, acct_gather_energy_t, libc_time_t, s_p_hashtbl_t,
    s_p_options_t, xlist,
};

use super::guard::guard;
use super::log::SlurmLogger;
use super::profile::Profile;
use super::slurmd_node::SlurmdNode;
use super::{conf, daemon, energy};
use crate::accounting::{Baseline, EnergyRecord};
use crate::meter::{Meter, Metering};
use crate::source::{EnergyReader, EnergySource};

/// How fresh a figure must be.
#[derive(Clone, Copy)]
enum Read {
    /// Read the hardware now: a step's figure at its last poll is its final energy.
    Now,
    /// The sampler's reading if it is less than a period old (it always is, unless the
    /// sampler could not start): node figures for slurmctld, at no cost per poll.
    Recent,
    /// The latest reading, whatever its age.
    Cached,
}

pub struct Plugin<S: EnergySource> {
    logger: SlurmLogger,
    state: Mutex<Option<State<S>>>,
}

enum Config<C> {
    /// conf_set has not run yet: defaults apply.
    Unset,
    Valid(C),
    /// The error was logged; the plugin reports no energy.
    Invalid,
}

enum Hardware {
    NotOpened,
    /// Not measured in this process (slurmctld), or the reason was logged once.
    Unavailable,
    Open(Box<dyn Metering>),
}

struct State<S: EnergySource> {
    config: Config<S::Config>,
    /// This plugin's index among stacked energy plugins, for asking slurmd.
    context_id: u16,
    hardware: Hardware,
    /// This process's step (one slurmstepd runs one step): energy since the process
    /// started measuring. Kept here rather than in the caller's struct, so stacked plugins
    /// and task exits cannot reset it.
    step: Option<Baseline>,
    profile: Profile,
}

impl<S: EnergySource> State<S> {
    fn new() -> Self {
        Self {
            config: Config::Unset,
            context_id: 0,
            hardware: Hardware::NotOpened,
            step: None,
            profile: Profile::default(),
        }
    }

    fn open(&mut self) {
        if !daemon::measures_here() {
            self.hardware = Hardware::Unavailable;
            return;
        }
        let config = match &self.config {
            Config::Valid(c) => c.clone(),
            Config::Unset => S::Config::default(),
            Config::Invalid => {
                self.hardware = Hardware::Unavailable;
                return;
            }
        };
        let meter = if S::FROM_SLURMD_IN_STEPS && daemon::in_slurmstepd() {
            SlurmdNode::start(self.context_id).map(metered)
        } else {
            S::open(&config).map(metered)
        };
        self.hardware = match meter {
            Ok(mut meter) => {
                // Threads may start here: slurmd loads this configuration after it
                // daemonizes, and slurmstepd never forks without exec afterwards.
                meter.ensure_sampling();
                Hardware::Open(meter)
            }
            Err(why) => {
                log::error!(
                    "no energy can be measured on this node: {why}; energy is reported as unavailable"
                );
                Hardware::Unavailable
            }
        };
    }

    /// The meter, opened on first use, with its sampler running.
    fn meter(&mut self) -> Option<&mut Box<dyn Metering>> {
        if matches!(self.hardware, Hardware::NotOpened) {
            self.open();
        }
        match &mut self.hardware {
            Hardware::Open(meter) => {
                meter.ensure_sampling();
                Some(meter)
            }
            _ => None,
        }
    }

    /// The node's record, from a reading as fresh as `read` asks.
    fn node_record(&mut self, read: Read) -> EnergyRecord {
        match self.meter() {
            Some(meter) => {
                let accounting = match read {
                    Read::Now => meter.refresh(),
                    Read::Recent => meter.recent(),
                    Read::Cached => meter.snapshot(),
                };
                accounting.node_record(Instant::now(), meter.stale_after())
            }
            None => EnergyRecord::unavailable(0),
        }
    }

    fn step_record(&mut self) -> EnergyRecord {
        let Some(meter) = self.meter() else {
            return EnergyRecord::unavailable(0);
        };
        let accounting = meter.refresh();
        let (now, stale) = (Instant::now(), meter.stale_after());
        if self.step.is_none() {
            self.step = Baseline::start(&accounting);
        }
        match &mut self.step {
            Some(step) => step.record(&accounting, now, stale),
            None => accounting.node_record(now, stale),
        }
    }

    /// The records of the node's parts (pm_counters' cpu, memory, accelN) that follow the
    /// node's in SENSOR_CNT, STRUCT and JOULES_TASK. Their number is fixed by the meter's
    /// first reading, taken when it opens, so SENSOR_CNT and the array it sizes agree.
    fn sensor_records(&mut self) -> Vec<(&'static str, EnergyRecord)> {
        match self.meter() {
            Some(meter) => meter
                .snapshot()
                .sensor_records(Instant::now(), meter.stale_after()),
            None => Vec::new(),
        }
    }

    fn shown_config(&self) -> Vec<(&'static str, String)> {
        match &self.config {
            Config::Valid(c) => S::show_config(c),
            Config::Unset => S::show_config(&S::Config::default()),
            Config::Invalid => S::KEYS
                .iter()
                .map(|&k| (k, "(invalid, see the log)".to_string()))
                .collect(),
        }
    }
}

/// Logs what will be measured, and wraps the reader in a meter.
fn metered<R: EnergyReader>(reader: R) -> Box<dyn Metering> {
    log::info!("measuring {}", reader.describe());
    Box::new(Meter::new(reader))
}

impl<S: EnergySource> Plugin<S> {
    pub const fn new(plugin_type: &'static str) -> Self {
        Self {
            logger: SlurmLogger::new(plugin_type),
            state: Mutex::new(None),
        }
    }

    /// Runs `f` on the state (created if needed) behind the panic guard.
    fn with_state<R>(&self, what: &str, on_panic: R, f: impl FnOnce(&mut State<S>) -> R) -> R {
        guard(what, on_panic, || {
            let mut state: MutexGuard<'_, Option<State<S>>> =
                self.state.lock().unwrap_or_else(PoisonError::into_inner);
            f(state.get_or_insert_with(State::new))
        })
    }

    pub fn init(&'static self) -> c_int {
        self.logger.install();
        self.with_state("init", SLURM_ERROR, |_| {
            if let Some(dir) = super::location::plugin_directory() {
                S::plugin_located(&dir);
            }
            SLURM_SUCCESS
        })
    }

    pub fn fini(&self) -> c_int {
        guard("fini", SLURM_ERROR, || {
            // Dropping the state stops and joins the sampler before Slurm unloads us.
            let state = self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            drop(state);
            SLURM_SUCCESS
        })
    }

    pub fn update_node_energy(&self) -> c_int {
        self.with_state("update_node_energy", SLURM_ERROR, |state| {
            state.node_record(Read::Recent);
            SLURM_SUCCESS
        })
    }

    /// # Safety
    /// `data` is what Slurm passes for `data_type` (slurm-abi.md §2.1).
    pub unsafe fn get_data(&self, data_type: u32, data: *mut c_void) -> c_int {
        if data.is_null() {
            return SLURM_ERROR;
        }
        self.with_state("get_data", SLURM_ERROR, |state| {
            let record = match data_type {
                acct_energy_type::ENERGY_DATA_JOULES_TASK => state.node_record(Read::Recent),
                // in slurmstepd (--profile=energy) this is the step's figure
                acct_energy_type::ENERGY_DATA_NODE_ENERGY if daemon::in_slurmstepd() => {
                    state.node_record(Read::Now)
                }
                acct_energy_type::ENERGY_DATA_NODE_ENERGY => state.node_record(Read::Recent),
                acct_energy_type::ENERGY_DATA_STRUCT => state.node_record(Read::Cached),
                acct_energy_type::ENERGY_DATA_NODE_ENERGY_UP => state.step_record(),
                acct_energy_type::ENERGY_DATA_LAST_POLL => {
                    let poll_time = state.node_record(Read::Cached).poll_time;
                    // SAFETY: LAST_POLL passes a time_t.
                    unsafe { *data.cast::<libc_time_t>() = poll_time };
                    return SLURM_SUCCESS;
                }
                acct_energy_type::ENERGY_DATA_SENSOR_CNT => {
                    // the node's record, then its parts'
                    let count = 1 + state.sensor_records().len();
                    // SAFETY: SENSOR_CNT passes a uint16_t.
                    unsafe { *data.cast::<u16>() = u16::try_from(count).unwrap_or(1) };
                    return SLURM_SUCCESS;
                }
                other => {
                    log::error!("get_data: unknown data type {other}");
                    return SLURM_ERROR;
                }
            };
            let records = data.cast::<acct_gather_energy_t>();
            // SAFETY: every remaining type passes at least one acct_gather_energy_t of this
            // release's layout.
            energy::write(unsafe { &mut *records }, &record);
            // Only slurmd's energy RPC asks for STRUCT and JOULES_TASK, with an array of
            // SENSOR_CNT records: the parts follow the node's.
            if matches!(
                data_type,
                acct_energy_type::ENERGY_DATA_STRUCT | acct_energy_type::ENERGY_DATA_JOULES_TASK
            ) {
                for (i, (_, part)) in state.sensor_records().iter().enumerate() {
                    // SAFETY: Slurm sized the array by our SENSOR_CNT, 1 + this many parts.
                    energy::write(unsafe { &mut *records.add(1 + i) }, part);
                }
            }
            SLURM_SUCCESS
        })
    }

    /// # Safety
    /// `data` is what Slurm passes for `data_type` (slurm-abi.md §2.1).
    pub unsafe fn set_data(&self, data_type: u32, _data: *mut c_void) -> c_int {
        self.with_state("set_data", SLURM_ERROR, |state| {
            match data_type {
                // State survives reconfiguration: the node's energy must not restart.
                acct_energy_type::ENERGY_DATA_RECONFIG | acct_energy_type::ENERGY_DATA_STEP_PTR => {
                }
                acct_energy_type::ENERGY_DATA_PROFILE => {
                    let record = state.node_record(Read::Now);
                    let parts = state.sensor_records();
                    if let Some(watts) = record.current_watts {
                        state.profile.send(watts, &parts, record.poll_time);
                    }
                }
                other => {
                    log::error!("set_data: unknown data type {other}");
                    return SLURM_ERROR;
                }
            }
            SLURM_SUCCESS
        })
    }

    /// # Safety
    /// The pointers Slurm passes to `conf_options`.
    pub unsafe fn conf_options(&self, full: *mut *mut s_p_options_t, count: *mut c_int) {
        // SAFETY: forwarded from Slurm.
        self.with_state("conf_options", (), |_| unsafe {
            conf::register(S::KEYS, full, count)
        });
    }

    /// # Safety
    /// `tbl` is NULL or the parsed acct_gather.conf Slurm passes to `conf_set`.
    pub unsafe fn conf_set(&self, context_id: c_int, tbl: *const s_p_hashtbl_t) {
        self.with_state("conf_set", (), |state| {
            state.context_id = u16::try_from(context_id).unwrap_or(0);
            // SAFETY: forwarded from Slurm.
            let values = unsafe { conf::values(S::KEYS, tbl) };
            let parsed = S::parse_config(&values);
            if let Hardware::Open(_) = state.hardware {
                // reconfigure: keep measuring so the node's energy does not restart
                if !matches!(&state.config, Config::Valid(c) if Ok(c) == parsed.as_ref()) {
                    log::info!(
                        "acct_gather.conf changed; the new values take effect when slurmd restarts"
                    );
                }
                if let Err(e) = parsed {
                    log::error!("{e}");
                }
                return;
            }
            state.config = match parsed {
                Ok(c) => Config::Valid(c),
                Err(e) => {
                    log::error!("{e}; this node reports no energy until it is fixed");
                    Config::Invalid
                }
            };
            // Open now: slurmstepd reads acct_gather.conf before it changes identity, and
            // the devices need root.
            if daemon::measures_here() {
                state.open();
            }
        });
    }

    /// # Safety
    /// `data` is the `List *` Slurm passes to `conf_values`.
    pub unsafe fn conf_values(&self, data: *mut *mut xlist) {
        self.with_state("conf_values", (), |state| {
            // SAFETY: forwarded from Slurm.
            unsafe { conf::show(data, &state.shown_config()) }
        });
    }
}
