"""What each subcommand of ``python -m linear_eval`` runs on its parsed arguments: one function
per command, registered on its subparser by :mod:`linear_eval.cli.main` (``set_defaults(run=...)``).
A checkpoint command returns its record; :func:`on_one` and :func:`on_several` open the sessions
and print the summary line and the JSON line."""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from linear_eval.classify import evaluate as classification
from linear_eval.classify import knn as knn_lib
from linear_eval.classify import limited, probe
from linear_eval.cli import kappa as kappa_lib
from linear_eval.cli import summary_line
from linear_eval.detect import detectors, openood
from linear_eval.detect import evaluate as detection
from linear_eval.detect.detectors import Settings
from linear_eval.inputs.guards import UsageError
from linear_eval.inputs.session import Options, Session, clean, configure_threads
from linear_eval.report import document
from pretrain.runtime.checkpoint_io import CheckpointError

Record = dict[str, Any]


def checkpoints(patterns: list[str]) -> list[str]:
    """The ``--ckpt`` values, quoted globs expanded (a glob that matches nothing is refused)."""
    out: list[str] = []
    for pat in patterns:
        hits = sorted(glob.glob(pat)) if any(c in pat for c in "*?[") else [pat]
        if not hits:
            raise CheckpointError(f"no checkpoint matches {pat!r}")
        out += hits
    return out


def check_numbers(args: argparse.Namespace) -> None:
    """Counts that would run but mean nothing (``ood --k 0`` scored with 0 neighbours)."""
    for name in ("k", "crops", "draws", "batch_size", "threads"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} {value}: give a whole number >= 1")
    if args.num_workers < 0:
        raise UsageError(f"--num-workers {args.num_workers}: give a whole number >= 0")
    bad_counts = [c for c in getattr(args, "counts", None) or [] if c < 1]
    if bad_counts:
        raise UsageError(
            f"--counts {','.join(map(str, args.counts))}: give labelled images per class as "
            "whole numbers >= 1"
        )


#: Commands that read only the run's own dataset (``--data-root`` is its root alone); transfer,
#: OOD sets, CIFAR-10-C and the summary commands read other datasets under it too.
OWN_DATA_ONLY = ("default", "linear", "knn", "limited", "compare")


def options(args: argparse.Namespace) -> Options:
    return Options(
        data_root=args.data_root,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        cache=not args.no_cache,
        random_init=args.random_init,
        device=args.device,
        config=args.config,
        overrides=tuple(args.set),
        own_data_only=args.command in OWN_DATA_ONLY
        or (args.command == "ood" and not getattr(args, "ood_datasets", None)),
    )


def _sessions(args: argparse.Namespace) -> list[Session]:
    check_numbers(args)
    opts = options(args)
    configure_threads(args.threads, args.device)
    return [Session(p, opts) for p in checkpoints(args.ckpt)]


def emit(args: argparse.Namespace, result: Record) -> int:
    """The summary line on stderr, then the record as one JSON line."""
    result = clean(result)
    if args.command == "compare":
        print(f"linear probe: {probe.describe(result['linear_probe']['name'])}", file=sys.stderr)
        print(summary_line.compare(result), file=sys.stderr)
    else:
        print(summary_line.line(args.command, result), file=sys.stderr)
    print(json.dumps(result))
    return 0


def on_one(evaluate: Callable[[Session, argparse.Namespace], Record]) -> Callable[..., int]:
    """A command on one checkpoint: ``evaluate(session, args)``, then :func:`emit`."""

    def run(args: argparse.Namespace) -> int:
        check_numbers(args)
        paths = checkpoints(args.ckpt)
        if len(paths) != 1:
            raise ValueError(f"{args.command} takes one checkpoint, got {len(paths)}")
        configure_threads(args.threads, args.device)
        return emit(args, evaluate(Session(paths[0], options(args)), args))

    return run


def linear(sess: Session, args: argparse.Namespace) -> Record:
    if args.select_on == "val":
        return classification.run_selected(sess, "linear", args.val_fraction)
    return classification.run_linear(sess, args.protocol, args.seeds, args.probe)


def knn(sess: Session, args: argparse.Namespace) -> Record:
    if args.select_on == "val":
        return classification.run_selected(sess, "knn", args.val_fraction)
    return classification.run_knn(sess, args.presets)


def transfer(sess: Session, args: argparse.Namespace) -> Record:
    return classification.run_transfer(sess, args.datasets, args.protocol, args.seeds)


def limited_labels(sess: Session, args: argparse.Namespace) -> Record:
    """``limited``: the evaluation, then its plot (RUN/reports/)."""
    record = classification.run_limited(sess, args.counts, args.draws, args.protocol)
    document.draw_limited(record, sess.report_dir)
    return record


