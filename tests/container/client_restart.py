"""What application containers see when the Fluid client container restarts,
and what the client needs to run (fluid_containers.py calls these after the
flow).

Two readers loop over every file of the dataset (open, read, sha256, close) in
application containers while the client is disturbed:
  bind-of-mount    the mount point itself bind-mounted (rslave), as Fluid's CSI
                   plugin publishes the volume into a pod;
  bind-of-parent   the directory above it bind-mounted (rslave): a new mount
                   at the mount point propagates into the container.
Each also holds one descriptor opened before the disturbance and reads it
after. Disturbances:
  restart      the kubelet's restart of the container: the class's preStop
               hook (umount -l), then SIGTERM (podman restart);
  kill         the container killed (SIGKILL: OOM of the container) and
               started again;
  daemon-kill  (when the client runs a mount holder: two granary processes in
               the container) kill -9 of the daemon, not of the holder.
Printed per reader: reads ok, wrong bytes, failed reads, the window of
failures after the disturbance, whether reads came back, and what the held
descriptor gave. Wrong bytes fail the test; failed reads are measurements
(docs/kubernetes.md says what to expect), except after daemon-kill, where a
holder must keep every read working.
"""

import os
import time

from podman_env import fs_type, log, run, sha256

READER = r"""#!/bin/sh
# reader.sh ROOT NAME EVICT: reads every file of /log/expected.txt under ROOT
# until /log/stop exists; EVICT=1 drops each file's pages first (dd
# iflag=nocache), so the read goes to the daemon instead of the page cache.
# Failures and a final tally go to /log/NAME.{events,err,result}.
root=$1; name=$2; evict=$3; ok=0; bad=0; err=0; ok_since_err=0; pass=0
exec 3< "$root/big/blob0.bin"
: > /log/$name.events
while [ ! -e /log/stop ]; do
  while read -r sum path; do
    [ -e /log/stop ] && break
    [ "$evict" = 1 ] && dd if="$root/$path" iflag=nocache count=0 2>/dev/null
    if got=$(sha256sum < "$root/$path" 2>>/log/$name.err); then
      if [ "${got%% *}" = "$sum" ]; then ok=$((ok+1)); ok_since_err=$((ok_since_err+1))
      else bad=$((bad+1)); echo "$(date +%s.%N) bad $path" >> /log/$name.events; fi
    else
      err=$((err+1)); ok_since_err=0; echo "$(date +%s.%N) err $path" >> /log/$name.events
    fi
  done < /log/expected.txt
  pass=$((pass+1))
done
cat <&3 > /tmp/fd3 2>>/log/$name.err; fd_rc=$?
echo "ok=$ok bad=$bad err=$err ok_since_err=$ok_since_err passes=$pass fd_rc=$fd_rc fd_bytes=$(wc -c < /tmp/fd3)" > /log/$name.result
"""

def _client_processes(cluster):
    """Host PIDs and arguments of the granary processes in the client container."""
    p = run(["podman", "top", cluster.client, "hpid", "args"], check=False)
    procs = []
    for line in p.stdout.splitlines()[1:]:
        parts = line.split(None, 1)
        if len(parts) == 2 and "granary" in parts[1]:
            procs.append((int(parts[0]), parts[1]))
    return procs


def _result(log_dir, name, t0):
    path = os.path.join(log_dir, f"{name}.result")
    if not os.path.exists(path):
        return None
    r = dict(kv.split("=", 1) for kv in open(path).read().split())
    r = {k: int(v) for k, v in r.items()}
    errs = []
    for line in open(os.path.join(log_dir, f"{name}.events")):
        t, kind, _ = line.split(" ", 2)
        if kind == "err":
            errs.append(float(t) - t0)
    r["first_err_s"] = min(errs) if errs else None
    r["last_err_s"] = max(errs) if errs else None
    lines = open(os.path.join(log_dir, f"{name}.err")).read().strip().splitlines()
    r["message"] = lines[-1][-120:] if lines else ""
    return r


def _disturb(cluster, kind, procs):
    podman = cluster.podman
    if kind == "restart":
        podman.exec(cluster.client, ["sh", "-c", 'umount -l "$FLUID_RUNTIME_MOUNT_PATH" || true'])
        run(["podman", "restart", "-t", "30", cluster.client], timeout=120)
    elif kind == "kill":
        run(["podman", "kill", "--signal", "KILL", cluster.client])
        run(["podman", "wait", cluster.client], check=False, timeout=60)
        run(["podman", "start", cluster.client], timeout=120)
    elif kind == "daemon-kill":
        run(["kill", "-9", str(procs[-1][0])])  # the newest: the daemon under the holder


