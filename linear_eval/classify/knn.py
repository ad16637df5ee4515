"""kNN classifiers on frozen features: the weighted cosine vote with its published presets, and the
plain majority vote of SINCERE.

Weighted vote (InstDisc, Wu et al. 2018, https://arxiv.org/abs/1805.01978, eqs. 7-8): the k most
cosine-similar training features vote exp(cos / T) for their class. The implementation lives in
:mod:`pretrain.metrics.knn` (the training monitor uses the same function), so a monitor number and
an evaluation number of the same checkpoint are the same computation.

Presets (k, T):

- ``cifar``: 200, 0.1 (InstDisc; MoCo CIFAR demo; lightly).
- ``imagenet``: 20, 0.07 (DINO ``eval_knn.py``; mmselfsup).
- ``mioc``: 10, 0.1. MiOC (Jain et al. 2025) reports a 10-NN; the temperature is not given there,
  T = 0.1 is our assumption (the InstDisc value).

Majority vote (SINCERE, Feeney & Hughes 2023, https://arxiv.org/abs/2309.14277, 1-NN and 5-NN
accuracy): each of the k most cosine-similar training features gives one vote; a tie between
classes goes to the smallest class index (scikit-learn's ``KNeighborsClassifier`` rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from linear_eval.records import summary
from pretrain.metrics.knn import knn_predict, knn_votes

PRESETS: dict[str, dict[str, Any]] = {
    "cifar": {"k": 200, "temperature": 0.1, "source": "InstDisc / MoCo CIFAR demo"},
    "imagenet": {"k": 20, "temperature": 0.07, "source": "DINO eval_knn.py"},
    "mioc": {
        "k": 10,
        "temperature": 0.1,
        "source": "MiOC (Jain et al. 2025) 10-NN; T = 0.1 is our assumption (not in the paper)",
    },
}
MAJORITY_K = (1, 5)  # SINCERE


def majority_votes(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    k: int,
    num_classes: int,
) -> torch.Tensor:
    """(M, C) vote counts of the k nearest training features by cosine similarity (k capped at
    N): :func:`pretrain.metrics.knn.knn_votes` with one vote per neighbour; ``argmax`` breaks ties
    towards the smallest class index."""
    return knn_votes(train_features, train_labels, test_features, k, None, num_classes)


def evaluate(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    num_classes: int,
    presets: Sequence[str] = tuple(PRESETS),
    extra: dict[str, dict[str, Any]] | None = None,
    majority: Sequence[int] = MAJORITY_K,
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Every requested kNN variant on the same features.

    Args:
        presets: names in :data:`PRESETS`. extra: further ``{name: {"k", "temperature"}}``
            (the run's own ``eval.knn_k`` / ``knn_temperature``). majority: k of majority votes.

    Returns:
        ``{variant: record}`` (``top1`` and, for weighted votes, ``top5`` with bootstrap
        intervals) and ``{variant: (M,) top-1 correctness}``.
    """
    unknown = [p for p in presets if p not in PRESETS]
    if unknown:
        raise ValueError(f"unknown kNN preset(s) {unknown}; choose from {', '.join(PRESETS)}")
    variants = {p: PRESETS[p] for p in presets} | (extra or {})
    records: dict[str, Any] = {}
    correct: dict[str, torch.Tensor] = {}
    for name, spec in variants.items():
        k, t = int(spec["k"]), float(spec["temperature"])
        scores = knn_votes(train_features, train_labels, test_features, k, t, num_classes)
        c1 = summary.topk_correct(scores, test_labels, 1)
        records[name] = {
            "k": k,
            "temperature": t,
            "vote": "weighted exp(cos/T)",
            "source": spec.get("source", ""),
            **summary.accuracy(c1, "top1"),
            **summary.accuracy(summary.topk_correct(scores, test_labels, 5), "top5"),
        }
        correct[name] = c1
    for k in majority:
        votes = majority_votes(train_features, train_labels, test_features, k, num_classes)
        c1 = summary.topk_correct(votes, test_labels, 1)
        name = f"majority{k}"
        records[name] = {"k": k, "vote": "majority (SINCERE)", **summary.accuracy(c1, "top1")}
        correct[name] = c1
    return records, correct


__all__ = ["MAJORITY_K", "PRESETS", "evaluate", "knn_predict", "knn_votes", "majority_votes"]
