"""rust_gpu on a real NVIDIA GPU: what the real NVML does where rust_gpu and its stand-in
(tests/fakegpu/fakenvml.c) rely on it (how often the energy counter moves; per-process
utilization: the count call, NOT_FOUND, time stamps, samples per read; running processes;
GPM), then rust_gpu loaded by Slurm's framework as slurmd (energy-driver) against NVML's
own counter at four moments while the GPU idles, runs bf16 matrix products flat out and at
half duty; and, where BUNDLE holds gpu_probe, each process's part of the GPU's use as
rust_gpu's binding reads it against the work each of two processes did. Needs python3
with pynvml (nvidia-ml-py) and torch; no Slurm daemon.

    python3 tests/hardware/nvml_on_a_real_gpu.py BUNDLE OUTDIR

BUNDLE, made on the build machine from a release build for Debian's Slurm 22.05.8:
    BUNDLE/energy-driver                       target/release/energy-driver
    BUNDLE/lib/libslurmfull.so                 /usr/lib/x86_64-linux-gnu/slurm-wlm/
    BUNDLE/plugins/acct_gather_energy_rust_gpu.so   target/release/libacct_gather_energy_rust_gpu.so
    BUNDLE/plugins/acct_gather_{profile,interconnect,filesystem}_none.so   Slurm's plugin dir
    BUNDLE/gpu_probe                           cargo build --release -p slurm-energy-gpu-libs --example gpu_probe
Figures of a run: docs/plugins.md (rust_gpu, "On a real GPU").
"""
import ctypes
import os
import subprocess
import sys
import time

import pynvml

B = os.path.abspath(sys.argv[1])
OUT = sys.argv[2]
log = open(os.path.join(OUT, "nvmlfacts.txt"), "w")


