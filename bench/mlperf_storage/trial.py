"""One training run of N simulated accelerators, measured as DLIO measures it.

Each accelerator is a process (forked from the driver) with its own loader
(loaders.py) over its share of the data set, split as DLIO splits it: the
PyTorch loader gets a contiguous slice of the sample indices, shuffled with
seed 123 + epoch when the workload shuffles samples; tf.data gets every N-th
file of the (seeded, shuffled when the workload says so) file list, or every
file and every N-th record when there are fewer files than accelerators;
DALI's reader (imagenet-tfrecord) gets every N-th shard the same way.

A step: wait for the next batch, sleep the workload's computation time for
this accelerator type (DLIO's compute is a sleep too), then a barrier across
all accelerators (DLIO's stand-in for the all-reduce). Steps per epoch:
floor(samples / batch / N). As in DLIO's statscounter, per accelerator
    AU = sum(compute time of steps k+1..) / (wall time of the epoch - steps 1..k)
where a step's time runs from the start of loading to the end of its compute
and k is DLIO's metric.exclude_start_steps; the run's AU is the mean over
accelerators. Throughput counts the samples of the steps AU counts over the
same time, summed over accelerators; MB/s is samples/s x record length / 2**20
(DLIO's nominal figure); bytes/s is what the loaders really read, over the
run's wall time.

k: DLIO's default is 1, and MLPerf runs have at least 500 steps. The few steps
a data set on one small machine allows would count the pipeline's start as
compute: the loader reads its prefetch depth of batches at once while step 1
waits, and steps 2..depth then find their batch ready. So k defaults to that
depth (loaders.prefetch_depth: 4 batches for all three workloads), and a run
needs k + 2 steps.

Single-threaded in the driver; each child runs its own loader threads.
"""
import dataclasses
import math
import multiprocessing
import resource
import threading
import time

import numpy as np

from bench.mlperf_storage.loaders import ApiFiles, DaliLoader, PosixFiles, TFLoader, TorchLoader
from bench.mlperf_storage.workloads import DLIO_SEED, steps_per_epoch


@dataclasses.dataclass
class TrialSpec:
    workload: object  # workloads.Workload
    manifest: list  # [(relative path, bytes)] of the training files, in index order
    source: tuple  # ("posix", root) or ("api", mount point, run dir)
    compute_s: float  # computation time per step
    verify: bool  # check every data CRC (np.load and TensorFlow do)
    exclude_start_steps: int = 1  # DLIO's metric.exclude_start_steps
    epoch: int = 1
    step_timeout_s: float = 600.0
    records: dict = None  # {relative path: records} of the "dali" workload's shards


