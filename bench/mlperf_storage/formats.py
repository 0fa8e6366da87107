"""DLIO's two on-disk formats, written and checked without TensorFlow.

npz (unet3d): what DLIO's NPZGenerator writes, np.savez(path, x=records,
y=labels) -- a stored (uncompressed) zip of two .npy members, `x` a uint8 array
of shape (d1, d2, samples_per_file) and `y` the labels. The zip carries a
CRC-32 of every member, which np.load checks when it reads one whole.

TFRecord (resnet50, cosmoflow): what tf.io.TFRecordWriter writes, one frame
per record:
    uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes |
    length bytes of data           | uint32 masked CRC32C of the data
where masked(c) = ((c >> 15 | c << 17) + 0xa282ead8) mod 2**32. Each record is
a serialized tf.train.Example whose Features map holds `image` (a BytesList of
d1*d2 uint8 bytes) and `size` (an Int64List with that byte count), as DLIO's
TFRecordGenerator writes it; beside the files, index/train/<file>.idx lists
"offset length" of every record (DALI's index, which DLIO's generator writes).

Image sides are drawn as DLIO draws them (derive_configurations and
get_dimension): side = int(sqrt(record_length)), side stdev =
record_length_stdev / 2 / side, numpy's legacy generator seeded with 10,
two sides per file. The pixels come from one random pool, read from a
different offset for each file: incompressible, and different in every file.

CRC32C comes from python3-crcmod's C extension when installed (~400 MB/s),
else from a table in Python (~2 MB/s: enough for --small only).

Functions are thread-safe; a RecordScanner or NpzReader belongs to one thread.
"""
import ast
import os
import struct
import zipfile

import numpy as np

try:
    import crcmod.predefined
    _crc32c_fun = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
    CRC32C_NATIVE = True
except ImportError:  # python3-crcmod missing: slow but correct
    CRC32C_NATIVE = False
    _TABLE = []
    for _i in range(256):
        _c = _i
        for _ in range(8):
            _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
        _TABLE.append(_c)

    def _crc32c_fun(data, crc=0):
        c = crc ^ 0xFFFFFFFF
        for b in bytes(data):
            c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF


class FormatError(ValueError):
    """A file does not hold what the format says: the message names the file and the fault."""


def crc32c(data, crc=0):
    """CRC32C of data; crc continues an earlier result (crc32c(b + c) == crc32c(c, crc32c(b)))."""
    return _crc32c_fun(data, crc)


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---------------------------------------------------------------------------
# Sizes, as DLIO draws them.

def image_sides(w, files):
    """[(d1, d2)] for files 0..files-1, DLIO's draw for this workload."""
    side = int(np.sqrt(w.record_length))
    if w.record_length_stdev > 0:
        stdev = w.record_length_stdev / 2.0 / np.sqrt(w.record_length)
        rs = np.random.RandomState(10)
        dims = [max(int(d), 1) for d in rs.normal(side, stdev, 2 * files)]
    else:
        dims = [side] * (2 * files)
    return [(dims[2 * i], dims[2 * i + 1]) for i in range(files)]


class RandomPool:
    """64 MiB of random bytes; take(n, seed) returns n of them starting at an
    offset that depends on seed (wrapping around)."""

    SIZE = 64 << 20

    def __init__(self, seed=1):
        self.pool = np.random.default_rng(seed).bytes(self.SIZE)

    def take(self, n, seed):
        start = (seed * 2654435761) % self.SIZE
        out = bytearray(n)
        pos = 0
        while pos < n:
            piece = self.pool[start:start + n - pos]
            out[pos:pos + len(piece)] = piece
            pos += len(piece)
            start = 0
        return out


# ---------------------------------------------------------------------------
# Writers.

def write_npz(path, sides, samples, pool, seed):
    """np.savez(path, x=uint8[d1, d2, samples], y=[0]*samples), as DLIO does."""
    d1, d2 = sides
    x = np.frombuffer(pool.take(d1 * d2 * samples, seed), dtype=np.uint8).reshape(d1, d2, samples)
    np.savez(path, x=x, y=np.zeros(samples, dtype=np.int64))


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_features(features):
    """A serialized tf.train.Example of [(name, value)]: bytes values become a
    one-element BytesList, ints a one-element (packed) Int64List."""
    entries = b""
    for name, value in features:
        if isinstance(value, int):
            feature = _field(3, _field(1, _varint(value)))  # Feature.int64_list{packed value}
        else:
            feature = _field(1, _field(1, bytes(value)))  # Feature.bytes_list{value}
        entries += _field(1, _field(1, name.encode()) + _field(2, feature))
    return _field(1, entries)  # Example.features{feature map}


def encode_example(image, size):
    """DLIO's tf.train.Example: features {image: bytes_list, size: int64_list}."""
    return encode_features([("image", image), ("size", size)])


def frame(record):
    header = struct.pack("<Q", len(record))
    return (header + struct.pack("<I", masked_crc(header)) + record
            + struct.pack("<I", masked_crc(record)))


