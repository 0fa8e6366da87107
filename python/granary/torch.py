"""PyTorch integration: a drop-in ImageFolder reading through Granary, and an
epoch-aware prefetching sampler.

``ImageFolder(root)`` gives the same ``classes``, ``class_to_idx``,
``samples`` (order and paths) and ``targets`` as
``torchvision.datasets.ImageFolder(root)`` on the same tree, built from
Granary's snapshot instead of a directory walk, and reads the images through
Granary (PIL RGB images by default).

``PrefetchSampler(dataset, sampler, window)`` wraps any sampler (RandomSampler,
DistributedSampler, ...): each epoch it materializes the sampler's order and
hands it to the engine, which fetches ahead in exactly that order while the
DataLoader's workers read; the workers' reads move the engine's position.
"""

import io
import os

import torch.utils.data

from . import Dataset

__all__ = ["IMG_EXTENSIONS", "ImageFolder", "PrefetchSampler", "pil_loader"]

# torchvision.datasets.folder.IMG_EXTENSIONS (matched case-insensitively).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def pil_loader(f):
    """The default loader: an RGB PIL image from a binary file object."""
    from PIL import Image

    img = Image.open(f)
    return img.convert("RGB")


def _join(root, rel):
    return os.path.join(root, *rel.split("/")) if rel else root


class ImageFolder(torch.utils.data.Dataset):
    """torchvision.datasets.ImageFolder over Granary.

    ``root``: what ``granary.Dataset`` takes (a path inside a granary mount,
    a local directory or a source URI opened in this process); further
    keywords (``cache_dir``, origin options) go to ``granary.Dataset``, or
    pass an open one as ``dataset=``.

    ``loader(f)`` is called with a binary file object holding the sample's
    bytes (``f.name`` is the sample's path), not with a path: PIL's
    ``Image.open`` takes either. ``is_valid_file(path)`` gets the sample's
    path as torchvision's does.
    """

    def __init__(self, root, transform=None, target_transform=None, loader=None,
                 is_valid_file=None, *, dataset=None, **dataset_options):
        root = os.fspath(root)
        self.root = root if "://" in root else os.path.expanduser(root)
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader if loader is not None else pil_loader
        self.extensions = IMG_EXTENSIONS if is_valid_file is None else None
        self.dataset = dataset if dataset is not None else Dataset(self.root, **dataset_options)

        self.classes, self.class_to_idx = self.find_classes(self.root)
        valid = is_valid_file
        if valid is None:
            def valid(path):
                return path.lower().endswith(IMG_EXTENSIONS)

        # torchvision: sorted(os.walk(class_dir)) then sorted(fnames): by
        # directory path, then by name.
        by_class = {c: [] for c in self.classes}
        for rel, size in self.dataset._files():
            top, sep, _ = rel.partition("/")
            if sep and top in by_class:
                by_class[top].append((rel, size))
        self.samples, self._relpaths, self._sizes = [], [], []
        empty = []
        for cls in sorted(self.class_to_idx):
            entries = []
            for rel, size in by_class[cls]:
                directory, _, name = rel.rpartition("/")
                entries.append((_join(self.root, directory), name, rel, size))
            entries.sort(key=lambda e: (e[0], e[1]))
            found = False
            for directory, name, rel, size in entries:
                path = os.path.join(directory, name)
                if valid(path):
                    self.samples.append((path, self.class_to_idx[cls]))
                    self._relpaths.append(rel)
                    self._sizes.append(size)
                    found = True
            if not found:
                empty.append(cls)
        if empty:
            msg = f"Found no valid file for the classes {', '.join(sorted(empty))}. "
            if self.extensions is not None:
                msg += f"Supported extensions are: {', '.join(self.extensions)}"
            raise FileNotFoundError(msg)
        self.imgs = self.samples
        self.targets = [s[1] for s in self.samples]

    def find_classes(self, directory):
        """(classes, class_to_idx) from the top-level directories of the snapshot."""
        classes = sorted(e.path.rsplit("/", 1)[-1] for e in self.dataset.list("") if e.is_dir)
        if not classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
        return classes, {c: i for i, c in enumerate(classes)}

    def __len__(self):
        return len(self.samples)

    def relpath(self, index):
        """Sample `index`'s path relative to the dataset root."""
        return self._relpaths[index]

    def __getitem__(self, index):
        path, target = self.samples[index]
        f = io.BytesIO(self.dataset.read(self._relpaths[index], self._sizes[index]))
        f.name = path
        sample = self.loader(f)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def prefetch(self, indices, window=256):
        """Hands the engine the files of these sample indices, in this order."""
        self.dataset.prefetch([self._relpaths[i] for i in indices], window=window)

    def __repr__(self):
        return f"granary.torch.ImageFolder({self.root!r}, {len(self)} samples, " \
               f"{len(self.classes)} classes)"


def _prefetch_target(dataset):
    """(object with prefetch(indices, window), index map or None), through Subsets."""
    index_map = None
    while isinstance(dataset, torch.utils.data.Subset):
        inner = list(dataset.indices)
        index_map = inner if index_map is None else [inner[i] for i in index_map]
        dataset = dataset.dataset
    if not callable(getattr(dataset, "prefetch", None)):
        raise TypeError("PrefetchSampler needs a granary.Dataset, a granary.torch.ImageFolder "
                        f"or a Subset of one, not {type(dataset).__name__}")
    return dataset, index_map


class PrefetchSampler(torch.utils.data.Sampler):
    """Yields `sampler`'s indices after handing their files to Granary's engine.

    Each ``__iter__`` (an epoch) materializes the sampler's order and calls
    ``dataset.prefetch(order, window)``: the engine fetches in that order, at
    most ``window`` files ahead of the readers, for all the DataLoader's
    workers. ``set_epoch`` is forwarded (DistributedSampler), ``len`` is the
    sampler's.
    """

    def __init__(self, dataset, sampler, window=256):
        if int(window) <= 0:
            raise ValueError(f"PrefetchSampler: window must be > 0, not {window}")
        self._target, self._index_map = _prefetch_target(dataset)
        self.dataset = dataset
        self.sampler = sampler
        self.window = int(window)

    def __iter__(self):
        # A generator, like the samplers it wraps: an iterator that is never
        # advanced (torch 1.13's DataLoader makes one and drops it each epoch)
        # neither draws from the sampler nor hands the engine an order.
        order = list(iter(self.sampler))
        files = order if self._index_map is None else [self._index_map[i] for i in order]
        self._target.prefetch(files, window=self.window)
        yield from order

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
