#!/usr/bin/env python3
"""ResNet-50 training throughput by input source: GPU-only, local disk, Granary.

Generates an ImageNet-like data set on the local disk (gen_imagenet), then runs
bench/train_resnet50.py once per input source, one after the other on the same
machine, and prints one table of images/s:

  synthetic             random tensors already on the GPU (the compute ceiling);
  local, warm           the directory itself, page cache warm (just written);
  local, cold           the directory itself, page cache dropped;
  granary cold          a fresh `granary mount file://DIR` over an empty cache,
                        page cache dropped: the epoch reads through the cache;
  granary after load    the same mount after `granary load` (cached read mode);
  granary remount       a fresh mount over the warm cache, page cache dropped
                        (a new job on a node whose cache is on disk), per read mode.

Each data row also reports the mount daemon's CPU per image (utime+stime of its
pid over the row, divided by the images the loader consumed: (warmup + steps)
x batch, which undercounts what the workers prefetch, so it is an upper bound).

The origin is a local directory (file://), like NFS on a fast server: the rows
measure what the cache costs or gains at the GPU, not a slow origin. Needs root
(mounts, drop_caches) and PyTorch with torchvision (exit status 77 = skipped
without them); --smoke runs the same steps on the CPU with ResNet-18 at 64x64
and 300 files (under a minute, the ctest smoke test).

Usage:
  bench/train_sources.py --build-dir build --work /var/tmp/train-src --out DIR
  bench/train_sources.py --granary BIN --gen-imagenet BIN --files 40000 --workers 14 ...
"""
if __name__ == "__main__" and not __package__:
    # Run by path: run again as the module bench.train_sources with the
    # repository root on PYTHONPATH, where it finds bench.benchlib.
    import os
    import sys
    _root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))
    os.execv(sys.executable, [sys.executable, "-m", "bench.train_sources", *sys.argv[1:]])

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
from bench.benchlib.procs import StepError, bench_setup, drop_page_cache
from bench.benchlib.results import write_results

HERE = os.path.dirname(os.path.abspath(__file__))

SKIP = 77


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build", help="where granary and gen_imagenet are built")
    ap.add_argument("--granary", help="granary binary (default BUILD/src/cli/granary)")
    ap.add_argument("--gen-imagenet", help="generator (default BUILD/bench/gen_imagenet/gen_imagenet)")
    ap.add_argument("--python", default=sys.executable, help="python with torch and torchvision")
    ap.add_argument("--files", type=int, default=40000, help="JPEG files in the data set")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                    help="DataLoader workers (default: the CPUs less two)")
    ap.add_argument("--precision", default="amp", help="data rows: fp32 and/or amp")
    ap.add_argument("--batch-size", default="256", help="data rows: per-GPU batch sizes")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rows", default="synthetic,local-warm,local-cold,granary-cold,"
                    "granary-loaded,remount-cached,remount-passthrough",
                    help="which rows, in this order")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--out", default="train-sources-results")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU, ResNet-18 64x64, 300 files, 3 steps: checks the steps, not speed")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    args.granary = args.granary or os.path.join(build, "src", "cli", "granary")
    args.gen_imagenet = args.gen_imagenet or os.path.join(build, "bench", "gen_imagenet",
                                                          "gen_imagenet")
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = [r for r in args.rows if r not in ROWS]
    if bad:
        ap.error(f"--rows: unknown {bad}; choose from {','.join(ROWS)}")
    if args.smoke:  # as train_resnet50.py --smoke runs it
        args.files, args.classes, args.steps, args.warmup, args.workers = 300, 10, 3, 1, 1
    return args


