#!/usr/bin/env python3
"""Granary side by side with the tools users run today, in one run and one table.

Starts a local S3-compatible server (moto_server), uploads an ImageNet-like
data set (bench/gen_imagenet, the same tree also written to local disk), and
for each origin delay puts bench/s3_delay_proxy in front of it ("remote"
storage) and measures, with bench/reader's training pattern (whole files,
shuffled, N threads):

  origin ceiling (ufs_get) | local disk cold/warm | s3fs | s3fs use_cache |
  rclone mount --vfs-cache-mode full | Granary read-through | Granary mount
  --load | Granary after `granary load` | Granary fresh remount

The origin and its proxy run on CPUs of their own (--origin-cpus, default:
the first quarter, at least one), every client on the others, as a remote
origin would not share the client's CPUs.

Writes results.md (tables + targets), results.json and chart.png to --out and
prints the tables; logs of every process go to --out/logs. Every process it starts, it stops; every mount it makes, it
unmounts, also on Ctrl-C.

  bench/compare/compare.py --build-dir build --files 10000 --delays 0ms,10ms
  bench/compare/compare.py --files 200 --delays 0ms --check   # CI smoke
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import CpuMeter, Procs, StepError, check_status, free_port, http_get, per_image_ms, settle  # noqa: E402
import peers  # noqa: E402
import report  # noqa: E402

ALL_PEERS = ["ceiling", "local", "s3fs", "s3fs-cache", "rclone", "granary"]


class Bench:
    """What every measurement needs: binaries, the origin, the data set, the reader."""

    def __init__(self, args, work, log_dir):
        self.args = args
        self.work = work
        self.log_dir = log_dir
        os.makedirs(self.log_dir, exist_ok=True)
        self.procs = Procs(self.log_dir)
        self.build = os.path.abspath(args.build_dir)
        self.granary = os.path.join(self.build, "src", "cli", "granary")
        self.files = args.files
        self.threads = args.threads
        self.ceiling_seconds = args.ceiling_seconds
        self.ceiling_levels = [1, 4, 16, 32, 64, 128]
        self.cache_quota = args.cache_quota
        self.bucket = "granary-compare"
        self.prefix = "imagenet"
        # s3rver accepts only its own key id (moto accepts any)
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
                        AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                        AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_CONFIG_FILE="/dev/null")
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_CA_BUNDLE"):
            self.env.pop(k, None)
        self.endpoint = None  # the proxy of the current delay
        self.epoch_seq = 0
        self.delete_later = []  # cache directories, deleted after the Granary rows
        self.origin_cpus = None  # CPUs of the origin and its proxy (None: not pinned)
        self.origin_pids = []  # the origin server and the current delay's proxy

    def bin(self, name):
        tool = {"reader": "reader/granary_reader"}.get(name, f"{name}/{name}")
        path = os.path.join(self.build, "bench", tool)
        if not os.access(path, os.X_OK):
            raise SystemExit(f"compare: {path} is missing; build the bench tools first "
                             f"(cmake --build {self.args.build_dir})")
        return path

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def save_log(self, name, text):
        with open(os.path.join(self.log_dir, name + ".log"), "a") as f:
            f.write(text)

    # -- origin ------------------------------------------------------------
    def start_origin(self):
        """Starts the S3-compatible server behind the delay proxy (--origin)."""
        port = free_port()
        self.origin = f"http://127.0.0.1:{port}"
        if self.args.origin == "moto":
            name, argv = "moto_server", ["moto_server", "-H", "127.0.0.1", "-p", str(port)]
        else:
            # s3rver keeps objects as files (here on the scratch disk); DES
            # continuation tokens of its ListObjectsV2 need OpenSSL's legacy provider.
            data = os.path.join(self.work, "s3rver-data")
            os.makedirs(data, exist_ok=True)
            name, argv = "s3rver", ["node", "--openssl-legacy-provider", s3rver_launcher(),
                                    "-d", data, "-a", "127.0.0.1", "-p", str(port), "--silent"]
        p = self.procs.start(name, argv, env=self.env, cpus=self.origin_cpus)
        self.procs.wait_until(p, lambda: _answers(self.origin), name, timeout=60)
        self.origin_pids = [p.pid]
        self.log(f"{name} pid {p.pid} at {self.origin}")

    def start_proxy(self, delay):
        out = os.path.join(self.log_dir, f"proxy-{delay}.port")
        with open(out, "w") as f:
            p = self.procs.start(f"proxy-{delay}", [self.bin("s3_delay_proxy"), "--upstream",
                                 self.origin.removeprefix("http://"), "--port", "0",
                                 "--delay", delay], stdout=f, cpus=self.origin_cpus)
        self.procs.wait_until(p, lambda: os.path.getsize(out) > 0, "s3_delay_proxy", timeout=30)
        with open(out) as f:
            port = int(f.readline())
        self.endpoint = f"http://127.0.0.1:{port}"
        self.origin_pids = self.origin_pids[:1] + [p.pid]
        self.log(f"origin with {delay} per request: {self.endpoint} (proxy pid {p.pid})")
        return p

    def origin_requests(self):
        """Requests (GET, HEAD, LIST...) that reached the origin so far."""
        try:
            return int(json.loads(http_get(self.endpoint + "/__proxy_stats"))["requests"])
        except (OSError, ValueError, KeyError) as e:
            raise StepError(f"cannot read the proxy's request counter: {e}") from None

    # -- data set ----------------------------------------------------------
    def generate(self):
        gen = self.bin("gen_imagenet")
        self.local_root = os.path.join(self.work, "local")
        common = ["--count", str(self.files), "--seed", str(self.args.seed), "--quiet"]
        t0 = time.monotonic()
        for dest in (["--out", self.local_root],
                     ["--s3-endpoint", self.origin, "--bucket", self.bucket, "--prefix", self.prefix]):
            out = subprocess.run([gen, *common, *dest], capture_output=True, text=True, env=self.env)
            self.save_log("gen_imagenet", out.stdout + out.stderr)
            if out.returncode != 0:
                raise SystemExit(f"compare: gen_imagenet {' '.join(dest)} failed: {out.stderr[-400:]}")
        self.list_file = os.path.join(self.local_root, "train_list.txt")
        with open(self.list_file) as f:
            paths = [ln.split()[0] for ln in f if ln.strip()]
        if len(paths) != self.files:
            raise SystemExit(f"compare: train_list.txt has {len(paths)} entries, expected {self.files}")
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


def page_cache_bytes():
    """Cached + Buffers from /proc/meminfo: what an epoch adds to the page cache."""
    total = 0
    with open("/proc/meminfo") as f:
        for ln in f:
            if ln.startswith(("Cached:", "Buffers:")):
                total += int(ln.split()[1]) * 1024
    return total


S3RVER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3rver")


def s3rver_launcher():
    path = os.path.join(S3RVER_DIR, "node_modules", "s3rver", "bin", "s3rver.js")
    if not os.path.exists(path) or shutil.which("node") is None:
        raise SystemExit("compare: --origin s3rver needs Node.js and s3rver: run scripts/install-s3rver.sh")
    return path


def _answers(url):
    try:
        http_get(url + "/", timeout=1)
        return True
    except OSError as e:
        return getattr(e, "code", None) is not None  # an HTTP error still means it is up


def split_cpus(spec):
    """--origin-cpus: (origin CPUs, everything else's CPUs), or (None, None) for no pinning.

    A remote origin does not share the client's CPUs. On one machine it does,
    and on these 2-core VMs that decides the cold rows: ufs_get alone leaves
    the origin (s3rver is one Node.js process, plus the delay proxy) nearly
    both cores, while any cache's epoch takes CPU for its readers, FUSE and
    cache writes from the same cores, so the origin serves fewer GETs/s than
    in its own ceiling run. Pinning gives the origin the same CPUs in every
    row, and every client (ufs_get, readers, Granary, s3fs, rclone, local
    disk) the rest.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if spec == "none":
        return None, None
    if spec == "auto":
        if len(allowed) < 2:
            return None, None
        origin = set(allowed[:max(1, len(allowed) // 4)])
    else:
        try:
            origin = set()
            for part in spec.split(","):
                lo, _, hi = part.partition("-")
                origin.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise SystemExit(f"compare: --origin-cpus {spec!r}: expected auto, none or a list "
                             "like 0 or 0-1,4") from None
    rest = set(allowed) - origin
    if not origin <= set(allowed) or not rest:
        raise SystemExit(f"compare: --origin-cpus {spec}: must be a proper subset of the CPUs "
                         f"this process may use ({','.join(map(str, allowed))})")
    return origin, rest


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1),
            "kernel": platform.release(), "os": _os_name()}


def _os_name():
    try:
        with open("/etc/os-release") as f:
            kv = dict(ln.rstrip().split("=", 1) for ln in f if "=" in ln)
        return kv.get("PRETTY_NAME", "").strip('"')
    except OSError:
        return platform.system()


def tool_versions(origin):
    v = {}
    if origin == "s3rver":
        try:
            with open(os.path.join(S3RVER_DIR, "node_modules", "s3rver", "package.json")) as f:
                version = json.load(f)["version"]
            node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=20)
            v["s3rver"] = f"{version} (node {node.stdout.strip()})"
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
            v["s3rver"] = None
    tools = [("s3fs", ["s3fs", "--version"]), ("rclone", ["rclone", "version"])]
    if origin == "moto":
        tools.append(("moto_server", ["python3", "-c", "import moto; print(moto.__version__)"]))
    for name, argv in tools:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            v[name] = (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            v[name] = None
    return v


def run_delay(b, delay, wanted):
    b.delay = delay
    proxy = b.start_proxy(delay)
    rows = []
    groups = [("ceiling", "origin ceiling", peers.origin_ceiling),
              ("local", "local disk", peers.local_disk),
              ("s3fs", "s3fs", lambda b: peers.s3fs(b, use_cache=False)),
              ("s3fs-cache", "s3fs use_cache", lambda b: peers.s3fs(b, use_cache=True)),
              ("rclone", "rclone mount --vfs-cache-mode full", peers.rclone),
              ("granary", "Granary", peers.granary_rows)]
    for key, label, fn in groups:
        if key not in wanted:
            continue
        tool = {"s3fs": "s3fs", "s3fs-cache": "s3fs", "rclone": "rclone"}.get(key)
        if tool and shutil.which(tool) is None:
            row = peers.new_row(label)
            row["error"] = f"{tool} is not installed (scripts/install-deps.sh installs it)"
            rows.append(row)
            b.log(f"{label}: skipped: {row['error']}")
            continue
        b.log(f"--- {label} ({delay})")
        settle()
        rows += peers.run_guarded(b, label, fn)
    b.procs.stop(proxy)
    return rows


def write_outputs(results, out):
    """Writes results.md and chart.png to out; returns (markdown, whether a chart was drawn)."""
    os.makedirs(out, exist_ok=True)
    md = report.markdown(results)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    return md, report.chart(results, os.path.join(out, "chart.png"))


def render(results_json, out):
    """Re-renders the table, targets and chart of an earlier run."""
    with open(results_json) as f:
        results = json.load(f)
    for d in results["delays"].values():
        d["targets"] = report.targets(d["rows"])
    print(write_outputs(results, out)[0])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build", help="CMake build directory with granary and bench/")
    ap.add_argument("--files", type=int, default=10000, help="data set size (JPEG files)")
    ap.add_argument("--delays", default="0ms,10ms", help="per-request origin delays, comma-separated")
    ap.add_argument("--threads", type=int, default=16, help="reader threads")
    ap.add_argument("--origin", choices=["moto", "s3rver"], default="moto",
                    help="S3-compatible server behind the delay proxy: moto_server (~400 GETs/s "
                         "here) or s3rver (~1,500; scripts/install-s3rver.sh installs it)")
    ap.add_argument("--peers", default=",".join(ALL_PEERS), help="subset of " + ",".join(ALL_PEERS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--peer-max-files", type=int, default=0,
                    help="cap s3fs/rclone epochs at this many files (0 = all; the demo uses it)")
    ap.add_argument("--origin-cpus", default="auto",
                    help="CPUs the origin and its delay proxy run on, everything else on the "
                         "others (a remote origin does not share the client's CPUs): auto (the "
                         "first quarter, at least one, when there are 2 or more), none, or a "
                         "list like 0 or 0-1")
    ap.add_argument("--ceiling-seconds", type=float, default=3.0, help="ufs_get seconds per level")
    ap.add_argument("--cache-quota", default="50G", help="quota of every cache directory")
    ap.add_argument("--epoch-timeout", type=int, default=1800, help="seconds one epoch may take")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--out", default="compare-results", help="where results.md/json and chart.png go")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a row failed, a read failed or warm Granary reads reached the origin")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="only rewrite results.md and chart.png in --out from an earlier results.json")
    args = ap.parse_args()
    if args.render:
        return render(args.render, args.out)
    wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
    bad = [p for p in wanted if p not in ALL_PEERS]
    if bad:
        ap.error(f"--peers: unknown {','.join(bad)} (choose from {','.join(ALL_PEERS)})")
    delays = [d.strip() for d in args.delays.split(",") if d.strip()]

    work = args.work or tempfile.mkdtemp(prefix="granary-compare.", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    log_dir = os.path.join(args.out, "logs")
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    b = Bench(args, work, log_dir)
    b.origin_cpus, client_cpus = split_cpus(args.origin_cpus)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)  # every client process inherits it
    if not os.access(b.granary, os.X_OK):
        raise SystemExit(f"compare: {b.granary} is missing; build it first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
               "tools": tool_versions(args.origin), "config": {"files": args.files, "threads": args.threads,
                                                    "delays": delays, "seed": args.seed,
                                                    "origin": args.origin,
                                                    "origin_cpus": sorted(b.origin_cpus or []),
                                                    "client_cpus": sorted(client_cpus or [])},
               "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]), "delays": {}}
    try:
        b.start_origin()
        b.generate()
        results["config"]["total_bytes"] = b.total_bytes
        for delay in delays:
            rows = run_delay(b, delay, wanted)
            results["delays"][delay] = {"rows": rows, "targets": report.targets(rows)}
    except KeyboardInterrupt:
        print("compare: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        b.procs.stop_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"compare: scratch directory kept in {work}")
    results["seconds"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds())
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    md, chart = write_outputs(results, args.out)
    print("\n" + md)
    print(f"compare: wrote {args.out}/results.md, results.json"
          + (", chart.png" if chart else " (no chart: gnuplot missing)"))
    if args.check:
        return check_status("compare", report.problems(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
