//! NVML's MIG instances (nvml.h, Ampere and later) and their SM activity from GPM (GPU
//! Performance Monitoring, Hopper and later). Every symbol is optional: an older NVML
//! has none, and its GPUs are not partitioned.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::time::Instant;

use libloading::os::unix::Library;

use super::nvml_types::{NVML_SUCCESS, NvmlDevice};
use super::symbol;
use crate::MigInstance;

const NVML_ERROR_NOT_FOUND: c_int = 6;
const NVML_DEVICE_MIG_ENABLE: c_uint = 1;
/// `NVML_GPM_SUPPORT_VERSION`, `NVML_GPM_METRICS_GET_VERSION`.
const NVML_GPM_SUPPORT_VERSION: c_uint = 1;
const NVML_GPM_METRICS_GET_VERSION: c_uint = 1;
/// `NVML_GPM_METRIC_SM_UTIL`: percent of the SMs busy.
const NVML_GPM_METRIC_SM_UTIL: c_uint = 2;
/// `NVML_GPM_METRIC_MAX` of the newest header (98, 210 and 333 over the releases, with the
/// same version number): the struct NVML fills is sized for the largest.
const NVML_GPM_METRIC_MAX: usize = 333;
const UUID_SIZE: usize = 96;

/// `nvmlDeviceAttributes_t`.
#[repr(C)]
#[derive(Default)]
struct DeviceAttributes {
    multiprocessor_count: c_uint,
    shared_copy_engine_count: c_uint,
    shared_decoder_count: c_uint,
    shared_encoder_count: c_uint,
    shared_jpeg_count: c_uint,
    shared_ofa_count: c_uint,
    gpu_instance_slice_count: c_uint,
    compute_instance_slice_count: c_uint,
    memory_size_mb: c_ulonglong,
}

/// `nvmlGpmSupport_t`.
#[repr(C)]
struct GpmSupport {
    version: c_uint,
    is_supported_device: c_uint,
}

/// `nvmlGpmSample_t`: opaque.
type GpmSample = *mut c_void;

/// `nvmlGpmMetric_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct GpmMetric {
    metric_id: c_uint,
    nvml_return: c_int,
    value: f64,
    short_name: *mut c_char,
    long_name: *mut c_char,
    unit: *mut c_char,
}

/// `nvmlGpmMetricsGet_t`.
#[repr(C)]
struct GpmMetricsGet {
    version: c_uint,
    num_metrics: c_uint,
    sample1: GpmSample,
    sample2: GpmSample,
    metrics: [GpmMetric; NVML_GPM_METRIC_MAX],
}

#[derive(Clone, Copy)]
pub(super) struct MigApi {
    mig_mode: unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut c_uint) -> c_int,
    max_count: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> c_int,
    handle: unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlDevice) -> c_int,
    gpu_instance: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> c_int,
    compute_instance: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> c_int,
    attributes: unsafe extern "C" fn(NvmlDevice, *mut DeviceAttributes) -> c_int,
    uuid: unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> c_int,
}

#[derive(Clone, Copy)]
pub(super) struct GpmApi {
    supported: unsafe extern "C" fn(NvmlDevice, *mut GpmSupport) -> c_int,
    alloc: unsafe extern "C" fn(*mut GpmSample) -> c_int,
    free: unsafe extern "C" fn(GpmSample) -> c_int,
    mig_sample: unsafe extern "C" fn(NvmlDevice, c_uint, GpmSample) -> c_int,
    metrics: unsafe extern "C" fn(*mut GpmMetricsGet) -> c_int,
}

impl MigApi {
    /// `None` where this NVML has no MIG calls.
    pub(super) fn load(lib: &Library) -> Option<Self> {
        // SAFETY: each signature is nvml.h's for that name.
        unsafe {
            Some(Self {
                mig_mode: symbol(lib, "nvmlDeviceGetMigMode").ok()?,
                max_count: symbol(lib, "nvmlDeviceGetMaxMigDeviceCount").ok()?,
                handle: symbol(lib, "nvmlDeviceGetMigDeviceHandleByIndex").ok()?,
                gpu_instance: symbol(lib, "nvmlDeviceGetGpuInstanceId").ok()?,
                compute_instance: symbol(lib, "nvmlDeviceGetComputeInstanceId").ok()?,
                attributes: symbol(lib, "nvmlDeviceGetAttributes_v2").ok()?,
                uuid: symbol(lib, "nvmlDeviceGetUUID").ok()?,
            })
        }
    }

    /// The GPU's MIG instances (none when MIG is off).
    pub(super) fn instances(&self, gpu: NvmlDevice) -> Result<Vec<MigInstance>, c_int> {
        let (mut current, mut pending) = (0, 0);
        // SAFETY: a handle NVML returned; valid out-pointers.
        let rc = unsafe { (self.mig_mode)(gpu, &mut current, &mut pending) };
        if rc != NVML_SUCCESS || current != NVML_DEVICE_MIG_ENABLE {
            // NOT_SUPPORTED before Ampere: not partitioned
            return Ok(Vec::new());
        }
        let mut count: c_uint = 0;
        // SAFETY: as above.
        check(unsafe { (self.max_count)(gpu, &mut count) })?;
        let mut instances = Vec::new();
        for index in 0..count {
            let mut mig: NvmlDevice = std::ptr::null_mut();
            // SAFETY: as above; NOT_FOUND where no instance is at this index.
            match unsafe { (self.handle)(gpu, index, &mut mig) } {
                NVML_SUCCESS => {}
                NVML_ERROR_NOT_FOUND => continue,
                rc => return Err(rc),
            }
            let (mut gi, mut ci) = (0, 0);
            let mut attributes = DeviceAttributes::default();
            let mut uuid = [0 as c_char; UUID_SIZE];
            // SAFETY: a MIG handle NVML returned; valid out-pointers and the buffer's size.
            unsafe {
                check((self.gpu_instance)(mig, &mut gi))?;
                check((self.compute_instance)(mig, &mut ci))?;
                check((self.attributes)(mig, &mut attributes))?;
                check((self.uuid)(mig, uuid.as_mut_ptr(), UUID_SIZE as c_uint))?;
            }
            instances.push(MigInstance {
                gpu_instance: gi,
                compute_instance: ci,
                // SAFETY: NVML NUL-terminates within the size it was given.
                uuid: unsafe { CStr::from_ptr(uuid.as_ptr()) }
                    .to_string_lossy()
                    .into_owned(),
                sms: attributes.multiprocessor_count,
            });
        }
        Ok(instances)
    }
}

