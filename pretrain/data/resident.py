"""``data.resident: device``: the training split held on the training device as uint8.

The split is decoded once (embedded arrays are taken as they are; image files are decoded in
parallel and cached on disk as one uint8 array, keyed on the files' paths, sizes and mtimes),
moved to the device, and every batch is gathered there: the sampler's permutation of the epoch
(``loaders.ResumableSampler``, a pure function of (seed, epoch): nothing to checkpoint) is copied to
the device once per epoch, and each view's parameters come from a table of uniforms drawn on the
device once per epoch from a generator seeded with (seed, epoch), turned into rows by
``pretrain.data.device_params`` (the loader's formulas). A batch is then the loader's batch
(``views.CropViews``: uint8 views + stage-2 rows), so ``step.train_step`` runs stage 2 on it as
on the loader path; no DataLoader, no worker, no host sync and no host-to-device copy per step.

The held-out split and the kNN bank are resident too (:class:`EvalBatches`: the eval transform
batched on the device), so the monitor reads no file either.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from pretrain.data import datasets, device_decode, imagefiles
from pretrain.data import device_params as dp
from pretrain.data.views import as_uint8_tensor
from pretrain.errors import ConfigError
from pretrain.runtime import dist, run_folder

FREE_FRACTION = 0.5  # auto: resident on CUDA when its bytes fit in this share of free memory
CACHE_ENV = "NEGMINE_CACHE_DIR"  # where decoded splits are cached; default RUN/cache


class NotResidentError(ValueError):
    """The split cannot be held as one array (its images differ in size); names an example."""


def embedded(ds: Dataset) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(images uint8 (N, 3, H, W), labels int64 (N,)) of a dataset that holds its images as an
    array (digits, CIFAR-10/100, STL-10; through subsets and skip wrappers), else None."""
    if isinstance(ds, Subset):
        inner = embedded(ds.dataset)
        if inner is None:
            return None
        index = torch.as_tensor(list(ds.indices), dtype=torch.int64)
        return inner[0][index], inner[1][index]
    if isinstance(ds, imagefiles.SkipBadImages):
        return embedded(ds.base)
    if isinstance(ds, datasets.Digits):
        return ds.data, torch.as_tensor(ds.targets, dtype=torch.int64)
    if isinstance(ds, (datasets.CIFAR10, datasets.CIFAR100)):  # (N, 32, 32, 3) HWC
        images = torch.from_numpy(ds.data).permute(0, 3, 1, 2)  # a view; load() copies once
        return images, torch.as_tensor(ds.targets, dtype=torch.int64)
    if isinstance(ds, datasets.STL10):  # (N, 3, 96, 96); unlabeled images carry -1
        return torch.from_numpy(ds.data), torch.as_tensor(ds.labels, dtype=torch.int64)
    return None


def estimate_bytes(ds: Dataset) -> int:
    """Bytes of the split as uint8 (N, 3, H, W), from the array or the first image's size."""
    arrays = embedded(ds)
    if arrays is not None:
        return arrays[0].numel()
    with uncounted(ds):
        first = as_uint8_tensor(ds[0][0])
    return len(ds) * 3 * first.shape[-2] * first.shape[-1]


def resolve(setting: str, device: torch.device | str, need_bytes: int) -> str:
    """``data.resident`` for a run on ``device``: auto is device on CUDA when ``need_bytes`` fit
    in ``FREE_FRACTION`` of the free device memory (``torch.cuda.mem_get_info``), else off."""
    if setting != "auto":
        return setting
    device = torch.device(device)
    if device.type != "cuda":
        return "off"
    free, _ = torch.cuda.mem_get_info(device)
    return "device" if need_bytes <= FREE_FRACTION * free else "off"


def table_bytes(size: int, views: int) -> int:
    """Bytes of one epoch's uniform table (float64) plus the order (int64)."""
    return size * (views * dp.UNIFORMS * 8 + 8)


def skip_wrapper(ds: Dataset) -> imagefiles.SkipBadImages | None:
    """The :class:`imagefiles.SkipBadImages` under ``ds`` (through subsets), or None when
    ``data.skip_bad_images`` is off."""
    while isinstance(ds, Subset):
        ds = ds.dataset
    return ds if isinstance(ds, imagefiles.SkipBadImages) else None


@contextlib.contextmanager
def uncounted(ds: Dataset) -> Iterator[None]:
    """Reads of ``ds`` inside leave its skip counter as it was: the one-time decode is not a read
    of the loader path, whose counts the resident batches replay (:class:`ResidentViews`)."""
    skip = skip_wrapper(ds)
    before = None if skip is None else skip.counter.clone()
    try:
        yield
    finally:
        if skip is not None and before is not None:
            skip.counter.copy_(before)


