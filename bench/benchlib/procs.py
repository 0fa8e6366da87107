"""Processes a benchmark starts, and the small things every step needs.

Every process a driver starts goes through Procs.start and is stopped by PID
(SIGTERM, then SIGKILL after a grace period) by Procs.stop or, at the latest,
Procs.stop_all on exit. Every FUSE mount a step makes is recorded with
Procs.add_mount and unmounted (lazily if busy) before the processes are
stopped. Single-threaded: a driver runs one step at a time.
"""
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

from .mountinfo import unmount


class StepError(RuntimeError):
    """A step of the benchmark failed; the message says which and why."""


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tail(path, n=5):
    """The last n lines of a log file on one line, '' when it cannot be read."""
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-n:])
    except OSError:
        return ""


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def answers(url):
    """Whether an HTTP server answers url (an HTTP error still means it is up)."""
    try:
        http_get(url, timeout=1)
        return True
    except OSError as e:
        return getattr(e, "code", None) is not None


def settle():
    """Writes back dirty pages (sync) so a measurement does not pay for the
    previous step's writeback. A real training job has seconds to minutes of
    GPU work between epochs; a benchmark's epochs follow each other within a
    second, and on a 2-core machine the flusher and the writers of a step
    that just wrote 1-3 GB took ~25 % of the next step's throughput."""
    os.sync()


def drop_page_cache():
    """Drops clean page cache (needs root); False when that is not allowed."""
    if os.geteuid() != 0:
        return False
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


def bench_setup(who, executables, out):
    """Checks that every path in `executables` is built, then empties and
    returns <out>/logs, where a benchmark keeps its logs."""
    for p in executables:
        if not os.access(p, os.X_OK):
            raise SystemExit(f"{who}: {p} is missing; build it first")
    log_dir = os.path.join(out, "logs")
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    return log_dir


class Procs:
    """The processes and mounts of one run; see the module's contract."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.live = {}  # pid -> (name, Popen)
        self.mounts = {}  # mount point -> how to unmount it

    def start(self, name, argv, env=None, stdout=None, cpus=None):
        """Starts argv in the background, stderr (and stdout unless given) to <log_dir>/<name>.log.

        cpus: the set of CPUs it may run on (default: this process's own).
        """
        log_path = os.path.join(self.log_dir, name + ".log")
        log = open(log_path, "ab")
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        p = subprocess.Popen(argv, stdout=stdout or log, stderr=log, env=env,
                             start_new_session=True, preexec_fn=pin)
        log.close()
        self.live[p.pid] = (name, p)
        p.log_path = log_path
        return p

    def pid_of(self, *names):
        """The pid of the live process started under one of names, or None."""
        return next((p.pid for name, p in self.live.values() if name in names), None)

    def wait_until(self, p, ready, what, timeout=60):
        """Polls ready() until true; raises StepError if p exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if p.poll() is not None:
                raise StepError(f"{what}: exited with {p.returncode}: {tail(p.log_path)}")
            time.sleep(0.1)
        raise StepError(f"{what}: not ready after {timeout} s: {tail(p.log_path)}")

    def stop(self, p, grace=10):
        if p.pid not in self.live:
            return
        del self.live[p.pid]
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGTERM)
                p.wait(timeout=grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def add_mount(self, path, how=None):
        """Records a mount; how() unmounts it (default: fusermount3 -u / umount)."""
        self.mounts[path] = how or (lambda: unmount(path))

    def unmount(self, path):
        how = self.mounts.pop(path, None)
        if how:
            how()
        unmount(path)

    def unmount_all(self):
        for m in list(self.mounts):
            self.unmount(m)

    def stop_all(self):
        self.unmount_all()
        for _, p in list(self.live.values()):
            self.stop(p)
