#!/usr/bin/env python3
"""Writing a checkpoint to S3: Granary's --writable mount vs awscli, s3fs and rclone.

How long a checkpoint takes to reach S3. One checkpoint-like file (random bytes, --size,
generated once on local disk) goes to the same S3-compatible origin (s3rver
behind bench/s3_delay_proxy, bench.benchlib.bench) by four paths, at each
--delays value:

  Granary mount --writable   open, 1 MiB writes (torch.save's buffered
                             writer), close(); close returns once the object
                             is durable at the origin
  aws s3 cp FILE s3://...    the file from local disk (awscli's defaults:
                             8 MiB parts, 10 requests at once)
  s3fs                       1 MiB writes, close() (s3fs uploads in flush)
  rclone mount               --vfs-cache-mode writes; 1 MiB writes, close();
                             rclone uploads after close (after its
                             --vfs-write-back delay, 5 s by default), so the
                             clock stops when the object is complete at the
                             origin

MB/s = size / seconds from the first open (awscli: the process start) until
the object is durable at the origin. Origin requests are counted at the delay
proxy (by method) over the same span, a mount's own start-up requests not
included; "origin CPU" is the share of one CPU the origin server used over
that span (1.0: saturated). Every uploaded object is checked at the origin
(directly, not through the proxy, so the check is neither timed nor
counted): its size and SHA-256 must equal the file's, else the row is
reported as failed, not timed.

The origin and its proxy run on CPUs of their own (--origin-cpus, as in
bench/compare), every client on the others. Writes results.md and
results.json to --out, logs to --out/logs; every process it starts it stops,
every mount it makes it unmounts.

  bench/write/write_bench.py --build-dir build                  # 2 GiB, 0 and 10 ms
  bench/write/write_bench.py --size 256MiB --delays 0ms         # quick
"""
if __name__ == "__main__" and not __package__:
    # Run by path: run again as the module bench.write.write_bench with the
    # repository root on PYTHONPATH, where it finds bench.benchlib.
    import os
    import sys
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))
    os.execv(sys.executable, [sys.executable, "-m", "bench.write.write_bench", *sys.argv[1:]])

import argparse
import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types

from bench.benchlib.bench import Bench
from bench.benchlib.cpu import cpu_seconds
from bench.benchlib.mountinfo import is_mounted
from bench.benchlib.mounts import GranaryMount, fresh_dir, private_file
from bench.benchlib.origin import DEFAULT_ORIGIN, ORIGINS, PROCESS_NAMES, split_cpus
from bench.benchlib.procs import StepError, settle
from bench.benchlib.results import command_line, machine, tool_versions

ALL_TOOLS = ["granary", "awscli", "s3fs", "rclone"]
LABELS = {"granary": "Granary mount --writable",
          "awscli": "aws s3 cp (local file)",
          "s3fs": "s3fs mount",
          "rclone": "rclone mount --vfs-cache-mode writes"}
WRITE_CHUNK = 1 << 20  # torch.save's buffered writer hands the file 1 MiB at a time
BUCKET = "granary-write"
PREFIX = "ckpt"


def parse_size(text):
    units = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "KIB": 2**10, "M": 1e6, "MB": 1e6,
             "MIB": 2**20, "G": 1e9, "GB": 1e9, "GIB": 2**30}
    t = text.strip().upper()
    num = t.rstrip("KMGIB")
    try:
        return int(float(num) * units[t[len(num):]])
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 2GiB, 256MiB)") from None