def plan(spec, n):
    """(per-rank work, steps, record_shard flag) for n accelerators.

    Per rank: the TorchLoader's sample list [(rel, size)] or the TFLoader's
    file shard; steps: the same for every rank (a rank with fewer batches
    than the others would leave them waiting at the barrier)."""
    w, files = spec.workload, spec.manifest
    steps = steps_per_epoch(w, len(files), n)
    if w.fmt == "npz":
        total = len(files) * w.samples_per_file
        per = math.ceil(total / n)
        work = []
        for rank in range(n):
            idx = np.arange(rank * per, min((rank + 1) * per, total))
            if w.shuffle_samples:
                np.random.RandomState(DLIO_SEED + spec.epoch).shuffle(idx)
            work.append([files[i // w.samples_per_file] for i in idx])
        steps = min([steps] + [len(s) // w.batch_size for s in work])
        return work, steps, False
    if w.fmt == "dali":
        return _plan_shards(spec, n)
    order = list(files)
    if w.shuffle_files:
        np.random.RandomState(DLIO_SEED + spec.epoch).shuffle(order)
    if len(order) >= n:
        return [order[rank::n] for rank in range(n)], steps, False
    return [order] * n, steps, True


def _plan_shards(spec, n):
    """plan() for DALI's reader: rank r gets shards r, r + n, ...; every shard,
    reading every n-th record, when there are fewer shards than ranks."""
    w, shards = spec.workload, spec.manifest
    total = sum(spec.records.values())
    steps = math.floor(total / w.batch_size / n)
    if len(shards) >= n:
        work = [shards[rank::n] for rank in range(n)]
        least = min(sum(spec.records[rel] for rel, _ in s) for s in work)
        return work, min(steps, least // w.batch_size), False
    return [list(shards)] * n, min(steps, total // n // w.batch_size), True


def _rank_main(rank, n, spec, work, steps, record_shard, barrier, conn):
    loader = None
    try:
        source = spec.source
        files = PosixFiles(source[1]) if source[0] == "posix" else ApiFiles(source[1], source[2])
        w = spec.workload
        if w.fmt == "npz":
            loader = TorchLoader(files, work, w, steps, spec.verify)
        else:
            kind = DaliLoader if w.fmt == "dali" else TFLoader
            loader = kind(files, work, w, steps, spec.verify, (n, rank) if record_shard else None)
        before = resource.getrusage(resource.RUSAGE_SELF)
        barrier.wait(spec.step_timeout_s)
        t0 = time.monotonic()
        loader.start()
        compute, proc = [], []
        for _ in range(steps):
            t_load = time.monotonic()
            loader.next_batch()
            t_compute = time.monotonic()
            time.sleep(spec.compute_s)
            t_done = time.monotonic()
            compute.append(t_done - t_compute)
            proc.append(t_done - t_load)
            barrier.wait(spec.step_timeout_s)
        t1 = time.monotonic()
        loader.close()
        after = resource.getrusage(resource.RUSAGE_SELF)
        k = spec.exclude_start_steps
        wall = t1 - t0 - sum(proc[:k])
        conn.send({"rank": rank, "t0": t0, "t1": t1, "steps": steps, "wall_s": wall,
                   "compute_s": sum(compute[k:]), "au": sum(compute[k:]) / wall,
                   "samples": (steps - k) * w.batch_size, "bytes": loader.bytes_read(),
                   "cpu_s": (after.ru_utime + after.ru_stime
                             - before.ru_utime - before.ru_stime), "error": None})
    except Exception as e:  # noqa: BLE001 (reported to the driver; the others stop too)
        barrier.abort()
        broken = isinstance(e, threading.BrokenBarrierError)
        msg = "another accelerator failed" if broken else str(e)
        conn.send({"rank": rank, "error": msg or type(e).__name__})
    finally:
        if loader:
            loader.close()
        conn.close()


def too_few_steps(spec, n, steps=None):
    """run()'s answer for n accelerators, "skipped" set when the data set has
    too few steps for them; nothing is read (the driver asks before it sets up a path)."""
    steps = plan(spec, n)[1] if steps is None else steps
    out = {"accelerators": n, "steps": steps, "error": None, "skipped": None}
    if steps < spec.exclude_start_steps + 2:
        out["skipped"] = (f"{steps} steps per accelerator, AU needs "
                          f"{spec.exclude_start_steps + 2}: data set too small")
    return out


def run(spec, n):
    """Runs spec with n accelerators; returns the run's figures, or one with
    "error" set (a failed read, wrong bytes, a timeout) or "skipped" (the data
    set has fewer than 2 steps for n accelerators)."""
    work, steps, record_shard = plan(spec, n)
    out = too_few_steps(spec, n, steps)
    if out["skipped"]:
        return out
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(n)
    procs, conns = [], []
    for rank in range(n):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_rank_main, daemon=True,
                        args=(rank, n, spec, work[rank], steps, record_shard, barrier, send))
        p.start()
        send.close()
        procs.append(p)
        conns.append(recv)
    deadline = time.monotonic() + spec.step_timeout_s * (steps + 1)
    try:
        ranks = [_receive(c, deadline) for c in conns]
    finally:
        for p in procs:  # each stopped by its own pid; none outlives the run
            p.join(timeout=max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    errors = [r["error"] for r in ranks if r["error"]]
    if errors:
        real = [e for e in errors if e != "another accelerator failed"]
        out["error"] = (real or errors)[0]
        return out
    return _aggregate(out, ranks, spec.workload)


def _receive(conn, deadline):
    try:
        if conn.poll(max(0.0, deadline - time.monotonic())):
            return conn.recv()
        return {"error": "timed out"}
    except (EOFError, OSError) as e:
        return {"error": f"accelerator process died ({type(e).__name__})"}


def _aggregate(out, ranks, w):
    wall = max(r["t1"] for r in ranks) - min(r["t0"] for r in ranks)
    samples_per_s = sum(r["samples"] / r["wall_s"] for r in ranks)
    total_bytes = sum(r["bytes"] for r in ranks)
    out.update({
        "au": sum(r["au"] for r in ranks) / len(ranks),
        "au_min": min(r["au"] for r in ranks),
        "samples_per_s": samples_per_s,
        "dlio_mib_per_s": samples_per_s * w.record_length / 2**20,
        "bytes": total_bytes,
        "wall_s": wall,
        "gib_per_s": total_bytes / wall / 2**30,
        "reader_cpu_s": sum(r["cpu_s"] for r in ranks),
    })
    return out
