/*
 * A stand-in libnvidia-ml.so.1 for the rust_gpu tests: NVML's signatures and return codes
 * (nvml.h) for the calls the plugin makes, over the GPUs of fakegpu.h.
 */
#include "fakegpu.h"

#include <fcntl.h>

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
    /* a MIG instance's handle: its line in mig.<minor> */
    int mig;
    unsigned line;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

#define MAX_MIG 7
static struct nvmlDevice_st devices[MAX_GPUS];
static struct nvmlDevice_st mig_devices[MAX_GPUS][MAX_MIG];
static int initialized;

nvmlReturn_t nvmlInit_v2(void)
{
    if (driver_missing())
        return NVML_ERROR_DRIVER_NOT_LOADED;
    load_gpus();
    for (unsigned i = 0; i < gpu_count; i++) {
        devices[i].index = i;
        for (unsigned k = 0; k < MAX_MIG; k++)
            mig_devices[i][k] = (struct nvmlDevice_st){.index = i, .mig = 1, .line = k};
    }
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

static int valid_mig(nvmlDevice_t device)
{
    return initialized && device >= &mig_devices[0][0] && device < &mig_devices[0][0] + MAX_GPUS * MAX_MIG &&
           device->mig && device->index < gpu_count;
}

/* One MIG instance: a line "<gi> <ci> <sms> <sm%> <uuid>" of mig.<minor>. */
struct mig_line {
    unsigned gi, ci, sms, sm;
    char uuid[64];
};

/* The MIG instances of GPU `minor` (0: MIG is off). */
static unsigned mig_lines(unsigned minor, struct mig_line *lines)
{
    char name[32], text[1024];
    snprintf(name, sizeof(name), "mig.%u", minor);
    read_control(name, text, sizeof(text));
    unsigned n = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && n < MAX_MIG;
         line = strtok_r(NULL, "\n", &save))
        if (sscanf(line, "%u %u %u %u %63s", &lines[n].gi, &lines[n].ci, &lines[n].sms, &lines[n].sm,
                   lines[n].uuid) == 5)
            n++;
    return n;
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
    if (!uuid || !(valid(device) || valid_mig(device)))
        return NVML_ERROR_INVALID_ARGUMENT;
    int n;
    if (device->mig) {
        struct mig_line lines[MAX_MIG];
        if (device->line >= mig_lines(gpu_minor[device->index], lines))
            return NVML_ERROR_NOT_FOUND;
        n = snprintf(uuid, length, "%s", lines[device->line].uuid);
    } else
        n = snprintf(uuid, length, "GPU-fake-%u", gpu_minor[device->index]);
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

/* Appends the instant of a power read of GPU `minor` to power_reads.<minor>, if present. */
static void note_power_read(unsigned minor)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/power_reads.%u", control_dir, minor);
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
        return;
    char line[64];
    int n = snprintf(line, sizeof(line), "%.0f\n", now_ns());
    if (n > 0 && write(fd, line, (size_t)n) != n) {
        /* an instant lost: the test's bound is wider for it, never narrower */
    }
    close(fd);
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
    note_power_read(minor);
    *power = (unsigned int)(watts * 1000.0);
    return NVML_SUCCESS;
}

/* Clocks: not supported (as on a GPU that hides them); Slurm logs its clocks at detection
 * and reads them for --gpu-freq. */
nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz)
{
    (void)count;
    (void)clocksMHz;
    return valid(device) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                  unsigned int *count, unsigned int *clocksMHz)
{
    (void)memoryClockMHz;
    return nvmlDeviceGetSupportedMemoryClocks(device, count, clocksMHz);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
    (void)type;
    (void)clock;
    return valid(device) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, int type, unsigned int *clock)
{
    return nvmlDeviceGetClockInfo(device, type, clock);
}

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/*
 * As the real NVML answers (seen on an H200, driver 580.159.04): one entry per live process
 * with a non-zero use, its mean SM utilization over its samples since `lastSeenTimeStamp`
 * (CPU µs; here its constant use), time-stamped with the newest sampling period's end;
 * NOT_FOUND when no period ended since. A NULL buffer asks for the count:
 * INSUFFICIENT_SIZE with a buffer size, not the number of entries (the real one said 72
 * for one process).
 */
#define PROCESS_SAMPLES_BUFFER 72
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
    struct mig_line lines[MAX_MIG];
    if (mig_lines(minor, lines))
        return NVML_ERROR_NOT_SUPPORTED; /* not on MIG-enabled GPUs */
    unsigned pids[MAX_PROCS], utils[MAX_PROCS];
    unsigned procs = gpu_procs(minor, pids, utils);
    unsigned long long now_us = (unsigned long long)(now_ns() / 1000.0);
    unsigned long long last_end = now_us / SAMPLE_US * SAMPLE_US;
    if (procs == 0 || last_end <= lastSeenTimeStamp) {
        *processSamplesCount = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (!utilization || *processSamplesCount < procs) {
        *processSamplesCount = PROCESS_SAMPLES_BUFFER > procs ? PROCESS_SAMPLES_BUFFER : procs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < procs; i++) {
        nvmlProcessUtilizationSample_t *s = &utilization[i];
        s->pid = pids[i];
        s->timeStamp = last_end;
        s->smUtil = utils[i];
        s->memUtil = s->encUtil = s->decUtil = 0;
    }
    *processSamplesCount = procs;
    return NVML_SUCCESS;
}

/* ---- MIG: instances listed in mig.<minor> ------------------------------------------ */

