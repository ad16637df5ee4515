"""A run of a baseline with state or randomness of its own (AdCo's bank and its momentum, i-Mix's
draws from the checkpointed RNG, FNC's support crops) stopped at ``train.max_steps`` and resumed
equals the uninterrupted run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import inproc
from tests.helpers.paths import ROOT

TINY = ["model.width=8", "model.bn_splits=2", "train.batch_size=32", "moco.queue_size=64",
        "train.deterministic=true", "train.progress_bar=false", "eval.knn_every=0",
        "data.num_workers=0", "train.epochs=1"]  # fmt: skip


def pretrain(cfg: str, out: Path, *extra: str, process: bool = False) -> None:
    """A run to its end: in this process (``tests/helpers/inproc.py``), or in a fresh one
    (``process``)."""
    args = ["--cfg", cfg, f"out_dir={out}", *TINY, *extra]
    if process:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, "-m", "pretrain", *args], capture_output=True,
                              text=True, timeout=300, env=env, cwd=ROOT)  # fmt: skip
    else:
        done = inproc.pretrain(*args)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("cfg", "extra"),
    [
        ("digits_adco.yaml", ["negatives.kwargs.bank_size=80"]),
        pytest.param(
            "digits_imix.yaml", [], marks=pytest.mark.slow
        ),  # RNG replay: tested generally
        ("digits_fnc.yaml", ["data.support_views=2"]),
    ],
)
def test_stop_and_resume_equals_uninterrupted(tmp_path, cfg, extra):
    full, cut = tmp_path / "full", tmp_path / "cut"
    pretrain(cfg, full, *extra, "train.max_steps=4")
    pretrain(cfg, cut, *extra, "train.max_steps=2")
    pretrain(cfg, cut, *extra, "train.max_steps=4", process=True)  # all it has is the checkpoint
    a = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    assert a["global_step"] == b["global_step"] == 4
    for part in ("model", "strategy", "queue"):
        assert a[part].keys() == b[part].keys()
        for name, value in a[part].items():
            if isinstance(value, torch.Tensor):
                assert torch.allclose(value.double(), b[part][name].double(), atol=1e-6), name
    if cfg == "digits_adco.yaml":
        assert {"W", "v", "_extra_state"} <= set(a["strategy"])
        assert a["strategy"]["_extra_state"] == b["strategy"]["_extra_state"] == {"filled": 80}
