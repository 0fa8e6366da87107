"""The 3-node Granary cluster access paths of the MLPerf Storage driver.

  granary-cluster       three `granary mount --cluster-peers` daemons, one per
                        network namespace, over one workload's tree; warmed once
                        by `granary load` on node 1 (each object, or each block
                        of a large one, cached by its owner: a third per node;
                        again on node 2 when owners lack blocks after it);
                        the accelerators read node 0's mount, so about two
                        thirds of the bytes come from the other two nodes over
                        the peer protocol; page cache dropped before every run
  granary-cluster-cold  three fresh daemons over empty caches for every run,
                        read the same way

One client node, as MLPerf Storage measures one client: the accelerator
processes run in this machine's own namespace and read node 0's FUSE mount
(entered with `nsenter --net`, the mount is visible everywhere). The origin
is the driver's S3 server (127.0.0.1); the nodes reach it through an
s3_delay_proxy (no delay) listening on the bridge, on the origin's CPUs.
Node links are unshaped veth pairs unless --cluster-link-rate caps them (tbf,
both directions), as bench/cluster does (bench/benchlib/netns.py).

Near copies: a node keeps a block another node owns only in free space. So that
node 0 serves its own third and reads the rest from its peers in every run
(not just the first), the warm path restarts node 0 after the load with a
cache quota just above what it owns (its cache survives the restart).

Every process is started through the driver's Procs and stopped by its pid;
every mount is unmounted; the namespaces, veth pairs and bridge are deleted by
close(), which the driver calls also on errors and Ctrl-C. Single-threaded.
"""
import json
import os
import shutil
import subprocess
import time

from bench.benchlib.cpu import with_children
from bench.benchlib.mountinfo import is_mounted
from bench.benchlib.netns import (FALLBACKS_METRIC, MEMBERS_METRIC, REMOTE_BYTES_METRIC, Hosts,
                                  cluster_flags, metric_sum, metrics_text, write_secret)
from bench.benchlib.origin import start_delay_proxy
from bench.benchlib.procs import StepError, drop_page_cache, http_get, settle
from bench.mlperf_storage.paths import BUCKET, Source

