"""Several Granary hosts on one machine: network namespaces on a Linux bridge,
and what a benchmark needs to run a Granary cluster across them.

Hosts builds a bridge and one network namespace per host (the origin, unless
the origin stays in the machine's own namespace, then N nodes), each joined
to the bridge by a veth pair whose node links tbf may cap in both directions;
the same layout as tests/integration/peers/netns.h. The bridge holds
10.X.Y.254, so this process (in the machine's namespace) reaches every host's
metrics and peers, and hosts reach a server of the machine's namespace there.
Commands enter a host with `nsenter --net` only (never `ip netns exec`, whose
private mount namespace would hide a FUSE mount made inside).

Without root, `ip`, `nsenter` or `tc`, or when the kernel refuses, every host
is a loopback address (127.0.0.1 origin, 127.0.0.2.. nodes), links are not
shaped, and Hosts.fallback says why. close() deletes every namespace, veth and
bridge it made, by name; construction interrupted (Ctrl-C) deletes what it
made so far. Callers stop the processes inside first. Single-threaded.

Used by bench/cluster/cluster_bench.py and bench/mlperf_storage (its
granary-cluster paths).
"""
import os
import shutil
import subprocess

from .procs import StepError, free_port, http_get

MEMBERS_METRIC = "granary_cluster_members"
REMOTE_BYTES_METRIC = "granary_cluster_remote_bytes_total"
FALLBACKS_METRIC = "granary_cluster_fallbacks_total"


def run(argv, check=True):
    out = subprocess.run(argv, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise StepError(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()[-300:]}")
    return out


class Hosts:
    ORIGIN = -1

    def __init__(self, nodes, rate, origin_namespace=True, log=print):
        """nodes hosts (and the origin's, when origin_namespace) with node links
        capped at tbf `rate` ('' or None: unshaped). Without origin_namespace,
        ip(ORIGIN) is the bridge's address and wrap(ORIGIN) runs in the
        machine's own namespace."""
        self.nodes = nodes
        self.rate = rate
        self.origin_namespace = origin_namespace
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
            self._build(log)
        except StepError as e:
            self.close()
            self.fallback = str(e)
            self.subnet = None
            log(f"NO network namespaces ({e}): every host on loopback 127.0.0.x, links not shaped")
        except BaseException:
            self.close()
            raise

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

    def _build(self, log):
        self.subnet = self._free_subnet()
        br = self.tag + "br"
        run(["ip", "link", "add", br, "type", "bridge"])
        self.links.append(br)
        run(["ip", "addr", "add", self.subnet + "254/24", "dev", br])
        run(["ip", "link", "set", br, "up"])
        first = self.ORIGIN if self.origin_namespace else 0
        for h in range(first, self.nodes):
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
        where = f"namespace {self.tag}o" if self.origin_namespace else "this namespace"
        log(f"network namespaces: origin in {where} ({self.ip(self.ORIGIN)}) + {self.nodes} "
            f"hosts from {self.ip(0)}, node links {self.rate or 'unshaped'} (tbf)")

    def ns(self, h):
        return f"{self.tag}{'o' if h == self.ORIGIN else 'n' + str(h)}"

    def ip(self, h):
        if h == self.ORIGIN and self.subnet and not self.origin_namespace:
            return self.subnet + "254"
        last = 1 if h == self.ORIGIN else h + 2
        return f"{self.subnet or '127.0.0.'}{last}"

    def port(self, preferred):
        return free_port() if self.fallback else preferred

    def wrap(self, h, argv):
        """argv run in host h's network namespace."""
        if self.fallback or (h == self.ORIGIN and not self.origin_namespace):
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
# Granary cluster members.

def cluster_flags(hosts, ports, i, name, secret_file, members=None):
    """`granary mount` flags of member i of a static cluster: it listens at
    hosts.ip(i):ports[i]; the peers are members 0..members-1 (default: all of
    `ports`)."""
    n = len(ports) if members is None else members
    peers = ",".join(f"{hosts.ip(j)}:{ports[j]}" for j in range(n))
    return ["--cluster-listen", f"{hosts.ip(i)}:{ports[i]}", "--cluster-peers", peers,
            "--cluster-name", name, "--cluster-secret-file", secret_file]


def write_secret(path, text):
    """The cluster's shared secret, readable by its owner only."""
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text + "\n")
    return path


def has_cluster_flags(granary):
    out = subprocess.run([granary, "mount", "--help"], capture_output=True, text=True)
    return "--cluster-listen" in out.stdout + out.stderr


def metrics_text(url):
    """A Prometheus /metrics page, or None when it does not answer."""
    try:
        return http_get(url).decode()
    except OSError:
        return None


def metric_sum(text, name):
    """The sum of every sample of metric `name` (any labels) in a /metrics page;
    None when the page is None or has no such sample."""
    if text is None:
        return None
    vals = [float(ln.split()[-1]) for ln in text.splitlines()
            if ln.startswith(name) and not ln.startswith("#") and
            (ln[len(name):len(name) + 1] in (" ", "{"))]
    return sum(vals) if vals else None
