"""The input pipeline of a run, chosen in one place (:func:`choose`): loader workers, device decode
or the device-resident training split, with the kNN bank and the held-out split. Takes plain
values (:class:`Settings`, filled from the config by ``pretrain.build.data_settings``),
never the config.

    data = pipeline.build(settings, device)   # Data: train_loader, bank_loader, test_loader, ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sized
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from pretrain.data import (
    augment,
    datasets,
    device_decode,
    imagefiles,
    loaders,
    resident,
    resident_views,
    views,
)
from pretrain.data.identity import train_set_identity
from pretrain.errors import ConfigError
from pretrain.runtime import cores, dist


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What the pipeline reads: the ``data.*`` values (read by attribute: name, root, the splits,
    the augmentation, num_workers, augment_on, decode_on, resident, support_views, ...), and the
    few values of other sections it needs."""

    data: Any  # the data.* values
    batch_size: int  # the global training batch
    eval_batch_size: int  # feature extraction for the kNN monitor
    seed: int  # sampler order, subsets, per-sample augmentation
    out_dir: str  # the run folder (the resident split's cache)
    knn_k: int = (
        0  # the kNN monitor's k (eval.knn_k), 0 without a monitor: checked against the bank
    )


def eval_transform(d: Any) -> Any:
    return loaders.eval_transform(size=d.image_size, resize=d.eval_resize, mean=d.mean, std=d.std)


def view_spec(d: Any) -> views.ViewSpec:
    """The augmentation keys of ``data.*`` as the one record every pipeline takes whole."""
    return views.ViewSpec(
        image_size=d.image_size,
        crop_scale=d.crop_scale,
        affine_degrees=d.affine_degrees,
        affine_translate=d.affine_translate,
        jitter_strength=d.jitter_strength,
        jitter_prob=d.jitter_prob,
        grayscale_prob=d.grayscale_prob,
        blur_prob=d.blur_prob,
        hflip_prob=d.hflip_prob,
    )


def train_transform(d: Any) -> Any:
    """``augment_on: workers``: the whole augmentation per sample (torchvision, the reference)."""
    return loaders.train_transform(spec=view_spec(d), mean=d.mean, std=d.std)


def photometric(d: Any) -> augment.Photometric:
    """Stage 2 of ``augment_on: device``: the ops of :func:`train_transform` after the crop."""
    return augment.Photometric.for_views(view_spec(d), d.mean, d.std, d.augment_compile)


@dataclass(kw_only=True)
class Data:
    """The run's input, whichever pipeline (:func:`choose`) made it."""

    pipeline: str  # "loader" | "device_decode" | "resident" (see :func:`choose`)
    train: Sized  # the training views, one item per image (their count sets steps_per_epoch)
    sampler: loaders.ResumableSampler
    train_loader: Iterable[Any]  # batches (x1, x2, y, index, *stage-2 rows)
    bank_loader: Iterable[Any]  # training images, eval transform: the kNN bank; (x, y) batches
    test_loader: Iterable[Any]  # held-out images, eval transform; (x, y) batches
    num_classes: int
    in_classes: list[int]  # one-class / subset training: the in-distribution classes; [] = all
    num_workers: int = 0  # loader processes per rank after the cap (pretrain.runtime.cores)
    skipped: torch.Tensor | None = None  # data.skip_bad_images: shared per-worker skip counts
    augment: augment.Photometric | None = None  # stage 2 (augment_on: device), else None
    identity: dict[str, Any] | None = None  # the training set's (pretrain/data/identity.py)

    def close(self) -> None:
        """End the worker processes of every loader now (see
        :func:`pretrain.data.loaders.shutdown`)."""
        for loader in (self.train_loader, self.bank_loader, self.test_loader):
            loaders.shutdown(loader)


@dataclass(kw_only=True)
class Splits:
    """The datasets a run reads, before any pipeline: training, kNN bank and held-out splits."""

    train: Dataset
    bank: Dataset  # the labelled training split (stl10 pretrains on train+unlabeled)
    test: Dataset
    skipped: torch.Tensor | None  # data.skip_bad_images: shared per-worker skip counts


