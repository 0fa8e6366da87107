"""The access paths the comparison measures, one function per table row group.

Each function takes the Bench (bench.benchlib.bench) and returns rows:
  {"path": str, "cold": epoch|None, "warm": epoch|None, "note": str, "error": str|None}
where an epoch is what Bench.epoch returns (images/s, MB/s, p99, origin
requests). A failing step raises StepError; run_guarded turns that into a row
with an error so the rest of the comparison still runs.

Peer options are chosen for the training pattern (read-only, whole files,
16 readers, immutable data) and are listed in docs/benchmarks.md.
"""
import os

from bench.benchlib.cpu import CpuMeter, per_image_ms
from bench.benchlib.mountinfo import is_mounted, lists
from bench.benchlib.mounts import (GranaryMount, cache_dir, delete_caches, fresh_dir,
                                   private_file)
from bench.benchlib.procs import StepError, drop_page_cache


def new_row(path, note=""):
    return {"path": path, "cold": None, "warm": None, "note": note, "error": None}


def run_guarded(b, label, fn):
    """Runs fn(b) -> rows; a StepError becomes one row carrying the error."""
    try:
        return fn(b)
    except StepError as e:
        b.log(f"{label}: FAILED: {e}")
        row = new_row(label)
        row["error"] = str(e)
        return [row]
    finally:
        b.procs.unmount_all()


# ---------------------------------------------------------------------------
# The origin's ceiling: bench/ufs_get against the same objects through the
# same delay proxy, best objects/s at any concurrency.

def origin_ceiling(b):
    row = new_row("origin ceiling (ufs_get)", "best GET objects/s at any concurrency "
                  + ",".join(str(x) for x in b.ceiling_levels))
    row["cold"] = b.ufs_ceiling()
    return [row]


# ---------------------------------------------------------------------------
# Local disk: the same tree on the machine's own file system (the upper bound).

def local_disk(b):
    row = new_row("local disk (ext4)", "same tree on the local file system")
    if drop_page_cache():
        row["cold"] = b.epoch(b.local_root, "local-cold", origin=False)
    else:
        row["note"] += "; cold not measured (dropping the page cache needs root)"
    row["warm"] = b.epoch(b.local_root, "local-warm", origin=False)
    return [row]


# ---------------------------------------------------------------------------
# s3fs-fuse (Debian's s3fs), plain and with its local disk cache.

def s3fs(b, use_cache):
    name = "s3fs-cache" if use_cache else "s3fs"
    passwd = private_file(b, "s3fs.passwd",
                          f"{b.env['AWS_ACCESS_KEY_ID']}:{b.env['AWS_SECRET_ACCESS_KEY']}\n")
    opts = ["ro", "use_path_request_style", "endpoint=us-east-1", f"url={b.endpoint}",
            f"passwd_file={passwd}", "parallel_count=16", "multireq_max=16",
            "stat_cache_expire=86400", "max_stat_cache_size=1000000",
            "enable_noobj_cache"]
    note = "ro, stat cache 24h, parallel_count/multireq_max 16"
    if use_cache:
        opts.append(f"use_cache={cache_dir(b, name + '-cache')}")
        note += ", use_cache=<local dir>"
    mnt = fresh_dir(b, name + "-mnt")
    argv = ["s3fs", f"{b.bucket}:/{b.prefix}", mnt, "-f"]
    for o in opts:
        argv += ["-o", o]
    return [_fuse_peer(b, name, argv, mnt,
                       new_row("s3fs use_cache" if use_cache else "s3fs", note))]


def _fuse_peer(b, name, argv, mnt, row):
    """Starts a peer's FUSE daemon (argv, mounting on mnt), runs its cold and warm
    epochs into row, unmounts and stops it. With --peer-max-files both epochs
    read the same first files of one shuffled order."""
    p = b.procs.start(name, argv, env=b.env)
    b.procs.add_mount(mnt)
    b.procs.wait_until(p, lambda: is_mounted(mnt) and lists(mnt), f"{name} mount")
    cap = b.args.peer_max_files or None
    seed = b.args.seed * 1000 + 999 if cap else None
    if cap:
        row["note"] += f"; epochs capped at {cap} files (the same files cold and warm)"
    try:
        row["cold"] = b.epoch(mnt, name + "-cold", max_files=cap, seed=seed, cache_pids=[p.pid])
        row["warm"] = b.epoch(mnt, name + "-warm", max_files=cap, seed=seed, cache_pids=[p.pid])
    finally:
        b.procs.unmount(mnt)
        b.procs.stop(p)
    return row


# ---------------------------------------------------------------------------
# rclone mount (Debian's rclone) with the full VFS cache.

def rclone(b):
    conf = private_file(b, "rclone.conf",
                         "[origin]\ntype = s3\nprovider = Other\nenv_auth = true\n"
                         f"endpoint = {b.endpoint}\nforce_path_style = true\nregion = us-east-1\n")
    opts = ["--read-only", "--vfs-cache-mode", "full", "--dir-cache-time", "24h",
            "--attr-timeout", "24h", "--vfs-cache-max-age", "24h", "--transfers", "16",
            "--buffer-size", "1M", "--use-server-modtime", "--no-checksum",
            "--s3-no-head-object"]
    mnt = fresh_dir(b, "rclone-mnt")
    argv = ["rclone", "mount", f"origin:{b.bucket}/{b.prefix}", mnt, "--config", conf,
            "--cache-dir", cache_dir(b, "rclone-cache"), *opts]
    return [_fuse_peer(b, "rclone", argv, mnt, new_row(
        "rclone mount --vfs-cache-mode full",
        "read-only, dir/attr cache 24h, --transfers 16, --buffer-size 1M, "
        "--no-checksum, --s3-no-head-object"))]