class Held(NamedTuple):
    """A split held as one array: images uint8 (N, 3, H, W), labels (N,), and per image the
    number of unreadable images ``data.skip_bad_images`` skipped to find it (0: its own file)."""

    images: torch.Tensor
    labels: torch.Tensor
    skips: torch.Tensor


class _Decoded(Dataset):
    """(uint8 image (3, H, W), label, index, skips) of ``ds``; for the one-time parallel
    decode."""

    def __init__(self, ds: Dataset) -> None:
        self.ds, self.skip = ds, skip_wrapper(ds)

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, int, int]:
        image, label = self.ds[i]
        skips = 0 if self.skip is None else self.skip.last_skips
        return as_uint8_tensor(image).contiguous(), int(label), i, skips


def _collate(items: list[tuple[torch.Tensor, int, int, int]]) -> tuple[Any, ...]:
    shapes = {tuple(x.shape) for x, _, _, _ in items}
    if len(shapes) > 1:
        first = items[0][0].shape
        odd = next(i for x, _, i, _ in items if x.shape != first)
        return None, None, None, (odd, sorted(shapes))
    images = torch.stack([x for x, _, _, _ in items])
    skips = torch.tensor([t for _, _, _, t in items], dtype=torch.int64)
    return images, torch.tensor([y for _, y, _, _ in items]), skips, None


def decode(ds: Dataset, workers: int, batch: int = 256) -> Held:
    """Decode every image of ``ds`` (``workers`` processes) into one uint8 array (N, 3, H, W)
    and its labels; :class:`NotResidentError` if the images differ in size."""
    loader = DataLoader(_Decoded(ds), batch_size=batch, num_workers=workers, collate_fn=_collate)
    images, labels, skips, shape = None, None, None, None
    start = 0
    with uncounted(ds):
        for x, y, t, odd in loader:
            if odd is None and shape is not None and tuple(x.shape[1:]) != shape:
                odd = (start, [shape, tuple(x.shape[1:])])
            if odd is not None:
                files = device_decode.file_samples(ds)
                name = files[odd[0]][0] if files else f"image {odd[0]}"
                raise NotResidentError(
                    f"the training images differ in size ({name}; sizes {odd[1]}), so they "
                    "cannot be held as one array"
                )
            if images is None:
                shape = tuple(x.shape[1:])
                images = torch.empty((len(ds), *shape), dtype=torch.uint8)
                labels = torch.empty(len(ds), dtype=torch.int64)
                skips = torch.empty(len(ds), dtype=torch.int64)
            part = slice(start, start + len(x))
            images[part], labels[part], skips[part] = x, y, t
            start += len(x)
    assert images is not None and labels is not None and skips is not None
    return Held(images, labels, skips)


def cache_key(files: list[tuple[str, int]]) -> str:
    """sha256 over every file's path, label, size, mtime, inode and ctime (ns): any change
    re-decodes, a file replaced with the same size and its mtime set back included (the
    replacement has a new inode or, rewritten in place, a new ctime, which no user can set)."""
    h = hashlib.sha256(b"crc32\n")  # the check file's kind: caches of word sums are not read
    for path, label in files:
        st = os.stat(path)
        h.update(
            f"{path}\t{label}\t{st.st_size}\t{st.st_mtime_ns}\t{st.st_ino}\t"
            f"{st.st_ctime_ns}\n".encode()
        )
    return h.hexdigest()


def cache_dir(out_dir: str | Path) -> Path:
    """``$NEGMINE_CACHE_DIR`` (shared by runs) or ``RUN/cache``."""
    return Path(os.environ.get(CACHE_ENV) or Path(out_dir) / "cache")


def image_crc32(images: torch.Tensor) -> torch.Tensor:
    """Per image, the CRC-32 of its bytes (int64), the cache's check at each load: unlike a sum
    of words (``identity.checksums``) it changes when an image is flipped or its R and B are
    swapped."""
    return torch.tensor([zlib.crc32(r) for r in images.flatten(1).numpy()], dtype=torch.int64)


def _companions(path: Path) -> tuple[Path, Path]:
    """The labels and the check (checksum, skips per image) files beside the images' file."""
    return path.with_suffix(".labels.npy"), path.with_suffix(".check.npy")


