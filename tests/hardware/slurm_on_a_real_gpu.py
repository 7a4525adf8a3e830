#!/usr/bin/env python3
"""rust_gpu under real Slurm jobs on a real NVIDIA GPU: one prepared run (issue 31).

A single-node Slurm (its own daemons, from a bundle carried to the GPU machine; no munge,
no slurmdbd, nothing installed) runs, after 12 s of the idle GPU (rust_gpu learns its
static power),
  1. one job holding the whole GPU (--gres=gpu:1) under a real CUDA load, then one that
     holds it and never uses it (all of its energy is idle-held), then
  2. two jobs side by side on the GPU's shards (--gres=shard:N each): one busy, one idle,
and compares each job's figure from rust_gpu (its final job counter in the plugin's
EnergyMetricsFile, the figure Slurm's accounting would get; sstat mid-job as a check)
with NVML's own energy counter read around the job (sampled every 50 ms; a job's window
is the life of its extern slurmstepd, where the plugin starts and stops charging it), and
the shard jobs' sum with the GPU's energy over their common window. It prints a table.

    # on the build machine (here): Slurm 26.05.3 with gpu/nvml, auth/slurm and cgroup/v2
    # (ci/build-slurm.sh with SLURM_NVML_H; docs/testing.md) and the plugins built against it
    python3 tests/hardware/slurm_on_a_real_gpu.py pack        # -> target/slurm-gpu-bundle
    # the same end to end with the stand-in NVML (tests/fakegpu), as root, no GPU needed:
    python3 tests/hardware/slurm_on_a_real_gpu.py run --dry-run
    # on the GPU machine, as root, with the working tree and target/slurm-gpu-bundle:
    python3 tests/hardware/slurm_on_a_real_gpu.py run [--out DIR]

Choices made on the machine, each printed (and forced with options):
  * GRES: AutoDetect=nvml where the bundle's Slurm has gpu/nvml (needs nvml.h at Slurm's
    build; --dry-run: against the stand-in, which answers what gpu/nvml asks), else AutoDetect=nvidia where the driver shows /proc/driver/nvidia/gpus, else
    AutoDetect=off with the GPU's /dev/nvidiaN (NVML's minor number). More than one GPU:
    only NVML's GPU 0, by its file. Shards: 8 on that GPU.
  * cgroups: cgroup/v2 where /sys/fs/cgroup is cgroup2 with controllers and the bundle has
    cgroup_v2.so (needs dbus and bpf headers at Slurm's build); else cgroup/v1 where the
    v1 devices controller is mounted; both with proctrack/cgroup, task/cgroup,
    ConstrainDevices=yes and EnergyAttribution=shared. Else proctrack/linuxproc, no
    cgroups, EnergyAttribution=node. A configuration under which slurmd does not come up
    is logged and the next one tried (off GRES, then no cgroups).
  * auth: auth/slurm + cred/slurm (a key in the temp dir) where the bundle has
    auth_slurm.so and serializer_json.so (libjwt and json-c at Slurm's build), else auth/none + cred/none: every
    process here is root on one machine, so nothing is lost for this check.
  * energy: rust_gpu, stacked after rust_rapl (EnergyRaplDomains=package) where the CPUs
    expose RAPL as rust_rapl reads it (powercap's intel-rapl, or a readable
    /dev/cpu/N/msr). RAPL's own package counter is then sampled every 50 ms beside NVML's,
    first that works: perf's power/energy-pkg/ (the kernel's PMU, through perf_event_open),
    powercap's energy_uj, the MSR: rust_rapl's node counter is compared with it at the
    times of its own samples, and each job's rust_rapl part is printed beside the
    packages' energy over the job. No RAPL: said so, rust_gpu alone.
  * load (real GPU), first that works: python3 with torch (bf16 matrix products), python3
    with cupy (fp32 matrix products), a CUDA C burner compiled with nvcc. It is run for
    2 s before the jobs to show that it draws power. --dry-run: the stand-in's
    set_power.sh/use_gpu.sh (240 W and 80% SM while busy, 40 W idle).
  * NVML: libnvidia-ml.so.1 as the loader finds it, else the driver's usual places
    (--nvml PATH); nvidia-smi's total_energy_consumption is printed beside the first read.

Rules: root; all state in a temp dir (/tmp/sgpu.*, removed unless --keep); the script is
a child subreaper, so every Slurm process it starts (slurmstepds included) is its child
and is stopped at exit, whatever happens (SIGTERM, SIGINT, an error, --deadline). The
only outside state touched is what Slurm's cgroup plugin creates for the jobs (job ids
from a random high range), removed at exit.
Output: the table and a log on stdout; with --out DIR: report.txt and logs.tar.gz there.
"""
import argparse
import ctypes
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FAKEGPU = os.path.join(REPO, "tests", "fakegpu")
DEFAULT_BUNDLE = os.path.join(REPO, "target", "slurm-gpu-bundle")
SHARDS = 8          # shards configured on the GPU; each shard job holds half
LOAD_SECS = 20      # seconds of load in each loaded job
HELD_SECS = 8       # seconds a job holds the whole GPU and never uses it
# idle seconds before the first job: without EnergyAttributionIdleWatts rust_gpu takes a
# GPU's static power as the lowest it held over 10 s since slurmd started; with less, the
# shard jobs' split went by a static power learned from loaded seconds (100-170 W for a 40 W
# stand-in: the idle job got 21% of the GPU, not 9%)
SETTLE_SECS = 12
PR_SET_CHILD_SUBREAPER = 36

# ---------------------------------------------------------------------------- pack ---

# Slurm's parts the run needs (the bundle holds these, stripped).
SLURM_SBIN = ["slurmctld", "slurmd", "slurmstepd"]
SLURM_BIN = ["srun", "sbatch", "scontrol", "sstat", "squeue", "sinfo", "scancel"]
# plugins by name prefix: whichever of these the build has
SLURM_PLUGINS = [
    "auth_none", "auth_slurm", "cred_none", "select_cons_tres",
    "gres_gpu", "gres_shard", "gpu_nvml", "gpu_nvidia", "gpu_generic",
    "proctrack_linuxproc", "proctrack_cgroup", "task_cgroup", "task_affinity",
    "cgroup_v1", "cgroup_v2", "jobacct_gather_linux", "jobacct_gather_cgroup",
    "sched_backfill", "sched_builtin", "priority_basic", "topology_flat", "hash_k12",
    "serializer_json", "tls_none", "compress_none", "prep_script", "certgen_script", "certmgr_script",
    "url_parser_internal", "namespace_linux", "mpi_pmi2",
    "libslurmfull", "libslurm_pmi",
]
OUR_PLUGINS = ["acct_gather_energy_rust_gpu", "acct_gather_energy_rust_rapl"]


