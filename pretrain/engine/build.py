"""Thin adapters from the config to the objects of a run (the only place that reads the config)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import negatives
from pretrain import losses
from pretrain.config import Config, ConfigError, DataConfig
from pretrain.data import augment, datasets, device_decode, imagefiles, loaders, resident, views
from pretrain.data.identity import train_set_identity
from pretrain.engine.queue import LabeledQueue
from pretrain.model import encoders as model_lib
from pretrain.model import split_bn
from pretrain.runtime import cores, dist


def model(cfg: Config) -> model_lib.MoCo:
    m = cfg.model
    net = model_lib.build(
        arch=m.arch,
        width=m.width,
        cifar_stem=m.cifar_stem,
        dim=m.dim,
        mlp=m.mlp,
        bn_splits=m.bn_splits,
        kappa_hidden=m.kappa_hidden,
    )
    split_bn.use_path(net, None if m.split_bn == "auto" else m.split_bn)
    return net


def eval_transform(d: DataConfig) -> Any:
    return loaders.eval_transform(d.image_size, d.eval_resize, d.mean, d.std)


def train_transform(d: DataConfig) -> Any:
    return loaders.train_transform(
        image_size=d.image_size,
        crop_scale=d.crop_scale,
        jitter_strength=d.jitter_strength,
        jitter_prob=d.jitter_prob,
        grayscale_prob=d.grayscale_prob,
        blur_prob=d.blur_prob,
        hflip_prob=d.hflip_prob,
        affine_degrees=d.affine_degrees,
        affine_translate=d.affine_translate,
        mean=d.mean,
        std=d.std,
    )


def view_spec(d: DataConfig) -> views.ViewSpec:
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


def photometric(d: DataConfig) -> augment.Photometric:
    """Stage 2 of ``augment_on: device``: the ops of :func:`train_transform` after the crop."""
    return augment.Photometric(
        jitter=d.jitter_strength > 0 and d.jitter_prob > 0,
        grayscale=d.grayscale_prob > 0,
        blur=d.blur_prob > 0,
        hflip=d.hflip_prob > 0,
        affine=d.affine_degrees > 0 or d.affine_translate > 0,
        blur_kernel=augment.blur_kernel_size(d.image_size),
        mean=tuple(d.mean),
        std=tuple(d.std),
        compiled=d.augment_compile,
    )


def strategy(cfg: Config) -> negatives.NegativeStrategy:
    try:
        made = negatives.create(cfg.negatives.name, **cfg.negatives.kwargs)
        made.check_sizes(cfg.moco.queue_size, cfg.train.batch_size)
        made.bind_model(cfg.model.dim)
        made.bind_data(cfg.data.image_size, tuple(cfg.data.mean), tuple(cfg.data.std))
    except (ValueError, ImportError) as e:  # ImportError: an optional backend not installed
        raise ConfigError(f"negatives: {e}") from e
    return made


def optimizer(net: torch.nn.Module, lr: float, cfg: Config) -> torch.optim.SGD:
    """SGD; biases and norm weights (1-d parameters) skip weight decay if the config says so."""
    t = cfg.train
    params = [p for p in net.parameters() if p.requires_grad]
    if t.wd_exclude_bias_and_norm:
        groups = [
            {"params": [p for p in params if p.ndim > 1], "weight_decay": t.weight_decay},
            {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0},
        ]
    else:
        groups = [{"params": params, "weight_decay": t.weight_decay}]
    # foreach: a few multi-tensor ops per step on every device (CUDA's default; the CPU's default
    # loops over the parameters, ~4 ops each): the same arithmetic, the same values
    return torch.optim.SGD(groups, lr=lr, momentum=t.sgd_momentum, foreach=True)


@dataclass
class Data:
    train: loaders.TwoViews | views.CropViews | device_decode.EncodedViews | resident.ResidentViews
    sampler: loaders.ResumableSampler
    # the latter two with decode_on device / resident device (both: batches on the device)
    train_loader: DataLoader | device_decode.DecodedLoader | resident.ResidentViews
    bank_loader: DataLoader | resident.EvalBatches  # training images, eval transform: kNN bank
    test_loader: DataLoader | resident.EvalBatches  # held-out images, eval transform
    num_classes: int
    in_classes: list[int]  # one-class / subset training: the in-distribution classes; [] = all
    num_workers: int = 0  # loader processes per rank after the cap (pretrain.runtime.cores)
    identity: dict[str, Any] | None = None  # the training set's (pretrain/data/identity.py)
    skipped: torch.Tensor | None = None  # data.skip_bad_images: shared per-worker skip counts
    augment: augment.Photometric | None = None  # stage 2 (augment_on: device), else None
    decode_on: str = "cpu"  # data.decode_on resolved for this run's device: cpu or device
    resident: str = "off"  # data.resident resolved for this run's device: off or device

    def close(self) -> None:
        """End the worker processes of every loader now (see
        :func:`pretrain.data.loaders.shutdown`)."""
        for loader in (self.train_loader, self.bank_loader, self.test_loader):
            loaders.shutdown(loader)


def eval_loader(ds: Dataset, batch_size: int, num_workers: int) -> DataLoader:
    return loaders.loader(ds, batch_size, None, num_workers)


IMAGE_FILES = ("imagefolder", "imagenet100")  # split names are folders or image lists


def decode_on(d: DataConfig, device: torch.device | str) -> str:
    """``data.decode_on`` for a run on ``device``: auto is device on CUDA for image files with
    the two-stage pipeline and no RandomAffine, else cpu (config.validate refuses an explicit
    device where it cannot apply)."""
    if d.decode_on != "auto":
        return d.decode_on
    fits = (
        torch.device(device).type == "cuda"
        and d.name in IMAGE_FILES
        and d.augment_on == "device"
        and d.affine_degrees == 0
        and d.affine_translate == 0
    )
    return "device" if fits else "cpu"


def datasets_for(cfg: Config, device: torch.device | str = "cpu") -> Data:
    """The run's datasets and loaders; ``device`` is the training device (data.decode_on)."""
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
    identity = train_set_identity(base_train, d.root)
    world = dist.world_size()
    if len(base_train) < cfg.train.batch_size:
        raise ConfigError(
            f"train.batch_size {cfg.train.batch_size} exceeds the training set "
            f"({len(base_train)} images after data.subset/data.in_classes)"
        )
    if d.augment_on == "device":  # crops in the workers, photometric ops in the train step
        train: Any = views.CropViews(base_train, view_spec(d), cfg.seed, d.support_views)
    else:
        train = loaders.TwoViews(base_train, train_transform(d), cfg.seed)
    sampler = loaders.ResumableSampler(
        len(train), cfg.train.batch_size, seed=cfg.seed, rank=dist.rank(), world_size=world
    )
    pin = dist.device_type() == "cuda"  # pinned batches: the loop's non-blocking upload
    per_rank = cfg.train.batch_size // world
    tf = eval_transform(d)
    workers = cores.loader_workers(d.num_workers)
    held = resident_data(cfg, base_train, base_bank, base_test, sampler, device, workers, skipped)
    if held is not None:
        return Data(**held, sampler=sampler, num_workers=workers, skipped=skipped,
                    in_classes=list(d.in_classes), augment=photometric(d),
                    identity=identity)  # fmt: skip
    where = decode_on(d, device)
    if where == "device":
        train, train_loader = device_loader(train, sampler, per_rank, workers, pin, device)
    else:
        train_loader = loaders.loader(train, per_rank, sampler, workers, pin)
    return Data(
        train=train,
        sampler=sampler,
        train_loader=train_loader,
        bank_loader=eval_loader(loaders.Transformed(base_bank, tf), cfg.eval.batch_size, workers),
        test_loader=eval_loader(loaders.Transformed(base_test, tf), cfg.eval.batch_size, workers),
        num_classes=datasets.num_classes(base_bank),
        in_classes=list(d.in_classes),
        num_workers=workers,
        skipped=skipped,
        augment=photometric(d) if d.augment_on == "device" else None,
        decode_on=where,
        identity=identity,
    )


