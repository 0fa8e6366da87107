#!/usr/bin/env python3
"""Large-object streaming reads side by side, in one run and one table.

The data set is a training job's shards: --shards files of --shard-mib MiB read
by --readers threads, each reading whole files sequentially in --read-kib reads,
and one file of --big-mib MiB read by one reader. The origin is the comparison's
S3 server (s3rver by default, or moto_server) behind bench/s3_delay_proxy
(--delays); the data also lies on local disk. Rows (--rows):

  get-stream           one plain GET per object, no cache, no FUSE: the origin's ceiling
  get-ranges           ranged GETs of --range-mib, --range-parallel in flight per object
  ext4-cold/ext4-warm  the local copy, page cache dropped / warm
  granary              `granary mount` read-through: cold epoch, then warm on the same mount
  granary-load         `granary mount --load`: the cold epoch runs while the load does
  granary-passthrough  --read-mode passthrough over an empty cache: cold, then warm
  granary-remount      umount, drop the page cache, fresh mount over the warm cache: one epoch
  granary-remount-passthrough  the same with --read-mode passthrough

Every file is read by bench/large_read's granary_large_read, which verifies
each file's size and XXH3-64 against the manifest of the generated data. Per
row: MiB/s (2^20 bytes per second) of the shards and of the big file, each
against get-stream and against ext4-warm; the mount daemon's CPU seconds per
GiB read (utime + stime of its pid across exactly the epoch) and the reader's;
origin requests and bytes (the proxy's counters; bytes over the bytes read);
and after a cold epoch how many files are completely cached (`granary status
--json`) and what the engine skipped (its /metrics: admissions skipped,
readahead dropped).

Before every cold row the page cache is dropped (root); rows that read the
origin then re-read the origin's object files, so that the origin serves from
memory in every row alike, as a remote store's own cache would.

  bench/large_read/large_read.py --shards 32 --shard-mib 128 --readers 8 --big-mib 1024 \\
      --read-kib 256 --delays 10ms --origin-cpus 0
  bench/large_read/large_read.py --shards 8 --shard-mib 32 --big-mib 128 --delays 0ms

Writes results.md and results.json to --out and prints the table; logs go to
--out/logs. Every process it starts it stops by PID, every mount it unmounts,
also on failure and Ctrl-C.
"""
if __name__ == "__main__" and not __package__:
    # Run by path: run again as the module bench.large_read.large_read with the
    # repository root on PYTHONPATH, where it finds bench.benchlib.
    import os
    import sys
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))
    os.execv(sys.executable, [sys.executable, "-m", "bench.large_read.large_read", *sys.argv[1:]])

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
import types
from concurrent.futures import ThreadPoolExecutor

from bench.benchlib.bench import Bench
from bench.benchlib.cpu import CpuMeter
from bench.benchlib.origin import DEFAULT_ORIGIN, ORIGIN_HELP, ORIGINS, split_cpus
from bench.benchlib.procs import StepError, drop_page_cache, settle
from bench.benchlib.results import (check_status, command_line, granary_version, machine,
                                    tool_versions, write_results)
from bench.large_read import rows as rows_mod
from bench.large_read import table

GIB = 1 << 30
MIB = 1 << 20


