"""Evaluate pretraining checkpoints: linear probes, kNN, transfer, limited labels, OOD / anomaly
detection and a report.

    python -m linear_eval --ckpt RUN/checkpoints/last.pt          # linear (SGD) + kNN, JSON line
    python -m linear_eval all --ckpt RUN/checkpoints/last.pt      # everything below + report.md
    python -m linear_eval linear --ckpt X --protocol mioc --seeds 0 1 2
    python -m linear_eval knn --ckpt X --presets cifar imagenet mioc
    python -m linear_eval transfer --ckpt X --datasets cifar10,cifar100,stl10,cinic10
    python -m linear_eval limited --ckpt X --counts 10,25,50,100 --draws 5
    python -m linear_eval ood --ckpt X                             # one-class protocol
    python -m linear_eval ood --ckpt X --ood-datasets svhn,lsun,textures
    python -m linear_eval ood --ckpt 'RUN/checkpoints/epoch_*.pt'  # + AULC over checkpoints
    python -m linear_eval kappa --ckpt X --corruptions-root data/CIFAR-10-C
    python -m linear_eval report --ckpt X
    python -m linear_eval compare --ckpt A --ckpt B               # B - A, A the reference
    python -m linear_eval table runs/digits_* --baseline runs/digits_moco --out results/digits

Results go to RUN/eval/<evaluator>.json, figures and report.md to RUN/reports/, features to
RUN/features/. Every accuracy and AUROC carries a bootstrap 95% interval. Exit status: 0 done,
1 unusable checkpoint, 2 bad arguments or missing dataset.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import json
import sys
import time
from typing import Any

from linear_eval.classify import knn, limited, probe
from linear_eval.classify import transfer as transfer_lib
from linear_eval.cli import classification, default, detection, openood, summary_line, table
from linear_eval.detect import detectors, fitted
from linear_eval.detect.detectors import Settings
from linear_eval.inputs import openood as openood_data
from linear_eval.inputs.guards import UsageError
from linear_eval.inputs.session import Options, Session, clean, configure_threads
from linear_eval.report import document
from pretrain.config import ConfigError
from pretrain.data.datasets import DatasetNotFoundError
from pretrain.data.imagefiles import BadImageError, bad_image_line
from pretrain.engine.checkpoint import CheckpointError

COMMANDS = (
    "all",
    "linear",
    "knn",
    "transfer",
    "limited",
    "ood",
    "openood",
    "kappa",
    "report",
    "compare",
    "table",
)


def _csv(text: str) -> list[str]:
    return [t for t in text.replace(" ", ",").split(",") if t]


def _ints(text: str) -> list[int]:
    try:
        return [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--ckpt",
        action="append",
        required=True,
        help="checkpoint (RUN/checkpoints/last.pt); repeat it or give a quoted glob for several",
    )
    p.add_argument("--data-root", default=None, help="override the run's data.root")
    p.add_argument(
        "--config",
        default=None,
        help="weights made elsewhere (MoCo v1/v2 .pth.tar, torchvision/timm state dict, "
        "solo-learn): the negmine config naming the dataset and eval settings",
    )
    p.add_argument(
        "--set", nargs="*", default=[], metavar="key=value", help="overrides of --config"
    )
    p.add_argument("--batch-size", type=int, default=None, help="extraction batch")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--no-cache", action="store_true", help="do not read or write RUN/features/")
    p.add_argument(
        "--random-init",
        action="store_true",
        help="evaluate the same architecture untrained (the baseline)",
    )
    p.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, cuda:1 (default: $NEGMINE_DEVICE, else cuda if present)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: 1 on a CPU with <= 4 cores, else torch's default)",
    )
    return p


def _linear_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--protocol", choices=sorted(probe.PROTOCOLS), default="lbfgs")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--probe", choices=("features", "images"), default="features")


def _select_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--select-on",
        choices=("test", "val"),
        default="test",
        help="val: choose the hyper-parameters on a stratified held-out part of the training set "
        "and report test accuracy once (default test: report every preset on the test set)",
    )
    p.add_argument("--val-fraction", type=float, default=0.1, help="held-out share per class")


def _ood_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--detectors",
        type=_csv,
        default=None,
        help=f"comma-separated, from {', '.join(detectors.DETECTORS)} (default: all; with "
        f"several checkpoints: {', '.join(detection.AULC_DETECTORS)})",
    )
    p.add_argument("--k", type=int, default=5, help="s_con / s_shift / s_ens neighbours")
    p.add_argument("--crops", type=int, default=10, help="random crops per rotation for s_ens")
    p.add_argument("--crop-seed", type=int, default=0)


def _kappa_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--corruptions-root",
        default=None,
        metavar="PATH",
        help="folder of CIFAR-10-C's (cifar100 runs: CIFAR-100-C's) <corruption>.npy and "
        "labels.npy (default: <data root>/CIFAR-10-C when present, else the corruptions are "
        "computed by linear_eval.inputs.corruptions.corrupt)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m linear_eval",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=DEFAULT_HELP,
    )
    sub = top.add_subparsers(dest="command", required=True, title="subcommands", metavar="COMMAND")
    base = [common()]
    p = sub.add_parser("all", parents=base, help="linear, kNN, limited, one-class, kappa, report")
    p.add_argument("--crops", type=int, default=10)
    p.add_argument("--draws", type=int, default=limited.DRAWS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    _kappa_args(p)
    _linear = sub.add_parser("linear", parents=base, help="linear probe")
    _linear_args(_linear)
    _select_args(_linear)
    p = sub.add_parser("knn", parents=base, help="kNN presets and majority votes")
    p.add_argument("--presets", nargs="+", choices=sorted(knn.PRESETS), default=list(knn.PRESETS))
    _select_args(p)
    p = sub.add_parser("transfer", parents=base, help="linear + kNN on other datasets")
    p.add_argument("--datasets", type=_csv, default=list(transfer_lib.DEFAULT_DATASETS))
    p.add_argument("--protocol", choices=sorted(probe.PROTOCOLS), default="lbfgs")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p = sub.add_parser("limited", parents=base, help="linear probe with k labels per class")
    p.add_argument("--counts", type=_ints, default=list(limited.COUNTS))
    p.add_argument("--draws", type=int, default=limited.DRAWS)
    p.add_argument("--protocol", choices=sorted(probe.PROTOCOLS), default="lbfgs")
    p = sub.add_parser("ood", parents=base, help="one-class or ID-vs-OOD detection; AULC")
    _ood_args(p)
    p.add_argument(
        "--ood-datasets",
        type=_csv,
        default=None,
        help="ID-vs-OOD protocol against these sets (default: one-class protocol)",
    )
    p = sub.add_parser("openood", parents=base, help="OpenOOD v1.5 near/far-OOD benchmark")
    p.add_argument("--benchmark", choices=sorted(openood_data.BENCHMARKS), required=True)
    p.add_argument("--root", required=True, help="OpenOOD's data folder (benchmark_imglist/...)")
    p.add_argument(
        "--detectors",
        type=_csv,
        default=list(fitted.FITTERS),
        help=f"comma-separated, from {', '.join(fitted.FITTERS)} (default: all)",
    )
    p = sub.add_parser("kappa", parents=base, help="kappa vs correctness and corruption severity")
    _kappa_args(p)
    sub.add_parser("report", parents=base, help="figures + report.md from RUN/eval")
    p = sub.add_parser("compare", parents=base, help="checkpoint A vs B, paired bootstrap")
    p.add_argument("--knn-preset", choices=sorted(knn.PRESETS), default="cifar")
    p.add_argument("--k", type=int, default=5, help="s_con neighbours (FIRM: 5; its Table 6: 1)")
    p.add_argument(
        "--protocol",
        choices=sorted(probe.PROTOCOLS),
        default="lbfgs",
        help="the linear probe (named in the JSON and the summary line); the default command's "
        "SGD probe, which table reports as linear_top1, is moco's recipe",
    )
    # listed for --help only: main() hands "table" its runs before this parser sees them
    sub.add_parser("table", help="one table comparing runs (RUN_DIR... --baseline RUN)")
    return top


def _checkpoints(patterns: list[str]) -> list[str]:
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_numbers(args)
    opts = Options(
        data_root=args.data_root,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        cache=not args.no_cache,
        random_init=args.random_init,
        device=args.device,
        config=args.config,
        overrides=tuple(args.set),
    )
    configure_threads(args.threads, args.device)
    paths = _checkpoints(args.ckpt)
    cmd = args.command
    if cmd == "compare":
        if len(paths) != 2:
            raise ValueError(f"compare needs exactly two checkpoints, got {len(paths)}")
        return classification.run_compare(
            Session(paths[0], opts),
            Session(paths[1], opts),
            args.knn_preset,
            args.k,
            args.protocol,
        )
    if cmd == "ood" and len(paths) > 1:
        if args.ood_datasets:
            raise ValueError(
                "AULC over checkpoints uses the one-class protocol: drop --ood-datasets"
            )
        names = args.detectors or list(detection.AULC_DETECTORS)
        if {"s_shift", "s_ens"} & set(names):
            raise ValueError("AULC runs without test-time views: drop s_shift and s_ens")
        return detection.run_aulc([Session(p, opts) for p in paths], names, Settings(k=args.k))
    if len(paths) != 1:
        raise ValueError(f"{cmd} takes one checkpoint, got {len(paths)}")
    sess = Session(paths[0], opts)
    if cmd in ("linear", "knn") and args.select_on == "val":
        return classification.run_selected(sess, cmd, args.val_fraction)
    if cmd == "linear":
        return classification.run_linear(sess, args.protocol, args.seeds, args.probe)
    if cmd == "knn":
        return classification.run_knn(sess, args.presets)
    if cmd == "transfer":
        return classification.run_transfer(sess, args.datasets, args.protocol, args.seeds)
    if cmd == "limited":
        return classification.run_limited(sess, args.counts, args.draws, args.protocol)
    if cmd == "ood":
        settings = Settings(k=args.k, seed=args.crop_seed)
        names = args.detectors or list(detectors.DEFAULT)
        if args.ood_datasets:
            return detection.run_ood_datasets(sess, args.ood_datasets, names, settings, args.crops)
        return detection.run_one_class(sess, names, settings, args.crops)
    if cmd == "openood":
        return openood.run_openood(sess, args.benchmark, args.root, args.detectors)
    if cmd == "kappa":
        return detection.run_kappa(sess, corruptions_root=args.corruptions_root)
    if cmd == "report":
        return document.build(sess)
    return run_all(sess, args)


def run_all(sess: Session, args: argparse.Namespace) -> dict[str, Any]:
    """linear, kNN, limited labels, one-class detection, kappa (with a kappa head), report."""
    timings: dict[str, float] = {}
    if sess.model.has_kappa:  # a bad --corruptions-root fails now, not after the other steps
        detection.corruption_source(sess, root=args.corruptions_root)
    steps = [
        ("linear", lambda: classification.run_linear(sess, "lbfgs", args.seeds)),
        ("knn", lambda: classification.run_knn(sess)),
        ("limited", lambda: classification.run_limited(sess, limited.COUNTS, args.draws)),
        ("oneclass", lambda: detection.run_one_class(sess, crops=args.crops)),
        ("kappa", lambda: detection.run_kappa(sess, corruptions_root=args.corruptions_root)),
        ("report", lambda: document.build(sess)),
    ]
    out: dict[str, Any] = {}
    for name, step in steps:
        if name == "kappa" and not sess.model.has_kappa:
            continue
        start = time.perf_counter()
        out[name] = step()
        timings[name] = round(time.perf_counter() - start, 2)
        print(f"{name}: done in {timings[name]:.1f} s", file=sys.stderr)
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


DEFAULT_HELP = (
    "without a subcommand: python -m linear_eval --ckpt X runs kNN + the SGD linear probe and "
    "prints one JSON line (python -m linear_eval --ckpt X --help for its options)"
)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(parser().format_help())
        return 0
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        near = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        print(
            f"error: unknown subcommand {argv[0]!r}{hint} (choose from {', '.join(COMMANDS)})",
            file=sys.stderr,
        )
        return 2
    if not argv or argv[0] not in COMMANDS:
        return default.main(argv)
    if argv[0] == "table":  # runs, not a checkpoint: its own arguments
        return table.main(argv[1:])
    args = parser().parse_args(argv)
    try:
        result = run(args)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BadImageError as e:  # also when re-raised from a loader worker
        print(f"error: {bad_image_line(e)}; fix or remove the file", file=sys.stderr)
        return 1
    except (DatasetNotFoundError, ValueError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.command == "compare":
        print(summary_line.compare(clean(result)), file=sys.stderr)
    else:
        print(summary_line.line(args.command, clean(result)), file=sys.stderr)
    print(json.dumps(clean(result)))
    return 0
