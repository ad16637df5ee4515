"""The default command, ``python -m linear_eval --ckpt X``: weighted kNN and an SGD linear probe
on the frozen backbone, one JSON line at the end (what the trainer's smoke test and SLURM eval jobs
read).

    python -m linear_eval --ckpt runs/digits_moco/checkpoints/last.pt
    python -m linear_eval --ckpt RUN/checkpoints/last.pt --probe images --knn-preset imagenet
    python -m linear_eval --ckpt RUN/checkpoints/last.pt --random-init   # the untrained baseline

Prints a summary, writes RUN/eval/linear_eval[_random].json, and ends with one JSON line holding
``knn_top1``, ``knn_top5``, ``linear_top1``, ``linear_top5`` (percent), their bootstrap 95%
intervals (``*_ci``) and the protocol used. Exit status: 0 done, 1 unusable checkpoint, 2 bad
arguments or missing dataset, or results that could not be written where asked (the message says
where they were saved instead).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from linear_eval.classify import probe
from linear_eval.classify.knn import PRESETS, knn_votes
from linear_eval.inputs import guards
from linear_eval.inputs.session import Options, Session, clean, configure_threads
from linear_eval.records import summary
from pretrain.runtime import run_folder


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The default command's flags (its subparser in :func:`linear_eval.cli.main.parser`)."""
    p.description = __doc__.split("\n")[0]
    p.epilog = "Subcommands (all, linear, knn, transfer, limited, ood, kappa, report, compare, "
    p.epilog += "table): python -m linear_eval all --help"
    p.add_argument(
        "--ckpt", required=True, help="a pretraining checkpoint (RUN/checkpoints/last.pt)"
    )
    p.add_argument(
        "--knn-preset",
        choices=sorted(PRESETS),
        default=None,
        help="k and T of a published protocol (default: the run's eval.knn_k/temperature)",
    )
    p.add_argument("--k", type=int, default=None, help="kNN neighbours")
    p.add_argument("--temperature", type=float, default=None, help="kNN vote temperature")
    p.add_argument(
        "--probe",
        choices=("features", "images"),
        default="features",
        help="features: fast, on cached un-augmented features; images: MoCo's protocol "
        "with RandomResizedCrop + flip through the frozen backbone",
    )
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--lr", type=float, default=30.0)
    p.add_argument(
        "--milestones",
        type=int,
        nargs="*",
        default=[60, 80],
        help="epochs at which the lr is multiplied by 0.1 (one or more, increasing; for a "
        "constant lr give one at or past --epochs)",
    )
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--random-init",
        action="store_true",
        help="evaluate the same architecture untrained (the baseline)",
    )
    p.add_argument("--data-root", default=None, help="override the run's data.root")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path (default RUN/eval/linear_eval.json)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write RUN/features/")
    p.add_argument(
        "--config",
        default=None,
        help="weights made elsewhere (MoCo v1/v2, torchvision/timm, solo-learn): the negmine "
        "config naming the dataset and eval settings; results go to <file>.eval/",
    )
    p.add_argument("--set", nargs="*", default=[], metavar="key=value", help="--config overrides")


def _out_path(args: argparse.Namespace) -> Path:
    suffix = "_random" if args.random_init else ""
    if args.out:
        return Path(args.out)
    if args.config:
        ckpt = Path(args.ckpt).resolve()
        return ckpt.parent / f"{ckpt.name}.eval" / "eval" / f"linear_eval{suffix}.json"
    return Path(args.ckpt).resolve().parent.parent / "eval" / f"linear_eval{suffix}.json"


def _run_dir(args: argparse.Namespace) -> Path | None:
    """The run folder the results go into (None: ``--out`` names the file)."""
    return None if args.out else _out_path(args).parent.parent


