"""Flatten a training checkpoint's tensors for run-vs-run comparisons in tests."""

from __future__ import annotations

import torch


def flat(state: dict) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint's model, queue and optimizer, keyed by its path."""
    out = {}
    for part in ("model", "queue", "optimizer"):
        stack = [(part, state[part])]
        while stack:
            key, v = stack.pop()
            if isinstance(v, torch.Tensor):
                out[key] = v
            elif isinstance(v, dict):
                stack += [(f"{key}/{k}", x) for k, x in v.items()]
            elif isinstance(v, (list, tuple)):
                stack += [(f"{key}/{i}", x) for i, x in enumerate(v)]
    return out
