#!/usr/bin/env python3
"""N independent Granary caches against one Granary cluster, in one run and one table.

Builds a Linux bridge and N+1 network namespaces (the origin, then N nodes),
joined by veth pairs whose node links are capped with tbf (default 1gbit, both
directions), the same layout as tests/integration/peers/netns.h. The origin
namespace runs an S3-compatible server (s3rver by default, moto_server with
--origin moto) behind bench/s3_delay_proxy (--delay-ms per request; its
/__proxy_stats counts the origin's GETs). bench/gen_imagenet uploads an
ImageNet-like set. Every node runs `granary mount --foreground` in its
namespace (entered with `nsenter --net`, so the FUSE mount stays visible);
bench/reader reads each mount (whole files, shuffled, --threads readers).

Rows:
  single node            one plain mount: cold and warm epoch
  N independent caches   N plain mounts, every node reads everything at once
  Granary cluster        N mounts with --cluster-peers: the same epochs; then
                         a client-only member (--cluster-client-only, owns
                         nothing, fresh cache, namespace N+1 with the same
                         capped link) reads everything once per --remote-threads
                         value: every byte comes from the warm owners over the
                         peer protocol (remote-hit MB/s against the link rate,
                         with the CPU of the reader node and of the owners and
                         the peer request latency)
  plain sendfile HTTP    the remote-hit epochs' baseline (right after the cluster
                         row): bench/cluster/plain_http serves the data set's local
                         copy from each owner's namespace with sendfile(2); a plain
                         keep-alive GET client in the client-only member's namespace
                         reads every file once per --remote-threads value, after
                         dropping the page cache (as the remote-hit epochs do) and
                         again with it warm; MB/s, img/s and CPU per image of the
                         client and the servers beside Granary's
  cluster, node killed   a fresh cluster's cold epoch on every node, node 0
                         killed (SIGKILL) a third of the way through: failed
                         reads and img/s of the survivors
  scale-out N -> N+1     a static cluster (--cluster-peers-file) starts its cold
                         epoch; a third of the way through, the file names member
                         N+1 (host N), which starts, and the others read the file
                         again (SIGHUP); then all N+1 read everything: block
                         GETs the daemons sent to the origin per object for the
                         whole run (1.00 wanted; the proxy's count also has a
                         starting node's listings), per-node
                         img/s of the epoch during the change, seconds from the
                         change until every handover ended, bytes the members
                         pulled from each other (handover)
  scale-in N+1 -> N      the same with N+1 members, N of them reading: a third of
                         the way through, the file drops member N+1, the others
                         read it again and it is stopped (SIGTERM: it drains);
                         then the N read everything

Prints a markdown table, writes results.json and results.md to --out. Every
process it starts, it stops by PID; every mount it makes, it unmounts; every
namespace, veth and bridge it makes, it deletes, also on Ctrl-C.

  bench/cluster/cluster_bench.py --build-dir build
  bench/cluster/cluster_bench.py --files 300 --delay-ms 0 --check   # smoke
  bench/cluster/cluster_bench.py --files 2000 --rows scaleout,scalein   # membership changes
"""
if __name__ == "__main__" and not __package__:
    # Run by path: run again as the module bench.cluster.cluster_bench with the
    # repository root on PYTHONPATH, where it finds bench.benchlib.
    import os
    import sys
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))
    os.execv(sys.executable, [sys.executable, "-m", "bench.cluster.cluster_bench", *sys.argv[1:]])

import argparse
import datetime
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib

from bench.benchlib.cpu import machine_cpu, tree_cpu_seconds, with_children
from bench.benchlib.mountinfo import is_mounted
from bench.benchlib.netns import (Hosts, cluster_flags, has_cluster_flags, metric_sum,
                                  metrics_text, write_secret)
from bench.benchlib.origin import (DEFAULT_ORIGIN, ORIGIN_HELP, ORIGINS, PROCESS_NAMES,
                                   proxy_argv, s3_env, server_argv)
from bench.benchlib.procs import Procs, StepError, answers, drop_page_cache, http_get, settle
from bench.benchlib.results import check_status, command_line, write_results

BUCKET = "granary-cluster"
PREFIX = "imagenet"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------

