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
import sys
from collections.abc import Callable

import yaml

from linear_eval.classify import knn, limited, probe
from linear_eval.classify import transfer as transfer_lib
from linear_eval.cli import commands, default, table
from linear_eval.cli.commands import on_one
from linear_eval.detect import detectors, fitted
from linear_eval.detect import evaluate as detection
from linear_eval.inputs import guards
from linear_eval.inputs import openood as openood_data
from pretrain.data.datasets import DatasetNotFoundError
from pretrain.data.imagefiles import BadImageError, bad_image_line
from pretrain.runtime.checkpoint_io import CheckpointError

#: The command that runs when none is named: ``python -m linear_eval --ckpt X``.
DEFAULT = "default"
DEFAULT_HELP = (
    "without a subcommand: python -m linear_eval --ckpt X runs kNN + the SGD linear probe and "
    "prints one JSON line (python -m linear_eval --ckpt X --help for its options)"
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
    """The flags every checkpoint subcommand shares."""
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
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="feature extraction batch (default: the run's eval.batch_size)",
    )
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


def _classification_commands(sub: argparse._SubParsersAction, base: list) -> None:
    p = sub.add_parser("linear", parents=base, help="linear probe")
    _linear_args(p)
    _select_args(p)
    p.set_defaults(run=on_one(commands.linear))
    p = sub.add_parser("knn", parents=base, help="kNN presets and majority votes")
    p.add_argument("--presets", nargs="+", choices=sorted(knn.PRESETS), default=list(knn.PRESETS))
    _select_args(p)
    p.set_defaults(run=on_one(commands.knn))
    p = sub.add_parser("transfer", parents=base, help="linear + kNN on other datasets")
    p.add_argument("--datasets", type=_csv, default=list(transfer_lib.DEFAULT_DATASETS))
    p.add_argument("--protocol", choices=sorted(probe.PROTOCOLS), default="lbfgs")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.set_defaults(run=on_one(commands.transfer))
    p = sub.add_parser("limited", parents=base, help="linear probe with k labels per class")
    p.add_argument("--counts", type=_ints, default=list(limited.COUNTS))
    p.add_argument("--draws", type=int, default=limited.DRAWS)
    p.add_argument("--protocol", choices=sorted(probe.PROTOCOLS), default="lbfgs")
    p.set_defaults(run=on_one(commands.limited_labels))


def _detection_commands(sub: argparse._SubParsersAction, base: list) -> None:
    p = sub.add_parser("ood", parents=base, help="one-class or ID-vs-OOD detection; AULC")
    _ood_args(p)
    p.add_argument(
        "--ood-datasets",
        type=_csv,
        default=None,
        help="ID-vs-OOD protocol against these sets (default: one-class protocol)",
    )
    p.set_defaults(run=commands.ood_command)
    p = sub.add_parser("openood", parents=base, help="OpenOOD v1.5 near/far-OOD benchmark")
    p.add_argument("--benchmark", choices=sorted(openood_data.BENCHMARKS), required=True)
    p.add_argument("--root", required=True, help="OpenOOD's data folder (benchmark_imglist/...)")
    p.add_argument(
        "--detectors",
        type=_csv,
        default=list(fitted.FITTERS),
        help=f"comma-separated, from {', '.join(fitted.FITTERS)} (default: all)",
    )
    p.set_defaults(run=on_one(commands.open_ood))
    p = sub.add_parser("kappa", parents=base, help="kappa vs correctness and corruption severity")
    _kappa_args(p)
    p.set_defaults(run=on_one(commands.kappa))


def _summary_commands(sub: argparse._SubParsersAction, base: list) -> None:
    p = sub.add_parser("all", parents=base, help="linear, kNN, limited, one-class, kappa, report")
    p.add_argument("--crops", type=int, default=10)
    p.add_argument("--draws", type=int, default=limited.DRAWS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    _kappa_args(p)
    p.set_defaults(run=on_one(commands.run_all))
    p = sub.add_parser("report", parents=base, help="figures + report.md from RUN/eval")
    p.set_defaults(run=on_one(commands.report))
    p = sub.add_parser("compare", parents=base, help="checkpoint A vs B, paired bootstrap")
    p.add_argument("--knn-preset", choices=sorted(knn.PRESETS), default="cifar")
    p.add_argument("--k", type=int, default=5, help="s_con neighbours (FIRM: 5; its Table 6: 1)")
    p.add_argument(
        "--protocol",
        choices=sorted(probe.PROTOCOLS),
        default=probe.DEFAULT_COMMAND,
        help="the linear probe (named in the header, the JSON and the summary line; default: "
        "the default command's SGD probe, moco's recipe, the one table reports as linear_top1)",
    )
    p.set_defaults(run=commands.compare)
    p = sub.add_parser("table", help="one table comparing runs (RUN_DIR... --baseline RUN)")
    table.add_arguments(p)
    p.set_defaults(run=table.run)


def parser() -> argparse.ArgumentParser:
    """``python -m linear_eval``: one subparser per command, each naming its ``run``."""
    top = argparse.ArgumentParser(
        prog="python -m linear_eval",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=DEFAULT_HELP,
    )
    sub = top.add_subparsers(dest="command", required=True, title="subcommands", metavar="COMMAND")
    base = [common()]  # every command on checkpoints, the default one included: one meaning each
    p = sub.add_parser(
        DEFAULT,
        parents=base,
        prog="python -m linear_eval [default]",
        help="kNN + the SGD linear probe, one JSON line (no name needed)",
    )
    default.add_arguments(p)
    p.set_defaults(run=default.run)
    _classification_commands(sub, base)
    _detection_commands(sub, base)
    _summary_commands(sub, base)
    return top


def commands_of(top: argparse.ArgumentParser) -> list[str]:
    """The subcommands' names, in the order ``--help`` lists them."""
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


COMMANDS = tuple(commands_of(parser()))


def _unknown(name: str) -> int:
    near = difflib.get_close_matches(name, COMMANDS, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    print(
        f"error: unknown subcommand {name!r}{hint} (choose from {', '.join(COMMANDS)})",
        file=sys.stderr,
    )
    return 2


def check_common(args: argparse.Namespace) -> None:
    """The flags every command may share, checked before any work: the seeds, ``--set`` only
    with ``--config``, and a ``--device`` this host has."""
    guards.check_seeds(args)
    guards.check_set_needs_config(getattr(args, "set", []), getattr(args, "config", None))
    guards.check_device(getattr(args, "device", None))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return _unknown(argv[0])
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = [DEFAULT, *argv]  # python -m linear_eval --ckpt X: the default command
    if argv[0] in ("-h", "--help"):
        print(parser().format_help())
        return 0
    args = parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        check_common(args)
        return run(args)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BadImageError as e:  # also when re-raised from a loader worker
        print(f"error: {bad_image_line(e)}; fix or remove the file", file=sys.stderr)
        return 1
    except (DatasetNotFoundError, ValueError, OSError, yaml.YAMLError) as e:  # ConfigError, usage
        print(f"error: {e}", file=sys.stderr)
        return 2