#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    if (!valid(device) || !currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mig_line lines[MAX_MIG];
    *currentMode = *pendingMode =
        mig_lines(gpu_minor[device->index], lines) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    if (!valid(device) || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mig_line lines[MAX_MIG];
    *count = mig_lines(gpu_minor[device->index], lines) ? MAX_MIG : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
    if (!valid(device) || !migDevice || index >= MAX_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mig_line lines[MAX_MIG];
    if (index >= mig_lines(gpu_minor[device->index], lines))
        return NVML_ERROR_NOT_FOUND;
    *migDevice = &mig_devices[device->index][index];
    return NVML_SUCCESS;
}

/* The line of a MIG handle, or NULL. */
static struct mig_line *mig_of(nvmlDevice_t device, struct mig_line *lines)
{
    if (!valid_mig(device) || device->line >= mig_lines(gpu_minor[device->index], lines))
        return NULL;
    return &lines[device->line];
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct mig_line lines[MAX_MIG], *m = mig_of(device, lines);
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!m)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = m->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct mig_line lines[MAX_MIG], *m = mig_of(device, lines);
    if (!id)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!m)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = m->ci;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* MIG handles only, as NVML documents. */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    struct mig_line lines[MAX_MIG], *m = mig_of(device, lines);
    if (!attributes)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!m)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(attributes, 0, sizeof(*attributes));
    attributes->multiprocessorCount = m->sms;
    attributes->gpuInstanceSliceCount = attributes->computeInstanceSliceCount = m->sms / 14;
    attributes->memorySizeMB = 10240ULL * (m->sms / 14);
    return NVML_SUCCESS;
}

/* ---- GPM: each GPU instance's SM activity, at its sm% from mig.<minor> -------------- */

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

struct nvmlGpmSample_st {
    unsigned minor, gi;
    double at_ns;
    double busy; /* percent-nanoseconds so far at the instance's sm% */
};
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} nvmlGpmMetric_t;

/* sized as an older header (98 metrics): NVML reads only numMetrics of them */
typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[98];
} nvmlGpmMetricsGet_t;

#define NVML_GPM_METRIC_SM_UTIL 2

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support)
{
    if (!valid(device) || !support)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    support->isSupportedDevice = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample)
{
    if (!sample)
        return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof(**sample));
    return *sample ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample)
{
    free(sample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t sample)
{
    if (!valid(device) || !sample)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mig_line lines[MAX_MIG];
    unsigned minor = gpu_minor[device->index], n = mig_lines(minor, lines);
    for (unsigned k = 0; k < n; k++)
        if (lines[k].gi == gpuInstanceId) {
            sample->minor = minor;
            sample->gi = gpuInstanceId;
            sample->at_ns = now_ns();
            sample->busy = lines[k].sm * sample->at_ns;
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    if (!metricsGet || metricsGet->version != 1 || metricsGet->numMetrics > 98 || !metricsGet->sample1 ||
        !metricsGet->sample2)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmSample_t a = metricsGet->sample1, b = metricsGet->sample2;
    if (a->minor != b->minor || a->gi != b->gi || b->at_ns <= a->at_ns)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *m = &metricsGet->metrics[i];
        if (m->metricId == NVML_GPM_METRIC_SM_UTIL) {
            m->value = (b->busy - a->busy) / (b->at_ns - a->at_ns);
            m->nvmlReturn = NVML_SUCCESS;
        } else
            m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

/* ---- what Slurm's own gpu/nvml asks (AutoDetect=nvml, jobacct's GPU memory) ----------
 * Enough for its detection and its per-task use, so that a dry run of
 * tests/hardware/slurm_on_a_real_gpu.py loads the real plugin against this library: a
 * PCIe GPU without NVLink, close to every CPU, that reports no process memory. */

static nvmlReturn_t put_string(char *buf, unsigned int length, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    int n = snprintf(buf, length, "%s", s);
    return n < 0 || (unsigned)n >= length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return put_string(version, length, "fakegpu");
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return put_string(version, length, "fakegpu");
}

/* The control file `name.<minor>` names the device as a real one (e.g. "NVIDIA GH200
 * 480GB"); absent: "fakegpu". */
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    if (!valid(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    char file[32], text[96];
    snprintf(file, sizeof(file), "name.%u", gpu_minor[device->index]);
    read_control(file, text, sizeof(text));
    return put_string(name, length, text[0] ? text : "fakegpu");
}

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

/* One bus per GPU, numbered by its minor: distinct, as Slurm's NVLink table needs. */
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    if (!valid(device) || !pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    pci->bus = 0x10 + gpu_minor[device->index];
    pci->pciDeviceId = 0x233010de;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02x:00.0", pci->bus);
    snprintf(pci->busId, sizeof(pci->busId), "00000000:%02x:00.0", pci->bus);
    return NVML_SUCCESS;
}

/* Every online CPU (one NUMA node). */
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    if (!valid(device) || !cpuSet)
        return NVML_ERROR_INVALID_ARGUMENT;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned bits = 8 * sizeof(unsigned long);
    memset(cpuSet, 0, cpuSetSize * sizeof(unsigned long));
    for (long c = 0; c < cpus && (unsigned long)c < (unsigned long)cpuSetSize * bits; c++)
        cpuSet[c / bits] |= 1UL << (c % bits);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive)
{
    (void)link;
    (void)isActive;
    return valid(device) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    (void)link;
    (void)pci;
    return valid(device) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

/* No process holds memory here: none listed (NVML's answer for an unused GPU). */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
    (void)infos;
    if (!valid(device) || !infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return no_processes(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    return no_processes(device, infoCount, infos);
}
