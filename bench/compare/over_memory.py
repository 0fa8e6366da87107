#!/usr/bin/env python3
"""Which read mode wins when the data set is larger than memory.

Generates an ImageNet-like data set on local disk (bench/gen_imagenet; default
128,660 files, ~14 GB), fills a Granary cache with it (`granary mount` of the
directory plus `granary load`: warm epochs never reach the origin, so a local
origin stands in for S3 here), and then runs the readers and every mount
daemon inside a memory cgroup that holds 1/--ratio of the data set (default
1.5: the data set is 1.5x the memory), as on a node or in a pod whose memory
is smaller than its data. Page cache counts against the cgroup, so each epoch
reads whatever the last one could not keep from the disk again.

For each of local ext4 (the same files), Granary --read-mode cached and
Granary --read-mode passthrough: page cache dropped, then --epochs shuffled
epochs (bench/reader: whole files, 16 threads, the same seeds for every
path); --rounds times, each round in the reverse order of the one before. Prints img/s, the ratio to ext4, the daemon's CPU per image, and the
bytes each epoch read from the disk per image (/proc/diskstats), and writes
results.md and results.json to --out.

  flock /tmp/granary-bench.lock bench/compare/over_memory.py --build-dir build --rounds 3 --out DIR
  bench/compare/over_memory.py --files 2000 --out /tmp/om   # a quick look (needs root)
  # another ratio over the same data set and cache, without generating them again:
  bench/compare/over_memory.py --ratio 3 --rounds 2 --work /var/tmp/om-work --keep --out DIR

Needs root (memory cgroup, mounts, dropping the page cache). Every process it
starts it stops, every mount it unmounts and the cgroup it made it removes.
"""
if __name__ == "__main__" and not __package__:
    # Run by path: run again as the module bench.compare.over_memory with the
    # repository root on PYTHONPATH, where it finds bench.benchlib.
    import os
    import sys
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))
    os.execv(sys.executable, [sys.executable, "-m", "bench.compare.over_memory", *sys.argv[1:]])

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench.benchlib.cpu import CpuMeter, per_image_ms
from bench.benchlib.mounts import DirMounts
from bench.benchlib.procs import StepError, bench_setup, drop_page_cache, settle
from bench.benchlib.results import write_results

PATHS = ["local", "cached", "passthrough"]


class MemoryCgroup:
    """A memory cgroup (v2 when the unified hierarchy has the memory
    controller, else v1) that this process and everything it starts later
    join; removed again by close()."""

    def __init__(self, limit_bytes):
        v2_root = "/sys/fs/cgroup"
        controllers = os.path.join(v2_root, "cgroup.controllers")
        name = f"granary-over-memory-{os.getpid()}"
        if os.path.exists(controllers) and "memory" in open(controllers).read().split():
            self.v2, self.root = True, v2_root
            self.limit_file, self.usage_file = "memory.max", "memory.current"
        elif os.path.isdir("/sys/fs/cgroup/memory"):
            self.v2, self.root = False, "/sys/fs/cgroup/memory"
            self.limit_file, self.usage_file = "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            raise SystemExit("over_memory: no memory cgroup controller (neither cgroup v2 with "
                             "memory nor /sys/fs/cgroup/memory)")
        self.path = os.path.join(self.root, name)
        try:
            os.mkdir(self.path)
        except OSError as e:
            raise SystemExit(f"over_memory: cannot create {self.path} (needs root): {e}") from None
        self._write(self.limit_file, str(limit_bytes))
        self.limit = limit_bytes

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value + "\n")

    def join(self):
        self._write("cgroup.procs", str(os.getpid()))

    def usage(self):
        with open(os.path.join(self.path, self.usage_file)) as f:
            return int(f.read())

    def file_bytes(self):
        """Page cache charged to the cgroup (memory.stat file / cache)."""
        key = "file" if self.v2 else "cache"
        with open(os.path.join(self.path, "memory.stat")) as f:
            for ln in f:
                k, _, v = ln.partition(" ")
                if k == key:
                    return int(v)
        return 0

    def close(self):
        with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()) + "\n")
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)  # a child's exit may still be in flight
        print(f"over_memory: could not remove {self.path}", file=sys.stderr)


def disk_of(path):
    """The block device (as in /proc/diskstats) path lies on, e.g. vda."""
    dev = os.stat(path).st_dev
    sysdir = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    name = os.path.basename(os.path.realpath(sysdir))
    if os.path.exists(os.path.join(sysdir, "partition")):
        name = os.path.basename(os.path.dirname(os.path.realpath(sysdir)))
    return name


