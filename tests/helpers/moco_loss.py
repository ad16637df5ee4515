"""The trainer's InfoNCE (``loss.name: infonce``) on plain tensors, for tests."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pretrain.losses import check_temperature, info_nce, moco_logits


def InfoNCE(temperature: float) -> Callable[..., torch.Tensor]:  # noqa: N802  (reads as the loss)
    """(q, k, queue, shared=None, per_query=None) -> MoCo's InfoNCE at ``temperature``."""
    check_temperature(temperature)
    return lambda q, k, queue, shared=None, per_query=None: info_nce(
        moco_logits(q, k, queue, temperature, shared, per_query)
    )
