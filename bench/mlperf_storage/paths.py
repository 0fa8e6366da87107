"""The access paths a workload is run over, and the origin behind them.

A path gives each run (trial) of a workload a source to read from and the
pids of the processes that serve it (their CPU counts as the client's):

  local         the generated tree on local disk
  granary-cold  a fresh `granary mount` with an empty cache for every run
  granary-warm  one `granary mount`, filled by `granary load` before the runs
  granary-api   the same warm mount read through Granary's Python module
  s3fs, rclone  a fresh FUSE mount (rclone: with an empty --vfs-cache-mode full
                cache) for every run
  granary-cluster, granary-cluster-cold
                a 3-node Granary cluster in network namespaces, read through
                node 0's mount (cluster_paths.py)

The page cache is dropped before every run when root may (drop_page_cache),
so a run reads from the path, not from memory. The S3-compatible origin
(s3rver or moto_server, started by bench.benchlib's Bench) holds every
workload's tree under s3://mlperf/<workload>/; with --origin file, Granary
mounts the local tree as file://DIR and the S3-only peers are skipped.

Every process is started through Procs and stopped by its pid; every mount is
recorded and unmounted by the driver's stop_all, also on errors.
Single-threaded (the driver's thread).
"""
import copy
import json
import os
import shutil
import signal
import subprocess
import time

from bench.benchlib.cpu import with_children
from bench.benchlib.mountinfo import is_mounted, lists
from bench.benchlib.mounts import DirMounts, GranaryMount, private_file
from bench.benchlib.procs import StepError, drop_page_cache, settle

BUCKET = "mlperf"
ALL_PATHS = ["local", "granary-cold", "granary-warm", "granary-api", "granary-cluster",
             "granary-cluster-cold", "s3fs", "rclone"]


class Origin:
    """The S3-compatible server (through the Bench) or none (file://)."""

    def __init__(self, bench, kind):
        self.bench, self.kind = bench, kind  # kind: s3rver | moto | file
        self.pids = []

    def start(self):
        if self.kind == "file":
            return
        self.bench.start_origin()
        self.bench.endpoint = self.bench.origin
        self.bench.bucket = BUCKET
        self.pids = list(self.bench.origin_pids)
        self._aws("s3", "mb", f"s3://{BUCKET}")

    def _aws(self, *argv):
        out = subprocess.run(["aws", "--endpoint-url", self.bench.origin, *argv],
                             capture_output=True, text=True, env=self.bench.env)
        if out.returncode != 0:
            raise StepError(f"aws {' '.join(argv[:2])} exited {out.returncode}: "
                            f"{(out.stderr or out.stdout).strip()[-300:]}")

    def upload(self, data_root):
        """Copies every workload's tree (data_root/<workload>/...) to
        s3://mlperf/<workload>/...; False when there is no S3 origin."""
        if self.kind == "file":
            return False
        self._aws("s3", "cp", "--recursive", "--only-show-errors", data_root, f"s3://{BUCKET}")
        return True


class GranaryMounts:
    """`granary mount`s of one workload's tree, over the S3 origin or file://."""

    def __init__(self, bench, origin, reaper, workload, local_root):
        self.bench, self.origin, self.reaper = bench, origin, reaper
        self.workload, self.local_root = workload, local_root
        self.seq = 0

    def mount(self, label):
        """A fresh mount over an empty cache; returns a Mounted."""
        m = self._mount(label)
        self.reaper.track(m.pid, m.cache)
        return m

    def _mount(self, label):
        self.reaper.sweep()
        self.seq += 1
        name = f"g{self.seq}-{self.workload[:4]}"
        cache = os.path.join(self.bench.work, name + "-cache")
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(cache)
        if self.origin.kind == "file":
            dm = DirMounts(self.bench.granary, self.local_root, cache, self.bench.work,
                           self.bench.log_dir)
            mnt, run, pid = dm.mount(name)
            self.bench.procs.add_mount(mnt, lambda: dm.umount(mnt, run))
            return Mounted(self.bench.procs, label, mnt, run, pid, cache, dm.cli)
        ctx = copy.copy(self.bench)  # shares procs, env, endpoint; its own prefix
        ctx.prefix = self.workload
        g = GranaryMount(ctx, name, cache)
        g.mount()  # records the mount (and g.umount) in procs
        return Mounted(self.bench.procs, label, g.mnt, g.run, g.pid(), cache,
                       lambda *a: g.cli(*a).stdout)