def check_args(args: argparse.Namespace) -> None:
    """Refuse values that would run but mean nothing (or be replaced by a default unnoticed)."""
    whole = [("--epochs", args.epochs), ("--batch-size", args.batch_size)]
    if args.k is not None:
        whole.append(("--k", args.k))
    for flag, v in whole:
        if v < 1:
            raise guards.UsageError(f"{flag} {v}: give a whole number >= 1")
    positive = [("--lr", args.lr)]
    if args.temperature is not None:
        positive.append(("--temperature", args.temperature))
    for flag, v in positive:
        if not (math.isfinite(v) and v > 0):
            raise guards.UsageError(f"{flag} {v}: give a finite number > 0")
    if not (math.isfinite(args.weight_decay) and args.weight_decay >= 0):
        raise guards.UsageError(f"--weight-decay {args.weight_decay}: give a finite number >= 0")
    if args.num_workers < 0:
        raise guards.UsageError(f"--num-workers {args.num_workers}: give a whole number >= 0")
    probe.check_milestones(args.milestones)


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    check_args(args)
    guards.require_checkpoint(args.ckpt)
    guards.require_writable(_out_path(args).parent, "--out's directory")
    guards.require_output_file(_out_path(args), _run_dir(args))
    opts = Options(
        data_root=args.data_root,
        num_workers=args.num_workers,
        cache=not args.no_cache,
        random_init=args.random_init,
        config=args.config,
        overrides=tuple(args.set),
    )
    sess = Session(args.ckpt, opts)
    train, test = sess.train(), sess.test()
    k, t = _knn_setting(args, sess.model.cfg, int(train.labels.numel()))
    votes = knn_votes(train.backbone, train.labels, test.backbone, k, t, sess.num_classes)
    scores, ran = _linear_probe(args, sess, train, test)
    knn_hit = summary.topk_correct(votes, test.labels, 1)  # (N,) bool, once for all its uses
    lin_hit = summary.topk_correct(scores, test.labels, 1)
    knn5 = summary.accuracy(summary.topk_correct(votes, test.labels, 5), "knn_top5")
    lin = summary.accuracy(lin_hit, "linear_top1")
    lin5 = summary.accuracy(summary.topk_correct(scores, test.labels, 5), "linear_top5")
    return {
        **_run_record(args, sess),
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
            "mode": args.probe,
            "batch_size": args.batch_size,
            "momentum": probe.MOMENTUM,
            **_schedule(args),
            **ran,  # the lr the optimizer held, at epoch 0 and wherever it changed
        },
        "frozen_check": (
            "encoder parameters and BatchNorm statistics equal to the checkpoint's"
            if args.probe == "images"
            else "none needed: the probe trained on cached features, the encoder did not run"
        ),
        "train_size": int(train.labels.numel()),
        "test_size": int(test.labels.numel()),
        # per test image, in test order ("1" correct): what `linear_eval table` resamples for
        # intervals over seeds and paired differences against a baseline
        "per_sample": {"knn_top1": _bits(knn_hit), "linear_top1": _bits(lin_hit)},
    }


def _run_record(args: argparse.Namespace, sess: Session) -> dict[str, Any]:
    """What was evaluated: the checkpoint, its weights, its step and dataset."""
    return {
        "checkpoint": str(args.ckpt),
        "weights": "random" if args.random_init else "pretrained",
        "epoch": sess.model.epoch,
        "global_step": sess.model.global_step,
        "dataset": sess.model.cfg.data.name,
        "train_set": sess.model.train_set,  # the checkpoint's (None: recorded before it was)
        "test_set": sess.test_set(),
        "features": "backbone (pooled, penultimate)",
    }


