"""The rows of bench/large_read/large_read.py, one function per --rows key.

Each function takes the driver's Context and returns row dicts (what
Context.epoch returns, plus "note", "cached" and "error"). A failing step
raises StepError; run_rows turns it into a row carrying the error and goes on.
Every mount a row makes is unmounted when the row ends, also on failure.
"""
import os
import shutil
import time
import urllib.request

from bench.benchlib.mountinfo import is_mounted, unmount
from bench.benchlib.mounts import GranaryMount
from bench.benchlib.procs import StepError, free_port

ALL_ROWS = ["get-stream", "get-ranges", "ext4-cold", "ext4-warm", "granary", "granary-load",
            "granary-passthrough", "granary-remount", "granary-remount-passthrough"]

# Prometheus samples of the daemon's /metrics that the rows report (name, label
# or None); a build without one of them reports it as absent.
METRICS = {"admit_skipped": ("granary_admissions_skipped_total", None),
           "admission_waits": ("granary_admission_waits_total", None),
           "readahead_started": ("granary_readahead_blocks_total", 'result="started"'),
           "readahead_queued": ("granary_readahead_blocks_total", 'result="queued"'),
           "readahead_dropped": ("granary_readahead_blocks_total", 'result="dropped"'),
           "admissions": ("granary_cache_admissions_total", None),
           "read_errors": ("granary_read_errors_total", None)}
ADMISSION_QUEUE = "granary_admission_queue_bytes"
STATUS = ("origin_requests", "origin_bytes", "origin_errors", "cached_files", "cached_bytes",
          "passthrough_opens", "userspace_opens")


class Mount(GranaryMount):
    """A `granary mount` of the bench's bucket with its metrics endpoint on."""

    def __init__(self, ctx, name, cache, extra=()):
        self.metrics_port = free_port()
        super().__init__(ctx.b, f"{name}-{ctx.delay}", cache,
                         ["--metrics-addr", f"127.0.0.1:{self.metrics_port}", *extra])

    def mount(self):
        """Mounts; the mount is recorded first, so that a signal that ends the
        run while `granary mount` runs still unmounts it (and a mount that
        failed is unmounted harmlessly)."""
        self.mounted, self.launched = True, False
        self.b.procs.add_mount(self.mnt, self.umount)
        super().mount()
        self.launched = True

    def umount(self):
        """Unmounts. When `granary mount` was cut short, its daemon may still
        be mounting: waits up to 10 s for the mount to appear first."""
        if self.mounted and not self.launched:
            deadline = time.monotonic() + 10
            while not is_mounted(self.mnt) and time.monotonic() < deadline:
                time.sleep(0.1)
        super().umount()
        unmount(self.mnt)

    def metrics(self):
        """The daemon's /metrics text, or None when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                        timeout=5) as r:
                return r.read().decode()
        except OSError:
            return None

    def counters(self):
        """Engine counters: those of `granary status --json` (STATUS) and the
        /metrics samples (METRICS) this build has."""
        s = self.status()
        out = {k: int(s.get(k, 0)) for k in STATUS}
        text = self.metrics() or ""
        for key, (name, label) in METRICS.items():
            v = metric(text, name, label)
            if v is not None:
                out[key] = v
        return out

    def cached(self, timeout=300):
        """('N/M files, R%', status): the files completely cached, from `granary
        status --json`, once the fetched blocks waiting for admission (the
        /metrics gauge) are written; the text adds how long that took."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if not metric(self.metrics() or "", ADMISSION_QUEUE):
                break
            time.sleep(0.1)
        waited = time.monotonic() - t0
        s = self.status()
        text = (f"{s.get('cached_files', 0)}/{s.get('ufs_files', 0)} files, "
                f"{100 * float(s.get('cached_ratio', 0)):.1f}%")
        return text + (f" ({waited:.1f} s after)" if waited >= 0.1 else ""), s


def metric(text, name, label=None):
    """The sum of the samples of `name` (with `label` among their labels, if
    given); None when there is none."""
    total = None
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        base, _, labels = head.partition("{")
        if base == name and (label is None or label in labels):
            total = (total or 0) + int(float(value))
    return total


def run_rows(ctx, wanted):
    """Runs the wanted rows in ALL_ROWS order; returns {"rows": [...]}."""
    ctx.warm_cache = None  # the granary row's cache, for granary-remount
    ctx.last_row = None
    out = []
    try:
        for key in ALL_ROWS:
            if key not in wanted:
                continue
            ctx.log(f"--- {key} ({ctx.delay})")
            try:
                out += ROWS[key](ctx)
            except StepError as e:
                ctx.log(f"{key}: FAILED: {e}")
                out.append({"row": key, "error": str(e)})
            finally:
                ctx.b.procs.unmount_all()
            ctx.last_row = key
    finally:
        if ctx.warm_cache:
            shutil.rmtree(ctx.warm_cache, ignore_errors=True)
    return {"rows": out}