class Bench:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.log_dir = os.path.join(args.out, "logs")
        shutil.rmtree(self.log_dir, ignore_errors=True)
        os.makedirs(self.log_dir)
        self.procs = Procs(self.log_dir)
        self.build = os.path.abspath(args.build_dir)
        self.granary = args.granary or os.path.join(self.build, "src", "cli", "granary")
        self.env = s3_env()
        self.hosts = None
        self.nodes = {}  # index -> (Popen, mountpoint)
        self.origin_pids = []  # the S3 server and the delay proxy
        self.seq = 0

    def bin(self, name):
        tool = {"reader": "reader/granary_reader"}.get(name, f"{name}/{name}")
        path = os.path.join(self.build, "bench", tool)
        if not os.access(path, os.X_OK):
            raise SystemExit(f"cluster_bench: {path} is missing; build the bench tools first")
        return path

    # -- origin -------------------------------------------------------------
    def start_origin(self):
        h = Hosts.ORIGIN
        ip, port, pport = self.hosts.ip(h), self.hosts.port(9000), self.hosts.port(9001)
        argv = server_argv(self.args.origin, ip, port, os.path.join(self.work, "s3rver-data"))
        self.server_url = f"http://{ip}:{port}"
        name = PROCESS_NAMES[self.args.origin]
        p = self.procs.start(name, self.hosts.wrap(h, argv), env=self.env)
        self.origin_pids.append(p.pid)
        self.procs.wait_until(p, lambda: answers(self.server_url), name)
        proxy = proxy_argv(self.bin("s3_delay_proxy"), f"{ip}:{port}", f"{self.args.delay_ms}ms",
                           listen=ip, port=pport)
        p = self.procs.start("proxy", self.hosts.wrap(h, proxy))
        self.origin_pids.append(p.pid)
        self.endpoint = f"http://{ip}:{pport}"
        self.procs.wait_until(p, lambda: answers(self.endpoint + "/__proxy_stats"), "proxy")
        log(f"origin {self.args.origin} {self.server_url}, {self.args.delay_ms} ms per request "
            f"through {self.endpoint}")

    def origin_gets(self):
        try:
            return int(json.loads(http_get(self.endpoint + "/__proxy_stats"))["get_requests"])
        except (OSError, ValueError, KeyError) as e:
            raise StepError(f"cannot read the proxy's GET counter: {e}") from None

    def generate(self):
        gen, n = self.bin("gen_imagenet"), self.args.files
        common = ["--count", str(n), "--seed", "1", "--quiet"]
        self.local_root = os.path.join(self.work, "local")
        t0 = time.monotonic()
        for dest in (["--out", self.local_root],
                     ["--s3-endpoint", self.server_url, "--bucket", BUCKET, "--prefix", PREFIX]):
            out = subprocess.run([gen, *common, *dest], capture_output=True, text=True, env=self.env)
            if out.returncode != 0:
                raise SystemExit(f"cluster_bench: gen_imagenet failed: {out.stderr[-400:]}")
        self.list_file = os.path.join(self.local_root, "train_list.txt")
        with open(self.list_file) as f:
            paths = [ln.split()[0] for ln in f if ln.strip()]
        self.total_bytes = sum(os.path.getsize(os.path.join(self.local_root, p)) for p in paths)
        log(f"data set: {n} JPEGs, {self.total_bytes / 1e6:.0f} MB, {time.monotonic() - t0:.0f} s")

    # -- nodes ----------------------------------------------------------------
    def start_node(self, i, cache, cluster=False, client_only=False, peers_file=None):
        mnt = os.path.join(self.work, f"mnt{i}")
        os.makedirs(mnt, exist_ok=True)
        run_dir = os.path.join(self.work, f"run{i}")
        os.makedirs(run_dir, exist_ok=True)
        argv = [self.granary, "--endpoint", self.endpoint, "mount", f"s3://{BUCKET}/{PREFIX}", mnt,
                "--cache-dir", f"{cache}:{self.args.cache_quota}", "--run-dir", run_dir,
                "--foreground", "--metrics-addr", f"{self.hosts.ip(i)}:{self.mport[i]}"]
        if peers_file:
            argv += ["--cluster-listen", f"{self.hosts.ip(i)}:{self.cport[i]}",
                     "--cluster-peers-file", peers_file, "--cluster-secret-file", self.secret]
        elif cluster:
            argv += cluster_flags(self.hosts, self.cport, i, f"bench{os.getpid()}",
                                  self.secret, members=self.args.nodes)
        if client_only:
            argv.append("--cluster-client-only")
            if self.args.client_fuse_threads:
                argv += ["--fuse-threads", str(self.args.client_fuse_threads)]
        self.seq += 1
        p = self.procs.start(f"node{i}-{self.seq}", self.hosts.wrap(i, argv), env=self.env)
        self.procs.add_mount(mnt)
        self.procs.wait_until(p, lambda: is_mounted(mnt), f"node {i} mount")
        self.nodes[i] = (p, mnt)
        return mnt

    def stop_node(self, i, kill=False):
        p, mnt = self.nodes.pop(i)
        if kill:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        self.procs.unmount(mnt)
        self.procs.stop(p)

    def stop_nodes(self):
        for i in list(self.nodes):
            self.stop_node(i)

    def metrics_text(self, i):
        return metrics_text(f"http://{self.hosts.ip(i)}:{self.mport[i]}/metrics")

    def metric(self, i, name, text=None):
        return metric_sum(text if text is not None else self.metrics_text(i), name)

    def wait_members(self, which, want, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = [self.metric(i, "granary_cluster_members") for i in which]
            if all(s is not None and s >= want for s in seen):
                return
            time.sleep(0.2)
        raise StepError(f"granary_cluster_members did not reach {want}: {seen}")

    def cache(self, name):
        path = os.path.join(self.work, "caches", name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def drop_caches(self):
        shutil.rmtree(os.path.join(self.work, "caches"), ignore_errors=True)

    # -- epochs -----------------------------------------------------------------
    def epochs(self, mounts, label, kill_after=None, kill=None, threads=None):
        """One epoch per mount, all at once; kill() runs kill_after seconds in."""
        settle()
        daemons = {i: p.pid for i, (p, _) in self.nodes.items()}
        cpu0 = {i: tree_cpu_seconds(pid) for i, pid in daemons.items()}
        origin0 = [tree_cpu_seconds(pid) for pid in self.origin_pids]
        mach0 = machine_cpu()
        procs = []
        for i, mnt in mounts:
            self.seq += 1
            js = os.path.join(self.log_dir, f"{label}-node{i}.json")
            argv = [self.bin("reader"), "--list", self.list_file, "--root", mnt,
                    "--threads", str(threads or self.args.threads), "--epochs", "1",
                    "--seed", str(1000 + self.seq), "--json", js]
            procs.append((i, js, subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL)))
        t0 = time.monotonic()
        if kill_after is not None:
            while time.monotonic() - t0 < kill_after and all(p.poll() is None for _, _, p in procs):
                time.sleep(0.05)
            kill()
        res = {}
        for i, js, p in procs:
            try:
                p.wait(timeout=self.args.epoch_timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                raise StepError(f"{label}: node {i}'s epoch ran past {self.args.epoch_timeout} s")
            if not os.path.exists(js):
                raise StepError(f"{label}: reader on node {i} exited {p.returncode} without results")
            with open(js) as f:
                res[i] = json.load(f)["epochs"][0]
        secs = time.monotonic() - t0
        mach1 = machine_cpu()
        cpu1 = {i: tree_cpu_seconds(pid) for i, pid in daemons.items()}
        origin1 = [tree_cpu_seconds(pid) for pid in self.origin_pids]
        per_node = [r["images_per_s"] for r in res.values()]
        errors = sum(int(r["errors"]) for r in res.values())
        # CPU over the epoch, in cores: the whole machine, the Granary daemons, the origin.
        busy = (mach1[0] - mach0[0]) / max(1, mach1[1] - mach0[1])
        daemon_cores = sum(cpu1[i] - cpu0[i] for i in daemons
                           if cpu0[i] is not None and cpu1[i] is not None) / secs
        origin_cores = sum(b - a for a, b in zip(origin0, origin1)
                           if a is not None and b is not None) / secs
        log(f"  {label:26} per node {min(per_node):8.0f}-{max(per_node):8.0f} img/s"
            f"  {secs:6.1f} s  errors {errors}  machine {100 * busy:.0f}% busy, daemons "
            f"{daemon_cores:.2f} cores, origin {origin_cores:.2f} cores")
        return {"per_node_img_s": sum(per_node) / len(per_node), "min_img_s": min(per_node),
                "total_img_s": sum(per_node), "errors": errors, "seconds": secs, "nodes": res,
                "machine_busy": busy, "daemon_cores": daemon_cores, "origin_cores": origin_cores}


PEER_LATENCY = "granary_cluster_peer_request_duration_seconds"


def histogram(text, name):
    """{upper bound: cumulative count} of a Prometheus histogram, plus its _sum."""
    buckets, total = {}, 0.0
    for ln in (text or "").splitlines():
        if ln.startswith(name + "_bucket{"):
            le = ln.split('le="', 1)[1].split('"', 1)[0]
            buckets[float("inf") if le == "+Inf" else float(le)] = float(ln.split()[-1])
        elif ln.startswith(name + "_sum{"):
            total = float(ln.split()[-1])
    return buckets, total


def latency_summary(before, after):
    """Requests, mean and approximate p50/p99 (bucket upper bound) between two scrapes."""
    (b0, s0), (b1, s1) = before, after
    delta = {le: b1.get(le, 0) - b0.get(le, 0) for le in b1}
    count = delta.get(float("inf"), 0)
    if count <= 0:
        return {"requests": 0, "mean_ms": None, "p50_le_ms": None, "p99_le_ms": None}

    def q(frac):
        for le in sorted(delta):
            if delta[le] >= frac * count:
                return le * 1e3
        return None
    return {"requests": int(count), "mean_ms": (s1 - s0) / count * 1e3,
            "p50_le_ms": q(0.5), "p99_le_ms": q(0.99)}


class Sampler:
    """Every 50 ms, while it runs: the FUSE requests the kernel has outstanding on
    a mount (/sys/fs/fuse/connections/DEV/waiting: sent to the daemon or queued,
    not yet answered) and the threads of the daemon (the processes under pid
    when the sampler starts: a mount holder and its daemon); averages and maxima."""

    def __init__(self, mnt, pid):
        dev = os.stat(mnt).st_dev
        self.waiting = f"/sys/fs/fuse/connections/{os.minor(dev)}/waiting"
        self.tasks = [f"/proc/{p}/task" for p in with_children(pid)]
        self.samples = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.05):
            try:
                with open(self.waiting) as f:
                    w = int(f.read())
                self.samples.append((w, sum(len(os.listdir(t)) for t in self.tasks)))
            except (OSError, ValueError):
                pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def summary(self):
        if not self.samples:
            return {"fuse_waiting_mean": None, "fuse_waiting_max": None, "daemon_threads": None}
        w = [x for x, _ in self.samples]
        return {"fuse_waiting_mean": sum(w) / len(w), "fuse_waiting_max": max(w),
                "daemon_threads": max(t for _, t in self.samples)}


def row(name, **kw):
    r = {"row": name, "nodes": None, "origin_gets_per_object": None, "cold": None, "warm": None,
         "remote_mb_s": None, "failed_reads": None, "note": "", "error": None}
    r.update(kw)
    return r


# ---------------------------------------------------------------------------
# The rows.

def single_node(b):
    r = row("single node", nodes=1)
    mnt = b.start_node(0, b.cache("single"))
    g0 = b.origin_gets()
    r["cold"] = b.epochs([(0, mnt)], "single-cold")
    r["origin_gets_per_object"] = (b.origin_gets() - g0) / b.args.files
    r["warm"] = b.epochs([(0, mnt)], "single-warm")
    b.stop_nodes()
    return r


def independent(b):
    n = b.args.nodes
    r = row(f"{n} independent caches", nodes=n)
    mounts = [(i, b.start_node(i, b.cache(f"indep{i}"))) for i in range(n)]
    g0 = b.origin_gets()
    r["cold"] = b.epochs(mounts, "independent-cold")
    r["origin_gets_per_object"] = (b.origin_gets() - g0) / b.args.files
    r["warm"] = b.epochs(mounts, "independent-warm")
    r["failed_reads"] = r["cold"]["errors"] + r["warm"]["errors"]
    b.stop_nodes()
    return r


def cluster(b):
    n = b.args.nodes
    r = row(f"Granary cluster ({n} nodes)", nodes=n)
    mounts = [(i, b.start_node(i, b.cache(f"cl{i}"), cluster=True)) for i in range(n)]
    b.wait_members(range(n), n)
    g0 = b.origin_gets()
    r["cold"] = b.epochs(mounts, "cluster-cold")
    r["origin_gets_per_object"] = (b.origin_gets() - g0) / b.args.files
    r["warm"] = b.epochs(mounts, "cluster-warm")
    r["failed_reads"] = r["cold"]["errors"] + r["warm"]["errors"]
    r["remote"] = [remote_epoch(b, t) for t in b.remote_threads]
    if r["remote"]:
        r["failed_reads"] += sum(x["errors"] for x in r["remote"])
        best = max(r["remote"], key=lambda x: x["peer_mb_s"])
        r["remote_mb_s"] = best["peer_mb_s"]
        r["note"] = (f"remote-hit: client-only member, best of {len(r['remote'])} epochs "
                     f"({best['threads']} readers): {best['peer_bytes'] / 1e6:.0f} MB from peers "
                     f"in {best['seconds']:.1f} s")
    b.stop_nodes()
    return r


def remote_epoch(b, threads):
    """A client-only member (owns nothing, fresh cache) reads the warm cluster's data set once.

    Every byte comes from the owners over the peer protocol and the client's
    capped link. Returns the bytes from peers (granary_cluster_remote_bytes_total)
    per second of the epoch, the reader's own bytes, the peer request latency,
    and the CPU used meanwhile by the client node (daemon + reader), by each
    owner daemon and by the whole machine."""
    c, n = b.client, b.args.nodes
    drop_page_cache()
    mnt = b.start_node(c, b.cache(f"client-{threads}"), cluster=True, client_only=True)
    b.wait_members([c], n + 1)
    m0 = b.metrics_text(c)
    g0 = b.origin_gets()
    daemons = {i: b.nodes[i][0].pid for i in range(n)}
    cpu0 = {i: tree_cpu_seconds(pid) for i, pid in daemons.items()}
    client_cpu0 = tree_cpu_seconds(b.nodes[c][0].pid)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    mach0 = machine_cpu()
    with Sampler(mnt, b.nodes[c][0].pid) as sampler:
        e = b.epochs([(c, mnt)], f"remote-{threads}t", threads=threads)
    mach1 = machine_cpu()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu1 = tree_cpu_seconds(b.nodes[c][0].pid)
    cpu1 = {i: tree_cpu_seconds(pid) for i, pid in daemons.items()}
    m1 = b.metrics_text(c)
    origin = b.origin_gets() - g0
    ep = e["nodes"][c]
    secs = ep["seconds"]
    peer_bytes = (b.metric(c, "granary_cluster_remote_bytes_total", m1) or 0) - \
        (b.metric(c, "granary_cluster_remote_bytes_total", m0) or 0)
    fallbacks = (b.metric(c, "granary_cluster_fallbacks_total", m1) or 0) - \
        (b.metric(c, "granary_cluster_fallbacks_total", m0) or 0)
    reader_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    wall = e["seconds"]
    out = {"threads": threads, "seconds": secs, "files": ep["files"], "errors": ep["errors"],
           "img_s": ep["images_per_s"], "reader_bytes": ep["bytes"], "peer_bytes": peer_bytes,
           "peer_mb_s": peer_bytes / secs / 1e6, "reader_mb_s": ep["bytes"] / secs / 1e6,
           "fallbacks": fallbacks, "origin_gets": origin,
           "read_p50_ms": ep["p50_us"] / 1e3, "read_p99_ms": ep["p99_us"] / 1e3,
           "latency": latency_summary(histogram(m0, PEER_LATENCY), histogram(m1, PEER_LATENCY)),
           # CPU cores used on average over the epoch (wall clock of the reader process).
           "client_daemon_cores": (client_cpu1 - client_cpu0) / wall,
           "reader_cores": reader_cpu / wall,
           "owner_daemon_cores": {i: (cpu1[i] - cpu0[i]) / wall for i in daemons
                                  if cpu0[i] is not None and cpu1[i] is not None},
           "machine_busy": (mach1[0] - mach0[0]) / max(1, mach1[1] - mach0[1]),
           "cpus": os.cpu_count(), **sampler.summary()}
    # CPU milliseconds per image read, the unit of the plain-server comparison.
    files = max(1, ep["files"])
    out["client_daemon_ms_per_image"] = 1e3 * (client_cpu1 - client_cpu0) / files
    out["reader_ms_per_image"] = 1e3 * reader_cpu / files
    out["owner_ms_per_image"] = 1e3 * sum(out["owner_daemon_cores"].values()) * wall / files
    # Peer requests in flight on average (Little's law: request rate x mean latency).
    lat = out["latency"]
    out["peer_in_flight"] = (lat["requests"] / secs * lat["mean_ms"] / 1e3
                             if lat["mean_ms"] is not None else None)
    lat = out["latency"]
    log(f"  remote {threads:3} readers: {out['peer_mb_s']:.1f} MB/s from peers "
        f"({peer_bytes / 1e6:.0f} MB, reader {out['reader_mb_s']:.1f} MB/s), "
        f"{lat['requests']} peer requests mean {lat['mean_ms'] or 0:.2f} ms, client daemon "
        f"{out['client_daemon_cores']:.2f} + reader {out['reader_cores']:.2f} cores, owners "
        f"{sum(out['owner_daemon_cores'].values()):.2f} cores, machine "
        f"{100 * out['machine_busy']:.0f}% busy, fallbacks {fallbacks:.0f}, origin GETs {origin}, "
        f"peer requests in flight {out['peer_in_flight'] or 0:.1f}, FUSE requests outstanding "
        f"{out['fuse_waiting_mean'] or 0:.1f} (max {out['fuse_waiting_max']}), daemon threads "
        f"{out['daemon_threads']}")
    b.stop_node(c)
    return out


def plain_owner(path, nodes):
    """The owner a plain epoch asks for a file: a stable hash of its path over
    the nodes (CRC-32; Granary's own placement is HRW over block keys and
    member ids, which this does not reproduce: the same spread, not the same
    files per node)."""
    return zlib.crc32(path.encode()) % nodes


def plain(b):
    """The baseline of the remote-hit epochs: a plain sendfile HTTP server in
    each owner's namespace, serving the data set's local copy, read by a plain
    keep-alive GET client in the client-only member's namespace (same capped
    link), once per --remote-threads value. Each value runs two epochs: one
    after dropping the page cache, as every remote-hit epoch does (the owners
    read their files from disk), then one with the files still in the page
    cache (the server's best case)."""
    n, c = b.args.nodes, b.client
    r = row(f"plain sendfile HTTP ({n} servers)", nodes=n)
    tool = os.path.join(b.build, "bench", "cluster", "plain_http")
    if not os.access(tool, os.X_OK):
        raise StepError(f"{tool} is missing; build the plain_http target")
    listing = os.path.join(b.work, "plain-list.txt")
    with open(b.list_file) as f, open(listing, "w") as out:
        for ln in f:
            if ln.strip():
                path = ln.split()[0]
                size = os.path.getsize(os.path.join(b.local_root, path))
                out.write(f"{path} {size} {plain_owner(path, n)}\n")
    servers, bases = [], []
    try:
        for i in range(n):
            url = f"http://{b.hosts.ip(i)}:{b.hosts.port(8080)}"
            argv = [tool, "serve", "--root", b.local_root, "--listen", url[len("http://"):]]
            b.seq += 1
            p = b.procs.start(f"plain{i}-{b.seq}", b.hosts.wrap(i, argv))
            servers.append(p)
            b.procs.wait_until(p, lambda u=url: answers(u + "/"), f"plain server {i}")
            bases += ["--base", url]
        r["plain"] = []
        for threads in b.remote_threads:
            for cache in ("dropped", "warm"):
                r["plain"].append(plain_epoch(b, tool, servers, bases, listing, threads, cache))
    finally:
        for p in servers:
            b.procs.stop(p)
    r["failed_reads"] = sum(x["errors"] for x in r["plain"])
    best = max((x for x in r["plain"] if x["page_cache"] == "dropped"), key=lambda x: x["mb_s"])
    r["remote_mb_s"] = best["mb_s"]
    r["note"] = (f"plain_http serve on every owner, plain_http get on the client-only member's "
                 f"host; best page-cache-dropped epoch ({best['threads']} threads): "
                 f"{best['img_s']:.0f} img/s")
    return r


def plain_epoch(b, tool, servers, bases, listing, threads, cache):
    """One plain GET epoch over every file; `cache` "dropped" drops the page
    cache first, "warm" leaves it as the previous epoch left it."""
    c = b.client
    if cache == "dropped":
        drop_page_cache()
    settle()
    b.seq += 1
    argv = [tool, "get", *bases, "--list", listing, "--threads", str(threads),
            "--seed", str(1000 + b.seq)]
    cpu0 = [tree_cpu_seconds(p.pid) for p in servers]
    mach0 = machine_cpu()
    t0 = time.monotonic()
    try:
        out = subprocess.run(b.hosts.wrap(c, argv), capture_output=True, text=True,
                             timeout=b.args.epoch_timeout)
    except subprocess.TimeoutExpired:
        raise StepError(f"plain get ({threads} threads) ran past "
                        f"{b.args.epoch_timeout} s") from None
    wall = time.monotonic() - t0
    mach1 = machine_cpu()
    cpu1 = [tree_cpu_seconds(p.pid) for p in servers]
    with open(os.path.join(b.log_dir, f"plain-get-{threads}t-{cache}.log"), "w") as f:
        f.write(out.stdout + out.stderr)
    try:
        res = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise StepError(f"plain get exited {out.returncode}: {out.stderr.strip()[-300:]}") from None
    if None in cpu0 or None in cpu1:
        raise StepError("a plain server exited during the epoch")
    files = max(1, res["files"])
    server_cpu = [y - x for x, y in zip(cpu0, cpu1)]
    x = {"threads": threads, "page_cache": cache, "files": res["files"], "errors": res["errors"],
         "first_error": res["first_error"], "bytes": res["bytes"], "seconds": res["seconds"],
         "img_s": res["img_s"], "mb_s": res["mb_s"],
         "client_ms_per_image": 1e3 * res["cpu_s"] / files,
         "server_ms_per_image": 1e3 * sum(server_cpu) / files,
         "server_cpu_s": server_cpu, "client_cpu_s": res["cpu_s"],
         "machine_busy": (mach1[0] - mach0[0]) / max(1, mach1[1] - mach0[1]), "wall": wall}
    log(f"  plain {threads:3} threads, page cache {cache:7}: {x['mb_s']:.1f} MB/s, "
        f"{x['img_s']:.0f} img/s, errors {x['errors']}, CPU per image: client "
        f"{x['client_ms_per_image']:.3f} ms, servers {x['server_ms_per_image']:.3f} ms, machine "
        f"{100 * x['machine_busy']:.0f}% busy")
    if res["errors"]:
        log(f"  plain: first error: {res['first_error']}")
    return x


def killed(b, kill_after):
    n = b.args.nodes
    r = row("cluster, node 0 killed mid-epoch", nodes=n)
    mounts = [(i, b.start_node(i, b.cache(f"k{i}"), cluster=True)) for i in range(n)]
    b.wait_members(range(n), n)
    g0 = b.origin_gets()
    e = b.epochs(mounts[1:], "killed-cold", kill_after=kill_after,
                 kill=lambda: b.stop_node(0, kill=True))
    r["cold"] = e
    r["failed_reads"] = e["errors"]
    r["origin_gets_per_object"] = (b.origin_gets() - g0) / b.args.files
    r["note"] = f"node 0 killed {kill_after:.1f} s into the survivors' cold epoch"
    b.stop_nodes()
    return r


def write_peers(b, path, members):
    """The static member list of hosts `members`, renamed into place."""
    with open(path + ".tmp", "w") as f:
        f.write("".join(f"{b.hosts.ip(i)}:{b.cport[i]}\n" for i in members))
    os.rename(path + ".tmp", path)


def handover_bytes(b, which):
    return sum(b.metric(i, "granary_cluster_handover_bytes_total") or 0 for i in which)


def block_gets(b, which):
    """Block GETs the daemons sent to the origin (the proxy's count also has a
    starting node's listings: one per directory)."""
    return sum(b.metric(i, "granary_origin_requests_total") or 0 for i in which)


def wait_settled(b, which, want, timeout=300):
    """Until every node in `which` sees `want` members and has no handover in progress."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = [(b.metric(i, "granary_cluster_members"),
                 b.metric(i, "granary_cluster_handover_previous_sets")) for i in which]
        if all(m == want and h == 0 for m, h in seen):
            return
        time.sleep(0.1)
    raise StepError(f"members/handovers did not settle at {want}/0: {seen}")


def membership_change(b, grow):
    """scale-out N -> N+1 (grow) or scale-in N+1 -> N during a cold epoch, static members."""
    n = b.args.nodes
    before, after = (list(range(n)), list(range(n + 1))) if grow else \
        (list(range(n + 1)), list(range(n)))
    name = f"scale-out {n} -> {n + 1}" if grow else f"scale-in {n + 1} -> {n}"
    r = row(name, nodes=len(after))
    peers = os.path.join(b.work, "peers")
    write_peers(b, peers, before)
    mounts = {i: b.start_node(i, b.cache(f"sc{i}"), peers_file=peers) for i in before}
    wait_settled(b, before, len(before))
    g0 = block_gets(b, before)
    change = {"leaver_gets": 0}
    watcher = []

    def settle_after_change():
        try:
            if not grow:
                b.stop_node(n)  # SIGTERM: it drains while the others read on
                change["leaver_gets"] = change["last_leaver_gets"]
            wait_settled(b, after, len(after))
            change["end"] = time.monotonic()
        except StepError as e:
            change["error"] = str(e)

    def change_members():
        write_peers(b, peers, after)
        if grow:
            mounts[n] = b.start_node(n, b.cache(f"sc{n}"), peers_file=peers)
        change["t"] = time.monotonic()
        for i in before if grow else after:
            os.kill(b.nodes[i][0].pid, signal.SIGHUP)
        if not grow:  # its origin count, before it goes (it fetches nothing while draining)
            change["last_leaver_gets"] = block_gets(b, [n])
        watcher.append(threading.Thread(target=settle_after_change))
        watcher[0].start()
    # The cold epoch of the nodes that stay; the change a third of the way
    # through (at the rate of the single-node row on this VM, ~350 img/s).
    stay = [i for i in before if i in after]
    change_at = max(1.0, b.args.files / 350 / 3)
    during = b.epochs([(i, mounts[i]) for i in stay], f"{name}-cold",
                      kill_after=change_at, kill=change_members)
    for t in watcher:
        t.join()
    if "end" not in change:
        raise StepError(change.get("error", "the membership change did not happen"))
    moved = handover_bytes(b, after)
    # Then every member reads everything (a new member its first epoch).
    final = b.epochs([(i, mounts[i]) for i in after], f"{name}-after")
    r["cold"], r["warm"], r["during"] = during, final, during
    r["origin_gets_per_object"] = (block_gets(b, after) + change["leaver_gets"] - g0) / b.args.files
    r["handover_s"] = change["end"] - change["t"]
    r["handover_mb"] = moved / 1e6
    r["failed_reads"] = during["errors"] + final["errors"]
    r["note"] = (f"change {change_at:.1f} s into the cold epoch of {len(stay)} nodes; handover "
                 f"ended {r['handover_s']:.1f} s later, {r['handover_mb']:.1f} MB pulled between "
                 f"members")
    b.stop_nodes()
    return r


def guarded(b, name, fn):
    try:
        return fn()
    except StepError as e:
        log(f"{name}: FAILED: {e}")
        return row(name, error=str(e))
    finally:
        b.stop_nodes()
        b.drop_caches()


def markdown(results):
    a = results["config"]
    link = a["link_rate"] or "unshaped"
    lines = [f"Granary cluster bench: {a['files']} files ({a['total_bytes'] / 1e6:.0f} MB), "
             f"{a['nodes']} nodes, node links {link}, origin {a['origin']} + {a['delay_ms']} ms "
             f"per request, {a['threads']} readers per node"
             + (f"; NO namespaces ({a['fallback']})" if a.get("fallback") else "")
             + (f"; {a['cpus']} CPUs, load average {a['loadavg_start'][0]:.1f} at the start"
                if a.get("loadavg_start") else ""), "",
             "| row | nodes | origin GETs / object | cold img/s per node | cold img/s all nodes "
             "| cold: machine CPU busy | warm img/s per node | remote-hit MB/s | failed reads "
             "| note |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def f(x, fmt="{:.0f}"):
        return "-" if x is None else fmt.format(x)
    for r in results["rows"]:
        if r.get("error"):
            lines.append(f"| {r['row']} | | | | | | | | | FAILED: {r['error'][:200]} |")
            continue
        cold = r["cold"]["per_node_img_s"] if r["cold"] else None
        warm = r["warm"]["per_node_img_s"] if r["warm"] else None
        remote = r["remote_mb_s"]
        rem = "-" if remote is None else f"{remote:.1f}" + (
            f" ({100 * remote / a['link_mb_s']:.0f}% of link)" if a.get("link_mb_s") else "")
        total = r["cold"].get("total_img_s") if r["cold"] else None
        busy = r["cold"].get("machine_busy") if r["cold"] else None
        lines.append(f"| {r['row']} | {r['nodes']} | {f(r['origin_gets_per_object'], '{:.2f}')} | "
                     f"{f(cold)} | {f(total)} | {f(busy and 100 * busy, '{:.0f}%')} | {f(warm)} | "
                     f"{rem} | {f(r['failed_reads'])} | {r['note']} |")
    lines += ["", *targets(results)]
    changes = [r for r in results["rows"] if r.get("during")]
    if changes:
        lines += ["", "Membership changes during an epoch (static members, --cluster-peers-file "
                  "and SIGHUP):", "",
                  "| row | origin GETs / object (whole run) | cold img/s per node (the epoch "
                  "of the change) | handover ends after | MB between members | failed reads |",
                  "|---|---|---|---|---|---|"]
        for r in changes:
            d = r["during"]
            lines.append(f"| {r['row']} | {r['origin_gets_per_object']:.2f} | {d['min_img_s']:.0f}-"
                         f"{max(x['images_per_s'] for x in d['nodes'].values()):.0f} | "
                         f"{r['handover_s']:.1f} s | {r['handover_mb']:.1f} | {r['failed_reads']} |")
    for r in results["rows"]:
        if r.get("remote"):
            lines += ["", remote_table(r["remote"], a)]
    clus = next((r for r in results["rows"] if r.get("remote")), None)
    for r in results["rows"]:
        if r.get("plain"):
            lines += ["", plain_table(r["plain"], clus["remote"] if clus else [], a)]
    return "\n".join(lines) + "\n"


def targets(results):
    """The cluster's targets, each with its measured value and met / not met."""
    a, rows = results["config"], results["rows"]

    def find(prefix):
        return next((r for r in rows if r["row"].startswith(prefix) and not r.get("error")), None)
    single, indep, clus = find("single"), find(f"{a['nodes']} independent"), find("Granary cluster")
    killed = find("cluster, node 0 killed")
    out = ["| target | measured | |", "|---|---|---|"]

    def add(name, value, ok):
        out.append(f"| {name} | {value} | {'met' if ok else 'NOT met'} |")
    if clus:
        g = clus["origin_gets_per_object"]
        add("cluster: origin GETs = 1.00 x objects", f"{g:.2f}", g <= 1.005)
    if indep:
        g = indep["origin_gets_per_object"]
        add(f"{a['nodes']} independent caches: N x objects (reference)", f"{g:.2f}",
            abs(g - a["nodes"]) <= 0.05)
    if clus and clus.get("remote_mb_s") is not None and a.get("link_mb_s"):
        x = clus["remote_mb_s"] / a["link_mb_s"]
        add("remote-hit reads >= 0.8 x link rate",
            f"{clus['remote_mb_s']:.1f} MB/s of {a['link_mb_s']:.0f} MB/s = {x:.2f}x", x >= 0.8)
    plain_row = find("plain sendfile")
    if clus and clus.get("remote") and plain_row:
        g = max(clus["remote"], key=lambda x: x["reader_mb_s"])
        p = max((x for x in plain_row["plain"] if x["page_cache"] == "dropped"),
                key=lambda x: x["mb_s"])
        x = g["reader_mb_s"] / p["mb_s"]
        add("remote-hit reads >= 0.6 x a plain sendfile HTTP server (same link, best of each)",
            f"{g['reader_mb_s']:.1f} / {p['mb_s']:.1f} MB/s = {x:.2f}x", x >= 0.6)
    if single and clus and single["cold"] and clus["cold"]:
        x = clus["cold"]["per_node_img_s"] / single["cold"]["per_node_img_s"]
        add("per-node cold epoch >= 0.8 x single node",
            f"{clus['cold']['per_node_img_s']:.0f} / {single['cold']['per_node_img_s']:.0f} img/s "
            f"= {x:.2f}x", x >= 0.8)
    if killed:
        add("zero failed reads when a node dies", f"{killed['failed_reads']}",
            killed["failed_reads"] == 0)
    return out if len(out) > 2 else []


def remote_table(remote, a):
    """One row per reader count: MB/s from peers against the link, latency, CPU."""
    link = a.get("link_mb_s")
    lines = [f"Remote-hit reads: a client-only member (owns nothing, fresh cache) reads the "
             f"warm cluster's {a['files']} files; every byte from the {a['nodes']} owners over "
             f"its {a['link_rate'] or 'unshaped'} link. CPU in cores (of "
             f"{remote[0]['cpus']}), averaged over the epoch.", "",
             "| readers | MB/s from peers | vs link | img/s | peer requests | peer req mean ms "
             "(p50 / p99 bucket) | peer req in flight | FUSE req outstanding mean (max) "
             "| file read p50 / p99 ms | client daemon + reader CPU "
             "| owner daemons CPU | machine busy | fallbacks / origin GETs |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def ms(x):
        return "-" if x is None else f"{x:.2f}"
    for x in remote:
        lat = x["latency"]
        vs = f"{x['peer_mb_s'] / link:.2f}x" if link else "-"
        owners = x["owner_daemon_cores"]
        lines.append(
            f"| {x['threads']} | {x['peer_mb_s']:.1f} | {vs} | {x['img_s']:.0f} | "
            f"{lat['requests']:,} | {ms(lat['mean_ms'])} ({ms(lat['p50_le_ms'])} / "
            f"{ms(lat['p99_le_ms'])}) | {ms(x['peer_in_flight'])} | "
            f"{ms(x['fuse_waiting_mean'])} ({x['fuse_waiting_max']}) | "
            f"{x['read_p50_ms']:.1f} / {x['read_p99_ms']:.1f} | "
            f"{x['client_daemon_cores']:.2f} + {x['reader_cores']:.2f} | "
            f"{sum(owners.values()):.2f} ({' / '.join(f'{v:.2f}' for v in owners.values())}) | "
            f"{100 * x['machine_busy']:.0f}% | {x['fallbacks']:.0f} / {x['origin_gets']} |")
    return "\n".join(lines)


def plain_table(plain_epochs, remote, a):
    """The plain server's epochs beside the remote-hit epoch with as many readers."""
    lines = [f"Plain sendfile HTTP baseline: `plain_http serve` in each of the {a['nodes']} "
             f"owners' namespaces (each file asked of one server, by a CRC-32 of its path), "
             f"`plain_http get` in the client-only member's namespace over its "
             f"{a['link_rate'] or 'unshaped'} link, every file once. Page cache \"dropped\": "
             f"dropped before the epoch, as before every remote-hit epoch (so the Granary column "
             f"is its like); \"warm\": the files still in the page cache from the epoch before. "
             f"CPU in ms per image: plain client = the get process (getrusage), Granary client "
             f"= member daemon + reader; servers = the {a['nodes']} plain servers together, "
             f"Granary owners = the {a['nodes']} owner daemons together.", "",
             "| readers | page cache | plain MB/s | plain img/s | Granary MB/s | Granary img/s "
             "| Granary / plain | client CPU ms/img: plain / Granary (daemon + reader) "
             "| server CPU ms/img: plain / Granary owners | machine busy: plain / Granary "
             "| plain errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by_threads = {x["threads"]: x for x in remote}
    for p in plain_epochs:
        g = by_threads.get(p["threads"])
        if g:
            ratio = f"{g['reader_mb_s'] / p['mb_s']:.2f}x" if p["mb_s"] else "-"
            gran = f"{g['reader_mb_s']:.1f} | {g['img_s']:.0f} | {ratio}"
            client = (f"{p['client_ms_per_image']:.3f} / "
                      f"{g['client_daemon_ms_per_image'] + g['reader_ms_per_image']:.3f} "
                      f"({g['client_daemon_ms_per_image']:.3f} + {g['reader_ms_per_image']:.3f})")
            server = f"{p['server_ms_per_image']:.3f} / {g['owner_ms_per_image']:.3f}"
            busy = f"{100 * p['machine_busy']:.0f}% / {100 * g['machine_busy']:.0f}%"
        else:
            gran = "- | - | -"
            client = f"{p['client_ms_per_image']:.3f} / -"
            server = f"{p['server_ms_per_image']:.3f} / -"
            busy = f"{100 * p['machine_busy']:.0f}% / -"
        lines.append(f"| {p['threads']} | {p['page_cache']} | {p['mb_s']:.1f} | {p['img_s']:.0f} | "
                     f"{gran} | {client} | {server} | {busy} | {p['errors']} |")
    return "\n".join(lines)


def link_mb_s(rate):
    if not rate:
        return None
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1}
    for u, m in units.items():
        if rate.endswith(u):
            return float(rate[:-len(u)]) * m / 8 / 1e6
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--granary", help="the granary binary (default: <build-dir>/src/cli/granary)")
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--delay-ms", type=int, default=10, help="origin delay per request")
    ap.add_argument("--link-rate", default="1gbit", help="tbf rate of each node link ('' = unshaped)")
    ap.add_argument("--threads", type=int, default=16, help="reader threads per node")
    ap.add_argument("--remote-threads", default="16,32,64",
                    help="reader threads of the client-only member's remote-hit epochs, one "
                         "epoch (and a fresh member) per value")
    ap.add_argument("--client-fuse-threads", type=int,
                    help="--fuse-threads of the client-only member (default: the mount's); "
                         "each FUSE thread waits on one read, so this bounds its peer requests "
                         "in flight")
    ap.add_argument("--origin", choices=ORIGINS, default=DEFAULT_ORIGIN, help=ORIGIN_HELP)
    ap.add_argument("--cache-quota", default="50G")
    ap.add_argument("--rows", default="single,independent,cluster,plain,killed",
                    help="rows to run, of single, independent, cluster, plain (the plain "
                         "sendfile HTTP baseline of the remote-hit epochs; right after cluster "
                         "when both run), killed, scaleout and scalein")
    ap.add_argument("--epoch-timeout", type=int, default=1800)
    ap.add_argument("--out", default="cluster-results")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a row failed, a read failed, or the cluster's origin "
                         "GETs per object exceed the single node's")
    args = ap.parse_args()
    wanted = [x.strip() for x in args.rows.split(",") if x.strip()]
    if "cluster" in wanted and "plain" in wanted:  # the baseline right after the remote-hit epochs
        wanted.remove("plain")
        wanted.insert(wanted.index("cluster") + 1, "plain")
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="granary-cluster.", dir="/var/tmp")
    b = Bench(args, work)
    if not os.access(b.granary, os.X_OK):
        raise SystemExit(f"cluster_bench: {b.granary} is missing; build it first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"), "rows": [],
               "command": command_line()}
    flags = has_cluster_flags(b.granary)
    try:
        # Nodes 0..N-1 own the data; host N is the client-only member of the remote-hit epochs.
        b.client = args.nodes
        b.remote_threads = [int(x) for x in args.remote_threads.split(",") if x.strip()]
        b.hosts = Hosts(args.nodes + 1, args.link_rate, log=log)
        b.cport = [b.hosts.port(7000) for _ in range(args.nodes + 1)]
        b.mport = [b.hosts.port(9100) for _ in range(args.nodes + 1)]
        b.secret = os.path.join(work, "cluster.secret")
        write_secret(b.secret, f"bench-{os.getpid()}-{time.time()}")
        b.start_origin()
        b.generate()
        results["config"] = {"files": args.files, "nodes": args.nodes, "delay_ms": args.delay_ms,
                             "link_rate": args.link_rate if not b.hosts.fallback else "",
                             "link_mb_s": link_mb_s(args.link_rate) if not b.hosts.fallback else None,
                             "threads": args.threads, "origin": args.origin,
                             "total_bytes": b.total_bytes, "fallback": b.hosts.fallback,
                             "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}
        cluster_cold = None
        for name in wanted:
            log(f"--- {name}")
            if name in ("cluster", "killed", "scaleout", "scalein") and not flags:
                results["rows"].append(row(name, error="needs --cluster flags (granary mount "
                                                       "--help lacks --cluster-listen)"))
                continue
            if name == "single":
                results["rows"].append(guarded(b, name, lambda: single_node(b)))
            elif name == "independent":
                results["rows"].append(guarded(b, name, lambda: independent(b)))
            elif name == "cluster":
                r = guarded(b, name, lambda: cluster(b))
                results["rows"].append(r)
                cluster_cold = r.get("cold")
            elif name == "plain":
                results["rows"].append(guarded(b, name, lambda: plain(b)))
            elif name == "killed":
                secs = cluster_cold["seconds"] / 3 if cluster_cold else 2.0
                results["rows"].append(guarded(b, name, lambda: killed(b, secs)))
            elif name in ("scaleout", "scalein"):
                results["rows"].append(guarded(b, name,
                                               lambda: membership_change(b, name == "scaleout")))
            else:
                raise SystemExit(f"cluster_bench: unknown row {name}")
    except KeyboardInterrupt:
        print("cluster_bench: interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        b.procs.stop_all()
        if b.hosts:
            b.hosts.close()
        shutil.rmtree(work, ignore_errors=True)
    single = next((r for r in results["rows"] if r["row"] == "single node" and r["cold"]), None)
    clus = next((r for r in results["rows"] if r["row"].startswith("Granary cluster") and r["cold"]), None)
    if single and clus:
        results["cluster_cold_vs_single"] = clus["cold"]["per_node_img_s"] / single["cold"]["per_node_img_s"]
    if "config" in results:
        results["config"]["loadavg_end"] = os.getloadavg()
    results["seconds"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds())
    write_results(args.out, results, markdown(results))
    if args.check:
        problems = [f"{r['row']}: {r['error']}" for r in results["rows"]
                    if r.get("error") and "needs --cluster flags" not in r["error"]]
        problems += [f"{r['row']}: {r['failed_reads']} failed reads" for r in results["rows"]
                     if r.get("failed_reads")]
        if single and clus and clus["origin_gets_per_object"] > single["origin_gets_per_object"] + 0.01:
            problems.append(f"cluster origin GETs/object {clus['origin_gets_per_object']:.2f} > "
                            f"single node {single['origin_gets_per_object']:.2f}")
        return check_status("cluster_bench", problems)
    return 0


if __name__ == "__main__":
    sys.exit(main())