def resident_data(
    cfg: Config, base_train: Dataset, base_bank: Dataset, base_test: Dataset,
    sampler: loaders.ResumableSampler, device: torch.device | str, workers: int,
    skipped: torch.Tensor | None = None,
) -> dict[str, Any] | None:  # fmt: skip
    """``data.resident``: the training, bank and held-out splits on ``device`` as uint8 and the
    batches made there (pretrain/data/resident.py); None when it resolves to off (auto on a CPU, a
    split too large for the device, images of different sizes under auto)."""
    d = cfg.data
    if d.resident == "off" or d.augment_on != "device" or d.decode_on == "device":
        return None  # config.validate refuses an explicit device with the last two
    if d.resident == "auto" and torch.device(device).type != "cuda":
        return None  # auto is off on a CPU: nothing measured, nothing read
    splits = [base_train] + [b for b in (base_bank, base_test) if b is not base_train]
    need = sum(resident.estimate_bytes(b) for b in splits)
    need += resident.table_bytes(len(base_train), 2 + d.support_views)
    if resident.resolve(d.resident, device, need) != "device":
        return None
    folder = resident.cache_dir(cfg.out_dir)
    try:
        arrays = {id(base_train): resident.load(base_train, folder, workers)}
    except resident.NotResidentError as e:
        if d.resident == "device":
            raise ConfigError(f"data.resident=device: {e}; set data.resident=off") from None
        if dist.is_main():
            print(f"data.resident=auto: off, {e}", flush=True)
        return None
    for b in splits[1:]:  # held-out images of several sizes: the loader's eval transform
        with contextlib.suppress(resident.NotResidentError):
            arrays[id(b)] = resident.load(b, folder, workers)
    on = {k: (x.to(device), y.to(device)) for k, (x, y, _) in arrays.items()}
    count = {k: None if skipped is None else resident.Skipped(h.skips, skipped)
             for k, h in arrays.items()}  # fmt: skip
    train = resident.ResidentViews(*on[id(base_train)], view_spec(d), cfg.seed, sampler,
                                   d.support_views, count[id(base_train)])  # fmt: skip
    kw = dict(batch=cfg.eval.batch_size, size=d.image_size, resize=d.eval_resize,
              mean=tuple(d.mean), std=tuple(d.std))  # fmt: skip
    if dist.is_main():
        mb = sum(x.numel() for x, _ in on.values()) / 2**20
        print(f"data.resident=device: {mb:.0f} MiB of uint8 images on {device}, batches and "
              "augmentation there (no loader workers)", flush=True)  # fmt: skip
    return {
        "train": train,
        "train_loader": train,
        "bank_loader": eval_batches(base_bank, on, count, kw, d, cfg.eval.batch_size, workers),
        "test_loader": eval_batches(base_test, on, count, kw, d, cfg.eval.batch_size, workers),
        "num_classes": datasets.num_classes(base_bank),
        "decode_on": "cpu",
        "resident": "device",
    }


