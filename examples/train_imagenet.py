#!/usr/bin/python3
"""Trains an image classifier on an ImageFolder-style dataset read through Granary.

    # a dataset served by `granary mount` (the daemon's cache):
    /usr/bin/python3 examples/train_imagenet.py --data /mnt/imagenet/train
    # a source opened in this process over a cache directory:
    /usr/bin/python3 examples/train_imagenet.py --data s3://bucket/imagenet/train \\
        --cache-dir /data/granary-cache --endpoint http://127.0.0.1:9000
    # a few CPU steps on a generated tiny tree (seconds; ctest runs it):
    /usr/bin/python3 examples/train_imagenet.py --smoke

granary.torch.ImageFolder replaces torchvision.datasets.ImageFolder (same
classes, samples and labels); PrefetchSampler hands each epoch's shuffled
order to Granary's engine, which fetches ahead in that order while the
DataLoader workers (fork or spawn) read through the engine of this process.
"""

import argparse
import os
import tempfile
import time

import torch
import torch.nn as nn
import torchvision
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler
from torchvision import transforms

import granary.torch as gtorch


def tiny_cnn(num_classes):
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, num_classes))


def make_smoke_tree(root, classes=3, per_class=8):
    """A tiny ImageFolder tree of generated JPEGs under root/src."""
    from PIL import Image

    src = os.path.join(root, "src")
    for c in range(classes):
        os.makedirs(os.path.join(src, f"class{c}"))
        for i in range(per_class):
            color = (80 * c % 256, (30 * i) % 256, 128)
            Image.new("RGB", (40, 36), color).save(os.path.join(src, f"class{c}", f"{i:03}.jpg"))
    return src


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="train/ directory: a granary mount path, a local dir or a URI")
    p.add_argument("--cache-dir", help="cache directory when --data is opened in this process")
    p.add_argument("--endpoint", help="S3 endpoint (origin option) for s3:// sources")
    p.add_argument("--arch", default="resnet18", help="torchvision model name, or 'tiny'")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--start-method", default="fork", choices=["fork", "spawn", "forkserver"])
    p.add_argument("--window", type=int, default=1024, help="files the engine fetches ahead")
    p.add_argument("--steps", type=int, default=0, help="stop each epoch after N steps (0 = all)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--smoke", action="store_true",
                   help="a few CPU steps of a tiny CNN on a generated tree")
    return p.parse_args()


def main():
    args = parse_args()
    tmp = None
    if args.smoke:
        tmp = tempfile.TemporaryDirectory(prefix="granary-train-smoke-")
        args.data = make_smoke_tree(tmp.name)
        args.cache_dir = os.path.join(tmp.name, "cache")
        args.arch, args.epochs, args.batch_size, args.workers = "tiny", 2, 8, 2
        args.image_size, args.steps = 32, 0
        torch.set_num_threads(1)
    if not args.data:
        raise SystemExit("train_imagenet: --data or --smoke is needed")

    options = {}
    if args.cache_dir:
        options["cache_dir"] = args.cache_dir
    if args.endpoint:
        options["endpoint"] = args.endpoint
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    dataset = gtorch.ImageFolder(args.data, transform=transform, **options)
    print(f"{dataset}; classes {len(dataset.classes)}")

    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    inner = DistributedSampler(dataset) if distributed else RandomSampler(dataset)
    sampler = gtorch.PrefetchSampler(dataset, inner, window=args.window)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, multiprocessing_context=args.start_method,
                        drop_last=False, persistent_workers=args.workers > 0)

    num_classes = len(dataset.classes)
    if args.arch == "tiny":
        model = tiny_cnn(num_classes)
    else:
        model = getattr(torchvision.models, args.arch)(num_classes=num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        start, seen, total_loss, steps = time.monotonic(), 0, 0.0, 0
        for images, targets in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), targets)
            loss.backward()
            optimizer.step()
            seen += images.shape[0]
            total_loss += loss.item()
            steps += 1
            if args.steps and steps >= args.steps:
                break
        elapsed = time.monotonic() - start
        progress = dataset.dataset.prefetch_status()
        print(f"epoch {epoch}: {steps} steps, {seen} images, {seen / elapsed:.1f} img/s, "
              f"loss {total_loss / max(steps, 1):.3f}; prefetch fetched {progress['fetched']} "
              f"skipped {progress['skipped']} failed {progress['failed']}")
        if steps == 0:
            raise SystemExit("train_imagenet: an epoch read no batch")
    del loader
    dataset.dataset.close()
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
