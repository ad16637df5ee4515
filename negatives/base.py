"""The interface every negative strategy implements: two hooks the trainer calls each step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class ExtraNegatives:
    """Negatives a strategy adds for one step (unit norm, detached).

    Attributes:
        shared: (M, D) appended after the queue for every query, or None.
        per_query: (N, S, D) private to each query, or None.
    """

    shared: torch.Tensor | None = None
    per_query: torch.Tensor | None = None


class NegativeStrategy(nn.Module):
    """Base class: identity on the batch and no extra negatives.

    State that must survive a resume (refit counters, cached support vectors) lives in registered
    buffers, so it travels in ``state_dict`` and follows ``.to(device)``. The trainer never looks
    inside a strategy: it calls :meth:`transform_batch` before the forward passes and
    :meth:`negatives` between the key forward and the loss.
    """

    def transform_batch(
        self, x1: torch.Tensor, x2: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Data-level negatives (e.g. rotated or pasted outliers); identity by default."""
        return x1, x2, labels

    def negatives(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        queue: torch.Tensor,
        queue_labels: torch.Tensor,
        epoch: float,
    ) -> ExtraNegatives:
        """Extra negatives for this step.

        Args:
            q: detached queries (N, D), unit norm.
            k: keys (N, D), unit norm (this rank's; gather if the method needs the global batch).
            queue: the queue before this step's enqueue (K, D), read-only.
            queue_labels: labels beside the queue keys (K,), -1 where unknown.
            epoch: fractional epoch (warm-up schedules).
        """
        return ExtraNegatives()
