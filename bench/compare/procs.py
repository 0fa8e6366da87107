"""Process and mount bookkeeping for the comparison driver.

Every process the driver starts goes through Procs.start and is stopped by PID
(SIGTERM, then SIGKILL after a grace period) by Procs.stop or, at the latest,
Procs.stop_all on exit. Every FUSE mount made by a peer is recorded and
unmounted (lazily if busy) before its process is stopped. Single-threaded: the
driver runs one step at a time.
"""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request


class StepError(RuntimeError):
    """A step of the benchmark failed; the message says which and why."""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def tail(path, n=5):
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-n:])
    except OSError:
        return ""


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def settle():
    """Writes back dirty pages (sync) so a measurement does not pay for the
    previous step's writeback. A real training job has seconds to minutes of
    GPU work between epochs; this run's epochs follow each other within a
    second, and on these 2-core machines the flusher and the writers of a step
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


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU seconds of pid so far, all its threads (also exited ones)
    included: utime + stime of /proc/<pid>/stat. None when pid is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: the fields after it start past the last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of proc(5)


def with_children(pid):
    """pid and every process under it now (a mount daemon may do its work in a
    child of the process it started as, so its CPU is the sum over all of
    them). Processes that exit meanwhile are left out."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


class CpuMeter:
    """CPU seconds (user + system, all threads) two sets of processes spend from
    construction to stop(): the cache's and the origin's (server and proxy).
    A set is None when it is empty or one of its processes is gone."""

    def __init__(self, cache_pids, origin_pids):
        # A mount's daemon works in a child of the process that mounted (its
        # holder): a cache pid counts with every process under it.
        # dict.fromkeys: a pid given with its children counts once.
        self.sets = [list(dict.fromkeys(p for pid in cache_pids for p in with_children(pid))),
                     list(origin_pids)]
        self.before = [self._sum(pids) for pids in self.sets]

    @staticmethod
    def _sum(pids):
        vals = [cpu_seconds(p) for p in pids]
        return None if not vals or None in vals else sum(vals)

    def stop(self):
        after = [self._sum(pids) for pids in self.sets]
        return tuple(None if a is None or b is None else a - b
                     for a, b in zip(after, self.before))


def per_image_ms(cpu_s, files):
    return None if cpu_s is None or not files else 1000 * cpu_s / files


def write_results(out, results, md):
    """Writes results.json and results.md (the markdown `md`) to the
    directory `out` and prints the markdown."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    print("\n" + md)


def check_status(who, problems):
    """--check: prints each problem on stderr as '<who> --check: <problem>' and
    returns the exit status (1 with any problem, else 0)."""
    for p in problems:
        print(f"{who} --check: {p}", file=sys.stderr)
    return 1 if problems else 0


def daemon_pid(run_dir, who):
    """The pid in the mount daemon's pid file (mount-<id>.pid) in `run_dir`;
    StepError naming `who` when there is none."""
    files = glob.glob(os.path.join(run_dir, "mount-*.pid"))
    try:
        with open(files[0]) as f:
            return int(f.readline())
    except (IndexError, OSError, ValueError) as e:
        raise StepError(f"{who}: no daemon pid in {run_dir}: {e}") from None


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


def unmount(path):
    """Unmounts a FUSE mount point; lazily when it stays busy. Never raises."""
    for argv in (["fusermount3", "-u", path], ["umount", path]):
        if not is_mounted(path):
            return
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if not is_mounted(path):
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Procs:
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

    def stop_all(self):
        for m in list(self.mounts):
            self.unmount(m)
        for _, p in list(self.live.values()):
            self.stop(p)


class DirMounts:
    """`granary mount`s of one local directory (a file:// origin) over one cache
    directory, each with its own mount point and run directory under `work` and
    its daemon log in `log_dir`. Used by over_memory.py and train_sources.py
    (the comparison's peers.GranaryMount mounts the bench's S3 bucket)."""

    def __init__(self, granary, source_dir, cache, work, log_dir):
        self.granary, self.source, self.cache = granary, source_dir, cache
        self.work, self.log_dir = work, log_dir
        self.live = []  # (mnt, run)

    def cli(self, *argv):
        """Runs `granary ARGV...`; its stdout, or StepError naming the failure."""
        out = subprocess.run([self.granary, *argv], capture_output=True, text=True)
        if out.returncode != 0:
            raise StepError(f"granary {argv[0]} exited {out.returncode}: "
                            f"{(out.stderr or out.stdout).strip()[-400:]}")
        return out.stdout

    def mount(self, name, *flags):
        """Mounts the directory at <work>/<name>-mnt; returns (mnt, run, daemon pid)."""
        mnt = os.path.join(self.work, name + "-mnt")
        run = os.path.join(self.work, name + "-run")
        os.makedirs(mnt, exist_ok=True)
        os.makedirs(run, exist_ok=True)
        settle()
        self.cli("mount", "file://" + self.source, mnt, "--cache-dir", self.cache + ":1T",
                 "--run-dir", run, "--log-file", os.path.join(self.log_dir, name + "-daemon.log"),
                 *flags)
        self.live.append((mnt, run))
        return mnt, run, daemon_pid(run, f"granary mount {name}")

    def umount(self, mnt, run):
        subprocess.run([self.granary, "umount", mnt, "--run-dir", run],
                       capture_output=True, text=True)
        unmount(mnt)
        self.live = [m for m in self.live if m[0] != mnt]

    def umount_all(self):
        for mnt, run in list(self.live):
            self.umount(mnt, run)

    def load(self, mnt, run):
        """`granary load` of the whole mount; returns (seconds, cached_ratio),
        or StepError when it left the cache less than 99.9 % full."""
        t0 = time.monotonic()
        self.cli("load", mnt, "--run-dir", run, "--quiet")
        secs = time.monotonic() - t0
        status = json.loads(self.cli("status", mnt, "--run-dir", run, "--json"))
        ratio = float(status.get("cached_ratio", 0))
        if ratio < 0.999:
            raise StepError(f"the load left the cache {100 * ratio:.1f}% full")
        return secs, ratio
