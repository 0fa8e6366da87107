#!/usr/bin/env python3
"""ResNet-50 v1.5 training throughput (images/s), in the published table format.

Trains torchvision's resnet50 (v1.5: stride on the 3x3 conv) with SGD, channels-last,
FP32 and AMP, batch 128 and 256, and reports images/s per configuration:

  * data: a DataLoader over ImageFolder(<data>/train) with RandomResizedCrop(224) +
    RandomHorizontalFlip + ToTensor + Normalize and --workers processes, i.e. the way a
    training job reads a mount (local disk, s3fs, rclone, Granary...);
  * synthetic: random tensors already on the GPU: the compute-bound ceiling.

Usage:
  python3 bench/train_resnet50.py --data /mnt/imagenet --workers 8 --json out.json
  torchrun --nproc_per_node 8 bench/train_resnet50.py --data /mnt/imagenet   # 1x8 GPUs
  python3 bench/train_resnet50.py --smoke --gen-imagenet build/bench/gen_imagenet/gen_imagenet

--smoke: CPU, ResNet-18 at 64x64, batch 4, a few steps on a tiny generated data set;
finishes in well under a minute (the ctest smoke test). Exit status 77 = skipped
(torch/torchvision not installed), 0 = success.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SKIP = 77


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="data set root holding train/<class>/<image> (e.g. the mount)")
    p.add_argument("--mode", choices=["both", "data", "synthetic"], default="both",
                   help="which input pipelines to measure (default both; data needs --data)")
    p.add_argument("--precision", default="fp32,amp", help="comma list of fp32, amp")
    p.add_argument("--batch-size", default="128,256", help="comma list of per-GPU batch sizes")
    p.add_argument("--steps", type=int, default=50, help="timed steps per configuration")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before timing")
    p.add_argument("--workers", type=int, default=8, help="DataLoader worker processes per GPU")
    p.add_argument("--arch", default="resnet50", help="torchvision model name")
    p.add_argument("--image-size", type=int, default=224, help="crop size")
    p.add_argument("--no-channels-last", action="store_true", help="keep NCHW memory format")
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--json", help="write every result here")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run for the tests")
    p.add_argument("--gen-imagenet", help="--smoke without --data: generator binary to make data")
    args = p.parse_args(argv)
    if args.smoke:
        args.device, args.arch, args.image_size = "cpu", "resnet18", 64
        args.precision, args.batch_size = "fp32", "4"
        args.steps, args.warmup, args.workers = 3, 1, 1
    args.precisions = [x.strip().lower() for x in args.precision.split(",") if x.strip()]
    args.batches = [int(x) for x in args.batch_size.split(",") if x.strip()]
    bad = [x for x in args.precisions if x not in ("fp32", "amp")]
    if bad:
        p.error(f"--precision: unknown value(s) {bad}; use fp32 and/or amp")
    if args.mode in ("both", "data") and not args.data and not (args.smoke and args.gen_imagenet):
        if args.mode == "data":
            p.error("--mode data needs --data DIR")
        args.mode = "synthetic"
    return args


def make_smoke_data(gen_imagenet, workdir):
    root = os.path.join(workdir, "smoke-data")
    subprocess.run([gen_imagenet, "--count", "24", "--classes", "3", "--out", root,
                    "--median-size", "20000", "--tail-fraction", "0", "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    return root


class Runner:
    """Builds the model and input for one configuration and times its steps."""

    def __init__(self, args, torch, torchvision, dist):
        self.args, self.torch, self.tv, self.dist = args, torch, torchvision, dist
        self.world = dist["world"]
        if args.device == "cuda":
            torch.cuda.set_device(dist["local_rank"])
            self.device = torch.device("cuda", dist["local_rank"])
            torch.backends.cudnn.benchmark = True
        else:
            self.device = torch.device("cpu")
        self.memory_format = (torch.preserve_format if args.no_channels_last
                              else torch.channels_last)

    def model(self, num_classes):
        torch = self.torch
        m = getattr(self.tv.models, self.args.arch)(weights=None, num_classes=num_classes)
        m = m.to(self.device, memory_format=self.memory_format)
        if self.world > 1:
            m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[self.device.index])
        return m

    def data_loader(self, batch):
        T = self.tv.transforms
        tf = T.Compose([T.RandomResizedCrop(self.args.image_size), T.RandomHorizontalFlip(),
                        T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        ds = self.tv.datasets.ImageFolder(os.path.join(self.args.data, "train"), tf)
        sampler = None
        if self.world > 1:
            sampler = self.torch.utils.data.distributed.DistributedSampler(ds)
        loader = self.torch.utils.data.DataLoader(
            ds, batch_size=batch, shuffle=sampler is None, sampler=sampler,
            num_workers=self.args.workers, pin_memory=self.device.type == "cuda", drop_last=True,
            persistent_workers=self.args.workers > 0)
        return loader, len(ds.classes)

    def batches(self, source, batch):
        """Yields (images, labels) on the device forever."""
        torch = self.torch
        if source == "synthetic":
            x = torch.randn(batch, 3, self.args.image_size, self.args.image_size,
                            device=self.device).contiguous(memory_format=self.memory_format)
            y = torch.randint(0, 1000, (batch,), device=self.device)
            while True:
                yield x, y
        loader, _ = self.data_loader(batch)
        epoch = 0
        while True:
            if self.world > 1:
                loader.sampler.set_epoch(epoch)
            for x, y in loader:
                yield (x.to(self.device, non_blocking=True, memory_format=self.memory_format),
                       y.to(self.device, non_blocking=True))
            epoch += 1

    def measure(self, source, precision, batch):
        torch, args = self.torch, self.args
        classes = 1000 if source == "synthetic" else self.data_loader(batch)[1]
        model = self.model(classes)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()
        amp = precision == "amp" and self.device.type == "cuda"
        scaler = torch.cuda.amp.GradScaler(enabled=amp)
        it = self.batches(source, batch)
        model.train()

        def step():
            x, y = next(it)
            with torch.autocast(device_type=self.device.type, enabled=amp):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        for _ in range(args.warmup):
            step()
        self.sync()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        self.sync()
        rate = args.steps * batch / (time.perf_counter() - start)
        return self.all_reduce_sum(rate)

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def all_reduce_sum(self, value):
        if self.world == 1:
            return value
        t = self.torch.tensor([value], device=self.device)
        self.torch.distributed.all_reduce(t)
        return t.item()


def table(results, gpus):
    """The published format: one row per GPU count (x input), FP32/AMP x BS=128/256 columns."""
    cols = [(p, b) for p in ("fp32", "amp") for b in sorted({r["batch"] for r in results})]
    cols = [c for c in cols if any(r["precision"] == c[0] and r["batch"] == c[1] for r in results)]
    head = "| GPUs (input) | " + " | ".join(f"{p.upper()}(BS={b})" for p, b in cols) + " |"
    lines = [head, "|" + "-----|" * (len(cols) + 1)]
    for source in ("synthetic", "data"):
        rows = {(r["precision"], r["batch"]): r["images_per_s"] for r in results
                if r["source"] == source}
        if rows:
            cells = [f"{rows[c]:.1f}" if c in rows else "-" for c in cols]
            lines.append(f"| {gpus} ({source}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def init_distributed(torch, args):
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("nccl" if args.device == "cuda" else "gloo")
    return {"world": world, "rank": rank, "local_rank": local}


def main(argv):
    args = parse_args(argv)
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(f"train_resnet50: skipped: cannot import torch/torchvision ({e}); install "
              "python3-torch python3-torchvision (scripts/install-deps.sh) and run "
              "with /usr/bin/python3", file=sys.stderr)
        return SKIP
    if args.device == "cuda" and not torch.cuda.is_available():
        print("train_resnet50: no CUDA device; use --device cpu (slow) or --smoke",
              file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="granary-train-") as workdir:
        if args.smoke and not args.data and args.gen_imagenet:
            args.data = make_smoke_data(args.gen_imagenet, workdir)
        dist = init_distributed(torch, args)
        runner = Runner(args, torch, torchvision, dist)
        sources = ["synthetic", "data"] if args.mode == "both" else [args.mode]
        results = []
        for source in sources:
            for precision in args.precisions:
                for batch in args.batches:
                    rate = runner.measure(source, precision, batch)
                    results.append({"source": source, "precision": precision, "batch": batch,
                                    "gpus": dist["world"], "images_per_s": rate})
                    if dist["rank"] == 0:
                        print(f"{source:9s} {precision:4s} BS={batch:<4d} {rate:10.1f} images/s",
                              flush=True)
    if dist["rank"] != 0:
        return 0
    print()
    print(table(results, dist["world"]))
    if args.json:
        meta = {"arch": args.arch, "device": args.device, "data": args.data,
                "workers": args.workers, "steps": args.steps, "warmup": args.warmup,
                "channels_last": not args.no_channels_last, "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None}
        with open(args.json, "w") as f:
            json.dump({"config": meta, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
