#!/usr/bin/python3
"""One measured epoch from Python, in a process of its own: the worker of
bench/python/pybench.py (run it with Debian's /usr/bin/python3, which has
torch, torchvision, PIL and the granary module).

Read modes (--threads readers, whole files, the order of train_list.txt
shuffled by --seed, each thread taking the next file of the order):
  file     open()+read() under --root (local ext4 or a FUSE mount)
  api      granary.Dataset(--root = a source URI, cache_dir=--cache-dir), in
           this process; --prefetch W hands the shuffled order to the engine
           first (ds.prefetch(order, window=W)), then the threads read it
  attach   granary.Dataset(--root = a path in a granary mount): attached to
           its daemon (cache files' descriptors over its socket, pread)

DataLoader modes (PIL decode + a small transform, --workers processes,
--batch images a batch, RandomSampler seeded by --seed):
  dl-torchvision  torchvision.datasets.ImageFolder(--root)
  dl-granary      granary.torch.ImageFolder(--root) (a path in a mount), or
                  with --cache-dir a granary.Dataset(--root, list_file=...)
                  opened in this process (workers attach to its socket);
                  --prefetch W wraps the sampler in PrefetchSampler

Runs --warmup unmeasured epochs, then --epochs measured ones, in this one
process (a training job's later epochs: an in-process dataset has verified
its cache files by then, as a daemon has after its first epoch), each in a
new shuffled order. Prints one JSON object for the fastest measured epoch
(all of them under runs) and writes it to --json: images_per_s, mb_per_s,
p50_ms/p99_ms (per-file read latency; not for DataLoader modes), files,
errors, open_s (opening the dataset, not in the epoch's time), and with
--origin-stats epoch_origin_requests (requests the origin saw during the
epoch; an in-process open lists the origin before, one LIST per directory).

Thread safety: readers share only an itertools.count (atomic under the GIL)
and append to their own latency lists.
"""
import argparse
import io
import itertools
import json
import os
import random
import sys
import threading
import time


def read_list(path):
    """[(relative path, label)] of a PaddleClas train_list.txt."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                out.append((parts[0], int(parts[1])))
    return out


def shuffled(n, seed, limit=0):
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order[:limit] if limit else order


def open_dataset(args, samples_file):
    """A granary.Dataset for --mode api/attach/dl-granary; (dataset, seconds to open)."""
    import granary
    t0 = time.perf_counter()
    if args.cache_dir:
        opts = {"endpoint": args.endpoint} if args.endpoint else {}
        ds = granary.Dataset(args.root, cache_dir=args.cache_dir, list_file=samples_file,
                             serve=args.mode.startswith("dl-"), **opts)
    else:
        tuning = {}
        if args.connections:
            tuning["connections"] = args.connections
        if args.max_open_files:
            tuning["max_open_files"] = args.max_open_files
        if args.no_direct:
            tuning["direct"] = False
        ds = granary.Dataset(args.root, list_file=samples_file, **tuning)
    return ds, time.perf_counter() - t0


def origin_requests(url):
    """The delay proxy's request counter (None without --origin-stats)."""
    if not url:
        return None
    import urllib.request
    with urllib.request.urlopen(url, timeout=5) as r:
        return int(json.loads(r.read())["requests"])