def _host_mount_state(cluster):
    """The host's mount: its type, and whether a lookup no cache can answer
    (a name never asked for) reaches a daemon."""
    kind = fs_type(cluster.host_target) or "not a mount"
    try:
        os.stat(os.path.join(cluster.host_target, f"no-such-name-{time.monotonic_ns()}"))
        return f"{kind}, a daemon answers"
    except FileNotFoundError:
        return f"{kind}, a daemon answers"
    except OSError as e:
        return f"{kind}, {os.strerror(e.errno)}"


def _scenario(cluster, c, kind, readers, log_dir):
    """Runs the readers across one disturbance; returns (client ready, results)."""
    for f in os.listdir(log_dir):
        if f == "stop" or f.endswith((".result", ".events", ".err")):
            os.remove(os.path.join(log_dir, f))
    procs = _client_processes(cluster)
    for name, (app, root, evict) in readers.items():
        run(["podman", "exec", "-d", app, "sh", "/log/reader.sh", root, name, evict])
    time.sleep(3)
    t0 = time.time()
    _disturb(cluster, kind, procs)
    ready = cluster.wait_ready(cluster.client, "client", timeout=60)
    t_ready = time.time() - t0
    time.sleep(8)
    state = _host_mount_state(cluster)
    open(os.path.join(log_dir, "stop"), "w").close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(log_dir, f"{n}.result")) for n in readers):
        time.sleep(0.5)
    log(f"{kind}: client {'ready again after %.1f s' % t_ready if ready else 'NOT ready again'}; "
        f"host mount 8 s later: {state}")
    results = {}
    for name in readers:
        r = _result(log_dir, name, t0)
        results[name] = r
        if r is None:
            c.check(f"{kind}: reader {name} finished", False)
            continue
        window = ("no failed read" if r["first_err_s"] is None else
                  f"failures from +{r['first_err_s']:.2f} s to +{r['last_err_s']:.2f} s")
        log(f"  {name}: {r['ok']} reads ok, {r['bad']} wrong, {r['err']} failed ({window}); "
            f"ok after the last failure: {r['ok_since_err']}; descriptor opened before: "
            f"{'read ' + str(r['fd_bytes']) + ' bytes' if r['fd_rc'] == 0 else 'failed'}"
            + (f"; last error: {r['message']}" if r["message"] else ""))
        c.check(f"{kind}: {name}: no read returned wrong bytes", r["bad"] == 0)
    return ready, results


def measure(cluster, c, data):
    """The client disturbed while applications read; returns the known
    failures (what the product does not survive yet), for the summary."""
    log("client container disturbed while application containers read "
        "(evict = each file's pages dropped before its read, so it needs the daemon):")
    log_dir = os.path.join(cluster.work, "app-log")
    with open(os.path.join(log_dir, "expected.txt"), "w") as f:
        for key in sorted(data):
            f.write(f"{sha256(data[key])} {key}\n")
    with open(os.path.join(log_dir, "reader.sh"), "w") as f:
        f.write(READER)
    parent = cluster.start_app("app-parent", os.path.dirname(cluster.host_target), "/fluid")
    holder = len(_client_processes(cluster)) > 1
    log(f"the client container runs {'a mount holder and its daemon' if holder else 'one granary process (no mount holder)'}")
    known = []
    for kind in (["daemon-kill"] if holder else []) + ["restart", "kill"]:
        # Fluid's FuseRecovery re-binds a new mount into application pods; a
        # new application container stands for that here.
        cluster.podman.remove(cluster.podman.name("app"))
        app = cluster.start_app("app", cluster.host_target, "/data")
        readers = {"mount-bind.evict": (app, "/data/imagenet", "1"),
                   "mount-bind.page-cache": (app, "/data/imagenet", "0"),
                   "parent-bind.evict": (parent, "/fluid/cache-fuse/imagenet", "1")}
        ready, results = _scenario(cluster, c, kind, readers, log_dir)
        if kind == "daemon-kill":
            c.check("daemon-kill: the client is ready again", ready, cluster.logs(cluster.client))
            for name, r in results.items():
                c.check(f"daemon-kill: {name}: the holder kept every read working",
                        r is not None and r["err"] == 0 and r["fd_rc"] == 0)
            continue
        r = results.get("parent-bind.evict")
        if ready:
            c.check(f"{kind}: reads through the parent's bind work again",
                    r is not None and r["ok_since_err"] > 0)
            continue
        # The new client did not mount: say why, then do what an operator
        # would (unmount the dead mount) so the next measurement starts clean.
        why = cluster.logs(cluster.client, 1)
        known.append(f"{kind}: the new client container did not mount: {why}")
        log(f"  known: {known[-1]}")
        run(["umount", "-l", cluster.host_target], check=False)
        run(["podman", "start", cluster.client], check=False)
        c.require(f"{kind}: after `umount -l` of the dead mount the client starts again",
                  cluster.wait_ready(cluster.client, "client"), cluster.logs(cluster.client))
    cluster.podman.remove(parent)
    return known


