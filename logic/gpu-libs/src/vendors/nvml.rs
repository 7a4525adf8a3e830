//! NVML (nvml.h): each GPU's energy counter and power, its processes' utilization.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};

use libloading::os::unix::Library;

use super::nvml_mig::{GpmApi, GpuActivity, MigApi};
use super::{load, symbol};
use crate::{Device, GpuError, GpuLibrary, MigInstance, NVIDIA_MAJOR};

/// `nvmlReturn_t` values (nvml.h).
pub(super) const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
const NVML_ERROR_NOT_FOUND: c_int = 6;
const NVML_ERROR_INSUFFICIENT_SIZE: c_int = 7;
const NVML_ERROR_GPU_IS_LOST: c_int = 15;
/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
const NVML_UUID_SIZE: usize = 96;

/// `nvmlDevice_t`: an opaque pointer.
pub(super) type NvmlDevice = *mut c_void;

#[derive(Clone, Copy)]
struct NvmlApi {
    shutdown: unsafe extern "C" fn() -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    count: unsafe extern "C" fn(*mut c_uint) -> c_int,
    handle: unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> c_int,
    minor: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> c_int,
    uuid: unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> c_int,
    energy: unsafe extern "C" fn(NvmlDevice, *mut c_ulonglong) -> c_int,
    power: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> c_int,
    /// `nvmlDeviceGetProcessUtilization`, in every NVML since 2015 (`None`: absent).
    process_utilization: Option<ProcessUtilizationFn>,
}

/// `nvmlProcessUtilizationSample_t` (nvml.h): one process's use over one of the driver's
/// sampling periods; `time_stamp` in CPU microseconds.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct NvmlProcessUtilizationSample {
    pid: c_uint,
    time_stamp: c_ulonglong,
    sm_util: c_uint,
    mem_util: c_uint,
    enc_util: c_uint,
    dec_util: c_uint,
}

type ProcessUtilizationFn = unsafe extern "C" fn(
    NvmlDevice,
    *mut NvmlProcessUtilizationSample,
    *mut c_uint,
    c_ulonglong,
) -> c_int;

/// A process not sampled for this long (µs of NVML's clock) is forgotten.
const FORGET_PROCESS_US: u64 = 600_000_000;
/// The longest time one sample stands for: a longer gap between samples (a stalled
/// poller, a stepped clock) counts as this long.
const MAX_SAMPLE_SPAN_US: u64 = 10_000_000;

/// One GPU's processes' use as far as read: the newest sample's time stamp, and per pid
/// its SM utilization integrated over time (percent-milliseconds) and when it was last
/// sampled.
#[derive(Default)]
struct ProcessUse {
    last_seen: u64,
    busy: HashMap<u32, (u64, u64)>,
}

impl ProcessUse {
    /// Adds the samples newer than the last seen, each weighted by the time it stands
    /// for: from the GPU's previous sample to its own. The real NVML (an H200, driver
    /// 580) returns only each process's latest sample, so that time is the time since
    /// the last read, which a loaded poller stretches; a library returning every
    /// buffered sample gives each its sampling period. The GPU's first sample only
    /// marks the start.
    fn add(&mut self, samples: &[NvmlProcessUtilizationSample]) {
        let mut new: Vec<&NvmlProcessUtilizationSample> = samples
            .iter()
            .filter(|s| s.time_stamp > self.last_seen)
            .collect();
        new.sort_by_key(|s| s.time_stamp);
        let mut previous = self.last_seen;
        let mut span_of = (0, 0);
        for s in new {
            if span_of.0 != s.time_stamp {
                let span = if previous == 0 {
                    0
                } else {
                    (s.time_stamp - previous).min(MAX_SAMPLE_SPAN_US)
                };
                span_of = (s.time_stamp, span);
                previous = s.time_stamp;
            }
            let entry = self.busy.entry(s.pid).or_default();
            entry.0 += u64::from(s.sm_util) * span_of.1 / 1000;
            entry.1 = entry.1.max(s.time_stamp);
        }
        self.last_seen = previous;
        let horizon = self.last_seen.saturating_sub(FORGET_PROCESS_US);
        self.busy.retain(|_, (_, at)| *at >= horizon);
    }
}

