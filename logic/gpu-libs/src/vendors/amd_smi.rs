//! amd-smi (amd_smi/amdsmi.h): each GPU's energy accumulator, its processes' engine time.

use std::ffi::{c_char, c_float, c_int, c_void};

use libloading::os::unix::Library;

use super::{load, symbol};
use crate::{DRM_MAJOR, Device, GpuError, GpuLibrary};

/// `amdsmi_status_t` values (amdsmi.h).
const AMDSMI_STATUS_SUCCESS: c_int = 0;
const AMDSMI_STATUS_NOT_SUPPORTED: c_int = 2;
const AMDSMI_STATUS_OUT_OF_RESOURCES: c_int = 15;
/// `AMDSMI_MAX_STRING_LENGTH`.
const STRING_LENGTH: usize = 256;
/// The most processes a GPU's list is read with: a job's owner decides how many processes
/// use a GPU, and slurmd's buffer (a record is over a kilobyte) must not grow with them.
/// Past it the GPU's use per process is not read ([`AmdSmi::process_use`] says so), and its
/// energy is split by the shares its holders were granted.
const MAX_PROCESSES: usize = 4096;
/// `AMDSMI_INIT_AMD_GPUS`.
const AMDSMI_INIT_AMD_GPUS: u64 = 1 << 1;

/// `amdsmi_socket_handle`, `amdsmi_processor_handle`: opaque pointers.
type AmdHandle = *mut c_void;

#[derive(Clone, Copy)]
struct AmdApi {
    shut_down: unsafe extern "C" fn() -> c_int,
    sockets: unsafe extern "C" fn(*mut u32, *mut AmdHandle) -> c_int,
    processors: unsafe extern "C" fn(AmdHandle, *mut u32, *mut AmdHandle) -> c_int,
    render_minor: unsafe extern "C" fn(AmdHandle, *mut u32) -> c_int,
    energy: unsafe extern "C" fn(AmdHandle, *mut u64, *mut c_float, *mut u64) -> c_int,
    /// `amdsmi_get_gpu_process_list` as ROCm 6.2 and later define it (full records);
    /// `None` before, where it listed handles for `amdsmi_get_gpu_process_info`.
    processes: Option<unsafe extern "C" fn(AmdHandle, *mut u32, *mut ProcInfo) -> c_int>,
}

/// `amdsmi_proc_info_t` of ROCm 6.2 and later (the tail's last 12 words are
/// `cu_occupancy` and reserved, or `cu_occupancy`, `evicted_time` and reserved: the same
/// size).
#[repr(C)]
#[derive(Clone, Copy)]
struct ProcInfo {
    name: [c_char; STRING_LENGTH],
    pid: u32,
    mem: u64,
    /// Nanoseconds on the graphics engine, then the encoder.
    gfx_ns: u64,
    enc_ns: u64,
    engine_reserved: [u32; 12],
    gtt_mem: u64,
    cpu_mem: u64,
    vram_mem: u64,
    memory_reserved: [u32; 10],
    container_name: [c_char; STRING_LENGTH],
    tail: [u32; 12],
}

const _: () = assert!(std::mem::size_of::<ProcInfo>() == 704);

impl ProcInfo {
    fn empty() -> Self {
        Self {
            name: [0; STRING_LENGTH],
            pid: 0,
            mem: 0,
            gfx_ns: 0,
            enc_ns: 0,
            engine_reserved: [0; 12],
            gtt_mem: 0,
            cpu_mem: 0,
            vram_mem: 0,
            memory_reserved: [0; 10],
            container_name: [0; STRING_LENGTH],
            tail: [0; 12],
        }
    }
}

pub struct AmdSmi {
    api: AmdApi,
    handles: Vec<AmdHandle>,
    _lib: Library,
}

// SAFETY: amd-smi's processor handles are opaque pointers valid until amdsmi_shut_down,
// used only by the one poller thread that owns this value.
unsafe impl Send for AmdSmi {}

/// Loads amd-smi from `path` and initialises it for AMD GPUs.
pub fn open_amd_smi(path: &str) -> Result<Box<dyn GpuLibrary>, String> {
    let lib = load(path)?;
    // SAFETY: each signature is amdsmi.h's for that name.
    let (init, api) = unsafe {
        let init: unsafe extern "C" fn(u64) -> c_int = symbol(&lib, "amdsmi_init")?;
        let api = AmdApi {
            shut_down: symbol(&lib, "amdsmi_shut_down")?,
            sockets: symbol(&lib, "amdsmi_get_socket_handles")?,
            processors: symbol(&lib, "amdsmi_get_processor_handles")?,
            render_minor: symbol(&lib, "amdsmi_get_gpu_drm_render_minor")?,
            energy: symbol(&lib, "amdsmi_get_energy_count")?,
            // the older list (of handles) came with amdsmi_get_gpu_process_info
            processes: match symbol::<usize>(&lib, "amdsmi_get_gpu_process_info") {
                Ok(_) => None,
                Err(_) => symbol(&lib, "amdsmi_get_gpu_process_list").ok(),
            },
        };
        (init, api)
    };
    // SAFETY: the flag is amdsmi.h's.
    let rc = unsafe { init(AMDSMI_INIT_AMD_GPUS) };
    if rc != AMDSMI_STATUS_SUCCESS {
        return Err(format!("amdsmi_init: status {rc}"));
    }
    Ok(Box::new(AmdSmi {
        api,
        handles: Vec::new(),
        _lib: lib,
    }))
}