class Mounted:
    """One mounted Granary daemon: its mount point, run dir, pid and cache.
    cli(*argv) runs `granary ARGV` against it and returns its stdout."""

    def __init__(self, procs, label, mnt, run, pid, cache, cli):
        self.procs, self.label, self.mnt, self.run = procs, label, mnt, run
        self.pid, self.cache, self._cli = pid, cache, cli

    def load(self):
        """`granary load`; returns seconds. StepError when the cache is left short."""
        settle()
        t0 = time.monotonic()
        self._cli("load", self.mnt, "--run-dir", self.run, "--quiet")
        secs = time.monotonic() - t0
        ratio = float(self.status().get("cached_ratio", 0))
        if ratio < 0.999:
            raise StepError(f"{self.label}: the load left the cache {100 * ratio:.1f}% full")
        return secs

    def status(self):
        out = self._cli("status", self.mnt, "--run-dir", self.run, "--json")
        try:
            return json.loads(out)
        except ValueError as e:
            raise StepError(f"granary status --json did not print JSON: {e}") from None

    def origin_requests(self):
        return int(self.status().get("origin_requests", 0))

    def close(self):
        """Unmounts; the daemon's exit and the cache's deletion are the reaper's."""
        self.procs.unmount(self.mnt)


class DaemonReaper:
    """The mount daemons started so far (by pid) and their caches.

    A daemon takes a moment to exit after `granary umount`; the next run need
    not wait for it. sweep() deletes the caches of daemons that have exited;
    sweep(wait=True), at the end, waits for every daemon and stops any still
    running by its pid (SIGTERM, then SIGKILL)."""

    def __init__(self):
        self.live = {}  # pid -> cache directory

    def track(self, pid, cache):
        self.live[pid] = cache

    def sweep(self, wait=False):
        for pid, cache in list(self.live.items()):
            gone = _exits(pid, 10 if wait else 0)
            for sig in ((signal.SIGTERM, signal.SIGKILL) if wait and not gone else ()):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
                gone = _exits(pid, 5)
                if gone:
                    break
            if gone:
                shutil.rmtree(cache, ignore_errors=True)
                del self.live[pid]


