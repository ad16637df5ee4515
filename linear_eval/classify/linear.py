"""The linear evaluation: one probe recipe repeated over seeds, summarised with mean, standard
deviation and a bootstrap 95% interval (:mod:`linear_eval.records.summary`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from linear_eval.classify import probe
from linear_eval.records import summary


def evaluate(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    num_classes: int,
    recipe: probe.Protocol,
    seeds: Sequence[int] = (0,),
) -> tuple[dict[str, Any], torch.Tensor]:
    """Train ``recipe`` once per seed on (N, F) features and test on (M, F).

    Returns:
        the record (``top1``, ``top5`` in percent with ``_std``, ``_ci``, ``_per_run``; the
        protocol; per-seed solver choices) and the (S, M) top-1 correctness.
    """
    if not seeds:
        raise ValueError("give at least one seed")
    top1, top5, chosen = [], [], []
    for seed in seeds:
        scores, info = probe.fit_predict(
            train_features, train_labels, test_features, num_classes, recipe, seed
        )
        top1.append(summary.topk_correct(scores, test_labels, 1))
        top5.append(summary.topk_correct(scores, test_labels, 5))
        chosen.append(info)
    correct = torch.stack(top1)  # (S, M)
    record = {
        "protocol": recipe.as_dict(),
        "seeds": list(seeds),
        **summary.accuracy(correct, "top1"),
        **summary.accuracy(torch.stack(top5), "top5"),
        "train_size": int(train_labels.numel()),
        "test_size": int(test_labels.numel()),
    }
    if any(chosen):
        record["solver"] = chosen
    return record, correct
