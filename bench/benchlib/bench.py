"""Bench: what most measurements need. The built binaries, the origin (an
S3-compatible server, origin.DEFAULT_ORIGIN unless args.origin says) behind
bench/s3_delay_proxy, an ImageNet-like data set on it and on local disk
(bench/gen_imagenet), and one measured epoch of bench/reader (whole files,
shuffled, N threads) with the origin requests, page cache growth and CPU of
the cache and of the origin across exactly that epoch.

Drivers subclass it or hand it an argparse namespace with the fields they
use (build_dir, origin, files, threads, seed, cache_quota, ceiling_seconds,
epoch_timeout, ...). Every process goes through self.procs; the driver calls
procs.stop_all() on every exit path. Single-threaded.
"""
import json
import os
import re
import subprocess
import time

from . import origin as origin_mod
from .cpu import CpuMeter, page_cache_bytes, per_image_ms
from .procs import Procs, StepError, answers, free_port, http_get, settle


class Bench:
    """The origin, the data set and one epoch; see the module's contract."""

    def __init__(self, args, work, log_dir):
        self.args = args
        self.work = work
        self.log_dir = log_dir
        os.makedirs(self.log_dir, exist_ok=True)
        self.procs = Procs(self.log_dir)
        self.build = os.path.abspath(args.build_dir)
        self.granary = os.path.join(self.build, "src", "cli", "granary")
        self.files = getattr(args, "files", 0)
        self.threads = getattr(args, "threads", 16)
        self.ceiling_seconds = getattr(args, "ceiling_seconds", 3.0)
        self.ceiling_levels = [1, 4, 16, 32, 64, 128]
        self.cache_quota = getattr(args, "cache_quota", "50G")
        self.origin_kind = getattr(args, "origin", None) or origin_mod.DEFAULT_ORIGIN
        self.bucket = "granary-compare"
        self.prefix = "imagenet"
        self.env = origin_mod.s3_env()
        self.origin = None  # the server's URL
        self.endpoint = None  # the proxy of the current delay
        self.delay = None
        self.epoch_seq = 0
        self.delete_later = []  # cache directories, deleted after the Granary rows
        self.origin_cpus = None  # CPUs of the origin and its proxy (None: not pinned)
        self.origin_pids = []  # the origin server and the current delay's proxy

    def bin(self, name):
        """A bench tool built under <build>/bench/; SystemExit when it is not built."""
        tool = {"reader": "reader/granary_reader"}.get(name, f"{name}/{name}")
        path = os.path.join(self.build, "bench", tool)
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{path} is missing; build the bench tools first "
                             f"(cmake --build {self.args.build_dir})")
        return path

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def save_log(self, name, text):
        with open(os.path.join(self.log_dir, name + ".log"), "a") as f:
            f.write(text)

    # -- origin ------------------------------------------------------------
    def start_origin(self):
        """Starts the S3-compatible server (self.origin_kind) on a free loopback port."""
        port = free_port()
        self.origin = f"http://127.0.0.1:{port}"
        name = origin_mod.PROCESS_NAMES[self.origin_kind]
        argv = origin_mod.server_argv(self.origin_kind, "127.0.0.1", port,
                                      os.path.join(self.work, "s3rver-data"))
        p = self.procs.start(name, argv, env=self.env, cpus=self.origin_cpus)
        self.procs.wait_until(p, lambda: answers(self.origin + "/"), name, timeout=60)
        self.origin_pids = [p.pid]
        self.log(f"{name} pid {p.pid} at {self.origin}")

    def start_proxy(self, delay):
        """Starts the delay proxy (delay per request) in front of the origin;
        self.endpoint is its URL until the next start_proxy. Returns its Popen."""
        p, port = origin_mod.start_delay_proxy(
            self.procs, f"proxy-{delay}", self.bin("s3_delay_proxy"),
            self.origin.removeprefix("http://"), delay,
            os.path.join(self.log_dir, f"proxy-{delay}.port"), cpus=self.origin_cpus)
        self.endpoint = f"http://127.0.0.1:{port}"
        self.origin_pids = self.origin_pids[:1] + [p.pid]
        self.log(f"origin with {delay} per request: {self.endpoint} (proxy pid {p.pid})")
        return p

    def proxy_stats(self):
        """The delay proxy's counters (requests, get_requests, bytes_to_client...)."""
        try:
            return json.loads(http_get(self.endpoint + "/__proxy_stats"))
        except (OSError, ValueError) as e:
            raise StepError(f"cannot read the proxy's counters: {e}") from None

    def origin_requests(self):
        """Requests (GET, HEAD, LIST...) that reached the origin so far."""
        try:
            return int(self.proxy_stats()["requests"])
        except (KeyError, ValueError) as e:
            raise StepError(f"cannot read the proxy's request counter: {e}") from None

    def ufs_ceiling(self):
        """bench/ufs_get against the data set through the current proxy: the
        best GET objects/s at any of ceiling_levels concurrencies, as an
        epoch's figures (no client reads a cold epoch faster)."""
        argv = [self.bin("ufs_get"), "--endpoint", self.endpoint, "--bucket", self.bucket,
                "--prefix", self.prefix + "/", "--objects", str(self.files),
                "--seconds-per-level", str(self.ceiling_seconds),
                "--levels", *[str(x) for x in self.ceiling_levels]]
        self.log("origin ceiling: " + " ".join(argv[1:]))
        out = subprocess.run(argv, capture_output=True, text=True, env=self.env)
        self.save_log("ufs_get", out.stdout + out.stderr)
        m = re.search(r"ceiling:\s*([0-9.]+)\s*objects/s", out.stdout)
        if out.returncode != 0 or not m:
            raise StepError(f"ufs_get exited {out.returncode}: {(out.stderr or out.stdout)[-300:]}")
        return {"images_per_s": float(m.group(1)), "mb_per_s": None, "p99_ms": None,
                "origin_requests_per_image": 1.0, "files": None, "errors": 0}

    # -- data set ----------------------------------------------------------
    def generate(self):
        """Writes args.files JPEGs (args.seed) to <work>/local and uploads the
        same tree to s3://<bucket>/<prefix>."""
        gen = self.bin("gen_imagenet")
        self.local_root = os.path.join(self.work, "local")
        common = ["--count", str(self.files), "--seed", str(self.args.seed), "--quiet"]
        t0 = time.monotonic()
        for dest in (["--out", self.local_root],
                     ["--s3-endpoint", self.origin, "--bucket", self.bucket, "--prefix", self.prefix]):
            out = subprocess.run([gen, *common, *dest], capture_output=True, text=True, env=self.env)
            self.save_log("gen_imagenet", out.stdout + out.stderr)
            if out.returncode != 0:
                raise SystemExit(f"gen_imagenet {' '.join(dest)} failed: {out.stderr[-400:]}")
        self.list_file = os.path.join(self.local_root, "train_list.txt")
        with open(self.list_file) as f:
            paths = [ln.split()[0] for ln in f if ln.strip()]
        if len(paths) != self.files:
            raise SystemExit(f"train_list.txt has {len(paths)} entries, expected {self.files}")
        self.total_bytes = sum(os.path.getsize(os.path.join(self.local_root, p)) for p in paths)
        self.log(f"data set: {self.files} JPEGs, {self.total_bytes / 1e6:.0f} MB "
                 f"(mean {self.total_bytes / self.files / 1e3:.0f} KB), local copy and "
                 f"s3://{self.bucket}/{self.prefix}, {time.monotonic() - t0:.0f} s")

    # -- one epoch -----------------------------------------------------------
    def epoch(self, root, label, origin=True, max_files=None, seed=None, settle_first=True,
              cache_pids=()):
        """One shuffled epoch over the list under root; returns its figures.

        cache_pids: the cache's own processes (a FUSE daemon); their CPU time
        (user + system, every thread) across exactly the epoch, per image read,
        becomes cache_cpu_ms_per_image (None without them).

        max_files caps the epoch at the first N files of the shuffled order; pass
        the same seed for a cold and a warm epoch so both read the same files.
        settle_first=False when something already started fetching (mount
        --load): a sync then would give it a head start on the epoch.
        """
        self.epoch_seq += 1
        js = os.path.join(self.log_dir, f"{self.delay}-{label}.json")
        argv = [self.bin("reader"), "--list", self.list_file, "--root", root,
                "--threads", str(self.threads), "--epochs", "1",
                "--seed", str(seed or self.args.seed * 1000 + self.epoch_seq), "--json", js]
        if max_files:
            argv += ["--max-files", str(max_files)]
        if settle_first:
            settle()
        before = self.origin_requests() if origin else 0
        cached_before = page_cache_bytes()
        cpu = CpuMeter(cache_pids, self.origin_pids if origin else ())
        try:
            out = subprocess.run(argv, capture_output=True, text=True,
                                 timeout=self.args.epoch_timeout)
        except subprocess.TimeoutExpired:
            raise StepError(f"{label}: epoch did not finish in {self.args.epoch_timeout} s") from None
        cache_cpu, origin_cpu = cpu.stop()
        after = self.origin_requests() if origin else 0
        cache_growth = page_cache_bytes() - cached_before
        self.save_log("reader", f"== {self.delay} {label}\n{out.stdout}{out.stderr}")
        if out.returncode != 0 and not os.path.exists(js):
            raise StepError(f"{label}: reader exited {out.returncode}: {out.stderr[-300:]}")
        with open(js) as f:
            e = json.load(f)["epochs"][0]
        r = {"images_per_s": e["images_per_s"], "mb_per_s": e["mb_per_s"],
             "p50_ms": e["p50_us"] / 1000, "p99_ms": e["p99_us"] / 1000,
             "files": e["files"], "errors": e["errors"],
             "origin_requests_per_image": (after - before) / max(1, e["files"]) if origin else None,
             "page_cache_growth_mb": cache_growth / 1e6,
             "cache_cpu_ms_per_image": per_image_ms(cache_cpu, e["files"]),
             "origin_cpu_ms_per_image": per_image_ms(origin_cpu, e["files"])}
        cpu_note = (f"  cache CPU {r['cache_cpu_ms_per_image']:.3f} ms/img"
                    if r["cache_cpu_ms_per_image"] is not None else "")
        self.log(f"  {label:22} {r['images_per_s']:9.0f} img/s {r['mb_per_s']:8.1f} MB/s "
                 f"p99 {r['p99_ms']:7.2f} ms  page cache {cache_growth / 1e6:+7.0f} MB{cpu_note}"
                 + (f"  origin req/img {r['origin_requests_per_image']:.2f}" if origin else "")
                 + (f"  ERRORS {r['errors']}" if r["errors"] else ""))
        return r