def _exits(pid, seconds):
    """Whether pid is gone, waiting up to `seconds` for it."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


class Source:
    """What one run reads: (kind, ...) for trial.TrialSpec.source, the serving pids,
    and a check to make after the run (None when there is nothing to check).

    client_pids: the serving processes on the client node, when the path also
    has some elsewhere (a cluster's other nodes); origin_pids: the path's own
    processes in front of the origin (counted as the origin's CPU);
    figures(run): more figures of the run, measured before the path stops."""

    def __init__(self, source, pids, after=None, client_pids=None, origin_pids=(),
                 figures=None):
        self.source, self.pids, self.after = source, pids, after
        self.client_pids, self.origin_pids, self.figures = client_pids, list(origin_pids), figures


class LocalPath:
    name = "local"

    def __init__(self, local_root):
        self.root = local_root
        self.note = "ext4, page cache dropped before every run" if os.geteuid() == 0 else \
            "ext4 (page cache not dropped: not root)"

    def run_source(self):
        drop_page_cache()
        return Source(("posix", self.root), [])

    def end_run(self):
        pass

    def close(self):
        pass


class GranaryColdPath:
    """A fresh mount and an empty cache for every run."""
    name = "granary-cold"
    note = "fresh `granary mount`, empty cache, every run"

    def __init__(self, mounts):
        self.mounts, self.m = mounts, None

    def run_source(self):
        self.m = self.mounts.mount(self.name)
        drop_page_cache()
        return Source(("posix", self.m.mnt), with_children(self.m.pid))

    def end_run(self):
        if self.m:
            self.m.close()
            self.m = None

    def close(self):
        self.end_run()


class GranaryWarm:
    """One mount loaded by `granary load`, shared by the warm and API paths."""

    def __init__(self, mounts, data_bytes):
        self.mounts, self.data_bytes = mounts, data_bytes
        self.m, self.load_s = None, None

    def get(self):
        if self.m is None:
            self.m = self.mounts.mount("granary-warm")
            self.load_s = self.m.load()
        return self.m

    def load_note(self):
        if self.load_s is None:  # no run needed the warm mount (every one was skipped)
            return "`granary load` (not run)"
        return (f"`granary load` {self.data_bytes / 2**30 / self.load_s:.2f} GiB/s "
                f"({self.load_s:.1f} s)")

    def close(self):
        if self.m:
            self.m.close()
            self.m = None


class GranaryWarmPath:
    name = "granary-warm"

    def __init__(self, warm, api=False):
        self.warm, self.api = warm, api
        if api:
            self.name = "granary-api"

    @property
    def note(self):
        how = "Python module attached to the mount" if self.api else "the mount"
        return f"{how}, after {self.warm.load_note()}; page cache dropped before every run"

    def run_source(self):
        m = self.warm.get()
        drop_page_cache()
        before = m.origin_requests()

        def no_origin_reads():
            after = m.origin_requests()
            return None if after == before else f"{after - before} origin requests in a warm run"

        src = ("api", m.mnt, m.run) if self.api else ("posix", m.mnt)
        return Source(src, with_children(m.pid), no_origin_reads)

    def end_run(self):
        pass

    def close(self):
        pass


class PeerPath:
    """s3fs or rclone: a fresh mount (rclone: empty VFS cache) for every run."""

    def __init__(self, bench, kind, workload):
        self.b, self.name, self.workload = bench, kind, workload
        self.p = self.mnt = self.cache = None
        self.note = {"s3fs": "s3fs ro, stat cache 24h, parallel_count/multireq_max 16",
                     "rclone": "rclone mount --vfs-cache-mode full (empty cache every run), "
                               "--transfers 16, --buffer-size 1M"}[kind]

    def _argv(self):
        env, url = self.b.env, self.b.origin
        if self.name == "s3fs":
            pw = private_file(self.b, "s3fs.passwd",
                              f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}\n")
            opts = ["ro", "use_path_request_style", "endpoint=us-east-1", f"url={url}",
                    f"passwd_file={pw}", "parallel_count=16", "multireq_max=16",
                    "stat_cache_expire=86400", "max_stat_cache_size=1000000"]
            return ["s3fs", f"{BUCKET}:/{self.workload}", self.mnt, "-f",
                    *[x for o in opts for x in ("-o", o)]]
        conf = private_file(self.b, "rclone.conf", "[origin]\ntype = s3\nprovider = Other\n"
                            f"env_auth = true\nendpoint = {url}\nforce_path_style = true\n"
                            "region = us-east-1\n")
        self.cache = os.path.join(self.b.work, "rclone-cache")
        shutil.rmtree(self.cache, ignore_errors=True)
        return ["rclone", "mount", f"origin:{BUCKET}/{self.workload}", self.mnt, "--config", conf,
                "--cache-dir", self.cache, "--read-only", "--vfs-cache-mode", "full",
                "--dir-cache-time", "24h", "--attr-timeout", "24h", "--transfers", "16",
                "--buffer-size", "1M", "--no-checksum", "--s3-no-head-object"]

    def run_source(self):
        self.mnt = os.path.join(self.b.work, self.name + "-mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.p = self.b.procs.start(self.name, self._argv(), env=self.b.env)
        self.b.procs.add_mount(self.mnt)
        self.b.procs.wait_until(self.p,
                                lambda: is_mounted(self.mnt) and lists(self.mnt, "train"),
                                f"{self.name} mount")
        drop_page_cache()
        return Source(("posix", self.mnt), [self.p.pid])

    def end_run(self):
        if self.p:
            self.b.procs.unmount(self.mnt)
            self.b.procs.stop(self.p)
            self.p = None
        if self.cache:
            shutil.rmtree(self.cache, ignore_errors=True)

    def close(self):
        self.end_run()


def unavailable(path, origin_kind, granary_api_ok):
    """Why `path` cannot run here, or None."""
    if path.startswith("granary-cluster") and origin_kind == "file":
        return f"{path} needs an S3 origin (not --origin file)"
    if path in ("s3fs", "rclone"):
        if origin_kind == "file":
            return f"{path} needs an S3 origin (not --origin file)"
        if shutil.which(path) is None:
            return f"{path} is not installed (Debian package {path})"
    if path == "granary-api" and not granary_api_ok:
        return "Granary's Python module is not built (build/python/_granary*.so)"
    return None
