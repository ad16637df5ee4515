"""Thin adapters from the config to the objects of a run: the model, the queue, the strategy, the
loss and the optimizer are built here from plain values and never see the config; the data through
:mod:`pretrain.data.pipeline`, which takes the values :func:`data_settings` gives it. Besides this
module, only the run's own code in ``pretrain/engine`` (setup, loop, step: ``train.*`` and
``eval.*``), ``config.run_settings`` (the run settings a loss declares) and
``cuda_graphs.refusal`` read it. It sits below the engine (import-linter's layers), so
``linear_eval`` builds a checkpoint's encoder with :func:`model` as the trainer does, without
importing the trainer."""

from __future__ import annotations

from typing import Any

import torch

import negatives
from negmine_core.step import SetupContext
from pretrain import losses
from pretrain.config import Config, ConfigError, run_settings
from pretrain.data import pipeline
from pretrain.data.pipeline import Data
from pretrain.model import encoders as model_lib
from pretrain.model import split_bn
from pretrain.model.queue import LabeledQueue
from pretrain.runtime import precision


def model(cfg: Config, device: torch.device | None = None) -> model_lib.MoCo:
    """The MoCo module with the run's constants; ``device``: the training device, which decides
    ``train.channels_last`` (None: outside training, contiguous)."""
    m, t = cfg.model, cfg.train
    last = device is not None and precision.channels_last(t.channels_last, t.amp, device)
    net = model_lib.build(
        arch=m.arch,
        width=m.width,
        cifar_stem=m.cifar_stem,
        dim=m.dim,
        mlp=m.mlp,
        bn_splits=m.bn_splits,
        kappa_hidden=cfg.kappa.hidden,
        momentum=cfg.moco.momentum,
        symmetric=cfg.loss.symmetric,
        symmetric_keys=cfg.moco.symmetric_keys,
        channels_last=last,
        keep_features=cfg.eval.online_probe,
    )
    split_bn.use_path(net, None if m.split_bn == "auto" else m.split_bn)
    return net


def data_settings(cfg: Config) -> pipeline.Settings:
    """The values of the config the input pipeline reads (:mod:`pretrain.data.pipeline`)."""
    return pipeline.Settings(
        data=cfg.data,
        batch_size=cfg.train.batch_size,
        eval_batch_size=cfg.eval.batch_size,
        seed=cfg.seed,
        out_dir=cfg.out_dir,
        knn_k=cfg.eval.knn_k if cfg.eval.knn_every > 0 else 0,
    )


def datasets_for(cfg: Config, device: torch.device | str = "cpu") -> Data:
    """The run's datasets and loaders (:func:`pretrain.data.pipeline.build`)."""
    return pipeline.build(data_settings(cfg), device)


def setup_context(cfg: Config, **run: Any) -> SetupContext:
    """What a strategy's and a loss's setup hook read; ``run``: num_classes, device, model,
    features, resuming."""
    d = cfg.data
    mean, std = tuple(d.mean), tuple(d.std)
    return SetupContext(dim=cfg.model.dim, image_size=d.image_size, mean=mean, std=std, **run)


def strategy(cfg: Config) -> negatives.NegativeStrategy:
    try:
        made = negatives.create(cfg.negatives.name, **cfg.negatives.kwargs)
        made.check_sizes(cfg.moco.queue_size, cfg.train.batch_size)
    except (ValueError, ImportError) as e:  # ImportError: an optional backend not installed
        raise ConfigError(f"negatives: {e}") from e
    return made


def set_up(
    cfg: Config, made: negatives.NegativeStrategy, loss: losses.Loss, ctx: SetupContext
) -> None:
    """The one setup moment: the strategy's ``setup(ctx)``, then the loss's, with the same
    context; a strategy's refusal (an unreadable ``oe_path``) is a config error (exit 2)."""
    try:
        made.setup(ctx)
    except (ValueError, ImportError) as e:
        raise ConfigError(f"negatives: {e}") from e
    loss.setup(ctx)


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


def queue(cfg: Config, train_size: int) -> LabeledQueue:
    """The queue, its size checked against the training set before its memory is taken."""
    if cfg.moco.queue_size > train_size:
        raise ConfigError(
            f"moco.queue_size ({cfg.moco.queue_size}) exceeds the training set ({train_size} "
            "images): the queue would hold keys of the anchor's own image as negatives. Use a "
            f"queue below {train_size} (at most about a fifth of it works best on small data)."
        )
    q = LabeledQueue(cfg.moco.queue_size, cfg.model.dim)
    try:
        q.check_batch(cfg.train.batch_size)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return q


def check_pairing(cfg: Config) -> None:
    """The loss class's declared strategies (CIDER: none only) against ``negatives.name``: a
    config error (exit 2) before any data is read."""
    try:
        losses.registry.get(cfg.loss.name).check_strategy(cfg.negatives.name)
    except ValueError as e:
        raise ConfigError(f"loss: {e}") from e


def loss_fn(cfg: Config, num_classes: int = 0) -> losses.Loss:
    """The loss named by ``loss.name`` (+ the kappa terms of ``kappa.*`` when the model has a
    kappa head), checked against the negative strategy it is combined with."""
    check_pairing(cfg)
    loss, kappa = cfg.loss, cfg.kappa
    taken = run_settings.taken(losses.registry.get(loss.name))  # those its constructor takes
    kwargs = run_settings.values(cfg, taken, num_classes)
    kwargs.update(loss.kwargs)  # the loss's own settings (checked by config.validate)
    try:
        made = losses.create(loss.name, **kwargs)
    except ValueError as e:
        raise ConfigError(f"loss: {e}") from e
    if kappa.hidden > 0:
        made = losses.WithKappa(made, lambda_align=kappa.lambda_align, lambda_reg=kappa.lambda_reg)
    return made
