"""A run folder as ``python -m linear_eval`` leaves it (its config and evaluation records), for
the ``table`` command's tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

N_TEST = 50


def make_run(root: Path, name: str, *, loss: str, seed: int, correct: np.ndarray,
             steps: int = 10, total: int = 10, evaluated: bool = True) -> Path:  # fmt: skip
    run = root / name
    (run / "eval").mkdir(parents=True)
    cfg = {"out_dir": str(run), "seed": seed, "loss": {"name": loss, "kwargs": {}},
           "train": {"epochs": 1, "threads": 1, "max_steps": 0}}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "derived.yaml").write_text(yaml.safe_dump({"total_steps": total}))
    lines = [{"kind": "step", "global_step": s, "epoch": s / 10, "loss": 1.0,
              "loss_false_negative_fraction": 0.1 * seed} for s in range(1, steps + 1)]  # fmt: skip
    if steps == total:
        lines.append({"kind": "epoch", "epoch": 1, "global_step": steps, "loss": 1.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if evaluated:
        acc = 100.0 * correct.mean()
        bits = "".join("1" if c else "0" for c in correct)
        data = {"epoch": 1, "knn_top1": acc, "linear_top1": acc,
                "per_sample": {"knn_top1": bits, "linear_top1": bits}}  # fmt: skip
        (run / "eval" / "linear_eval.json").write_text(json.dumps(data))
    return run
