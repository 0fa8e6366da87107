"""Podman containers, a bridge network, host mounts and an S3 origin for the
container tests (fluid_containers.py), with one cleanup stack for all of them.

Everything made here is registered on a Cleanup as it is made and undone in
reverse order: containers by name, the network by name, processes by PID,
mounts by path (lazily, deepest first). Cleanup runs on success, on failure and
on SIGINT/SIGTERM (the handlers turn the signal into KeyboardInterrupt).

Standard library only. Single-threaded: the test drives everything from its
main thread.
"""

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request


def log(msg):
    print(msg, flush=True)


class Cleanup:
    """A LIFO stack of undo actions; each runs once, errors are printed."""

    def __init__(self):
        self._actions = []

    def push(self, what, fn):
        self._actions.append((what, fn))

    def run(self):
        # A second Ctrl-C must not cut the cleanup short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while self._actions:
            what, fn = self._actions.pop()
            try:
                fn()
            except Exception as e:  # keep undoing the rest
                log(f"cleanup: {what}: {e}")


def install_signal_handlers():
    def handler(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def run(argv, check=True, timeout=300, input=None):
    """Runs argv; returns CompletedProcess with text stdout/stderr."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p


class Podman:
    """Names every container and the network with one prefix, removes them."""

    def __init__(self, prefix, cleanup):
        self.prefix = prefix
        self.cleanup = cleanup

    def name(self, short):
        return f"{self.prefix}-{short}"

    def create_network(self, short):
        """A bridge network of its own: a /24 not used by the host or podman."""
        used = run(["ip", "-4", "route"]).stdout
        name = self.name(short)
        for third in range(40, 100):
            subnet = f"10.213.{third}.0/24"
            if f"10.213.{third}." in used:
                continue
            p = run(["podman", "network", "create", "--subnet", subnet, name], check=False)
            if p.returncode == 0:
                self.cleanup.push(f"network {name}",
                                  lambda: run(["podman", "network", "rm", "-f", name], check=False))
                return name, f"10.213.{third}."
        raise RuntimeError("no free 10.213.x.0/24 subnet for the test network")

    def run_detached(self, short, args, image_args):
        """podman run -d --name <prefix>-<short> ARGS IMAGE_ARGS; registers removal."""
        name = self.name(short)
        self.cleanup.push(f"container {name}", lambda: self.remove(name))
        run(["podman", "run", "-d", "--name", name] + args + image_args)
        return name

    def remove(self, name):
        run(["podman", "rm", "-f", "-t", "5", name], check=False, timeout=120)

    def exec(self, name, argv, check=False, timeout=120, user=None):
        cmd = ["podman", "exec"] + (["--user", user] if user else []) + [name] + argv
        return run(cmd, check=check, timeout=timeout)

    def pid(self, name):
        return int(run(["podman", "inspect", "-f", "{{.State.Pid}}", name]).stdout.strip())

    def running(self, name):
        p = run(["podman", "inspect", "-f", "{{.State.Running}}", name], check=False)
        return p.stdout.strip() == "true"


def mounts_under(path):
    """Mount points at or below path (from /proc/self/mountinfo), deepest first."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            target = line.split()[4].replace("\\040", " ")
            if target == path or target.startswith(path.rstrip("/") + "/"):
                found.append(target)
    return sorted(set(found), key=len, reverse=True)


def fs_type(path):
    """The fs type of the mount at exactly path, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                return fields[fields.index("-") + 1]
    return None


def unmount_all_under(path):
    for m in mounts_under(path):
        run(["umount", "-l", m], check=False)


def make_shared_dir(path, cleanup):
    """path bind-mounted onto itself and made shared, as a node's /runtime-mnt
    is for Bidirectional propagation; everything under it unmounted at the end."""
    os.makedirs(path, exist_ok=True)
    run(["mount", "--bind", path, path])
    cleanup.push(f"mounts under {path}", lambda: unmount_all_under(path))
    run(["mount", "--make-shared", path])


def write_atomic_config(config_dir, name, text):
    """As the kubelet updates a ConfigMap volume: a new timestamped directory,
    the ..data symlink swapped to it, NAME a symlink through ..data."""
    stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    os.makedirs(os.path.join(config_dir, stamp))
    with open(os.path.join(config_dir, stamp, name), "w") as f:
        f.write(text)
    os.chmod(os.path.join(config_dir, stamp), 0o755)
    os.chmod(os.path.join(config_dir, stamp, name), 0o644)
    tmp = os.path.join(config_dir, "..data_tmp")
    os.symlink(stamp, tmp)
    old = os.readlink(os.path.join(config_dir, "..data")) if os.path.islink(
        os.path.join(config_dir, "..data")) else None
    os.rename(tmp, os.path.join(config_dir, "..data"))
    link = os.path.join(config_dir, name)
    if not os.path.islink(link):
        os.symlink(os.path.join("..data", name), link)
    if old:
        subprocess.run(["rm", "-rf", os.path.join(config_dir, old)])


# Datasets: key -> bytes, shaped like the integration tests' MakeDataset
# (small "train/" images in 37 classes, a few multi-block "big/" blobs).
def make_dataset(small, large, block, seed):
    rng = random.Random(seed)
    data = {}
    for i in range(small):
        data[f"train/c{i % 37}/img{i}.jpg"] = rng.randbytes(2000 + rng.randrange(98000))
    for i in range(large):
        size = block + block // 5 + rng.randrange(block * 33 // 10)
        data[f"big/blob{i}.bin"] = rng.randbytes(size)
    return data


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def blocks_of(data, block):
    return sum(max(1, -(-len(b) // block)) for b in data.values())


def fluid_size(n):
    """Fluid's size strings as `granary fluid report-summary` prints them."""
    if n < 1024:
        return f"{n}B"
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    v, u = float(n), 0
    while v >= 1024 and u < 5:
        v /= 1024
        u += 1
    return f"{v:.2f}{units[u]}"


class Origin:
    """moto_server (S3 API) in the network namespace of a placeholder container
    on the test network, so every pod reaches it at one address of that network
    and nothing listens on the host's own interfaces. Requests are unsigned
    (moto does not check signatures); its access log counts GETs per key."""

    PORT = 9000

    def __init__(self, podman, network, ip, image, log_path, cleanup):
        self.ip = ip
        self.endpoint = f"http://{ip}:{self.PORT}"
        self.log_path = log_path
        box = podman.run_detached("origin", ["--network", network, "--ip", ip,
                                             "--entrypoint", "sleep"], [image, "infinity"])
        moto = run(["sh", "-c", "command -v moto_server"], check=False).stdout.strip()
        if not moto:
            raise RuntimeError("moto_server not found on PATH (scripts/install-deps.sh installs the tests' needs)")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            ["nsenter", f"--net=/proc/{podman.pid(box)}/ns/net", moto, "-H", ip, "-p", str(self.PORT)],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        cleanup.push(f"moto_server pid {self.proc.pid}", self.stop)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2).read()
                return
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start: " + open(log_path).read()[-500:])
                time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def _put(self, path, body):
        # An explicit type: urllib's default (form-urlencoded) makes moto
        # parse the body as a form and wait for more.
        req = urllib.request.Request(self.endpoint + path, data=body, method="PUT",
                                     headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req, timeout=60).read()

    def upload(self, bucket, prefix, data):
        self._put(f"/{bucket}", b"")
        for key, body in data.items():
            self._put(f"/{bucket}/{prefix}/{key}", body)

    def gets_per_key(self, bucket, prefix):
        """GETs answered 200/206 per key under bucket/prefix (moto's access log)."""
        strip = f"/{bucket}/{prefix}/"
        counts = {}
        with open(self.log_path, errors="replace") as f:
            for line in f:
                start = line.find('"GET ')
                end = line.find(" HTTP/", start)
                if start < 0 or end < 0:
                    continue
                path = line[start + 5:end]
                status = line[line.find('"', end) + 1:].split()
                if not status or status[0] not in ("200", "206") or "?" in path:
                    continue
                if path.startswith(strip):
                    key = path[len(strip):]
                    counts[key] = counts.get(key, 0) + 1
        return counts


def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def parse_json(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def die(msg):
    print(f"fluid_containers: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)