def say(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
LOAD = ("import torch,time,sys\na=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)\n"
        "duty=float(sys.argv[1]);end=time.time()+float(sys.argv[2])\n"
        "while time.time()<end:\n t0=time.time()\n while time.time()-t0<0.1*duty:\n"
        "  [a@a for _ in range(4)];torch.cuda.synchronize()\n r=0.1-(time.time()-t0)\n"
        " time.sleep(r) if r>0 else None\n")


def counter_steps(label, secs=1.5):
    vals, last, t_end = [], None, time.time() + secs
    while time.time() < t_end:
        v = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        t = time.time()
        if v != last:
            vals.append((t, v))
            last = v
    gaps = sorted(b[0] - a[0] for a, b in zip(vals, vals[1:]))
    jumps = sorted(b[1] - a[1] for a, b in zip(vals, vals[1:]))
    if gaps:
        say("%s: energy counter changed %d times in %.1f s; interval median %.1f ms, max %.1f ms; "
            "step median %d mJ" % (label, len(gaps), secs, 1000 * gaps[len(gaps) // 2], 1000 * gaps[-1],
                                   jumps[len(jumps) // 2]))


counter_steps("idle")
busy = subprocess.Popen([sys.executable, "-c", LOAD, "1.0", "40"])
t_start = time.time()
while time.time() - t_start < 40:
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    if procs and pynvml.nvmlDeviceGetPowerUsage(h) > 300000:
        break
    time.sleep(0.2)
say("load running after %.1f s: processes %s, power %.1f W" % (
    time.time() - t_start, [(p.pid, p.usedGpuMemory) for p in procs], pynvml.nvmlDeviceGetPowerUsage(h) / 1000))
counter_steps("busy")

# per-process utilization, as rust_gpu calls it: the count with a NULL buffer first
fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
count = ctypes.c_uint(0)
ret = fn(h, None, ctypes.byref(count), ctypes.c_ulonglong(0))
say("process utilization, NULL buffer: return %d (7 = INSUFFICIENT_SIZE), count %d" % (ret, count.value))
now_us = int(time.time() * 1e6)
try:
    samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
    say("samples since 0: %d; load pid %d" % (len(samples), busy.pid))
    for s in samples[-6:]:
        say("  pid %d timeStamp %d (now %d us: %.2f s ago) sm %d mem %d enc %d dec %d" % (
            s.pid, s.timeStamp, now_us, (now_us - s.timeStamp) / 1e6, s.smUtil, s.memUtil, s.encUtil, s.decUtil))
    stamps = sorted(set(s.timeStamp for s in samples))
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
    if gaps:
        say("sample period: median %.1f ms over %d samples" % (gaps[len(gaps) // 2] / 1000, len(stamps)))
    last = max(s.timeStamp for s in samples)
    try:
        again = pynvml.nvmlDeviceGetProcessUtilization(h, last)
        say("asked again at once since the newest: %d samples" % len(again))
    except pynvml.NVMLError as e:
        say("asked again at once since the newest:", e)
    time.sleep(1.0)
    try:
        later = pynvml.nvmlDeviceGetProcessUtilization(h, last)
        say("1 s later since the newest: %d samples, sm %s" % (len(later), [s.smUtil for s in later]))
    except pynvml.NVMLError as e:
        say("1 s later since the newest:", e)
except pynvml.NVMLError as e:
    say("process utilization:", e)
try:
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    say("running compute processes:", [(p.pid, p.usedGpuMemory) for p in procs])
except pynvml.NVMLError as e:
    say("running processes:", e)
try:
    sup = pynvml.nvmlGpmQueryDeviceSupport(h)
    say("GPM supported:", sup.isSupportedDevice)
    s1 = pynvml.nvmlGpmSampleAlloc()
    s2 = pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(h, s1)
    time.sleep(0.5)
    pynvml.nvmlGpmSampleGet(h, s2)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = 1
    mg.sample1 = s1
    mg.sample2 = s2
    mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    pynvml.nvmlGpmMetricsGet(mg)
    say("GPM SM_UTIL over 0.5 s busy: %.1f%% (return %d)" % (mg.metrics[0].value, mg.metrics[0].nvmlReturn))
except Exception as e:  # noqa
    say("GPM:", repr(e))
busy.kill()
busy.wait()

# Two processes at different duty on the one GPU: each one's part of the GPU's use, as
# rust_gpu's binding reads it (the figure a shared GPU's dynamic energy is split by),
# against its part of the work done (matrix products of one size, counted by each).
COUNTED = LOAD.replace("[a@a for _ in range(4)]", "[a@a for _ in range(4)];n[0]+=4").replace(
    "duty=float", "n=[0];duty=float") + "print('matmuls', n[0], flush=True)\n"
probe = os.path.join(B, "gpu_probe")
if os.path.exists(probe):
    nvml_lib = next(l.split()[-1] for l in open("/proc/self/maps") if "libnvidia-ml" in l)
    watch = subprocess.Popen([probe, nvml_lib, "32"], stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    pair = [subprocess.Popen([sys.executable, "-c", COUNTED, duty, "18"], stdout=subprocess.PIPE, text=True)
            for duty in ("0.4", "0.1")]
    done = {}
    for q in pair:
        out = q.communicate()[0]
        done[q.pid] = int(out.split("matmuls")[1].split()[0])
    report = watch.communicate()[0]
    for l in report.splitlines():
        say("gpu_probe:", l)
    use = {}
    for l in report.splitlines():
        if l.strip().startswith("pid "):
            pid = int(l.split()[1].rstrip(":"))
            use[pid] = float(l.split("use ")[1].split()[0])
    total_work = sum(done.values())
    total_use = sum(use.get(pid, 0) for pid in done)
    for pid, n in done.items():
        say("RESULT pid %d: %d matmuls (%.1f%% of the work), %.1f%% of the GPU's use as read" % (
            pid, n, 100 * n / total_work, 100 * use.get(pid, 0) / total_use if total_use else 0))
    others = {pid: u for pid, u in use.items() if pid not in done}
    if others:
        say("other processes' use:", others)

# rust_gpu through Slurm's framework: four figures, NVML's counter at each
work = "/tmp/gpucheck"
os.makedirs(work + "/spool", exist_ok=True)
nvml_path = next(l.split()[-1] for l in open("/proc/self/maps") if "libnvidia-ml" in l)
with open(work + "/slurm.conf", "w") as f:
    f.write("ClusterName=gpucheck\nSlurmctldHost=localhost\nPluginDir=%s/plugins\n"
            "SlurmdSpoolDir=%s/spool\nAcctGatherEnergyType=acct_gather_energy/rust_gpu\n"
            "NodeName=localhost CPUs=1\nPartitionName=debug Nodes=ALL\n" % (B, work))
with open(work + "/acct_gather.conf", "w") as f:
    f.write("EnergyGpuNvmlLibrary=%s\nEnergyGpuAmdLibrary=none\n" % nvml_path)
env = dict(os.environ, LD_LIBRARY_PATH=B + "/lib")
cmds = "sleep=3000 step sleep=15000 step sleep=15000 step sleep=8000 step probe=30"
p = subprocess.Popen([B + "/energy-driver", work + "/slurm.conf", "slurmd"] + cmds.split(),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
marks = []
loads = []
for line in p.stdout:
    e, t = pynvml.nvmlDeviceGetTotalEnergyConsumption(h), time.time()
    line = line.rstrip()
    if line.startswith("probe rounds"):
        say("driver: %s (the slowest of the Slurm calls, 100 ms apart)" % line)
    if line.startswith("step"):
        marks.append((t, e / 1000, float(line.split("consumed=")[1].split()[0])))
        say("driver: %s | NVML %.3f J" % (line, e / 1000))
        if len(marks) == 1:
            loads.append(subprocess.Popen([sys.executable, "-c", LOAD, "1.0", "14"]))
        elif len(marks) == 2:
            loads.append(subprocess.Popen([sys.executable, "-c", LOAD, "0.5", "10"]))
p.wait()
for l in loads:
    l.wait()
for l in p.stderr.read().splitlines()[-6:]:
    say("  ", l)
for (t0, n0, c0), (t1, n1, c1) in zip(marks, marks[1:]):
    say("RESULT %.1f s: plugin %.1f J, NVML counter %.3f J, %+.1f J (%+.3f%%)" % (
        t1 - t0, c1 - c0, n1 - n0, (c1 - c0) - (n1 - n0), 100 * ((c1 - c0) - (n1 - n0)) / (n1 - n0)))
(t0, n0, c0), (t1, n1, c1) = marks[0], marks[-1]
say("RESULT whole %.1f s: plugin %.1f J, NVML counter %.3f J, %+.3f%%" % (
    t1 - t0, c1 - c0, n1 - n0, 100 * ((c1 - c0) - (n1 - n0)) / (n1 - n0)))
