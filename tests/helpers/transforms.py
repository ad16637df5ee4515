"""A strategy's data-level transform on plain tensors, for the tests of the negatives."""

from __future__ import annotations

from typing import Any

import torch

from negmine_core.step import Batch


def applied(
    strategy: Any, x1: torch.Tensor, x2: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``strategy.transform_batch`` on a batch of these views and labels, as a tuple."""
    out = strategy.transform_batch(Batch(x1=x1, x2=x2, y=y))
    return out.x1, out.x2, out.y