class Context:
    """The origin, the data set and one measured epoch; the rows use it."""

    def __init__(self, args, work, log_dir):
        self.args = args
        # Bench starts the origin and its proxy and holds the Procs; it reads
        # these fields of its arguments.
        bench_args = types.SimpleNamespace(build_dir=args.build_dir, files=0,
                                           threads=args.readers, ceiling_seconds=0,
                                           cache_quota=args.cache_quota, origin=args.origin)
        self.b = Bench(bench_args, work, log_dir)
        self.b.bucket, self.b.prefix = "granary-large-read", "large"
        self.reader = built(args)["reader"]
        self.work, self.log_dir = work, log_dir
        self.local_root = os.path.join(work, "local")
        self.manifest = os.path.join(work, "manifest.json")
        self.parts = [p for p in (("shards", "shards/", args.readers, args.shards * args.shard_mib),
                                  ("big", "big/", 1, args.big_mib)) if p[3] > 0]
        self.total_bytes = sum(p[3] for p in self.parts) * MIB
        self.delay = None

    def log(self, msg):
        self.b.log(msg)

    # -- data set ----------------------------------------------------------
    def generate(self):
        """Writes the data set to local disk with its manifest and uploads it."""
        a = self.args
        specs = []
        if a.shards > 0:
            specs += ["--spec", f"shards/shard:{a.shards}:{a.shard_mib * MIB}"]
        if a.big_mib > 0:
            specs += ["--spec", f"big/big:1:{a.big_mib * MIB}"]
        t0 = time.monotonic()
        self._run([self.reader, "gen", "--root", self.local_root, "--seed", str(a.seed),
                   "--manifest", self.manifest, *specs], "gen")
        with open(self.manifest) as f:
            self.files = json.load(f)["files"]
        self.log(f"data set: {len(self.files)} files, {self.total_bytes / MIB:.0f} MiB on local "
                 f"disk, {time.monotonic() - t0:.0f} s")
        t0 = time.monotonic()
        self._curl("PUT", f"{self.b.origin}/{self.b.bucket}")
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda e: self._curl(
                "PUT", f"{self.b.origin}/{self.b.bucket}/{self.b.prefix}/{e['path']}",
                "-T", os.path.join(self.local_root, e["path"]), "-H", "Expect:"), self.files))
        settle()
        self.log(f"uploaded to s3://{self.b.bucket}/{self.b.prefix}/ in "
                 f"{time.monotonic() - t0:.0f} s")

    def _curl(self, method, url, *extra):
        env = self.b.env
        argv = ["curl", "-sS", "--fail", "-o", "/dev/null", "-X", method,
                "--aws-sigv4", f"aws:amz:{env['AWS_REGION']}:s3",
                "--user", f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *extra, url]
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"large_read: {method} {url}: {out.stderr.strip()[-300:]}")

    def _run(self, argv, what, timeout=None):
        """Runs granary_large_read; its JSON report (None for gen)."""
        try:
            out = subprocess.run(argv, capture_output=True, text=True, env=self.b.env,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            raise StepError(f"{what}: did not finish in {timeout} s") from None
        self.b.save_log("reader", f"== {what}: {' '.join(argv[1:])}\n{out.stderr}")
        if argv[1] == "gen":
            if out.returncode != 0:
                raise SystemExit(f"large_read: gen failed: {out.stderr.strip()[-400:]}")
            return None
        try:
            return json.loads(out.stdout)
        except ValueError:
            raise StepError(f"{what}: reader exited {out.returncode}: "
                            f"{out.stderr.strip()[-300:]}") from None

    # -- origin --------------------------------------------------------------
    def proxy_stats(self):
        return self.b.proxy_stats()

    def cold_start(self, reads_origin):
        """Drops the page cache; then, for rows that read the origin, reads the
        origin's object files once so that it serves them from memory."""
        if not drop_page_cache():
            return "page cache not dropped (needs root)"
        if reads_origin and self.args.origin == "s3rver":
            data = os.path.join(self.work, "s3rver-data", self.b.bucket)
            buf = bytearray(4 * MIB)
            for d, _, names in os.walk(data):
                for n in names:
                    if n.endswith("._S3rver_object"):
                        with open(os.path.join(d, n), "rb", buffering=0) as f:
                            while f.readinto(buf):
                                pass
        return ""

    # -- one epoch -------------------------------------------------------------
    def read_argv(self, source):
        """granary_large_read arguments (before --select/--threads) for a source:
        ("dir", PATH) reads files under PATH with --io; ("get", range_mib) GETs
        through the proxy, one GET per object (0) or ranged."""
        a = self.args
        common = ["--manifest", self.manifest, "--read-kib", str(a.read_kib)]
        if source[0] == "dir":
            return ["read", "--root", source[1], "--io", a.io, *common]
        argv = ["get", "--endpoint", self.b.endpoint, "--bucket", self.b.bucket,
                "--prefix", self.b.prefix + "/", *common]
        if source[1]:
            argv += ["--range-mib", str(source[1]), "--parallel", str(a.range_parallel)]
        return argv

    def epoch(self, label, source, mount=None, settle_first=True, since=None):
        """Reads every part (shards with --readers threads, then the big file
        with one) from source (see read_argv); returns the row's figures.

        mount: the rows.Mount read through: its daemon's CPU across exactly
        the epoch is counted, its counters are read before and after.
        settle_first=False when a load already runs; since: (proxy stats,
        mount counters) taken earlier to count origin traffic from instead
        of the epoch's start (a load that started at mount).
        """
        if settle_first:
            settle()
        before, g_before = since or (self.proxy_stats(), mount.counters() if mount else None)
        daemon_pid = mount.pid() if mount else None
        cpu = CpuMeter([daemon_pid] if daemon_pid else [], self.b.origin_pids)
        r = {"row": label, "parts": {}, "errors": 0, "first_error": "", "reader_cpu_s": 0.0}
        for name, select, threads, _ in self.parts:
            rep = self._run([self.reader, *self.read_argv(source), "--select", select,
                             "--threads", str(threads)], f"{label} {name}",
                            timeout=self.args.epoch_timeout)
            r["parts"][name] = {k: rep[k] for k in ("files", "bytes", "seconds", "mib_per_s",
                                                     "requests", "errors", "first_error")}
            r["errors"] += rep["errors"]
            r["first_error"] = r["first_error"] or rep["first_error"]
            r["reader_cpu_s"] += rep["cpu_seconds"]
        daemon_cpu, origin_cpu = cpu.stop()
        after = self.proxy_stats()
        read = sum(p["bytes"] for p in r["parts"].values())
        r["bytes"] = read
        r["daemon_cpu_s_per_gib"] = per_gib(daemon_cpu, read)
        r["origin_cpu_s_per_gib"] = per_gib(origin_cpu, read)
        r["reader_cpu_s_per_gib"] = per_gib(r["reader_cpu_s"], read)
        r["origin_requests"] = after["requests"] - before["requests"]
        r["origin_bytes"] = after["bytes_to_client"] - before["bytes_to_client"]
        r["origin_bytes_ratio"] = r["origin_bytes"] / read if read else None
        if mount:
            g_after = mount.counters()
            r["granary"] = {k: v - (g_before or {}).get(k, 0) for k, v in g_after.items()}
        self.log(table.epoch_line(r))
        return r


def built(args):
    """The binaries the run needs, by role."""
    build = os.path.abspath(args.build_dir)
    return {"granary": os.path.join(build, "src", "cli", "granary"),
            "reader": args.reader or os.path.join(build, "bench", "large_read",
                                                  "granary_large_read"),
            "proxy": os.path.join(build, "bench", "s3_delay_proxy", "s3_delay_proxy")}


def per_gib(cpu_s, read_bytes):
    return None if cpu_s is None or not read_bytes else cpu_s / (read_bytes / GIB)


def versions(granary, origin):
    """The origin server's version and Granary's (results.granary_version)."""
    v = tool_versions(origin, peers=False)
    v["granary"] = granary_version(granary)
    return v


def parse_rows(spec):
    wanted = [r.strip() for r in spec.split(",") if r.strip()]
    bad = [r for r in wanted if r not in rows_mod.ALL_ROWS]
    if bad:
        raise SystemExit(f"large_read: --rows: unknown {','.join(bad)} "
                         f"(choose from {','.join(rows_mod.ALL_ROWS)})")
    return wanted


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--build-dir", default="build", help="CMake build directory")
    ap.add_argument("--reader", help="granary_large_read (default: BUILD/bench/large_read/)")
    ap.add_argument("--shards", type=int, default=32, help="shard files")
    ap.add_argument("--shard-mib", type=int, default=128, help="MiB per shard")
    ap.add_argument("--readers", type=int, default=8, help="threads reading shards")
    ap.add_argument("--big-mib", type=int, default=1024, help="MiB of the one big file (0: none)")
    ap.add_argument("--read-kib", type=int, default=256, help="KiB per read call")
    io = ap.add_mutually_exclusive_group()
    io.add_argument("--mmap", dest="io", action="store_const", const="mmap",
                    help="read files through mmap (as DALI does)")
    io.add_argument("--direct", dest="io", action="store_const", const="direct",
                    help="read files with O_DIRECT into a 4 KiB-aligned buffer")
    ap.set_defaults(io="read")
    ap.add_argument("--range-mib", type=int, default=8, help="get-ranges: MiB per ranged GET")
    ap.add_argument("--range-parallel", type=int, default=8,
                    help="get-ranges: ranged GETs in flight per object")
    ap.add_argument("--rows", default=",".join(rows_mod.ALL_ROWS),
                    help="rows to run (always in this order)")
    ap.add_argument("--delays", default="10ms", help="per-request origin delays, comma-separated")
    ap.add_argument("--origin", choices=ORIGINS, default=DEFAULT_ORIGIN, help=ORIGIN_HELP)
    ap.add_argument("--origin-cpus", default="none",
                    help="CPUs of the origin and its proxy, everything else on the others: "
                         "none (all share every CPU), auto or a list like 0")
    ap.add_argument("--cache-quota", default="50G", help="quota of every cache directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epoch-timeout", type=int, default=3600,
                    help="seconds one read pass may take")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--out", default="large-read-results", help="results.md/json and logs/")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a row failed, a byte did not verify or a warm or "
                         "remount epoch reached the origin")
    args = ap.parse_args()
    if args.io == "direct" and args.read_kib % 4:
        ap.error("--direct needs --read-kib a multiple of 4")
    return args


