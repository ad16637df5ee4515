"""The first three training losses of every shipped config, at a shared tiny size.

Each config runs in one CPU process on the embedded digits with the same shrink: resnet_small
width 8, batch 16, K 64, one loader process, fp32, one thread, the strategy past its warm-up
(epoch 50, so MiOC fits its OC-SVM and MoCHi mixes). What stays is each config's loss, strategy
and their settings, the head, the temperature and momentum, split BN, the kappa head, the symmetric
layout: the code paths a refactor must not change.

    python tests/helpers/pinned_losses.py --write  # re-record them all; say why in the commit
    python tests/helpers/pinned_losses.py --write --only digits_moco.yaml  # re-record some only
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]  # the repository root
sys.path.insert(0, str(ROOT))

from negmine_core.step import Batch  # noqa: E402
from pretrain import config  # noqa: E402
from pretrain.engine import loop  # noqa: E402

PINNED = Path(__file__).with_name("pinned_losses.json")
SHRINK = [
    "data.name=digits",
    "data.image_size=16",
    "data.eval_resize=16",
    "data.num_workers=0",
    "data.subset=0",
    "data.train_split=train",
    "model.arch=resnet_small",
    "model.width=8",
    "train.batch_size=16",
    "moco.queue_size=64",
    'train.amp="off"',
    "train.compile=false",
    "train.threads=1",
    "train.progress_bar=false",
    "eval.online_probe=false",
]
EPOCH = 50.0  # past every strategy's warm-up


def shipped() -> list[str]:
    return sorted(p.name for p in config.CONFIG_DIR.glob("*.yaml"))


def first_losses(name: str, steps: int = 3) -> list[float]:
    """The losses ``loop.train_step`` returns on the first ``steps`` batches of ``name``."""
    with tempfile.TemporaryDirectory() as out:
        cfg = config.load(name, SHRINK + [f"out_dir={out}"])
        if cfg.model.bn_splits > 1:
            cfg.model.bn_splits = 2  # split BN kept, at the tiny batch
        if "num_hard" in cfg.negatives.kwargs:  # MoCHi's hard set must fit the tiny queue
            cfg.negatives.kwargs["num_hard"] = min(cfg.negatives.kwargs["num_hard"], 32)
        run = loop.setup(cfg)
        run.moco.train()
        losses = []
        for i, batch in enumerate(run.data.train_loader):
            if i == steps:
                break
            x1, x2, y, _, *rows = batch
            loss = loop.train_step(run, Batch.make(x1, x2, y, rows), EPOCH)
            losses.append(float(loss.detach()))
        return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"re-record {PINNED.name}")
    parser.add_argument("--only", nargs="+", metavar="CFG", help="just these configs")
    args = parser.parse_args()
    names = shipped()
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            parser.error(f"not shipped configs: {', '.join(unknown)}")
        names = args.only
    torch.set_num_threads(1)
    got = {name: first_losses(name) for name in names}
    for name, losses in got.items():
        print(name, losses)
    if args.write:
        if args.only:
            got = {**json.loads(PINNED.read_text()), **got}
        PINNED.write_text(json.dumps(dict(sorted(got.items())), indent=1) + "\n")
        print(f"wrote {PINNED}")


if __name__ == "__main__":
    main()
