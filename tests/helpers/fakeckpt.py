"""A tiny negmine checkpoint written the way pretraining writes one, for the evaluation tests
(``from fakeckpt import make_checkpoint``, as they import ``fakedata``)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from pretrain import build, config
from pretrain.runtime import checkpoint_io

TINY = [
    "model.width=8",
    "data.num_workers=0",
    "eval.batch_size=512",
    "train.batch_size=32",
    "moco.queue_size=64",
]


def make_checkpoint(
    run: Path, *overrides: str, seed: int = 0, global_step: int = 10, name: str = "last.pt"
) -> Path:
    """A negmine checkpoint of a tiny digits model with random weights and non-trivial BatchNorm
    statistics (so an accidental BN update is visible), plus a short metrics.jsonl."""
    cfg = config.load("digits_moco.yaml", [f"out_dir={run}", f"seed={seed}", *TINY, *overrides])
    torch.manual_seed(seed)
    model = build.model(cfg)
    state = model.state_dict()
    for k, v in state.items():
        if k.endswith("running_mean"):
            v.copy_(torch.randn_like(v) * 0.1)
        elif k.endswith("running_var"):
            v.copy_(torch.rand_like(v) + 0.5)
    path = run / "checkpoints" / name
    checkpoint_io.save(
        {
            "format": checkpoint_io.FORMAT,
            "epoch": global_step // 5,
            "step_in_epoch": 0,
            "global_step": global_step,
            "config": config.to_dict(cfg),
            "model": state,
            "optimizer": {},
            "rng": {},
        },
        path,
    )
    records = [
        {"kind": "step", "global_step": 1, "epoch": 0.5, "loss": 5.0},
        {"kind": "epoch", "global_step": 2, "epoch": 1, "loss": 4.5, "knn_top1": 40.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
