/*
 * A stand-in libamd_smi.so for the rust_gpu tests: amd-smi's signatures and status codes
 * (amd_smi/amdsmi.h) for the calls the plugin makes, over the GPUs of fakegpu.h (minors
 * are DRM render-node minors, 128 and up). One socket holds every GPU.
 */
#include "fakegpu.h"

#include <stdint.h>

typedef int amdsmi_status_t;
#define AMDSMI_STATUS_SUCCESS 0
#define AMDSMI_STATUS_INVAL 1
#define AMDSMI_STATUS_NOT_SUPPORTED 2
#define AMDSMI_STATUS_NO_PERM 10
#define AMDSMI_STATUS_OUT_OF_RESOURCES 15
#define AMDSMI_STATUS_NOT_INIT 32
#define AMDSMI_STATUS_DRIVER_NOT_LOADED 34
#define AMDSMI_INIT_AMD_GPUS (1 << 1)
/* microjoules per count, as amd-smi reports for MI200/MI300 */
#define RESOLUTION_UJ 15.3f

typedef void *amdsmi_socket_handle;
typedef void *amdsmi_processor_handle;

static int initialized;
static int the_socket;
static unsigned processors[MAX_GPUS];

amdsmi_status_t amdsmi_init(uint64_t init_flags)
{
    if (!(init_flags & AMDSMI_INIT_AMD_GPUS))
        return AMDSMI_STATUS_INVAL;
    if (driver_missing())
        return AMDSMI_STATUS_DRIVER_NOT_LOADED;
    load_gpus();
    for (unsigned i = 0; i < gpu_count; i++)
        processors[i] = i;
    initialized = 1;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_shut_down(void)
{
    initialized = 0;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_socket_handles(uint32_t *socket_count, amdsmi_socket_handle *socket_handles)
{
    if (!initialized)
        return AMDSMI_STATUS_NOT_INIT;
    if (!socket_count)
        return AMDSMI_STATUS_INVAL;
    if (socket_handles && *socket_count >= 1)
        socket_handles[0] = &the_socket;
    *socket_count = 1;
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle socket_handle,
                                             uint32_t *processor_count,
                                             amdsmi_processor_handle *processor_handles)
{
    if (!initialized)
        return AMDSMI_STATUS_NOT_INIT;
    if (socket_handle != &the_socket || !processor_count)
        return AMDSMI_STATUS_INVAL;
    if (processor_handles) {
        uint32_t n = *processor_count < gpu_count ? *processor_count : gpu_count;
        for (uint32_t i = 0; i < n; i++)
            processor_handles[i] = &processors[i];
        *processor_count = n;
    } else {
        *processor_count = gpu_count;
    }
    return AMDSMI_STATUS_SUCCESS;
}

static int index_of(amdsmi_processor_handle h)
{
    unsigned *p = h;
    return initialized && p >= processors && p < processors + gpu_count ? (int)*p : -1;
}

amdsmi_status_t amdsmi_get_gpu_drm_render_minor(amdsmi_processor_handle processor_handle, uint32_t *minor)
{
    int i = index_of(processor_handle);
    if (i < 0 || !minor)
        return AMDSMI_STATUS_INVAL;
    *minor = gpu_minor[i];
    return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_energy_count(amdsmi_processor_handle processor_handle, uint64_t *energy_accumulator,
                                        float *counter_resolution, uint64_t *timestamp)
{
    int i = index_of(processor_handle);
    if (i < 0 || !energy_accumulator || !counter_resolution || !timestamp)
        return AMDSMI_STATUS_INVAL;
    double reload_ns, watts;
    switch (gpu_mode(gpu_minor[i], &reload_ns)) {
    case MODE_LOST: return AMDSMI_STATUS_INVAL;
    case MODE_NOSUPPORT: return AMDSMI_STATUS_NOT_SUPPORTED;
    case MODE_NOPERM: return AMDSMI_STATUS_NO_PERM;
    case MODE_OK: break;
    }
    double joules = counter_joules(gpu_minor[i], reload_ns, &watts);
    *energy_accumulator = (uint64_t)(joules * 1e6 / RESOLUTION_UJ);
    *counter_resolution = RESOLUTION_UJ;
    *timestamp = (uint64_t)now_ns();
    return AMDSMI_STATUS_SUCCESS;
}

/* amdsmi_proc_info_t of ROCm 6.2 and later. */
#define AMDSMI_MAX_STRING_LENGTH 256
typedef struct {
    char name[AMDSMI_MAX_STRING_LENGTH];
    uint32_t pid;
    uint64_t mem;
    struct {
        uint64_t gfx; /* ns */
        uint64_t enc; /* ns */
        uint32_t reserved[12];
    } engine_usage;
    struct {
        uint64_t gtt_mem;
        uint64_t cpu_mem;
        uint64_t vram_mem;
        uint32_t reserved[10];
    } memory_usage;
    char container_name[AMDSMI_MAX_STRING_LENGTH];
    uint32_t cu_occupancy;
    uint32_t evicted_time;
    uint32_t reserved[10];
} amdsmi_proc_info_t;

/*
 * The live processes of procs.<minor>, each with its graphics-engine time so far at its
 * percentage of the time (since the epoch: only its growth is meaningful). A buffer too
 * small for them: OUT_OF_RESOURCES with the count needed.
 */
amdsmi_status_t amdsmi_get_gpu_process_list(amdsmi_processor_handle processor_handle, uint32_t *max_processes,
                                            amdsmi_proc_info_t *list)
{
    int i = index_of(processor_handle);
    if (i < 0 || !max_processes)
        return AMDSMI_STATUS_INVAL;
    unsigned pids[MAX_PROCS], utils[MAX_PROCS];
    unsigned n = gpu_procs(gpu_minor[i], pids, utils);
    if (!list || *max_processes < n) {
        *max_processes = n;
        return AMDSMI_STATUS_OUT_OF_RESOURCES;
    }
    double now = now_ns();
    for (unsigned k = 0; k < n; k++) {
        memset(&list[k], 0, sizeof(list[k]));
        snprintf(list[k].name, sizeof(list[k].name), "task%u", pids[k]);
        list[k].pid = pids[k];
        list[k].engine_usage.gfx = (uint64_t)(now * utils[k] / 100.0);
    }
    *max_processes = n;
    return AMDSMI_STATUS_SUCCESS;
}
