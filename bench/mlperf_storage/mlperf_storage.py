#!/usr/bin/python3
"""MLPerf Storage training workloads (DLIO's unet3d, resnet50, cosmoflow) over each access path.

For every workload: generates DLIO's data set in DLIO's formats and names
(formats.py; imagenet-tfrecord: gen_imagenet's JPEGs packed into --shards
TFRecord shards with DALI index files, imagenet.py), copies it to a local
S3-compatible server, and for every access
path (paths.py: local disk, Granary cold / warm / Python API, s3fs, rclone;
cluster_paths.py: a 3-node Granary cluster in network namespaces, warm and
cold, read through node 0's mount)
finds the most simulated accelerators whose accelerator utilization (AU)
holds the workload's bar (90 % unet3d, resnet50, imagenet-tfrecord; 70 %
cosmoflow): runs at
1, 2, 4, ... accelerators until one misses it, then bisects (trial.py: one
process per accelerator, DLIO's loader, computation time and AU formula).
Reports accelerators, GiB/s per client and per client core, beside the
published single-client results; writes results.json and results.md to --out.

Data set size: the MLPerf Storage rule (5x the client memory, and 500 steps of
--max-accelerators) unless --files N, --size-scale F (a fraction of it) or
--small (a few MB: the CI test, which also validates every npz with numpy,
every TFRecord's CRCs and every DALI index against its shard, checks every
data CRC on every read, and fails on any failed run). For imagenet-tfrecord a
"file" is one JPEG (one record). Every process it starts it stops, every
mount it unmounts.

  bench/mlperf_storage/mlperf_storage.py --small
  bench/mlperf_storage/mlperf_storage.py --files 16 --workloads unet3d --max-accelerators 4
  bench/mlperf_storage/mlperf_storage.py --size-scale 0.05 --paths local,granary-cold,granary-warm
  bench/mlperf_storage/mlperf_storage.py --workloads imagenet-tfrecord \
      --files imagenet-tfrecord=30000 --shards 1024
  bench/mlperf_storage/mlperf_storage.py --small --workloads unet3d \
      --paths granary-cluster,granary-cluster-cold     # the cluster paths' smoke test

Run with Debian's /usr/bin/python3 (numpy); needs root for FUSE mounts and to
drop the page cache.
"""
if __name__ == "__main__" and not __package__:
    # Run by path: run again as the module bench.mlperf_storage.mlperf_storage with the
    # repository root on PYTHONPATH, where it finds bench.benchlib.
    import os
    import sys
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))
    os.execv(sys.executable, [sys.executable, "-m", "bench.mlperf_storage.mlperf_storage", *sys.argv[1:]])

import argparse
import datetime
import os
import shutil
import signal
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77  # ctest's SKIP_RETURN_CODE
SMALL_PATHS = ["local", "granary-cold", "granary-warm", "granary-api"]

try:
    from bench.mlperf_storage import formats, imagenet
except ImportError as _e:  # numpy missing: not this interpreter (see the shebang)
    print(f"mlperf_storage: SKIP: {_e} (run with /usr/bin/python3 and python3-numpy)")
    sys.exit(SKIP)
from bench.benchlib.bench import Bench  # noqa: E402
from bench.benchlib.cpu import CpuMeter  # noqa: E402
from bench.benchlib.granary_module import import_granary  # noqa: E402
from bench.benchlib.origin import DEFAULT_ORIGIN, ORIGINS, split_cpus  # noqa: E402
from bench.benchlib.procs import StepError  # noqa: E402
from bench.benchlib.results import command_line, machine, write_results  # noqa: E402
from bench.mlperf_storage import cluster_paths, paths, summary, trial  # noqa: E402
from bench.mlperf_storage.loaders import prefetch_depth  # noqa: E402
from bench.mlperf_storage.workloads import (DLIO_WORKLOADS, SMALL_SHARDS, WORKLOADS,  # noqa: E402
                                            small)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# Data sets.

