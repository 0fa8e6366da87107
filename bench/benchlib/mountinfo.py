"""Whether a path is a mount point (/proc/self/mountinfo), and unmounting one
that may be busy. Stateless; safe from any thread."""
import os
import subprocess
import time


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def unmount(path):
    """Unmounts a FUSE mount point; lazily when it stays busy. Never raises."""
    for argv in (["fusermount3", "-u", path], ["umount", path]):
        if not is_mounted(path):
            return
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if not is_mounted(path):
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def lists(path, name=None):
    """Whether a mounted directory lists: any entry, or the entry `name`."""
    try:
        entries = os.listdir(path)
    except OSError:
        return False
    return name in entries if name else len(entries) > 0