def write_tfrecord(path, index_path, sides, samples, pool, seed):
    """One TFRecord of `samples` Examples of d1*d2-byte images, and its DALI index."""
    d1, d2 = sides
    n = d1 * d2
    with open(path, "wb") as f, open(index_path, "w") as idx:
        pos = 0
        for s in range(samples):
            framed = frame(encode_example(pool.take(n, seed * 7919 + s), n))
            f.write(framed)
            idx.write(f"{pos} {len(framed)}\n")
            pos += len(framed)


def generate(root, w, files, pool, log=print):
    """Writes DLIO's tree for w under root: train/img_<i>_of_<N>.<ext>, an empty
    valid/, and index/train/*.idx for TFRecords. Returns {relative path: bytes}."""
    train = os.path.join(root, "train")
    os.makedirs(train, exist_ok=True)
    os.makedirs(os.path.join(root, "valid"), exist_ok=True)
    if w.fmt == "tfrecord":
        os.makedirs(os.path.join(root, "index", "train"), exist_ok=True)
    manifest = {}
    for i, sides in enumerate(image_sides(w, files)):
        name = w.file_name(i, files)
        path = os.path.join(train, name)
        if w.fmt == "npz":
            write_npz(path, sides, w.samples_per_file, pool, i + 1)
        else:
            write_tfrecord(path, os.path.join(root, "index", "train", name + ".idx"),
                           sides, w.samples_per_file, pool, i + 1)
        manifest["train/" + name] = os.path.getsize(path)
    return manifest


# ---------------------------------------------------------------------------
# Validation of whole files (after generation, and through a mount with --small).

def validate_npz(path, w, size):
    """numpy.load(f)['x'] (zipfile checks the member's CRC-32): shape, dtype, labels."""
    try:
        with open(path, "rb") as f:
            with np.load(f) as z:
                x, y = z["x"], z["y"]
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise FormatError(f"{path}: numpy.load: {e}") from None
    if x.dtype != np.uint8 or x.ndim != 3 or x.shape[2] != w.samples_per_file:
        raise FormatError(f"{path}: x is {x.dtype}{list(x.shape)}, expected uint8[d1, d2, "
                          f"{w.samples_per_file}]")
    if len(y) != w.samples_per_file or os.path.getsize(path) != size:
        raise FormatError(f"{path}: {len(y)} labels, {os.path.getsize(path)} bytes "
                          f"(expected {w.samples_per_file}, {size})")


def _fields(buf):
    """Top-level (number, wire type, value) of a protobuf message; value is
    bytes for wire type 2, an int for 0. FormatError on anything else."""
    pos, out = 0, []
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 2:
            n, pos = _read_varint(buf, pos)
            value, pos = bytes(buf[pos:pos + n]), pos + n
            if pos > len(buf):
                raise FormatError("truncated field")
        else:
            raise FormatError(f"unexpected wire type {wire}")
        out.append((number, wire, value))
    return out


