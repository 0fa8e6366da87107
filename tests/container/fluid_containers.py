#!/usr/bin/env python3
"""A Fluid CacheRuntime of Granary as containers of the image on one machine
(no Kubernetes): what fluid_flow_test checks with processes in namespaces,
here with the pods as podman containers of scripts/build-image.sh's image and
with what Fluid mounts where Fluid mounts it.

  - origin: moto_server on the test network (a bridge of its own);
  - three worker containers imnet-worker-0..2, each its own network namespace
    (an address on the bridge), as uid 1000 with every capability dropped and
    a read-only root: runtime.json at /etc/fluid/config/runtime.json (a
    ConfigMap-style directory, updated as the kubelet does: a new ..data),
    secrets under /etc/fluid/secrets/<secret>/<key>, the peer secret at
    /etc/granary/peer/secret, the tier at
    /etc/fluid/mount/tiered-store/level-0-index-0-hostpath (a host directory
    of that pod), an emptyDir at /run/granary, env FLUID_*, POD_NAME, POD_IP;
  - a privileged client container with /dev/fuse mounting at
    $FLUID_RUNTIME_MOUNT_PATH under /runtime-mnt (shared propagation: the
    mount appears on the host);
  - an application container (uid 1000, no network) that sees the mount
    through a bind mount with rslave propagation and reads every file;
  - a DataLoad container; report-summary, mount-ufs and `granary load
    --worker` exec'd in worker 0; runtime.json rewritten with a second mount
    and back; worker 1 killed.
Then (unless --no-restart) the client container restarted and killed while
two application containers read, one through a bind of the mount point (as
Fluid's CSI plugin publishes it), one through a bind of its parent directory;
what each saw is printed. And the client as a non-root user, to show what it
needs.

Usage (as root, after scripts/build-image.sh):
  python3 tests/container/fluid_containers.py [--image granary:0.1.0]
Prints every check; exits 1 on any failed check. Removes every container,
network, mount and process it made, also on failure and Ctrl-C.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from podman_env import (Cleanup, Origin, Podman, blocks_of, delta, die, fluid_size,  # noqa: E402
                        fs_type, install_signal_handlers, log, make_dataset, make_shared_dir,
                        parse_json, run, sha256, write_atomic_config)
import client_restart  # noqa: E402

WORKERS = 3
BLOCK = 256 << 10
BUCKET, VAL_BUCKET = "fluid-imagenet", "fluid-val"
APP_UID = "1000:1000"
TIER = "/etc/fluid/mount/tiered-store/level-0-index-0-hostpath"
CLIENT_TIER = "/etc/fluid/mount/tiered-store/level-0-index-0-emptydir"
MOUNT_PATH = "/runtime-mnt/cache/default/imnet/cache-fuse"  # FLUID_RUNTIME_MOUNT_PATH


class Checks:
    def __init__(self):
        self.failed = []
        self.passed = 0

    def check(self, what, ok, detail=""):
        if ok:
            self.passed += 1
            log(f"ok    {what}")
        else:
            self.failed.append(what)
            log(f"FAIL  {what}" + (f": {detail}" if detail else ""))
        return ok

    def require(self, what, ok, detail=""):
        if not self.check(what, ok, detail):
            raise RuntimeError(f"cannot go on after: {what}")


class Cluster:
    """The runtime's pods. Host side: <work>/config (the ConfigMap), secrets,
    worker<i>/{tier,run}, client/{tier,run}, runtime-mnt (shared)."""

    def __init__(self, args, work, cleanup):
        self.args = args
        self.work = work
        self.podman = Podman(f"granary-ct{os.getpid()}", cleanup)
        self.network, self.net = self.podman.create_network("net")
        self.worker_ip = [f"{self.net}{10 + i}" for i in range(WORKERS)]
        self.client_ip = f"{self.net}20"
        self.dataload_ip = f"{self.net}30"
        self.origin = Origin(self.podman, self.network, f"{self.net}2", args.image,
                             os.path.join(work, "moto_server.log"), cleanup)
        self.host_mnt = os.path.join(work, "runtime-mnt")
        make_shared_dir(self.host_mnt, cleanup)
        self.host_target = self.host_mnt + MOUNT_PATH[len("/runtime-mnt"):]
        os.makedirs(self.host_target)
        self._write_secrets()
        self.workers = []
        self.client = None

    def _dir(self, rel, owner=None):
        path = os.path.join(self.work, rel)
        os.makedirs(path, exist_ok=True)
        if owner is not None:
            os.chown(path, owner, owner)
        return path

    def _write_secrets(self):
        # Secret volumes, mounted read-only: the Dataset's with Kubernetes'
        # default mode 0644; the peer secret as the kubelet writes it for
        # pods with fsGroup 1000 and defaultMode 0440 (root:1000), readable by
        # the uid-1000 workers and the root client, by nobody else.
        for rel, text, mode, gid in (
                ("secrets/minio-secret/access-key", "testing\n", 0o644, 0),
                ("secrets/minio-secret/secret-key", "testing\n", 0o644, 0),
                ("peer/secret", "a shared peer secret of the container test\n", 0o440, 1000)):
            path = os.path.join(self.work, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            os.chown(path, 0, gid)
            os.chmod(path, mode)
        self._dir("config")

    def mount_spec(self, bucket, prefix, name):
        return {"mountPoint": f"s3://{bucket}/{prefix}", "name": name, "path": f"/{name}",
                "options": {"endpoint_url": self.origin.endpoint, "path_style": "true",
                            "region_name": "us-east-1"},
                "encryptOptions": {"access-key": "/etc/fluid/secrets/minio-secret/access-key",
                                   "secret-key": "/etc/fluid/secrets/minio-secret/secret-key"}}

    def write_runtime(self, with_val):
        """runtime.json as Fluid writes it (CONTRACT.md); peers explicit only
        when the network has no DNS for the StatefulSet names."""
        mounts = [self.mount_spec(BUCKET, "ds", "imagenet")]
        if with_val:
            mounts.append(self.mount_spec(VAL_BUCKET, "val", "val"))
        rt = {
            "mounts": mounts,
            "accessModes": ["ReadOnlyMany"],
            "targetPath": MOUNT_PATH,
            "worker": {"enabled": True, "name": "imnet-worker", "replicas": WORKERS,
                       "service": {"name": "svc-imnet-worker"},
                       "options": {"secretFile": "/etc/granary/peer/secret", "blockSize": "256KiB"},
                       "tieredStoreLevels": [{"mountPaths": [TIER], "mediumType": "SSD",
                                              "quotas": ["1Gi"], "high": "0.99", "low": "0.8"}]},
            "client": {"enabled": True, "name": "imnet-client", "options": {},
                       "service": {"name": ""},
                       "tieredStoreLevels": [{"mountPaths": [CLIENT_TIER], "mediumType": "SSD",
                                              "quotas": ["1Gi"]}]},
        }
        write_atomic_config(os.path.join(self.work, "config"), "runtime.json", json.dumps(rt, indent=2))

    def pod_args(self, pod_name, component, ip=None, user=None):
        """What Fluid gives every component container."""
        a = ["-e", f"POD_NAME={pod_name}", "-e", "FLUID_DATASET_NAME=imnet",
             "-e", "FLUID_DATASET_NAMESPACE=default",
             "-e", "FLUID_RUNTIME_CONFIG_PATH=/etc/fluid/config/runtime.json",
             "-e", f"FLUID_RUNTIME_COMPONENT_TYPE={component}",
             "-v", f"{self.work}/config:/etc/fluid/config:ro",
             "-v", f"{self.work}/secrets/minio-secret:/etc/fluid/secrets/minio-secret:ro",
             "-v", f"{self.work}/peer:/etc/granary/peer:ro"]
        if component == "client":
            a += ["-e", f"FLUID_RUNTIME_MOUNT_PATH={MOUNT_PATH}"]
        if ip:
            a += ["--network", self.network, "--ip", ip, "-e", f"POD_IP={ip}",
                  "--hostname", pod_name]
        if user:
            a += ["--user", user]
        return a

    def start_worker(self, i):
        uid = 1000
        pod = f"imnet-worker-{i}"
        args = self.pod_args(pod, "worker", self.worker_ip[i], f"{uid}:{uid}") + [
            "-e", "FLUID_RUNTIME_COMPONENT_SVC_NAME=svc-imnet-worker",
            "--network-alias", f"{pod}.svc-imnet-worker",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
            "-v", f"{self._dir(f'worker{i}/tier', uid)}:{TIER}",
            "-v", f"{self._dir(f'worker{i}/run', uid)}:/run/granary"]
        name = self.podman.run_detached(pod, args, [self.args.image, "fluid", "worker"])
        self.workers.append(name)

    def start_client(self, extra=()):
        args = self.pod_args("imnet-client-abcde", "client", self.client_ip, None) + [
            "--privileged", "--device", "/dev/fuse",
            "-v", f"{self.host_mnt}:/runtime-mnt:rshared",
            "-v", f"{self._dir('client/tier')}:{CLIENT_TIER}",
            "-v", f"{self._dir('client/run')}:/run/granary"] + list(extra)
        self.client = self.podman.run_detached("imnet-client", args,
                                               [self.args.image, "fluid", "client"])
        return self.client

    def wait_ready(self, container, component, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.podman.exec(container, ["granary", "fluid", "probe", "--component",
                                            component]).returncode == 0:
                return True
            if not self.podman.running(container):
                return False
            time.sleep(0.5)
        return False

    def logs(self, container, lines=15):
        p = run(["podman", "logs", "--tail", str(lines), container], check=False)
        return (p.stdout + p.stderr).strip()

    def summary(self):
        p = self.podman.exec(self.workers[0], ["granary", "fluid", "report-summary"])
        j = parse_json(p.stdout)
        return j if isinstance(j, dict) else {"error": p.stderr.strip() or p.stdout.strip()}

    def start_app(self, short, source, target):
        """An application pod: uid 1000, no network, the volume with rslave."""
        return self.podman.run_detached(
            short, ["--network", "none", "--user", APP_UID, "--cap-drop", "ALL",
                    "-v", f"{source}:{target}:rslave",
                    "-v", f"{self._dir('app-log', 1000)}:/log",
                    "--entrypoint", "sleep"], [self.args.image, "infinity"])


def read_epoch(cluster, app, root, data):
    """Reads every file under root in the app container (8 parallel readers);
    returns (read, failures, mismatches, first error)."""
    script = (f"cd {root} && find . -type f | sort > /tmp/list && "
              "xargs -P 8 -n 16 sha256sum < /tmp/list; echo files=$(wc -l < /tmp/list)")
    p = cluster.podman.exec(app, ["sh", "-c", script], timeout=600)
    got = {}
    for line in p.stdout.splitlines():
        m = re.match(r"([0-9a-f]{64})  \./(.+)$", line)
        if m:
            got[m.group(2)] = m.group(1)
    failures = [k for k in data if k not in got]
    mismatches = [k for k in data if k in got and got[k] != sha256(data[k])]
    extra = [k for k in got if k not in data]
    first = (p.stderr.strip().splitlines() or [""])[0]
    if extra:
        first = f"unexpected files {extra[:3]}; " + first
    return len(got), len(failures) + len(extra), len(mismatches), first


def wait_for(pred, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return False


def flow(cluster, c, data, val):
    total = sum(len(b) for b in data.values())
    train = {k: b for k, b in data.items() if k.startswith("train/")}
    podman = cluster.podman

    for i in range(WORKERS):
        cluster.start_worker(i)
    for i, w in enumerate(cluster.workers):
        c.require(f"worker {i} ready (fluid probe --component worker), as uid 1000 without capabilities",
                  cluster.wait_ready(w, "worker"), cluster.logs(w))
    for i in range(WORKERS):
        tier = os.path.join(cluster.work, f"worker{i}/tier")
        c.check(f"worker {i} keeps its cache in its own tier volume", bool(os.listdir(tier)))
        owners = {os.stat(os.path.join(tier, f)).st_uid for f in os.listdir(tier)}
        c.check(f"worker {i}'s tier files belong to uid 1000", owners == {1000}, str(owners))

    cluster.start_client()
    c.require("client ready (fluid probe --component client)",
              cluster.wait_ready(cluster.client, "client"), cluster.logs(cluster.client))
    c.require("the client's FUSE mount (fuse.granary) propagated to the host's /runtime-mnt",
              fs_type(cluster.host_target) == "fuse.granary", str(fs_type(cluster.host_target)))
    app = cluster.start_app("app", cluster.host_target, "/data")

    s0 = cluster.summary()
    c.check("report-summary in worker 0: fileNum, ufsTotal, cached 0B, capacity 3 x 1Gi",
            s0.get("fileNum") == str(len(data)) and s0.get("ufsTotal") == fluid_size(total)
            and s0.get("cached") == "0B" and s0.get("cacheCapacity") == fluid_size(3 << 30), str(s0))
    c.check("report-summary: every value a string", all(isinstance(v, str) for v in s0.values()))

    gets0 = cluster.origin.gets_per_key(BUCKET, "ds")
    os.makedirs(os.path.join(cluster.work, "dataload-run"), exist_ok=True)
    os.chown(os.path.join(cluster.work, "dataload-run"), 1000, 1000)
    p = run(["podman", "run", "--rm", "--name", podman.name("dataload")]
            + cluster.pod_args("imnet-dataload-x7k2p", "dataload", cluster.dataload_ip, APP_UID)
            + ["--cap-drop", "ALL", "-e", "FLUID_DATALOAD_DATA_PATH=/imagenet/train",
               "-e", "FLUID_DATALOAD_PATH_REPLICAS=1",
               "-v", f"{cluster.work}/dataload-run:/run/granary",
               cluster.args.image, "fluid", "dataload"], check=False, timeout=600)
    c.check("DataLoad container (uid 1000) exits 0, nothing on stdout",
            p.returncode == 0 and not p.stdout.strip(), f"exit {p.returncode}: {p.stderr[-800:]}")
    c.check("DataLoad reports every train file cached",
            f"{len(train)}/{len(train)} files cached" in p.stderr, p.stderr[-400:])
    s1 = cluster.summary()
    c.check("report-summary after DataLoad: cached = the train files' bytes",
            s1.get("cached") == fluid_size(sum(len(b) for b in train.values())), str(s1))

    p = podman.exec(cluster.workers[0], ["granary", "load", "--worker", "fluid://default/imnet",
                                         "imagenet/big", "--run-dir", "/run/granary"], timeout=300)
    c.check("granary load --worker exec'd in worker 0", p.returncode == 0, p.stderr[-400:])
    c.check("report-summary: everything cached", cluster.summary().get("cached") == fluid_size(total))

    n, fail, bad, first = read_epoch(cluster, app, "/data/imagenet", data)
    c.check(f"application container (uid 1000, rslave bind) reads all {len(data)} files byte-exact",
            n == len(data) and fail + bad == 0, f"read {n}, failed {fail}, mismatched {bad}: {first}")
    s2 = cluster.summary()
    c.check("report-summary after the epoch: 100.0% cached, hit ratio above 0",
            s2.get("cachedPercentage") == "100.0" and s2.get("cacheHitRatio") not in ("0.0", None), str(s2))
    p = podman.exec(cluster.client, ["granary", "status", MOUNT_PATH, "--json", "--run-dir", "/run/granary"])
    st = parse_json(p.stdout)
    st = st[0] if isinstance(st, list) and st else st
    c.check("client status: near copies in its tier, owns nothing",
            isinstance(st, dict) and st.get("cached_bytes", 0) > 0 and st.get("owned_block_bytes", 1) == 0,
            p.stdout[-300:] + p.stderr[-300:])
    gets = delta(cluster.origin.gets_per_key(BUCKET, "ds"), gets0)
    c.check(f"each block left the origin once for the whole cluster ({blocks_of(data, BLOCK)} blocks)",
            sum(gets.values()) == blocks_of(data, BLOCK)
            and all(n == max(1, -(-len(data[k]) // BLOCK)) for k, n in gets.items()),
            f"{sum(gets.values())} GETs")

    # Fluid rewrites runtime.json with a second mount (the kubelet swaps ..data).
    cluster.write_runtime(with_val=True)
    val_file = f"/data/val/{sorted(val)[0]}"
    shown = wait_for(lambda: podman.exec(app, ["test", "-f", val_file]).returncode == 0, 60, 0.5)
    c.check("a mount added to runtime.json appears in the application container", shown,
            cluster.logs(cluster.client))
    c.check("worker 0 ready again with both mounts", cluster.wait_ready(cluster.workers[0], "worker"))
    p = podman.exec(cluster.workers[0], ["granary", "fluid", "mount-ufs"])
    c.check("mount-ufs in worker 0: {\"mounted\":[\"/imagenet\",\"/val\"]}",
            parse_json(p.stdout) == {"mounted": ["/imagenet", "/val"]}, p.stdout + p.stderr)
    n, fail, bad, first = read_epoch(cluster, app, "/data/val", val)
    c.check(f"the new mount's {len(val)} files byte-exact", n == len(val) and fail + bad == 0,
            f"read {n}, failed {fail}, mismatched {bad}: {first}")
    c.check("report-summary counts both mounts' files",
            cluster.summary().get("fileNum") == str(len(data) + len(val)))

    run(["podman", "kill", "--signal", "KILL", cluster.workers[1]])
    n, fail, bad, first = read_epoch(cluster, app, "/data/imagenet", data)
    c.check("worker 1 killed (SIGKILL): every file still reads byte-exact",
            n == len(data) and fail + bad == 0, f"read {n}, failed {fail}, mismatched {bad}: {first}")
    c.check("report-summary still answers after the loss",
            cluster.summary().get("fileNum") == str(len(data) + len(val)))

    cluster.write_runtime(with_val=False)
    gone = wait_for(lambda: podman.exec(app, ["test", "-e", val_file]).returncode != 0, 60, 0.5)
    c.check("the mount removed from runtime.json disappears", gone)
    wait_for(lambda: cluster.summary().get("fileNum") == str(len(data)), 20, 0.5)
    c.check("report-summary: back to one mount's files", cluster.summary().get("fileNum") == str(len(data)))
    p = podman.exec(cluster.workers[0], ["granary", "fluid", "mount-ufs"])
    c.check("mount-ufs: {\"mounted\":[\"/imagenet\"]}", parse_json(p.stdout) == {"mounted": ["/imagenet"]},
            p.stdout + p.stderr)
    # Worker 1 comes back (the StatefulSet restarts it) with its cache.
    run(["podman", "start", cluster.workers[1]])
    c.check("worker 1 restarted on its tier volume is ready again",
            cluster.wait_ready(cluster.workers[1], "worker"), cluster.logs(cluster.workers[1]))
    return app


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", default="granary:0.1.0", help="image built by scripts/build-image.sh")
    ap.add_argument("--no-restart", action="store_true", help="skip the client restart measurements")
    ap.add_argument("--keep-work", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        die("needs root (podman with FUSE, bridges and mount propagation)")
    if not os.path.exists("/dev/fuse"):
        die("needs /dev/fuse")
    for tool in ("podman", "nsenter", "ip"):
        if not shutil.which(tool):
            die(f"needs {tool} (scripts/build-image.sh installs podman)")
    if run(["podman", "image", "exists", args.image], check=False).returncode != 0:
        die(f"image {args.image} not found: run scripts/build-image.sh first")

    install_signal_handlers()
    cleanup = Cleanup()
    work = tempfile.mkdtemp(prefix="granary-containers.")
    os.chmod(work, 0o755)
    cleanup.push(f"work directory {work}",
                 lambda: None if args.keep_work else run(["rm", "-rf", "--one-file-system", work], check=False))
    c = Checks()
    known = []
    start = time.monotonic()
    try:
        log(f"image {args.image}, work directory {work}")
        cluster = Cluster(args, work, cleanup)
        val = make_dataset(40, 0, BLOCK, 11)
        cluster.origin.upload(VAL_BUCKET, "val", val)
        data = make_dataset(300, 6, BLOCK, 7)
        cluster.origin.upload(BUCKET, "ds", data)
        log(f"origin {cluster.origin.endpoint}: {len(data)} + {len(val)} objects; "
            f"pods on {cluster.network} ({cluster.net}0/24)")
        cluster.write_runtime(with_val=False)
        flow(cluster, c, data, val)
        if not args.no_restart:
            known = client_restart.measure(cluster, c, data)
        client_restart.non_root_client(cluster, c)
        client_restart.dataload_without_run_dir(cluster, c)
    except KeyboardInterrupt as e:
        c.failed.append(f"interrupted ({e})")
        log(f"interrupted: {e}")
    except Exception as e:
        c.failed.append(str(e))
        log(f"error: {e}")
    finally:
        log("cleaning up")
        cleanup.run()
    log(f"{c.passed} checks passed, {len(c.failed)} failed in {time.monotonic() - start:.0f} s")
    for f in c.failed:
        log(f"  failed: {f}")
    for k in known:
        log(f"  known (measured, not failed): {k}")
    sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()