def run_readers(threads, order, read_one):
    """Reads order with `threads` threads; (seconds, bytes, latencies in s, errors)."""
    counter = itertools.count()
    lats = [[] for _ in range(threads)]
    sizes = [0] * threads
    errors = [0] * threads
    first_error = []
    start = threading.Barrier(threads + 1)

    def reader(k):
        mine = lats[k]
        start.wait()
        while True:
            i = next(counter)
            if i >= len(order):
                return
            t0 = time.perf_counter()
            try:
                sizes[k] += read_one(order[i])
            except OSError as e:
                errors[k] += 1
                if not first_error:
                    first_error.append(repr(e))
                continue
            mine.append(time.perf_counter() - t0)

    ts = [threading.Thread(target=reader, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    if first_error:
        print(f"py_epoch: first error: {first_error[0]}", file=sys.stderr)
    return secs, sum(sizes), sorted(itertools.chain.from_iterable(lats)), sum(errors)


def read_epochs(args, samples):
    """--warmup + --epochs epochs over one opened dataset; [figures of each]."""
    open_s = 0.0
    ds = None
    if args.mode == "file":
        paths = [os.path.join(args.root, p) for p, _ in samples]

        def read_one(i):
            with open(paths[i], "rb") as f:
                return len(f.read())
    else:
        ds, open_s = open_dataset(args, args.list)
        if len(ds) != len(samples):
            raise SystemExit(f"py_epoch: the dataset has {len(ds)} samples, the list {len(samples)}")

        def read_one(i):
            return len(ds[i])
    out = []
    for e in range(args.warmup + args.epochs):
        order = shuffled(len(samples), args.seed + e, args.max_files)
        extra = {}
        before = origin_requests(args.origin_stats)
        if args.prefetch:
            t0 = time.perf_counter()
            ds.prefetch(order, window=args.prefetch)
            extra["prefetch_call_s"] = time.perf_counter() - t0
        secs, nbytes, lats, errors = run_readers(args.threads, order, read_one)
        if before is not None:
            extra["epoch_origin_requests"] = origin_requests(args.origin_stats) - before
        if args.prefetch:
            extra["prefetch_status"] = ds.prefetch_status()
        r = figures(len(order), nbytes, secs, errors, open_s)
        if lats:
            r["p50_ms"] = lats[len(lats) // 2] * 1000
            r["p99_ms"] = lats[min(len(lats) - 1, int(len(lats) * 0.99))] * 1000
        r.update(extra)
        out.append(r)
    return out


def figures(files, nbytes, secs, errors, open_s):
    return {"files": files, "bytes": nbytes, "seconds": secs, "errors": errors,
            "images_per_s": files / secs, "mb_per_s": nbytes / secs / 1e6,
            "p50_ms": None, "p99_ms": None, "open_s": open_s}


class LabeledImages:
    """(PIL image through transform, label) from a granary.Dataset built with list_file."""

    def __init__(self, ds, transform):
        self.ds, self.transform = ds, transform

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        from PIL import Image
        img = Image.open(io.BytesIO(self.ds[i])).convert("RGB")
        return self.transform(img), self.ds.label(i)

    def prefetch(self, indices, window=256):
        self.ds.prefetch(indices, window=window)


def loader_epochs(args, samples):
    """--warmup + --epochs DataLoader epochs over one dataset; [figures of each]."""
    import torch
    import torchvision
    from torch.utils.data import DataLoader, RandomSampler, SubsetRandomSampler
    from torchvision import transforms as T
    torch.set_num_threads(1)
    # Small on purpose: the row measures reading + decoding, not augmentation.
    tf = T.Compose([T.RandomResizedCrop(64, antialias=True), T.ToTensor()])
    t0 = time.perf_counter()
    if args.mode == "dl-torchvision":
        data = torchvision.datasets.ImageFolder(args.root, transform=tf)
    elif args.cache_dir:
        ds, _ = open_dataset(args, args.list)
        data = LabeledImages(ds, tf)
    else:
        import granary.torch
        data = granary.torch.ImageFolder(args.root, transform=tf)
    open_s = time.perf_counter() - t0
    if len(data) != len(samples):
        raise SystemExit(f"py_epoch: the data set has {len(data)} samples, the list {len(samples)}")
    # --max-files: every epoch permutes the same subset (its files are the
    # warm-up's files too).
    subset = shuffled(len(samples), args.seed, args.max_files) if args.max_files else None
    sizes = [os.path.getsize(os.path.join(args.local_root, p)) for p, _ in samples] \
        if args.local_root else [0] * len(samples)
    nbytes = sum(sizes[i] for i in subset) if subset else sum(sizes)
    want = len(subset) if subset else len(samples)
    gen = torch.Generator().manual_seed(args.seed)
    sampler = SubsetRandomSampler(subset, generator=gen) if subset \
        else RandomSampler(data, generator=gen)
    if args.prefetch:
        from granary.torch import PrefetchSampler
        sampler = PrefetchSampler(data, sampler, window=args.prefetch)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler,
                        num_workers=args.workers, multiprocessing_context="fork")
    out = []
    for _ in range(args.warmup + args.epochs):
        images = 0
        before = origin_requests(args.origin_stats)
        t0 = time.perf_counter()
        for batch, _ in loader:
            images += batch.shape[0]
        secs = time.perf_counter() - t0
        r = figures(images, nbytes, secs, want - images, open_s)
        if before is not None:
            r["epoch_origin_requests"] = origin_requests(args.origin_stats) - before
        out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", required=True,
                    choices=["file", "api", "attach", "dl-torchvision", "dl-granary"])
    ap.add_argument("--root", required=True, help="directory, mount path or source URI")
    ap.add_argument("--list", required=True, help="train_list.txt (paths relative to --root)")
    ap.add_argument("--cache-dir", help="in-process Dataset: its cache directory (PATH[:QUOTA])")
    ap.add_argument("--endpoint", help="in-process Dataset: the S3 endpoint")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--connections", type=int, default=0,
                    help="attach: socket connections to the daemon (0: the default)")
    ap.add_argument("--max-open-files", type=int, default=0,
                    help="attach: cache-file descriptors the client keeps (0: the default)")
    ap.add_argument("--no-direct", action="store_true",
                    help="attach: ask the daemon for every file (direct=False)")
    ap.add_argument("--seed", type=int, default=1, help="epoch e shuffles with seed + e")
    ap.add_argument("--warmup", type=int, default=0, help="unmeasured epochs first")
    ap.add_argument("--epochs", type=int, default=1,
                    help="measured epochs (the fastest is reported, every one under runs)")
    ap.add_argument("--max-files", type=int, default=0,
                    help="read only the first N of each order (DataLoader: the same N files "
                         "every epoch)")
    ap.add_argument("--prefetch", type=int, default=0, help="prefetch window (0: no prefetch)")
    ap.add_argument("--workers", type=int, default=4, help="DataLoader workers")
    ap.add_argument("--batch", type=int, default=64, help="DataLoader batch size")
    ap.add_argument("--local-root", help="DataLoader modes: the local copy, to count MB/s")
    ap.add_argument("--origin-stats", help="URL of the delay proxy's request counter: "
                    "epoch_origin_requests counts the epoch's requests (not the open's listing)")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    samples = read_list(args.list)
    if not samples:
        raise SystemExit(f"py_epoch: no samples in {args.list}")
    epochs = (loader_epochs if args.mode.startswith("dl-") else read_epochs)(args, samples)
    measured = epochs[args.warmup:]
    r = dict(max(measured, key=lambda x: x["images_per_s"]))
    r["runs"] = [round(x["images_per_s"]) for x in measured]
    r["warmup_runs"] = [round(x["images_per_s"]) for x in epochs[:args.warmup]]
    r["errors"] = sum(x["errors"] for x in epochs)
    r["mode"] = args.mode
    text = json.dumps(r)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text, flush=True)
    # In-process datasets close with the interpreter; os._exit would skip the
    # index checkpoint, so leave normally.
    return 1 if r["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
