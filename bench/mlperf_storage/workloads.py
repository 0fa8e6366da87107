"""The three MLPerf Storage training workloads, as DLIO's workload configs define them,
and imagenet-tfrecord, resnet50's step over NGC's ImageNet TFRecords read by DALI.

Every number here is the one in DLIO's configs (dlio_benchmark/configs/workload/
<name>_h100.yaml and _a100.yaml, the same files mlcommons/storage ships under
configs/dlio/workload/): the record length and its standard deviation, files,
samples per file, batch size, reader threads, computation time per step on each
accelerator, the AU bar. Defaults DLIO applies when a config leaves a key out
are named as such (prefetch_size 2, seed 123, TensorFlow's 256 KiB TFRecord
read buffer, np.load's 256 KiB array reads).

Data only; no I/O. Thread-safe (immutable after import).
"""
import dataclasses
import math

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# DLIO's default prefetch_size (batches the loader keeps ready).
DLIO_PREFETCH_SIZE = 2
# DLIO's default seed for file and sample shuffles.
DLIO_SEED = 123
# Bytes per read: np.load reads an array from a zip member in 2**18-byte pieces;
# tf.data.TFRecordDataset's default buffer_size is 256 KiB.
READ_SIZE = 256 * KIB
# mlcommons/storage: the data set is at least 5x the clients' memory, and holds
# at least 500 steps of every accelerator (mlpstorage/rules.py).
MEMORY_MULTIPLIER = 5
MIN_STEPS_PER_EPOCH = 500


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    # "npz" (PyTorch DataLoader over np.load), "tfrecord" (tf.data), or "dali"
    # (imagenet.py's TFRecord shards with index files, DALI's reader)
    fmt: str
    record_length: float  # bytes of one sample (mean)
    record_length_stdev: float  # its standard deviation (DLIO spreads both image sides)
    num_files_train: int  # files in DLIO's config (the full-scale data set)
    samples_per_file: int
    batch_size: int
    read_threads: int  # DataLoader workers (npz) or num_parallel_reads (tfrecord)
    compute_s: dict  # computation_time per step by accelerator type
    au_bar: float  # metric.au: the fraction of wall time the accelerator must compute
    shuffle_files: bool  # reader.file_shuffle: seed
    shuffle_samples: bool  # reader.sample_shuffle: seed

    @property
    def ext(self):
        return self.fmt

    @property
    def file_bytes(self):
        """Mean bytes of one file's payload (samples x record length)."""
        return self.samples_per_file * self.record_length

    def demand_bytes_per_s(self, accelerator):
        """Bytes/s one accelerator consumes while computing all the time (AU 100 %)."""
        return self.batch_size * self.record_length / self.compute_s[accelerator]

    def file_name(self, index, files):
        """DLIO's name of training file `index` of `files`: img_<i>_of_<N>.<ext>,
        i zero-padded to the digits of N (data_generator.py)."""
        return f"img_{index:0{len(str(files))}d}_of_{files}.{self.ext}"

    def rule_files(self, memory_bytes, accelerators):
        """Files the MLPerf Storage rules ask for: 5x the client memory, and at
        least 500 steps of `accelerators` processes at this batch size."""
        by_bytes = int(MEMORY_MULTIPLIER * memory_bytes // self.file_bytes)
        by_steps = MIN_STEPS_PER_EPOCH * accelerators * self.batch_size // self.samples_per_file
        return max(by_bytes, by_steps, 1)

    def scaled(self, record_length, record_length_stdev):
        """The same workload with other record sizes (the CI's tiny data set)."""
        return dataclasses.replace(self, record_length=record_length,
                                   record_length_stdev=record_length_stdev)


WORKLOADS = {
    # One ~147 MB npz per sample (a 3D volume), PyTorch loader, 4 workers.
    "unet3d": Workload(
        name="unet3d", fmt="npz", record_length=146600628, record_length_stdev=68341808,
        num_files_train=168, samples_per_file=1, batch_size=7, read_threads=4,
        compute_s={"h100": 0.323, "a100": 0.636}, au_bar=0.90,
        shuffle_files=True, shuffle_samples=True),
    # ImageNet as 1,024 TFRecords of 1,251 images (~143 MB each), tf.data, 8 streams.
    "resnet50": Workload(
        name="resnet50", fmt="tfrecord", record_length=114660.07, record_length_stdev=0,
        num_files_train=1024, samples_per_file=1251, batch_size=400, read_threads=8,
        compute_s={"h100": 0.224, "a100": 0.435}, au_bar=0.90,
        shuffle_files=False, shuffle_samples=False),
    # One ~2.8 MB TFRecord per sample, tf.data, 4 streams, batch 1.
    "cosmoflow": Workload(
        name="cosmoflow", fmt="tfrecord", record_length=2828486, record_length_stdev=71311,
        num_files_train=524288, samples_per_file=1, batch_size=1, read_threads=4,
        compute_s={"h100": 0.00350, "a100": 0.00551}, au_bar=0.70,
        shuffle_files=True, shuffle_samples=True),
    # Not DLIO's: the ImageNet-like JPEGs (gen_imagenet, mean ~112.5 KB, the
    # record length until the generated set's own mean replaces it) as NGC's
    # TFRecord shards with DALI index files, read by DALI's reader with 8
    # streams. A "file" is one JPEG (one record); the shards are --shards.
    # Batch, computation time and bar are resnet50's (DLIO's ResNet-50 step:
    # 0.224 s per 400 images on an H100, 0.56 ms per image). DALI's shuffle
    # buffer reorders records already read, so the read order is the file order.
    "imagenet-tfrecord": Workload(
        name="imagenet-tfrecord", fmt="dali", record_length=112500, record_length_stdev=0,
        num_files_train=1281167, samples_per_file=1, batch_size=400, read_threads=8,
        compute_s={"h100": 0.224, "a100": 0.435}, au_bar=0.90,
        shuffle_files=False, shuffle_samples=False),
}

# The workloads a run has by default: DLIO's (imagenet-tfrecord when asked
# for, and with --small).
DLIO_WORKLOADS = ["unet3d", "resnet50", "cosmoflow"]

# --small: the same loaders, batch sizes, threads and computation times over a
# few MB, so that every path runs every workload for at least two steps per
# accelerator at 1 and 2 accelerators within seconds.
SMALL = {
    "unet3d": (84, 256 * KIB, 64 * KIB),
    "resnet50": (4, 2 * KIB, 0),
    "cosmoflow": (32, 64 * KIB, 2 * KIB),
    # JPEGs of ~4 KiB, the smallest gen_imagenet writes; the 6 steps a run
    # needs at 1 accelerator, too few at 2 (the CI test's time allows one more
    # workload at one accelerator count per path).
    "imagenet-tfrecord": (2400, 4 * KIB, 0),
}
# Shards of imagenet-tfrecord with --small: 8 streams of 2 shards.
SMALL_SHARDS = 16


def small(name):
    """(workload with tiny records, files) for --small."""
    files, length, stdev = SMALL[name]
    return WORKLOADS[name].scaled(length, stdev), files


def steps_per_epoch(w, files, accelerators):
    """DLIO's steps per epoch: floor(samples / batch / accelerators)."""
    return math.floor(w.samples_per_file * files / w.batch_size / accelerators)


# Published single-client MLPerf Storage results (H100), for context only:
# accelerators that held the AU bar with one client machine.
PUBLISHED = [
    ("JuiceFS", {"unet3d": 2, "resnet50": 20, "cosmoflow": 10}),
    ("Hammerspace", {"unet3d": 2, "resnet50": 27}),
    ("WEKA", {"unet3d": 13, "resnet50": 74}),
]
