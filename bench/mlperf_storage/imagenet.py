"""imagenet-tfrecord's data set: the ImageNet-like JPEGs packed as NGC's ImageNet TFRecords.

Tree, as the NGC ResNet-50 recipe's /data/tfrecords with DALI index files:
    train/train-<i>-of-<S>    S TFRecord shards (i and S zero-padded to 5 digits)
    idx/train-<i>-of-<S>.idx  DALI's index of that shard (tfrecord2idx's text format)
    valid/                    empty, as in the other workloads
Each record is a tf.train.Example with `image/encoded` (the JPEG's bytes, a
BytesList) and `image/class/label` (an Int64List: the class's rank + 1, since
TensorFlow's ImageNet build script keeps 0 for "background"), framed as in
formats.py (length, masked CRC32C, data, masked CRC32C). An index line is
"<offset> <bytes>\\n" per record in file order: the frame's offset and its
whole length, header and CRCs included (what DALI's tfrecord2idx writes and
its TFRecord reader expects).

The JPEGs come from the project's generator (build/bench/gen_imagenet); they
are shuffled with a fixed seed, as TensorFlow's build script shuffles before
it shards, and cut into S contiguous runs of as equal length as possible
(shard_counts), so a shard mixes the classes. The JPEGs are staged in a
directory of their own and deleted once packed.

Functions are thread-safe (no shared state).
"""
import json
import os
import shutil
import subprocess

import numpy as np

from bench.mlperf_storage import formats
from bench.mlperf_storage.formats import FormatError

# Shards of NGC's ImageNet TFRecords (train-00000-of-01024 ... ).
DEFAULT_SHARDS = 1024
PACK_SEED = 12345  # the shuffle before sharding


def shard_name(i, shards):
    return f"train-{i:05d}-of-{shards:05d}"


def index_rel(rel):
    """The index of shard train/<name>: idx/<name>.idx."""
    return "idx/" + os.path.basename(rel) + ".idx"