def non_root_client(cluster, c):
    """The client as uid 1000: what FUSE needs that a non-root container lacks."""
    log("the client as a non-root user (uid 1000, /dev/fuse, no privilege):")
    for label, extra in (("no capabilities", []),
                         ("with CAP_SYS_ADMIN", ["--cap-add", "SYS_ADMIN"])):
        name = cluster.podman.name("client-nonroot")
        cluster.podman.cleanup.push(f"container {name}", lambda n=name: cluster.podman.remove(n))
        # /dev/fuse as most hosts have it (0666; this test's host may keep it
        # 0600), user_allow_other in /etc/fuse.conf (fusermount3 refuses
        # allow_other to users otherwise), a passwd entry (fusermount3 wants a
        # user name), then uid 1000 with the container's
        # capabilities: what is left is mount(2) itself.
        p = run(["podman", "run", "--rm", "--name", name,
                 "--network", cluster.network, "--ip", f"{cluster.net}40",
                 "--device", "/dev/fuse", "--tmpfs", "/tmp:mode=1777",
                 "--tmpfs", "/etc/fluid/mount/tiered-store/level-0-index-0-emptydir:mode=1777",
                 "-e", "FLUID_DATASET_NAME=imnet", "-e", "FLUID_DATASET_NAMESPACE=default",
                 "-e", f"POD_IP={cluster.net}40",
                 "-v", f"{cluster.work}/config:/etc/fluid/config:ro",
                 "-v", f"{cluster.work}/secrets/minio-secret:/etc/fluid/secrets/minio-secret:ro",
                 "-v", f"{cluster.work}/peer:/etc/granary/peer:ro"] + extra +
                ["--entrypoint", "sh", cluster.args.image, "-c",
                 "chmod 666 /dev/fuse && echo user_allow_other >> /etc/fuse.conf"
                 " && echo granary:x:1000:1000::/tmp:/bin/sh >> /etc/passwd && mkdir -p /tmp/mnt /tmp/run && chown 1000:1000 /tmp/mnt /tmp/run"
                 " && exec setpriv --reuid 1000 --regid 1000 --clear-groups timeout 20"
                 " granary fluid client --mountpoint /tmp/mnt --run-dir /tmp/run"],
                check=False, timeout=90)
        msg = [line for line in p.stderr.strip().splitlines() if line.strip()]
        if p.returncode == 124:
            msg.append("mounted and served until stopped after 20 s")
        said = [line for line in msg if "fusermount" in line.split(":")[0]][-1:]  # its own reason
        log(f"  {label}: exit {p.returncode}: {msg[-1][-200:] if msg else ''}"
            + (f" ({said[0][-200:]})" if said else ""))
        if not extra:
            c.check("non-root client without CAP_SYS_ADMIN fails at the mount with a message",
                    p.returncode not in (0, 124) and bool(msg))


def dataload_without_run_dir(cluster, c):
    """Fluid's DataLoad Job mounts no /run/granary: as uid 1000 the image's
    root-owned one is not writable (the data load keeps a scratch tier there)."""
    p = run(["podman", "run", "--rm", "--name", cluster.podman.name("dataload-norun")]
            + cluster.pod_args("imnet-dataload-n0run", "dataload", f"{cluster.net}31", "1000:1000")
            + ["-e", "FLUID_DATALOAD_DATA_PATH=/imagenet/train", cluster.args.image, "fluid", "dataload"],
            check=False, timeout=300)
    msg = [line for line in p.stderr.strip().splitlines() if line.strip()]
    log(f"DataLoad as uid 1000 without a /run/granary volume: exit {p.returncode}: "
        f"{msg[-1][-200:] if msg else ''}")