def eval_batches(
    ds: Dataset, on: dict[int, tuple[torch.Tensor, torch.Tensor]],
    count: dict[int, resident.Skipped | None], kw: dict[str, Any], d: DataConfig,
    batch_size: int, workers: int,
) -> resident.EvalBatches | DataLoader:  # fmt: skip
    """The resident eval batches of ``ds``, or the loader's when its images differ in size
    (held-out images need not match, and are evaluated as on the loader path)."""
    if id(ds) in on:
        return resident.EvalBatches(*on[id(ds)], **kw, skipped=count[id(ds)])
    return eval_loader(loaders.Transformed(ds, eval_transform(d)), batch_size, workers)


def device_loader(
    crops: views.CropViews,
    sampler: loaders.ResumableSampler,
    per_rank: int,
    workers: int,
    pin: bool,
    device: torch.device | str,
) -> tuple[device_decode.EncodedViews, device_decode.DecodedLoader]:
    """``decode_on: device``: workers read bytes and draw the crops, the training process
    decodes and crops each batch on ``device`` (pretrain/data/device_decode.py)."""
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
    loader = loaders.loader(encoded, per_rank, sampler, workers, pin,
                         collate_fn=device_decode.Collate(encoded))  # fmt: skip
    return encoded, device_decode.DecodedLoader(loader, device_decode.DeviceCrops(encoded, device))


def queue(cfg: Config, train_size: int) -> LabeledQueue:
    q = LabeledQueue(cfg.moco.queue_size, cfg.model.dim)
    try:
        q.check_batch(cfg.train.batch_size)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    if cfg.moco.queue_size > train_size:
        raise ConfigError(
            f"moco.queue_size ({cfg.moco.queue_size}) exceeds the training set ({train_size} "
            "images): the queue would hold keys of the anchor's own image as negatives. Use a "
            f"queue below {train_size} (at most about a fifth of it works best on small data)."
        )
    return q


def loss_fn(cfg: Config, num_classes: int = 0) -> losses.Loss:
    """The loss named by ``loss.name`` (+ the kappa terms when the model has a kappa head),
    checked against the negative strategy it is combined with."""
    loss = cfg.loss
    kwargs = losses.registry.get(loss.name).config_kwargs(cfg, num_classes)
    own = dict(loss.kwargs)  # the loss's own settings (checked by config.validate)
    kappa = {k: own.pop(k) for k in losses.KAPPA_KWARGS if k in own}  # the kappa head's weights
    kwargs.update(own)
    try:
        made = losses.create(loss.name, **kwargs)
        if cfg.model.kappa_hidden > 0:
            made = losses.WithKappa(made, **kappa)
        made.check_strategy(cfg.negatives.name)
    except ValueError as e:
        raise ConfigError(f"loss: {e}") from e
    return made
