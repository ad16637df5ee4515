"""Tiny pretraining runs of the digits recipe, shared by the trainer's tests: ``pretrain`` (the
CLI, in this process or as a process), the records they write (``lines``) and the tensors of a
checkpoint (``tensors``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from tests.helpers import inproc
from tests.helpers.paths import ROOT

TINY = [
    "model.width=8",
    "model.bn_splits=2",
    "train.batch_size=32",
    "moco.queue_size=64",
    "train.deterministic=true",
    "train.progress_bar=false",
    "train.log_every=1",
    "eval.knn_every=1",
    "data.num_workers=0",
]


def pretrain(
    out: Path, *extra: str, wait: bool = True, process: bool = False
) -> subprocess.Popen | subprocess.CompletedProcess:
    """``python -m pretrain --cfg digits_moco.yaml out_dir=OUT TINY EXTRA``: run to its end in this
    process (``tests/helpers/inproc.py``: what a CLI run sets process-wide is put back), or as a
    process of its own: to its end (``process=True``) or started (``wait=False``) for a test that
    signals or watches it."""
    args = ["--cfg", "digits_moco.yaml", f"out_dir={out}", *TINY, *extra]
    if wait and not process:
        return inproc.pretrain(*args)
    cmd = [sys.executable, "-m", "pretrain", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)  # fmt: skip


def lines(run: Path, kind: str) -> list[dict]:
    records = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == kind]


def tensors(obj: object, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in a nested checkpoint, keyed by its path."""
    out = {}
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(tensors(v, f"{prefix}/{k}"))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(tensors(v, f"{prefix}/{i}"))
    return out


# the digits recipe's tiny model on data.subset=4 (40 training images): a run of seconds
SUBSET_RUN = ["model.width=8", "data.subset=4", "train.batch_size=8", "moco.queue_size=32",
         "eval.knn_k=5", "train.progress_bar=false", "data.num_workers=0"]  # fmt: skip


def first_losses(run: Any, n: int) -> list[float]:
    """The losses of ``run``'s first ``n`` training steps, epoch 0, in train mode (the trainer's
    own ``train_step`` on its own loader's batches)."""
    from negmine_core.step import Batch
    from pretrain.engine import loop

    run.data.sampler.set_epoch(0, 0)
    run.moco.train()
    losses = []
    for i, (x1, x2, y, _, *rows) in enumerate(run.data.train_loader):
        if i == n:
            break
        losses.append(loop.train_step(run, Batch.make(x1, x2, y, rows), 0.0).item())
    return losses
