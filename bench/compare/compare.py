#!/usr/bin/env python3
"""Granary side by side with the tools users run today, in one run and one table.

Starts a local S3-compatible server (s3rver, or moto_server with --origin
moto), uploads an ImageNet-like data set (bench/gen_imagenet, the same tree
also written to local disk), and for each origin delay puts
bench/s3_delay_proxy in front of it ("remote" storage) and measures, with bench/reader's training pattern (whole files,
shuffled, N threads):

  origin ceiling (ufs_get) | local disk cold/warm | s3fs | s3fs use_cache |
  rclone mount --vfs-cache-mode full | Granary read-through | Granary mount
  --load | Granary after `granary load` | Granary fresh remount

The origin and its proxy run on CPUs of their own (--origin-cpus, default:
the first quarter, at least one), every client on the others, as a remote
origin would not share the client's CPUs.

Writes results.md (tables + targets), results.json and chart.png to --out and
prints the tables; logs of every process go to --out/logs. Every process it
starts, it stops; every mount it makes, it unmounts, also on Ctrl-C.

  bench/compare/compare.py --build-dir build --files 10000 --delays 0ms,10ms
  bench/compare/compare.py --files 200 --delays 0ms --check   # CI smoke
"""
if __name__ == "__main__" and not __package__:
    # Run by path: run again as the module bench.compare.compare with the
    # repository root on PYTHONPATH, where it finds bench.benchlib.
    import os
    import sys
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))
    os.execv(sys.executable, [sys.executable, "-m", "bench.compare.compare", *sys.argv[1:]])

import argparse
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile

from bench.benchlib.bench import Bench
from bench.benchlib.origin import DEFAULT_ORIGIN, ORIGIN_HELP, ORIGINS, split_cpus
from bench.benchlib.procs import settle
from bench.benchlib.results import check_status, command_line, machine, tool_versions
from bench.compare import peers, report

ALL_PEERS = ["ceiling", "local", "s3fs", "s3fs-cache", "rclone", "granary"]


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
    ap.add_argument("--origin", choices=ORIGINS, default=DEFAULT_ORIGIN, help=ORIGIN_HELP)
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
               "command": command_line(), "delays": {}}
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
