"""What a run writes and says at the end: results.json and results.md in
--out, the --check verdict, and the machine and tool versions a result
names. Stateless functions."""
import datetime
import json
import os
import platform
import subprocess
import sys

from .origin import S3RVER_DIR


def write_results(out, results, md):
    """Writes results.json and results.md (the markdown `md`) to the
    directory `out` and prints the markdown."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    print("\n" + md)


def check_status(who, problems):
    """--check: prints each problem on stderr as '<who> --check: <problem>' and
    returns the exit status (1 with any problem, else 0)."""
    for p in problems:
        print(f"{who} --check: {p}", file=sys.stderr)
    return 1 if problems else 0


def command_line():
    """The command this run was started with, for its results."""
    return " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])


def machine():
    """CPU model, cores, memory, kernel and OS of this machine."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1),
            "kernel": platform.release(), "os": _os_name()}


def _os_name():
    try:
        with open("/etc/os-release") as f:
            kv = dict(ln.rstrip().split("=", 1) for ln in f if "=" in ln)
        return kv.get("PRETTY_NAME", "").strip('"')
    except OSError:
        return platform.system()


def tool_versions(origin, peers=True):
    """Versions of the origin server and (peers) of s3fs and rclone; None for
    a tool that does not answer."""
    v = {}
    if origin == "s3rver":
        try:
            with open(os.path.join(S3RVER_DIR, "node_modules", "s3rver", "package.json")) as f:
                version = json.load(f)["version"]
            node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=20)
            v["s3rver"] = f"{version} (node {node.stdout.strip()})"
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
            v["s3rver"] = None
    tools = [("s3fs", ["s3fs", "--version"]), ("rclone", ["rclone", "version"])] if peers else []
    if origin == "moto":
        tools.append(("moto_server", ["python3", "-c", "import moto; print(moto.__version__)"]))
    for name, argv in tools:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
            v[name] = (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            v[name] = None
    return v


def granary_version(granary):
    """Granary's version, when its binary was built and the commit the tree
    was at; None when the binary does not answer."""
    try:
        out = subprocess.run([granary, "version"], capture_output=True, text=True, timeout=20)
        built = datetime.datetime.fromtimestamp(os.path.getmtime(granary), datetime.timezone.utc)
        v = (f"{out.stdout.strip().removeprefix('granary ')}, binary of "
             f"{built:%Y-%m-%d %H:%M} UTC")
        head = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)),
                               "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=20)
        if head.returncode == 0:
            v += f", tree at {head.stdout.strip()}"
        return v
    except (OSError, subprocess.TimeoutExpired):
        return None