NODES = 3
CLIENT = 0  # the node whose mount the accelerators read
LOADERS = (1, 2)  # where `granary load` runs, the second only when the first left gaps
#                   (a loader keeps near copies; node 0 must not)
HIGH_WATERMARK = 0.95  # the store's default high watermark (docs/cluster.md, "Near copies")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class GranaryCluster:
    """NODES `granary mount`s of one workload's tree in network namespaces,
    one static cluster, and the proxy they reach the origin through."""

    def __init__(self, bench, workload, link_rate):
        self.b, self.workload, self.link_rate = bench, workload, link_rate
        self.dir = os.path.join(bench.work, f"cluster-{workload[:4]}")
        self.hosts = self.proxy = self.endpoint = None
        self.nodes = {}  # index -> (Popen, mount point, run dir)
        self.seq = 0

    # -- network and origin ------------------------------------------------
    def start_network(self):
        if self.hosts:
            return
        os.makedirs(self.dir, exist_ok=True)
        self.hosts = Hosts(NODES, self.link_rate, origin_namespace=False, log=log)
        self.cport = [self.hosts.port(7000) for _ in range(NODES)]
        self.mport = [self.hosts.port(9100) for _ in range(NODES)]
        self.secret = write_secret(os.path.join(self.dir, "cluster.secret"),
                                   f"mlperf-{os.getpid()}-{time.time()}")
        self.proxy, port = start_delay_proxy(
            self.b.procs, f"cluster-proxy-{self.workload[:4]}", self.b.bin("s3_delay_proxy"),
            self.b.origin.removeprefix("http://"), "0ms", os.path.join(self.dir, "proxy.port"),
            listen=self.hosts.ip(Hosts.ORIGIN), cpus=self.b.origin_cpus)
        self.endpoint = f"http://{self.hosts.ip(Hosts.ORIGIN)}:{port}"

    def origin_requests(self):
        """Requests the nodes sent the origin so far (the proxy's counter)."""
        try:
            return int(json.loads(http_get(self.endpoint + "/__proxy_stats"))["requests"])
        except (OSError, ValueError, KeyError) as e:
            raise StepError(f"cannot read the cluster proxy's request counter: {e}") from None

    # -- nodes ---------------------------------------------------------------
    def cache_dir(self, i):
        return os.path.join(self.dir, f"cache{i}")

    def start_node(self, i, quota):
        """Node i's mount over its cache directory (kept, when it exists)."""
        self.seq += 1
        mnt = os.path.join(self.dir, f"mnt{i}")
        run = os.path.join(self.dir, f"run{i}")
        for d in (mnt, run, self.cache_dir(i)):
            os.makedirs(d, exist_ok=True)
        argv = [self.b.granary, "--endpoint", self.endpoint, "mount",
                f"s3://{BUCKET}/{self.workload}", mnt,
                "--cache-dir", f"{self.cache_dir(i)}:{quota}", "--run-dir", run, "--foreground",
                "--metrics-addr", f"{self.hosts.ip(i)}:{self.mport[i]}",
                *cluster_flags(self.hosts, self.cport, i, f"mlps{os.getpid()}", self.secret)]
        p = self.b.procs.start(f"cluster-{self.workload[:4]}-node{i}-{self.seq}",
                               self.hosts.wrap(i, argv), env=self.b.env)
        self.nodes[i] = (p, mnt, run)
        self.b.procs.add_mount(mnt)
        self.b.procs.wait_until(p, lambda: is_mounted(mnt), f"cluster node {i} mount")

    def start_all(self, quota):
        for i in range(NODES):
            self.start_node(i, quota)
        self.wait_members()

    def stop_node(self, i):
        p, mnt, _ = self.nodes.pop(i)
        self.b.procs.unmount(mnt)
        self.b.procs.stop(p)

    def stop_all(self, delete_caches=True):
        for i in list(self.nodes):
            self.stop_node(i)
        if delete_caches:
            for i in range(NODES):
                shutil.rmtree(self.cache_dir(i), ignore_errors=True)

    def close(self):
        """Stops every node and the proxy, deletes the namespaces and the caches."""
        try:
            self.stop_all()
            if self.proxy:
                self.b.procs.stop(self.proxy)
                self.proxy = None
        finally:
            if self.hosts:
                self.hosts.close()
                self.hosts = None
            shutil.rmtree(self.dir, ignore_errors=True)

    def pid(self, i):
        return self.nodes[i][0].pid

    def mnt(self, i):
        return self.nodes[i][1]

    def metric(self, i, name):
        return metric_sum(metrics_text(f"http://{self.hosts.ip(i)}:{self.mport[i]}/metrics"), name)

    def wait_members(self, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            seen = [self.metric(i, MEMBERS_METRIC) for i in self.nodes]
            if all(s is not None and s >= NODES for s in seen):
                return
            if time.monotonic() > deadline:
                raise StepError(f"{MEMBERS_METRIC} did not reach {NODES} on every node: {seen}")
            time.sleep(0.2)

    def _granary(self, i, *argv):
        _, mnt, run = self.nodes[i]
        out = subprocess.run([self.b.granary, argv[0], mnt, "--run-dir", run, *argv[1:]],
                             capture_output=True, text=True, env=self.b.env)
        if out.returncode != 0:
            raise StepError(f"granary {argv[0]} on cluster node {i} exited {out.returncode}: "
                            f"{(out.stderr or out.stdout).strip()[-300:]}")
        return out.stdout

    def status(self, i):
        try:
            return json.loads(self._granary(i, "status", "--json"))
        except ValueError as e:
            raise StepError(f"granary status --json did not print JSON: {e}") from None

    def load(self, i):
        """`granary load` on node i (it warms the whole cluster); returns seconds."""
        settle()
        t0 = time.monotonic()
        self._granary(i, "load", "--quiet")
        return time.monotonic() - t0


def _used_bytes(status):
    return sum(int(t.get("used_bytes", 0)) for t in status.get("tiers", []))


class GranaryClusterPath:
    """granary-cluster (warm) or granary-cluster-cold over one GranaryCluster."""

    def __init__(self, cluster, data_bytes, cold):
        self.c, self.data_bytes, self.cold = cluster, data_bytes, cold
        self.name = "granary-cluster-cold" if cold else "granary-cluster"
        self.warmed = False
        self.load_s = self.client_share = None
        self.owners_short = 0  # bytes the owners still lacked after the loads
        self.loads = 0  # `granary load`s it took

    @property
    def note(self):
        c = self.c
        link = (c.link_rate or "unshaped veth") if not (c.hosts and c.hosts.fallback) else \
            f"NO namespaces ({c.hosts.fallback}): loopback"
        head = f"{NODES} nodes, links {link}; accelerators on node 0's mount"
        if self.cold:
            return head + "; 3 fresh nodes, empty caches, every run"
        if self.load_s is None:
            return head + "; `granary load` (not run)"
        short = (f", the owners short of {self.owners_short / 2**30:.2f} GiB"
                 if self.owners_short else "")
        loads = "" if self.loads < 2 else \
            f" ({self.loads} loads: the first left blocks off their owners)"
        return (f"{head}; after `granary load`{loads} "
                f"{self.data_bytes / 2**30 / self.load_s:.2f} GiB/s ({self.load_s:.1f} s), "
                f"node 0 holding {100 * self.client_share:.0f} % of the bytes{short}; "
                "page cache dropped before every run")

    def _warm(self):
        c = self.c
        c.start_network()
        c.start_all(c.b.cache_quota)
        self.load_s = 0.0
        for loader in LOADERS:
            self.load_s += c.load(loader)
            owned = [int(c.status(i).get("owned_block_bytes", 0)) for i in range(NODES)]
            if sum(owned) >= 0.999 * self.data_bytes:
                break
            # A peer request that timed out during the load (a busy machine) left
            # the block with the loader, not its owner; the next load fills the gaps.
            log(f"  {self.name}: after `granary load` on node {loader} the owners hold "
                f"{sum(owned)} of {self.data_bytes} bytes")
        self.owners_short = 0 if sum(owned) >= 0.999 * self.data_bytes else \
            self.data_bytes - sum(owned)
        self.loads = LOADERS.index(loader) + 1
        used = _used_bytes(c.status(CLIENT))
        self.client_share = owned[CLIENT] / self.data_bytes
        # Node 0 again, over the same cache, with no room for near copies.
        c.stop_node(CLIENT)
        c.start_node(CLIENT, int(used * 1.01 / HIGH_WATERMARK) + (4 << 20))
        c.wait_members()
        after = c.status(CLIENT)
        self.warmed = True
        log(f"  {self.name}: `granary load` {self.load_s:.1f} s; blocks owned per node "
            f"{', '.join(f'{x / 2**30:.2f}' for x in owned)} GiB; node 0 restarted with no room "
            f"for near copies: {_used_bytes(after) / 2**30:.2f} GiB in its cache, "
            f"{int(after.get('owned_block_bytes', 0)) / 2**30:.2f} GiB of them its own blocks")

    def run_source(self):
        c = self.c
        if self.cold:
            c.start_network()
            c.start_all(c.b.cache_quota)
        elif not self.warmed:
            self._warm()
        drop_page_cache()
        remote0, origin0 = c.metric(CLIENT, REMOTE_BYTES_METRIC) or 0, c.origin_requests()
        fallbacks0 = c.metric(CLIENT, FALLBACKS_METRIC) or 0

        def figures(r):
            peer = (c.metric(CLIENT, REMOTE_BYTES_METRIC) or 0) - remote0
            return {"peer_bytes": peer, "peer_share": peer / r["bytes"] if r["bytes"] else None,
                    "peer_fallbacks": (c.metric(CLIENT, FALLBACKS_METRIC) or 0) - fallbacks0}

        def no_origin_reads():
            n = c.origin_requests() - origin0
            return None if n == 0 else f"{n} origin requests in a warm cluster run"

        return Source(("posix", c.mnt(CLIENT)),
                      [p for i in range(NODES) for p in with_children(c.pid(i))],
                      None if self.cold else no_origin_reads,
                      client_pids=with_children(c.pid(CLIENT)),
                      origin_pids=[c.proxy.pid], figures=figures)

    def end_run(self):
        if self.cold:
            self.c.stop_all()

    def close(self):
        self.c.close()
