"""The two data loaders DLIO drives, as their I/O reaches the file system.

TorchLoader (unet3d, DLIO's PyTorch DataLoader over NPZReader): read_threads
workers; batch b goes to worker b % workers, which reads its samples one after
the other; at most ceil(prefetch_size / workers) batches per worker are
outstanding, and the next batch is handed out when the training loop takes one
(torch's prefetch_factor). Reading one sample is what np.load(f)['x'] makes the
file system do: the first 8 KiB (np.load's magic check through an 8 KiB
buffer), the zip end record, zip64 locator and central directory at the end of
the file, the member's local header, then the member in 256 KiB reads.

TFLoader (resnet50, cosmoflow, DLIO's tf.data over TFReader):
TFRecordDataset(num_parallel_reads=read_threads): read_threads streams, each
reading one file at a time from start to end in 256 KiB reads (TF's default
buffer) and taking the next file of the rank's shard when done, repeating the
shard as DLIO's repeat() does (no more streams than files, and no more files
than the run's steps need); records are taken round-robin from the streams
(deterministic interleave) and batched; prefetch_size batches are kept ready.
A stream runs at most ceil(batch / streams) records ahead of the batcher.
DLIO's 2-record shuffle buffer (cosmoflow) reorders records already read and
changes no I/O, so it is not modelled; nor is the image decode, which DLIO
replaces by a constant tensor.

DaliLoader (imagenet-tfrecord, DALI's TFRecord reader as the NGC ResNet-50
recipe drives it): the rank's shards' index files are read when the loader is
built; read_threads (8) streams each walk their own shards (s, s + 8, ...)
from start to end, reading one whole record per read at the offset and size
its index gives; records are taken round-robin from the streams and batched
as in TFLoader. No JPEG decode (on the GPU in the recipe; part of the
computation time here).

What is checked on every read: npz -- the zip and .npy structure, the member
size against the array shape, and with verify the member's CRC-32 (np.load's
zipfile checks it too); TFRecord -- every frame's length CRC and the record
count of each file, and with verify every data CRC32C (TensorFlow checks both);
DALI's records -- every index line follows the one before it and the last
ends at the file's end, every frame's length CRC and length match its entry,
and with verify its data CRC32C.
A short read, a size that differs from the generated one, or a bad CRC fails
the loader: next_batch() raises LoaderError.

Threads: each loader owns its threads; next_batch() and close() are called by
one thread (the training loop). Counters are per thread and read after close().
"""
import math
import os
import queue
import struct
import threading
import zlib

from bench.mlperf_storage import imagenet
from bench.mlperf_storage.formats import FormatError, RecordScanner, npy_header, npz_member
from bench.mlperf_storage.workloads import DLIO_PREFETCH_SIZE, READ_SIZE


def prefetch_depth(w):
    """Batches a loader can hold or be reading ahead of the training loop:
    TorchLoader's outstanding batches; TFLoader's prefetch queue, the batch
    being assembled and the streams' buffers (about one batch)."""
    if w.fmt == "npz":
        return math.ceil(DLIO_PREFETCH_SIZE / w.read_threads) * w.read_threads
    return DLIO_PREFETCH_SIZE + 2


class LoaderError(RuntimeError):
    """A read failed or returned wrong bytes; the message names the file."""


class PosixFiles:
    """Files below a directory (local disk or any mount), read with pread."""

    def __init__(self, root):
        self.root = root

    def open(self, rel):
        return os.open(os.path.join(self.root, rel), os.O_RDONLY | os.O_CLOEXEC)

    def size(self, h):
        return os.fstat(h).st_size

    def pread(self, h, offset, n):
        return os.pread(h, n, offset)

    def readinto(self, h, view, offset):
        return os.preadv(h, [view], offset)

    def close(self, h):
        os.close(h)


