"""granary.torch: ImageFolder equals torchvision's on the same tree, DataLoader
workers under fork and spawn, and PrefetchSampler driving the engine."""

import time

import pytest
import torch
import torchvision
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, Subset
from torchvision import transforms

import granary
import granary.torch as gtorch

_TO_TENSOR = transforms.PILToTensor()


def _assert_same_items(items, reference):
    """items: [(image tensor, target)] in reference's order."""
    assert len(items) == len(reference)
    for i, (img, target) in enumerate(items):
        want_img, want_target = reference[i]
        assert target == want_target, i
        assert torch.equal(img, want_img), reference.samples[i][0]


def test_image_folder_matches_torchvision(origin, ds):
    root, _ = origin
    ours = gtorch.ImageFolder(root, dataset=ds)
    theirs = torchvision.datasets.ImageFolder(root)
    assert ours.classes == theirs.classes == ["cat", "dog", "nested"]
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.imgs == theirs.imgs
    assert ours.targets == theirs.targets
    for i in range(len(theirs)):
        img, target = ours[i]
        want_img, want_target = theirs[i]
        assert img.mode == "RGB" and target == want_target
        assert torch.equal(_TO_TENSOR(img), _TO_TENSOR(want_img)), ours.samples[i][0]


def test_image_folder_opens_the_dataset_itself(origin, tmp_path):
    root, _ = origin
    ours = gtorch.ImageFolder(root + "/", cache_dir=str(tmp_path / "cache"), serve=False)
    assert ours.samples == torchvision.datasets.ImageFolder(root + "/").samples
    ours.dataset.close()


def test_image_folder_takes_is_valid_file_and_transforms(origin, ds):
    root, _ = origin
    only_png = lambda p: p.lower().endswith(".png")  # noqa: E731
    with pytest.raises(FileNotFoundError):  # "dog" has no PNG, as torchvision says too
        gtorch.ImageFolder(root, dataset=ds, is_valid_file=only_png)
    with pytest.raises(FileNotFoundError):
        torchvision.datasets.ImageFolder(root, is_valid_file=only_png)

    jpg = lambda p: ".jp" in p.lower()  # noqa: E731
    ours = gtorch.ImageFolder(root, dataset=ds, is_valid_file=jpg, transform=_TO_TENSOR,
                              target_transform=lambda t: t + 100)
    theirs = torchvision.datasets.ImageFolder(root, is_valid_file=jpg, transform=_TO_TENSOR,
                                              target_transform=lambda t: t + 100)
    assert ours.samples == theirs.samples
    _assert_same_items([ours[i] for i in range(len(ours))], theirs)


def test_data_loader_with_four_forked_workers(origin, ds):
    root, files = origin
    ours = gtorch.ImageFolder(root, dataset=ds, transform=_TO_TENSOR)
    theirs = torchvision.datasets.ImageFolder(root, transform=_TO_TENSOR)
    loader = DataLoader(ours, batch_size=None, num_workers=4, multiprocessing_context="fork")
    _assert_same_items(list(loader), theirs)

    raw = DataLoader(ds, batch_size=None, num_workers=4, multiprocessing_context="fork")
    assert list(raw) == [files[p] for p in ds.paths]


def test_data_loader_with_four_spawned_workers(origin, ds):
    root, _ = origin
    ours = gtorch.ImageFolder(root, dataset=ds, transform=_TO_TENSOR)
    theirs = torchvision.datasets.ImageFolder(root, transform=_TO_TENSOR)
    loader = DataLoader(ours, batch_size=None, num_workers=4, multiprocessing_context="spawn")
    _assert_same_items(list(loader), theirs)


def _wait_for_prefetch(d, done, deadline_s=60):
    """Polls prefetch_status until fetched + skipped + failed reaches `done`."""
    deadline = time.monotonic() + deadline_s
    while True:
        st = d.prefetch_status()
        if st["fetched"] + st["skipped"] + st["failed"] >= done or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def test_prefetch_sampler_makes_the_engine_fetch_a_cold_epoch(origin, tmp_path):
    root, _ = origin
    cold = granary.Dataset(root, cache_dir=str(tmp_path / "cache"))
    ours = gtorch.ImageFolder(root, dataset=cold, transform=_TO_TENSOR)
    theirs = torchvision.datasets.ImageFolder(root, transform=_TO_TENSOR)
    sampler = gtorch.PrefetchSampler(
        ours, RandomSampler(ours, generator=torch.Generator().manual_seed(7)), window=64)
    assert len(sampler) == len(ours)

    order = list(sampler)  # epoch 1: hands the order over, no reads yet
    assert sorted(order) == list(range(len(ours)))
    st = _wait_for_prefetch(cold, len(order))
    assert st["queued"] == len(order)
    assert st["fetched"] == len(order) and st["failed"] == 0, st
    status = cold.status()  # the engine's own figures: exactly the epoch's files, from the origin
    assert status["cached_files"] == len(order) and status["reads"] == 0, status

    loader = DataLoader(ours, batch_size=None, sampler=sampler, num_workers=2,
                        multiprocessing_context="fork")
    items = list(loader)  # epoch 2: every file is cached already, nothing more to fetch
    assert len(items) == len(ours)
    st = cold.prefetch_status()
    assert st["queued"] == 2 * len(order)
    assert st["fetched"] == len(order) and st["failed"] == 0, st
    by_target = sorted((t, img.flatten().tolist()) for img, t in items)
    want = sorted((t, img.flatten().tolist()) for img, t in (theirs[i] for i in range(len(theirs))))
    assert by_target == want
    cold.close()


def test_a_cold_epoch_reads_right_while_the_engine_prefetches(origin, tmp_path):
    root, _ = origin
    cold = granary.Dataset(root, cache_dir=str(tmp_path / "cache"))
    ours = gtorch.ImageFolder(root, dataset=cold, transform=_TO_TENSOR)
    theirs = torchvision.datasets.ImageFolder(root, transform=_TO_TENSOR)
    sampler = gtorch.PrefetchSampler(ours, range(len(ours)), window=2)
    loader = DataLoader(ours, batch_size=None, sampler=sampler, num_workers=2,
                        multiprocessing_context="fork")
    _assert_same_items(list(loader), theirs)
    st = _wait_for_prefetch(cold, len(ours))
    assert st["queued"] == len(ours) and st["failed"] == 0, st
    assert cold.status()["cached_files"] == len(ours)
    cold.close()


def test_prefetch_sampler_forwards_set_epoch_and_len_to_distributed_sampler(ds):
    inner = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
    sampler = gtorch.PrefetchSampler(ds, inner, window=8)
    assert len(sampler) == len(inner) == (len(ds) + 1) // 2
    queued = ds.prefetch_status()["queued"]
    sampler.set_epoch(0)
    epoch0 = list(sampler)
    inner.set_epoch(0)
    assert epoch0 == list(inner)
    sampler.set_epoch(1)
    epoch1 = list(sampler)
    inner.set_epoch(1)
    assert epoch1 == list(inner) and epoch1 != epoch0
    assert ds.prefetch_status()["queued"] == queued + 2 * len(inner)


def test_prefetch_sampler_sees_through_subsets_and_refuses_other_datasets(ds):
    subset = Subset(ds, [3, 1, 2])
    sampler = gtorch.PrefetchSampler(subset, range(3), window=4)
    assert list(sampler) == [0, 1, 2]
    with pytest.raises(TypeError):
        gtorch.PrefetchSampler(list(range(4)), range(4))
    with pytest.raises(ValueError):
        gtorch.PrefetchSampler(ds, range(4), window=0)
