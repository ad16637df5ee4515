"""Percentile-bootstrap confidence intervals over the test set (Efron & Tibshirani 1993, §13.3).

The resampled quantity is always the *test set*: the model, its training and the feature bank
stay fixed. Indices are drawn once as a matrix, so every function is reproducible from its seed:

    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))  # one row per bootstrap test set

(for several independently resampled sets, one such call per set, in argument order). The
interval is ``np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])`` (linear interpolation, as
``torch.quantile`` in the SINCERE code), and the point estimate is the statistic on the full test
set (SINCERE's ``bootstrap_metric`` reports the bootstrap mean instead; the two differ by O(1/n)).

Comparing two checkpoints (SINCERE, Feeney & Hughes 2023, tufts-ml/SupContrast
``bootstrap_acc.py``): both are evaluated on the *same* resampled indices, and the difference is
significant when the 95% interval of the per-resample difference excludes 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from linear_eval.records.metrics import as_scores, auroc

ArrayLike = torch.Tensor | np.ndarray


class Interval(NamedTuple):
    point: float  # statistic on the full test set
    low: float
    high: float


class Difference(NamedTuple):
    point: float  # a − b on the full test set
    low: float
    high: float
    excludes_zero: bool  # significant at the interval's level


def _array(x: ArrayLike, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.ndim == 0 or a.shape[0] == 0:
        raise ValueError(f"{name} must have at least one sample along its first axis")
    return a


def _check(n_resamples: int, level: float) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def _interval(point: float, stats: np.ndarray, level: float) -> Interval:
    low, high = np.quantile(stats, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return Interval(float(point), float(low), float(high))


def _difference(point: float, stats: np.ndarray, level: float) -> Difference:
    ci = _interval(point, stats, level)
    return Difference(ci.point, ci.low, ci.high, bool(ci.low > 0.0 or ci.high < 0.0))


def bootstrap_ci(
    statistic: Callable[..., float | np.ndarray],
    *samples: ArrayLike,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    paired: bool = True,
    vectorized: bool = False,
) -> Interval:
    """Percentile bootstrap interval of ``statistic(*samples)``.

    Args:
        statistic: called as ``statistic(*resampled)``; returns a float, or with ``vectorized``
            takes arrays with a leading resample axis (B, n, ...) and returns (B,).
        samples: arrays or tensors whose first axis indexes test samples.
        n_resamples: B. level: coverage of the interval. seed: seeds the index matrix.
        paired: resample the rows of all samples jointly with one (B, n) index matrix (they must
            have the same length); otherwise each sample gets its own (B, n_j) matrix.
        vectorized: see ``statistic``; without it the statistic runs once per resample.

    Returns:
        ``Interval(point, low, high)``.
    """
    _check(n_resamples, level)
    if not samples:
        raise ValueError("bootstrap_ci needs at least one sample array")
    arrays = [_array(s, f"samples[{i}]") for i, s in enumerate(samples)]
    lengths = {a.shape[0] for a in arrays}
    if paired and len(lengths) > 1:
        raise ValueError(f"paired=True needs samples of equal length, got {sorted(lengths)}")
    rng = np.random.default_rng(seed)
    if paired:
        idx = rng.integers(0, arrays[0].shape[0], size=(n_resamples, arrays[0].shape[0]))
        indices = [idx] * len(arrays)
    else:
        indices = [rng.integers(0, a.shape[0], size=(n_resamples, a.shape[0])) for a in arrays]
    if vectorized:
        point = float(np.asarray(statistic(*[a[None] for a in arrays])).reshape(-1)[0])
        stats = np.asarray(statistic(*[a[i] for a, i in zip(arrays, indices)]), np.float64)
        if stats.shape != (n_resamples,):
            raise ValueError(
                f"a vectorized statistic must return ({n_resamples},), got {stats.shape}"
            )
    else:
        point = float(statistic(*arrays))
        stats = np.array(
            [statistic(*[a[i[b]] for a, i in zip(arrays, indices)]) for b in range(n_resamples)],
            np.float64,
        )
    return _interval(point, stats, level)


def _correct(x: ArrayLike, name: str) -> np.ndarray:
    a = _array(x, name)
    if a.ndim != 1 or not np.isin(a, (0, 1)).all():
        raise ValueError(f"{name} must be a 1-D vector of 0/1 (or bool) per test sample")
    return a.astype(np.int8)


def accuracy_ci(
    correct: ArrayLike, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> Interval:
    """Bootstrap interval of the accuracy in **percent**; ``correct`` (n,) is 0/1 per sample."""
    _check(n_resamples, level)
    c = _correct(correct, "correct")
    idx = np.random.default_rng(seed).integers(0, c.size, size=(n_resamples, c.size))  # (B, n)
    acc = 100.0 * c[idx].sum(axis=1, dtype=np.int64) / c.size  # (B,)
    return _interval(100.0 * c.mean(), acc, level)


def paired_difference_ci(
    correct_a: ArrayLike,
    correct_b: ArrayLike,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Difference:
    """SINCERE's test: interval of acc_a − acc_b (percent) with the same indices for both.

    ``excludes_zero`` is True when the interval lies strictly above or below 0.
    """
    _check(n_resamples, level)
    a, b = _correct(correct_a, "correct_a"), _correct(correct_b, "correct_b")
    if a.size != b.size:
        raise ValueError(
            f"the two results cover different test sets ({a.size} and {b.size} images); a paired "
            "difference pairs each test image's results, so both must score the same test set"
        )
    d = a - b  # (n,) in {-1, 0, 1}
    idx = np.random.default_rng(seed).integers(0, d.size, size=(n_resamples, d.size))  # (B, n)
    diff = 100.0 * d[idx].sum(axis=1, dtype=np.int64) / d.size  # (B,)
    return _difference(100.0 * d.mean(), diff, level)


def resampled_auroc(
    id_scores: np.ndarray, ood_scores: np.ndarray, id_idx: np.ndarray, ood_idx: np.ndarray
) -> np.ndarray:
    """AUROC (fraction, ties ½) of each bootstrap set (B,): ID ``id_scores[id_idx[b]]`` against OOD
    ``ood_scores[ood_idx[b]]``; ``id_idx`` (B, N₁), ``ood_idx`` (B, N₀).

    Rank-based and exact: the scores are replaced by their dense ranks r in the pooled set (U
    values); per resample a histogram h of the OOD ranks gives, for each rank, 2·#{OOD < r} + #{OOD
    = r}, and the AUROC is the sum of that over the resampled ID ranks / (2 N₁ N₀). Processed in
    blocks of resamples so the (b, U) histograms stay near 2·10⁷ entries.
    """
    n_id, n_ood = id_idx.shape[1], ood_idx.shape[1]
    _, rank = np.unique(np.concatenate([id_scores, ood_scores]), return_inverse=True)
    n_ranks = int(rank.max()) + 1
    rank_id, rank_ood = rank[: id_scores.size], rank[id_scores.size :]
    block = max(1, int(2e7) // (n_ranks + n_id + n_ood))
    out = []
    for start in range(0, id_idx.shape[0], block):
        r_ood = rank_ood[ood_idx[start : start + block]]  # (b, N₀)
        b = r_ood.shape[0]
        offset = np.arange(b)[:, None] * n_ranks
        hist = np.bincount((r_ood + offset).ravel(), minlength=b * n_ranks).reshape(b, n_ranks)
        twice_below = 2 * (np.cumsum(hist, axis=1) - hist) + hist  # (b, U)
        r_id = rank_id[id_idx[start : start + block]]  # (b, N₁)
        out.append(np.take_along_axis(twice_below, r_id, axis=1).sum(axis=1))
    return np.concatenate(out) / (2.0 * n_id * n_ood)


def _auroc_indices(n_id: int, n_ood: int, n_resamples: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    id_idx = rng.integers(0, n_id, size=(n_resamples, n_id))
    return id_idx, rng.integers(0, n_ood, size=(n_resamples, n_ood))


def auroc_ci(
    id_scores: ArrayLike,
    ood_scores: ArrayLike,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Bootstrap interval of the AUROC in **percent**, stratified: the ID and the OOD sets are
    resampled independently (ID indices drawn first, then OOD), each keeping its size."""
    _check(n_resamples, level)
    s_id, s_ood = as_scores(id_scores, "id_scores"), as_scores(ood_scores, "ood_scores")
    id_idx, ood_idx = _auroc_indices(s_id.size, s_ood.size, n_resamples, seed)
    stats = 100.0 * resampled_auroc(s_id, s_ood, id_idx, ood_idx)
    return _interval(100.0 * auroc(s_id, s_ood), stats, level)


def auroc_difference_ci(
    id_a: ArrayLike,
    ood_a: ArrayLike,
    id_b: ArrayLike,
    ood_b: ArrayLike,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Difference:
    """Interval of AUROC_a − AUROC_b (percent) for two scorers of the same ID and OOD test images,
    with the same stratified indices for both (as :func:`auroc_ci`)."""
    _check(n_resamples, level)
    ia, oa = as_scores(id_a, "id_a"), as_scores(ood_a, "ood_a")
    ib, ob = as_scores(id_b, "id_b"), as_scores(ood_b, "ood_b")
    if ia.size != ib.size or oa.size != ob.size:
        raise ValueError(
            "both scorers must score the same test images: "
            f"ID {ia.size} vs {ib.size}, OOD {oa.size} vs {ob.size}"
        )
    id_idx, ood_idx = _auroc_indices(ia.size, oa.size, n_resamples, seed)
    diff = 100.0 * (
        resampled_auroc(ia, oa, id_idx, ood_idx) - resampled_auroc(ib, ob, id_idx, ood_idx)
    )
    return _difference(100.0 * (auroc(ia, oa) - auroc(ib, ob)), diff, level)