def sectors_read(disk):
    with open("/proc/diskstats") as f:
        for ln in f:
            p = ln.split()
            if p[2] == disk:
                return int(p[5])
    raise StepError(f"{disk} is not in /proc/diskstats")


class Run:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.build = os.path.abspath(args.build_dir)
        self.granary = os.path.join(self.build, "src", "cli", "granary")
        self.reader = os.path.join(self.build, "bench", "reader", "granary_reader")
        self.gen = os.path.join(self.build, "bench", "gen_imagenet", "gen_imagenet")
        self.log_dir = bench_setup("over_memory", (self.granary, self.reader, self.gen), args.out)
        self.local = os.path.join(work, "local")
        self.mounts = DirMounts(self.granary, self.local, os.path.join(work, "cache"), work,
                                self.log_dir)
        self.disk = None

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def generate(self):
        t0 = time.monotonic()
        self.list_file = os.path.join(self.local, "train_list.txt")
        if self.args.work and os.path.exists(self.list_file):
            self.log(f"reusing the data set in {self.local}")
            self.count_bytes(t0)
            return
        out = subprocess.run([self.gen, "--count", str(self.args.files), "--seed", "1", "--quiet",
                              "--out", self.local], capture_output=True, text=True)
        with open(os.path.join(self.log_dir, "gen_imagenet.log"), "w") as f:
            f.write(out.stdout + out.stderr)
        if out.returncode != 0:
            raise SystemExit(f"over_memory: gen_imagenet failed: {out.stderr[-400:]}")
        self.count_bytes(t0)

    def count_bytes(self, t0):
        with open(self.list_file) as f:
            paths = [ln.split()[0] for ln in f if ln.strip()]
        self.total_bytes = sum(os.path.getsize(os.path.join(self.local, p)) for p in paths)
        self.disk = disk_of(self.work)
        self.log(f"data set: {len(paths)} files, {self.total_bytes / 1e9:.2f} GB, "
                 f"{time.monotonic() - t0:.0f} s")

    def fill_cache(self):
        """granary load of the whole data set, outside the memory cgroup."""
        mnt, run, _ = self.mounts.mount("load", "--read-mode", "passthrough")
        try:
            secs, ratio = self.mounts.load(mnt, run)
        except StepError as e:
            raise SystemExit(f"over_memory: {e}") from None
        finally:
            self.mounts.umount(mnt, run)
        self.log(f"cache filled: {self.args.files / secs:.0f} files/s, {100 * ratio:.1f}% cached")

    def epoch(self, root, label, seed, cg, daemon_pid=None):
        js = os.path.join(self.log_dir, label + ".json")
        argv = [self.reader, "--list", self.list_file, "--root", root, "--threads",
                str(self.args.threads), "--epochs", "1", "--seed", str(seed), "--json", js]
        settle()
        disk0 = sectors_read(self.disk)
        cpu = CpuMeter([daemon_pid] if daemon_pid else [], [])
        out = subprocess.run(argv, capture_output=True, text=True, timeout=self.args.epoch_timeout)
        daemon_cpu, _ = cpu.stop()
        disk_bytes = (sectors_read(self.disk) - disk0) * 512
        with open(os.path.join(self.log_dir, "reader.log"), "a") as f:
            f.write(f"== {label}\n{out.stdout}{out.stderr}")
        if out.returncode != 0 and not os.path.exists(js):
            raise StepError(f"{label}: reader exited {out.returncode}: {out.stderr[-300:]}")
        with open(js) as f:
            e = json.load(f)["epochs"][0]
        r = {"images_per_s": e["images_per_s"], "mb_per_s": e["mb_per_s"],
             "p99_ms": e["p99_us"] / 1000, "files": e["files"], "errors": e["errors"],
             "disk_kb_per_image": disk_bytes / 1e3 / max(1, e["files"]),
             "daemon_cpu_ms_per_image": per_image_ms(daemon_cpu, e["files"]),
             "cgroup_page_cache_gb": cg.file_bytes() / 1e9}
        cpu_note = (f"  daemon CPU {r['daemon_cpu_ms_per_image']:.3f} ms/img"
                    if r["daemon_cpu_ms_per_image"] is not None else "")
        self.log(f"  {label:20} {r['images_per_s']:8.0f} img/s  disk {r['disk_kb_per_image']:6.1f} "
                 f"KB/img  cgroup page cache {r['cgroup_page_cache_gb']:5.2f} GB{cpu_note}"
                 + (f"  ERRORS {r['errors']}" if r["errors"] else ""))
        return r

    def path_rows(self, path, cg, rnd):
        """One round of `path`: page cache dropped, then --epochs epochs (the
        same seeds in every round and for every path)."""
        drop_page_cache()
        seeds = [1000 + i for i in range(self.args.epochs)]
        tag = f"r{rnd}-" if self.args.rounds > 1 else ""
        if path == "local":
            return [self.epoch(self.local, f"{tag}local-{i + 1}", s, cg)
                    for i, s in enumerate(seeds)]
        mnt, run, pid = self.mounts.mount(path, "--read-mode", path)
        try:
            return [self.epoch(mnt, f"{tag}{path}-{i + 1}", s, cg, pid)
                    for i, s in enumerate(seeds)]
        finally:
            self.mounts.umount(mnt, run)