def dataset_size(args, name, memory_bytes):
    """(workload, files, how the size was chosen)."""
    if args.small:
        w, files = small(name)
        return w, files, (f"--small: records of {w.record_length / 1024:.0f} KiB"
                          + _shards(args, w, files))
    w = WORKLOADS[name]
    if name in args.files:
        return w, args.files[name], "--files" + _shards(args, w, args.files[name])
    rule = w.rule_files(memory_bytes, args.max_accelerators)
    files = max(int(rule * args.size_scale), -(-2 * w.batch_size // w.samples_per_file))
    how = (f"the rule: 5 x {memory_bytes / 2**30:.0f} GiB memory and 500 steps of "
           f"{args.max_accelerators} accelerators = {rule} files")
    return w, files, (how + (f", x {args.size_scale}" if args.size_scale != 1 else "")
                      + _shards(args, w, files))


def _shards(args, w, files):
    return f"; JPEGs in {min(args.shards, files)} shards" if w.fmt == "dali" else ""


def check_space(work, plans, caches):
    """SystemExit when the scratch disk cannot hold every data set twice (local
    copy and origin), `caches` caches of the largest at once, and the JPEGs of
    the largest imagenet-tfrecord set while they are packed."""
    sizes = [w.file_bytes * files for w, files, _ in plans.values()]
    staged = [w.file_bytes * files for w, files, _ in plans.values() if w.fmt == "dali"]
    need = 2 * sum(sizes) + caches * max(sizes) + max(staged, default=0)
    free = shutil.disk_usage(work).free
    if need > free:
        raise SystemExit(f"mlperf_storage: the data sets need ~{need / 2**30:.0f} GiB in {work} "
                         f"(local copies, the origin's, {caches} caches) but "
                         f"{free / 2**30:.0f} GiB are free; use --size-scale or --files")


def generate(args, b, name, w, files, pool):
    """Generates and validates (numpy / CRCs / indexes) one workload's tree
    under <work>/data/<name>; returns (workload, (local root, manifest, records
    per shard or None)). imagenet-tfrecord's workload comes back with the
    generated JPEGs' mean size as its record length."""
    root = os.path.join(b.work, "data", name)
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.monotonic()
    records = None
    if w.fmt == "dali":
        manifest, records, mean = imagenet.generate(
            root, os.path.join(b.work, "jpeg-staging"), gen_imagenet_bin(args.build_dir), files,
            args.shards, seed=1, median_bytes=w.record_length if args.small else None)
        w = w.scaled(mean, 0)
    else:
        manifest = formats.generate(root, w, files, pool)
    total = sum(manifest.values())
    log(f"{name}: generated {files} {'JPEGs' if records else 'files'}"
        + (f" in {len(manifest)} shards" if records else "")
        + f", {total / 2**30:.3f} GiB in {time.monotonic() - t0:.1f} s")
    data = (root, manifest, records)
    if args.small or args.validate:
        t0 = time.monotonic()
        validate_tree(root, w, data)
        log(f"{name}: every file valid ({VALIDATION[w.fmt]}, {time.monotonic() - t0:.1f} s)")
    return w, data


VALIDATION = {"npz": "numpy.load", "tfrecord": "TFRecord CRCs",
              "dali": "TFRecord CRCs, JPEG markers, labels, index files"}


def validate_tree(root, w, data):
    """Validates every training file of data (generate()'s) found under root;
    returns the number checked. FormatError otherwise."""
    _, manifest, records = data
    if w.fmt == "dali":
        return imagenet.validate_tree(root, manifest, records)
    return formats.validate_tree(root, w, manifest)


def gen_imagenet_bin(build_dir):
    path = os.path.join(os.path.abspath(build_dir), "bench", "gen_imagenet", "gen_imagenet")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"mlperf_storage: {path} is missing (imagenet-tfrecord's JPEGs); "
                         "build it first")
    return path


# ---------------------------------------------------------------------------
# Runs and the search.

def measured_run(spec, path, origin, n):
    """One run of n accelerators over path; the run's figures with CPU added
    (a run the data set is too small for sets up no path: no mount)."""
    short = trial.too_few_steps(spec, n)
    if short["skipped"]:
        return short
    try:
        src = path.run_source()
        spec.source = src.source
        cpu = CpuMeter(src.pids, origin.pids + src.origin_pids)
        client = CpuMeter(src.client_pids, []) if src.client_pids else None
        r = trial.run(spec, n)
        cache_cpu, origin_cpu = cpu.stop()
        client_cpu = client.stop()[0] if client else None
        if src.after and not r["error"]:
            r["warning"] = src.after()
        if src.figures and not r["error"] and not r["skipped"]:
            r.update(src.figures(r))
    finally:
        path.end_run()
    if r["error"] or r["skipped"]:
        return r
    cores = r["reader_cpu_s"] + (cache_cpu or 0)
    r.update({"cache_cpu_s": cache_cpu, "origin_cpu_s": origin_cpu,
              "gib_per_core": r["bytes"] / 2**30 / cores if cores else None})
    if client_cpu is not None:  # the client node's own daemon, without the other nodes'
        r["client_cpu_s"] = client_cpu
        r["gib_per_client_node_core"] = r["bytes"] / 2**30 / (r["reader_cpu_s"] + client_cpu)
    return r


def search(run_at, cap, bar):
    """(most accelerators whose AU >= bar, {n: run}, why it stopped or None, error)."""
    runs = {}
    best, fail, limit = 0, None, None
    n = 1
    while True:
        r = runs[n] = run_at(n)
        if r["error"]:
            return best, runs, limit, r["error"]
        if r["skipped"]:
            fail, limit = n, f"{n} accelerators: {r['skipped']}"
            break
        if r["au"] < bar:
            fail = n
            break
        best = n
        if n >= cap:
            limit = f"--max-accelerators {cap}"
            break
        n = min(2 * n, cap)
    while fail is not None and fail - best > 1:
        mid = (best + fail) // 2
        r = runs[mid] = run_at(mid)
        if r["error"]:
            return best, runs, limit, r["error"]
        if r["skipped"] or r["au"] < bar:
            fail = mid
        else:
            best = mid
    return best, runs, limit, None


def run_path(args, path, spec, origin, w):
    def run_at(n):
        r = measured_run(spec, path, origin, n)
        if r["error"]:
            log(f"  {path.name:13} {n:3} acc  FAILED: {r['error']}")
        elif r["skipped"]:
            log(f"  {path.name:13} {n:3} acc  skipped: {r['skipped']}")
        else:
            log(f"  {path.name:13} {n:3} acc  AU {100 * r['au']:5.1f} %  "
                f"{r['gib_per_s']:7.3f} GiB/s  {r['samples_per_s']:9.1f} samples/s  "
                f"{_fmt(r['gib_per_core'], '.3f')} GiB/s/core"
                + (f"  WARNING {r['warning']}" if r.get("warning") else ""))
        return r

    best, runs, limit, error = search(run_at, args.max_accelerators, w.au_bar)
    shown = runs.get(best) or runs.get(1)
    return {"accelerators": best, "note": path.note, "limit": limit, "error": error,
            "shown": shown if shown and not shown["error"] and not shown["skipped"] else None,
            "trials": [runs[n] for n in sorted(runs)]}


def _fmt(v, spec):
    return "–" if v is None else format(v, spec)


def make_path(name, args, b, mounts, warm, local_root, data_bytes):
    if name.startswith("granary-cluster"):
        cluster = cluster_paths.GranaryCluster(b, mounts.workload, args.cluster_link_rate)
        return cluster_paths.GranaryClusterPath(cluster, data_bytes,
                                                cold=name == "granary-cluster-cold")
    if name == "local":
        return paths.LocalPath(local_root)
    if name == "granary-cold":
        return paths.GranaryColdPath(mounts)
    if name in ("granary-warm", "granary-api"):
        return paths.GranaryWarmPath(warm, api=name == "granary-api")
    return paths.PeerPath(b, name, mounts.workload)


def run_workload(args, b, origin, reaper, name, plan, data, api_ok):
    w, files, how = plan
    root, manifest, records = data
    spec = trial.TrialSpec(workload=w, manifest=sorted(manifest.items()), source=None,
                           records=records,
                           compute_s=w.compute_s[args.accelerator] * args.compute_scale,
                           verify=args.verify,
                           exclude_start_steps=args.exclude_start_steps or prefetch_depth(w))
    out = {"files": files, "bytes": sum(manifest.values()), "size_rule": how, "paths": {}}
    mounts = paths.GranaryMounts(b, origin, reaper, name, root)
    warm = paths.GranaryWarm(mounts, out["bytes"])
    try:
        for pname in args.paths:
            why = paths.unavailable(pname, origin.kind, api_ok)
            if why:
                log(f"{name} over {pname}: skipped: {why}")
                out["paths"][pname] = {"accelerators": None, "error": f"not run: {why}",
                                       "skipped": True, "trials": []}
                continue
            log(f"--- {name} over {pname}")
            path = make_path(pname, args, b, mounts, warm, root, out["bytes"])
            try:
                out["paths"][pname] = run_path(args, path, spec, origin, w)
            except StepError as e:
                log(f"{name} over {pname}: FAILED: {e}")
                out["paths"][pname] = {"accelerators": None, "error": str(e), "trials": []}
            finally:
                path.close()
            if pname == "granary-warm" and warm.m and args.small:
                validate_mount(w, warm.m.mnt, data, out["paths"][pname])
    finally:
        warm.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return out


def validate_mount(w, mnt, data, row):
    """--small: every file read back through the warm mount, validated whole."""
    try:
        n = validate_tree(mnt, w, data)
        log(f"  granary-warm: {n} files valid read back through the mount")
    except (formats.FormatError, OSError, ValueError) as e:
        row["error"] = f"read back through the mount: {e}"
        log(f"  granary-warm: INVALID: {e}")


# ---------------------------------------------------------------------------
# Checks and main.

def problems(results):
    out = []
    for wname, wl in results["workloads"].items():
        for pname, p in wl["paths"].items():
            if p.get("skipped"):
                continue
            if p.get("error"):
                out.append(f"{wname} over {pname}: {p['error']}")
            elif not any(not t["skipped"] for t in p["trials"]):
                out.append(f"{wname} over {pname}: no run had enough steps")
            for t in p.get("trials", []):
                if t.get("warning"):
                    out.append(f"{wname} over {pname}, {t['accelerators']} accelerators: "
                               f"{t['warning']}")
    return out


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--workloads", help="subset of " + ",".join(WORKLOADS) + " (default: "
                    + ",".join(DLIO_WORKLOADS) + "; with --small: all)")
    ap.add_argument("--paths", help="subset of " + ",".join(paths.ALL_PATHS) + " (default: all; "
                    "with --small: local,granary-cold,granary-warm,granary-api)")
    ap.add_argument("--accelerator", choices=["h100", "a100"], default="h100")
    ap.add_argument("--max-accelerators", type=int, default=64)
    ap.add_argument("--files", default="",
                    help="training files: N for every workload, or NAME=N,... (e.g. "
                         "unet3d=28,resnet50=16; imagenet-tfrecord counts JPEGs)")
    ap.add_argument("--shards", type=int, default=None,
                    help=f"imagenet-tfrecord's TFRecord shards (default "
                         f"{imagenet.DEFAULT_SHARDS}; {SMALL_SHARDS} with --small)")
    ap.add_argument("--size-scale", type=float, default=1.0,
                    help="fraction of the rule's data set size")
    ap.add_argument("--memory-gib", type=float, default=0,
                    help="client memory the size rule assumes (default: this machine's)")
    ap.add_argument("--small", action="store_true", help="tiny data set, checks (the CI test)")
    ap.add_argument("--compute-scale", type=float, default=None,
                    help="multiplies the computation time per step (default 1; 0.25 with "
                         "--small, to keep the CI test short)")
    ap.add_argument("--origin", choices=[*ORIGINS, "file"], default=DEFAULT_ORIGIN,
                    help="S3 server for the data (s3rver: scripts/install-s3rver.sh; moto: "
                         "moto_server), or file: Granary mounts the local tree as file://DIR")
    ap.add_argument("--cluster-link-rate", default="",
                    help="tbf rate of every node link of the granary-cluster paths, e.g. 10gbit "
                         "(default: unshaped veth)")
    ap.add_argument("--origin-cpus", default="auto",
                    help="CPUs of the origin (auto: the first quarter), the clients get the rest")
    ap.add_argument("--exclude-start-steps", type=int, default=0,
                    help="DLIO's metric.exclude_start_steps (default: the loader's prefetch "
                         "depth, 4; DLIO's own default, 1, suits runs of 500+ steps)")
    ap.add_argument("--verify", action="store_true",
                    help="check every data CRC on every read (default with --small)")
    ap.add_argument("--validate", action="store_true",
                    help="validate the generated files (numpy / TFRecord CRCs) before the runs")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--out", default="mlperf-storage-results")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    default_workloads = list(WORKLOADS) if args.small else DLIO_WORKLOADS
    args.workloads = ([x for x in args.workloads.split(",") if x] if args.workloads
                      else default_workloads)
    default_paths = SMALL_PATHS if args.small else paths.ALL_PATHS
    args.paths = [x for x in args.paths.split(",") if x] if args.paths else default_paths
    for x in args.workloads:
        if x not in WORKLOADS:
            ap.error(f"--workloads: unknown {x}")
    for x in args.paths:
        if x not in paths.ALL_PATHS:
            ap.error(f"--paths: unknown {x}")
    args.files = parse_files(ap, args.files)
    if args.shards is None:
        args.shards = SMALL_SHARDS if args.small else imagenet.DEFAULT_SHARDS
    if args.shards < 1:
        ap.error("--shards: at least 1")
    if args.compute_scale is None:
        args.compute_scale = 0.25 if args.small else 1.0
    if args.small:
        args.verify = True
        args.max_accelerators = min(args.max_accelerators, 2)
    return args


def parse_files(ap, text):
    """--files: {workload: files}."""
    out = {}
    try:
        for part in filter(None, text.split(",")):
            name, _, n = part.rpartition("=")
            for w in ([name] if name else WORKLOADS):
                if w not in WORKLOADS:
                    ap.error(f"--files: unknown workload {w}")
                out[w] = int(n)
    except ValueError:
        ap.error(f"--files {text!r}: expected N or NAME=N,...")
    if any(n < 1 for n in out.values()):
        ap.error("--files: at least 1 file")
    return out


def start_bench(args, origin_kind, work):
    """The Bench (processes, origin, environment) with its CPUs set; logs in <out>/logs."""
    log_dir = os.path.join(args.out, "logs")
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    ns = argparse.Namespace(build_dir=args.build_dir, files=0, threads=0, ceiling_seconds=0,
                            cache_quota="1T", origin=origin_kind, seed=1)
    b = Bench(ns, work, log_dir)
    b.origin_cpus, client_cpus = (None, None) if origin_kind == "file" else \
        split_cpus(args.origin_cpus)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)  # readers and FUSE daemons inherit it
    return b, client_cpus


