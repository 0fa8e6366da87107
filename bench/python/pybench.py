#!/usr/bin/python3
"""Python reading local ext4 vs Granary's API vs the FUSE mount, in one run and one table.

How fast Python reads a training set: the same files through open()+read()
on ext4, Granary's API (in-process and attached to a mount) and the mount,
and through a DataLoader. It reuses bench.benchlib (origin: s3rver behind
bench/s3_delay_proxy, CPU pinning, the generated ImageNet-like set, `granary
mount`, dropping the page cache, bench/ufs_get for the origin ceiling) and measures every row with bench/python/py_epoch.py in a process of
its own under Debian's /usr/bin/python3: 16 readers (threads; DataLoader
rows: worker processes), whole files, shuffled.

Groups (each row has a reference; the ratio is row / reference):
  warm      page cache warm: open()+read() on ext4 | API in-process | API
            attached to the mount (opening cache files itself; and asking the
            daemon per file), over 4× more files than its descriptor cache |
            open()+read() through the mount
  fresh     a fresh process, warm cache on disk, page cache dropped: ext4
            cold | API in-process | API attached to a fresh remount | fresh
            remount (cached, passthrough) read with open()+read()
  cold      empty cache, origin +10 ms per request: ufs_get ceiling | API
            with epoch-aware prefetch | API read-through | `mount --load`
  loader    DataLoader (PIL decode, RandomResizedCrop(64), batch 64, 4
            workers), page cache warm: torchvision ImageFolder on ext4 |
            granary.Dataset in-process | granary.torch.ImageFolder attached
            | torchvision ImageFolder through the mount

Warm rows run, in one process, an unmeasured epoch and --repeats measured
ones (each in a new order) and report the fastest; fresh rows run --repeats
new processes (page cache dropped before each) and report the fastest; cold
rows run once each (a fresh cache). DataLoader rows read --dl-files files.
Writes results.md and results.json to --out, logs to --out/logs; every
process it starts it stops, every mount it makes it unmounts.

  bench/python/pybench.py --build-dir build --files 10000
  bench/python/pybench.py --files 2000 --groups warm,fresh   # quick
"""
if __name__ == "__main__" and not __package__:
    # Run by path: run again as the module bench.python.pybench with the
    # repository root on PYTHONPATH, where it finds bench.benchlib.
    import os
    import sys
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))
    os.execv(sys.executable, [sys.executable, "-m", "bench.python.pybench", *sys.argv[1:]])

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

from bench.benchlib.bench import Bench
from bench.benchlib.mounts import GranaryMount, cache_dir, delete_caches
from bench.benchlib.origin import DEFAULT_ORIGIN, ORIGIN_HELP, ORIGINS, split_cpus
from bench.benchlib.procs import StepError, drop_page_cache, settle
from bench.benchlib.results import command_line, machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"  # Debian's: torch, torchvision, PIL (not pyenv's python3)
WORKER = os.path.join(HERE, "py_epoch.py")
ALL_GROUPS = ["warm", "fresh", "cold", "loader"]

EXT4_WARM = "Python open()+read(), ext4"
EXT4_COLD = "Python open()+read(), ext4, page cache dropped"
CEILING = "origin ceiling (ufs_get, best concurrency)"
DL_EXT4 = "torchvision ImageFolder, ext4"
API_WARM = "Granary API, in-process"
API_FRESH = "Granary API, in-process, fresh process"
API_PREFETCH = "Granary API, in-process, prefetch(epoch order)"
MOUNT_FRESH_PREFIX = "Python open()+read(), fresh remount"
# Not a target row: what the attached client's two knobs give (a connection per
# reader thread, a descriptor for every file of the set).
ATTACH_TUNED = "Granary API, attached, tuned"
API_ATTACHED = "Granary API, attached to the mount"
API_ASKING = "Granary API, attached, asking the daemon per file"


