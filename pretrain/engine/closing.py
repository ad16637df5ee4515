"""The last line of a run: its final metrics and where its checkpoint and metrics are, when it
finishes and when its command is run again after it finished (nothing is trained or rewritten).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# the epoch record's numbers that a closing line shows (the evaluation's, and the epoch's loss)
SHOWN = ("loss", "knn_top1", "oc_auroc", "online_train_top1", "online_test_top1")


def last_epoch(run_dir: Path) -> dict[str, Any] | None:
    """The last ``kind: epoch`` line of ``RUN/metrics.jsonl`` (None if there is none)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    last = None
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a hard kill
            continue
        if record.get("kind") == "epoch":
            last = record
    return last


def metrics(record: dict[str, Any] | None) -> str:
    """``epoch N: loss=... knn_top1=...`` of an epoch record ('no epoch logged' without one)."""
    if record is None:
        return "no epoch logged"
    shown = [k for k in record if k in SHOWN or k.startswith("knn_top1_")]
    values = " ".join(
        f"{k}={record[k]:.4g}" if isinstance(record[k], float) else f"{k}={record[k]}"
        for k in shown
    )
    return f"epoch {record.get('epoch')}: {values}"


def finished(run_dir: Path, epochs: int) -> str:
    """The closing line of a run that trained to its end."""
    ckpt = run_dir / "checkpoints" / "last.pt"
    return (
        f"run complete ({epochs} epoch{'s' * (epochs != 1)}): {metrics(last_epoch(run_dir))}; "
        f"checkpoint {ckpt}; metrics {run_dir / 'metrics.jsonl'}"
    )


def already_complete(run_dir: Path, epochs: int, fixed_length: bool = False) -> str:
    """The line of a command run again on a run that has finished: nothing is done.
    ``fixed_length``: its schedule depends on ``train.epochs``, which a resume cannot raise
    (:func:`pretrain.engine.resume.check_same_schedule`)."""
    ckpt = run_dir / "checkpoints" / "last.pt"
    go_on = (
        "Its schedule has ended (train.epochs cannot be raised on resume: a longer run is a new "
        "out_dir)"
        if fixed_length
        else "Raise train.epochs to train on"
    )
    return (
        f"{run_dir} is complete ({epochs} of {epochs} epochs trained); nothing to do. "
        f"{metrics(last_epoch(run_dir))}; checkpoint {ckpt}; metrics {run_dir / 'metrics.jsonl'}. "
        f"{go_on}, or evaluate it: python -m linear_eval --ckpt {ckpt}"
    )