pub struct Nvml {
    api: NvmlApi,
    handles: Vec<NvmlDevice>,
    process_use: HashMap<u32, ProcessUse>,
    mig: Option<MigApi>,
    gpm: Option<GpmApi>,
    /// Per GPU: its GPU instances' ids, as last listed.
    gpu_instances: HashMap<u32, Vec<u32>>,
    /// Per GPU: its instances' GPM samples (freed before NVML shuts down).
    activity: HashMap<u32, GpuActivity>,
    _lib: Library,
}

// SAFETY: NVML is thread-safe; its device handles are opaque pointers valid until
// nvmlShutdown, and only the one poller thread that owns this value uses them.
unsafe impl Send for Nvml {}

/// Loads NVML from `path` and initialises it.
pub fn open_nvml(path: &str) -> Result<Box<dyn GpuLibrary>, String> {
    let lib = load(path)?;
    // SAFETY: each signature is nvml.h's for that name.
    let (init, api) = unsafe {
        let init: unsafe extern "C" fn() -> c_int = symbol(&lib, "nvmlInit_v2")?;
        let api = NvmlApi {
            shutdown: symbol(&lib, "nvmlShutdown")?,
            error_string: symbol(&lib, "nvmlErrorString")?,
            count: symbol(&lib, "nvmlDeviceGetCount_v2")?,
            handle: symbol(&lib, "nvmlDeviceGetHandleByIndex_v2")?,
            minor: symbol(&lib, "nvmlDeviceGetMinorNumber")?,
            uuid: symbol(&lib, "nvmlDeviceGetUUID")?,
            energy: symbol(&lib, "nvmlDeviceGetTotalEnergyConsumption")?,
            power: symbol(&lib, "nvmlDeviceGetPowerUsage")?,
            process_utilization: symbol(&lib, "nvmlDeviceGetProcessUtilization").ok(),
        };
        (init, api)
    };
    // SAFETY: no arguments.
    let rc = unsafe { init() };
    if rc != NVML_SUCCESS {
        return Err(format!("nvmlInit_v2: {}", nvml_error(&api, rc)));
    }
    let nvml = Nvml {
        api,
        handles: Vec::new(),
        process_use: HashMap::new(),
        mig: MigApi::load(&lib),
        gpm: GpmApi::load(&lib),
        gpu_instances: HashMap::new(),
        activity: HashMap::new(),
        _lib: lib,
    };
    Ok(Box::new(nvml))
}

fn nvml_error(api: &NvmlApi, rc: c_int) -> GpuError {
    match rc {
        NVML_ERROR_NOT_SUPPORTED => GpuError::NotSupported,
        NVML_ERROR_GPU_IS_LOST => GpuError::Lost,
        _ => {
            // SAFETY: nvmlErrorString returns a static string for any code (or NULL).
            let text = unsafe { (api.error_string)(rc) };
            let text = if text.is_null() {
                "unknown error".into()
            } else {
                // SAFETY: a NUL-terminated static string from NVML.
                unsafe { CStr::from_ptr(text) }
                    .to_string_lossy()
                    .into_owned()
            };
            GpuError::Failed(format!("NVML error {rc}: {text}"))
        }
    }
}

impl Nvml {
    fn check(&self, rc: c_int) -> Result<(), GpuError> {
        if rc == NVML_SUCCESS {
            Ok(())
        } else {
            Err(nvml_error(&self.api, rc))
        }
    }

    fn handle(&self, index: u32) -> Result<NvmlDevice, GpuError> {
        self.handles
            .get(index as usize)
            .copied()
            .filter(|h| !h.is_null())
            .ok_or_else(|| GpuError::Failed(format!("no GPU {index}")))
    }
}

