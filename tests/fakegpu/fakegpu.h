/*
 * What the stand-in NVML and amd-smi libraries share: GPUs whose energy counters know the
 * true joules, under the tests' control.
 *
 * Control files, read at every call, in the directory the .so was loaded from (dladdr):
 *   gpus       the GPUs in enumeration order, by device-file minor ("5 3": index 0 is
 *              /dev/nvidia5, as on real nodes where the order is the PCI bus's, not the
 *              minors').
 *   power.log  "<unix ns> <minor> <watts>" lines, appended by set_power.sh: the power of
 *              each GPU from then on (0 W before its first line). A GPU's counter is the
 *              exact integral of this schedule, plus a large offset (the driver was loaded
 *              long ago).
 *   mode.<minor>  ok (default) | hang (every call on this GPU blocks while the file says
 *              so) | lost (NVML_ERROR_GPU_IS_LOST) | nosupport (no energy counter: the
 *              power must be integrated) | noperm (NVML: no handle, NO_PERMISSION, as
 *              for a GPU the process may not open) | reload@<unix ns> (the driver reloaded then: the
 *              counter restarts from 0 at that instant).
 *   driver     "missing": initialisation fails as without a loaded driver.
 *   mig.<minor>  "<gi> <ci> <sms> <sm%> <uuid>" lines: the GPU is partitioned into these MIG
 *              instances (GPM reports each GPU instance busy at sm%); it then reports no
 *              per-process utilization, as NVML does not on MIG-enabled GPUs.
 *   power_reads.<minor>  when present, each power read of the GPU (NVML) appends its instant
 *              ("<unix ns>"): a test bounds what sampling its power can miss.
 *   procs.<minor>  "<pid> <sm%>" lines, appended by use_gpu.sh: the processes using the GPU
 *              and their SM utilization while they live. The driver samples every
 *              SAMPLE_US and reports each process's mean since the caller's last read; one at 0% is
 *              not reported.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <errno.h>
#include <unistd.h>

#define MAX_GPUS 16
#define SAMPLE_US 100000ULL
#define MAX_PROCS 64
#define COUNTER_OFFSET_J 123456.0

static char control_dir[PATH_MAX];
static unsigned gpu_minor[MAX_GPUS];
static unsigned gpu_count;

static void find_control_dir(void)
{
    Dl_info info;
    if (control_dir[0] || !dladdr((void *)find_control_dir, &info) || !info.dli_fname)
        return;
    snprintf(control_dir, sizeof(control_dir), "%s", info.dli_fname);
    char *slash = strrchr(control_dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(control_dir, sizeof(control_dir), ".");
}

/* The control file `name` into buf (empty if absent), without a trailing newline. */
static void read_control(const char *name, char *buf, size_t len)
{
    char path[PATH_MAX + 64];
    buf[0] = '\0';
    snprintf(path, sizeof(path), "%s/%s", control_dir, name);
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
}

static int driver_missing(void)
{
    char text[64];
    find_control_dir();
    read_control("driver", text, sizeof(text));
    return strcmp(text, "missing") == 0;
}

static void load_gpus(void)
{
    char text[256];
    read_control("gpus", text, sizeof(text));
    gpu_count = 0;
    for (char *p = text, *end; gpu_count < MAX_GPUS; p = end) {
        unsigned long m = strtoul(p, &end, 10);
        if (end == p)
            break;
        gpu_minor[gpu_count++] = (unsigned)m;
    }
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

enum mode { MODE_OK, MODE_LOST, MODE_NOSUPPORT, MODE_NOPERM };

/* The GPU's mode; blocks while it is "hang". `reload_ns` gets the reload instant (0: none). */
static enum mode gpu_mode(unsigned minor, double *reload_ns)
{
    char name[32], text[64];
    snprintf(name, sizeof(name), "mode.%u", minor);
    for (;;) {
        read_control(name, text, sizeof(text));
        if (strcmp(text, "hang") != 0)
            break;
        usleep(10000);
    }
    *reload_ns = 0;
    if (strncmp(text, "reload@", 7) == 0)
        *reload_ns = strtod(text + 7, NULL);
    if (strcmp(text, "lost") == 0)
        return MODE_LOST;
    if (strcmp(text, "nosupport") == 0)
        return MODE_NOSUPPORT;
    if (strcmp(text, "noperm") == 0)
        return MODE_NOPERM;
    return MODE_OK;
}

/* Joules of the GPU's power schedule from `from_ns` to `to_ns`, and its power at `to_ns`. */
static double schedule_joules(unsigned minor, double from_ns, double to_ns, double *watts_now)
{
    char path[PATH_MAX + 16];
    double joules = 0, at = 0, watts = 0;
    snprintf(path, sizeof(path), "%s/power.log", control_dir);
    FILE *f = fopen(path, "re");
    if (f) {
        double t, w;
        unsigned m;
        while (fscanf(f, "%lf %u %lf", &t, &m, &w) == 3) {
            if (m != minor || t > to_ns)
                continue;
            double a = at > from_ns ? at : from_ns;
            if (t > a)
                joules += watts * (t - a) / 1e9;
            at = t;
            watts = w;
        }
        fclose(f);
    }
    double a = at > from_ns ? at : from_ns;
    if (to_ns > a)
        joules += watts * (to_ns - a) / 1e9;
    *watts_now = watts;
    return joules;
}

/* The GPU's energy counter now, in joules (restarting from 0 at a driver reload). */
static double counter_joules(unsigned minor, double reload_ns, double *watts_now)
{
    double now = now_ns();
    if (reload_ns > 0 && reload_ns <= now)
        return schedule_joules(minor, reload_ns, now, watts_now);
    return COUNTER_OFFSET_J + schedule_joules(minor, 0, now, watts_now);
}

/* The live processes using GPU `minor` with a non-zero SM utilization, from procs.<minor>. */
static unsigned gpu_procs(unsigned minor, unsigned *pids, unsigned *utils)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/procs.%u", control_dir, minor);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    unsigned n = 0, pid, util;
    while (n < MAX_PROCS && fscanf(f, "%u %u", &pid, &util) == 2) {
        if (util == 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
            continue;
        pids[n] = pid;
        utils[n++] = util;
    }
    fclose(f);
    return n;
}