def _fresh_cache(ctx, name):
    path = os.path.join(ctx.work, f"{name}-cache-{ctx.delay}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def _row(r, note=""):
    """An epoch's figures as a table row (no error) with note added."""
    r["note"] = _sep(r.get("note", ""), note)
    r.setdefault("cached", None)
    r["error"] = None
    return r


# ---------------------------------------------------------------------------
# No cache: the origin's own rate, and local disk.

def get_stream(ctx):
    note = ctx.cold_start(reads_origin=True)
    return [_row(ctx.epoch("get-stream", ("get", 0)), _sep("one GET per object", note))]


def get_ranges(ctx):
    a = ctx.args
    note = ctx.cold_start(reads_origin=True)
    r = ctx.epoch("get-ranges", ("get", a.range_mib))
    return [_row(r, _sep(f"{a.range_parallel} x {a.range_mib} MiB ranged GETs in flight "
                           "per object", note))]


def ext4_cold(ctx):
    note = ctx.cold_start(reads_origin=False)
    return [_row(ctx.epoch("ext4-cold", ("dir", ctx.local_root)), note)]


def ext4_warm(ctx):
    note = ""
    if ctx.last_row != "ext4-cold":
        ctx.epoch("ext4 warm-up", ("dir", ctx.local_root))
        note = "after an unmeasured pass"
    return [_row(ctx.epoch("ext4-warm", ("dir", ctx.local_root)), note)]


# ---------------------------------------------------------------------------
# Granary.

def _cold_then_warm(ctx, m, name, note):
    """Mounts m over an empty cache, reads a cold and a warm epoch, unmounts."""
    note = _sep(ctx.cold_start(reads_origin=True), note)
    m.mount()
    try:
        cold = ctx.epoch(f"{name}-cold", ("dir", m.mnt), mount=m)
        cold["cached"], s = m.cached()
        mode = f"read mode {s.get('read_mode', '?')}"
        warm = ctx.epoch(f"{name}-warm", ("dir", m.mnt), mount=m)
    finally:
        m.umount()
    return [_row(cold, _sep(note, mode)), _row(warm, mode)]


def granary(ctx):
    cache = _fresh_cache(ctx, "granary")
    ctx.warm_cache = cache
    return _cold_then_warm(ctx, Mount(ctx, "granary", cache), "granary",
                           "read-through, default flags")


def granary_passthrough(ctx):
    cache = _fresh_cache(ctx, "passthrough")
    try:
        m = Mount(ctx, "passthrough", cache, ["--read-mode", "passthrough"])
        return _cold_then_warm(ctx, m, "granary-passthrough", "--read-mode passthrough")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def granary_load(ctx):
    """mount --load: the epoch starts at once while the load fetches; origin
    traffic is counted from before the mount."""
    cache = _fresh_cache(ctx, "load")
    note = ctx.cold_start(reads_origin=True)
    m = Mount(ctx, "load", cache, ["--load"])
    try:
        since = (ctx.proxy_stats(), {})
        m.mount()
        r = ctx.epoch("granary-load", ("dir", m.mnt), mount=m, settle_first=False, since=since)
        t0 = time.monotonic()
        m.wait_loaded()
        load_s = time.monotonic() - t0
        r["cached"], _ = m.cached()
        after = ctx.proxy_stats()
        total = after["bytes_to_client"] - since[0]["bytes_to_client"]
        note = _sep(note, f"origin traffic from before the mount; the load ended "
                          f"{load_s:.1f} s after the epoch, with "
                          f"{after['requests'] - since[0]['requests']} requests and "
                          f"{total / ctx.total_bytes:.2f}x bytes in all")
        return [_row(r, note)]
    finally:
        m.umount()
        shutil.rmtree(cache, ignore_errors=True)


def granary_remount(ctx, name="granary-remount", extra=()):
    """A fresh mount (with `extra` flags) over the granary row's warm cache,
    page cache dropped."""
    note = ""
    if not ctx.warm_cache:
        ctx.warm_cache = _fresh_cache(ctx, "granary")
        m = Mount(ctx, "fill", ctx.warm_cache)
        m.mount()
        try:
            m.load()
        finally:
            m.umount()
        note = "cache filled by `granary load`"
    m = Mount(ctx, "remount", ctx.warm_cache, list(extra))
    note = _sep(note, ctx.cold_start(reads_origin=False))
    m.mount()
    try:
        r = ctx.epoch(name, ("dir", m.mnt), mount=m)
        _, s = m.cached()
        note = _sep(note, f"read mode {s.get('read_mode', '?')}")
    finally:
        m.umount()
    return [_row(r, note)]


def _sep(*parts):
    return "; ".join(p for p in parts if p)


ROWS = {"get-stream": get_stream, "get-ranges": get_ranges, "ext4-cold": ext4_cold,
        "ext4-warm": ext4_warm, "granary": granary, "granary-load": granary_load,
        "granary-passthrough": granary_passthrough, "granary-remount": granary_remount,
        "granary-remount-passthrough": lambda ctx: granary_remount(
            ctx, "granary-remount-passthrough", ["--read-mode", "passthrough"])}