def eval_loader(ds: Dataset, batch_size: int, num_workers: int) -> DataLoader:
    return loaders.loader(ds, batch_size, None, num_workers)


IMAGE_FILES = ("imagefolder", "imagenet100")  # split names are folders or image lists


def decode_on(d: Any, device: torch.device | str) -> str:
    """``data.decode_on`` for a run on ``device``: auto is cpu (the loader workers) on every
    device, the path that measured faster on the latest GPU run (H200, 2026-11-28, code 8169844:
    112.8 ms per ``imagenet100_moco.yaml`` step with the decode in the workers, 127.7 ms on the
    device; docs/gpu_decode.md). ``device`` is opt-in (config.validate refuses it where it cannot
    apply). ``device`` (the run's) is kept for the day a measurement favours the GPU decode."""
    del device
    return "cpu" if d.decode_on == "auto" else d.decode_on


def choose(d: Any, device: torch.device | str, splits: Splits, resident_ok: bool = True) -> str:
    """The one place the input pipeline is chosen, for a run on ``device``:

    - ``resident`` (``data.resident``): the splits held on the device as uint8, batches and both
      views' augmentation made there, no loader; auto = on CUDA when they fit in the free memory;
    - ``device_decode`` (``data.decode_on``): loader workers read bytes and draw crops, the
      training process decodes and crops each batch on the device (:func:`decode_on`);
    - ``loader``: loader workers decode and crop (and, with ``augment_on: workers``, augment).

    Explicit settings that cannot apply were refused by ``config.validate``. ``resident_ok``
    False: the resident split could not be made (auto), the next choice."""
    if resident_ok and d.augment_on == "device" and d.decode_on != "device":
        if d.resident == "device" or (d.resident == "auto" and torch.device(device).type == "cuda"):
            held = [splits.train] + [b for b in (splits.bank, splits.test) if b is not splits.train]
            need = sum(resident.estimate_bytes(b) for b in held)
            need += resident.table_bytes(len(splits.train), 2 + d.support_views)
            if resident.resolve(d.resident, device, need) == "device":
                return "resident"
    return "device_decode" if decode_on(d, device) == "device" else "loader"


def build(cfg: Settings, device: torch.device | str = "cpu") -> Data:
    """The run's datasets and loaders through the pipeline :func:`choose` chooses; ``device`` is
    the training device. The record carries the training set's identity (checked on resume)."""
    s = read_splits(cfg)
    data = pipeline_data(cfg, device, s)
    data.identity = train_set_identity(s.train, cfg.data.root)
    return data


def pipeline_data(cfg: Settings, device: torch.device | str, s: Splits) -> Data:
    """:func:`build`'s loaders, from the splits."""
    if len(s.train) < cfg.batch_size:
        raise ConfigError(
            f"train.batch_size {cfg.batch_size} exceeds the training set "
            f"({len(s.train)} images after data.subset/data.in_classes)"
        )
    if cfg.knn_k > len(s.bank):
        imagefiles.warn(
            f"eval.knn_k = {cfg.knn_k} exceeds the kNN bank ({len(s.bank)} training images "
            f"after data.subset/data.in_classes): the monitor votes over all {len(s.bank)}; give "
            f"eval.knn_k={len(s.bank)} or less to say so"
        )
    sampler = loaders.ResumableSampler(
        len(s.train),
        cfg.batch_size,
        seed=cfg.seed,
        rank=dist.rank(),
        world_size=dist.world_size(),
    )
    workers = cores.loader_workers(cfg.data.num_workers)
    chosen = choose(cfg.data, device, s)
    if chosen == "resident":
        try:
            return resident_data(cfg, s, sampler, device, workers)
        except resident.NotResidentError as e:
            if cfg.data.resident == "device":
                raise ConfigError(f"data.resident=device: {e}; set data.resident=off") from None
            if dist.is_main():
                print(f"data.resident=auto: off, {e}", flush=True)
            chosen = choose(cfg.data, device, s, resident_ok=False)
    if chosen == "device_decode":
        return decoded_data(cfg, s, sampler, device, workers)
    return loader_data(cfg, s, sampler, workers)


