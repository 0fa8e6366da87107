"""`granary mount`s a benchmark makes, and the directories around them.

GranaryMount mounts the Bench's bucket (bench.Bench: its origin endpoint,
bucket, prefix, environment and Procs); DirMounts mounts a local directory
(a file:// origin). Both record every mount so that the driver's
Procs.stop_all unmounts it on any exit path. Single-threaded.
"""
import glob
import json
import os
import shutil
import subprocess
import time

from .mountinfo import unmount
from .procs import StepError, settle


def daemon_pid(run_dir, who):
    """The pid in the mount daemon's pid file (mount-<id>.pid) in `run_dir`;
    StepError naming `who` when there is none."""
    files = glob.glob(os.path.join(run_dir, "mount-*.pid"))
    try:
        with open(files[0]) as f:
            return int(f.readline())
    except (IndexError, OSError, ValueError) as e:
        raise StepError(f"{who}: no daemon pid in {run_dir}: {e}") from None


def fresh_dir(b, name):
    """An empty directory <work>/name (emptied when it exists)."""
    path = os.path.join(b.work, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


# Cache directories (thousands of files each) are not deleted when their row
# ends but all together after the Granary rows of a delay: this machine's ext4
# has no journal, and there creating files within a minute or so of deleting
# thousands costs about twice the CPU (ext4 skips recently deleted inodes,
# reading inode tables to find them), which would load whichever row comes
# next. After the deletion come rows which create no files.
def cache_dir(b, name):
    """An empty cache directory for the current delay, deleted by delete_caches."""
    path = fresh_dir(b, f"{name}-{b.delay}")
    b.delete_later.append(path)
    return path


def delete_caches(b):
    for path in b.delete_later:
        shutil.rmtree(path, ignore_errors=True)
    b.delete_later.clear()


def private_file(b, name, text):
    """Writes text to <work>/name, readable by the owner only (credentials, configs)."""
    path = os.path.join(b.work, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    return path


class GranaryMount:
    """One `granary mount` daemon over the Bench's origin (b.endpoint),
    s3://<b.bucket>/<b.prefix>, with its mount point and run directory under
    b.work and its log in b.log_dir."""

    def __init__(self, b, name, cache, extra=()):
        self.b, self.name, self.cache = b, name, cache
        self.mnt = fresh_dir(b, name + "-mnt")
        self.run = os.path.join(b.work, name + "-run")
        os.makedirs(self.run, exist_ok=True)
        self.extra = list(extra)
        self.mounted = False

    def cli(self, *args, check=True, capture=True):
        """Runs `granary --endpoint E ARGS...`; its CompletedProcess, or
        StepError when it fails and check."""
        argv = [self.b.granary, "--endpoint", self.b.endpoint, *args]
        out = subprocess.run(argv, capture_output=capture, text=True, env=self.b.env)
        if check and out.returncode != 0:
            msg = (out.stderr or out.stdout or "").strip()[-400:] if capture else ""
            raise StepError(f"granary {args[0]} exited {out.returncode}: {msg}")
        return out

    def mount(self):
        settle()  # mount --load starts fetching at once
        log = os.path.join(self.b.log_dir, self.name + "-daemon.log")
        self.cli("mount", f"s3://{self.b.bucket}/{self.b.prefix}", self.mnt,
                 "--cache-dir", f"{self.cache}:{self.b.cache_quota}",
                 "--run-dir", self.run, "--log-file", log, *self.extra)
        self.mounted = True
        self.b.procs.add_mount(self.mnt, self.umount)

    def pid(self):
        """The mount daemon's pid, from its pid file in the run directory."""
        return daemon_pid(self.run, self.name)

    def umount(self):
        if self.mounted:
            self.cli("umount", self.mnt, "--run-dir", self.run, check=False)
            self.mounted = False

    def load(self):
        settle()
        t0 = time.monotonic()
        self.cli("load", self.mnt, "--run-dir", self.run, "--quiet")
        return time.monotonic() - t0

    def status(self):
        out = self.cli("status", self.mnt, "--run-dir", self.run, "--json")
        try:
            return json.loads(out.stdout)
        except ValueError as e:
            raise StepError(f"granary status --json did not print JSON: {e}") from None

    def wait_loaded(self, timeout=3600):
        """Waits for a background --load to finish (phase no longer Loading)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.status()
            if str(s.get("phase", "")).lower() != "loading":
                return s
            time.sleep(0.5)
        raise StepError("background load did not finish")


class DirMounts:
    """`granary mount`s of one local directory (a file:// origin) over one cache
    directory, each with its own mount point and run directory under `work` and
    its daemon log in `log_dir` (GranaryMount mounts a Bench's S3 bucket)."""

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