def _read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise FormatError("bad varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def decode_example(record):
    """{feature name: bytes (BytesList) or int (Int64List)} of a tf.train.Example."""
    out = {}
    for number, _, features in _fields(record):
        if number != 1:
            continue
        for _, _, entry in _fields(features):
            kv = {n: v for n, _, v in _fields(entry)}
            name, feature = kv.get(1, b"").decode(), _fields(kv.get(2, b""))
            for kind, _, lst in feature:
                values = [v for _, _, v in _fields(lst)]
                if kind == 1 and values:  # bytes_list
                    out[name] = values[0]
                elif kind == 3 and values:  # int64_list, packed (bytes) or not (an int)
                    v = values[0]
                    out[name] = v if isinstance(v, int) else _read_varint(v, 0)[0]
    return out


def frames(data, path):
    """Yields (offset, frame bytes, record) of every frame of a whole TFRecord
    file's bytes, after checking both its CRCs; FormatError names path and offset."""
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise FormatError(f"{path}: truncated header at {pos}")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if hcrc != masked_crc(header):
            raise FormatError(f"{path}: length CRC mismatch at {pos}")
        record = data[pos + 12:pos + 12 + length]
        end = pos + 12 + length
        if end + 4 > len(data) or struct.unpack("<I", data[end:end + 4])[0] != masked_crc(record):
            raise FormatError(f"{path}: data CRC mismatch in the record at {pos}")
        yield pos, end + 4 - pos, record
        pos = end + 4


def validate_tfrecord(path, w, size):
    """Every frame's two CRCs, every Example's image/size, the record count and file size."""
    records = 0
    with open(path, "rb") as f:
        data = f.read()
    for _, _, record in frames(data, path):
        ex = decode_example(record)
        if not isinstance(ex.get("image"), bytes) or ex.get("size") != len(ex["image"]):
            raise FormatError(f"{path}: record {records} is not an Example with image and size")
        records += 1
    if records != w.samples_per_file or len(data) != size:
        raise FormatError(f"{path}: {records} records, {len(data)} bytes "
                          f"(expected {w.samples_per_file}, {size})")


def validate_tree(root, w, manifest):
    """Validates every training file under root; returns the number checked."""
    check = validate_npz if w.fmt == "npz" else validate_tfrecord
    for rel, size in sorted(manifest.items()):
        check(os.path.join(root, rel), w, size)
    return len(manifest)


# ---------------------------------------------------------------------------
# Pieces the loaders use while they stream a file.

class RecordScanner:
    """Splits a TFRecord fed in pieces into frames. feed() returns how many
    frames the piece completed. Every length CRC is checked; every data CRC
    too when verify_data. FormatError on a bad frame."""

    def __init__(self, name, verify_data):
        self.name, self.verify = name, verify_data
        self.part = bytearray()  # the header or footer being collected
        self.need = 12  # bytes of header/footer still wanted; 0 while in data
        self.data_left = 0
        self.in_footer = False
        self.crc = 0

    def feed(self, piece):
        done, pos, n = 0, 0, len(piece)
        while pos < n:
            if self.need == 0:  # inside the data
                take = min(self.data_left, n - pos)
                if self.verify:
                    self.crc = crc32c(piece[pos:pos + take], self.crc)
                self.data_left -= take
                pos += take
                if self.data_left == 0:
                    self.need, self.in_footer = 4, True
                continue
            take = min(self.need - len(self.part), n - pos)
            self.part += piece[pos:pos + take]
            pos += take
            if len(self.part) == self.need:
                done += self._frame_edge()
        return done

    def _frame_edge(self):
        part, self.part = bytes(self.part), bytearray()
        if self.in_footer:
            if self.verify:
                want = (((self.crc >> 15) | (self.crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
                if struct.unpack("<I", part)[0] != want:
                    raise FormatError(f"{self.name}: data CRC mismatch")
            self.need, self.in_footer = 12, False
            return 1
        if struct.unpack("<I", part[8:])[0] != masked_crc(part[:8]):
            raise FormatError(f"{self.name}: length CRC mismatch")
        self.data_left = struct.unpack("<Q", part[:8])[0]
        self.need, self.crc = 0, 0
        if self.data_left == 0:
            self.need, self.in_footer = 4, True
        return 0

    def at_boundary(self):
        return self.need == 12 and not self.part and not self.in_footer


def npz_member(name, tail_reader, size):
    """Finds member `name` of a stored zip the way zipfile does: the end record
    (and zip64 locator) at the end of the file, then the central directory.
    tail_reader(offset, n) returns bytes. Returns (header offset, stored size, CRC-32)."""
    end = tail_reader(size - 22, 22)
    if len(end) != 22 or end[:4] != b"PK\x05\x06":
        raise FormatError("no zip end record (not an npz, or a zip with a comment)")
    _, _, _, _, _, cd_size, cd_offset, _ = struct.unpack("<4s4H2IH", end)
    locator = tail_reader(size - 42, 20)
    if locator[:4] == b"PK\x06\x07":
        z64 = tail_reader(struct.unpack("<Q", locator[8:16])[0], 56)
        cd_size, cd_offset = struct.unpack("<QQ", z64[40:56])
    cd = tail_reader(cd_offset, cd_size)
    pos = 0
    while pos + 46 <= len(cd) and cd[pos:pos + 4] == b"PK\x01\x02":
        (method, crc, csize, usize, nlen, elen, clen,
         offset) = struct.unpack("<10xH4xIIIHHH8xI", cd[pos:pos + 46])
        entry = cd[pos + 46:pos + 46 + nlen].decode(errors="replace")
        extra = cd[pos + 46 + nlen:pos + 46 + nlen + elen]
        if entry == name:
            csize, offset = _zip64_fields(extra, usize, csize, offset)
            if method != 0:
                raise FormatError(f"{name} is compressed (method {method}); DLIO writes stored npz")
            return offset, csize, crc
        pos += 46 + nlen + elen + clen
    raise FormatError(f"no member {name} in the zip directory")


def _zip64_fields(extra, usize, csize, offset):
    """Replaces 0xFFFFFFFF sizes/offset by the zip64 extra field's values."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, n = struct.unpack("<HH", extra[pos:pos + 4])
        if tag == 1:
            vals = list(struct.unpack(f"<{n // 8}Q", extra[pos + 4:pos + 4 + n - n % 8]))
            if usize == 0xFFFFFFFF:
                vals.pop(0)
            if csize == 0xFFFFFFFF:
                csize = vals.pop(0)
            if offset == 0xFFFFFFFF:
                offset = vals.pop(0)
        pos += 4 + n
    return csize, offset


def npy_header(first):
    """(shape, header bytes) of a .npy member from its first bytes; FormatError if not uint8."""
    if first[:6] != b"\x93NUMPY":
        raise FormatError("member does not start with the .npy magic")
    if first[6] == 1:
        hlen, start = struct.unpack("<H", first[8:10])[0], 10
    else:
        hlen, start = struct.unpack("<I", first[8:12])[0], 12
    header = ast.literal_eval(bytes(first[start:start + hlen]).decode("latin1"))
    if header.get("descr") != "|u1":
        raise FormatError(f"x has dtype {header.get('descr')}, expected |u1")
    return tuple(header["shape"]), start + hlen

