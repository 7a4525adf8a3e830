#!/usr/bin/env python3
"""Per-node supervisor used by ci/cluster.sh (one instance per slurmd).

Why this exists: slurmd launches every slurmstepd through a setsid() + double
fork, so slurmstepds (and the job tasks under them) end up in their own
sessions, re-parented away from slurmd.  Without help there is no reliable way
to find them again except by name, which could hit processes of some other
Slurm on the machine.  This supervisor marks itself as a *child subreaper*
(prctl PR_SET_CHILD_SUBREAPER), so every orphan from its subtree - slurmstepds,
leftover job tasks - is re-parented to it.  "Stop everything of node nK" then
simply means "stop every child of this supervisor".

It also implements the slurmd restart needed by tests: on SIGUSR1 it stops only
slurmd (slurmstepds keep running as its children) and launches the same
command line again, which creates a fresh private mount namespace and re-runs
NODE_HOOK. How: `PIDFILE.restart` may say "SIGNAL DOWN_SECS" (e.g. "KILL 20": slurmd killed at once, started again 20 s later);
without it, TERM and at once.

usage: nodesup.py PIDFILE EXITFILE LOGFILE -- CMD [ARGS...]
  PIDFILE   written (atomically) with "<slurmd pid> <starttime>" on every launch
  EXITFILE  written with slurmd's wait status text when slurmd dies on its own
  LOGFILE   slurmd's stdout/stderr (appended)
Signals: SIGTERM/SIGINT = stop node (TERM, then KILL after GRACE seconds, for
every child until none is left), SIGUSR1 = restart slurmd.
"""

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
GRACE = float(os.environ.get("NODESUP_GRACE", "3"))  # seconds before SIGKILL

stop_requested = False
restart_requested = False


def log(msg):
    sys.stderr.write(time.strftime("%H:%M:%S ") + "nodesup: " + msg + "\n")
    sys.stderr.flush()


def starttime(pid):
    """Field 22 of /proc/PID/stat; guards against pid reuse in cluster.sh."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    # comm (field 2) may contain spaces/parens: fields after the last ')'
    return data[data.rindex(")") + 2 :].split()[19]


def children():
    """Direct children of this process (includes re-parented orphans)."""
    me = os.getpid()
    kids = set()
    try:
        for tid in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{tid}/children") as f:
                kids.update(int(x) for x in f.read().split())
        return kids
    except OSError:
        pass
    # Kernel without CONFIG_PROC_CHILDREN: scan /proc for our ppid.
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
            if int(data[data.rindex(")") + 2 :].split()[1]) == me:
                kids.add(int(entry))
        except (OSError, ValueError):
            pass
    return kids


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class Node:
    def __init__(self, pidfile, exitfile, logfile, cmd):
        self.pidfile, self.exitfile, self.logfile, self.cmd = (
            pidfile, exitfile, logfile, cmd)
        self.slurmd = None  # pid of the current slurmd, None when not running
        self.restarting = False  # slurmd was stopped on purpose and will be started again

    def spawn(self):
        try:
            os.unlink(self.exitfile)
        except FileNotFoundError:
            pass
        pid = os.fork()
        if pid == 0:
            try:
                fd = os.open(self.logfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                null = os.open("/dev/null", os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                    signal.signal(s, signal.SIG_DFL)
                os.execvp(self.cmd[0], self.cmd)
            except BaseException as e:  # noqa: BLE001 - report anything
                os.write(2, f"nodesup: exec {self.cmd[0]} failed: {e}\n".encode())
            os._exit(127)
        self.slurmd = pid
        self.restarting = False
        write_atomic(self.pidfile, f"{pid} {starttime(pid)}\n")
        log(f"started slurmd pid {pid}")

    def reap(self):
        """Reap every exited child; returns False when we have no child at all."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.slurmd:
                self.slurmd = None
                desc = describe(status)
                log(f"slurmd {pid} {desc}")
                if not stop_requested and not self.restarting:
                    write_atomic(self.exitfile, desc + "\n")

    def stop_slurmd(self, timeout, sig=signal.SIGTERM):
        """Signal slurmd only (its slurmstepds keep running), KILL after timeout."""
        if self.slurmd is None:
            return
        pid = self.slurmd
        self.restarting = True
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while self.slurmd == pid:
            self.reap()
            if self.slurmd != pid:
                break
            if time.monotonic() > deadline:
                log(f"slurmd {pid} ignored SIGTERM, sending SIGKILL")
                os.kill(pid, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.05)

    def stop_all(self):
        """Stop slurmd first, then every remaining child (slurmstepds, tasks)."""
        if self.slurmd is not None:
            try:
                os.kill(self.slurmd, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + GRACE
        termed = set()
        while True:
            if not self.reap():
                break
            kids = children()
            if not kids:
                break
            late = time.monotonic() > deadline
            for k in kids:
                if late or k not in termed:
                    try:
                        os.kill(k, signal.SIGKILL if late else signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                    termed.add(k)
            time.sleep(0.05)
        log("all children gone")


def restart_plan(pidfile):
    """The signal and the seconds down of the restart asked for (see the module doc)."""
    path = pidfile + ".restart"
    try:
        with open(path) as f:
            name, down = f.read().split()
        os.unlink(path)
        return signal.Signals["SIG" + name], float(down)
    except (OSError, ValueError, KeyError):
        return signal.SIGTERM, 0.0


def describe(status):
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"wait status {status}"


def main(argv):
    if len(argv) < 6 or argv[4] != "--":
        sys.exit(__doc__)
    pidfile, exitfile, logfile, cmd = argv[1], argv[2], argv[3], argv[5:]

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"nodesup: prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")

    def on_stop(_sig, _frm):
        global stop_requested
        stop_requested = True

    def on_restart(_sig, _frm):
        global restart_requested
        restart_requested = True

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, on_restart)

    node = Node(pidfile, exitfile, logfile, cmd)
    node.spawn()
    global restart_requested
    while not stop_requested:
        if restart_requested:
            restart_requested = False
            sig, down = restart_plan(pidfile)
            log(f"restart requested: {sig.name}, {down} s down")
            node.stop_slurmd(timeout=10, sig=sig)
            until = time.monotonic() + down
            while time.monotonic() < until and not stop_requested:
                node.reap()
                time.sleep(0.1)
            if not stop_requested:
                node.spawn()
        node.reap()
        # Polling keeps signal handling trivial; 0.1 s is plenty for tests.
        time.sleep(0.1)
    log("stop requested")
    node.stop_all()


if __name__ == "__main__":
    main(sys.argv)