def read_splits(cfg: Settings) -> Splits:
    """The training, bank and held-out datasets, after ``data.in_classes`` and ``data.subset``."""
    d = cfg.data
    skipped = imagefiles.skip_counter() if d.skip_bad_images else None
    files = d.name in IMAGE_FILES
    base_train = datasets.build(d.name, d.root, d.train_split, skip_bad=skipped)
    # the kNN bank is the labelled training split (stl10 pretrains on train+unlabeled)
    if files or d.train_split == "train":
        base_bank = base_train
    else:
        base_bank = datasets.build(d.name, d.root, "train", skip_bad=skipped)
    # all classes (one-class: ID and OOD)
    # labelled by the training split's class names (a class folder missing here shifts nothing)
    names = getattr(base_train, "classes", None) if d.name == "imagefolder" else None
    split = d.test_split if files else "test"
    base_test = datasets.build(d.name, d.root, split, skip_bad=skipped, classes=names)
    if d.in_classes:
        try:
            same = base_bank is base_train
            base_train = datasets.ClassSubset(base_train, d.in_classes)
            base_bank = base_train if same else datasets.ClassSubset(base_bank, d.in_classes)
        except ValueError as e:
            raise ConfigError(f"data.in_classes: {e}") from e
    if d.subset:
        same = base_bank is base_train
        base_train = datasets.stratified_subset(base_train, d.subset, cfg.seed)
        base_bank = (
            base_train if same else datasets.stratified_subset(base_bank, d.subset, cfg.seed)
        )
    return Splits(train=base_train, bank=base_bank, test=base_test, skipped=skipped)


def two_views(cfg: Settings, base: Dataset) -> loaders.TwoViews | views.CropViews:
    """The training views in the loader workers: crops and stage-2 rows (``augment_on:
    device``) or the whole augmentation per sample (``workers``)."""
    d = cfg.data
    if d.augment_on == "device":  # crops in the workers, photometric ops in the train step
        return views.CropViews(base, view_spec(d), cfg.seed, d.support_views)
    return loaders.TwoViews(base, train_transform(d), cfg.seed)


def loader_data(cfg: Settings, s: Splits, sampler: loaders.ResumableSampler, workers: int) -> Data:
    """``loader``: every split through DataLoader workers."""
    d = cfg.data
    train = two_views(cfg, s.train)
    pin = dist.device_type() == "cuda"  # pinned batches: the loop's non-blocking upload
    per_rank = cfg.batch_size // dist.world_size()
    bank, test = eval_loaders(cfg, s, workers)
    return Data(
        pipeline="loader",
        train=train,
        sampler=sampler,
        train_loader=loaders.loader(train, per_rank, sampler, workers, pin),
        bank_loader=bank,
        test_loader=test,
        num_classes=datasets.num_classes(s.bank),
        in_classes=list(d.in_classes),
        num_workers=workers,
        skipped=s.skipped,
        augment=photometric(d) if d.augment_on == "device" else None,
    )


def eval_loaders(cfg: Settings, s: Splits, workers: int) -> tuple[DataLoader, DataLoader]:
    """The bank and held-out splits under the eval transform, through DataLoader workers."""
    tf, batch = eval_transform(cfg.data), cfg.eval_batch_size
    return (
        eval_loader(loaders.Transformed(s.bank, tf), batch, workers),
        eval_loader(loaders.Transformed(s.test, tf), batch, workers),
    )


