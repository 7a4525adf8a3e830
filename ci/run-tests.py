#!/usr/bin/env python3
"""run-tests.py: runs the workspace's test binaries, the slow ones side by side.

    cargo test --release --workspace --no-run --message-format=json >artifacts.json
    ci/run-tests.py --artifacts artifacts.json [--jobs N] [--skip NAME]... \
        [--only NAME]... [--times FILE] [FILTER...]

Every test of the integration test binaries of the `energy-tests` package (loader, cluster,
package tests: each mostly waits on a simulator or a Slurm job) runs in its own process
(`BINARY --exact NAME`), up to N at a time (default 4), the longest expected first; the
unit-test binaries of the other packages (fast, in-process) run whole, one per slot. A test
in a process of its own cannot share state with another; the cluster tests are safe side
by side because every cluster claims its own ports and job ids (tests/src/cluster/slots.rs).

Run as root, each of those tests runs in a mount namespace of its own with a memory
filesystem for its simulators' files (ENERGY_TESTS_HW_DIR; tests/src/hardware_time.rs).

Tests in EXCLUSIVE and EXCLUSIVE_TARGETS (below: they measure time or wakeups, or their
figures suffer from a loaded CPU) run with nothing else running.

A test's name here is BINARY::TEST (cluster_ipmi::a_frozen_bmc_mid_job_never_slows_slurmd).
--skip NAME drops every test whose name contains NAME (libtest's --skip), --only NAME keeps
only tests whose name contains one of the NAMEs (and no unit-test binary), FILTER keeps
tests containing it (libtest's filter); ignored tests never run. Each test's output is printed when it ends, with its
time; at the end a table of times, slowest first, and the failures. --times FILE records
the times (seconds, binary::test per line), which the next run reads to order the tests;
ci/test-times.txt holds the times of a full run for a fresh clone. Exits 1 if a test failed.
"""

import argparse
import json
import os
import subprocess
import tempfile
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PARALLEL_PACKAGE = "energy-tests"
# Run with nothing else running:
# - timing-sensitive on a 2-core machine: a call held to under 1 ms while a library hangs,
#   plugin wakeups counted (the cluster tests' 1 s bounds on slurmd's answers stand load);
# - the shared-node tests (EnergyAttribution=shared): their jobs spin a CPU, and a step's
#   share read from a ledger that a loaded slurmd publishes late overshoots at a power
#   step (+2% to +3.5% measured with 3 other clusters beside it on 2 cores, exact alone).
#   cluster_lifecycle runs beside others: it reads its windows from the node's ledger (one
#   sample's node and job figures at each end, which a late slurmd cannot skew), where one
#   job uses about no CPU (suspended or sleeping) or two spin on one CPU, so the split does
#   not move with the load; the gang jobs by final figures and a model taken every half
#   second (all within 0.2% beside two other clusters on 2 cores). cluster_power runs beside
#   others too: its node's power is constant within each check (a late slurmd moves no
#   figure) and its simulator runs in memory at real-time priority (tests/src/hardware_time.rs),
#   so its counters step as they are told.
EXCLUSIVE = {
    # cluster_trust's attack on a shared node (the shared-node pair, held to its bounds)
    "processes_titled_as_slurmstepds_change_no_jobs_figure",
    "cpu_time_moved_out_of_a_job_is_still_its_owners",
    "a_frozen_bmc_never_blocks_a_call_and_goes_unavailable",
    "a_hung_library_never_slows_a_call_and_loses_no_energy",
    "wakeups_per_node",
    "benchmarks",
}
EXCLUSIVE_TARGETS = {"cluster_shared"}
# expected seconds when no recorded time is known
DEFAULT_SECONDS = {"cluster": 150.0, "other": 20.0}