# ---------------------------------------------------------------------------
# Granary.

def granary_rows(b):
    rows = []

    # 1. Read-through: a plain mount, first epoch cold, second epoch warm.
    # The caches are deleted together at the end (see benchlib.mounts.cache_dir).
    cache = cache_dir(b, "granary-cache-rt")
    rows.append(_two_epochs(GranaryMount(b, "granary-rt", cache), new_row(
        "Granary read-through", "plain mount (defaults: --read-mode auto picks cached for a "
        "data set this size): first epoch fetches on demand")))

    # 2. mount --load: the job starts right away; demand reads + background load.
    cache = cache_dir(b, "granary-cache-ml")
    rows.append(_two_epochs(
        GranaryMount(b, "granary-ml", cache, ["--load"]),
        new_row("Granary mount --load", "epoch starts at once; background load fills the cache"),
        between=GranaryMount.wait_loaded, loads_at_mount=True))

    # 3. `granary load` first (the DataLoad pattern), then the epoch.
    cache = cache_dir(b, "granary-cache-ld")
    g = GranaryMount(b, "granary-ld", cache)
    g.mount()
    row = new_row("Granary after `granary load`", "cold column: the load itself (files/s)")
    try:
        before = b.origin_requests()
        cpu = CpuMeter([g.pid()], b.origin_pids)
        secs = g.load()
        cache_cpu, origin_cpu = cpu.stop()
        reqs = b.origin_requests() - before
        s = g.status()
        row["cold"] = {"images_per_s": b.files / secs, "mb_per_s": b.total_bytes / secs / 1e6,
                       "p99_ms": None, "files": b.files, "errors": 0,
                       "origin_requests_per_image": reqs / b.files, "seconds": secs,
                       "cache_cpu_ms_per_image": per_image_ms(cache_cpu, b.files),
                       "origin_cpu_ms_per_image": per_image_ms(origin_cpu, b.files)}
        row["note"] += f"; {100 * float(s.get('cached_ratio', 0)):.1f}% cached after the load"
        row["warm"] = b.epoch(g.mnt, "granary-ld-warm", cache_pids=[g.pid()])
    finally:
        g.umount()
    rows.append(row)

    # 4. Fresh remount of that warm cache with an empty page cache (a restart).
    dropped = drop_page_cache()
    rows.append(_two_epochs(GranaryMount(b, "granary-re", cache), new_row(
        "Granary fresh remount", "warm cache on disk, empty page cache" if dropped
        else "warm cache on disk (page cache not dropped: not root)")))

    # 5./6. The same warm cache through passthrough, over /dev/fuse and io_uring
    # (--read-mode auto picks cached for a data set this size).
    rows.append(run_guarded(b, "Granary remount, --read-mode passthrough",
                            lambda b: [_remount_variant(b, cache, "passthrough",
                                                        ["--read-mode", "passthrough"],
                                                        "kernel passthrough to the cache files; "
                                                        "an OPEN and a RELEASE per file")])[0])
    rows.append(run_guarded(b, "Granary remount, passthrough over io_uring",
                            lambda b: [_uring_variant(b, cache)])[0])
    delete_caches(b)
    return rows


def _two_epochs(g, row, between=None, loads_at_mount=False):
    """Mounts g, runs a first and a second epoch into row (between(g) in between), unmounts.

    loads_at_mount (mount --load): the cold epoch starts without a sync (the
    mount's own came before the load started), and its origin requests are
    the GETs the daemon made since it started (the load fetches before the
    epoch does); the mount's listing is not counted, as for every other row.
    """
    g.mount()
    try:
        pid = g.pid()
        row["cold"] = g.b.epoch(g.mnt, g.name + "-cold", settle_first=not loads_at_mount,
                                cache_pids=[pid])
        if loads_at_mount:
            row["cold"]["origin_requests_per_image"] = (
                int(g.status()["origin_requests"]) / g.b.files)
        if between:
            between(g)
        row["warm"] = g.b.epoch(g.mnt, g.name + "-warm", cache_pids=[pid])
    finally:
        g.umount()
    return row


def _remount_variant(b, cache, name, extra, note):
    label = {"passthrough": "Granary remount, --read-mode passthrough",
             "uring": "Granary remount, passthrough over io_uring"}[name]
    drop_page_cache()
    return _two_epochs(GranaryMount(b, "granary-" + name, cache, extra), new_row(label, note))


URING_PARAM = "/sys/module/fuse/parameters/enable_uring"


def _uring_variant(b, cache):
    """FUSE over io_uring needs fuse.enable_uring=Y: switched on for this row, then restored."""
    if not os.path.exists(URING_PARAM):
        raise StepError(f"the kernel has no {URING_PARAM} (FUSE over io_uring needs Linux >= 6.14)")
    with open(URING_PARAM) as f:
        before = f.read().strip()
    try:
        if before != "Y":
            try:
                with open(URING_PARAM, "w") as f:
                    f.write("Y\n")
            except OSError as e:
                raise StepError(f"cannot switch on {URING_PARAM} (needs root): {e}") from None
        note = "passthrough over FUSE-over-io_uring" + (
            f" (fuse.enable_uring switched from {before} to Y for this row)" if before != "Y" else "")
        return _remount_variant(b, cache, "uring",
                                ["--read-mode", "passthrough", "--fuse-transport", "uring"], note)
    finally:
        if before != "Y":
            with open(URING_PARAM, "w") as f:
                f.write(before + "\n")