def decoded_data(
    cfg: Settings,
    s: Splits,
    sampler: loaders.ResumableSampler,
    device: torch.device | str,
    workers: int,
) -> Data:
    """``device_decode``: workers read bytes and draw the crops, the training process decodes
    and crops each batch on ``device`` (pretrain/data/device_decode.py)."""
    d = cfg.data
    crops = two_views(cfg, s.train)
    files = device_decode.file_samples(crops.base)
    if files is None:  # config.validate admits image files only
        raise ConfigError("data.decode_on=device needs a dataset of image files")
    encoded = device_decode.EncodedViews(crops, files)
    others = sum(not p.lower().endswith((".jpg", ".jpeg")) for p, _ in files)
    if dist.is_main():
        print(
            f"data.decode_on=device: training images decoded and cropped on {device}"
            + (
                f"; {others} of {len(files)} files are not .jpg/.jpeg and decode on the CPU "
                "in the loader workers (each named once below)"
                if others
                else ""
            ),
            flush=True,
        )
    pin = dist.device_type() == "cuda"
    per_rank = cfg.batch_size // dist.world_size()
    loader = loaders.loader(
        encoded, per_rank, sampler, workers, pin, collate_fn=device_decode.Collate(encoded)
    )
    bank, test = eval_loaders(cfg, s, workers)
    return Data(
        pipeline="device_decode",
        train=encoded,
        sampler=sampler,
        train_loader=device_decode.DecodedLoader(
            loader, device_decode.DeviceCrops(encoded, device)
        ),
        bank_loader=bank,
        test_loader=test,
        num_classes=datasets.num_classes(s.bank),
        in_classes=list(d.in_classes),
        num_workers=workers,
        skipped=s.skipped,
        augment=photometric(d),
    )


def resident_data(
    cfg: Settings,
    s: Splits,
    sampler: loaders.ResumableSampler,
    device: torch.device | str,
    workers: int,
) -> Data:
    """``resident``: the training, bank and held-out splits on ``device`` as uint8 and the
    batches made there (pretrain/data/resident.py); :class:`resident.NotResidentError` when the
    training split cannot be held (e.g. images of different sizes). A bank or held-out split that
    cannot is read through the loader's eval transform."""
    d = cfg.data
    folder = resident.cache_dir(cfg.out_dir)
    arrays = {id(s.train): resident.load(s.train, folder, workers)}
    for b in (s.bank, s.test):  # held-out images of several sizes: the loader's eval transform
        if id(b) not in arrays:
            with contextlib.suppress(resident.NotResidentError):
                arrays[id(b)] = resident.load(b, folder, workers)
    on = {k: (x.to(device), y.to(device)) for k, (x, y, _) in arrays.items()}
    count = {
        k: None if s.skipped is None else resident_views.Skipped(h.skips, s.skipped)
        for k, h in arrays.items()
    }
    train = resident_views.ResidentViews(
        *on[id(s.train)], view_spec(d), cfg.seed, sampler, d.support_views, count[id(s.train)]
    )
    if dist.is_main():
        mb = sum(x.numel() for x, _ in on.values()) / 2**20
        print(
            f"data.resident=device: {mb:.0f} MiB of uint8 images on {device}, batches and "
            "augmentation there (no loader workers)",
            flush=True,
        )

    def eval_batches(ds: Dataset) -> resident_views.EvalBatches | DataLoader:
        if id(ds) in on:
            return resident_views.EvalBatches(
                *on[id(ds)],
                batch=cfg.eval_batch_size,
                size=d.image_size,
                resize=d.eval_resize,
                mean=tuple(d.mean),
                std=tuple(d.std),
                skipped=count[id(ds)],
            )
        return eval_loader(loaders.Transformed(ds, eval_transform(d)), cfg.eval_batch_size, workers)

    return Data(
        pipeline="resident",
        train=train,
        sampler=sampler,
        train_loader=train,
        bank_loader=eval_batches(s.bank),
        test_loader=eval_batches(s.test),
        num_classes=datasets.num_classes(s.bank),
        in_classes=list(d.in_classes),
        num_workers=workers,
        skipped=s.skipped,
        augment=photometric(d),
    )
