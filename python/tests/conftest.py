"""Fixtures of the Python module's tests: a small real tree of images on local
disk (the origin, read through Client::Open over a cache directory)."""

import os
import sys

import pytest

_PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _PYTHON_DIR not in sys.path:
    sys.path.insert(0, _PYTHON_DIR)  # the package from the source tree (ctest sets PYTHONPATH too)

# class -> files; sizes vary so a short or shifted read shows. "nested" holds a
# subdirectory (torchvision walks it), upper-case and non-image extensions.
TREE = {
    "cat": ["c1.jpg", "c0.png", "c2.JPEG"],
    "dog": ["d1.jpeg", "d0.jpg", "readme.txt"],
    "nested": ["n1.png", "sub/n2.jpg", "sub/deeper/n3.PNG", "a.bmp"],
}


def _image_bytes(name, seed):
    import io

    from PIL import Image

    ext = name.rsplit(".", 1)[-1].lower()
    fmt = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "bmp": "BMP"}[ext]
    size = 4 + seed % 7
    img = Image.new("RGB", (size, size + 1), ((37 * seed) % 256, (91 * seed) % 256, 200))
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


def make_tree(root):
    """Writes TREE under `root`; returns {relative path: bytes} of every file."""
    files = {}
    seed = 1
    for cls, names in sorted(TREE.items()):
        for name in names:
            rel = f"{cls}/{name}"
            data = (b"not an image %d\n" % seed) if name.endswith(".txt") else _image_bytes(name, seed)
            files[rel] = data
            seed += 1
    files["top-level.jpg"] = _image_bytes("x.jpg", 99)  # not in a class: torchvision skips it
    lines = [f"{rel} {i % 3}" for i, rel in enumerate(sorted(files)) if not rel.endswith(".txt")]
    files["train_list.txt"] = ("\n".join(lines) + "\n").encode()
    for rel, data in files.items():
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return files


@pytest.fixture(scope="session")
def origin(tmp_path_factory):
    """(source directory, {relative path: bytes}) shared by the read-only tests."""
    root = tmp_path_factory.mktemp("origin")
    return str(root), make_tree(str(root))


@pytest.fixture
def fresh_origin(tmp_path):
    """An origin of this test's own (tests that change or remove it)."""
    root = tmp_path / "origin"
    root.mkdir()
    return str(root), make_tree(str(root))


@pytest.fixture(scope="session")
def ds(origin, tmp_path_factory):
    """An in-process Dataset over `origin`, serving its socket."""
    import granary

    d = granary.Dataset(origin[0], cache_dir=str(tmp_path_factory.mktemp("cache")))
    yield d
    d.close()


def pytest_configure(config):
    # The tests start 4 DataLoader workers on purpose, also on 2-core machines.
    config.addinivalue_line("filterwarnings",
                            "ignore:This DataLoader will create:UserWarning")
