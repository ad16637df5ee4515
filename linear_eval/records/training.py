"""The numbers of a pretraining run's ``metrics.jsonl``: its step and epoch records, and the
learning-curve summary (final loss, best and last kNN top-1). ``linear_eval.report.figures``
draws the curves."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def log_lines(log: Path) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl`` in file order (none when absent); a line cut by a hard
    kill is skipped, as the trainer skips it on a resume."""
    records = []
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(r, dict):
            records.append(r)
    return records


def read_metrics(metrics_path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``, last one kept per (kind, global_step); a line cut by a
    hard kill is skipped. Raises ValueError if the file is missing or holds no records."""
    p = Path(metrics_path)
    if not p.is_file():
        raise ValueError(f"{p} does not exist; pass RUN/metrics.jsonl of a pretraining run")
    records: dict[tuple[str, int], dict[str, Any]] = {}
    for r in log_lines(p):
        if r.get("kind") in ("step", "epoch") and "global_step" in r:
            records[(r["kind"], r["global_step"])] = r
    if not records:
        raise ValueError(f"{p} has no step or epoch records; has the run logged a step yet?")
    return sorted(records.values(), key=lambda r: (r["global_step"], r["kind"] == "epoch"))


def knn_points(epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The epoch records with a finite kNN top-1."""
    knn = [r for r in epochs if isinstance(r.get("knn_top1"), (int, float))]
    return [r for r in knn if math.isfinite(r["knn_top1"])]


def curve_summary(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """``final_loss`` is the last epoch mean (the last step loss if no epoch finished); the best
    and last kNN top-1 with their epochs; the numbers of logged steps and epochs."""
    steps = [r for r in recs if r["kind"] == "step"]
    epochs = [r for r in recs if r["kind"] == "epoch"]
    knn = knn_points(epochs)
    best = max(knn, key=lambda r: r["knn_top1"], default=None)
    out: dict[str, Any] = {
        "final_step_loss": steps[-1]["loss"] if steps else None,
        "final_epoch_loss": epochs[-1]["loss"] if epochs else None,
        "best_knn_top1": best["knn_top1"] if best else None,
        "best_knn_epoch": best["epoch"] if best else None,
        "last_knn_top1": knn[-1]["knn_top1"] if knn else None,
        "last_knn_epoch": knn[-1]["epoch"] if knn else None,
        "num_steps_logged": len(steps),
        "num_epochs": len(epochs),
    }
    out["final_loss"] = out["final_epoch_loss"] if epochs else out["final_step_loss"]
    return out