class Bench:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.log_dir = bench_setup("train_sources", (args.granary, args.gen_imagenet), args.out)
        self.data = os.path.join(work, "data")
        self.mounts = DirMounts(args.granary, self.data, os.path.join(work, "cache"), work,
                                self.log_dir)
        self.mount = None  # (mnt, run, pid) of the mount the granary rows share

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def generate(self):
        if os.path.exists(os.path.join(self.data, "train_list.txt")):
            self.log(f"reusing the data set in {self.data}")
            return
        t0 = time.monotonic()
        argv = [self.args.gen_imagenet, "--count", str(self.args.files), "--classes",
                str(self.args.classes), "--seed", "1", "--quiet", "--out", self.data]
        if self.args.smoke:
            argv += ["--median-size", "20000", "--tail-fraction", "0"]
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"train_sources: gen_imagenet failed: {out.stderr[-400:]}")
        size = sum(e.stat().st_size for d in os.scandir(os.path.join(self.data, "train"))
                   for e in os.scandir(d.path))
        self.log(f"data set: {self.args.files} files, {size / 1e9:.2f} GB, "
                 f"{time.monotonic() - t0:.0f} s")

    def train(self, label, mode, data=None, daemon_pid=None):
        """One train_resnet50.py run; returns its results with daemon CPU added."""
        js = os.path.join(self.log_dir, label + ".json")
        argv = [self.args.python, os.path.join(HERE, "train_resnet50.py"), "--mode", mode,
                "--json", js, "--steps", str(self.args.steps), "--warmup", str(self.args.warmup),
                "--workers", str(self.args.workers)]
        if mode == "data":
            argv += ["--data", data, "--precision", self.args.precision,
                     "--batch-size", self.args.batch_size]
        if self.args.smoke:
            argv.append("--smoke")
        cpu = CpuMeter([daemon_pid] if daemon_pid else [], [])
        out = subprocess.run(argv, capture_output=True, text=True)
        daemon_cpu, _ = cpu.stop()
        with open(os.path.join(self.log_dir, "train.log"), "a") as f:
            f.write(f"== {label}: {' '.join(argv)}\n{out.stdout}{out.stderr}")
        if out.returncode == SKIP:
            raise SystemExit(SKIP)
        if out.returncode != 0:
            raise StepError(f"{label}: train_resnet50.py exited {out.returncode}: "
                            f"{out.stderr.strip()[-400:]}")
        with open(js) as f:
            res = json.load(f)
        for r in res["results"]:
            images = (self.args.warmup + self.args.steps) * r["batch"]
            r["daemon_cpu_ms_per_image"] = per_image_ms(daemon_cpu, images)
            self.log(f"  {label:22} {r['precision']:4} BS={r['batch']:<4} "
                     f"{r['images_per_s']:9.1f} img/s" +
                     (f"  daemon CPU <= {r['daemon_cpu_ms_per_image']:.3f} ms/img"
                      if r["daemon_cpu_ms_per_image"] is not None else ""))
        return res

    def granary_mount(self, name, *flags):
        if self.mount:
            self.mounts.umount(*self.mount[:2])
        self.mount = self.mounts.mount(name, *flags)
        return self.mount

    # One method per row; each returns train()'s results.
    def row_synthetic(self):  # train_resnet50.py's own FP32/AMP x 128/256
        return self.train("synthetic", "synthetic")

    def row_local_warm(self):
        return self.train("local-warm", "data", self.data)

    def row_local_cold(self):
        drop_page_cache()
        return self.train("local-cold", "data", self.data)

    def row_granary_cold(self):
        shutil.rmtree(os.path.join(self.work, "cache"), ignore_errors=True)
        mnt, _, pid = self.granary_mount("cold", "--read-mode", "cached")
        drop_page_cache()
        return self.train("granary-cold", "data", mnt, pid)

    def row_granary_loaded(self):
        if not self.mount:
            self.granary_mount("loaded", "--read-mode", "cached")
        mnt, run, pid = self.mount
        secs, ratio = self.mounts.load(mnt, run)
        self.log(f"  granary load: {self.args.files / secs:.0f} files/s, {100 * ratio:.1f}% cached")
        return self.train("granary-loaded", "data", mnt, pid)

    def remount(self, mode):
        mnt, _, pid = self.granary_mount("remount-" + mode, "--read-mode", mode)
        drop_page_cache()
        return self.train("remount-" + mode, "data", mnt, pid)


ROWS = {
    "synthetic": ("synthetic (GPU only)", Bench.row_synthetic),
    "local-warm": ("local disk, page cache warm", Bench.row_local_warm),
    "local-cold": ("local disk, page cache dropped", Bench.row_local_cold),
    "granary-cold": ("Granary first epoch (empty cache, read-through)", Bench.row_granary_cold),
    "granary-loaded": ("Granary after `granary load` (cached mode)", Bench.row_granary_loaded),
    "remount-cached": ("Granary fresh remount, warm cache, page cache dropped: cached mode",
                       lambda b: b.remount("cached")),
    "remount-passthrough": ("Granary fresh remount, warm cache, page cache dropped: passthrough",
                            lambda b: b.remount("passthrough")),
}


def markdown(results):
    cfg = results["config"]
    lines = [f"# ResNet-50 training throughput by input source ({cfg.get('gpu') or cfg['device']})",
             "",
             f"{cfg['files']} generated files; {cfg['workers']} DataLoader workers on "
             f"{cfg['cpus']} CPUs; {cfg['steps']} timed steps after {cfg['warmup']}; torch "
             f"{cfg.get('torch')}. {results['started']}, `{results['command']}`.",
             "",
             "| input | precision | batch | images/s | vs GPU only | vs local warm | "
             "daemon CPU ms/img (upper bound) |",
             "|---|---|---:|---:|---:|---:|---:|"]

    def lookup(row, precision, batch):
        for r in results["rows"].get(row, {}).get("results", []):
            if r["precision"] == precision and r["batch"] == batch:
                return r["images_per_s"]
        return None

    for row, res in results["rows"].items():
        if "error" in res:
            lines.append(f"| {ROWS[row][0]} | | | failed: {res['error']} | | | |")
            continue
        for r in res["results"]:
            ceil = lookup("synthetic", r["precision"], r["batch"])
            local = lookup("local-warm", r["precision"], r["batch"])
            rate = r["images_per_s"]
            cpu = r.get("daemon_cpu_ms_per_image")
            lines.append(f"| {ROWS[row][0]} | {r['precision'].upper()} | {r['batch']} | "
                         f"{rate:,.0f} | {f'{rate / ceil:.2f}x' if ceil else ''} | "
                         f"{f'{rate / local:.2f}x' if local and row != 'synthetic' else ''} | "
                         f"{'' if cpu is None else f'{cpu:.3f}'} |")
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    if os.geteuid() != 0:
        print("train_sources: skipped: needs root (mounts, drop_caches)", file=sys.stderr)
        return SKIP
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="granary-train-", dir="/var/tmp"))
    os.makedirs(work, exist_ok=True)
    b = Bench(args, work)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"),
               "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
               "config": {"files": args.files, "workers": args.workers, "cpus": os.cpu_count(),
                          "steps": args.steps, "warmup": args.warmup,
                          "device": "cpu (smoke)" if args.smoke else "cuda"},
               "rows": {}}
    try:
        b.generate()
        for row in args.rows:
            b.log(f"--- {ROWS[row][0]}")
            try:
                res = ROWS[row][1](b)
                results["rows"][row] = res
                results["config"].update({k: res["config"].get(k) for k in ("gpu", "torch")})
            except (StepError, subprocess.TimeoutExpired) as e:
                b.log(f"{row}: FAILED: {e}")
                results["rows"][row] = {"error": str(e)}
    except KeyboardInterrupt:
        print("train_sources: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        b.mounts.umount_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    write_results(args.out, results, markdown(results))
    return 1 if any("error" in r for r in results["rows"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