impl GpuLibrary for Nvml {
    fn vendor(&self) -> &'static str {
        "NVML"
    }

    fn devices(&mut self) -> Result<Vec<Device>, GpuError> {
        let mut count: c_uint = 0;
        // SAFETY: a valid out-pointer.
        self.check(unsafe { (self.api.count)(&mut count) })?;
        let mut devices = Vec::new();
        self.handles.clear();
        for index in 0..count {
            let mut handle: NvmlDevice = std::ptr::null_mut();
            // SAFETY: index < count; a valid out-pointer.
            let rc = unsafe { (self.api.handle)(index, &mut handle) };
            // kept at its index (null for a GPU without a handle), so indices stay NVML's
            self.handles.push(handle);
            if let Err(e) = self.check(rc) {
                // e.g. NO_PERMISSION for a GPU this process may not open: the others
                // are still read
                log::info!("NVML GPU {index} is not read: {e}");
                continue;
            }
            let mut minor: c_uint = 0;
            // SAFETY: a handle NVML returned; a valid out-pointer.
            let file = (unsafe { (self.api.minor)(handle, &mut minor) } == NVML_SUCCESS)
                .then_some((NVIDIA_MAJOR, minor));
            let mut uuid = [0 as c_char; NVML_UUID_SIZE];
            // SAFETY: the buffer and its size.
            let rc =
                unsafe { (self.api.uuid)(handle, uuid.as_mut_ptr(), NVML_UUID_SIZE as c_uint) };
            let name = if rc == NVML_SUCCESS {
                // SAFETY: NVML NUL-terminates within the size it was given.
                unsafe { CStr::from_ptr(uuid.as_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            } else {
                format!("index {index}")
            };
            devices.push(Device { index, file, name });
        }
        Ok(devices)
    }

    fn energy_uj(&mut self, index: u32) -> Result<u64, GpuError> {
        let handle = self.handle(index)?;
        let mut mj: c_ulonglong = 0;
        // SAFETY: a handle NVML returned; a valid out-pointer.
        self.check(unsafe { (self.api.energy)(handle, &mut mj) })?;
        Ok(mj.saturating_mul(1000))
    }

    fn power_w(&mut self, index: u32) -> Result<f64, GpuError> {
        let handle = self.handle(index)?;
        let mut mw: c_uint = 0;
        // SAFETY: a handle NVML returned; a valid out-pointer.
        self.check(unsafe { (self.api.power)(handle, &mut mw) })?;
        Ok(f64::from(mw) / 1000.0)
    }

    /// The samples newer than the last seen (`NOT_FOUND`: none), added to each process's
    /// use ([`ProcessUse::add`]). NVML reports only processes that used the GPU.
    fn process_use(&mut self, index: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        let handle = self.handle(index)?;
        let get = self.api.process_utilization.ok_or(GpuError::NotSupported)?;
        let state = self.process_use.entry(index).or_default();
        let mut samples: Vec<NvmlProcessUtilizationSample> = Vec::new();
        // sized first; more samples may arrive between the calls
        let mut rc = NVML_ERROR_INSUFFICIENT_SIZE;
        for _ in 0..3 {
            let mut count: c_uint = 0;
            // SAFETY: a NULL buffer asks for the count, written to a valid out-pointer.
            let sized = unsafe { get(handle, std::ptr::null_mut(), &mut count, state.last_seen) };
            if !matches!(sized, NVML_SUCCESS | NVML_ERROR_INSUFFICIENT_SIZE) || count == 0 {
                rc = sized;
                samples.clear();
                break;
            }
            samples = vec![NvmlProcessUtilizationSample::default(); count as usize + 8];
            let mut count = samples.len() as c_uint;
            // SAFETY: a buffer of `count` samples, its length in the in/out count.
            rc = unsafe { get(handle, samples.as_mut_ptr(), &mut count, state.last_seen) };
            samples.truncate((count as usize).min(samples.len()));
            if rc != NVML_ERROR_INSUFFICIENT_SIZE {
                break;
            }
        }
        match rc {
            NVML_SUCCESS => {}
            NVML_ERROR_NOT_FOUND | NVML_ERROR_INSUFFICIENT_SIZE => samples.clear(),
            rc => return Err(nvml_error(&self.api, rc)),
        }
        state.add(&samples);
        Ok(state
            .busy
            .iter()
            .map(|(pid, (busy, _))| (*pid, *busy))
            .collect())
    }

    fn mig_instances(&mut self, index: u32) -> Result<Vec<MigInstance>, GpuError> {
        let handle = self.handle(index)?;
        let Some(mig) = self.mig else {
            return Ok(Vec::new());
        };
        let instances = mig
            .instances(handle)
            .map_err(|rc| nvml_error(&self.api, rc))?;
        self.gpu_instances
            .insert(index, instances.iter().map(|i| i.gpu_instance).collect());
        Ok(instances)
    }

    fn mig_activity(&mut self, index: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        let handle = self.handle(index)?;
        let gpm = self.gpm.ok_or(GpuError::NotSupported)?;
        let instances = self.gpu_instances.get(&index).cloned().unwrap_or_default();
        if instances.is_empty() {
            return Err(GpuError::NotSupported);
        }
        if !self.activity.contains_key(&index) {
            if !gpm.supports(handle) {
                return Err(GpuError::NotSupported);
            }
            let activity = gpm.activity().map_err(|rc| nvml_error(&self.api, rc))?;
            self.activity.insert(index, activity);
        }
        let activity = self
            .activity
            .get_mut(&index)
            .ok_or(GpuError::NotSupported)?;
        activity
            .sample(handle, &instances)
            .map_err(|rc| nvml_error(&self.api, rc))
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        self.activity.clear();
        // SAFETY: NVML was initialised (open_nvml returns no Nvml otherwise).
        unsafe { (self.api.shutdown)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, ms: u64, sm: u32) -> NvmlProcessUtilizationSample {
        NvmlProcessUtilizationSample {
            pid,
            time_stamp: 1_795_650_621_000_000 + ms * 1000,
            sm_util: sm,
            ..Default::default()
        }
    }

    fn busy(state: &ProcessUse, pid: u32) -> u64 {
        state.busy.get(&pid).map_or(0, |b| b.0)
    }

    /// As the real NVML answers: each process's latest sample, read at uneven times (a
    /// loaded poller): each counts for the time since the previous read, so a process
    /// busy through a long gap is not undercounted; a repeated sample counts once.
    #[test]
    fn latest_samples_count_for_the_time_since_the_last_read() {
        let mut state = ProcessUse::default();
        state.add(&[sample(7, 0, 90), sample(8, 0, 10)]);
        assert_eq!(
            (busy(&state, 7), busy(&state, 8)),
            (0, 0),
            "the first only marks the start"
        );
        state.add(&[sample(7, 250, 90), sample(8, 250, 10)]);
        state.add(&[sample(7, 1250, 20), sample(8, 1250, 60)]);
        state.add(&[sample(7, 1250, 20), sample(8, 1250, 60)]);
        assert_eq!(busy(&state, 7), 90 * 250 + 20 * 1000);
        assert_eq!(busy(&state, 8), 10 * 250 + 60 * 1000);
    }

    /// A library that returns every buffered sample: each counts for its period, as a
    /// plain sum would; a gap past the longest span counts as that span.
    #[test]
    fn buffered_samples_count_for_their_periods_and_gaps_are_capped() {
        let mut state = ProcessUse::default();
        state.add(&[sample(7, 0, 50)]);
        state.add(&[sample(7, 200, 50), sample(7, 100, 50), sample(8, 200, 30)]);
        assert_eq!(busy(&state, 7), 50 * 200);
        assert_eq!(busy(&state, 8), 30 * 100);
        state.add(&[sample(7, 60_200, 50)]);
        assert_eq!(busy(&state, 7), 50 * 200 + 50 * MAX_SAMPLE_SPAN_US / 1000);
    }
}
