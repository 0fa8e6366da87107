#!/usr/bin/env python3
"""Reads through a granary mount while its daemon is killed or upgraded.

16 threads read every file under SOURCE/<dir> whole, in a shuffled order,
through the same paths under MOUNT, comparing the bytes with SOURCE (a posix
source: the ground truth is readable directly). After --before seconds the
daemon is killed (kill -9; its pid comes from the mount holder's control
socket) or the mount is upgraded (granary mount --upgrade); the readers go on
for --after seconds. Prints one line: reads, reads started after the event,
failed and wrong reads, the longest read, and how long no daemon served (as
the holder measured it).

    granary mount /data/src /mnt/x --run-dir /tmp/run --read-mode passthrough
    bench/restart/restart_stall.py --mount /mnt/x --source /data/src --run-dir /tmp/run --event kill
    bench/restart/restart_stall.py ... --event upgrade --granary build/src/cli/granary --binary /tmp/granary-next

The mount must be warm for a warm-epoch number (read it once first).
"""
import argparse
import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time


def holder(run_dir, mount):
    # The run dir of this one mount holds one holder socket (mount-<hash>.holder).
    for name in os.listdir(run_dir):
        if name.endswith(".holder"):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(os.path.join(run_dir, name))
            sock.sendall(b'{"op":"status"}\n')
            return json.loads(sock.makefile().readline())
    sys.exit("no mount holder socket in " + run_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mount", required=True)
    ap.add_argument("--source", required=True, help="the posix source the mount serves")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--dir", default="", help="subdirectory of the files to read")
    ap.add_argument("--event", choices=["kill", "upgrade"], required=True)
    ap.add_argument("--granary", default="granary", help="the granary CLI (for --event upgrade)")
    ap.add_argument("--binary", default="", help="--event upgrade: the binary to upgrade to")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--before", type=float, default=3.0)
    ap.add_argument("--after", type=float, default=4.0)
    a = ap.parse_args()

    rel_dir = a.dir
    files = sorted(f for f in os.listdir(os.path.join(a.source, rel_dir))
                   if os.path.isfile(os.path.join(a.source, rel_dir, f)))
    digest = {f: hashlib.sha1(open(os.path.join(a.source, rel_dir, f), "rb").read()).digest()
              for f in files}
    lock = threading.Lock()
    st = {"reads": 0, "after": 0, "failed": 0, "wrong": 0, "longest": 0.0}
    event_at = [None]
    stop = threading.Event()

    def reader(seed):
        rnd = random.Random(seed)
        order = files[:]
        while not stop.is_set():
            rnd.shuffle(order)
            for f in order:
                if stop.is_set():
                    break
                t0 = time.monotonic()
                failed = wrong = False
                try:
                    with open(os.path.join(a.mount, rel_dir, f), "rb") as fh:
                        wrong = hashlib.sha1(fh.read()).digest() != digest[f]
                except OSError:
                    failed = True
                dt = time.monotonic() - t0
                with lock:
                    st["reads"] += 1
                    st["longest"] = max(st["longest"], dt)
                    st["failed"] += failed
                    st["wrong"] += wrong
                    if event_at[0] is not None and t0 >= event_at[0]:
                        st["after"] += 1

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(a.threads)]
    for t in threads:
        t.start()
    time.sleep(a.before)
    status = holder(a.run_dir, a.mount)
    event_at[0] = time.monotonic()
    note = ""
    if a.event == "kill":
        os.kill(status["daemon_pid"], 9)
    else:
        cmd = [a.granary, "mount", "--upgrade", a.mount, "--run-dir", a.run_dir]
        if a.binary:
            cmd += ["--binary", a.binary]
        r = subprocess.run(cmd, capture_output=True, text=True)
        note = (r.stdout or r.stderr).strip()
    time.sleep(a.after)
    stop.set()
    for t in threads:
        t.join()
    down = holder(a.run_dir, a.mount)["last_takeover_ms"]
    print(f"{a.event}: {st['reads']} reads ({st['after']} after the event), {st['failed']} failed, "
          f"{st['wrong']} wrong, longest read {st['longest'] * 1000:.0f} ms, "
          f"no daemon for {down} ms" + (f"; {note}" if note else ""))
    return 1 if st["failed"] or st["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
