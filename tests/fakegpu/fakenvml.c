/*
 * A stand-in libnvidia-ml.so.1 for the rust_gpu tests: NVML's signatures and return codes
 * (nvml.h) for the calls the plugin makes, over the GPUs of fakegpu.h.
 */
#include "fakegpu.h"

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15

struct nvmlDevice_st {
    unsigned index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

static struct nvmlDevice_st devices[MAX_GPUS];
static int initialized;

nvmlReturn_t nvmlInit_v2(void)
{
    if (driver_missing())
        return NVML_ERROR_DRIVER_NOT_LOADED;
    load_gpus();
    for (unsigned i = 0; i < gpu_count; i++)
        devices[i].index = i;
    initialized++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    initialized--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= gpu_count || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    double reload_ns;
    if (gpu_mode(gpu_minor[index], &reload_ns) == MODE_NOPERM)
        return NVML_ERROR_NO_PERMISSION;
    *device = &devices[index];
    return NVML_SUCCESS;
}

static int valid(nvmlDevice_t device)
{
    return initialized && device >= devices && device < devices + gpu_count;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    if (!valid(device) || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = gpu_minor[device->index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    if (!valid(device) || !uuid)
        return NVML_ERROR_INVALID_ARGUMENT;
    int n = snprintf(uuid, length, "GPU-fake-%u", gpu_minor[device->index]);
    return n < 0 || (unsigned)n >= length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

/* Millijoules since the driver was loaded. */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    if (!valid(device) || !energy)
        return NVML_ERROR_INVALID_ARGUMENT;
    double reload_ns, watts;
    unsigned minor = gpu_minor[device->index];
    switch (gpu_mode(minor, &reload_ns)) {
    case MODE_LOST: return NVML_ERROR_GPU_IS_LOST;
    case MODE_NOSUPPORT: return NVML_ERROR_NOT_SUPPORTED;
    case MODE_NOPERM: return NVML_ERROR_NO_PERMISSION;
    case MODE_OK: break;
    }
    *energy = (unsigned long long)(counter_joules(minor, reload_ns, &watts) * 1000.0);
    return NVML_SUCCESS;
}

/* Milliwatts. */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    if (!valid(device) || !power)
        return NVML_ERROR_INVALID_ARGUMENT;
    double reload_ns, watts;
    unsigned minor = gpu_minor[device->index];
    if (gpu_mode(minor, &reload_ns) == MODE_LOST)
        return NVML_ERROR_GPU_IS_LOST;
    counter_joules(minor, reload_ns, &watts);
    *power = (unsigned int)(watts * 1000.0);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/*
 * The samples of the sampling periods that ended after `lastSeenTimeStamp` (CPU µs) and
 * are still in the driver's buffer, one per live process with a non-zero use per period.
 * A NULL buffer asks for the count (INSUFFICIENT_SIZE with it); NOT_FOUND when none is new.
 */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp)
{
    if (!valid(device) || !processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    double reload_ns;
    unsigned minor = gpu_minor[device->index];
    if (gpu_mode(minor, &reload_ns) == MODE_LOST)
        return NVML_ERROR_GPU_IS_LOST;
    unsigned pids[MAX_PROCS], utils[MAX_PROCS];
    unsigned procs = gpu_procs(minor, pids, utils);
    unsigned long long now_us = (unsigned long long)(now_ns() / 1000.0);
    unsigned long long last_end = now_us / SAMPLE_US * SAMPLE_US;
    unsigned long long first_end = last_end - (BUFFER_SAMPLES - 1) * SAMPLE_US;
    if (first_end <= lastSeenTimeStamp)
        first_end = (lastSeenTimeStamp / SAMPLE_US + 1) * SAMPLE_US;
    unsigned periods = first_end <= last_end ? (unsigned)((last_end - first_end) / SAMPLE_US + 1) : 0;
    unsigned needed = periods * procs;
    if (needed == 0) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (!utilization || *processSamplesCount < needed) {
        *processSamplesCount = needed;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned n = 0;
    for (unsigned p = 0; p < periods; p++)
        for (unsigned i = 0; i < procs; i++) {
            nvmlProcessUtilizationSample_t *s = &utilization[n++];
            s->pid = pids[i];
            s->timeStamp = first_end + p * SAMPLE_US;
            s->smUtil = utils[i];
            s->memUtil = s->encUtil = s->decUtil = 0;
        }
    *processSamplesCount = n;
    return NVML_SUCCESS;
}