fn check(rc: c_int) -> Result<(), c_int> {
    if rc == NVML_SUCCESS { Ok(()) } else { Err(rc) }
}

/// One GPU instance's GPM state: the sample before, and its activity so far.
struct Activity {
    sample: GpmSample,
    at: Option<Instant>,
    busy: u64,
}

/// The GPM samples of one GPU's instances, freed with it.
pub(super) struct GpuActivity {
    api: GpmApi,
    /// By GPU instance id.
    instances: HashMap<u32, Activity>,
    /// A sample taken now, swapped with the instance's previous one.
    spare: GpmSample,
}

// SAFETY: GPM samples are buffers NVML allocated, used only by the one poller thread that
// owns this value.
unsafe impl Send for GpuActivity {}

impl GpmApi {
    pub(super) fn load(lib: &Library) -> Option<Self> {
        // SAFETY: each signature is nvml.h's for that name.
        unsafe {
            Some(Self {
                supported: symbol(lib, "nvmlGpmQueryDeviceSupport").ok()?,
                alloc: symbol(lib, "nvmlGpmSampleAlloc").ok()?,
                free: symbol(lib, "nvmlGpmSampleFree").ok()?,
                mig_sample: symbol(lib, "nvmlGpmMigSampleGet").ok()?,
                metrics: symbol(lib, "nvmlGpmMetricsGet").ok()?,
            })
        }
    }

    /// Whether the GPU reports GPM metrics.
    pub(super) fn supports(&self, gpu: NvmlDevice) -> bool {
        let mut support = GpmSupport {
            version: NVML_GPM_SUPPORT_VERSION,
            is_supported_device: 0,
        };
        // SAFETY: a handle NVML returned; the versioned struct.
        let rc = unsafe { (self.supported)(gpu, &mut support) };
        rc == NVML_SUCCESS && support.is_supported_device != 0
    }

    fn alloc(&self) -> Result<GpmSample, c_int> {
        let mut sample: GpmSample = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check(unsafe { (self.alloc)(&mut sample) })?;
        Ok(sample)
    }

    pub(super) fn activity(&self) -> Result<GpuActivity, c_int> {
        Ok(GpuActivity {
            api: *self,
            instances: HashMap::new(),
            spare: self.alloc()?,
        })
    }
}

impl GpuActivity {
    /// Samples each GPU instance of `gpu` and adds its SM activity since its sample before:
    /// percent times milliseconds. Returns every instance's activity so far.
    pub(super) fn sample(
        &mut self,
        gpu: NvmlDevice,
        gpu_instances: &[u32],
    ) -> Result<Vec<(u32, u64)>, c_int> {
        let now = Instant::now();
        for &gi in gpu_instances {
            if !self.instances.contains_key(&gi) {
                let sample = self.api.alloc()?;
                self.instances.insert(
                    gi,
                    Activity {
                        sample,
                        at: None,
                        busy: 0,
                    },
                );
            }
            // SAFETY: a handle NVML returned, a sample NVML allocated.
            check(unsafe { (self.api.mig_sample)(gpu, gi, self.spare) })?;
            let Some(instance) = self.instances.get_mut(&gi) else {
                continue;
            };
            if let Some(before) = instance.at {
                let mut get = GpmMetricsGet {
                    version: NVML_GPM_METRICS_GET_VERSION,
                    num_metrics: 1,
                    sample1: instance.sample,
                    sample2: self.spare,
                    metrics: [GpmMetric {
                        metric_id: 0,
                        nvml_return: 0,
                        value: 0.0,
                        short_name: std::ptr::null_mut(),
                        long_name: std::ptr::null_mut(),
                        unit: std::ptr::null_mut(),
                    }; NVML_GPM_METRIC_MAX],
                };
                get.metrics[0].metric_id = NVML_GPM_METRIC_SM_UTIL;
                // SAFETY: the versioned struct, both samples taken from this instance.
                check(unsafe { (self.api.metrics)(&mut get) })?;
                let percent = get.metrics[0].value;
                if get.metrics[0].nvml_return == NVML_SUCCESS && percent.is_finite() {
                    let ms = now.saturating_duration_since(before).as_secs_f64() * 1e3;
                    instance.busy += (percent.clamp(0.0, 100.0) * ms) as u64;
                }
            }
            std::mem::swap(&mut instance.sample, &mut self.spare);
            instance.at = Some(now);
        }
        Ok(self.instances.iter().map(|(gi, a)| (*gi, a.busy)).collect())
    }
}

impl Drop for GpuActivity {
    fn drop(&mut self) {
        // SAFETY: samples NVML allocated, each freed once.
        unsafe {
            (self.api.free)(self.spare);
            for a in self.instances.values() {
                (self.api.free)(a.sample);
            }
        }
    }
}
