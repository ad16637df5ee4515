"""Weighted cosine kNN (InstDisc vote) and its presets.

The implementation lives in :mod:`pretrain.knn` (the training monitor uses the same function), so a
monitor number and an evaluation number of the same checkpoint are the same computation.
"""

from __future__ import annotations

import torch

from pretrain.knn import knn_predict, knn_votes

PRESETS = {
    "cifar": {"k": 200, "temperature": 0.1},  # InstDisc / MoCo CIFAR demo / lightly
    "imagenet": {"k": 20, "temperature": 0.07},  # DINO / mmselfsup
}


def topk_accuracy(
    scores: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...] = (1, 5)
) -> dict[int, float]:
    """Percent of rows whose label is among the ``k`` highest scores, for each k (capped at C)."""
    ranked = scores.argsort(dim=1, descending=True)
    hits = ranked == labels.view(-1, 1)
    return {k: 100.0 * hits[:, : min(k, scores.shape[1])].any(1).float().mean().item() for k in ks}


__all__ = ["PRESETS", "knn_predict", "knn_votes", "topk_accuracy"]