def new_results(args, started, origin_kind, b, client_cpus):
    return {"started": started.isoformat(timespec="seconds"),
            "machine": dict(machine(), load_average=os.getloadavg()[0]),
            "command": command_line(),
            "config": {"accelerator": args.accelerator, "origin": origin_kind,
                       "origin_cpus": sorted(b.origin_cpus or []),
                       "client_cpus": sorted(client_cpus or []), "verify": args.verify,
                       "max_accelerators": args.max_accelerators, "paths": args.paths,
                       "compute_scale": args.compute_scale,
                       "crc32c": "crcmod (C)" if formats.CRC32C_NATIVE else "Python"},
            "workloads": {}}


def run_all(args, b, origin_kind, plans, results):
    """Generates, uploads and runs every workload; stops and deletes everything after."""
    api_ok = import_granary(os.path.abspath(args.build_dir))
    reaper = paths.DaemonReaper()
    try:
        check_space(b.work, plans, 1 + ("granary-warm" in args.paths
                                        or "granary-api" in args.paths)
                    + 2 * ("granary-cluster" in args.paths))
        origin = paths.Origin(b, origin_kind)
        origin.start()
        pool = formats.RandomPool()
        data = {}
        for n in args.workloads:
            w, data[n] = generate(args, b, n, plans[n][0], plans[n][1], pool)
            plans[n] = (w,) + plans[n][1:]
        t0 = time.monotonic()
        if origin.upload(os.path.join(b.work, "data")):
            log(f"uploaded to s3://{paths.BUCKET}/ in {time.monotonic() - t0:.1f} s")
        for n in args.workloads:
            results["workloads"][n] = run_workload(args, b, origin, reaper, n, plans[n],
                                                   data[n], api_ok)
    finally:
        b.procs.stop_all()
        reaper.sweep(wait=True)
        if not args.keep:
            shutil.rmtree(b.work, ignore_errors=True)
        else:
            print(f"mlperf_storage: scratch directory kept in {b.work}")


