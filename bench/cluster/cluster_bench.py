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
                         node 0 restarted on an empty cache reads everything
                         again (remote-hit MB/s: the bytes its peers served,
                         over its capped link)
  cluster, node killed   a fresh cluster's cold epoch on every node, node 0
                         killed (SIGKILL) a third of the way through: failed
                         reads and img/s of the survivors

Prints a markdown table, writes results.json and results.md to --out. Every
process it starts, it stops by PID; every mount it makes, it unmounts; every
namespace, veth and bridge it makes, it deletes, also on Ctrl-C.

  bench/cluster/cluster_bench.py --build-dir build
  bench/cluster/cluster_bench.py --files 300 --delay-ms 0 --check   # smoke
"""
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "compare"))
from procs import Procs, StepError, drop_page_cache, free_port, http_get, is_mounted, settle  # noqa: E402

BUCKET = "granary-cluster"
PREFIX = "imagenet"
S3RVER_DIR = os.path.join(HERE, "..", "compare", "s3rver")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(argv, check=True):
    out = subprocess.run(argv, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise StepError(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()[-300:]}")
    return out


# ---------------------------------------------------------------------------
# Hosts: namespaces on a bridge, or loopback addresses when that is impossible.

class Hosts:
    ORIGIN = -1

    def __init__(self, nodes, rate):
        self.nodes = nodes
        self.rate = rate
        self.tag = f"c{os.getpid()}"
        self.subnet = None
        self.namespaces = []
        self.links = []
        self.fallback = None
        try:
            if os.geteuid() != 0:
                raise StepError("not root")
            for tool in ("ip", "nsenter", "tc"):
                if shutil.which(tool) is None:
                    raise StepError(f"{tool} is missing")
            self._build()
        except StepError as e:
            self.close()
            self.fallback = str(e)
            self.subnet = None
            log(f"NO network namespaces ({e}): every host on loopback 127.0.0.x, links not shaped")

    def _free_subnet(self):
        text = run(["ip", "-4", "route", "show", "table", "all"]).stdout + \
            run(["ip", "-4", "-o", "addr", "show"]).stdout
        taken = set()
        for w in text.split():
            a = w.split("/")[0].split(".")
            if len(a) == 4 and a[0] == "10" and all(x.isdigit() for x in a):
                taken.add((int(a[1]), int(a[2])))
            elif w.startswith("10.0.0.0/8"):
                raise StepError("10.0.0.0/8 is routed here")
        seed = os.getpid()
        for i in range(1000):
            x, y = 100 + (seed * 7 + i * 13) % 150, (seed + i * 31) % 256
            if (x, y) not in taken:
                return f"10.{x}.{y}."
        raise StepError("no free 10.X.Y.0/24")

    def _build(self):
        self.subnet = self._free_subnet()
        br = self.tag + "br"
        run(["ip", "link", "add", br, "type", "bridge"])
        self.links.append(br)
        run(["ip", "addr", "add", self.subnet + "254/24", "dev", br])
        run(["ip", "link", "set", br, "up"])
        for h in range(self.ORIGIN, self.nodes):
            idx = "o" if h == self.ORIGIN else str(h)
            ns, outer, inner = self.ns(h), f"{self.tag}h{idx}", f"{self.tag}c{idx}"
            run(["ip", "netns", "add", ns])
            self.namespaces.append(ns)
            run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
            self.links.append(outer)
            run(["ip", "link", "set", inner, "netns", ns])
            run(["ip", "link", "set", outer, "master", br, "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "addr", "add", self.ip(h) + "/24", "dev", inner])
            run(["ip", "-n", ns, "link", "set", inner, "up"])
            if h != self.ORIGIN and self.rate:
                tbf = ["root", "tbf", "rate", self.rate, "burst", "256kb", "latency", "50ms"]
                run(["tc", "qdisc", "add", "dev", outer, *tbf])
                run(["tc", "-n", ns, "qdisc", "add", "dev", inner, *tbf])
        log(f"namespaces {self.tag}o (origin {self.ip(self.ORIGIN)}) + {self.nodes} nodes from "
            f"{self.ip(0)}, node links {self.rate or 'unshaped'} (tbf)")

    def ns(self, h):
        return f"{self.tag}{'o' if h == self.ORIGIN else 'n' + str(h)}"

    def ip(self, h):
        last = 1 if h == self.ORIGIN else h + 2
        return f"{self.subnet or '127.0.0.'}{last}"

    def port(self, preferred):
        return free_port() if self.fallback else preferred

    def wrap(self, h, argv):
        if self.fallback:
            return list(argv)
        return ["nsenter", f"--net=/run/netns/{self.ns(h)}", "--", *argv]

    def close(self):
        for ns in self.namespaces:
            run(["ip", "netns", "del", ns], check=False)
        for link in reversed(self.links):
            if run(["ip", "link", "show", link], check=False).returncode == 0:
                run(["ip", "link", "del", link], check=False)
        self.namespaces, self.links = [], []


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
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
                        AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                        AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_CONFIG_FILE="/dev/null")
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            self.env.pop(k, None)
        self.hosts = None
        self.nodes = {}  # index -> (Popen, mountpoint)
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
        if self.args.origin == "moto":
            argv = ["moto_server", "-H", ip, "-p", str(port)]
        else:
            launcher = os.path.join(S3RVER_DIR, "node_modules", "s3rver", "bin", "s3rver.js")
            if not os.path.exists(launcher) or shutil.which("node") is None:
                raise SystemExit("cluster_bench: --origin s3rver needs scripts/install-s3rver.sh")
            data = os.path.join(self.work, "s3rver-data")
            os.makedirs(data, exist_ok=True)
            argv = ["node", "--openssl-legacy-provider", launcher, "-d", data, "-a", ip,
                    "-p", str(port), "--silent"]
        self.server_url = f"http://{ip}:{port}"
        p = self.procs.start(self.args.origin, self.hosts.wrap(h, argv), env=self.env)
        self.procs.wait_until(p, lambda: _answers(self.server_url), self.args.origin)
        proxy = [self.bin("s3_delay_proxy"), "--upstream", f"{ip}:{port}", "--listen", ip,
                 "--port", str(pport), "--delay", f"{self.args.delay_ms}ms"]
        p = self.procs.start("proxy", self.hosts.wrap(h, proxy))
        self.endpoint = f"http://{ip}:{pport}"
        self.procs.wait_until(p, lambda: _answers(self.endpoint + "/__proxy_stats"), "proxy")
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
    def cluster_args(self, i, secret):
        peers = ",".join(f"{self.hosts.ip(j)}:{self.cport[j]}" for j in range(self.args.nodes))
        return ["--cluster-listen", f"{self.hosts.ip(i)}:{self.cport[i]}", "--cluster-peers", peers,
                "--cluster-name", f"bench{os.getpid()}", "--cluster-secret-file", secret]

    def start_node(self, i, cache, cluster=False):
        mnt = os.path.join(self.work, f"mnt{i}")
        os.makedirs(mnt, exist_ok=True)
        run_dir = os.path.join(self.work, f"run{i}")
        os.makedirs(run_dir, exist_ok=True)
        argv = [self.granary, "--endpoint", self.endpoint, "mount", f"s3://{BUCKET}/{PREFIX}", mnt,
                "--cache-dir", f"{cache}:{self.args.cache_quota}", "--run-dir", run_dir,
                "--foreground", "--metrics-addr", f"{self.hosts.ip(i)}:{self.mport[i]}"]
        if cluster:
            argv += self.cluster_args(i, self.secret)
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

    def metric(self, i, name):
        try:
            text = http_get(f"http://{self.hosts.ip(i)}:{self.mport[i]}/metrics").decode()
        except OSError:
            return None
        vals = [float(ln.split()[-1]) for ln in text.splitlines()
                if ln.startswith(name) and not ln.startswith("#") and
                (ln[len(name):len(name) + 1] in (" ", "{"))]
        return sum(vals) if vals else None

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
    def epochs(self, mounts, label, kill_after=None, kill=None):
        """One epoch per mount, all at once; kill() runs kill_after seconds in."""
        settle()
        procs = []
        for i, mnt in mounts:
            self.seq += 1
            js = os.path.join(self.log_dir, f"{label}-node{i}.json")
            argv = [self.bin("reader"), "--list", self.list_file, "--root", mnt,
                    "--threads", str(self.args.threads), "--epochs", "1",
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
        per_node = [r["images_per_s"] for r in res.values()]
        errors = sum(int(r["errors"]) for r in res.values())
        log(f"  {label:26} per node {min(per_node):8.0f}-{max(per_node):8.0f} img/s"
            f"  {secs:6.1f} s  errors {errors}")
        return {"per_node_img_s": sum(per_node) / len(per_node), "min_img_s": min(per_node),
                "errors": errors, "seconds": secs, "nodes": res}


def _answers(url):
    try:
        http_get(url, timeout=1)
        return True
    except OSError as e:
        return getattr(e, "code", None) is not None


def has_cluster_flags(granary):
    out = subprocess.run([granary, "mount", "--help"], capture_output=True, text=True)
    return "--cluster-listen" in out.stdout + out.stderr


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
    # Node 0 back on an empty cache: what the others own comes over its link.
    b.stop_node(0)
    drop_page_cache()
    mnt = b.start_node(0, b.cache("cl0-fresh"), cluster=True)
    b.wait_members(range(n), n)
    before = b.metric(0, "granary_cluster_remote_bytes_total") or 0
    e = b.epochs([(0, mnt)], "cluster-remote")
    after = b.metric(0, "granary_cluster_remote_bytes_total")
    if after is not None:
        r["remote_mb_s"] = (after - before) / e["seconds"] / 1e6
        r["note"] = (f"remote epoch on node 0 (empty cache): {(after - before) / 1e6:.0f} MB from "
                     f"peers in {e['seconds']:.1f} s, {e['per_node_img_s']:.0f} img/s")
    b.stop_nodes()
    return r


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
             + (f"; NO namespaces ({a['fallback']})" if a.get("fallback") else ""), "",
             "| row | nodes | origin GETs / object | cold img/s per node | warm img/s per node "
             "| remote-hit MB/s | failed reads | note |",
             "|---|---|---|---|---|---|---|---|"]

    def f(x, fmt="{:.0f}"):
        return "-" if x is None else fmt.format(x)
    for r in results["rows"]:
        if r.get("error"):
            lines.append(f"| {r['row']} | | | | | | | FAILED: {r['error'][:200]} |")
            continue
        cold = r["cold"]["per_node_img_s"] if r["cold"] else None
        warm = r["warm"]["per_node_img_s"] if r["warm"] else None
        remote = r["remote_mb_s"]
        rem = "-" if remote is None else f"{remote:.1f}" + (
            f" ({100 * remote / a['link_mb_s']:.0f}% of link)" if a.get("link_mb_s") else "")
        lines.append(f"| {r['row']} | {r['nodes']} | {f(r['origin_gets_per_object'], '{:.2f}')} | "
                     f"{f(cold)} | {f(warm)} | {rem} | {f(r['failed_reads'])} | {r['note']} |")
    ratio = results.get("cluster_cold_vs_single")
    if ratio is not None:
        lines += ["", f"Per-node cold, cluster vs single node: {ratio:.2f}x (target >= 0.8)"]
    return "\n".join(lines) + "\n"


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
    ap.add_argument("--origin", choices=["s3rver", "moto"], default="s3rver")
    ap.add_argument("--cache-quota", default="50G")
    ap.add_argument("--rows", default="single,independent,cluster,killed")
    ap.add_argument("--epoch-timeout", type=int, default=1800)
    ap.add_argument("--out", default="cluster-results")
    ap.add_argument("--work", help="scratch directory (default: a new one under /var/tmp)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a row failed, a read failed, or the cluster's origin "
                         "GETs per object exceed the single node's")
    args = ap.parse_args()
    wanted = [x.strip() for x in args.rows.split(",") if x.strip()]
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="granary-cluster.", dir="/var/tmp")
    b = Bench(args, work)
    if not os.access(b.granary, os.X_OK):
        raise SystemExit(f"cluster_bench: {b.granary} is missing; build it first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"), "rows": [],
               "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])}
    flags = has_cluster_flags(b.granary)
    try:
        b.hosts = Hosts(args.nodes, args.link_rate)
        b.cport = [b.hosts.port(7000) for _ in range(args.nodes)]
        b.mport = [b.hosts.port(9100) for _ in range(args.nodes)]
        b.secret = os.path.join(work, "cluster.secret")
        with open(os.open(b.secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(f"bench-{os.getpid()}-{time.time()}\n")
        b.start_origin()
        b.generate()
        results["config"] = {"files": args.files, "nodes": args.nodes, "delay_ms": args.delay_ms,
                             "link_rate": args.link_rate if not b.hosts.fallback else "",
                             "link_mb_s": link_mb_s(args.link_rate) if not b.hosts.fallback else None,
                             "threads": args.threads, "origin": args.origin,
                             "total_bytes": b.total_bytes, "fallback": b.hosts.fallback}
        cluster_cold = None
        for name in wanted:
            log(f"--- {name}")
            if name in ("cluster", "killed") and not flags:
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
            elif name == "killed":
                secs = cluster_cold["seconds"] / 3 if cluster_cold else 2.0
                results["rows"].append(guarded(b, name, lambda: killed(b, secs)))
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
    results["seconds"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds())
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    md = markdown(results)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md)
    print("\n" + md)
    if args.check:
        problems = [f"{r['row']}: {r['error']}" for r in results["rows"]
                    if r.get("error") and "needs --cluster flags" not in r["error"]]
        problems += [f"{r['row']}: {r['failed_reads']} failed reads" for r in results["rows"]
                     if r.get("failed_reads")]
        if single and clus and clus["origin_gets_per_object"] > single["origin_gets_per_object"] + 0.01:
            problems.append(f"cluster origin GETs/object {clus['origin_gets_per_object']:.2f} > "
                            f"single node {single['origin_gets_per_object']:.2f}")
        for p in problems:
            print(f"cluster_bench --check: {p}", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
