"""granary.Dataset over an S3 bucket on a real S3-compatible server
(moto_server on loopback): the bucket's bytes in-process and attached,
PermissionError when the server refuses the credentials, OSError with the
origin's message when the server is gone. Skipped without moto_server."""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

import granary

MOTO = shutil.which("moto_server")
pytestmark = pytest.mark.skipif(MOTO is None, reason="needs moto_server on PATH")

KEYS = {"accessKeyId": "testing", "secretAccessKey": "testing", "region": "us-east-1"}


class Moto:
    """moto_server on a free loopback port, in its own process group."""

    def __init__(self, **env):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([MOTO, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env={**os.environ, **env}, start_new_session=True)

    def wait_ready(self, deadline_s=60):
        # A TCP connect, not an HTTP request: requests count against
        # INITIAL_NO_AUTH_ACTION_COUNT.
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "moto_server exited"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"moto_server did not listen on {self.port} in {deadline_s} s")

    def put(self, path, data=b""):
        # An explicit type: urllib's default (a form) makes moto parse the body as one.
        req = urllib.request.Request(f"{self.endpoint}/{path}", data=data, method="PUT",
                                     headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req, timeout=30).close()

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def servers(origin):
    """(open moto holding bucket/ds = the origin tree, moto that checks credentials)."""
    _, files = origin
    open_moto, strict_moto = Moto(), Moto(INITIAL_NO_AUTH_ACTION_COUNT="0")
    try:
        open_moto.wait_ready()
        strict_moto.wait_ready()
        open_moto.put("bucket")
        for rel, data in files.items():
            open_moto.put(f"bucket/ds/{rel}", data)
        yield open_moto, strict_moto
    finally:
        open_moto.stop()
        strict_moto.stop()


def test_a_bucket_reads_its_bytes_in_process_and_attached(servers, origin, tmp_path):
    moto, _ = servers
    _, files = origin
    with granary.Dataset("s3://bucket/ds", cache_dir=str(tmp_path / "cache"),
                         endpoint=moto.endpoint, **KEYS) as ds:
        assert sorted(ds.paths) == sorted(files)
        assert all(ds[i] == files[ds.path(i)] for i in range(len(ds)))
        with granary.Dataset(ds.socket_path) as attached:
            assert all(attached.read(p) == files[p] for p in files)
        with pytest.raises(FileNotFoundError):
            ds.read("cat/none.jpg")


def test_refused_credentials_raise_permission_error(servers, tmp_path):
    _, strict = servers
    with pytest.raises(PermissionError):
        granary.Dataset("s3://bucket/ds", cache_dir=str(tmp_path / "cache"),
                        endpoint=strict.endpoint, **KEYS)


def test_an_unknown_origin_option_raises_value_error(servers, tmp_path):
    moto, _ = servers
    with pytest.raises(ValueError):
        granary.Dataset("s3://bucket/ds", cache_dir=str(tmp_path / "cache"),
                        endpoint=moto.endpoint, noSuchOption="1", **KEYS)


def test_a_server_gone_raises_os_error_with_the_origins_message(origin, tmp_path):
    _, files = origin
    moto = Moto()
    try:
        moto.wait_ready()
        moto.put("bucket")
        for rel in ("cat/c1.jpg", "dog/d0.jpg"):
            moto.put(f"bucket/ds/{rel}", files[rel])
        with granary.Dataset("s3://bucket/ds", cache_dir=str(tmp_path / "cache"),
                             endpoint=moto.endpoint, maxAttempts="1", origin_timeout=20,
                             serve=False, **KEYS) as ds:
            assert ds.read("cat/c1.jpg") == files["cat/c1.jpg"]
            moto.stop()
            with pytest.raises(OSError) as e:
                ds.read("dog/d0.jpg")
            assert type(e.value) is OSError, e.value  # not FileNotFoundError, not TimeoutError
            assert "d0.jpg" in str(e.value)
            assert ds.read("cat/c1.jpg") == files["cat/c1.jpg"]  # cached
    finally:
        moto.stop()
