"""The default command's evaluation (``python -m linear_eval --ckpt X``): weighted kNN and an SGD
linear probe on the frozen backbone of one :class:`~linear_eval.inputs.session.Session`, the record
that the trainer's smoke test, SLURM eval jobs and ``linear_eval table`` read: ``knn_top1``,
``knn_top5``, ``linear_top1``, ``linear_top5`` (percent), their bootstrap 95% intervals (``*_ci``),
the settings that ran and the per-image results.

The kNN is the monitor's (:func:`pretrain.metrics.knn.knn_votes`, InstDisc's weighted vote), so
the monitor's number and this one are one computation; the probe is moco's ``main_lincls.py``
recipe (:mod:`linear_eval.classify.probe`), on cached features or on augmented images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from linear_eval.classify import probe
from linear_eval.classify.knn import PRESETS, knn_votes
from linear_eval.inputs import guards
from linear_eval.inputs.session import Session
from linear_eval.records import summary


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What the default command's flags set (``python -m linear_eval --help``)."""

    knn_preset: str | None = None  # k and T of a published protocol (None: the run's eval.*)
    k: int | None = None  # kNN neighbours (None: the preset's or the run's)
    temperature: float | None = None  # kNN vote temperature (None: the preset's or the run's)
    probe: str = "features"  # features: cached, un-augmented; images: MoCo's augmented protocol
    epochs: int = 100
    lr: float = 30.0
    milestones: tuple[int, ...] = (60, 80)  # epochs at which the lr is multiplied by 0.1
    batch_size: int = 256  # the probe's SGD batch (--probe-batch-size)
    weight_decay: float = 0.0
    seed: int = 0


def evaluate(sess: Session, s: Settings) -> dict[str, Any]:
    """kNN and the linear probe on ``sess``'s training and test features: the record."""
    train, test = sess.train(), sess.test()
    k, t = knn_setting(s, sess.model.cfg, int(train.labels.numel()))
    votes = knn_votes(train.backbone, train.labels, test.backbone, k, t, sess.num_classes)
    scores, ran = linear_probe(s, sess, train, test)
    knn_hit = summary.topk_correct(votes, test.labels, 1)  # (N,) bool, once for all its uses
    lin_hit = summary.topk_correct(scores, test.labels, 1)
    knn5 = summary.accuracy(summary.topk_correct(votes, test.labels, 5), "knn_top5")
    lin = summary.accuracy(lin_hit, "linear_top1")
    lin5 = summary.accuracy(summary.topk_correct(scores, test.labels, 5), "linear_top5")
    return {
        **run_record(sess),
        # the monitor's float32 reduction (pretrain.metrics.knn.knn_top1), so the two numbers are
        # equal
        "knn_top1": 100.0 * knn_hit.float().mean().item(),
        "knn_top1_ci": summary.interval(knn_hit),
        "knn_top5": knn5["knn_top5"],
        "knn_top5_ci": knn5["knn_top5_ci"],
        "knn": {"k": k, "temperature": t, "distance": "cosine", "weighting": "exp(sim/T)"},
        "linear_top1": lin["linear_top1"],
        "linear_top1_ci": lin["linear_top1_ci"],
        "linear_top5": lin5["linear_top5"],
        "linear_top5_ci": lin5["linear_top5_ci"],
        "linear": {
            "mode": s.probe,
            "batch_size": s.batch_size,
            "momentum": probe.MOMENTUM,
            **schedule(s),
            **ran,  # the lr the optimizer held, at epoch 0 and wherever it changed
        },
        "frozen_check": (
            "encoder parameters and BatchNorm statistics equal to the checkpoint's"
            if s.probe == "images"
            else "none needed: the probe trained on cached features, the encoder did not run"
        ),
        "train_size": int(train.labels.numel()),
        "test_size": int(test.labels.numel()),
        # per test image, in test order ("1" correct): what `linear_eval table` resamples for
        # intervals over seeds and paired differences against a baseline
        "per_sample": {"knn_top1": bits(knn_hit), "linear_top1": bits(lin_hit)},
    }


def run_record(sess: Session) -> dict[str, Any]:
    """What was evaluated: the checkpoint, its weights, its step and dataset."""
    m = sess.model
    return {
        "checkpoint": str(m.ckpt),
        "weights": "random" if sess.opts.random_init else "pretrained",
        "epoch": m.epoch,
        "global_step": m.global_step,
        "dataset": m.cfg.data.name,
        "train_set": m.train_set,  # the checkpoint's (None: recorded before it was)
        "test_set": sess.test_set(),
        "features": "backbone (pooled, penultimate)",
    }


def knn_setting(s: Settings, cfg: Any, bank: int) -> tuple[int, float]:
    """k and T of the kNN: the flags, else the preset, else the run's monitor settings. A ``--k``
    above the ``bank`` (the training images) is refused; a preset's or the run's k is clamped to
    it, which is what :func:`knn_votes` uses and so what is recorded."""
    preset = (
        PRESETS[s.knn_preset]
        if s.knn_preset
        else {"k": cfg.eval.knn_k, "temperature": cfg.eval.knn_temperature}
    )
    k = preset["k"] if s.k is None else s.k
    if s.k is not None and k > bank:
        raise guards.UsageError(
            f"--k {k} exceeds the {bank} training images (the kNN bank); give --k {bank} or less"
        )
    t = preset["temperature"] if s.temperature is None else s.temperature
    return min(k, bank), t


def schedule(s: Settings) -> dict[str, Any]:
    return {
        "epochs": s.epochs,
        "lr": s.lr,
        "milestones": list(s.milestones),
        "weight_decay": s.weight_decay,
        "seed": s.seed,
    }


def linear_probe(
    s: Settings, sess: Session, train: Any, test: Any
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The linear probe's test scores and what ran: on the cached features (``--probe
    features``) or on augmented images through the frozen backbone (``images``)."""
    device = sess.store.device
    if s.probe == "features":
        recipe = probe.Protocol(
            "custom",
            epochs=s.epochs,
            lr=s.lr,
            milestones=tuple(s.milestones),
            batch_size=s.batch_size,
            weight_decay=s.weight_decay,
        )
        return probe.fit_predict(
            train.backbone.to(device),
            train.labels,
            test.backbone.to(device),
            sess.num_classes,
            recipe,
            s.seed,
        )
    lr_log: list[float] = []
    fc = probe.train_on_images(
        sess.model.encoder.backbone,
        sess.store.augmented_loader(s.batch_size, s.seed),
        sess.num_classes,
        train.backbone.shape[1],
        device,
        **schedule(s),
        lr_log=lr_log,
    )
    scores = probe.predict(fc, test.backbone.to(device)).cpu()
    sess.model.assert_unchanged()  # the augmented images went through the backbone
    return scores, {"lr_by_epoch": probe.lr_changes(lr_log)}


def bits(correct: Any) -> str:
    return "".join("1" if c else "0" for c in correct.flatten().tolist())