def executables(artifacts_path):
    """(package, target, kind, path) of each test executable cargo built."""
    found = []
    with open(artifacts_path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
                continue
            if not msg.get("profile", {}).get("test"):
                continue
            package = msg["package_id"]
            # "path+file:///.../tests#energy-tests@0.1.0", "path+file:///.../senergy#0.1.0"
            # (the directory is the name) or, before cargo 1.77, "energy-tests 0.1.0 (...)"
            if "#" in package:
                where, what = package.split("#", 1)
                name = what.split("@")[0] if "@" in what else where.rstrip("/").rsplit("/", 1)[-1]
            else:
                name = package.split()[0]
            target = msg["target"]
            found.append((name, target["name"], target["kind"][0], msg["executable"]))
    return found


def list_tests(executable):
    def names(extra):
        out = subprocess.run(
            [executable, "--list", "--format", "terse", *extra],
            check=True, capture_output=True, text=True,
        ).stdout
        return [l[: -len(": test")] for l in out.splitlines() if l.endswith(": test")]

    ignored = set(names(["--ignored"]))
    return [n for n in names([]) if n not in ignored]


def selected(name, args):
    if any(s in name for s in args.skip):
        return False
    if args.only and not any(o in name for o in args.only):
        return False
    if args.filter and not any(f in name for f in args.filter):
        return False
    return True


class Job:
    def __init__(self, label, command, expected, exclusive, isolated=False):
        self.label = label
        self.command = command
        # an integration test in a process of its own, which gets a memory filesystem
        self.isolated = isolated
        self.expected = expected
        self.exclusive = exclusive
        self.seconds = None
        self.ok = None
        self.output = ""


def plan(args):
    times = {}
    for path in (os.path.join(HERE, "test-times.txt"), args.times):
        if path and os.path.exists(path):
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2:
                        times[parts[1]] = float(parts[0])
    jobs = []
    for package, target, kind, exe in executables(args.artifacts):
        if package == PARALLEL_PACKAGE and kind == "test":
            for name in list_tests(exe):
                label = f"{target}::{name}"
                if not selected(label, args):
                    continue
                slow = target.startswith("cluster") or target in ("package", "benchmarks")
                expected = times.get(label, DEFAULT_SECONDS["cluster" if slow else "other"])
                exclusive = name in EXCLUSIVE or target in EXCLUSIVE_TARGETS
                jobs.append(Job(label, [exe, "--exact", name, "--test-threads=1", "--nocapture"],
                                expected, exclusive, isolated=True))
        else:
            # a unit-test binary: libtest filters and skips inside it
            if args.only:
                continue
            label = f"{package}::{target}({kind})"
            command = [exe, *args.filter]
            for s in args.skip:
                command += ["--skip", s]
            jobs.append(Job(label, command, times.get(label, DEFAULT_SECONDS["other"]), False))
    jobs.sort(key=lambda j: -j.expected)
    return jobs


def run(jobs, slots):
    lock = threading.Condition()
    running = []
    print_lock = threading.Lock()

    def work(job):
        t0 = time.monotonic()
        command, env, memory = job.command, None, None
        if job.isolated and os.geteuid() == 0:
            # the simulators' files in memory, as the kernel keeps the hardware's: on a
            # loaded disk its journal stalls their writes for hundreds of milliseconds
            # (tests/src/hardware_time.rs); the mount lives in the test's own mount
            # namespace and is gone with its last process
            memory = tempfile.mkdtemp(prefix="energy-tests-hw-")
            command = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                       'mount -t tmpfs -o size=64m,mode=0755 energy-tests-hw "$0" && exec "$@"',
                       memory, *job.command]
            env = dict(os.environ, ENERGY_TESTS_HW_DIR=memory)
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env)
        if memory:
            try:
                os.rmdir(memory)
            except OSError:
                pass
        job.seconds = time.monotonic() - t0
        job.ok = proc.returncode == 0
        job.output = proc.stdout.decode("utf-8", "replace")
        with print_lock:
            verdict = "ok" if job.ok else f"FAILED (status {proc.returncode})"
            print(f"---- {job.label}: {verdict} in {job.seconds:.0f}s", flush=True)
            sys.stdout.write(job.output)
            print(f"---- end of {job.label}", flush=True)
        with lock:
            running.remove(job)
            lock.notify_all()

    threads = []
    pending = list(jobs)
    with lock:
        while pending:
            # the longest pending job that may start now
            def may_start(j):
                if j.exclusive:
                    return not running
                return len(running) < slots and not any(r.exclusive for r in running)

            job = next((j for j in pending if may_start(j)), None)
            if job is None:
                lock.wait()
                continue
            pending.remove(job)
            running.append(job)
            t = threading.Thread(target=work, args=(job,))
            t.start()
            threads.append(t)
    for t in threads:
        t.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", required=True)
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS", "4")))
    parser.add_argument("--skip", action="append", default=[])
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--times")
    parser.add_argument("filter", nargs="*")
    args = parser.parse_args()
    t0 = time.monotonic()
    jobs = plan(args)
    print(f"run-tests: {len(jobs)} test processes, up to {args.jobs} at a time", flush=True)
    run(jobs, max(1, args.jobs))
    wall = time.monotonic() - t0
    print("run-tests: times (s), slowest first:")
    for job in sorted(jobs, key=lambda j: -j.seconds):
        print(f"  {job.seconds:7.1f}  {'ok    ' if job.ok else 'FAILED'}  {job.label}")
    failed = [j for j in jobs if not j.ok]
    total = sum(j.seconds for j in jobs)
    print(f"run-tests: {len(jobs) - len(failed)} passed, {len(failed)} failed, "
          f"{wall:.0f}s wall for {total:.0f}s of tests")
    # a failure's output again at the end, where a CI log's tail shows it
    for job in failed:
        lines = job.output.splitlines()
        print(f"run-tests: FAILED {job.label}; the last {min(len(lines), 200)} lines of its output:")
        print("\n".join(lines[-200:]))
    for job in failed:
        print(f"run-tests: FAILED {job.label}")
    if args.times:
        with open(args.times, "w") as f:
            for job in jobs:
                f.write(f"{job.seconds:.1f} {job.label}\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
