"""The step records' throughput counts the device's time, not only the host's.

A captured (``train.cuda_graphs``) or any asynchronous step returns before the device has run
it; the loss's ``.item()`` at a log step is where the host waits. A step record's
``images_per_s`` and ``step_time_s`` are of the interval between two such waits, so they are the
throughput (docs/performance.md#metric-definitions). The device is stood in for here by a loss
whose ``.item()`` takes a known time, as a queued step's would.
"""

from __future__ import annotations

import time

import torch

from pretrain.engine import loop
from tests.helpers import runs

WAIT_S = 0.4  # what each log step's .item() waits, as on a device still running the steps


class QueuedLoss(torch.Tensor):
    """A loss whose value is ready ``WAIT_S`` after it is asked for."""

    def item(self) -> float:  # type: ignore[override]
        time.sleep(WAIT_S)
        return super().item()


def test_a_log_steps_time_includes_the_wait_for_the_devices_steps(tmp_path, monkeypatch):
    step = loop.train_step

    def queued(*args, **kwargs):
        return step(*args, **kwargs).as_subclass(QueuedLoss)

    monkeypatch.setattr(loop, "train_step", queued)
    out = runs.pretrain(tmp_path, "train.epochs=1", "train.max_steps=3", "eval.knn_every=0")
    assert out.returncode == 0, out.stderr
    records = runs.lines(tmp_path, "step")
    assert len(records) == 3
    for r in records:
        # the host's own step on these sizes is well under WAIT_S; the interval holds the wait
        assert r["step_time_s"] >= WAIT_S, r
        assert r["images_per_s"] <= 32 / WAIT_S, r