fn amd_check(rc: c_int) -> Result<(), GpuError> {
    match rc {
        AMDSMI_STATUS_SUCCESS => Ok(()),
        AMDSMI_STATUS_NOT_SUPPORTED => Err(GpuError::NotSupported),
        rc => Err(GpuError::Failed(format!("amd-smi status {rc}"))),
    }
}

/// Calls a "count, then fill" amd-smi list function.
fn amd_list(fill: impl Fn(*mut u32, *mut AmdHandle) -> c_int) -> Result<Vec<AmdHandle>, GpuError> {
    let mut count: u32 = 0;
    amd_check(fill(&mut count, std::ptr::null_mut()))?;
    let mut handles = vec![std::ptr::null_mut(); count as usize];
    amd_check(fill(&mut count, handles.as_mut_ptr()))?;
    handles.truncate(count as usize);
    Ok(handles)
}

impl AmdSmi {
    fn handle(&self, index: u32) -> Result<AmdHandle, GpuError> {
        self.handles
            .get(index as usize)
            .copied()
            .ok_or_else(|| GpuError::Failed(format!("no GPU {index}")))
    }
}

impl GpuLibrary for AmdSmi {
    fn vendor(&self) -> &'static str {
        "amd-smi"
    }

    fn devices(&mut self) -> Result<Vec<Device>, GpuError> {
        let api = self.api;
        // SAFETY: NULL asks for the count; then a buffer of that many handles.
        let sockets = amd_list(|n, out| unsafe { (api.sockets)(n, out) })?;
        self.handles.clear();
        for socket in sockets {
            // SAFETY: a socket handle amd-smi returned; as above.
            let gpus = amd_list(|n, out| unsafe { (api.processors)(socket, n, out) })?;
            self.handles.extend(gpus);
        }
        let devices = (0u32..)
            .zip(&self.handles)
            .map(|(index, &handle)| {
                let mut minor: u32 = 0;
                // SAFETY: a processor handle amd-smi returned; a valid out-pointer.
                let rc = unsafe { (api.render_minor)(handle, &mut minor) };
                Device {
                    index,
                    file: (rc == AMDSMI_STATUS_SUCCESS).then_some((DRM_MAJOR, minor)),
                    name: format!("renderD{minor}"),
                }
            })
            .collect();
        Ok(devices)
    }

    fn energy_uj(&mut self, index: u32) -> Result<u64, GpuError> {
        let handle = self.handle(index)?;
        let (mut count, mut resolution, mut timestamp) = (0u64, 0.0 as c_float, 0u64);
        // SAFETY: a processor handle amd-smi returned; valid out-pointers.
        amd_check(unsafe {
            (self.api.energy)(handle, &mut count, &mut resolution, &mut timestamp)
        })?;
        if !(resolution.is_finite() && resolution > 0.0) {
            return Err(GpuError::Failed(format!("energy resolution {resolution}")));
        }
        // the accumulator counts units of `resolution` microjoules
        Ok((count as f64 * f64::from(resolution)) as u64)
    }

    /// amd-smi's energy counter is read on every GPU it supports; without it there is no
    /// energy (its power readings are averages over an unknown window).
    fn power_w(&mut self, _index: u32) -> Result<f64, GpuError> {
        Err(GpuError::NotSupported)
    }

    /// The graphics-engine nanoseconds of each process on the GPU, cumulative.
    fn process_use(&mut self, index: u32) -> Result<Vec<(u32, u64)>, GpuError> {
        let list = self.api.processes.ok_or(GpuError::NotSupported)?;
        let handle = self.handle(index)?;
        let mut records = vec![ProcInfo::empty(); 16];
        for _ in 0..4 {
            let mut count = records.len() as u32;
            // SAFETY: a processor handle amd-smi returned; a buffer of `count` records.
            let rc = unsafe { list(handle, &mut count, records.as_mut_ptr()) };
            if rc == AMDSMI_STATUS_OUT_OF_RESOURCES {
                if records.len() >= MAX_PROCESSES {
                    return Err(GpuError::Failed(format!(
                        "more than {MAX_PROCESSES} processes use it, the most read"
                    )));
                }
                let wanted = (count as usize).max(records.len() * 2).min(MAX_PROCESSES);
                records = vec![ProcInfo::empty(); wanted];
                continue;
            }
            amd_check(rc)?;
            records.truncate((count as usize).min(records.len()));
            return Ok(records.iter().map(|r| (r.pid, r.gfx_ns)).collect());
        }
        Err(GpuError::Failed("the process list keeps growing".into()))
    }
}

impl Drop for AmdSmi {
    fn drop(&mut self) {
        // SAFETY: amd-smi was initialised (open_amd_smi returns no AmdSmi otherwise).
        unsafe { (self.api.shut_down)() };
    }
}