class PyBench(Bench):
    """The Bench plus epochs run by py_epoch.py."""

    def __init__(self, args, work, log_dir):
        super().__init__(args, work, log_dir)
        self.delay = None
        self.seq = 0

    def py_epoch(self, label, mode, root, extra=(), drop=False, settle_first=True, run_dir=None):
        """One py_epoch.py run; its figures plus origin requests per image (of the epoch
        alone: an in-process open's listing is not counted, as a mount's is not).
        run_dir: the --run-dir of the mount an attached epoch finds its daemon in."""
        self.seq += 1
        js = os.path.join(self.log_dir, f"{self.seq:02d}-{mode}.json")
        argv = [PYTHON, WORKER, "--mode", mode, "--root", root, "--list", self.list_file,
                "--threads", str(self.threads), "--seed", str(self.args.seed * 1000 + self.seq),
                "--json", js, "--origin-stats", self.endpoint + "/__proxy_stats", *extra]
        if mode.startswith("dl-"):
            argv += ["--workers", str(self.args.workers), "--batch", str(self.args.batch),
                     "--local-root", self.local_root]
            if self.args.dl_files and self.args.dl_files < self.files:
                argv += ["--max-files", str(self.args.dl_files)]
        if drop:
            if not drop_page_cache():
                raise StepError("dropping the page cache needs root")
        elif settle_first:
            settle()
        env = dict(self.py_env, GRANARY_RUN_DIR=run_dir) if run_dir else self.py_env
        try:
            out = subprocess.run(argv, capture_output=True, text=True, env=env,
                                 timeout=self.args.epoch_timeout)
        except subprocess.TimeoutExpired:
            raise StepError(f"{label}: epoch did not finish in {self.args.epoch_timeout} s") \
                from None
        self.save_log("py_epoch", f"== {self.delay} {label}: {' '.join(argv)}\n"
                                  f"{out.stdout}{out.stderr}")
        if not os.path.exists(js):
            raise StepError(f"{label}: py_epoch exited {out.returncode}: {out.stderr[-400:]}")
        with open(js) as f:
            r = json.load(f)
        r["origin_requests_per_image"] = r["epoch_origin_requests"] / max(1, r["files"])
        p99 = f"p99 {r['p99_ms']:7.2f} ms" if r.get("p99_ms") is not None else " " * 14
        self.log(f"  {label:58} {r['images_per_s']:8.0f} img/s {r['mb_per_s']:7.1f} MB/s "
                 f"{p99} req/img {r['origin_requests_per_image']:.2f}"
                 + (f" open {r['open_s']:.2f} s" if r.get("open_s") else "")
                 + (f" runs {r['runs']}" if len(r.get("runs", [])) > 1 else "")
                 + (f"  ERRORS {r['errors']}" if r["errors"] else ""))
        return r

    def best_of(self, label, mode, root, extra=(), warmup=True, drop=False, run_dir=None):
        """warmup: one process runs an unmeasured epoch and --repeats measured ones (a
        training job's later epochs); else --repeats processes run one epoch each
        (drop: after dropping the page cache). The fastest, every run's img/s in "runs"."""
        if warmup:
            return self.py_epoch(label, mode, root, [*extra, "--warmup", "1", "--epochs",
                                                     str(self.args.repeats)], run_dir=run_dir)
        runs = [self.py_epoch(label, mode, root, extra, drop=drop, run_dir=run_dir)
                for _ in range(self.args.repeats)]
        best = max(runs, key=lambda r: r["images_per_s"])
        best["runs"] = [round(r["images_per_s"]) for r in runs]
        return best

    def small_fd_cache(self):
        """max_open_files of the warm attached rows: a quarter of the set, so every
        epoch opens most files again (as 1.28M files do with any descriptor cache)."""
        return max(16, self.files // 4)

    def attach_tuning(self):
        return ["--connections", str(self.threads), "--max-open-files",
                str(self.args.tuned_open_files)]

    def tuned_note(self):
        return (f"granary.Dataset(mount, connections={self.threads}, max_open_files="
                f"{self.args.tuned_open_files}): a connection per reader, a descriptor per "
                "file (defaults: 4 and 4,096)")

    def api_extra(self, cache):
        return ["--cache-dir", f"{cache}:{self.cache_quota}", "--endpoint", self.endpoint]

    @property
    def source(self):
        return f"s3://{self.bucket}/{self.prefix}"


def timed_mount(g):
    """Mounts g; the seconds `granary mount` took (it returns once the daemon serves)."""
    t0 = time.monotonic()
    g.mount()
    return time.monotonic() - t0


def row(group, path, ref, note=""):
    return {"group": group, "path": path, "ref": ref, "note": note, "result": None,
            "error": None}


def guarded(b, rows, r, fn):
    """r["result"] = fn(); a StepError becomes the row's error; the row goes into rows."""
    rows.append(r)
    try:
        r["result"] = fn()
    except StepError as e:
        b.log(f"{r['path']}: FAILED: {e}")
        r["error"] = str(e)
    return r["result"]


# ---------------------------------------------------------------------------
# 0 ms: warm page cache, fresh process over a warm cache, DataLoader.

def warm_cache_groups(b, groups):
    rows = []
    cache = cache_dir(b, "py-cache")
    g = GranaryMount(b, "py-warm", cache)
    mount_rows = "warm" in groups or "loader" in groups
    if mount_rows or "fresh" in groups:
        g.mount()
        try:
            secs = g.load()
            b.log(f"granary load: {b.files / secs:.0f} files/s into {cache}")
            if "warm" in groups:
                fds = b.small_fd_cache()
                guarded(b, rows, row("warm", API_ATTACHED, EXT4_WARM,
                                     f"opens the cache files itself (snapshot mapped, store "
                                     f"layout), max_open_files={fds}: the set is "
                                     f"{b.files / fds:.0f}× the descriptor cache"),
                        lambda: b.best_of("attach, warm", "attach", g.mnt,
                                          ["--max-open-files", str(fds)], run_dir=g.run))
                guarded(b, rows, row("warm", API_ASKING, EXT4_WARM,
                                     f"direct=False: each file's descriptor over the daemon's "
                                     f"socket, max_open_files={fds}"),
                        lambda: b.best_of("attach, warm, asking the daemon", "attach", g.mnt,
                                          ["--max-open-files", str(fds), "--no-direct"],
                                          run_dir=g.run))
                guarded(b, rows, row("warm", "Python open()+read(), Granary mount", EXT4_WARM,
                                     "FUSE, --read-mode auto (cached for this set)"),
                        lambda: b.best_of("mount, warm", "file", g.mnt))
            if "loader" in groups:
                guarded(b, rows, row("loader", "granary.torch.ImageFolder, attached to the mount",
                                     DL_EXT4),
                        lambda: b.best_of("DataLoader granary ImageFolder attached", "dl-granary",
                                          os.path.join(g.mnt, "train"), run_dir=g.run))
                guarded(b, rows, row("loader", "torchvision ImageFolder, Granary mount", DL_EXT4),
                        lambda: b.best_of("DataLoader torchvision over the mount",
                                          "dl-torchvision", os.path.join(g.mnt, "train")))
        finally:
            g.umount()
    if "warm" in groups:
        guarded(b, rows, row("warm", API_WARM, EXT4_WARM, "granary.Dataset(s3://..., cache_dir=) "
                             "over the loaded cache; ds[i] from 16 threads"),
                lambda: b.best_of("API in-process, warm", "api", b.source, b.api_extra(cache)))
        guarded(b, rows, row("warm", EXT4_WARM, EXT4_WARM, "the same tree on the local disk"),
                lambda: b.best_of("ext4, warm", "file", b.local_root))
    if "loader" in groups:
        guarded(b, rows, row("loader", "granary.Dataset in-process (list_file)", DL_EXT4,
                             "workers attach to the dataset's socket"),
                lambda: b.best_of("DataLoader granary.Dataset in-process", "dl-granary",
                                  b.source, b.api_extra(cache)))
        guarded(b, rows, row("loader", DL_EXT4, DL_EXT4, "torchvision.datasets.ImageFolder"),
                lambda: b.best_of("DataLoader torchvision on ext4", "dl-torchvision",
                                  os.path.join(b.local_root, "train")))
    if "fresh" in groups:
        rows += fresh_group(b, cache)
    delete_caches(b)
    return rows


def fresh_group(b, cache):
    rows = []
    guarded(b, rows, row("fresh", EXT4_COLD, EXT4_COLD, "sync; echo 3 > drop_caches first"),
            lambda: b.best_of("ext4, page cache dropped", "file", b.local_root, warmup=False,
                              drop=True))
    guarded(b, rows, row("fresh", API_FRESH, EXT4_COLD, "a new process opens the warm cache"),
            lambda: b.best_of("API in-process, fresh", "api", b.source, b.api_extra(cache),
                              warmup=False, drop=True))
    for label, name, extra, mode in (
            ("Granary API, attached to a fresh remount", "attach", [], "attach"),
            (ATTACH_TUNED + ", fresh remount", "attach", b.attach_tuning(), "attach"),
            (f"{MOUNT_FRESH_PREFIX} (cached)", "cached", ["--read-mode", "cached"], "file"),
            (f"{MOUNT_FRESH_PREFIX} (passthrough)", "passthrough",
             ["--read-mode", "passthrough"], "file")):
        # extra: `granary mount` flags for file rows, py_epoch flags for attach rows
        def one(name=name, extra=extra, mode=mode, label=label):
            runs = []
            mount_flags, epoch_flags = ([], extra) if mode == "attach" else (extra, [])
            for _ in range(b.args.repeats):
                g = GranaryMount(b, "py-re-" + name, cache, mount_flags)
                mount_s = timed_mount(g)
                try:
                    runs.append(b.py_epoch(label, mode, g.mnt, epoch_flags, drop=True,
                                           run_dir=g.run))
                    runs[-1]["open_s"] = mount_s + runs[-1].get("open_s", 0)
                finally:
                    g.umount()
            best = max(runs, key=lambda r: r["images_per_s"])
            best["runs"] = [round(r["images_per_s"]) for r in runs]
            return best
        note = "a new mount of the warm cache, page cache dropped after mounting"
        if label.startswith(ATTACH_TUNED):
            note += "; " + b.tuned_note()
        guarded(b, rows, row("fresh", label, EXT4_COLD, note), one)
    return rows


# ---------------------------------------------------------------------------
# 10 ms: cold.

def cold_group(b):
    rows = []
    r = row("cold", CEILING, CEILING, "bench/ufs_get, GETs/s at 1..128 in flight")
    rows.append(r)
    try:
        r["result"] = b.ufs_ceiling()
    except StepError as e:
        r["error"] = str(e)
    cache = cache_dir(b, "py-cold-prefetch")
    guarded(b, rows, row("cold", API_PREFETCH, CEILING,
                         f"ds.prefetch(shuffled order, window={b.args.window}), then 16 threads "
                         "read that order"),
            lambda: b.py_epoch("API in-process, prefetch, cold", "api", b.source,
                               b.api_extra(cache) + ["--prefetch", str(b.args.window)]))
    cache = cache_dir(b, "py-cold-rt")
    guarded(b, rows, row("cold", "Granary API, in-process, read-through", CEILING,
                         "no prefetch: each read fetches on demand"),
            lambda: b.py_epoch("API in-process, read-through, cold", "api", b.source,
                               b.api_extra(cache)))
    cache = cache_dir(b, "py-cold-ml")

    def mount_load():
        g = GranaryMount(b, "py-ml", cache, ["--load"])
        mount_s = timed_mount(g)
        try:
            r = b.py_epoch("mount --load, first epoch", "file", g.mnt, settle_first=False)
            r["open_s"] = mount_s
            # The load's GETs before the epoch began count too (as in bench/compare).
            r["origin_requests_per_image"] = int(g.status()["origin_requests"]) / r["files"]
            return r
        finally:
            g.umount()
    guarded(b, rows, row("cold", "Python open()+read(), `granary mount --load`", CEILING,
                         "first epoch; the background load fills the cache meanwhile"),
            mount_load)
    delete_caches(b)
    return rows


# ---------------------------------------------------------------------------
# Targets and the table.

def _ips(rows, path):
    r = next((x for x in rows if x["path"] == path and x["result"]), None)
    return r["result"]["images_per_s"] if r else None


def targets(rows):
    out = []

    def add(name, num, den, want, against):
        ratio = num / den if num and den else None
        out.append({"target": name, "ratio": ratio, "want": want, "against": against,
                    "met": None if ratio is None else ratio >= want})
    add("API warm / Python on ext4 warm", _ips(rows, API_WARM), _ips(rows, EXT4_WARM), 0.9,
        EXT4_WARM)
    add("API attached warm / Python on ext4 warm", _ips(rows, API_ATTACHED),
        _ips(rows, EXT4_WARM), 1.0, EXT4_WARM)
    mounts = [(x["result"]["images_per_s"], x["path"]) for x in rows
              if x["path"].startswith(MOUNT_FRESH_PREFIX) and x["result"]]
    best_mount, best_name = max(mounts) if mounts else (None, None)
    add("API fresh process over a warm cache / best fresh remount", _ips(rows, API_FRESH),
        best_mount, 2.0, best_name)
    add("API cold with prefetch / origin ceiling", _ips(rows, API_PREFETCH), _ips(rows, CEILING),
        0.9, CEILING)
    return out


GROUP_TITLES = {
    "warm": "Warm: page cache warm (0 ms origin)",
    "fresh": "Fresh process over a warm cache on disk, page cache dropped (0 ms origin)",
    "cold": "Cold: empty cache, origin +10 ms per request",
    "loader": "DataLoader with PIL decode, page cache warm (0 ms origin)",
}


def _fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def markdown(results):
    lines = []
    rows = results["rows"]
    for group in ALL_GROUPS:
        mine = [r for r in rows if r["group"] == group]
        if not mine:
            continue
        lines += [f"#### {GROUP_TITLES[group]}", "",
                  "| access path | img/s | MB/s | × reference | p99 ms | origin req/img "
                  "| open s | runs img/s |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in mine:
            if r["error"]:
                lines.append(f"| {r['path']} | failed: {r['error'][:120]} | | | | | | |")
                continue
            x = r["result"]
            ref = _ips(rows, r["ref"])
            ratio = f"{x['images_per_s'] / ref:.2f}×" if ref else "–"
            if r["path"] == r["ref"]:
                ratio = "reference"
            runs = ", ".join(f"{v:,}" for v in x.get("runs", [])) or "–"
            lines.append(f"| {r['path']} | {_fmt(x['images_per_s'])} | {_fmt(x.get('mb_per_s'), 1)} "
                         f"| {ratio} | {_fmt(x.get('p99_ms'), 2)} "
                         f"| {_fmt(x.get('origin_requests_per_image'), 2)} "
                         f"| {_fmt(x.get('open_s') or None, 2)} | {runs} |")
        lines.append("")
    lines += ["| target | measured | wanted | met |", "|---|---:|---:|:---:|"]
    for t in results["targets"]:
        met = "–" if t["met"] is None else ("yes" if t["met"] else "**no**")
        against = f" ({t['against']})" if t["against"] else ""
        ratio = f"{t['ratio']:.2f}×" if t["ratio"] is not None else "not measured"
        lines.append(f"| {t['target']}{against} | {ratio} | ≥ {t['want']}× | {met} |")
    lines += ["", "open s: opening the dataset in-process (`granary.Dataset(...)`: snapshot, "
              "store) or `granary mount` (fresh remount and --load rows), before the epoch "
              "and not in its img/s; p99: per-file read latency.", "", "Notes:"]
    lines += [f"- {r['path']}: {r['note']}" for r in rows if r["note"]]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--files", type=int, default=10000, help="data set size (JPEG files)")
    ap.add_argument("--threads", type=int, default=16, help="reader threads")
    ap.add_argument("--groups", default=",".join(ALL_GROUPS), help="subset of " + ",".join(ALL_GROUPS))
    ap.add_argument("--repeats", type=int, default=2, help="measured epochs of warm/fresh rows")
    ap.add_argument("--window", type=int, default=1024, help="prefetch window of the cold API row")
    ap.add_argument("--workers", type=int, default=4, help="DataLoader workers")
    ap.add_argument("--batch", type=int, default=64, help="DataLoader batch size")
    ap.add_argument("--dl-files", type=int, default=2000,
                    help="DataLoader epochs read this many files of the set (the same ones "
                         "every epoch; 0 = all): PIL decode runs at a few hundred img/s here")
    ap.add_argument("--tuned-open-files", type=int, default=16384,
                    help="max_open_files of the tuned attached rows")
    ap.add_argument("--cold-delay", default="10ms", help="origin delay of the cold group")
    ap.add_argument("--origin", choices=ORIGINS, default=DEFAULT_ORIGIN, help=ORIGIN_HELP)
    ap.add_argument("--origin-cpus", default="auto", help="as bench/compare/compare.py")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ceiling-seconds", type=float, default=3.0)
    ap.add_argument("--cache-quota", default="50G")
    ap.add_argument("--epoch-timeout", type=int, default=1800)
    ap.add_argument("--pythonpath", default="",
                    help="prepended to PYTHONPATH of the epochs (a build's python/ module "
                         "and the package source), when granary is not installed")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--out", default="pybench-results")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    args.peer_max_files = 0
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    bad = [g for g in groups if g not in ALL_GROUPS]
    if bad:
        ap.error(f"--groups: unknown {','.join(bad)}")
    if not os.access(PYTHON, os.X_OK):
        raise SystemExit(f"pybench: {PYTHON} is missing (Debian's python3 with python3-torch)")

    work = args.work or tempfile.mkdtemp(prefix="granary-pybench.", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    log_dir = os.path.join(args.out, "logs")
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    b = PyBench(args, work, log_dir)
    b.py_env = dict(b.env)
    if args.pythonpath:
        b.py_env["PYTHONPATH"] = os.pathsep.join(
            [os.path.abspath(p) for p in args.pythonpath.split(os.pathsep)]
            + ([b.env["PYTHONPATH"]] if b.env.get("PYTHONPATH") else []))
    check = subprocess.run([PYTHON, "-c", "import granary, granary.torch, torchvision"],
                           capture_output=True, text=True, env=b.py_env, cwd="/")
    if check.returncode != 0:
        raise SystemExit("pybench: /usr/bin/python3 cannot import granary/torchvision "
                         "(scripts/install-python.sh, or --pythonpath BUILD/python:python): "
                         + check.stderr.strip()[-300:])
    b.origin_cpus, client_cpus = split_cpus(args.origin_cpus)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    if not os.access(b.granary, os.X_OK):
        raise SystemExit(f"pybench: {b.granary} is missing; build it first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
               "config": {"files": args.files, "threads": args.threads, "repeats": args.repeats,
                          "window": args.window, "workers": args.workers, "batch": args.batch,
                          "dl_files": args.dl_files,
                          "cold_delay": args.cold_delay, "origin": args.origin,
                          "origin_cpus": sorted(b.origin_cpus or []),
                          "client_cpus": sorted(client_cpus or [])},
               "command": command_line(),
               "load_before": os.getloadavg(), "rows": []}
    rows = results["rows"]
    try:
        b.start_origin()
        b.generate()
        results["config"]["total_bytes"] = b.total_bytes
        if any(g in groups for g in ("warm", "fresh", "loader")):
            b.delay = "0ms"
            proxy = b.start_proxy("0ms")
            rows += warm_cache_groups(b, groups)
            b.procs.stop(proxy)
        if "cold" in groups:
            b.delay = args.cold_delay
            proxy = b.start_proxy(args.cold_delay)
            rows += cold_group(b)
            b.procs.stop(proxy)
    except KeyboardInterrupt:
        print("pybench: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        b.procs.stop_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    results["targets"] = targets(rows)
    results["load_after"] = os.getloadavg()
    results["seconds"] = round((datetime.datetime.now(datetime.timezone.utc)
                                - started).total_seconds())
    write_results(args.out, results, markdown(results))
    print(f"pybench: wrote {args.out}/results.md and results.json ({results['seconds']} s)")
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