def ood(sess: Session, args: argparse.Namespace) -> Record:
    settings = Settings(k=args.k, seed=args.crop_seed)
    names = args.detectors or list(detectors.DEFAULT)
    if args.ood_datasets:
        return detection.run_ood_datasets(sess, args.ood_datasets, names, settings, args.crops)
    record = detection.run_one_class(sess, names, settings, args.crops)
    document.draw_one_class(record, sess.report_dir)
    return record


def open_ood(sess: Session, args: argparse.Namespace) -> Record:
    # the ID accuracy's kNN: the CIFAR preset (k 200, T 0.1), as OpenOOD's tables
    knn_setting = knn_lib.PRESETS["cifar"]
    return openood.run_openood(sess, args.benchmark, args.root, args.detectors, knn=knn_setting)


def kappa(sess: Session, args: argparse.Namespace) -> Record:
    return kappa_lib.run_kappa(sess, corruptions_root=args.corruptions_root)


def report(sess: Session, args: argparse.Namespace) -> Record:
    return document.build(sess)


def ood_command(args: argparse.Namespace) -> int:
    """``ood``: one checkpoint, or the AULC over several (the one-class protocol)."""
    if len(checkpoints(args.ckpt)) == 1:
        return on_one(ood)(args)
    if args.ood_datasets:
        raise ValueError("AULC over checkpoints uses the one-class protocol: drop --ood-datasets")
    names = args.detectors or list(detection.AULC_DETECTORS)
    if {"s_shift", "s_ens"} & set(names):
        raise ValueError("AULC runs without test-time views: drop s_shift and s_ens")
    return emit(args, detection.run_aulc(_sessions(args), names, Settings(k=args.k)))


def compare(args: argparse.Namespace) -> int:
    """``compare``: checkpoint B against the reference A."""
    check_numbers(args)
    paths = checkpoints(args.ckpt)
    if len(paths) != 2:
        raise ValueError(f"compare needs exactly two checkpoints, got {len(paths)}")
    a, b = _sessions(args)
    return emit(args, compare_pair(a, b, args.knn_preset, args.k, args.protocol))


def compare_pair(
    a: Session,
    b: Session,
    knn_preset: str = "cifar",
    detector_k: int = 5,
    protocol: str = probe.DEFAULT_COMMAND,
) -> Record:
    """B against the reference A: kNN and linear top-1 (:func:`classification.compare`) and the
    one-class s_con AUROC (:func:`detection.compare_one_class`), paired; written to A's
    ``eval/compare.json``; the record returned also holds ``written_to``."""
    record = classification.compare(a, b, knn_preset, protocol)
    record["oneclass_s_con"] = detection.compare_one_class(a, b, detector_k)
    path = a.write("compare", record)
    return record | {"written_to": str(path)}


def run_all(sess: Session, args: argparse.Namespace) -> Record:
    """linear, kNN, limited labels, one-class detection, kappa (with a kappa head), report (which
    draws the figures of the results before it)."""
    if sess.model.has_kappa:  # a bad --corruptions-root fails now, not after the other steps
        kappa_lib.corruption_source(sess, root=args.corruptions_root)
    steps = {
        "linear": lambda: classification.run_linear(sess, "lbfgs", args.seeds),
        "knn": lambda: classification.run_knn(sess),
        "limited": lambda: classification.run_limited(sess, limited.COUNTS, args.draws),
        "oneclass": lambda: detection.run_one_class(sess, crops=args.crops),
        "kappa": lambda: kappa(sess, args),
        "report": lambda: document.build(sess),
    }
    if not sess.model.has_kappa:
        del steps["kappa"]
    out: Record = {}
    timings: dict[str, float] = {}
    for name, step in steps.items():
        start = time.perf_counter()
        out[name] = step()
        timings[name] = round(time.perf_counter() - start, 2)
        print(f"{name}: done in {timings[name]:.1f} s", file=sys.stderr)
    return _all_record(out, timings)


def _all_record(out: Record, timings: dict[str, float]) -> Record:
    lin, near = out["linear"], out["knn"]["variants"]
    oc = out["oneclass"]["detectors"]
    return {
        "linear_protocol": "lbfgs: L2 multinomial logistic regression by full-batch L-BFGS on "
        f"cached features, L2 chosen on a held-out {lin['solver'][0]['val_fraction']:.0%} of "
        "each class (not the default command's SGD probe)",
        "linear_l2": [s["l2"] for s in lin["solver"]],  # chosen per seed
        "linear_top1": lin["top1"],
        "linear_top1_ci": lin["top1_ci"],
        "knn_top1": near["run"]["top1"],
        "knn_top1_ci": near["run"]["top1_ci"],
        "oneclass_auroc": {n: d["mean"]["auroc"] for n, d in oc.items()},
        "report": out["report"]["report"],
        "seconds": timings,
    }
