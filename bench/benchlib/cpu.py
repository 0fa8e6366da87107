"""CPU time from /proc: of one process, of a process and everything under it,
of the whole machine; and CpuMeter, which measures two sets of processes
(the cache's and the origin's) across one step. Reads only; a process that
exits meanwhile is left out or reported as None, never raised."""
import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid):
    """The fields of /proc/<pid>/stat after comm (which may hold spaces and
    parentheses), so that field N of proc(5) is [N - 3]; None when pid is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def cpu_seconds(pid):
    """User + system CPU seconds of pid so far, all its threads (also exited ones)
    included: utime + stime. None when pid is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of proc(5)


def with_children(pid):
    """pid and every process under it now (a mount daemon may do its work in a
    child of the process it started as, so its CPU is the sum over all of
    them). Processes that exit meanwhile are left out."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def tree_cpu_seconds(pid):
    """User + system CPU seconds so far of pid and of every process under it
    (`granary mount --foreground` may leave the serving to a child: a mount
    holder runs the daemon as its child), children it has reaped included
    (cutime + cstime); None when pid is gone."""
    total = None
    for p in with_children(pid):
        fields = _stat_fields(p)
        if fields is None:
            if p == pid:
                return None
            continue  # a child that exited meanwhile: its parent's cutime has it
        ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        total = (total or 0) + ticks / CLOCK_TICKS
    return total


def machine_cpu():
    """(busy, total) jiffies of every CPU together, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def page_cache_bytes():
    """Cached + Buffers from /proc/meminfo: what an epoch adds to the page cache."""
    total = 0
    with open("/proc/meminfo") as f:
        for ln in f:
            if ln.startswith(("Cached:", "Buffers:")):
                total += int(ln.split()[1]) * 1024
    return total


class CpuMeter:
    """CPU seconds (user + system, all threads) two sets of processes spend from
    construction to stop(): the cache's and the origin's (server and proxy).
    A set is None when it is empty or one of its processes is gone."""

    def __init__(self, cache_pids, origin_pids):
        # A mount's daemon works in a child of the process that mounted (its
        # holder): a cache pid counts with every process under it.
        # dict.fromkeys: a pid given with its children counts once.
        self.sets = [list(dict.fromkeys(p for pid in cache_pids for p in with_children(pid))),
                     list(origin_pids)]
        self.before = [self._sum(pids) for pids in self.sets]

    @staticmethod
    def _sum(pids):
        vals = [cpu_seconds(p) for p in pids]
        return None if not vals or None in vals else sum(vals)

    def stop(self):
        after = [self._sum(pids) for pids in self.sets]
        return tuple(None if a is None or b is None else a - b
                     for a, b in zip(after, self.before))


def per_image_ms(cpu_s, files):
    return None if cpu_s is None or not files else 1000 * cpu_s / files