class ApiFiles:
    """The same files through Granary's Python module, attached to a mount's daemon."""

    def __init__(self, mnt, run_dir):
        import granary  # noqa: PLC0415 (optional: only this path needs it)
        self.ds = granary.Dataset(mnt, run_dir=run_dir)

    def open(self, rel):
        return rel

    def size(self, h):
        return self.ds.stat(h).size

    def pread(self, h, offset, n):
        return self.ds.read_at(h, offset, n)

    def readinto(self, h, view, offset):
        return self.ds.readinto(h, view, offset)

    def close(self, h):
        pass


def _expect(files, h, rel, size):
    got = files.size(h)
    if got != size:
        raise LoaderError(f"{rel}: {got} bytes, generated {size}")


def read_npz_sample(files, rel, size, view, verify):
    """Reads one npz sample as np.load(f)['x'] does; returns the bytes read."""
    h = files.open(rel)
    try:
        _expect(files, h, rel, size)
        total = 0

        def piece(offset, n):
            nonlocal total
            b = files.pread(h, offset, n)
            total += len(b)
            return b

        if piece(0, 8192)[:4] != b"PK\x03\x04":
            raise FormatError("no zip local header at 0")
        offset, stored, crc = npz_member("x.npy", piece, size)
        local = piece(offset, 30)
        if local[:4] != b"PK\x03\x04":
            raise FormatError(f"no local header at {offset}")
        names = sum(struct.unpack("<HH", local[26:30]))
        piece(offset + 30, names)
        start = offset + 30 + names
        pos, c = 0, 0
        while pos < stored:
            want = min(len(view), stored - pos)
            n = files.readinto(h, view[:want], start + pos)
            if n <= 0:
                raise LoaderError(f"{rel}: short read at {start + pos} ({n})")
            if pos == 0:
                shape, header = npy_header(view[:n])
                if math.prod(shape) + header != stored:
                    raise FormatError(f"x{list(shape)} does not fill its {stored}-byte member")
            if verify:
                c = zlib.crc32(view[:n], c)
            pos += n
        if verify and c != crc:
            raise FormatError("x.npy CRC-32 mismatch")
        return total + stored
    except FormatError as e:
        raise LoaderError(f"{rel}: {e}") from None
    finally:
        files.close(h)


class _Loader:
    """Threads, the first error, stop."""

    def __init__(self):
        self.lock = threading.Lock()
        self.stop = False
        self.error = None
        self.threads = []
        self.bytes = []  # per thread

    def _spawn(self, fn, *args):
        t = threading.Thread(target=self._guard, args=(fn, *args), daemon=True)
        self.threads.append(t)

    def _guard(self, fn, *args):
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 (any failure of a reader fails the trial)
            msg = str(e) if isinstance(e, LoaderError) else f"{type(e).__name__}: {e}"
            with self.lock:
                self.error = self.error or msg
                self.stop = True
            self._wake_all()

    def start(self):
        for t in self.threads:
            t.start()

    def close(self):
        with self.lock:
            self.stop = True
        self._wake_all()
        for t in self.threads:
            if t.ident is not None:  # started
                t.join(timeout=30)

    def bytes_read(self):
        return sum(self.bytes)

    def _raise_if_failed(self):
        if self.error:
            raise LoaderError(self.error)


class TorchLoader(_Loader):
    """unet3d's PyTorch DataLoader: `steps` batches of `samples` [(rel, size)] in order."""

    def __init__(self, files, samples, w, steps, verify):
        super().__init__()
        self.files, self.w, self.verify = files, w, verify
        self.batches = [samples[i * w.batch_size:(i + 1) * w.batch_size] for i in range(steps)]
        workers = w.read_threads
        self.window = prefetch_depth(w)
        self.cond = threading.Condition(self.lock)
        self.consumed = 0
        self.done = set()
        self.bytes = [0] * workers
        for t in range(workers):
            self._spawn(self._worker, t, workers)

    def _wake_all(self):
        with self.cond:
            self.cond.notify_all()

    def _worker(self, t, workers):
        view = memoryview(bytearray(READ_SIZE))
        for b in range(t, len(self.batches), workers):
            with self.cond:
                self.cond.wait_for(lambda: self.stop or b < self.consumed + self.window)
                if self.stop:
                    return
            for rel, size in self.batches[b]:
                self.bytes[t] += read_npz_sample(self.files, rel, size, view, self.verify)
            with self.cond:
                self.done.add(b)
                self.cond.notify_all()

    def next_batch(self):
        with self.cond:
            self.cond.wait_for(lambda: self.error or self.consumed in self.done)
            self._raise_if_failed()
            self.done.discard(self.consumed)
            self.consumed += 1
            self.cond.notify_all()