def pack(args):
    """Copies the needed parts of an installed Slurm and the plugins built against it into
    one directory (carried to the GPU machine as one path), stripped; prints its size."""
    prefix, target, out = args.slurm, args.target, args.bundle
    version = open(os.path.join(prefix, ".build-complete")).read().split("version=")[1].split()[0] \
        if os.path.exists(os.path.join(prefix, ".build-complete")) else "?"
    shutil.rmtree(out, ignore_errors=True)
    for d in ("slurm/sbin", "slurm/bin", "slurm/lib/slurm", "energy"):
        os.makedirs(os.path.join(out, d))
    copied = []

    def put(src, dst):
        shutil.copy2(src, dst)
        subprocess.run(["strip", "--strip-unneeded", dst], check=False,
                       stderr=subprocess.DEVNULL)
        copied.append(dst)

    for name in SLURM_SBIN:
        put(os.path.join(prefix, "sbin", name), os.path.join(out, "slurm/sbin", name))
    for name in SLURM_BIN:
        put(os.path.join(prefix, "bin", name), os.path.join(out, "slurm/bin", name))
    plugdir = os.path.join(prefix, "lib", "slurm")
    have = []
    for name in SLURM_PLUGINS:
        src = os.path.join(plugdir, name + ".so")
        if os.path.exists(src):
            put(src, os.path.join(out, "slurm/lib/slurm", name + ".so"))
            have.append(name)
    for name in OUR_PLUGINS:
        src = os.path.join(target, "release", "lib" + name + ".so")
        if not os.path.exists(src):
            sys.exit("pack: %s missing: build the plugins against %s first" % (src, prefix))
        put(src, os.path.join(out, "energy", name + ".so"))
    probe = os.path.join(target, "release", "examples", "gpu_probe")
    if os.path.exists(probe):
        put(probe, os.path.join(out, "gpu_probe"))
    deps = carry_libraries(list(copied), os.path.join(out, "slurm/lib/slurm"), os.path.join(out, "slurm/deps"))
    for lib in deps:
        put(lib, os.path.join(out, "slurm/deps", os.path.basename(lib)))
    missing = [n for n in SLURM_PLUGINS if n not in have]
    with open(os.path.join(out, "MANIFEST"), "w") as f:
        f.write("slurm=%s\nprefix=%s\nplugins_target=%s\nslurm_plugins=%s\nnot_in_this_build=%s\ndeps=%s\n" % (
            version, prefix, target, " ".join(have), " ".join(missing),
            " ".join(os.path.basename(d) for d in deps)))
    size = sum(os.path.getsize(p) for p in copied)
    print("pack: %s: Slurm %s (%d plugins), rust_gpu, rust_rapl%s: %.1f MiB" % (
        out, version, len(have), ", gpu_probe" if os.path.exists(probe) else "", size / 2**20))
    print("pack: not in this Slurm build: %s" % (" ".join(missing) or "none"))
    print("pack: libraries carried (used where the GPU machine lacks them): %s" % (
        " ".join(os.path.basename(d) for d in deps) or "none"))
    for need, why in (("auth_slurm", "auth/slurm (libjwt at build): auth/none is used"),
                      ("serializer_json", "serializer/json (json-c at build), which auth/slurm needs: auth/none is used"),
                      ("gpu_nvml", "gpu/nvml (nvml.h at build): AutoDetect=nvidia or off is used"),
                      ("cgroup_v2", "cgroup/v2 (dbus, bpf at build): v1 or no cgroups")):
        if need not in have:
            print("pack:   no %s" % why)


# glibc's own libraries: the GPU machine has them (a glibc at least as new as the build's)
SYSTEM_LIBS = re.compile(r"^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux[-\w]*|libgcc_s)\.so")


def carry_libraries(files, bundle_lib, deps_dir):
    """The shared libraries the bundled files need beyond glibc, as this machine resolves
    them (auth/slurm's libjwt, cgroup/v2's libdbus, scontrol's readline, theirs), to be
    carried: the GPU machine may not have them and cannot install them."""
    found = set()
    env = dict(os.environ, LD_LIBRARY_PATH=bundle_lib)
    for f in files:
        r = subprocess.run(["ldd", f], capture_output=True, text=True, env=env)
        for m in re.finditer(r"^\s*(\S+) => (/\S+)", r.stdout, re.M):
            name, path = m.groups()
            if not SYSTEM_LIBS.match(name) and not path.startswith(os.path.dirname(bundle_lib)):
                found.add(path)
    os.makedirs(deps_dir, exist_ok=True)
    return sorted(found)


def machine_lacks(sonames):
    """Of these sonames, those this machine's loader cannot find (ldconfig's cache, the
    usual directories): the only ones taken from the bundle, so that the machine's own
    libraries (its OpenSSL, its libdbus) are used wherever it has them."""
    r = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True)
    have = set(re.findall(r"^\s*(\S+) \(", r.stdout, re.M))
    return [s for s in sonames if s not in have]


# ----------------------------------------------------------------------------- NVML ---

class Nvml:
    """NVML through ctypes: the counters the sampler reads (the real library or the
    stand-in, which has the same signatures)."""

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        r = self.lib.nvmlInit_v2()
        if r != 0:
            raise RuntimeError("nvmlInit_v2: %d" % r)
        n = ctypes.c_uint(0)
        self._ok(self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)), "count")
        self.handles = []
        for i in range(n.value):
            h = ctypes.c_void_p()
            self._ok(self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)), "handle")
            self.handles.append(h)

    @staticmethod
    def _ok(r, what):
        if r != 0:
            raise RuntimeError("NVML %s: return %d" % (what, r))

    def energy_mj(self, i):
        v = ctypes.c_ulonglong(0)
        self._ok(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handles[i], ctypes.byref(v)),
                 "total energy")
        return v.value

    def power_mw(self, i):
        v = ctypes.c_uint(0)
        self._ok(self.lib.nvmlDeviceGetPowerUsage(self.handles[i], ctypes.byref(v)), "power")
        return v.value

    def minor(self, i):
        v = ctypes.c_uint(0)
        self._ok(self.lib.nvmlDeviceGetMinorNumber(self.handles[i], ctypes.byref(v)), "minor")
        return v.value

    def name(self, i):
        fn = getattr(self.lib, "nvmlDeviceGetName", None)
        if fn is None:
            return "(stand-in)"
        buf = ctypes.create_string_buffer(96)
        return buf.value.decode() if fn(self.handles[i], buf, 96) == 0 else "?"


def find_nvml():
    for cand in ("libnvidia-ml.so.1",):
        try:
            ctypes.CDLL(cand)
            for line in open("/proc/self/maps"):
                if "libnvidia-ml" in line:
                    return line.split()[-1]
            return cand
        except OSError:
            pass
    for pat in ("/usr/local/nvidia/lib64/libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                "/usr/lib64/libnvidia-ml.so.1", "/usr/local/cuda/lib64/stubs/none"):
        if os.path.exists(pat):
            return pat
    return None


# ----------------------------------------------------------------------------- RAPL ---

class RaplReference:
    """The CPU packages' energy as RAPL itself counts it, summed over the packages (J): the
    reference rust_rapl is compared with. Sources, first that reads: perf's power PMU
    (energy-pkg: the kernel's own reading, another path than rust_rapl's), powercap's
    package zones, the package MSR. `find()` gives one, or None and why not."""

    PERF_EVENT_OPEN = 298              # x86_64: RAPL is an x86 feature
    MSR_RAPL_POWER_UNIT, MSR_PKG_ENERGY_STATUS = 0x606, 0x611

    def __init__(self, kind, read, parts):
        self.kind, self._read, self.parts = kind, read, parts
        self.last, self.total = None, 0.0

    def joules(self):
        """Cumulative joules since the first read; a counter that went down wrapped (powercap
        at max_energy_range_uj, the MSR at 32 bits): its range is added back."""
        now = self._read()
        if self.last is not None:
            for (v0, span), (v1, _) in zip(self.last, now):
                self.total += v1 - v0 if v1 >= v0 else v1 + span - v0
        self.last = now
        return self.total

    @classmethod
    def find(cls, powercap="/sys/class/powercap", pmu="/sys/bus/event_source/devices/power",
             cpu_dev="/dev/cpu"):
        why = []
        for make in (cls._perf, cls._powercap, cls._msr):
            try:
                ref = make(powercap=powercap, pmu=pmu, cpu_dev=cpu_dev)
                ref.joules()
                return ref, why
            except (OSError, ValueError) as e:
                why.append(str(e))
        return None, why

    @classmethod
    def _perf(cls, pmu, **_):
        if not os.path.isdir(pmu):
            raise OSError("perf: no power PMU (%s)" % pmu)
        ev = open(os.path.join(pmu, "events/energy-pkg")).read().strip()     # event=0x02
        config = int(ev.split("event=")[1].split(",")[0], 0)
        scale = float(open(os.path.join(pmu, "events/energy-pkg.scale")).read())
        ptype = int(open(os.path.join(pmu, "type")).read())
        cpus = [int(c) for c in parse_cpulist(open(os.path.join(pmu, "cpumask")).read())]
        libc = ctypes.CDLL(None, use_errno=True)
        fds = []
        for cpu in cpus:                 # one CPU per package: the PMU's cpumask
            attr = ctypes.create_string_buffer(
                struct.pack("IIQQQQQIIQ", ptype, 64, config, 0, 0, 0, 0, 0, 0, 0), 64)
            fd = libc.syscall(cls.PERF_EVENT_OPEN, attr, -1, cpu, -1, 0)
            if fd < 0:
                raise OSError("perf: perf_event_open(power/energy-pkg/, cpu %d): %s" % (
                    cpu, os.strerror(ctypes.get_errno())))
            fds.append(fd)
        span = 2.0 ** 64 * scale
        return cls("perf power/energy-pkg/ (cpus %s)" % ",".join(map(str, cpus)),
                   lambda: [(int.from_bytes(os.read(fd, 8), "little") * scale, span) for fd in fds],
                   len(fds))

    @classmethod
    def _powercap(cls, powercap, **_):
        zones = sorted(glob.glob(os.path.join(powercap, "intel-rapl:[0-9]*")))
        zones = [z for z in zones if re.search(r"intel-rapl:\d+$", z)
                 and open(os.path.join(z, "name")).read().startswith("package")]
        if not zones:
            raise OSError("powercap: no package zone under %s/intel-rapl:N" % powercap)
        spans = [int(open(os.path.join(z, "max_energy_range_uj")).read()) / 1e6 for z in zones]

        def read():
            return [(int(open(os.path.join(z, "energy_uj")).read()) / 1e6, span) for z, span in zip(zones, spans)]
        return cls("powercap %s" % " ".join(os.path.basename(z) for z in zones), read, len(zones))

    @classmethod
    def _msr(cls, cpu_dev, **_):
        first = {}                      # package -> its first CPU
        for d in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/physical_package_id"),
                        key=lambda p: int(re.search(r"cpu(\d+)/", p).group(1))):
            first.setdefault(int(open(d).read()), int(re.search(r"cpu(\d+)/", d).group(1)))
        paths = [os.path.join(cpu_dev, str(c), "msr") for c in sorted(first.values())]
        if not paths or not os.path.exists(paths[0]):
            raise OSError("msr: no %s (the msr module is not loaded)" % os.path.join(cpu_dev, "0", "msr"))
        fds = [os.open(p, os.O_RDONLY) for p in paths]

        def msr(fd, reg):
            return int.from_bytes(os.pread(fd, 8, reg), "little")
        unit = 0.5 ** ((msr(fds[0], cls.MSR_RAPL_POWER_UNIT) >> 8) & 0x1f)
        return cls("msr 0x611 (%s)" % " ".join(paths),
                   lambda: [((msr(fd, cls.MSR_PKG_ENERGY_STATUS) & 0xffffffff) * unit, 2.0 ** 32 * unit) for fd in fds],
                   len(fds))