def main():
    args = parse_args()
    wanted = parse_rows(args.rows)
    delays = [d.strip() for d in args.delays.split(",") if d.strip()]
    for p in built(args).values():
        if not os.access(p, os.X_OK):
            raise SystemExit(f"large_read: {p} is missing; build it first")
    origin_cpus, client_cpus = split_cpus(args.origin_cpus)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    config = {k: getattr(args, k) for k in ("shards", "shard_mib", "readers", "big_mib",
                                            "read_kib", "io", "range_mib", "range_parallel",
                                            "origin", "seed")}
    config.update(origin_cpus=sorted(origin_cpus or []), client_cpus=sorted(client_cpus or []),
                  rows=wanted)
    results = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
               "tools": versions(built(args)["granary"], args.origin), "config": config,
               "command": command_line(), "delays": {}}
    log_dir = os.path.join(args.out, "logs")
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    work = args.work or tempfile.mkdtemp(prefix="glr.", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    ctx = None
    try:
        ctx = Context(args, work, log_dir)
        ctx.b.origin_cpus = origin_cpus
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)  # every client process inherits it
        ctx.b.start_origin()
        ctx.generate()
        for delay in delays:
            ctx.delay = ctx.b.delay = delay
            proxy = ctx.b.start_proxy(delay)
            results["delays"][delay] = rows_mod.run_rows(ctx, wanted)
            ctx.b.procs.stop(proxy)
    except KeyboardInterrupt:
        print("large_read: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        if ctx:
            ctx.b.procs.stop_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"large_read: scratch directory kept in {work}")
    results["seconds"] = round((datetime.datetime.now(datetime.timezone.utc)
                                - started).total_seconds())
    write_results(args.out, results, table.markdown(results))
    if args.check:
        return check_status("large_read", table.problems(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