def markdown(results):
    cfg = results["config"]
    lines = [f"# Read modes over a data set {cfg['ratio']}x the memory",
             "",
             f"{cfg['files']} files, {cfg['total_bytes'] / 1e9:.2f} GB; memory cgroup limit "
             f"{cfg['limit_bytes'] / 1e9:.2f} GB (readers and daemons inside it); "
             f"{cfg['threads']} readers; page cache dropped before each path's first epoch. "
             f"{results['started']}, `{results['command']}`.",
             "",
             "| round | path | epoch | img/s | vs ext4 (same round) | disk KB/img | "
             "daemon CPU ms/img | p99 ms |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for rnd, rows in enumerate(results["rounds"], start=1):
        local = rows.get("local")
        for path, epochs in rows.items():
            if isinstance(epochs, dict):  # an error
                lines.append(f"| {rnd} | {path} | | failed: {epochs['error']} | | | | |")
                continue
            for i, e in enumerate(epochs):
                ratio = (f"{e['images_per_s'] / local[i]['images_per_s']:.2f}x"
                         if isinstance(local, list) and i < len(local) else "")
                cpu = e["daemon_cpu_ms_per_image"]
                lines.append(f"| {rnd} | {path} | {i + 1} | {e['images_per_s']:,.0f} | {ratio} | "
                             f"{e['disk_kb_per_image']:.1f} | "
                             f"{'' if cpu is None else f'{cpu:.3f}'} | {e['p99_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--files", type=int, default=128660, help="data set size (JPEG files)")
    ap.add_argument("--ratio", type=float, default=1.5,
                    help="data set size / memory cgroup limit (1.5: the data is 1.5x the memory)")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per path")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds over every path; each round after the first runs the paths in "
                         "the reverse order of the one before (order effects of the disk)")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--paths", default=",".join(PATHS), help="subset of " + ",".join(PATHS))
    ap.add_argument("--epoch-timeout", type=int, default=1800)
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp); one "
                    "that holds a data set from an earlier --keep run is reused (its cache is "
                    "loaded again, which fetches only what is missing)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--out", default="over-memory-results")
    args = ap.parse_args()
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if any(p not in PATHS for p in paths) or args.ratio <= 0 or args.rounds < 1:
        ap.error(f"--paths: choose from {','.join(PATHS)}; --ratio and --rounds must be positive")
    if os.geteuid() != 0:
        raise SystemExit("over_memory: needs root (memory cgroup, mounts, drop_caches)")
    work = args.work or tempfile.mkdtemp(prefix="granary-over-memory.", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    r = Run(args, work)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"),
               "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]), "rounds": []}
    cg = None
    try:
        r.generate()
        r.fill_cache()
        limit = int(r.total_bytes / args.ratio)
        cg = MemoryCgroup(limit)
        cg.join()  # every reader and daemon started from here on is inside it
        r.log(f"memory cgroup {cg.path}: limit {limit / 1e9:.2f} GB "
              f"({'v2' if cg.v2 else 'v1'}); data set {r.total_bytes / 1e9:.2f} GB")
        results["config"] = {"files": args.files, "total_bytes": r.total_bytes, "ratio": args.ratio,
                             "limit_bytes": limit, "threads": args.threads, "epochs": args.epochs,
                             "rounds": args.rounds,
                             "cgroup": "v2" if cg.v2 else "v1", "disk": r.disk}
        for rnd in range(1, args.rounds + 1):
            rows = {}
            results["rounds"].append(rows)
            for path in (paths if rnd % 2 else paths[::-1]):
                r.log(f"--- round {rnd}: {path}")
                try:
                    rows[path] = r.path_rows(path, cg, rnd)
                except (StepError, subprocess.TimeoutExpired) as e:
                    r.log(f"{path}: FAILED: {e}")
                    rows[path] = {"error": str(e)}
    except KeyboardInterrupt:
        print("over_memory: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        r.mounts.umount_all()
        if cg:
            cg.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"over_memory: scratch directory kept in {work}")
    write_results(args.out, results, markdown(results))
    failed = [p for rows in results["rounds"] for p, v in rows.items() if isinstance(v, dict)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