def main():
    args = parse_args()
    granary_bin = os.path.join(os.path.abspath(args.build_dir), "src", "cli", "granary")
    wants_mount = any(p != "local" for p in args.paths)
    if wants_mount and os.geteuid() != 0:
        print("mlperf_storage: SKIP: FUSE mounts and dropping the page cache need root")
        return SKIP
    if wants_mount and not os.access(granary_bin, os.X_OK):
        raise SystemExit(f"mlperf_storage: {granary_bin} is missing; build it first")
    origin_kind = args.origin
    work = args.work or tempfile.mkdtemp(prefix="mlps.", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    b, client_cpus = start_bench(args, origin_kind, work)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    memory = (args.memory_gib * 2**30) or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    plans = {n: dataset_size(args, n, memory) for n in args.workloads}
    results = new_results(args, started, origin_kind, b, client_cpus)
    try:
        run_all(args, b, origin_kind, plans, results)
    except (StepError, formats.FormatError) as e:
        print(f"mlperf_storage: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mlperf_storage: interrupted; stopping everything", file=sys.stderr)
        return 130
    results["seconds"] = round((datetime.datetime.now(datetime.timezone.utc)
                                - started).total_seconds())
    write_results(args.out, results, summary.markdown(results))
    bad = problems(results)
    for p in bad:
        print(f"mlperf_storage: FAILED: {p}", file=sys.stderr)
    print(f"mlperf_storage: {results['seconds']} s; wrote {args.out}/results.md, results.json")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
