"""The default command, ``python -m linear_eval --ckpt X``: weighted kNN and an SGD linear probe
on the frozen backbone, one JSON line at the end (what the trainer's smoke test and SLURM eval jobs
read).

    python -m linear_eval --ckpt runs/digits_moco/checkpoints/last.pt
    python -m linear_eval --ckpt RUN/checkpoints/last.pt --probe images --knn-preset imagenet
    python -m linear_eval --ckpt RUN/checkpoints/last.pt --random-init   # the untrained baseline

It takes the flags every subcommand takes, with the same meanings (``--batch-size`` is the feature
extraction batch, ``--device``, ``--threads``; the probe's SGD batch is ``--probe-batch-size``),
and writes its results as they do (:meth:`Session.write`). Prints a summary, writes
RUN/eval/linear_eval[_random].json, and ends with one JSON line holding ``knn_top1``, ``knn_top5``,
``linear_top1``, ``linear_top5`` (percent), their bootstrap 95% intervals (``*_ci``) and the
protocol used. Exit status: 0 done, 1 unusable checkpoint, 2 bad arguments or missing dataset, or
results that could not be written where asked (the message says where they were saved instead).
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

from linear_eval.classify import knn_and_probe, probe
from linear_eval.classify.knn import PRESETS
from linear_eval.cli import commands
from linear_eval.inputs import guards
from linear_eval.inputs.session import Session, clean, configure_threads

EVALUATOR = "linear_eval"  # RUN/eval/linear_eval[_random].json


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The default command's own flags (its subparser in :func:`linear_eval.cli.main.parser`, with
    the subcommands' common flags as its parent)."""
    p.description = __doc__.split("\n")[0]
    p.epilog = "Subcommands (all, linear, knn, transfer, limited, ood, kappa, report, compare, "
    p.epilog += "table): python -m linear_eval all --help"
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
    p.add_argument(
        "--probe-batch-size",
        type=int,
        default=256,
        help="the linear probe's SGD batch (--batch-size is the feature extraction batch, as in "
        "every subcommand)",
    )
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path (default RUN/eval/linear_eval.json)")


def settings(args: argparse.Namespace) -> knn_and_probe.Settings:
    return knn_and_probe.Settings(
        knn_preset=args.knn_preset,
        k=args.k,
        temperature=args.temperature,
        probe=args.probe,
        epochs=args.epochs,
        lr=args.lr,
        milestones=tuple(args.milestones),
        batch_size=args.probe_batch_size,
        weight_decay=args.weight_decay,
        seed=args.seed,
    )


def _out_path(ckpt: str, args: argparse.Namespace) -> Path:
    """Where the results go, known before the checkpoint is read (for the checks up front); the
    same file :meth:`Session.write` names when ``--out`` is not given."""
    suffix = "_random" if args.random_init else ""
    if args.out:
        return Path(args.out)
    if args.config:
        path = Path(ckpt).resolve()
        return path.parent / f"{path.name}.eval" / "eval" / f"{EVALUATOR}{suffix}.json"
    return Path(ckpt).resolve().parent.parent / "eval" / f"{EVALUATOR}{suffix}.json"


def check_args(args: argparse.Namespace) -> None:
    """Refuse values that would run but mean nothing (or be replaced by a default unnoticed)."""
    commands.check_numbers(args)  # the common flags, as every subcommand checks them
    whole = [("--epochs", args.epochs), ("--probe-batch-size", args.probe_batch_size)]
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
    probe.check_milestones(args.milestones)


def run(args: argparse.Namespace) -> int:
    """Evaluate, write ``RUN/eval/linear_eval[_random].json``, print the summary and the JSON."""
    check_args(args)
    paths = commands.checkpoints(args.ckpt)
    if len(paths) != 1:
        raise ValueError(f"the default command takes one checkpoint, got {len(paths)}")
    out = _out_path(paths[0], args)
    guards.require_checkpoint(paths[0])
    guards.require_writable(out.parent, "--out's directory")
    guards.require_output_file(out, None if args.out else out.parent.parent)
    configure_threads(args.threads, args.device)
    sess = Session(paths[0], commands.options(args))
    result = knn_and_probe.evaluate(sess, settings(args))
    written, failure = _save(sess, result, Path(args.out) if args.out else None)
    print(
        f"kNN (k={result['knn']['k']}, T={result['knn']['temperature']}): "
        f"top-1 {result['knn_top1']:.2f} {_ci(result['knn_top1_ci'])}  "
        f"top-5 {result['knn_top5']:.2f}",
        file=sys.stderr,
    )
    print(
        f"linear ({args.probe}): top-1 {result['linear_top1']:.2f} "
        f"{_ci(result['linear_top1_ci'])}  "
        f"top-5 {result['linear_top5']:.2f}   written to {written}",
        file=sys.stderr,
    )
    print(json.dumps(clean({k: v for k, v in result.items() if k != "per_sample"})))
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        return 2
    return 0


def _save(sess: Session, result: dict[str, Any], out: Path | None) -> tuple[Path | str, str]:
    """Write the results with :meth:`Session.write` (to ``out``, else the run's eval folder);
    when that fails (a full disk, ``--out /dev/full``), to a temporary file instead, or, failing
    that too, to stdout: where they went, and why the write failed ("" when it did not)."""
    try:
        return sess.write(EVALUATOR, result, out), ""
    except OSError as e:
        target = out or sess.result_path(EVALUATOR)
        why = f"cannot write the results to {target} ({e.strerror or e})"
    text = sess.result_text(EVALUATOR, result)
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