class TFLoader(_Loader):
    """resnet50's and cosmoflow's tf.data pipeline over the rank's shard [(rel, size)].

    record_shard (accelerators, rank): every accelerator reads every file and keeps
    every accelerators-th record (DLIO shards records when there are fewer files
    than accelerators); None when the files are sharded."""

    def __init__(self, files, shard, w, steps, verify, record_shard=None):
        super().__init__()
        self.files, self.shard, self.w, self.verify = files, shard, w, verify
        self.steps, self.record_shard = steps, record_shard
        # No more streams than files (TF's interleave opens each file of a pass
        # once), and no more files than the steps need.
        streams = min(w.read_threads, len(shard))
        per_record = record_shard[0] if record_shard else 1
        self.max_files = math.ceil(steps * w.batch_size * per_record / w.samples_per_file)
        self.cap = max(1, math.ceil(w.batch_size / streams))
        self.avail = [0] * streams
        self.finished = [False] * streams  # the stream took its last file
        self.space = [threading.Condition(self.lock) for _ in range(streams)]
        self.ready = threading.Condition(self.lock)
        self.next_file = 0
        self.batches = queue.Queue(maxsize=DLIO_PREFETCH_SIZE)
        self.bytes = [0] * streams
        for s in range(streams):
            self._spawn(self._stream, s)
        self._spawn(self._batcher)

    def _wake_all(self):
        with self.lock:
            for c in self.space:
                c.notify_all()
            self.ready.notify_all()
        try:
            self.batches.put_nowait(None)  # wakes next_batch(); it checks the error
        except queue.Full:
            pass

    def _take_file(self):
        with self.lock:
            if self.stop or self.next_file >= self.max_files:
                return None
            i = self.next_file
            self.next_file += 1
        return self.shard[i % len(self.shard)]

    def _stream(self, s):
        view = memoryview(bytearray(READ_SIZE))
        try:
            while True:
                item = self._take_file()
                if item is None or not self._read_file(s, item, view):
                    return
        finally:
            with self.lock:
                self.finished[s] = True
                self.ready.notify()

    def _read_file(self, s, item, view):
        """Reads one TFRecord, handing each record to the batcher; False once stopped."""
        rel, size = item
        h = self.files.open(rel)
        try:
            _expect(self.files, h, rel, size)
            scanner = RecordScanner(rel, self.verify)
            pos, records = 0, 0
            while pos < size:
                n = self.files.readinto(h, view, pos)
                if n <= 0:
                    raise LoaderError(f"{rel}: short read at {pos} ({n})")
                self.bytes[s] += n
                pos += n
                done = scanner.feed(view[:n])
                records += done
                if done and not self._hand_over(s, done):
                    return False
            if not scanner.at_boundary() or records != self.w.samples_per_file:
                raise LoaderError(f"{rel}: {records} whole records, expected "
                                  f"{self.w.samples_per_file}")
            return True
        finally:
            self.files.close(h)

    def _hand_over(self, s, records):
        with self.lock:
            self.space[s].wait_for(lambda: self.stop or self.avail[s] < self.cap)
            if self.stop:
                return False
            self.avail[s] += records
            self.ready.notify()
            return True

    def _batcher(self):
        streams, slot, seen = len(self.avail), 0, 0
        for _ in range(self.steps):
            need = self.w.batch_size
            while need:
                with self.lock:
                    self.ready.wait_for(
                        lambda: self.stop or self.avail[slot] > 0 or self.finished[slot])
                    if self.stop:
                        return
                    if not self.avail[slot]:  # that stream is done: skip it
                        if all(self.finished) and not any(self.avail):
                            raise LoaderError("the shard ran out of records")
                        slot = (slot + 1) % streams
                        continue
                    self.avail[slot] -= 1
                    self.space[slot].notify()
                slot = (slot + 1) % streams
                if self.record_shard is None or seen % self.record_shard[0] == self.record_shard[1]:
                    need -= 1
                seen += 1
            while True:  # a full queue waits for the training loop, or for close()
                try:
                    self.batches.put(True, timeout=0.1)
                    break
                except queue.Full:
                    if self.stop:
                        return

    def next_batch(self):
        got = self.batches.get()
        if got is None or self.error:
            self._raise_if_failed()
            raise LoaderError("loader stopped")


