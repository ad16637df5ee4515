"""Thin adapters from the config to the objects of a run (the only place that reads the config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import negatives
from pretrain import data, datasets, dist
from pretrain import model as model_lib
from pretrain.config import Config, ConfigError, DataConfig
from pretrain.losses import InfoNCE
from pretrain.queue import LabeledQueue


def model(cfg: Config) -> model_lib.MoCo:
    m = cfg.model
    return model_lib.build(m.arch, m.width, m.cifar_stem, m.dim, m.mlp, m.bn_splits, m.kappa_hidden)


def eval_transform(d: DataConfig) -> Any:
    return data.eval_transform(d.image_size, d.eval_resize, d.mean, d.std)


def train_transform(d: DataConfig) -> Any:
    return data.train_transform(
        d.image_size,
        d.crop_scale,
        d.jitter_strength,
        d.jitter_prob,
        d.grayscale_prob,
        d.blur_prob,
        d.hflip_prob,
        d.affine_degrees,
        d.affine_translate,
        d.mean,
        d.std,
    )


def strategy(cfg: Config) -> negatives.NegativeStrategy:
    try:
        made = negatives.create(cfg.negatives.name, **cfg.negatives.kwargs)
        made.check_sizes(cfg.moco.queue_size, cfg.train.batch_size)
    except ValueError as e:
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
    return torch.optim.SGD(groups, lr=lr, momentum=t.sgd_momentum)


@dataclass
class Data:
    train: data.TwoViews
    sampler: data.ResumableSampler
    train_loader: DataLoader
    bank_loader: DataLoader  # training images, eval transform: the kNN memory bank
    test_loader: DataLoader  # held-out images, eval transform
    num_classes: int


def eval_loader(ds: Dataset, batch_size: int, num_workers: int) -> DataLoader:
    return data.loader(ds, batch_size, None, num_workers)


def datasets_for(cfg: Config) -> Data:
    d = cfg.data
    base_train = datasets.build(d.name, d.root, d.train_split)
    base_bank = datasets.build(d.name, d.root, "train")
    base_test = datasets.build(d.name, d.root, "test")
    train = data.TwoViews(base_train, train_transform(d), cfg.seed)
    world = dist.world_size()
    sampler = data.ResumableSampler(len(train), cfg.train.batch_size, cfg.seed, dist.rank(), world)
    pin = torch.cuda.is_available()
    per_rank = cfg.train.batch_size // world
    tf = eval_transform(d)
    workers = d.num_workers
    return Data(
        train=train,
        sampler=sampler,
        train_loader=data.loader(train, per_rank, sampler, workers, pin),
        bank_loader=eval_loader(data.Transformed(base_bank, tf), cfg.eval.batch_size, workers),
        test_loader=eval_loader(data.Transformed(base_test, tf), cfg.eval.batch_size, workers),
        num_classes=datasets.num_classes(base_bank),
    )


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


def criterion(cfg: Config) -> InfoNCE:
    return InfoNCE(cfg.moco.temperature)
