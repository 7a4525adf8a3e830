//! NVML (nvml.h): each GPU's energy counter and power, its processes' utilization.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong};

use libloading::os::unix::Library;

use super::nvml_mig::{GpmApi, GpuActivity, MigApi};
use super::nvml_types::{NVML_SUCCESS, NvmlDevice};
use super::{load, symbol};
use crate::{Device, GpuError, GpuLibrary, MigInstance, NVIDIA_MAJOR};

/// `nvmlReturn_t` values (nvml.h).
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
const NVML_ERROR_NOT_FOUND: c_int = 6;
const NVML_ERROR_INSUFFICIENT_SIZE: c_int = 7;
const NVML_ERROR_GPU_IS_LOST: c_int = 15;
/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
/// nvml.h's `NVML_DEVICE_NAME_V2_BUFFER_SIZE`.
const NVML_DEVICE_NAME_BUFFER_SIZE: usize = 96;
const NVML_UUID_SIZE: usize = 96;

#[derive(Clone, Copy)]
struct NvmlApi {
    shutdown: unsafe extern "C" fn() -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    count: unsafe extern "C" fn(*mut c_uint) -> c_int,
    handle: unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> c_int,
    minor: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> c_int,
    uuid: unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> c_int,
    /// `nvmlDeviceGetName` (the product, e.g. "NVIDIA GH200 480GB"): what its energy
    /// counter covers depends on it (`None`: absent).
    product: Option<unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> c_int>,
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

/// A process not reported for this long (µs of NVML's clock) is forgotten.
const FORGET_PROCESS_US: u64 = 600_000_000;
/// The longest time one read stands for: a longer gap between reads (a stalled poller,
/// a stepped clock) counts as this long.
const MAX_READ_SPAN_US: u64 = 10_000_000;

/// How long a read that found no sample leaves the window open: longer than the driver's
/// sampling period (200 ms seen), so that an empty read means that no process used the
/// GPU rather than that the driver had not sampled yet.
const SAMPLE_PERIOD_WAIT_US: u64 = 1_000_000;

/// One GPU's processes' use as far as read: when it was last read (CPU µs, NVML's
/// clock), and per pid its SM utilization integrated over time (percent-milliseconds)
/// and when it was last reported.
///
/// The real NVML (seen on an H200, driver 580.159.04) reports, per process, its mean SM
/// utilization over its samples since `lastSeenTimeStamp` (since it began, for 0), with
/// the time of its newest sample, which for a process time-sliced with another can stay
/// behind for seconds. So each read asks since the previous read and counts each
/// process's mean for the time between the two; a time stamp is no cut-off.
#[derive(Default)]
struct ProcessUse {
    last_read: u64,
    busy: HashMap<u32, (u64, u64)>,
}

impl ProcessUse {
    /// Adds a read made at `now` (CPU µs) that reported `samples`, each its process's
    /// mean since the previous read. The GPU's first read only marks the start.
    fn add(&mut self, now: u64, samples: &[NvmlProcessUtilizationSample]) {
        // no sample yet since the previous read (the driver samples every 200 ms): the
        // next read's means cover this time too
        if samples.is_empty() && now.saturating_sub(self.last_read) < SAMPLE_PERIOD_WAIT_US {
            return;
        }
        let span = if self.last_read == 0 {
            0
        } else {
            now.saturating_sub(self.last_read).min(MAX_READ_SPAN_US)
        };
        for s in samples {
            let entry = self.busy.entry(s.pid).or_default();
            // a percent: NVML's "not available" (0xFFFFFFFF) or garbage must not make one
            // process millions of times busier than the whole GPU
            let percent = u64::from(s.sm_util.min(100));
            entry.0 = entry.0.saturating_add(percent * span / 1000);
            entry.1 = now;
        }
        self.last_read = now;
        let horizon = now.saturating_sub(FORGET_PROCESS_US);
        self.busy.retain(|_, (_, at)| *at >= horizon);
    }
}

/// Now on NVML's clock for process samples: CPU time in microseconds since the epoch.
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
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
            product: symbol(&lib, "nvmlDeviceGetName").ok(),
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
            let mut product = [0 as c_char; NVML_DEVICE_NAME_BUFFER_SIZE];
            let product = self
                .api
                .product
                // SAFETY: a handle NVML returned; the buffer and its size.
                .filter(|get| unsafe {
                    get(handle, product.as_mut_ptr(), product.len() as c_uint)
                } == NVML_SUCCESS)
                // SAFETY: NVML NUL-terminates within the size it was given.
                .map(|_| unsafe { CStr::from_ptr(product.as_ptr()) }.to_string_lossy().into_owned());
            let name = match product {
                Some(product) if !product.is_empty() => format!("{product}, {name}"),
                _ => name,
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

    /// Each process's mean use since the previous read (`NOT_FOUND`: none used the GPU),
    /// added to its use ([`ProcessUse::add`]).
    fn process_use(&mut self, index: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        let handle = self.handle(index)?;
        let get = self.api.process_utilization.ok_or(GpuError::NotSupported)?;
        let state = self.process_use.entry(index).or_default();
        let now = now_us();
        let mut samples: Vec<NvmlProcessUtilizationSample> = Vec::new();
        // sized first; more samples may arrive between the calls
        let mut rc = NVML_ERROR_INSUFFICIENT_SIZE;
        for _ in 0..3 {
            let mut count: c_uint = 0;
            // SAFETY: a NULL buffer asks for the count, written to a valid out-pointer.
            let sized = unsafe { get(handle, std::ptr::null_mut(), &mut count, state.last_read) };
            if !matches!(sized, NVML_SUCCESS | NVML_ERROR_INSUFFICIENT_SIZE) || count == 0 {
                rc = sized;
                samples.clear();
                break;
            }
            samples = vec![NvmlProcessUtilizationSample::default(); count as usize + 8];
            let mut count = samples.len() as c_uint;
            // SAFETY: a buffer of `count` samples, its length in the in/out count.
            rc = unsafe { get(handle, samples.as_mut_ptr(), &mut count, state.last_read) };
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
        state.add(now, &samples);
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
#[path = "nvml_proptest.rs"]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_795_650_621_000_000;

    fn sample(pid: u32, sm: u32) -> NvmlProcessUtilizationSample {
        NvmlProcessUtilizationSample {
            pid,
            // a time stamp that lags: it is no cut-off
            time_stamp: T0 - 8_000_000,
            sm_util: sm,
            ..Default::default()
        }
    }

    fn busy(state: &ProcessUse, pid: u32) -> u64 {
        state.busy.get(&pid).map_or(0, |b| b.0)
    }

    /// Each process's mean since the previous read counts for the time between the reads,
    /// uneven as a loaded poller makes them; a process absent from a read (no use since
    /// the previous) gains nothing.
    #[test]
    fn each_mean_counts_for_the_time_since_the_previous_read() {
        let mut state = ProcessUse::default();
        state.add(T0, &[sample(7, 90), sample(8, 10)]);
        assert_eq!(
            (busy(&state, 7), busy(&state, 8)),
            (0, 0),
            "the first only marks the start"
        );
        state.add(T0 + 250_000, &[sample(7, 90), sample(8, 10)]);
        state.add(T0 + 1_250_000, &[sample(7, 20), sample(8, 60)]);
        state.add(T0 + 1_500_000, &[sample(8, 40)]);
        assert_eq!(busy(&state, 7), 90 * 250 + 20 * 1000);
        assert_eq!(busy(&state, 8), 10 * 250 + 60 * 1000 + 40 * 250);
        // a read too soon for a new sample leaves the window open for the next
        state.add(T0 + 1_600_000, &[]);
        state.add(T0 + 1_800_000, &[sample(8, 50)]);
        assert_eq!(busy(&state, 8), 10 * 250 + 60 * 1000 + 40 * 250 + 50 * 300);
        // an empty read after a second or more: nobody used the GPU then
        state.add(T0 + 3_800_000, &[]);
        state.add(T0 + 4_000_000, &[sample(8, 50)]);
        assert_eq!(
            busy(&state, 8),
            10 * 250 + 60 * 1000 + 40 * 250 + 50 * 300 + 50 * 200
        );
    }

    /// A gap past the longest span counts as that span; a clock stepped back counts
    /// nothing.
    #[test]
    fn a_long_gap_is_capped_and_a_clock_stepped_back_counts_nothing() {
        let mut state = ProcessUse::default();
        state.add(T0, &[sample(7, 50)]);
        state.add(T0 + 60_000_000, &[sample(7, 50)]);
        assert_eq!(busy(&state, 7), 50 * MAX_READ_SPAN_US / 1000);
        state.add(T0 + 59_000_000, &[sample(7, 50)]);
        assert_eq!(busy(&state, 7), 50 * MAX_READ_SPAN_US / 1000);
    }
}
