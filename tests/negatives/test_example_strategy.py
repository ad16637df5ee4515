"""Adding a strategy is one file (tests/helpers/example_strategy.py) plus one import: the config
accepts its name and checks its kwargs, and the trainer runs it, with no other edit.
In a subprocess, so the example never joins this process's registry (the contract tests and the
sync table iterate over every registered strategy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT

SCRIPT = """
import sys
import tests.helpers.example_strategy  # the one import line
from pretrain import config
from pretrain.engine import loop
cfg = config.load("digits_moco.yaml", sys.argv[1:])
sys.exit(loop.main(cfg))
"""


def run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    args = ["negatives.name=batch_keys", f"out_dir={tmp_path / 'run'}", "model.width=8",
            "train.max_steps=3", "train.log_every=1", "eval.knn_every=0",
            "train.progress_bar=false", *overrides]  # fmt: skip
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_the_example_strategy_trains_with_no_other_edit(tmp_path):
    done = run(tmp_path, "negatives.kwargs.weight=2.0")
    assert done.returncode == 0, done.stderr
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().split(
        "\n") if '"kind": "step"' in line]  # fmt: skip
    assert len(steps) == 3 and all(s["loss"] > 0 for s in steps)


def test_its_kwargs_are_checked_by_the_config(tmp_path):
    done = run(tmp_path, "negatives.kwargs.wieght=2.0")
    assert done.returncode != 0
    assert "no argument 'wieght' (did you mean 'weight'?)" in done.stderr
