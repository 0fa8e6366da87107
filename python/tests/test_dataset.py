"""granary.Dataset: bytes equal to the origin's, in-process and attached,
train_list.txt labels, buffers, fork and pickling, and the error cases."""

import os
import pickle
import shutil

import numpy as np
import pytest

import granary


def test_every_file_reads_the_origins_bytes_in_process(ds, origin):
    _, files = origin
    assert not ds.attached
    assert sorted(ds.paths) == sorted(files)
    assert len(ds) == len(files)
    for i in range(len(ds)):
        assert ds[i] == files[ds.path(i)], ds.path(i)
        assert ds.read(ds.path(i)) == files[ds.path(i)]
    assert ds[-1] == files[ds.path(len(ds) - 1)]


def test_every_file_reads_the_origins_bytes_attached_through_serve(ds, origin):
    _, files = origin
    assert ds.socket_path and os.path.exists(ds.socket_path)
    with granary.Dataset(ds.socket_path) as attached:
        assert attached.attached
        assert sorted(attached.paths) == sorted(files)
        for i in range(len(attached)):
            assert attached[i] == files[attached.path(i)], attached.path(i)
        assert attached.stat("cat/c1.jpg").size == len(files["cat/c1.jpg"])


def test_readinto_fills_any_writable_buffer(ds, origin):
    _, files = origin
    want = files["nested/sub/n2.jpg"]
    buf = bytearray(len(want) + 10)
    assert ds.readinto("nested/sub/n2.jpg", buf) == len(want)
    assert bytes(buf[:len(want)]) == want

    arr = np.zeros(len(want), dtype=np.uint8)
    assert ds.readinto("nested/sub/n2.jpg", arr) == len(want)
    assert arr.tobytes() == want

    view = memoryview(bytearray(5))
    assert ds.readinto("nested/sub/n2.jpg", view, offset=3) == 5
    assert view.tobytes() == want[3:8]
    assert ds.read_at("nested/sub/n2.jpg", 2, 4) == want[2:6]

    with pytest.raises(TypeError):
        ds.readinto("nested/sub/n2.jpg", b"read-only bytes")


def test_stat_and_listdir_come_from_the_snapshot(ds, origin):
    _, files = origin
    info = ds.stat("dog/d0.jpg")
    assert (info.path, info.is_dir, info.size) == ("dog/d0.jpg", False, len(files["dog/d0.jpg"]))
    assert ds.stat("dog").is_dir
    assert sorted(ds.listdir("")) == ["cat", "dog", "nested", "top-level.jpg", "train_list.txt"]
    assert sorted(ds.listdir("nested")) == ["a.bmp", "n1.png", "sub"]
    assert sorted(e.path for e in ds.list("nested", recursive=True)) == [
        "nested/a.bmp", "nested/n1.png", "nested/sub/deeper/n3.PNG", "nested/sub/n2.jpg"]


def test_train_list_gives_the_samples_and_their_labels(origin, tmp_path):
    root, files = origin
    lines = files["train_list.txt"].decode().split()
    want = list(zip(lines[0::2], map(int, lines[1::2])))
    # A local list file, and the same list read through the dataset itself.
    for list_file in (os.path.join(root, "train_list.txt"), "train_list.txt"):
        with granary.Dataset(root, cache_dir=str(tmp_path / "cache"), list_file=list_file,
                             serve=False) as d:
            assert [(d.path(i), d.label(i)) for i in range(len(d))] == want
            assert all(d[i] == files[d.path(i)] for i in range(len(d)))


def test_a_fork_child_attaches_again_and_reads(ds, origin):
    _, files = origin
    ds[0]  # the parent's native client is in use
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = all(ds[i] == files[ds.path(i)] for i in range(len(ds))) and ds._client.owner_pid == os.getpid()
            code = 0 if ok else 2
        finally:
            os.write(write_end, bytes([code]))
            os._exit(code)
    os.close(write_end)
    _, wait_status = os.waitpid(pid, 0)
    assert os.read(read_end, 1) == b"\x00"
    os.close(read_end)
    assert os.waitstatus_to_exitcode(wait_status) == 0
    assert ds[0] == files[ds.path(0)]  # the parent's client is untouched


def test_pickling_carries_the_socket_not_the_handle(ds, origin, tmp_path):
    _, files = origin
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.attached and copy.socket_path == ds.socket_path
    assert [copy[i] for i in range(len(copy))] == [files[p] for p in ds.paths]
    copy.close()
    with granary.Dataset(origin[0], cache_dir=str(tmp_path / "cache"), serve=False) as private:
        with pytest.raises(TypeError):
            pickle.dumps(private)


def test_status_and_load_report_the_dataset(ds, origin):
    summary = ds.load("cat")
    assert summary["files_requested"] == 3 and summary["files_failed"] == 0
    st = ds.status()
    assert isinstance(st, dict) and st
    assert set(granary.status(ds.socket_path)) == set(st)  # the same report through the socket


def test_missing_paths_raise_file_not_found(ds):
    with pytest.raises(FileNotFoundError) as e:
        ds.read("cat/nope.jpg")
    assert "nope.jpg" in str(e.value)
    with pytest.raises(FileNotFoundError):
        ds.stat("nope")
    with pytest.raises(FileNotFoundError):
        ds.readinto("nope", bytearray(4))
    with pytest.raises(FileNotFoundError):
        granary.Dataset("/nonexistent/granary-py-origin", cache_dir="/tmp/granary-py-unused")


def test_bad_arguments_raise_value_error(ds):
    with pytest.raises(ValueError):
        ds.readinto("cat/c1.jpg", bytearray(4), offset=-1)
    with pytest.raises(ValueError):
        ds.read_at("cat/c1.jpg", 0, -5)
    with pytest.raises(ValueError):
        ds.prefetch([0], window=0)
    with pytest.raises(ValueError):
        ds.read("cat")  # a directory
    with pytest.raises(ValueError):
        ds.label(0)  # no list_file
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(ValueError):
        granary.Dataset(ds.socket_path, cache_dir="/tmp/x")  # a daemon's dataset has its own cache


def test_a_vanished_origin_raises_os_error_with_the_path(fresh_origin, tmp_path):
    root, files = fresh_origin
    with granary.Dataset(root, cache_dir=str(tmp_path / "cache"), serve=False) as d:
        assert d.read("cat/c0.png") == files["cat/c0.png"]  # cached now
        shutil.rmtree(root)
        with pytest.raises(OSError) as e:
            d.read("dog/d1.jpeg")  # in the snapshot, never cached
        assert "d1.jpeg" in str(e.value)
        assert d.read("cat/c0.png") == files["cat/c0.png"]  # the cache still serves it


def test_a_size_hint_off_from_the_file_still_reads_the_whole_file(ds, origin):
    # ds[i] reads straight into a bytes object of the snapshot's size; a file
    # the snapshot has grown or shrunk since (granary sync) must neither be
    # cut short nor padded.
    _, files = origin
    want = files["cat/c1.jpg"]
    for hint in (0, 1, len(want) - 1, len(want), len(want) + 1, 10 * len(want)):
        got = ds.read("cat/c1.jpg", hint)
        assert got == want, hint
        assert hash(got) == hash(want) and len(got) == len(want)
