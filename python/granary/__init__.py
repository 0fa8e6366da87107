"""Granary: read a dataset through Granary's cache without FUSE.

``granary.Dataset`` is a map-style dataset over a Granary dataset: opened in
this process (a source URI or a local path, with a cache directory), or
attached to the daemon of a ``granary mount`` (a path inside the mount) or to
a socket another process's ``Dataset`` serves. Its samples come from the
snapshot (no directory walk, no per-rank listing) or from a PaddleClas
``train_list.txt``.

Processes: an in-process ``Dataset`` serves its engine on a Unix socket, so
DataLoader workers attach to it, under fork (the child notices the pid changed
and attaches again before its first read) and under spawn (pickling carries
the socket path, never the native handle).

Errors: FileNotFoundError (no such path), PermissionError (credentials
refused), ValueError (bad arguments), OSError with the origin's message for
the rest (origin unreachable, local I/O). See docs/python.md.

Thread safety: a Dataset may be read from many threads at once; the GIL is
released for every read.
"""

import atexit
import collections
import json
import multiprocessing.util
import os
import stat as _stat
import threading

try:
    from . import _granary  # installed beside the package
except ImportError:
    import _granary  # a build tree on PYTHONPATH

__all__ = ["Dataset", "FileInfo", "load", "status"]

FileInfo = collections.namedtuple("FileInfo", ["path", "is_dir", "size", "mtime_ns"])

# Origin options that are credentials: they go to OpenOptions.origin_secrets.
_SECRET_KEYS = frozenset({"accessKeyId", "secretAccessKey", "sessionToken"})
_GRANARY_FSTYPE = "fuse.granary"