def _write_cache(path: Path, held: Held) -> None:
    """The three files, each atomically (:func:`pretrain.runtime.run_folder.atomic_write`: never
    through a symbolic link), the images last: their presence marks a whole cache."""
    labels_path, check_path = _companions(path)
    check = torch.stack([image_crc32(held.images), held.skips], dim=1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for target, array in ((labels_path, held.labels), (check_path, check), (path, held.images)):
            values = array.numpy()
            run_folder.atomic_write(target, lambda f, values=values: np.save(f, values))
    except OSError as e:
        where = (
            f"{CACHE_ENV}={os.environ[CACHE_ENV]}"
            if os.environ.get(CACHE_ENV)
            else f"the run's cache folder {path.parent}"
        )
        raise ConfigError(
            f"{where} cannot hold the decoded training images ({e.strerror or e}: "
            f"{e.filename or path}); point {CACHE_ENV} at a writable folder, or unset it (the "
            "cache then goes to RUN/cache)"
        ) from None


def _read_cache(path: Path, files: list[tuple[str, int]]) -> Held | None:
    """The cache at ``path`` checked against ``files`` (its shape, its labels, each image's
    checksum), or None after one warning naming the file when it is truncated, foreign, zeroed
    or incomplete: the caller decodes again and rewrites it."""
    labels_path, check_path = _companions(path)
    try:
        images = torch.from_numpy(np.load(path, allow_pickle=False))
        labels = torch.from_numpy(np.load(labels_path, allow_pickle=False))
        check = torch.from_numpy(np.load(check_path, allow_pickle=False))
        n = len(files)
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[:2] != (n, 3):
            raise ValueError(
                f"it holds {images.dtype} {tuple(images.shape)}, not the {n} "
                "images (N, 3, H, W) uint8 of the training split"
            )
        if labels.shape != (n,) or check.shape != (n, 2):
            raise ValueError(f"its labels or checksums do not cover the {n} images")
        own = check[:, 1] == 0  # a substitute carries the label of the image it replaces
        if not torch.equal(labels[own], torch.tensor([y for _, y in files])[own]):
            raise ValueError("its labels are not those of the training files")
        wrong = torch.nonzero(image_crc32(images) != check[:, 0]).flatten().tolist()
        if wrong:
            raise ValueError(
                f"{len(wrong)} image(s) differ from their checksum (the first: "
                f"{files[wrong[0]][0]}; zeroed, flipped or overwritten)"
            )
        return Held(images, labels, check[:, 1].clone())
    except Exception as e:  # noqa: BLE001 - any unusable cache file is rebuilt, none is fatal
        reason = (str(e).split(". ")[0] or type(e).__name__).strip()[:200]
        imagefiles.warn(
            f"the decoded-image cache file {path} is corrupt ({type(e).__name__}: {reason}); "
            "decoding the training images again and rewriting it"
        )
        return None


def _check_skips(ds: Dataset, held: Held, files: list[tuple[str, int]]) -> Held | None:
    """A cache that holds substitutes of unreadable images serves a run with
    ``data.skip_bad_images`` off only as the loader would: the unreadable file raises
    :class:`imagefiles.BadImageError` naming it (None if it has become readable: decode again)."""
    if skip_wrapper(ds) is not None or not bool(held.skips.any()):
        return held
    first = int(torch.nonzero(held.skips).flatten()[0])
    imagefiles.read_image(files[first][0])
    return None


def load(ds: Dataset, folder: Path, workers: int) -> Held:
    """(images uint8 (N, 3, H, W), labels (N,), skips (N,)) on the CPU: an embedded array as it
    is, image files decoded once and cached in ``folder`` as ``resident-<key>.npy`` with their
    labels and a check file (per image its checksum and skips); rank 0 decodes and writes
    atomically, the other ranks wait and read. Every load checks the cache's content
    (:func:`_read_cache`) and a corrupt one is decoded again and rewritten."""
    arrays = embedded(ds)
    if arrays is not None:
        none = torch.zeros(len(arrays[1]), dtype=torch.int64)
        return Held(arrays[0].contiguous(), arrays[1], none)
    files = device_decode.file_samples(ds)
    if files is None:  # another reader: decode, no cache
        return decode(ds, workers)
    path = folder / f"resident-{cache_key(files)[:24]}.npy"
    held = None
    if dist.is_main():
        held = _read_cache(path, files) if path.exists() else None
        held = held and _check_skips(ds, held, files)
        if held is None:
            held = decode(ds, workers)
            _write_cache(path, held)
    dist.barrier()  # the other ranks read what rank 0 wrote
    if held is None and path.exists():  # not a node that does not see rank 0's cache folder
        held = _read_cache(path, files)
        held = held and _check_skips(ds, held, files)
    return held if held is not None else decode(ds, workers)
