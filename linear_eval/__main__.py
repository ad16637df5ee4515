"""Evaluate a pretraining checkpoint: weighted kNN and a linear probe on the frozen backbone.

    python -m linear_eval --ckpt runs/digits_moco/checkpoints/last.pt
    python -m linear_eval --ckpt RUN/checkpoints/last.pt --probe images --knn-preset imagenet
    python -m linear_eval --ckpt RUN/checkpoints/last.pt --random-init   # the untrained baseline

Prints a summary, writes RUN/eval/linear_eval[_random].json, and ends with one JSON line holding
``knn_top1``, ``knn_top5``, ``linear_top1``, ``linear_top5`` (percent) and the protocol used.
Exit status: 0 done, 1 unusable checkpoint, 2 bad arguments or missing dataset.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from linear_eval import features as feats
from linear_eval import probe
from linear_eval.knn import PRESETS, knn_votes, topk_accuracy
from pretrain import checkpoint, data, datasets
from pretrain.datasets import DatasetNotFoundError


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m linear_eval", description=__doc__.split("\n")[0])
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
    p.add_argument("--milestones", type=int, nargs="*", default=[60, 80])
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
    return p.parse_args(argv)


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bb = feats.load_backbone(args.ckpt, random_init=args.random_init)
    run_dir = Path(args.ckpt).resolve().parent.parent
    cache = None if args.no_cache else run_dir / "features"
    get = lambda split: feats.features(  # noqa: E731
        bb, split, device, cache, num_workers=args.num_workers, data_root=args.data_root
    )
    train_f, train_y = get("train")
    test_f, test_y = get("test")
    num_classes = int(max(train_y.max(), test_y.max())) + 1

    preset = (
        PRESETS[args.knn_preset]
        if args.knn_preset
        else {"k": bb.cfg.eval.knn_k, "temperature": bb.cfg.eval.knn_temperature}
    )
    k = args.k or preset["k"]
    t = args.temperature or preset["temperature"]
    knn_acc = topk_accuracy(knn_votes(train_f, train_y, test_f, k, t, num_classes), test_y)

    common = dict(
        epochs=args.epochs,
        lr=args.lr,
        milestones=args.milestones,
        weight_decay=args.weight_decay,
        seed=args.seed,
    )
    if args.probe == "features":
        fc = probe.train_on_features(
            train_f.to(device),
            train_y.to(device),
            num_classes,
            batch_size=args.batch_size,
            **common,
        )
    else:
        d = bb.cfg.data
        aug = data.train_transform(
            d.image_size, d.crop_scale, 0.0, 0.0, 0.0, 0.0, d.hflip_prob, 0.0, 0.0, d.mean, d.std
        )
        base = datasets.build(d.name, args.data_root or d.root, "train")
        loader = torch.utils.data.DataLoader(
            data.Transformed(base, aug),
            args.batch_size,
            shuffle=True,
            num_workers=args.num_workers,
            generator=torch.Generator().manual_seed(args.seed),
        )
        fc = probe.train_on_images(
            bb.net.to(device), loader, num_classes, train_f.shape[1], device, **common
        )
    lin_acc = topk_accuracy(probe.predict(fc, test_f.to(device)).cpu(), test_y)
    return {
        "checkpoint": str(args.ckpt),
        "weights": "random" if args.random_init else "pretrained",
        "epoch": bb.epoch,
        "global_step": bb.global_step,
        "dataset": bb.cfg.data.name,
        "features": "backbone (pooled, penultimate)",
        "knn_top1": knn_acc[1],
        "knn_top5": knn_acc[5],
        "knn": {"k": k, "temperature": t, "distance": "cosine", "weighting": "exp(sim/T)"},
        "linear_top1": lin_acc[1],
        "linear_top5": lin_acc[5],
        "linear": {"mode": args.probe, "batch_size": args.batch_size, "momentum": 0.9, **common},
        "train_size": int(train_y.numel()),
        "test_size": int(test_y.numel()),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        result = evaluate(args)
    except checkpoint.CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except DatasetNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = (
        Path(args.out)
        if args.out
        else (
            Path(args.ckpt).resolve().parent.parent
            / "eval"
            / f"linear_eval{'_random' if args.random_init else ''}.json"
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"kNN (k={result['knn']['k']}, T={result['knn']['temperature']}): "
        f"top-1 {result['knn_top1']:.2f}  top-5 {result['knn_top5']:.2f}",
        file=sys.stderr,
    )
    print(
        f"linear ({args.probe}): top-1 {result['linear_top1']:.2f}  "
        f"top-5 {result['linear_top5']:.2f}   written to {out}",
        file=sys.stderr,
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