class DaliLoader(TFLoader):
    """imagenet-tfrecord's DALI TFRecord reader over the rank's shards [(rel, size)].

    Every index file of the rank's shards is read when the loader is built
    (DALI reads them when its pipeline is built), through the same files.
    Stream s of read_threads reads shards s, s + streams, ... one after the
    other, each record by its index entry with one read of the whole frame,
    checking the frame's length CRC against the entry (and its data CRC with
    verify); records are taken round-robin from the streams and batched as
    in TFLoader. record_shard (accelerators, rank): every rank walks every
    shard but reads only every accelerators-th record (fewer shards than
    accelerators). Index bytes are not counted in bytes_read()."""

    def __init__(self, files, shard, w, steps, verify, record_shard=None):
        self.indexes = _read_indexes(files, shard, record_shard)
        super().__init__(files, shard, w, steps, verify)
        streams = len(self.avail)
        self.assigned = [shard[s::streams] for s in range(streams)]

    def _stream(self, s):
        buf = [bytearray(READ_SIZE)]  # grows to the largest record
        try:
            for rel, size in self.assigned[s]:
                if not self._read_shard(s, rel, size, buf):
                    return
        finally:
            with self.lock:
                self.finished[s] = True
                self.ready.notify()

    def _read_shard(self, s, rel, size, buf):
        """Reads the shard's records in order, handing each to the batcher; False once stopped."""
        h = self.files.open(rel)
        try:
            _expect(self.files, h, rel, size)
            for offset, length in self.indexes[rel]:
                if len(buf[0]) < length:
                    buf[0] = bytearray(length)
                view = memoryview(buf[0])[:length]
                got = 0
                while got < length:
                    n = self.files.readinto(h, view[got:], offset + got)
                    if n <= 0:
                        raise LoaderError(f"{rel}: short read at {offset + got} ({n})")
                    got += n
                self.bytes[s] += length
                imagenet.check_record(view, f"{rel} record at {offset}", self.verify)
                if not self._hand_over(s, 1):
                    return False
            return True
        except FormatError as e:
            raise LoaderError(str(e)) from None
        finally:
            self.files.close(h)


def _read_indexes(files, shard, record_shard):
    """{rel: [(offset, bytes)] to read}; LoaderError when an index does not
    cover its shard exactly (its records must end where the file does)."""
    out, seen = {}, 0
    for rel, size in shard:
        name = imagenet.index_rel(rel)
        h = files.open(name)
        try:
            want, text = files.size(h), b""
            while len(text) < want:
                piece = bytes(files.pread(h, len(text), want - len(text)))
                if not piece:
                    raise LoaderError(f"{name}: short read at {len(text)}")
                text += piece
            entries = imagenet.parse_index(text.decode(), name)
        except (FormatError, UnicodeDecodeError) as e:
            raise LoaderError(f"{name}: {e}") from None
        finally:
            files.close(h)
        end = entries[-1][0] + entries[-1][1] if entries else 0
        if end != size:
            raise LoaderError(f"{name}: its records end at {end}, {rel} has {size} bytes")
        if record_shard:
            n, rank = record_shard
            first, seen = seen, seen + len(entries)
            entries = [e for i, e in enumerate(entries, first) if i % n == rank]
        out[rel] = entries
    return out
