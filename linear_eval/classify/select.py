"""Hyper-parameter selection on a held-out part of the training set, never on the test set
(solo-learn #337: kNN and linear parameters tuned on the test set inflate the numbers).

A stratified ``fraction`` of every class of the training set is held out (seeded permutation per
class, at least one image per class). Each candidate is fitted on the rest and scored on the
held-out part; the best (ties: the first candidate in the listed order) is refitted on the whole
training set and tested once. The record states what was selected, on what, and every candidate's
validation accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from linear_eval.classify import probe
from linear_eval.records import summary
from pretrain.metrics.knn import knn_votes

KNN_GRID = tuple((k, t) for k in (10, 20, 50, 100, 200) for t in (0.05, 0.07, 0.1, 0.2))
FRACTION = 0.1


def stratified_split(
    labels: torch.Tensor, fraction: float = FRACTION, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(fit rows, held-out rows): ceil(fraction · n_c) rows of each class c (at least 1, at most
    n_c − 1) drawn by a seeded permutation of that class."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--val-fraction must be in (0, 1), got {fraction}")
    g = torch.Generator().manual_seed(seed)
    held: list[torch.Tensor] = []
    for c in labels.unique().tolist():
        rows = (labels == c).nonzero().squeeze(1)
        if rows.numel() < 2:
            raise ValueError(f"class {c} has {rows.numel()} training image: cannot hold one out")
        n = min(max(1, math.ceil(fraction * rows.numel())), rows.numel() - 1)
        held.append(rows[torch.randperm(rows.numel(), generator=g)[:n]])
    val = torch.cat(held).sort().values
    mask = torch.ones(labels.numel(), dtype=torch.bool)
    mask[val] = False
    return mask.nonzero().squeeze(1), val


def _acc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    return 100.0 * summary.topk_correct(scores, labels, 1).double().mean().item()


def _selection(labels: torch.Tensor, val: torch.Tensor, fraction: float, seed: int) -> dict:
    return {
        "on": "val",
        "val": f"stratified {fraction:.0%} of the training set held out (seed {seed})",
        "val_size": int(val.numel()),
        "fit_size": int(labels.numel() - val.numel()),
    }


def knn(
    train_f: torch.Tensor,
    train_y: torch.Tensor,
    test_f: torch.Tensor,
    test_y: torch.Tensor,
    num_classes: int,
    *,
    grid: Sequence[tuple[int, float]] = KNN_GRID,
    fraction: float = FRACTION,
    seed: int = 0,
) -> dict[str, Any]:
    """Weighted kNN: (k, T) chosen on the held-out split, then test top-1 once."""
    fit, val = stratified_split(train_y, fraction, seed)
    cands = {}
    for k, t in grid:
        votes = knn_votes(train_f[fit], train_y[fit], train_f[val], k, t, num_classes)
        cands[f"k={k},T={t}"] = _acc(votes, train_y[val])
    best = max(cands, key=lambda n: cands[n])  # first maximum in grid order
    k, t = grid[list(cands).index(best)]
    votes = knn_votes(train_f, train_y, test_f, k, t, num_classes)
    rec = summary.accuracy(summary.topk_correct(votes, test_y, 1).unsqueeze(0), "top1")
    sel = _selection(train_y, val, fraction, seed)
    sel |= {"selected": {"k": k, "temperature": t}, "val_top1": cands}
    return {"selection": sel, **rec}


def linear(
    train_f: torch.Tensor,
    train_y: torch.Tensor,
    test_f: torch.Tensor,
    test_y: torch.Tensor,
    num_classes: int,
    *,
    protocols: Sequence[str] = tuple(probe.PROTOCOLS),
    fraction: float = FRACTION,
    seed: int = 0,
) -> dict[str, Any]:
    """Linear probe: the protocol chosen on the held-out split, refitted on all of the training
    set, then test top-1 once (L-BFGS still picks its own L2 inside whatever data it is given)."""
    fit, val = stratified_split(train_y, fraction, seed)
    cands = {}
    for name in protocols:
        scores, _ = probe.fit_predict(
            train_f[fit], train_y[fit], train_f[val], num_classes, probe.protocol(name), seed
        )
        cands[name] = _acc(scores, train_y[val])
    best = max(cands, key=lambda n: cands[n])
    scores, info = probe.fit_predict(
        train_f, train_y, test_f, num_classes, probe.protocol(best), seed
    )
    rec = summary.accuracy(summary.topk_correct(scores, test_y, 1).unsqueeze(0), "top1")
    sel = _selection(train_y, val, fraction, seed)
    sel |= {"selected": {"protocol": best, **info}, "val_top1": cands}
    return {"selection": sel, "protocol": probe.protocol(best).as_dict(), **rec}
