"""Two-view MoCo v2 augmentation, replayable sampling and the data loaders.

Replay after a resume rests on two facts: the sampler's order is a pure function of (seed, epoch)
and can start at any step, and each sample's augmentation draws from a generator seeded with
(seed, epoch, index) (the sampler hands ``(epoch, index)`` to the dataset, so this holds with any
number of workers, persistent or not).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torchvision.transforms import v2

from pretrain.data import augment_params as ap
from pretrain.data.augment_params import ViewSpec


def train_transform(
    *, spec: ViewSpec, mean: tuple[float, ...], std: tuple[float, ...]
) -> v2.Compose:
    """MoCo v2 augmentation (moco/main_moco.py ``--aug-plus``) per sample with torchvision: the
    reference path (``data.augment_on: workers``) of the same ``spec`` the batched path runs. By
    keyword only: ``mean`` and ``std`` are two tuples of one length, easily swapped."""
    s = spec.jitter_strength
    ops: list[Any] = [v2.ToImage()]
    if spec.affine:
        ops.append(v2.RandomAffine(spec.affine_degrees, translate=(spec.affine_translate,) * 2))
    ops.append(v2.RandomResizedCrop(spec.image_size, scale=spec.crop_scale, antialias=True))
    if s > 0 and spec.jitter_prob > 0:
        ops.append(v2.RandomApply([v2.ColorJitter(s, s, s, s / 4)], p=spec.jitter_prob))
    if spec.grayscale_prob > 0:
        ops.append(v2.RandomGrayscale(p=spec.grayscale_prob))
    if spec.blur_prob > 0:
        kernel = ap.blur_kernel_size(spec.image_size)
        blur = v2.GaussianBlur(kernel, sigma=ap.SIGMA_RANGE)
        ops.append(v2.RandomApply([blur], p=spec.blur_prob))
    if spec.hflip_prob > 0:
        ops.append(v2.RandomHorizontalFlip(p=spec.hflip_prob))
    ops += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)]
    return v2.Compose(ops)


def eval_transform(
    *, size: int, resize: int, mean: tuple[float, ...], std: tuple[float, ...]
) -> v2.Compose:
    """Resize the short side to ``resize``, centre-crop ``size``, normalise (the MoCo linear-eval
    val transform). By keyword only: two sizes and two tuples of one length, easily swapped."""
    return v2.Compose(
        [
            v2.ToImage(),
            v2.Resize(resize, antialias=True),
            v2.CenterCrop(size),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean, std),
        ]
    )


def sample_seed(seed: int, epoch: int, index: int, stream: int = 0) -> int:
    """A 63-bit seed that depends on (seed, epoch, index, stream) and nothing else."""
    entropy = [seed, epoch, index, stream]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> np.uint64(1))


class TwoViews(Dataset):
    """Yields ``(view1, view2, label, index)``; the augmentation of sample i in epoch e is fixed."""

    def __init__(self, base: Dataset, transform: v2.Compose, seed: int) -> None:
        self.base, self.transform, self.seed = base, transform, seed

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        epoch, index = key
        image, label = self.base[index]
        # fork_rng keeps the caller's global RNG untouched (matters with num_workers=0). Seeding
        # the CPU generator alone gives the same stream as torch.manual_seed without its ~0.9 ms
        # of CUDA-generator bookkeeping per call.
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(sample_seed(self.seed, epoch, index))
            x1, x2 = self.transform(image), self.transform(image)
        return x1, x2, label, index


class Transformed(Dataset):
    """Applies a deterministic transform; yields ``(image, label)``."""

    def __init__(self, base: Dataset, transform: v2.Compose) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[index]
        return self.transform(image), label


class ResumableSampler(Sampler):
    """Per-epoch permutation from (seed, epoch), sharded over ranks, startable at any step.

    Yields ``(epoch, index)`` pairs for :class:`TwoViews`. Each rank takes ``per_rank_batch``
    consecutive indices of every global batch, so a global batch holds the same images for any
    world size (what makes a DDP run comparable with a one-process run).
    """

    def __init__(
        self, size: int, global_batch: int, *, seed: int, rank: int = 0, world_size: int = 1
    ) -> None:
        if global_batch % world_size:
            raise ValueError(f"global batch {global_batch} is not divisible by {world_size} ranks")
        if size < global_batch:
            raise ValueError(f"dataset of {size} images is smaller than one batch ({global_batch})")
        self.size, self.global_batch, self.seed = size, global_batch, seed
        self.rank, self.world_size = rank, world_size
        self.steps = size // global_batch  # drop_last
        self.epoch, self.start_step = 0, 0

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        self.epoch, self.start_step = epoch, start_step

    def __len__(self) -> int:
        return (self.steps - self.start_step) * (self.global_batch // self.world_size)

    def epoch_order(self) -> torch.Tensor:
        """The epoch's sample indices (steps, world_size, per-rank batch), every rank's: a pure
        function of (seed, epoch); the last ``size % global_batch`` of the permutation are
        dropped (drop_last on the global batch)."""
        g = torch.Generator().manual_seed(sample_seed(self.seed, self.epoch, 0, stream=1))
        order = torch.randperm(self.size, generator=g)[: self.steps * self.global_batch]
        return order.view(self.steps, self.world_size, self.global_batch // self.world_size)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        mine = self.epoch_order()[self.start_step :, self.rank]
        return ((self.epoch, int(i)) for i in mine.reshape(-1))


def _quiet_worker(_: int) -> None:
    # Workers ignore the job's stop signals: the main process saves at a step boundary and then
    # shuts them down itself (a worker killed first would crash the loader mid-step).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)


def loader(
    dataset: Dataset,
    batch_size: int,
    sampler: Sampler | None,
    num_workers: int,
    pin_memory: bool = False,
    collate_fn: Any = None,
) -> DataLoader:
    """A DataLoader with its own generator, so creating an iterator never draws from the global
    RNG (a resumed run must see the same global RNG stream as an uninterrupted one)."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        shuffle=False,
        drop_last=False,
        num_workers=num_workers,
        pin_memory=pin_memory,
        collate_fn=collate_fn,
        persistent_workers=num_workers > 0,
        worker_init_fn=_quiet_worker,
        generator=torch.Generator().manual_seed(0),
    )


def shutdown(loader: Any) -> None:
    """End ``loader``'s worker processes now, persistent ones and those of an iterator an error
    left mid-epoch included. The workers ignore SIGTERM (:func:`_quiet_worker`), so leaving them to
    the interpreter's exit would hang it: multiprocessing's exit handler terminates its children
    with SIGTERM and then joins them. Uses the DataLoader iterator's own shutdown (torch has no
    public call for it); a loader without workers has nothing to end."""
    inner = getattr(loader, "loader", loader)  # device_decode.DecodedLoader wraps a DataLoader
    iterator = getattr(inner, "_iterator", None)
    if iterator is None:
        return
    inner._iterator = None
    end = getattr(iterator, "_shutdown_workers", None)
    if end is not None:
        end()
