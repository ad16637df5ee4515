"""Accuracy and AUROC records with bootstrap 95% intervals, for the JSON files and the report.

Repeated runs (seeds, label draws) give a (S, N) matrix of per-test-sample correctness. The record
holds the mean and sample standard deviation (ddof 1) of the S accuracies, and a percentile
bootstrap interval (1000 resamples of the *test set*, :mod:`linear_eval.records.stats`) of that
mean: the statistic is the mean over resampled test samples of the fraction of runs that got each
right, which equals the mean accuracy over runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from linear_eval.records import metrics, stats

N_RESAMPLES = 1000
LEVEL = 0.95


def _percent_mean(a: np.ndarray) -> np.ndarray:
    return 100.0 * a.mean(-1)


def accuracy(correct: torch.Tensor, prefix: str = "top1") -> dict[str, Any]:
    """``correct``: (N,) or (S, N) booleans. Returns ``{prefix, prefix_std, prefix_ci,
    prefix_per_run, runs}`` in percent (``prefix_std`` 0 for one run)."""
    c = torch.as_tensor(correct).detach().cpu()
    c = c.view(1, -1) if c.ndim == 1 else c
    if c.ndim != 2 or c.shape[1] == 0:
        raise ValueError(f"correct must be (N,) or (S, N) with N > 0, got {tuple(c.shape)}")
    per_run = 100.0 * c.double().mean(1)  # (S,)
    if c.shape[0] == 1:
        low, high = interval(c[0])
    else:
        ci = stats.bootstrap_ci(
            _percent_mean,
            c.double().mean(0).numpy(),  # (N,) fraction of runs right on each sample
            n_resamples=N_RESAMPLES,
            level=LEVEL,
            vectorized=True,
        )
        low, high = ci.low, ci.high
    return {
        prefix: float(per_run.mean()),
        f"{prefix}_std": float(per_run.std(unbiased=True)) if c.shape[0] > 1 else 0.0,
        f"{prefix}_ci": [low, high],
        f"{prefix}_per_run": [float(a) for a in per_run],
        "runs": int(c.shape[0]),
    }


def interval(correct: torch.Tensor) -> list[float]:
    """The bootstrap interval (percent) of one run's accuracy; ``correct`` is (N,) booleans."""
    c = torch.as_tensor(correct).detach().cpu().reshape(-1)
    ci = stats.accuracy_ci(c.numpy().astype(np.int8), N_RESAMPLES, LEVEL)
    return [ci.low, ci.high]


def topk_correct(scores: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """(M,) booleans: the label is among the ``k`` highest of the (M, C) scores (k capped at C).

    For k = 1 the prediction is ``argmax``, which resolves ties to the smallest class index
    (``topk`` gives no such guarantee)."""
    if k == 1:
        return (scores.argmax(1).cpu() == labels.view(-1).cpu()).cpu()
    top = scores.topk(min(k, scores.shape[1]), dim=1).indices  # (M, k)
    return (top == labels.view(-1, 1).to(top.device)).any(1).cpu()


def detection(id_scores: torch.Tensor, ood_scores: torch.Tensor) -> dict[str, Any]:
    """AUROC, AUPR-In/Out, FPR95 (both definitions) in percent, plus the AUROC's bootstrap
    interval (ID and OOD resampled independently)."""
    out: dict[str, Any] = metrics.ood_summary(id_scores, ood_scores)
    ci = stats.auroc_ci(id_scores, ood_scores, N_RESAMPLES, LEVEL)
    out["auroc_ci"] = [ci.low, ci.high]
    out["n_id"], out["n_ood"] = int(len(id_scores)), int(len(ood_scores))
    return out


def mean_auroc(pairs: list[tuple[torch.Tensor, torch.Tensor]], seed: int = 0) -> dict[str, Any]:
    """Mean AUROC (percent) over several ID/OOD pairs (one-class: one pair per normal class) with
    a bootstrap interval of the mean: each pair resampled on its own (stratified, as
    :func:`linear_eval.records.stats.auroc_ci`), the per-resample AUROCs averaged over pairs."""
    rng = np.random.default_rng(seed)
    points, resampled = [], []
    for s_id, s_ood in pairs:
        a = metrics.as_scores(s_id, "id_scores")
        b = metrics.as_scores(s_ood, "ood_scores")
        id_idx = rng.integers(0, a.size, size=(N_RESAMPLES, a.size))
        ood_idx = rng.integers(0, b.size, size=(N_RESAMPLES, b.size))
        points.append(100.0 * metrics.auroc(a, b))
        resampled.append(100.0 * stats.resampled_auroc(a, b, id_idx, ood_idx))
    low, high = np.quantile(np.mean(resampled, 0), [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {"auroc": float(np.mean(points)), "auroc_ci": [float(low), float(high)]}


def mean_auroc_difference(
    pairs_a: list[tuple[torch.Tensor, torch.Tensor]],
    pairs_b: list[tuple[torch.Tensor, torch.Tensor]],
    seed: int = 0,
) -> dict[str, Any]:
    """Mean over pairs of AUROC_a − AUROC_b (percent) for two scorers of the same ID/OOD images,
    with a bootstrap interval that resamples both scorers with the same indices (paired, as
    :func:`linear_eval.records.stats.auroc_difference_ci`) and ``excludes_zero``."""
    if len(pairs_a) != len(pairs_b) or not pairs_a:
        raise ValueError(
            f"need the same non-zero number of pairs, got {len(pairs_a)}, {len(pairs_b)}"
        )
    rng = np.random.default_rng(seed)
    points, resampled = [], []
    for (ia, oa), (ib, ob) in zip(pairs_a, pairs_b):
        ia, oa = metrics.as_scores(ia, "id_a"), metrics.as_scores(oa, "ood_a")
        ib, ob = metrics.as_scores(ib, "id_b"), metrics.as_scores(ob, "ood_b")
        if ia.size != ib.size or oa.size != ob.size:
            raise ValueError("both scorers must score the same ID and OOD images")
        id_idx = rng.integers(0, ia.size, size=(N_RESAMPLES, ia.size))
        ood_idx = rng.integers(0, oa.size, size=(N_RESAMPLES, oa.size))
        points.append(100.0 * (metrics.auroc(ia, oa) - metrics.auroc(ib, ob)))
        resampled.append(
            100.0
            * (
                stats.resampled_auroc(ia, oa, id_idx, ood_idx)
                - stats.resampled_auroc(ib, ob, id_idx, ood_idx)
            )
        )
    low, high = np.quantile(np.mean(resampled, 0), [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return {
        "difference": float(np.mean(points)),
        "ci": [float(low), float(high)],
        "excludes_zero": bool(low > 0 or high < 0),
    }
