"""granary.Dataset attached to a real `granary mount` (the built CLI, $GRANARY_CLI):
the same bytes as the origin while FUSE readers read the same files, paths
relative to the named directory, ImageFolder equal to torchvision's walking
the mount, and load/status with the figures of `granary status --json`.
Needs root and /dev/fuse (skipped otherwise)."""

import concurrent.futures
import json
import os
import subprocess

import pytest
import torchvision
from torch.utils.data import DataLoader

import granary
import granary.torch as gtorch

CLI = os.environ.get("GRANARY_CLI", "")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/dev/fuse", os.R_OK | os.W_OK) or not os.path.isfile(CLI),
    reason="needs root, /dev/fuse and $GRANARY_CLI (the built `granary`)")


def _granary(*args, timeout=120):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def mount(origin, tmp_path_factory):
    """(mount point, run dir) of `granary mount` over the origin."""
    work = tmp_path_factory.mktemp("mount")
    mp, run = str(work / "mnt"), str(work / "run")
    os.mkdir(mp)
    r = _granary("mount", origin[0], mp, "--cache-dir", f"{work / 'cache'}:1G", "--run-dir", run)
    assert r.returncode == 0, r.stderr
    try:
        yield mp, run
    finally:
        _granary("umount", "--run-dir", run, mp)
        if os.path.ismount(mp):
            subprocess.run(["umount", "-l", mp], check=False)


def test_attached_to_a_mount_reads_the_origins_bytes_beside_fuse_readers(mount, origin):
    mp, run = mount
    _, files = origin

    def read_through_fuse(rel):
        with open(os.path.join(mp, rel), "rb") as f:
            return f.read()

    with granary.Dataset(mp, run_dir=run) as ds, concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert ds.attached
        assert sorted(ds.paths) == sorted(files)
        for _ in range(3):
            fuse_reads = {rel: pool.submit(read_through_fuse, rel) for rel in files}
            for i in range(len(ds)):
                assert ds[i] == files[ds.path(i)], ds.path(i)
            assert all(fuse_reads[rel].result() == files[rel] for rel in files)

        raw = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
        assert list(raw) == [files[p] for p in ds.paths]


def test_a_directory_inside_the_mount_roots_the_paths(mount, origin):
    mp, run = mount
    _, files = origin
    with granary.Dataset(os.path.join(mp, "nested"), run_dir=run) as ds:
        assert sorted(ds.paths) == sorted(rel[len("nested/"):] for rel in files
                                          if rel.startswith("nested/"))
        assert ds.read("sub/n2.jpg") == files["nested/sub/n2.jpg"]


def test_image_folder_on_a_mount_matches_torchvision_walking_it(mount):
    mp, run = mount
    ours = gtorch.ImageFolder(mp, run_dir=run)
    theirs = torchvision.datasets.ImageFolder(mp)
    assert (ours.classes, ours.class_to_idx, ours.samples) == \
        (theirs.classes, theirs.class_to_idx, theirs.samples)
    # The epoch's order goes to the daemon's engine through the socket.
    queued = ours.dataset.prefetch_status()["queued"]
    assert list(gtorch.PrefetchSampler(ours, range(len(ours)), window=4)) == list(range(len(ours)))
    assert ours.dataset.prefetch_status()["queued"] == queued + len(ours)
    ours.dataset.close()


def test_load_and_status_report_what_the_cli_reports(mount, origin):
    mp, run = mount
    summary = granary.load(mp, "dog", run_dir=run)
    assert summary["files_requested"] == 3 and summary["files_failed"] == 0
    cli = _granary("status", "--json", "--run-dir", run, mp)
    assert cli.returncode == 0, cli.stderr
    ours = granary.status(mp, run_dir=run)
    assert set(ours) == set(json.loads(cli.stdout))