def _unescape_mountinfo(field):
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and len(field[i + 1:i + 4]) == 3 and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mount_fstype(path):
    """The filesystem type of the mount holding `path` (None if unknown)."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return None
    best, fstype = "", None
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        if len(fields) < 5:
            continue
        point = _unescape_mountinfo(fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, right.split()[0]
    return fstype


def _is_attach_target(target):
    """True for a Unix socket or a path inside a granary mount."""
    if "://" in target:
        return False
    try:
        st = os.stat(target)
    except OSError:
        return False
    if _stat.S_ISSOCK(st.st_mode):
        return True
    return _mount_fstype(target) == _GRANARY_FSTYPE


def _close_at_exit(client):
    """Closes `client` when this process ends, so the daemon hears of the last
    reads it made without asking (they are sent in batches; docs/api.md).
    DataLoader workers end through multiprocessing, which runs its finalizers
    but not atexit; other processes run atexit."""
    def close():
        if not client.closed:
            client.close()
    atexit.register(close)
    multiprocessing.util.Finalize(None, close, exitpriority=10)


def _open_native(target, cache_dir=None, cache_size="", mem_cache="", origin_concurrency=0,
                 origin_timeout=60.0, policy="lru", connections=16, max_open_files=65536,
                 run_dir=None, direct=True, **origin_options):
    """(native client, attached?) for `target`, as Dataset() decides it."""
    if not isinstance(target, (str, os.PathLike)):
        raise TypeError(f"granary: target must be a path or URI string, not {type(target).__name__}")
    target = os.fspath(target)
    if not target:
        raise ValueError("granary: empty target")
    if "://" not in target:
        target = os.path.expanduser(target)
    if _is_attach_target(target):
        if cache_dir is not None or origin_options:
            raise ValueError(f"granary: {target} is served by a daemon: cache_dir and origin "
                             "options belong to its `granary mount`")
        return _granary.Client.attach(target, connections=connections,
                                      max_open_files=max_open_files,
                                      run_dir=os.fspath(run_dir or ""),
                                      direct=bool(direct)), True
    if cache_dir is None:
        cache_dirs = []
    elif isinstance(cache_dir, (str, os.PathLike)):
        cache_dirs = [os.fspath(cache_dir)]
    else:
        cache_dirs = [os.fspath(d) for d in cache_dir]
    options, secrets = {}, {}
    for key, value in origin_options.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        (secrets if key in _SECRET_KEYS else options)[key] = str(value)
    client = _granary.Client.open(
        target, cache_dirs=cache_dirs, cache_size=str(cache_size or ""),
        mem_cache=str(mem_cache or ""), origin_options=options, origin_secrets=secrets,
        origin_concurrency=int(origin_concurrency), origin_timeout=float(origin_timeout),
        policy=policy)
    return client, False


def _parse_list_file(text, name):
    """[(path, label)] from PaddleClas `path label` lines (blank lines skipped)."""
    samples = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        parts = line.rsplit(None, 1)
        if len(parts) != 2:
            raise ValueError(f"{name}:{lineno}: expected 'path label', got {line!r}")
        try:
            label = int(parts[1])
        except ValueError:
            raise ValueError(f"{name}:{lineno}: label {parts[1]!r} is not an integer") from None
        samples.append((parts[0].lstrip("/"), label))
    return samples


class Dataset:
    """A map-style dataset over a Granary dataset: ``ds[i]`` is the bytes of file i.

    ``source_or_mountpoint``: a source (``s3://bucket/prefix``, ``http(s)://``,
    a local or NFS directory) opened in this process over ``cache_dir``; or a
    path inside a ``granary mount`` or a socket path (``ds.socket_path`` of
    another Dataset), attached to the daemon serving it.

    ``list_file``: a PaddleClas ``train_list.txt`` (``path label`` per line,
    paths relative to the dataset root): the samples and ``label(i)``. A
    local file if it exists, else a path inside the dataset. Without it the
    samples are every file of the snapshot, in its order.

    Keyword options of ``Client::Open`` (in-process only): ``cache_size``,
    ``mem_cache``, ``origin_concurrency``, ``origin_timeout`` (seconds),
    ``policy``; any other keyword is a connector option of the source
    (``endpoint``, ``region``, ..., ``accessKeyId``/``secretAccessKey``/
    ``sessionToken`` as secrets). ``serve=False`` skips the socket (no
    DataLoader workers then). ``connections``, ``max_open_files`` and
    ``direct`` (open cached files without asking the daemon, default True)
    tune attached clients.
    """

    def __init__(self, source_or_mountpoint, *, cache_dir=None, list_file=None, serve=True,
                 connections=16, max_open_files=65536, run_dir=None, direct=True, **options):
        self.source = os.fspath(source_or_mountpoint)
        if "://" not in self.source:
            self.source = os.path.expanduser(self.source)
        self._attach_options = {"connections": int(connections),
                                "max_open_files": int(max_open_files),
                                "direct": bool(direct),
                                "run_dir": os.fspath(run_dir or "")}
        self._client, self.attached = _open_native(self.source, cache_dir=cache_dir,
                                                   **self._attach_options, **options)
        self._client_pid = os.getpid()
        self._lock, self._lock_pid = threading.Lock(), os.getpid()
        if self.attached:
            self._attach_target = self.source
        elif serve:
            self._attach_target = self._client.serve()
        else:
            self._attach_target = None
        files = self._client.list("", True)
        if list_file is None:
            self._paths = [f[0] for f in files if not f[1]]
            self._sizes = [f[2] for f in files if not f[1]]
            self._labels = None
        else:
            pairs = _parse_list_file(self._read_list_file(os.fspath(list_file)),
                                     os.fspath(list_file))
            sizes = {f[0]: f[2] for f in files if not f[1]}
            self._paths = [p for p, _ in pairs]
            self._labels = [label for _, label in pairs]
            self._sizes = [sizes.get(p, -1) for p in self._paths]

    def _read_list_file(self, list_file):
        if os.path.isfile(list_file):
            with open(list_file, encoding="utf-8") as f:
                return f.read()
        return self._client.read(list_file).decode("utf-8")

    # -- processes ---------------------------------------------------------

    @property
    def socket_path(self):
        """What a worker attaches to: the Serve() socket or the daemon's path (None: serve=False)."""
        return self._attach_target

    def _native(self):
        client = self._client
        if client is not None and self._client_pid == os.getpid():
            return client
        return self._reattach()

    def _reattach(self):
        pid = os.getpid()
        if self._lock_pid != pid:  # a fork child: the parent's lock may be held
            self._lock, self._lock_pid = threading.Lock(), pid
        with self._lock:
            if self._client is not None and self._client_pid == pid:
                return self._client
            if self._attach_target is None:
                raise OSError(f"granary: {self.source} was opened with serve=False: "
                              "another process cannot attach to it")
            # The inherited handle (fork) is dropped: its destructor leaves the
            # parent's native object alone.
            self._client = _granary.Client.attach(self._attach_target, **self._attach_options)
            self._client_pid = pid
            _close_at_exit(self._client)
            return self._client

    def __getstate__(self):
        if self._attach_target is None:
            raise TypeError(f"granary.Dataset({self.source!r}) was opened with serve=False: "
                            "it cannot be sent to another process")
        state = self.__dict__.copy()
        state["_client"] = None
        state["_client_pid"] = None
        state["_lock"] = None
        state["_lock_pid"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.attached = True

    def close(self):
        """Closes this process's native client (in-process: the served socket too)."""
        client = self._client
        if client is not None and self._client_pid == os.getpid():
            client.close()
        self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- samples -----------------------------------------------------------

    def __len__(self):
        return len(self._paths)

    def _index(self, i):
        n = len(self._paths)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"granary.Dataset index {i} out of range ({n} samples)")
        return i

    def __getitem__(self, i):
        i = self._index(i)
        return self._native().read(self._paths[i], self._sizes[i])

    def path(self, i):
        """The relative path of sample i."""
        return self._paths[self._index(i)]

    def label(self, i):
        """The label of sample i (from list_file)."""
        if self._labels is None:
            raise ValueError("granary.Dataset: no labels (built without list_file)")
        return self._labels[self._index(i)]

    @property
    def paths(self):
        return list(self._paths)

    @property
    def labels(self):
        return None if self._labels is None else list(self._labels)

    # -- by path -----------------------------------------------------------

    def read(self, path, size=-1):
        """The bytes of `path` (relative to the dataset root)."""
        return self._native().read(os.fspath(path), size)

    def read_at(self, path, offset, length):
        """Up to `length` bytes of `path` at `offset`."""
        return self._native().read_at(os.fspath(path), offset, length)

    def readinto(self, path, buffer, offset=0):
        """Reads `path` from `offset` into a writable buffer; returns the bytes read."""
        return self._native().readinto(os.fspath(path), buffer, offset)

    def stat(self, path):
        return FileInfo(**self._native().stat(os.fspath(path)))

    def list(self, path="", recursive=False):
        """FileInfo entries of a directory (recursive: every file below it), from the snapshot."""
        return [FileInfo(*e) for e in self._native().list(os.fspath(path), recursive)]

    def _files(self):
        """(path, size) of every file in the snapshot (the sample list when it is that)."""
        if self._labels is None:
            return list(zip(self._paths, self._sizes))
        return [(e[0], e[2]) for e in self._native().list("", True) if not e[1]]

    def listdir(self, path=""):
        """The names in a directory, like os.listdir."""
        return [e[0].rsplit("/", 1)[-1] for e in self._native().list(os.fspath(path), False)]

    # -- engine ------------------------------------------------------------

    def prefetch(self, paths_or_indices, window=256):
        """Hands the engine an order of files (sample indices or paths) to fetch ahead.

        It fetches in exactly this order, at most `window` files ahead of the
        readers; a new call replaces the previous order (a new epoch).
        """
        paths = [p if isinstance(p, str) else self._paths[self._index(p)]
                 for p in paths_or_indices]
        self._native().prefetch(paths, int(window))

    def prefetch_status(self):
        """dict(queued, fetched, skipped, failed, position) of the prefetcher."""
        return self._native().prefetch_status()

    def load(self, path=""):
        """Warms `path` (a directory, a file or "" = all) like `granary load`; a summary dict."""
        return self._native().load(os.fspath(path))

    def status(self):
        """The dataset status as `granary status --json` prints it (a dict)."""
        return json.loads(self._native().status_json())

    def info(self):
        return self._native().info()

    def refresh(self):
        """Drops cached descriptors and re-reads the snapshot served now (samples unchanged)."""
        self._native().refresh()

    def __repr__(self):
        how = "attached" if self.attached else "in-process"
        return f"granary.Dataset({self.source!r}, {len(self)} samples, {how})"


def load(target, path="", **options):
    """Warms `path` of `target` (a mount, a socket or a source with cache_dir=...) like
    `granary load`; returns the summary as a dict."""
    client, _ = _open_native(target, **options)
    try:
        return client.load(os.fspath(path))
    finally:
        client.close()


def status(target, **options):
    """The status of `target` (a mount, a socket or a source) as `granary status --json`."""
    client, _ = _open_native(target, **options)
    try:
        return json.loads(client.status_json())
    finally:
        client.close()
