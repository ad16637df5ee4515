"""Multi-rank runs of the real CLI (gloo, ranks started by hand with torchrun's variables):
config errors exit 2 on every rank, and at 3 ranks a SIGTERM mid-epoch + resume is bit-identical
to the uninterrupted run (fixed reduction order), with one "checkpoint saved" line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers.ddp import clean_env, free_port
from tests.helpers.paths import ROOT
from tests.helpers.runs import lines, tensors

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)

TINY = [
    "model.width=8",
    "train.batch_size=30",
    "moco.queue_size=60",
    "train.deterministic=true",
    "train.progress_bar=false",
    "train.log_every=1",
    "eval.knn_every=0",
    "data.num_workers=0",
    "train.epochs=1",
    "data.subset=60",  # 60 images of each digit: 600, 20 steps of 30 (the whole set takes 47)
]


def launch(world: int, *args: str) -> list[subprocess.Popen]:
    port = str(free_port())
    procs = []
    for r in range(world):
        env = clean_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world))
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [sys.executable, "-m", "pretrain", "--cfg", "digits_moco.yaml", *args]
        procs.append(
            subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=ROOT,
                start_new_session=True,
            )  # fmt: skip
        )
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 300) -> list[tuple[int, str, str]]:
    out = []
    deadline = time.time() + timeout
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                os.killpg(q.pid, signal.SIGKILL)
            raise
        out.append((p.returncode, o, e))
    return out


def test_batch_not_divisible_by_ranks_is_a_config_error_on_every_rank(tmp_path):
    results = finish(launch(2, f"out_dir={tmp_path}", *TINY, "train.batch_size=15"), 120)
    for status, _, err in results:
        assert status == 2, err
        assert "train.batch_size" in err and "2 ranks" in err and "Traceback" not in err


def test_bn_splits_checked_against_the_per_rank_batch_on_every_rank(tmp_path):
    args = [f"out_dir={tmp_path}", *TINY, "train.batch_size=48", "model.bn_splits=16"]
    for status, _, err in finish(launch(2, *args), 120):
        assert status == 2 and "model.bn_splits" in err and "Traceback" not in err, err


def test_three_ranks_sigterm_mid_epoch_then_resume_is_bit_identical(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    for status, _, err in finish(launch(3, f"out_dir={full}", *TINY)):
        assert status == 0, err
    steps = 600 // 30

    procs = launch(3, f"out_dir={cut}", *TINY)
    deadline = time.time() + 240
    while time.time() < deadline:  # SIGTERM to rank 0 only, once a few steps are logged
        m = cut / "metrics.jsonl"
        if m.exists() and len(lines(cut, "step")) >= 5:
            break
        assert all(p.poll() is None for p in procs), finish(procs)
        time.sleep(0.05)
    procs[0].send_signal(signal.SIGTERM)
    results = finish(procs)
    assert [r[0] for r in results] == [0, 0, 0], [r[2] for r in results]
    said = [out.count("SIGTERM: checkpoint saved") for _, out, _ in results]
    assert said == [1, 0, 0]  # rank 0 only
    mid = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    assert 0 < mid["step_in_epoch"] < steps and mid["world_size"] == 3

    for status, _, err in finish(launch(3, f"out_dir={cut}", *TINY)):
        assert status == 0, err
    a = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    ta = tensors({k: a[k] for k in ("model", "queue", "optimizer", "epoch_stats")})
    tb = tensors({k: b[k] for k in ("model", "queue", "optimizer", "epoch_stats")})
    assert ta.keys() == tb.keys() and len(ta) > 50
    differ = [k for k in ta if not torch.equal(ta[k], tb[k])]
    assert differ == [], differ[:5]  # bit-identical, not just close