def parse_cpulist(text):
    """A kernel CPU list ("0,28", "0-3,8") as the CPUs' numbers."""
    out = []
    for part in text.strip().split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def rust_rapl_readable(powercap="/sys/class/powercap", cpu_dev="/dev/cpu"):
    """Where rust_rapl (EnergyRaplSource=auto) has a source: powercap's intel-rapl, else a
    readable package MSR."""
    if glob.glob(os.path.join(powercap, "intel-rapl:[0-9]*", "energy_uj")):
        return "powercap"
    try:
        fd = os.open(os.path.join(cpu_dev, "0", "msr"), os.O_RDONLY)
        try:
            os.pread(fd, 8, RaplReference.MSR_PKG_ENERGY_STATUS)
            return "msr"
        finally:
            os.close(fd)
    except OSError:
        return None


# ------------------------------------------------------------------------- helpers ---

T0 = time.time()
LOG = []


def say(*a):
    line = " ".join(str(x) for x in a)
    stamp = "[%6.1f s] " % (time.time() - T0)
    print(stamp + line, flush=True)
    LOG.append(stamp + line)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def children(pid=None):
    """Direct children of this process (re-parented orphans included)."""
    me = pid or os.getpid()
    kids = set()
    for tid in os.listdir("/proc/%d/task" % me):
        try:
            with open("/proc/%d/task/%s/children" % (me, tid)) as f:
                kids.update(int(x) for x in f.read().split())
        except OSError:
            pass
    if kids or os.path.exists("/proc/%d/task/%d/children" % (me, me)):
        return kids
    for e in os.listdir("/proc"):     # kernels without CONFIG_PROC_CHILDREN
        if e.isdigit():
            try:
                data = open("/proc/%s/stat" % e).read()
                if int(data[data.rindex(")") + 2:].split()[1]) == me:
                    kids.add(int(e))
            except (OSError, ValueError):
                pass
    return kids