class WriteBench(Bench):
    """The Bench (origin, delay proxy, processes, logs) plus a direct S3
    client on the origin for checks that must not be timed or counted."""

    def __init__(self, args, work, log_dir):
        super().__init__(types.SimpleNamespace(build_dir=args.build_dir, files=0, threads=1,
                                               ceiling_seconds=0, cache_quota=args.cache_quota,
                                               origin=args.origin), work, log_dir)
        self.bucket, self.prefix = BUCKET, PREFIX
        self.opts = args
        self.s3 = None

    def connect_origin(self):
        import botocore.config
        import botocore.session
        session = botocore.session.get_session()
        self.s3 = session.create_client(
            "s3", endpoint_url=self.origin, region_name="us-east-1",
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            config=botocore.config.Config(s3={"addressing_style": "path"},
                                          retries={"max_attempts": 1}))
        try:
            self.s3.create_bucket(Bucket=self.bucket)
        except self.s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        # The prefix exists before any mount (s3fs mounts bucket:/prefix only if it does).
        self.s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}/README", Body=b"checkpoints\n")

    def origin_size(self, key):
        """Size of key at the origin, None while it does not exist."""
        try:
            return int(self.s3.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except self.s3.exceptions.ClientError:
            return None

    def origin_sha256(self, key):
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"]
        h = hashlib.sha256()
        for chunk in iter(lambda: body.read(8 << 20), b""):
            h.update(chunk)
        return h.hexdigest()

    def origin_cpu_seconds(self):
        """CPU seconds the origin server (s3rver or moto_server) has used so far."""
        return cpu_seconds(self.procs.pid_of(*PROCESS_NAMES.values()))


def make_source(path, size):
    """Writes size random bytes to path; returns their SHA-256."""
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = os.urandom(min(left, 8 << 20))
            h.update(block)
            f.write(block)
            left -= len(block)
    return h.hexdigest()


def write_through(src, dst):
    """Copies src to dst with 1 MiB write()s, then close(); returns the seconds
    from open to close() returning."""
    buf = bytearray(WRITE_CHUNK)
    view = memoryview(buf)
    with open(src, "rb", buffering=0) as s:
        t0 = time.monotonic()
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            while True:
                n = s.readinto(buf)
                if not n:
                    break
                off = 0
                while off < n:
                    off += os.write(fd, view[off:n])
        finally:
            os.close(fd)
        return time.monotonic() - t0


# ---------------------------------------------------------------------------
# One path per function: each takes (b, key) with key = <prefix>/<name>, puts
# the source file there and returns (seconds until durable, note). Mount
# start-up happens before the returned clock starts; the caller counts
# requests between its own `before` and the return.

def run_granary(b, key, counted):
    name = f"granary-{b.delay}"
    g = GranaryMount(b, name, fresh_dir(b, name + "-cache"),
                           ["--writable", "--staging-quota", str(2 * b.size + (1 << 30))])
    g.mount()
    try:
        with counted():
            secs = write_through(b.source, os.path.join(g.mnt, os.path.basename(key)))
            durable = b.origin_size(key)
        if durable != b.size:
            raise StepError(f"close() returned but the origin holds {durable} bytes, not {b.size}")
        w = g.status().get("writes") or {}
    finally:
        g.umount()
    note = "close() returned with the object at the origin"
    if w.get("upload_seconds"):
        up = float(w["upload_seconds"])
        note += f"; upload (in close) {up:.1f} s, staging writes {secs - up:.1f} s"
    if w.get("upload_failures"):
        note += f"; {w['upload_failures']} failed upload(s) retried"
    return secs, note


def run_awscli(b, key, counted):
    argv = ["aws", "s3", "cp", b.source, f"s3://{b.bucket}/{key}", "--endpoint-url",
            b.endpoint, "--no-progress", "--only-show-errors"]
    with counted():
        t0 = time.monotonic()
        out = subprocess.run(argv, capture_output=True, text=True, env=b.env)
        secs = time.monotonic() - t0
    b.save_log("awscli", f"== {b.delay} {' '.join(argv)}\n{out.stdout}{out.stderr}")
    if out.returncode != 0:
        raise StepError(f"aws s3 cp exited {out.returncode}: {out.stderr.strip()[-300:]}")
    return secs, "awscli defaults (8 MiB parts, 10 at once); time includes its start-up"


def run_s3fs(b, key, counted):
    passwd = private_file(b, "s3fs.passwd",
                          f"{b.env['AWS_ACCESS_KEY_ID']}:{b.env['AWS_SECRET_ACCESS_KEY']}\n")
    mnt = fresh_dir(b, f"s3fs-{b.delay}-mnt")
    argv = ["s3fs", f"{b.bucket}:/{b.prefix}", mnt, "-f", "-o", "use_path_request_style",
            "-o", "endpoint=us-east-1", "-o", f"url={b.endpoint}", "-o", f"passwd_file={passwd}"]
    return _fuse_write(b, "s3fs", argv, mnt, key, counted,
                       "s3fs defaults (10 MiB parts, 5 at once), upload in flush/close")


def run_rclone(b, key, counted):
    conf = private_file(b, "rclone.conf",
                        "[origin]\ntype = s3\nprovider = Other\nenv_auth = true\n"
                        f"endpoint = {b.endpoint}\nforce_path_style = true\n"
                        "region = us-east-1\n")
    mnt = fresh_dir(b, f"rclone-{b.delay}-mnt")
    argv = ["rclone", "mount", f"origin:{b.bucket}/{b.prefix}", mnt, "--config", conf,
            "--cache-dir", fresh_dir(b, f"rclone-{b.delay}-cache"), "--vfs-cache-mode", "writes"]
    return _fuse_write(b, "rclone", argv, mnt, key, counted,
                       "rclone defaults (--vfs-write-back 5s, 5 MiB parts, 4 at once); "
                       "clock stops when the object is at the origin", wait_origin=True)


def _fuse_write(b, name, argv, mnt, key, counted, note, wait_origin=False):
    p = b.procs.start(f"{name}-{b.delay}", argv, env=b.env)
    b.procs.add_mount(mnt)
    b.procs.wait_until(p, lambda: is_mounted(mnt) and _listable(mnt), f"{name} mount")
    try:
        with counted():
            t0 = time.monotonic()
            closed = write_through(b.source, os.path.join(mnt, os.path.basename(key)))
            if wait_origin:
                deadline = time.monotonic() + b.opts.upload_timeout
                while b.origin_size(key) != b.size:
                    if time.monotonic() > deadline:
                        raise StepError(f"the object was not complete at the origin "
                                        f"{b.opts.upload_timeout} s after close()")
                    time.sleep(0.05)
            secs = time.monotonic() - t0
        if not wait_origin and b.origin_size(key) != b.size:
            raise StepError(f"close() returned but the origin holds {b.origin_size(key)} bytes")
        if wait_origin:
            note += f"; close() after {closed:.1f} s"
    finally:
        b.procs.unmount(mnt)
        b.procs.stop(p)
    return secs, note


def _listable(mnt):
    try:
        os.listdir(mnt)
        return True
    except OSError:
        return False


RUNNERS = {"granary": run_granary, "awscli": run_awscli, "s3fs": run_s3fs, "rclone": run_rclone}


class Counter:
    """Context manager: proxy counters over its span, by method."""

    def __init__(self, b):
        self.b, self.delta = b, None

    def __call__(self):
        return self

    def __enter__(self):
        self.before = self.b.proxy_stats()
        self.cpu_before, self.t0 = self.b.origin_cpu_seconds(), time.monotonic()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            after = self.b.proxy_stats()
            cpu = self.b.origin_cpu_seconds()
            self.delta = {k: after[k] - self.before.get(k, 0) for k in after
                          if k.endswith("requests") or k.startswith("bytes")}
            if cpu is not None and self.cpu_before is not None:
                # share of one CPU the origin server used over the span (1.0 = saturated)
                self.delta["origin_cpu"] = (cpu - self.cpu_before) / (time.monotonic() - self.t0)
        return False


def run_row(b, tool, attempt):
    key = f"{b.prefix}/{tool}-{b.delay}-{attempt}.bin"
    row = {"tool": tool, "path": LABELS[tool], "delay": b.delay, "seconds": None,
           "mb_per_s": None, "requests": None, "note": "", "error": None,
           "load": os.getloadavg()[0]}
    if tool in ("s3fs", "rclone") and shutil.which(tool) is None:
        row["error"] = f"{tool} is not installed (scripts/install-deps.sh installs it)"
        return row
    counter = Counter(b)
    settle()
    b.log(f"--- {row['path']} ({b.delay}), attempt {attempt}, load {row['load']:.2f}")
    try:
        secs, row["note"] = RUNNERS[tool](b, key, counter)
        size = b.origin_size(key)
        if size != b.size:
            raise StepError(f"the origin holds {size} bytes, not {b.size}")
        digest = b.origin_sha256(key)
        if digest != b.source_sha256:
            raise StepError(f"the origin's SHA-256 {digest[:16]}... differs from the file's")
        row["seconds"], row["mb_per_s"] = secs, b.size / secs / 1e6
        row["requests"] = counter.delta
        b.log(f"  {secs:7.2f} s  {row['mb_per_s']:7.1f} MB/s  requests {counter.delta['requests']}"
              f" (PUT {counter.delta['put_requests']}, other {counter.delta['other_requests']},"
              f" HEAD {counter.delta['head_requests']}, GET {counter.delta['get_requests']})"
              f"  origin CPU {counter.delta.get('origin_cpu', 0):.2f}  size and SHA-256 match")
    except (StepError, OSError) as e:
        row["error"] = str(e) if isinstance(e, StepError) else f"{type(e).__name__}: {e}"
        b.log(f"  FAILED: {row['error']}")
    finally:
        for m in list(b.procs.mounts):
            b.procs.unmount(m)
        try:
            b.s3.delete_object(Bucket=b.bucket, Key=key)  # keeps the origin's disk small
        except b.s3.exceptions.ClientError:
            pass
    return row


def best(rows):
    """The fastest successful attempt of each (tool, delay); else the last failure."""
    out = {}
    for r in rows:
        k = (r["delay"], r["tool"])
        cur = out.get(k)
        if cur is None or (cur["error"] and not r["error"]) or (
                not r["error"] and r["seconds"] < cur["seconds"]):
            out[k] = r
    return out


def markdown(results):
    size_mib = results["config"]["size"] / 2**20
    lines = [f"Writing a {size_mib:.0f} MiB file to S3 (s3rver behind s3_delay_proxy), "
             f"best of {results['config']['repeats']}; MB/s = size / seconds until durable "
             "at the origin; requests counted at the proxy; origin CPU: "
             "share of one CPU the origin server used while the row ran (1.00 = saturated); "
             "load: 1-minute load average when the row started.", ""]
    chosen = best(results["rows"])
    for delay in results["config"]["delays"]:
        lines += [f"### {delay} per request", "",
                  "| path | s | MB/s | vs awscli | origin requests (PUT / POST / HEAD / GET) | "
                  "origin CPU | all attempts (s) | load | note |",
                  "|---|---:|---:|---:|---|---:|---|---:|---|"]
        aws = chosen.get((delay, "awscli"))
        aws_mbps = aws["mb_per_s"] if aws and not aws["error"] else None
        for tool in results["config"]["tools"]:
            r = chosen.get((delay, tool))
            if r is None:
                continue
            tries = ", ".join(f"{x['seconds']:.1f}" if not x["error"] else "failed"
                              for x in results["rows"]
                              if x["delay"] == delay and x["tool"] == tool)
            if r["error"]:
                lines.append(f"| {r['path']} | failed | | | | | {tries} | {r['load']:.1f} | "
                             f"{r['error']} |")
                continue
            q = r["requests"]
            ratio = f"{r['mb_per_s'] / aws_mbps:.2f}x" if aws_mbps else "-"
            lines.append(f"| {r['path']} | {r['seconds']:.1f} | {r['mb_per_s']:.0f} | {ratio} | "
                         f"{q['requests']} ({q['put_requests']} / {q['other_requests']} / "
                         f"{q['head_requests']} / {q['get_requests']}) | "
                         f"{q.get('origin_cpu', 0):.2f} | {tries} | "
                         f"{r['load']:.1f} | {r['note']} |")
        lines.append("")
    g = [chosen.get((d, "granary")) for d in results["config"]["delays"]]
    a = [chosen.get((d, "awscli")) for d in results["config"]["delays"]]
    lines.append("Target: Granary >= 1x awscli: " + "; ".join(
        f"{d}: " + (f"{gi['mb_per_s'] / ai['mb_per_s']:.2f}x "
                    + ("met" if gi["mb_per_s"] >= ai["mb_per_s"] else "MISSED")
                    if gi and ai and not gi["error"] and not ai["error"] else "not measured")
        for d, gi, ai in zip(results["config"]["delays"], g, a)))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build", help="CMake build directory (granary, bench/)")
    ap.add_argument("--size", type=parse_size, default=2 * 2**30, help="file size (default 2GiB)")
    ap.add_argument("--delays", default="0ms,10ms", help="per-request origin delays")
    ap.add_argument("--tools", default=",".join(ALL_TOOLS), help="subset of " + ",".join(ALL_TOOLS))
    ap.add_argument("--repeats", type=int, default=1, help="attempts per row; the fastest counts")
    ap.add_argument("--origin", choices=ORIGINS, default=DEFAULT_ORIGIN,
                    help="S3-compatible server (s3rver keeps objects on disk; moto in memory)")
    ap.add_argument("--origin-cpus", default="auto", help="as bench/compare/compare.py")
    ap.add_argument("--cache-quota", default="50G", help="quota of Granary's cache directory")
    ap.add_argument("--upload-timeout", type=int, default=900,
                    help="seconds rclone's upload may take after close()")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--out", default="write-results", help="where results.md/json go")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    bad = [t for t in tools if t not in ALL_TOOLS]
    if bad:
        ap.error(f"--tools: unknown {','.join(bad)}")
    delays = [d.strip() for d in args.delays.split(",") if d.strip()]

    work = args.work or tempfile.mkdtemp(prefix="granary-write.", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    log_dir = os.path.join(args.out, "logs")
    shutil.rmtree(log_dir, ignore_errors=True)
    os.makedirs(log_dir)
    b = WriteBench(args, work, log_dir)
    b.size = args.size
    b.origin_cpus, client_cpus = split_cpus(args.origin_cpus)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    if not os.access(b.granary, os.X_OK):
        raise SystemExit(f"write_bench: {b.granary} is missing; build granary_cli first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"), "machine": machine(),
               "tools": tool_versions(args.origin),
               "config": {"size": args.size, "delays": delays, "tools": tools,
                          "repeats": args.repeats, "origin": args.origin,
                          "origin_cpus": sorted(b.origin_cpus or []),
                          "client_cpus": sorted(client_cpus or [])},
               "command": command_line(), "rows": []}
    try:
        aws = subprocess.run(["aws", "--version"], capture_output=True, text=True)
        results["tools"]["awscli"] = (aws.stdout or aws.stderr).strip()
        b.start_origin()
        b.connect_origin()
        b.source = os.path.join(work, "checkpoint.bin")
        t0 = time.monotonic()
        b.source_sha256 = make_source(b.source, args.size)
        b.log(f"source: {args.size} random bytes in {b.source} "
              f"({time.monotonic() - t0:.0f} s), sha256 {b.source_sha256[:16]}...")
        for delay in delays:
            b.delay = delay
            proxy = b.start_proxy(delay)
            for attempt in range(1, args.repeats + 1):
                for tool in tools:
                    results["rows"].append(run_row(b, tool, attempt))
                    with open(os.path.join(args.out, "results.json"), "w") as f:
                        json.dump(results, f, indent=2)  # what is done so far, if a later row dies
            b.procs.stop(proxy)
    except KeyboardInterrupt:
        print("write_bench: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        b.procs.stop_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"write_bench: scratch directory kept in {work}")
    results["seconds"] = round((datetime.datetime.now(datetime.timezone.utc) - started)
                               .total_seconds())
    md = markdown(results)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print("\n" + md)
    print(f"write_bench: wrote {args.out}/results.md, results.json")
    return 1 if any(r["error"] for r in best(results["rows"]).values()) else 0


if __name__ == "__main__":
    sys.exit(main())