def shard_counts(images, shards):
    """Records in each of `shards` shards of `images` images: contiguous runs
    whose lengths differ by at most one."""
    bounds = [images * i // shards for i in range(shards + 1)]
    return [bounds[i + 1] - bounds[i] for i in range(shards)]


def generate_jpegs(gen_bin, out, count, seed, median_bytes=None):
    """Runs gen_imagenet into out; returns ([(relative JPEG path, label)], mean bytes).
    median_bytes: a smaller size model (--small), else ImageNet's. FormatError,
    with the generator's last words, when it fails or lists other files."""
    summary = os.path.join(out, "gen.json")
    argv = [gen_bin, "--count", str(count), "--out", out, "--seed", str(seed), "--quiet",
            "--json", summary]
    if median_bytes:
        argv += ["--median-size", str(int(median_bytes)), "--max-size", str(int(4 * median_bytes)),
                 "--tail-fraction", "0", "--classes", "16"]
    # On every CPU, not just the clients' this process is pinned to: nothing
    # is measured while the data set is made.
    everywhere = range(os.cpu_count() or 1)
    done = subprocess.run(argv, capture_output=True, text=True,
                          preexec_fn=lambda: os.sched_setaffinity(0, everywhere))
    if done.returncode != 0:
        raise FormatError(f"gen_imagenet exited {done.returncode}: "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    items = []
    with open(os.path.join(out, "train_list.txt")) as f:
        for line in f:
            rel, label = line.split()
            items.append((rel, int(label)))
    if len(items) != count:
        raise FormatError(f"gen_imagenet listed {len(items)} files, asked for {count}")
    with open(summary) as f:
        mean = float(json.load(f)["mean_bytes"])
    return items, mean


def pack(src, root, items, shards):
    """Writes the shards and their indexes under root from the JPEGs under src.
    Returns ({train/<shard>: bytes}, {train/<shard>: records})."""
    for d in ("train", "idx", "valid"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    order = np.random.RandomState(PACK_SEED).permutation(len(items))
    manifest, records = {}, {}
    start = 0
    for i, n in enumerate(shard_counts(len(items), shards)):
        rel = "train/" + shard_name(i, shards)
        with open(os.path.join(root, rel), "wb") as out, \
                open(os.path.join(root, index_rel(rel)), "w") as idx:
            pos = 0
            for k in order[start:start + n]:
                path, label = items[k]
                with open(os.path.join(src, path), "rb") as f:
                    jpeg = f.read()
                framed = formats.frame(formats.encode_features(
                    [("image/encoded", jpeg), ("image/class/label", label + 1)]))
                out.write(framed)
                idx.write(f"{pos} {len(framed)}\n")
                pos += len(framed)
        manifest[rel], records[rel] = pos, n
        start += n
    return manifest, records


def generate(root, staging, gen_bin, images, shards, seed, median_bytes=None):
    """gen_imagenet into staging, packed under root, staging deleted.
    Returns (manifest, records per shard, mean JPEG bytes)."""
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        items, mean = generate_jpegs(gen_bin, staging, images, seed, median_bytes)
        manifest, records = pack(staging, root, items, min(shards, images))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest, records, mean


def parse_index(text, name):
    """[(offset, bytes)] of a DALI index; FormatError when a line is not two
    integers or the records do not follow one another from offset 0."""
    out, pos = [], 0
    for n, line in enumerate(text.splitlines()):
        parts = line.split()
        try:
            offset, size = int(parts[0]), int(parts[1])
        except (IndexError, ValueError):
            raise FormatError(f"{name}: index line {n + 1} is not '<offset> <size>'") from None
        if len(parts) != 2 or offset != pos or size < 16:
            raise FormatError(f"{name}: index line {n + 1} ({line!r}) does not follow "
                              f"the record before it (next offset {pos})")
        out.append((offset, size))
        pos += size
    return out


def check_record(frame_bytes, name, verify):
    """Checks one whole frame read by its index entry: the length CRC, that the
    length fills the entry, and with verify the data CRC. FormatError otherwise."""
    if len(frame_bytes) < 16:
        raise FormatError(f"{name}: a {len(frame_bytes)}-byte record")
    header = frame_bytes[:8]
    if int.from_bytes(frame_bytes[8:12], "little") != formats.masked_crc(header):
        raise FormatError(f"{name}: length CRC mismatch")
    if int.from_bytes(header, "little") + 16 != len(frame_bytes):
        raise FormatError(f"{name}: the record's length does not match its index entry")
    if verify:
        crc = int.from_bytes(frame_bytes[-4:], "little")
        if crc != formats.masked_crc(frame_bytes[12:-4]):
            raise FormatError(f"{name}: data CRC mismatch")


def validate_tree(root, manifest, records):
    """Every shard under root: both CRCs of every frame, every Example's JPEG
    (SOI and EOI markers) and label, the record count, the size, and that its
    index lists exactly its frames. Returns the number of shards checked."""
    for rel, size in sorted(manifest.items()):
        path = os.path.join(root, rel)
        with open(path, "rb") as f:
            data = f.read()
        with open(os.path.join(root, index_rel(rel))) as f:
            index = parse_index(f.read(), index_rel(rel))
        found = []
        for offset, length, record in formats.frames(data, path):
            ex = formats.decode_example(record)
            jpeg, label = ex.get("image/encoded"), ex.get("image/class/label")
            if not isinstance(jpeg, bytes) or jpeg[:2] != b"\xff\xd8" or jpeg[-2:] != b"\xff\xd9":
                raise FormatError(f"{path}: the record at {offset} holds no whole JPEG")
            if not isinstance(label, int) or label < 1:
                raise FormatError(f"{path}: the record at {offset} has label {label}")
            found.append((offset, length))
        if found != index:
            raise FormatError(f"{path}: its index lists {len(index)} records, the file holds "
                              f"{len(found)}" + ("" if len(found) != len(index) else
                                                 " at other offsets"))
        if len(found) != records[rel] or len(data) != size:
            raise FormatError(f"{path}: {len(found)} records, {len(data)} bytes (expected "
                              f"{records[rel]}, {size})")
    return len(manifest)