def _knn_setting(args: argparse.Namespace, cfg: Any, bank: int) -> tuple[int, float]:
    """k and T of the kNN: the flags, else the preset, else the run's monitor settings. A ``--k``
    above the ``bank`` (the training images) is refused; a preset's or the run's k is clamped to
    it, which is what :func:`knn_votes` uses and so what is recorded."""
    preset = (
        PRESETS[args.knn_preset]
        if args.knn_preset
        else {"k": cfg.eval.knn_k, "temperature": cfg.eval.knn_temperature}
    )
    k = preset["k"] if args.k is None else args.k
    if args.k is not None and k > bank:
        raise guards.UsageError(
            f"--k {k} exceeds the {bank} training images (the kNN bank); give --k {bank} or less"
        )
    t = preset["temperature"] if args.temperature is None else args.temperature
    return min(k, bank), t


def _schedule(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "epochs": args.epochs,
        "lr": args.lr,
        "milestones": args.milestones,
        "weight_decay": args.weight_decay,
        "seed": args.seed,
    }


def _linear_probe(
    args: argparse.Namespace, sess: Session, train: Any, test: Any
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The linear probe's test scores and what ran: on the cached features (``--probe
    features``) or on augmented images through the frozen backbone (``images``)."""
    device = sess.store.device
    if args.probe == "features":
        recipe = probe.Protocol(
            "custom",
            epochs=args.epochs,
            lr=args.lr,
            milestones=tuple(args.milestones),
            batch_size=args.batch_size,
            weight_decay=args.weight_decay,
        )
        return probe.fit_predict(
            train.backbone.to(device),
            train.labels,
            test.backbone.to(device),
            sess.num_classes,
            recipe,
            args.seed,
        )
    lr_log: list[float] = []
    fc = probe.train_on_images(
        sess.model.encoder.backbone,
        sess.store.augmented_loader(args.batch_size, args.seed),
        sess.num_classes,
        train.backbone.shape[1],
        device,
        **_schedule(args),
        lr_log=lr_log,
    )
    scores = probe.predict(fc, test.backbone.to(device)).cpu()
    sess.model.assert_unchanged()  # the augmented images went through the backbone
    return scores, {"lr_by_epoch": probe.lr_changes(lr_log)}


def _bits(correct: Any) -> str:
    return "".join("1" if c else "0" for c in correct.flatten().tolist())


def run(args: argparse.Namespace) -> int:
    """Evaluate, write ``RUN/eval/linear_eval[_random].json``, print the summary and the JSON."""
    configure_threads(None, None)
    result = evaluate(args)
    out, failure = _save(_out_path(args), json.dumps(clean(result), indent=2) + "\n", args)
    print(
        f"kNN (k={result['knn']['k']}, T={result['knn']['temperature']}): "
        f"top-1 {result['knn_top1']:.2f} {_ci(result['knn_top1_ci'])}  "
        f"top-5 {result['knn_top5']:.2f}",
        file=sys.stderr,
    )
    print(
        f"linear ({args.probe}): top-1 {result['linear_top1']:.2f} "
        f"{_ci(result['linear_top1_ci'])}  "
        f"top-5 {result['linear_top5']:.2f}   written to {out}",
        file=sys.stderr,
    )
    print(json.dumps(clean({k: v for k, v in result.items() if k != "per_sample"})))
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        return 2
    return 0


def _save(out: Path, text: str, args: argparse.Namespace) -> tuple[Path | str, str]:
    """Write the results to ``out``; when that fails (a full disk, ``--out /dev/full``), to a
    temporary file instead, or, failing that too, to stdout: where they went, and why ``out``
    failed ("" when it did not)."""
    try:
        return run_folder.write_text(out, text, _run_dir(args)), ""
    except OSError as e:
        why = f"cannot write the results to {out} ({e.strerror or e})"
    try:
        fd, saved = tempfile.mkstemp(prefix="linear_eval-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(text)
    except OSError as e:
        print(text, end="")
        return (
            "stdout",
            f"{why}, nor to a temporary file ({e.strerror or e}); they are printed above",
        )
    return saved, f"{why}; they were saved to {saved} instead"


def _ci(pair: list[float]) -> str:
    return f"[{pair[0]:.2f}, {pair[1]:.2f}]"