def cmdline(pid):
    try:
        return open("/proc/%d/cmdline" % pid, "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


# ------------------------------------------------------------------------- sampler ---

def interpolate(samples, t, what):
    """A counter sampled as (time, J) at time t, linear between the samples around it."""
    before = [x for x in samples if x[0] <= t]
    after = [x for x in samples if x[0] >= t]
    if not before or not after:
        raise RuntimeError("no %s sample around %.3f" % (what, t))
    (ta, ea), (tb, eb) = before[-1], after[0]
    return ea if tb == ta else ea + (eb - ea) * (t - ta) / (tb - ta)


class Sampler(threading.Thread):
    """Every 50 ms: NVML's energy counter of every GPU (with the time), the slurmstepds
    (our children) by title, to know each job's extern step's life, and the plugin's
    metrics files (each job's counter, kept at its highest)."""

    def __init__(self, nvml, metrics_dir, rapl=None):
        super().__init__(daemon=True)
        self.nvml, self.metrics_dir, self.rapl = nvml, metrics_dir, rapl
        self.samples = []            # (t, [mJ per GPU])
        self.rapl_samples = []       # (t, J of the packages since the first read)
        self.rapl_node = {}          # rust_rapl's sample time -> its node counter (J)
        self.steps = {}              # "J.extern" -> [first seen t, last seen t]
        self.jobs = {}               # (source, jobid) -> J
        self.idle_held = {}          # (source, jobid) -> J of GPU held and not used
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        n = len(self.nvml.handles)
        last_metrics = 0
        while not self.stop.is_set():
            t0 = time.time()
            try:
                e = [self.nvml.energy_mj(i) for i in range(n)]
                t1 = time.time()
                with self.lock:
                    self.samples.append(((t0 + t1) / 2, e))
            except RuntimeError:
                pass
            if self.rapl:
                t0r = time.time()
                try:
                    j = self.rapl.joules()
                    with self.lock:
                        self.rapl_samples.append(((t0r + time.time()) / 2, j))
                except OSError:
                    pass
            now = time.time()
            for pid in children():
                m = re.match(r"slurmstepd: \[(\d+)\.(\w+)\]", cmdline(pid))
                if m:
                    key = "%s.%s" % m.groups()
                    with self.lock:
                        self.steps.setdefault(key, [now, now])[1] = now
            if now - last_metrics > 0.25:
                last_metrics = now
                self.read_metrics()
            self.stop.wait(max(0.0, 0.05 - (time.time() - t0)))

    def read_metrics(self):
        for path in glob.glob(os.path.join(self.metrics_dir, "*.prom")):
            try:
                text = open(path).read()
            except OSError:
                continue
            for m in re.finditer(r'^slurm_energy_job_joules_total\{([^}]*)\}\s+(\S+)', text, re.M):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
                key = (labels.get("source", "?"), labels.get("jobid"))
                v = float(m.group(2))
                with self.lock:
                    self.jobs[key] = max(self.jobs.get(key, 0.0), v)
            # what each job held of a GPU in intervals where none of its processes used it
            for m in re.finditer(r'^slurm_energy_job_idle_held_joules_total\{([^}]*)\}\s+(\S+)', text, re.M):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
                if labels.get("kind") != "gpu":
                    continue
                key = (labels.get("source", "?"), labels.get("jobid"))
                v = float(m.group(2))
                with self.lock:
                    self.idle_held[key] = max(self.idle_held.get(key, 0.0), v)
            # rust_rapl's node counter at the time of its sample: compared with RAPL's own
            node = re.search(r'^slurm_energy_node_joules_total\{[^}]*source="rust_rapl"[^}]*\}\s+(\S+)', text, re.M)
            at = re.search(r'^slurm_energy_sampled_timestamp_seconds\{[^}]*source="rust_rapl"[^}]*\}\s+(\S+)',
                           text, re.M)
            if node and at:
                with self.lock:
                    self.rapl_node[float(at.group(1))] = float(node.group(1))

    def energy_at(self, gpu, t):
        """NVML's counter of GPU `gpu` at time t (J), linear between the samples around it."""
        with self.lock:
            s = [(x[0], x[1][gpu] / 1000) for x in self.samples]
        return interpolate(s, t, "NVML")

    def rapl_at(self, t):
        """RAPL's packages' counter at time t (J), linear between the samples around it."""
        with self.lock:
            s = list(self.rapl_samples)
        return interpolate(s, t, "RAPL")

    def window(self, job):
        """The life of job's extern slurmstepd: (start, end) in unix time. Start: when it
        was first seen, less half a poll; end: last seen plus half a poll."""
        with self.lock:
            w = self.steps.get("%s.extern" % job)
        if not w:
            return None
        return (w[0] - 0.025, w[1] + 0.025)


# ----------------------------------------------------------------------- the run ----

class Run:
    def __init__(self, args):
        self.a = args
        self.dry = args.dry_run
        self.b = os.path.abspath(args.bundle)
        self.tmp = None
        self.ctld = self.slurmd = None
        self.first_job = 60000000 + random.randrange(0, 5000000, 100)
        self.cgroup_dirs = []

    # ---- setup ------------------------------------------------------------------
    def preflight(self):
        if os.geteuid() != 0:
            sys.exit("run: must be root (Slurm daemons, SlurmUser=root)")
        for p in ("slurm/sbin/slurmd", "slurm/lib/slurm/libslurmfull.so", "energy/acct_gather_energy_rust_gpu.so"):
            if not os.path.exists(os.path.join(self.b, p)):
                sys.exit("run: %s has no %s: make it with `%s pack`" % (self.b, p, sys.argv[0]))
        self.manifest = dict(l.split("=", 1) for l in open(os.path.join(self.b, "MANIFEST")).read().splitlines() if "=" in l)
        self.plugins = set(self.manifest.get("slurm_plugins", "").split())
        self.tmp = tempfile.mkdtemp(prefix="sgpu.", dir="/tmp")   # short: unix sockets under it
        os.chmod(self.tmp, 0o755)
        for d in ("etc", "state", "spool", "log", "metrics", "jobs", "dev", "run"):
            os.makedirs(os.path.join(self.tmp, d))
        # This script starts the daemons, not systemd: an INVOCATION_ID inherited from the
        # shell's unit makes Slurm's cgroup/v2 take slurmd's current cgroup for a delegated
        # unit, whose controllers nobody enabled ("Controller cpu is not enabled!", seen on
        # the first real run), instead of making its own tree.
        self.env = {k: v for k, v in os.environ.items() if k not in ("INVOCATION_ID", "JOURNAL_STREAM")}
        self.env["LD_LIBRARY_PATH"] = os.path.join(self.b, "slurm/lib/slurm") + (
            ":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")
        deps = os.path.join(self.b, "slurm/deps")
        carried = sorted(os.listdir(deps)) if os.path.isdir(deps) else []
        lacks = machine_lacks(carried)
        if lacks:
            libdir = os.path.join(self.tmp, "lib")
            os.makedirs(libdir)
            for name in lacks:
                os.symlink(os.path.join(deps, name), os.path.join(libdir, name))
            self.env["LD_LIBRARY_PATH"] += ":" + libdir
        say("libraries from the bundle: %s" % (" ".join(lacks) or "none (this machine has all %d)" % len(carried)))
        self.env["PATH"] = os.path.join(self.b, "slurm/bin") + ":" + os.environ.get("PATH", "/usr/bin:/bin")
        self.env["SLURM_CONF"] = os.path.join(self.tmp, "etc/slurm.conf")
        say("Slurm %s from %s; temp dir %s" % (self.manifest.get("slurm"), self.b, self.tmp))

    def setup_gpu(self):
        """The NVML the sampler and rust_gpu read, the GPU used, the load."""
        if self.dry:
            # the stand-in library in a directory of its own, with its control files
            self.fake = os.path.join(self.tmp, "fakegpu")
            os.makedirs(self.fake)
            os.chmod(self.fake, 0o777)
            lib = os.path.join(self.fake, "libnvidia-ml.so.1")
            subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-o", lib,
                            os.path.join(FAKEGPU, "fakenvml.c")], check=True)
            self.fake_minor = 3
            open(os.path.join(self.fake, "gpus"), "w").write("%d\n" % self.fake_minor)
            open(os.path.join(self.fake, "power.log"), "w").close()
            self.fake_cmd("set_power.sh", str(self.fake_minor), "40")     # idle, as a real GPU
            dev = os.path.join(self.tmp, "dev", "nvidia%d" % self.fake_minor)
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, self.fake_minor))
            self.nvml_path = lib
        else:
            self.nvml_path = self.a.nvml or find_nvml()
            if not self.nvml_path:
                sys.exit("run: no libnvidia-ml.so.1 found (--nvml PATH)")
        # Slurm's gpu_nvml.so needs libnvidia-ml.so.1 (the stand-in's, or the driver's
        # where the loader's cache lacks it)
        self.env["LD_LIBRARY_PATH"] += ":" + os.path.dirname(os.path.abspath(self.nvml_path))
        self.nvml = Nvml(self.nvml_path)
        n = len(self.nvml.handles)
        if n == 0:
            sys.exit("run: NVML sees no GPU")
        self.gpu = 0                               # NVML index of the GPU used
        self.minor = self.nvml.minor(0)
        self.gpu_file = os.path.join(self.tmp, "dev", "nvidia%d" % self.minor) if self.dry \
            else "/dev/nvidia%d" % self.minor
        say("NVML %s: %d GPU(s); using GPU 0: %s, minor %d (%s), %.1f W, counter %.3f J" % (
            self.nvml_path, n, self.nvml.name(0), self.minor, self.gpu_file,
            self.nvml.power_mw(0) / 1000, self.nvml.energy_mj(0) / 1000))
        self.n_gpus = n
        if not self.dry and shutil.which("nvidia-smi"):
            e0 = self.nvml.energy_mj(0)
            smi = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=name,driver_version,total_energy_consumption,power.draw",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip()
            say("nvidia-smi: %s (counter mJ; ctypes just before: %d)" % (smi, e0))

    def fake_cmd(self, script, *args):
        subprocess.run(["sh", os.path.join(FAKEGPU, script), self.fake] + list(args), check=True)

    def setup_load(self):
        """LOAD SECONDS: a shell command that loads the GPU Slurm gave the step."""
        if self.dry:
            # busy: 240 W and 80% SM while this shell lives, then back to idle (40 W)
            self.load_kind = "stand-in: set_power.sh 240 W, use_gpu.sh 80% SM"
            m = str(self.minor)
            self.load = ("sh %s %s gres:%s 240; sh %s %s %s 80; sleep {secs}; sh %s %s gres:%s 40" % (
                os.path.join(FAKEGPU, "set_power.sh"), self.fake, m,
                os.path.join(FAKEGPU, "use_gpu.sh"), self.fake, m,
                os.path.join(FAKEGPU, "set_power.sh"), self.fake, m))
            return
        loadpy = os.path.join(self.tmp, "load.py")
        with open(loadpy, "w") as f:
            f.write(LOAD_PY)
        py = sys.executable
        order = self.a.load.split(",")
        for kind in order:
            if kind in ("torch", "cupy"):
                r = subprocess.run([py, loadpy, kind, "--check"], capture_output=True, text=True, timeout=120)
                if r.returncode == 0:
                    self.load_kind, self.load = kind, "%s %s %s {secs}" % (py, loadpy, kind)
                    break
                say("load %s: unavailable (%s)" % (kind, (r.stderr.strip().splitlines() or ["?"])[-1]))
            elif kind == "nvcc" and shutil.which("nvcc"):
                src, exe = os.path.join(self.tmp, "burn.cu"), os.path.join(self.tmp, "burn")
                open(src, "w").write(BURN_CU)
                r = subprocess.run(["nvcc", "-O2", "-o", exe, src], capture_output=True, text=True, timeout=180)
                if r.returncode == 0:
                    self.load_kind, self.load = "nvcc (CUDA C FMA burner)", exe + " {secs}"
                    break
                say("load nvcc: failed: %s" % r.stderr.strip()[-300:])
        else:
            sys.exit("run: no CUDA load available (tried %s): need python3 with torch or cupy, or nvcc" % ",".join(order))
        # 2 s outside Slurm: the load draws power, and it warms up (CUDA, kernels)
        p0 = self.nvml.power_mw(0) / 1000
        e0, t0 = self.nvml.energy_mj(0), time.time()
        proc = subprocess.Popen(self.load.format(secs=4), shell=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, self.nvml.power_mw(0) / 1000)
            time.sleep(0.1)
        mean = (self.nvml.energy_mj(0) - e0) / 1000 / (time.time() - t0)
        say("load %s: idle %.0f W, under load peak %.0f W, mean %.0f W over its run (exit %d)" % (
            self.load_kind, p0, peak, mean, proc.returncode))
        if peak < p0 + 30:
            say("WARNING: the load barely moved the GPU's power")

    def choose(self):
        """The configurations to try, best first: (gres mode, cgroup mode)."""
        if self.a.gres != "auto":
            gres = [self.a.gres]
        elif self.n_gpus > 1:
            gres = ["off"]
        elif self.dry:
            # Slurm's gpu/nvml against the stand-in (its /dev/nvidiaN is not there: the
            # device cgroup may refuse it, then the GPU by our file)
            gres = (["nvml"] if "gpu_nvml" in self.plugins else []) + ["off"]
        else:
            gres = []
            if "gpu_nvml" in self.plugins:
                gres.append("nvml")
            if "gpu_nvidia" in self.plugins and glob.glob("/proc/driver/nvidia/gpus/*/information"):
                gres.append("nvidia")
            gres.append("off")
        if self.a.cgroup != "auto":
            cg = [self.a.cgroup]
        else:
            cg = []
            ctrl = "/sys/fs/cgroup/cgroup.controllers"
            if os.path.exists(ctrl) and open(ctrl).read().split() and "cgroup_v2" in self.plugins:
                cg.append("v2")
            if os.path.isdir("/sys/fs/cgroup/devices") and os.path.ismount("/sys/fs/cgroup/devices") \
                    and "cgroup_v1" in self.plugins:
                cg.append("v1")
            cg.append("none")
        tries = [(gres[0], cg[0])]
        for g in gres[1:]:
            tries.append((g, cg[0]))
        for c in cg[1:]:
            tries.append((gres[-1], c))
        self.choose_rapl()
        say("cgroup: %s; /sys/fs/cgroup/cgroup.controllers: %s; v1 devices: %s; in this Slurm: %s" % (
            "/sys/fs/cgroup is " + next((l.split()[2] for l in open("/proc/self/mounts") if l.split()[1] == "/sys/fs/cgroup"), "not mounted"),
            open("/sys/fs/cgroup/cgroup.controllers").read().strip() if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "-",
            os.path.ismount("/sys/fs/cgroup/devices"),
            " ".join(sorted(p for p in self.plugins if p.startswith(("cgroup_", "gpu_", "auth_"))))))
        say("configurations to try (gres, cgroup): %s; rust_rapl stacked: %s" % (tries, self.rapl))
        return tries

    def choose_rapl(self):
        """rust_rapl is stacked where it has a source; RAPL's own counter is the reference."""
        self.rapl, self.rapl_ref = False, None
        if self.a.no_rapl:
            say("RAPL: rust_rapl not stacked (--no-rapl)")
            return
        source = rust_rapl_readable()
        ref, why = RaplReference.find()
        if not source:
            say("RAPL: none here (no powercap intel-rapl zone, no readable /dev/cpu/0/msr; %s): "
                "rust_rapl not stacked, no RAPL figure" % "; ".join(why))
            return
        self.rapl, self.rapl_ref = True, ref
        say("RAPL: rust_rapl stacked, reading %s; reference: %s" % (
            source, "%s, %d package(s)" % (ref.kind, ref.parts) if ref else "none (%s)" % "; ".join(why)))

    def write_conf(self, gres, cg):
        t, b = self.tmp, self.b
        hw = subprocess.run([os.path.join(b, "slurm/sbin/slurmd"), "-C"], capture_output=True, text=True,
                            env=dict(self.env, SLURM_CONF="/nonexistent")).stdout.splitlines()[0]
        hw = re.sub(r"^NodeName=\S+ ", "", hw)
        hw = re.sub(r"\s*Gres=\S+", "", hw)
        # auth/slurm's daemons fail without serializer/json (json-c at Slurm's build)
        auth = "slurm" if {"auth_slurm", "serializer_json"} <= self.plugins else "none"
        if auth == "slurm":
            key = os.path.join(t, "etc/slurm.key")
            with open(key, "wb") as f:
                f.write(os.urandom(1024))
            os.chmod(key, 0o600)
        cgroups = cg != "none"
        energy = "acct_gather_energy/rust_gpu"
        if self.rapl:
            energy = "acct_gather_energy/rust_rapl," + energy
        conf = """# slurm_on_a_real_gpu.py: a private single-node Slurm, all state in {t}
ClusterName=gpucheck
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={cport}
SlurmdPort={dport}
SlurmUser=root
SlurmdUser=root
AuthType=auth/{auth}
CredType=cred/{auth}
PluginDir={b}/slurm/lib/slurm:{b}/energy
PlugStackConfig={t}/etc/plugstack.conf
FirstJobId={first}
MaxJobId={last}
MpiDefault=none
ProctrackType={proctrack}
TaskPlugin={task}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
PriorityType=priority/basic
JobAcctGatherType={jag}
JobAcctGatherFrequency=task=2,energy=2
AcctGatherEnergyType={energy}
AcctGatherNodeFreq=2
# no slurmdbd: the record is the plugin's metrics file (each job's final counter) and sstat
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# the job's figure is its extern step's, which carries all its GPUs
PrologFlags=Contain
GresTypes=gpu,shard
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool
SlurmctldPidFile={t}/run/slurmctld.pid
SlurmdPidFile={t}/run/slurmd.pid
SlurmctldLogFile={t}/log/slurmctld.log
SlurmdLogFile={t}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ReturnToService=2
KillWait=2
MinJobAge=600
InactiveLimit=0
Waittime=0
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
NodeName=n1 NodeAddr=127.0.0.1 NodeHostname=n1 {hw} Gres=gpu:1,shard:{shards} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""".format(t=t, b=b, cport=free_port(), dport=free_port(), auth=auth, first=self.first_job,
           last=self.first_job + 99, proctrack="proctrack/cgroup" if cgroups else "proctrack/linuxproc",
           task="task/cgroup" if cgroups else "task/none",
           jag="jobacct_gather/cgroup" if cgroups else "jobacct_gather/linux",
           energy=energy, hw=hw, shards=SHARDS)
        open(os.path.join(t, "etc/slurm.conf"), "w").write(conf)
        open(os.path.join(t, "etc/plugstack.conf"), "w").write("")
        if gres == "off":
            g = "AutoDetect=off\nName=gpu File={f}\nName=shard Count={s} File={f}\n".format(f=self.gpu_file, s=SHARDS)
        else:
            g = "AutoDetect={m}\nName=shard Count={s}\n".format(m=gres, s=SHARDS)
        open(os.path.join(t, "etc/gres.conf"), "w").write(g)
        if cg == "v2":
            # EnableControllers: in a container the controllers the root lists are not
            # enabled below it unless slurmd does so (cgroup.conf(5)).
            c = "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\nEnableControllers=yes\nConstrainDevices=yes\nConstrainCores=yes\n"
        elif cg == "v1":
            c = "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainDevices=yes\nConstrainCores=yes\n"
        else:
            c = "CgroupPlugin=disabled\n"
        open(os.path.join(t, "etc/cgroup.conf"), "w").write(c)
        ag = "EnergyGpuNvmlLibrary={lib}\nEnergyGpuAmdLibrary=none\nEnergyMetricsFile={t}/metrics/slurm_energy.prom\n" \
             "EnergyAttribution={attr}\n".format(lib=self.nvml_path, t=t, attr="shared" if cgroups else "node")
        if self.rapl:
            # the packages alone: what perf's energy-pkg, powercap's package zones count
            ag += "EnergyRaplSource=auto\nEnergyRaplDomains=package\n"
        open(os.path.join(t, "etc/acct_gather.conf"), "w").write(ag)
        self.cfg = dict(gres=gres, cgroup=cg, auth=auth, energy=energy, attribution="shared" if cgroups else "node")
        say("config: GRES AutoDetect=%s, cgroup %s, auth/%s, %s, EnergyAttribution=%s" % (
            gres, cg, auth, energy, self.cfg["attribution"]))
        for name in ("gres.conf", "cgroup.conf", "acct_gather.conf"):
            say("  %s: %s" % (name, open(os.path.join(t, "etc", name)).read().strip().replace("\n", " | ")))

    # ---- daemons ------------------------------------------------------------------
    def start(self):
        t, sb = self.tmp, os.path.join(self.b, "slurm/sbin")
        for d in ("state", "spool"):
            shutil.rmtree(os.path.join(t, d), ignore_errors=True)
            os.makedirs(os.path.join(t, d))
        out = open(os.path.join(t, "log/daemons.out"), "a")
        self.ctld = subprocess.Popen([os.path.join(sb, "slurmctld"), "-D", "-i"], env=self.env,
                                     stdout=out, stderr=out, start_new_session=True)
        self.slurmd = subprocess.Popen([os.path.join(sb, "slurmd"), "-D", "-N", "n1", "-d",
                                        os.path.join(sb, "slurmstepd")], env=self.env,
                                       stdout=out, stderr=out, start_new_session=True)
        deadline = time.time() + 25
        while time.time() < deadline:
            if self.ctld.poll() is not None or self.slurmd.poll() is not None:
                break
            st = self.client(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
            if st.strip().endswith("idle"):
                return True
            time.sleep(0.5)
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t %E"], env=self.env, capture_output=True, text=True)
        say("slurmd did not come up: sinfo %r; slurmd %s, slurmctld %s" % (
            (r.stdout + r.stderr).strip(),
            self.slurmd.poll(), self.ctld.poll()))
        for name in ("slurmd.log", "slurmctld.log", "daemons.out"):
            p = os.path.join(t, "log", name)
            if os.path.exists(p):
                for l in [l for l in open(p).read().splitlines() if re.search(r"error|fatal", l, re.I)][-6:]:
                    say("  %s: %s" % (name, l))
        self.stop_daemons()
        return False

    def show_detection(self):
        """What Slurm's gpu/nvml found: the node's GRES and slurmd's lines about it."""
        say("GRES as slurmctld has them: %s" % self.client(["sinfo", "-h", "-N", "-o", "%N %G"], check=False).strip())
        for l in open(os.path.join(self.tmp, "log/slurmd.log")).read().splitlines():
            if re.search(r"gpu/nvml|gres/gpu|gres_device|nvidia", l):
                say("  slurmd.log: " + l)

    def client(self, cmd, check=True, timeout=30):
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
        return r.stdout

    def stop_daemons(self):
        """Every job cancelled, then every child of ours (slurmd, slurmctld, slurmstepds,
        job tasks: all re-parented to us) TERM, then KILL."""
        if self.ctld and self.ctld.poll() is None:
            self.client(["scancel", "--full", "-u", "root"], check=False, timeout=10)
            time.sleep(1)
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 2)):
            kids = children()
            for pid in kids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.time() + wait
            while time.time() < end and children():
                for pid in children():
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass
                time.sleep(0.1)
        self.ctld = self.slurmd = None

    def remove_cgroups(self):
        """The cgroup directories Slurm may have left for our jobs (ids of our range)."""
        ours = re.compile(r"job_(\d+)$")
        for root in glob.glob("/sys/fs/cgroup/*") + ["/sys/fs/cgroup"]:
            if not os.path.isdir(root):
                continue
            for path, dirs, _ in os.walk(root, topdown=False):
                if path.count("/") > 9 or "slurm" not in path:
                    continue
                m = ours.search(path)
                job_dirs = [path] if m and self.first_job <= int(m.group(1)) < self.first_job + 100 else []
                for d in job_dirs:
                    for sub, _, _ in sorted(os.walk(d), key=lambda x: -len(x[0])):
                        try:
                            os.rmdir(sub)
                        except OSError:
                            pass

    # ---- jobs -----------------------------------------------------------------------
    def sbatch(self, gres, body, name):
        script = os.path.join(self.tmp, "jobs", name + ".sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n#SBATCH -J %s -n1 -c1 --gres=%s -o %s/jobs/%s.out\n"
                    "echo \"gres: SLURM_JOB_GPUS=$SLURM_JOB_GPUS CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES "
                    "SLURM_SHARDS_ON_NODE=$SLURM_SHARDS_ON_NODE\"\n%s\n" % (name, gres, self.tmp, name, body))
        out = self.client(["sbatch", "--parsable", script])
        job = out.strip().split(";")[0]
        say("job %s (%s, --gres=%s) submitted" % (job, name, gres))
        return job

    def wait_gone(self, jobs, timeout):
        end = time.time() + timeout
        while time.time() < end:
            live = self.client(["squeue", "-h", "-o", "%i %T", "-j", ",".join(jobs)], check=False)
            if not live.strip():
                break
            time.sleep(0.3)
        else:
            raise RuntimeError("jobs %s still there after %d s" % (jobs, timeout))
        # the extern stepds gone, and the metrics file's last figures read
        end = time.time() + 10
        while time.time() < end and any(self.sampler.steps.get("%s.extern" % j) and
                                         time.time() - self.sampler.steps["%s.extern" % j][1] < 1.0
                                         for j in jobs):
            time.sleep(0.2)
        time.sleep(2.5)

    def sstat(self, step):
        t0 = time.time()
        out = self.client(["sstat", "-n", "-P", "-a", "-j", step, "-o", "JobID,ConsumedEnergyRaw"], check=False)
        return t0, time.time(), out.strip()

    def marker(self, name):
        return os.path.join(self.tmp, "jobs", name)

    def wait_for(self, name):
        return "while [ ! -e %s ]; do sleep 0.2; done" % self.marker(name)

    def phases(self):
        # the load runs with the machine's own libraries, not the bundle's (Slurm's
        # LD_LIBRARY_PATH reaches the job's tasks through srun)
        own = os.environ.get("LD_LIBRARY_PATH")
        load = ("env LD_LIBRARY_PATH=%s " % own if own else "env -u LD_LIBRARY_PATH ") + self.load.format(secs=LOAD_SECS)
        # 1: the whole GPU: 2 s idle, the load, 2 s idle
        whole = self.sbatch("gpu:1", "sleep 2\nsrun -n1 sh -c '%s'\nsleep 2" % load.replace("'", "'\\''"), "whole")
        self.mid_sstat(whole, LOAD_SECS / 2 + 4)
        self.wait_gone([whole], LOAD_SECS + 90)
        # 1b: the whole GPU held and never used: all of its energy is idle-held
        held = self.sbatch("gpu:1", "sleep %d" % HELD_SECS, "held")
        self.wait_gone([held], HELD_SECS + 90)
        # 2: two shard jobs side by side: the idle one holds its shards until the busy one is done.
        # gpu_probe (rust_gpu's NVML binding, at its poller's pace) shows each process's use
        # as rust_gpu reads it: the busy job's process must be there for the split by use.
        probe = os.path.join(self.b, "gpu_probe")
        if os.path.exists(probe):
            self.probe = subprocess.Popen([probe, self.nvml_path, str(LOAD_SECS + 8)], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
        half = SHARDS // 2
        busy = self.sbatch("shard:%d" % half, "%s\nsleep 1\nsrun -n1 sh -c '%s'\ntouch %s\nsleep 1" % (
            self.wait_for("idle_ready"), load.replace("'", "'\\''"), self.marker("busy_done")), "busy")
        idle = self.sbatch("shard:%d" % half, "touch %s\nsrun -n1 sh -c '%s'" % (
            self.marker("idle_ready"), self.wait_for("busy_done")), "idle")
        self.mid_sstat(busy, LOAD_SECS / 2 + 5)
        self.wait_gone([busy, idle], LOAD_SECS + 90)
        if getattr(self, "probe", None):
            for l in self.probe.communicate(timeout=30)[0].splitlines():
                say("gpu_probe during the shard jobs: " + l)
        self.jobs = [("whole", whole), ("held", held), ("busy", busy), ("idle", idle)]

    def mid_sstat(self, job, after):
        # sstat of the running job's step 0 mid-load: Slurm's live figure (the node's sum
        # of the stacked plugins when stacked), against NVML since the job's start
        end = time.time() + after
        while time.time() < end:
            time.sleep(0.2)
        t0, t1, out = self.sstat(job + ".0")
        self.sstats.append((job, t0, t1, out))

    # ---- the table --------------------------------------------------------------------
    def truth_between(self, t0, t1):
        """Dry run: the stand-in's exact joules from its power schedule over [t0, t1]."""
        joules, at, watts = 0.0, None, 0.0
        for line in open(os.path.join(self.fake, "power.log")):
            f = line.split()
            if len(f) != 3 or int(f[1]) != self.minor:
                continue
            t, w = float(f[0]) / 1e9, float(f[2])
            if at is not None:
                a, z = max(at, t0), min(t, t1)
                if z > a:
                    joules += watts * (z - a)
            at, watts = t, w
        if at is not None:
            a = max(at, t0)
            if t1 > a:
                joules += watts * (t1 - a)
        return joules

    def idle_watts(self):
        """The GPU's lowest mean power over a second or more in the samples (how rust_gpu
        learns its idle power when EnergyGpuIdleWatts is not set)."""
        s, low = self.sampler.samples, None
        j = 0
        for i in range(len(s)):
            while j < len(s) and s[j][0] - s[i][0] < 1.0:
                j += 1
            if j == len(s):
                break
            w = (s[j][1][self.gpu] - s[i][1][self.gpu]) / 1000 / (s[j][0] - s[i][0])
            low = w if low is None else min(low, w)
        return low

    def shard_model(self, win, p0):
        """What rust_gpu's split should give the two shard jobs, from NVML's samples: in
        each interval both hold the GPU the idle part min(E, P0 dt) goes by shares (half
        each), the rest to the busy job (the only one with a GPU process); an interval
        held by one job is all its own."""
        got = {"busy": 0.0, "idle": 0.0}
        # Only the samples where the counter moved: a real GPU's counter steps about every
        # 100 ms, so every other 50 ms interval reads 0 J and the next twice its share, and
        # min(E, P0 dt) over such pairs would give the idle part half its due (it did, on the
        # first real run: model 532 J for rust_gpu's 1 072 J at 77 W over 27 s).
        s = [x for i, x in enumerate(self.sampler.samples)
             if i == 0 or x[1][self.gpu] != self.sampler.samples[i - 1][1][self.gpu]]
        for (ta, ea), (tb, eb) in zip(s, s[1:]):
            e, dt = (eb[self.gpu] - ea[self.gpu]) / 1000, tb - ta
            holders = [w for w in ("busy", "idle") if win[w][0] <= ta and tb <= win[w][1]]
            if len(holders) == 1:
                got[holders[0]] += e
            elif len(holders) == 2:
                idle = min(e, p0 * dt)
                got["busy"] += idle / 2 + (e - idle)
                got["idle"] += idle / 2
        return got

    def slurm_window(self, job):
        """Where no extern slurmstepd was seen (a /proc without titles): the job's start and
        end as slurmctld has them (whole seconds: NVML's figure is then rougher)."""
        out = self.client(["scontrol", "-o", "show", "job", job], check=False)
        t = dict(re.findall(r"(StartTime|EndTime)=(\S+)", out))
        try:
            w = tuple(time.mktime(time.strptime(t[k], "%Y-%m-%dT%H:%M:%S")) for k in ("StartTime", "EndTime"))
        except (KeyError, ValueError):
            return None
        say("job %s: no extern slurmstepd seen; its window from scontrol (whole seconds): %s" % (job, t))
        return w

    def report_rapl(self):
        """rust_rapl's node counter against RAPL's own between the first and last of its
        samples the metrics file showed (at the times rust_rapl read them)."""
        s = self.sampler
        say("RESULT RAPL: rust_rapl J is the job's part (EnergyAttribution=%s); RAPL J the packages' "
            "energy over the job's window (%s)" % (self.cfg["attribution"], self.rapl_ref.kind if self.rapl_ref else "no reference"))
        if not s.rapl_samples:
            say("RESULT RAPL: no reference samples: rust_rapl's node counter not compared")
            return
        lo, hi = s.rapl_samples[0][0], s.rapl_samples[-1][0]
        pts = sorted((t, j) for t, j in s.rapl_node.items() if lo <= t <= hi)
        if len(pts) < 2:
            say("RESULT RAPL: %d rust_rapl node sample(s) inside the reference's span: not compared" % len(pts))
            return
        (ta, ja), (tb, jb) = pts[0], pts[-1]
        ref = s.rapl_at(tb) - s.rapl_at(ta)
        say("RESULT RAPL: rust_rapl's node counter (packages) over %.1f s between its first and last "
            "samples seen: %.1f J; %s over the same times: %.1f J: %s" % (
                tb - ta, jb - ja, self.rapl_ref.kind, ref, "%+.3f%%" % (100 * (jb - ja - ref) / ref) if ref else "-"))

    def report(self):
        s = self.sampler
        s.read_metrics()
        p0 = self.idle_watts()
        fig, win = {}, {}
        for what, job in self.jobs:
            g = s.jobs.get(("rust_gpu", job))
            if g is None:     # one plugin: no source label, or another name
                g = next((v for (src, j), v in s.jobs.items() if j == job and src != "rust_rapl"), None)
            fig[what], win[what] = g, s.window(job) or self.slurm_window(job)
        model = self.shard_model(win, p0) if win.get("busy") and win.get("idle") else {}
        head = "%-9s %-6s %-8s %7s %11s %11s %9s %8s %10s %11s" % (
            "job", "what", "gres", "window", "rust_gpu J", "NVML J", "error", "of GPU", "model J", "idle-held J")
        if self.dry:
            head += " %11s" % "stand-in J"
        if self.rapl:
            head += " %11s %11s" % ("rust_rapl J", "RAPL J")
        lines = [head]
        rows = []
        for what, job in self.jobs:
            w, g = win[what], fig[what]
            nv = s.energy_at(self.gpu, w[1]) - s.energy_at(self.gpu, w[0]) if w else None
            whole = what in ("whole", "held")
            ih = s.idle_held.get(("rust_gpu", job))
            if ih is None:
                ih = next((v for (src, j), v in s.idle_held.items() if j == job and src != "rust_rapl"), None)
            line = "%-9s %-6s %-8s %6.1fs %11s %11s %9s %8s %10s %11s" % (
                job, what, "gpu:1" if whole else "shard:%d" % (SHARDS // 2), (w[1] - w[0]) if w else float("nan"),
                "%.1f" % g if g is not None else "none", "%.1f" % nv if nv is not None else "-",
                "%+.3f%%" % (100 * (g - nv) / nv) if whole and g is not None and nv else "",
                "%.1f%%" % (100 * g / nv) if g is not None and nv else "-",
                "%.1f" % model[what] if what in model else "", "%.1f" % ih if ih is not None else "none")
            if self.dry:
                line += " %11s" % ("%.1f" % self.truth_between(*w) if w else "-")
            if self.rapl:
                r = s.jobs.get(("rust_rapl", job))
                ref = s.rapl_at(w[1]) - s.rapl_at(w[0]) if w and s.rapl_samples else None
                line += " %11s %11s" % ("%.1f" % r if r is not None else "-", "%.1f" % ref if ref is not None else "-")
            lines.append(line)
            rows.append(dict(job=job, what=what, window=w, rust_gpu=g, nvml=nv, model=model.get(what), idle_held=ih))
        if model and fig.get("busy") is not None and fig.get("idle") is not None:
            u = (min(win["busy"][0], win["idle"][0]), max(win["busy"][1], win["idle"][1]))
            nv = s.energy_at(self.gpu, u[1]) - s.energy_at(self.gpu, u[0])
            tot = fig["busy"] + fig["idle"]
            line = "%-9s %-6s %-8s %6.1fs %11.1f %11.1f %9s %8s %10.1f %11s" % (
                "both", "sum", "shard:%d" % SHARDS, u[1] - u[0], tot, nv, "%+.3f%%" % (100 * (tot - nv) / nv),
                "%.1f%%" % (100 * tot / nv), model["busy"] + model["idle"], "")
            if self.dry:
                line += " %11.1f" % self.truth_between(*u)
            lines.append(line)
        say("RESULT rust_gpu: each job's final counter in EnergyMetricsFile (what Slurm's accounting gets); "
            "NVML: its energy counter over the life of the job's extern slurmstepd (for a shard job: the "
            "whole GPU's, 'of GPU' is the job's part); model: the split rust_gpu should make with the GPU's "
            "idle power %.1f W (lowest 1 s mean seen) by shares, the rest to the busy job" % (p0 or 0))
        for l in lines:
            say("RESULT " + l)
        if self.rapl:
            self.report_rapl()
        for job, t0, t1, out in self.sstats:
            w = s.steps.get(job + ".0")
            if w:
                lo = s.energy_at(self.gpu, t0) - s.energy_at(self.gpu, w[0] - 0.025)
                hi = s.energy_at(self.gpu, t1) - s.energy_at(self.gpu, w[0] - 0.025)
                say("RESULT sstat mid-job %s.0: %s J (ConsumedEnergyRaw); NVML since the step began: "
                    "%.1f..%.1f J%s" % (job, out.split("|")[-1] if out else "none", lo, hi,
                                        " (whole GPU; the job holds a part)" if job != self.jobs[0][1] else ""))
        say("RESULT machine: %s; GRES AutoDetect=%s, cgroup %s, auth/%s, %s, EnergyAttribution=%s, load: %s" % (
            "dry run (stand-in NVML)" if self.dry else "%s (%s)" % (self.nvml.name(0), self.nvml_path),
            self.cfg["gres"], self.cfg["cgroup"], self.cfg["auth"], self.cfg["energy"],
            self.cfg["attribution"], self.load_kind))
        for what, _ in self.jobs:
            p = os.path.join(self.tmp, "jobs", what + ".out")
            if os.path.exists(p):
                say("job %s output: %s" % (what, open(p).read().strip().replace("\n", " | ")[-400:]))
        errors = [l for l in open(os.path.join(self.tmp, "log/slurmd.log")).read().splitlines()
                  if re.search(r"rust_gpu|rust_rapl|energy|gres|gpu", l) and re.search(r"error|warn", l, re.I)]
        for l in errors[-8:]:
            say("slurmd.log: " + l)
        self.rows = rows

    # ---- main ------------------------------------------------------------------------------
    def main(self):
        self.sstats = []
        self.preflight()
        self.setup_gpu()
        self.setup_load()
        tries = self.choose()
        for gres, cg in tries:
            self.write_conf(gres, cg)
            if not self.start():
                continue
            if gres == "nvml":
                self.show_detection()
            if self.dry and gres == "nvml":
                # the stand-in's /dev/nvidiaN is not on this machine: Slurm gives the jobs no
                # GPU under AutoDetect=nvml, so the jobs run with the GPU by our file
                say("dry run: gpu/nvml's detection shown; the jobs run under the next configuration "
                    "(/dev/nvidia%d is not on this machine)" % self.minor)
                self.stop_daemons()
                continue
            break
        else:
            raise RuntimeError("slurmd came up under none of %s" % tries)
        self.sampler = Sampler(self.nvml, os.path.join(self.tmp, "metrics"), self.rapl_ref)
        self.sampler.start()
        say("cluster up: %s; the GPU idle %d s first (rust_gpu learns its static power)" % (
            self.client(["sinfo", "-h", "-N", "-o", "%N %t %G"]).strip(), SETTLE_SECS))
        time.sleep(SETTLE_SECS)
        self.phases()
        self.report()

    def finish(self):
        if getattr(self, "sampler", None):
            self.sampler.stop.set()
        self.stop_daemons()
        if self.tmp:
            self.remove_cgroups()
            if self.a.out:
                os.makedirs(self.a.out, exist_ok=True)
                open(os.path.join(self.a.out, "report.txt"), "w").write("\n".join(LOG) + "\n")
                if getattr(self, "sampler", None):
                    with open(os.path.join(self.tmp, "log/nvml_samples.json"), "w") as f:
                        json.dump(dict(samples=self.sampler.samples, steps=self.sampler.steps,
                                       jobs=[list(k) + [v] for k, v in self.sampler.jobs.items()]), f)
                with tarfile.open(os.path.join(self.a.out, "logs.tar.gz"), "w:gz") as tar:
                    for d in ("etc", "log", "jobs", "metrics"):
                        tar.add(os.path.join(self.tmp, d), arcname=d)
                    if self.dry:
                        tar.add(os.path.join(self.fake, "power.log"), arcname="power.log")
                say("report.txt and logs.tar.gz in %s" % self.a.out)
            if self.a.keep:
                say("kept %s" % self.tmp)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)


# a CUDA load: LOAD_PY KIND SECONDS [DUTY] (KIND torch | cupy), or KIND --check
LOAD_PY = r'''
import sys, time
kind = sys.argv[1]
if kind == "torch":
    import torch
    assert torch.cuda.is_available(), "torch: no CUDA device"
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    def burst():
        for _ in range(4):
            a @ a
        torch.cuda.synchronize()
else:
    import cupy
    a = cupy.random.rand(4096, 4096, dtype=cupy.float32)
    def burst():
        for _ in range(4):
            a @ a
        cupy.cuda.Device().synchronize()
burst()
if sys.argv[2] == "--check":
    sys.exit(0)
secs = float(sys.argv[2]); duty = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
end = time.time() + secs
while time.time() < end:
    t0 = time.time()
    while time.time() - t0 < 0.1 * duty:
        burst()
    r = 0.1 - (time.time() - t0)
    if r > 0:
        time.sleep(r)
'''

# the last fallback: a CUDA C FMA burner, compiled with nvcc on the GPU machine
BURN_CU = r'''
#include <cstdio>
#include <cstdlib>
#include <ctime>
__global__ void burn(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float a = x[i], b = 1.0001f;
    for (int k = 0; k < n; k++) { a = a * b + 0.0001f; b = b * a - 0.0001f; }
    x[i] = a + b;
}
int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 5;
    int threads = 256, blocks = 132 * 64;
    float *x;
    if (cudaMalloc(&x, sizeof(float) * threads * blocks) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); return 1; }
    cudaMemset(x, 0, sizeof(float) * threads * blocks);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        burn<<<blocks, threads>>>(x, 1 << 16);
        if (cudaDeviceSynchronize() != cudaSuccess) { fprintf(stderr, "kernel failed\n"); return 1; }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
    return 0;
}
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="make the bundle from an installed Slurm and a plugin build")
    # its own cache: the CI's builds (/var/cache/rust-energy-slurm) lack nvml.h and libjwt
    p.add_argument("--slurm", default="/var/cache/rust-energy-slurm-gpu/slurm-26.05.3",
                   help="an installed Slurm: ci/build-slurm.sh with SLURM_NVML_H and that SLURM_CACHE")
    p.add_argument("--target", default=os.path.join(REPO, "target-26.05.3"),
                   help="cargo target dir of the plugins built against that Slurm")
    p.add_argument("--bundle", default=DEFAULT_BUNDLE)
    r = sub.add_parser("run", help="start the private Slurm, run the jobs, print the table")
    r.add_argument("--dry-run", action="store_true", help="the stand-in NVML (tests/fakegpu), no GPU")
    r.add_argument("--bundle", default=DEFAULT_BUNDLE)
    r.add_argument("--out", help="report.txt and logs.tar.gz here")
    r.add_argument("--nvml", help="libnvidia-ml.so.1 to use (default: the loader's, the driver's places)")
    r.add_argument("--gres", default="auto", choices=["auto", "nvml", "nvidia", "off"])
    r.add_argument("--cgroup", default="auto", choices=["auto", "v2", "v1", "none"])
    r.add_argument("--load", default="torch,cupy,nvcc", help="load kinds to try, in order")
    r.add_argument("--no-rapl", action="store_true", help="do not stack rust_rapl")
    r.add_argument("--keep", action="store_true", help="keep the temp dir")
    r.add_argument("--deadline", type=float, default=450, help="seconds before everything is stopped")
    args = ap.parse_args()
    if args.cmd == "pack":
        return pack(args)
    # every orphan of ours (slurmd's double-forked slurmstepds) becomes our child
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    run = Run(args)

    def stop(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("deadline %.0f s" % args.deadline)))
    signal.alarm(int(args.deadline))
    rc = 0
    try:
        run.main()
    except BaseException as e:  # noqa: everything ends in finish()
        say("FAILED: %r\n%s" % (e, traceback.format_exc().rstrip()))
        rc = 1
    finally:
        signal.alarm(0)
        run.finish()
    say("done in %.0f s" % (time.time() - T0))
    return rc


if __name__ == "__main__":
    sys.exit(main())
