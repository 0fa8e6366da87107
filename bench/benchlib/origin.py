"""The S3-compatible origin every benchmark reads from, and what goes with it.

One default for every driver (DEFAULT_ORIGIN): s3rver, a Node.js server that
keeps objects as files (scripts/install-s3rver.sh installs it; ~1,000-1,500
GETs/s on a 2-core machine); moto_server (--origin moto) keeps them in memory
and serves ~400 GETs/s. In front of it bench/s3_delay_proxy adds a fixed
delay per request and counts requests and bytes (/__proxy_stats), so that a
local server stands in for remote storage.

Stateless functions; the processes themselves are started through Procs.
"""
import os
import shutil

ORIGINS = ("s3rver", "moto")
DEFAULT_ORIGIN = "s3rver"
ORIGIN_HELP = ("S3-compatible server behind the delay proxy: s3rver (the default; "
               "scripts/install-s3rver.sh installs it) or moto (moto_server, ~400 GETs/s)")
# The name a server's process is started under (its log is <name>.log).
PROCESS_NAMES = {"s3rver": "s3rver", "moto": "moto_server"}

S3RVER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "compare", "s3rver")


def s3_env():
    """This process's environment with the origin's credentials and none of the
    user's AWS settings (s3rver accepts only its own key id; moto accepts any)."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
               AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_CONFIG_FILE="/dev/null")
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_CA_BUNDLE"):
        env.pop(k, None)
    return env


def s3rver_launcher():
    """s3rver's bin/s3rver.js; SystemExit saying how to install it when missing."""
    path = os.path.join(S3RVER_DIR, "node_modules", "s3rver", "bin", "s3rver.js")
    if not os.path.exists(path) or shutil.which("node") is None:
        raise SystemExit("--origin s3rver needs Node.js and s3rver: run scripts/install-s3rver.sh "
                         "(or pass --origin moto)")
    return path


def server_argv(kind, host, port, data_dir):
    """The command line of origin `kind` listening on host:port; s3rver keeps
    its objects under data_dir (created here)."""
    if kind == "moto":
        return ["moto_server", "-H", host, "-p", str(port)]
    # DES continuation tokens of s3rver's ListObjectsV2 need OpenSSL's legacy provider.
    os.makedirs(data_dir, exist_ok=True)
    return ["node", "--openssl-legacy-provider", s3rver_launcher(), "-d", data_dir,
            "-a", host, "-p", str(port), "--silent"]


def proxy_argv(proxy_bin, upstream, delay, listen=None, port=0):
    """bench/s3_delay_proxy in front of upstream (host:port), `delay` (e.g.
    10ms) per request; with port 0 it prints the port it chose on stdout."""
    argv = [proxy_bin, "--upstream", upstream, "--port", str(port), "--delay", delay]
    return argv + (["--listen", listen] if listen else [])


def split_cpus(spec):
    """--origin-cpus: (origin CPUs, everything else's CPUs), or (None, None) for no pinning.

    A remote origin does not share the client's CPUs. On one machine it does,
    and on a 2-core machine that decides the cold rows: ufs_get alone leaves
    the origin (s3rver is one Node.js process, plus the delay proxy) nearly
    both cores, while any cache's epoch takes CPU for its readers, FUSE and
    cache writes from the same cores, so the origin serves fewer GETs/s than
    in its own ceiling run. Pinning gives the origin the same CPUs in every
    row, and every client (ufs_get, readers, Granary, s3fs, rclone, local
    disk) the rest. spec: auto (the first quarter, at least one, with 2 or
    more CPUs), none, or a list like 0 or 0-1,4.
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
            raise SystemExit(f"--origin-cpus {spec!r}: expected auto, none or a list "
                             "like 0 or 0-1,4") from None
    rest = set(allowed) - origin
    if not origin <= set(allowed) or not rest:
        raise SystemExit(f"--origin-cpus {spec}: must be a proper subset of the CPUs "
                         f"this process may use ({','.join(map(str, allowed))})")
    return origin, rest


def start_delay_proxy(procs, name, proxy_bin, upstream, delay, port_file, listen=None,
                      cpus=None):
    """Starts bench/s3_delay_proxy through procs (Procs) on a port it picks,
    which it writes to port_file; returns (Popen, port). StepError when it
    exits or does not answer within 30 s."""
    with open(port_file, "w") as f:
        p = procs.start(name, proxy_argv(proxy_bin, upstream, delay, listen=listen),
                        stdout=f, cpus=cpus)
    procs.wait_until(p, lambda: os.path.getsize(port_file) > 0, name, timeout=30)
    with open(port_file) as f:
        return p, int(f.readline())
