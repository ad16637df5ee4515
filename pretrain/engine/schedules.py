"""Learning-rate schedules as small pure functions of the (fractional) epoch."""

from __future__ import annotations

import math


def learning_rate(
    epoch: float,
    lr: float,
    epochs: int,
    warmup_epochs: float = 0.0,
    schedule: str = "cosine",
    milestones: tuple[int, ...] | list[int] = (),
    per_epoch: bool = False,
) -> float:
    """Linear warm-up from 0 over ``warmup_epochs``, then cosine to 0 or ×0.1 at each milestone.

    With ``per_epoch`` the decay reads the floored epoch, as MoCo's ``adjust_learning_rate`` (set
    once per epoch: ``lr · 0.5 · (1 + cos(π · epoch / epochs))``); the warm-up is always per step.
    """
    if epoch < warmup_epochs:
        return lr * epoch / warmup_epochs
    e = math.floor(epoch) if per_epoch else epoch
    if schedule == "cosine":
        t = (e - warmup_epochs) / max(epochs - warmup_epochs, 1e-12)
        return lr * 0.5 * (1.0 + math.cos(math.pi * t))
    if schedule == "step":
        return lr * 0.1 ** sum(e >= m for m in milestones)
    raise ValueError(f"unknown lr schedule {schedule!r}")
