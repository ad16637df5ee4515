"""Detection metrics on normality scores: AUROC, AUPR-In/Out and FPR at a TPR (the OOD tables of
Lunardi et al. 2025, FIRM, and Ming et al. 2023, CIDER).

Convention everywhere: a score is a *normality* score (higher = in-distribution) and ID is the
positive class. The functions take two 1-D score sets, ``id_scores`` (N₁,) and ``ood_scores``
(N₀,), as torch tensors or numpy arrays; they compute in float64 and return fractions in [0, 1]
(the scikit-learn convention), except [`ood_summary`][linear_eval.records.metrics.ood_summary],
which reports percent as the papers do.

* AUROC = P(s_ID > s_OOD) + ½ P(s_ID = s_OOD) = sklearn ``roc_auc_score`` with y = 1 for ID.
* AUPR-In = sklearn ``average_precision_score`` (step-wise, no interpolation) with ID positive;
  AUPR-Out = the same with OOD positive on the negated scores.
* FPR@TPR, two definitions (both in use in the OOD literature; they differ by O(1/n) and at
  ties):
  ``"min"``: the smallest FPR over thresholds whose TPR ≥ target, i.e. the first point of sklearn
  ``roc_curve(..., drop_intermediate=False)`` with tpr ≥ 0.95 (the default
  ``drop_intermediate=True`` can drop that point when it is collinear with its neighbours);
  ``"closest"``: the threshold whose TPR is *closest* to the target, possibly below it, as
  ``fpr_and_fdr_at_recall`` in deeplearning-wisc/cider ``utils/detection_util.py`` @ dce8ad3
  (used by the CIDER and KNN+ tables).

±inf scores are accepted (ranks stay defined); NaN scores and empty sets raise ``ValueError``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

ArrayLike = torch.Tensor | np.ndarray


def as_scores(x: ArrayLike | list[float], name: str) -> np.ndarray:
    """``x`` as a non-empty float64 numpy vector without NaN; raises ``ValueError`` otherwise."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one score per sample), got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty; pass at least one score")
    if np.isnan(a).any():
        raise ValueError(f"{name} contains {int(np.isnan(a).sum())} NaN score(s); fix the scorer")
    return a


def _pair(id_scores: ArrayLike, ood_scores: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    return as_scores(id_scores, "id_scores"), as_scores(ood_scores, "ood_scores")


def roc_points(id_scores: ArrayLike, ood_scores: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """True- and false-positive counts (T,), (T,) at each distinct threshold, highest first.

    Point t counts the samples with score ≥ the t-th largest distinct score (sklearn's
    ``_binary_clf_curve`` without its dropping of collinear points).
    """
    s_id, s_ood = _pair(id_scores, ood_scores)
    scores = np.concatenate([s_id, s_ood])  # (N,)
    is_id = np.concatenate([np.ones(s_id.size, np.int64), np.zeros(s_ood.size, np.int64)])
    order = np.argsort(-scores, kind="stable")
    scores, is_id = scores[order], is_id[order]
    # last index of each run of equal scores (``!=``, not ``np.diff``: inf - inf is NaN)
    last = np.r_[np.flatnonzero(scores[1:] != scores[:-1]), scores.size - 1]  # (T,)
    tps = np.cumsum(is_id)[last]
    return tps, last + 1 - tps


def auroc(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """Area under the ROC curve, ID positive: P(s_ID > s_OOD) + ½ P(tie) (Mann-Whitney U / N₁N₀).

    Exact integer counts: for each ID score, the OOD scores strictly below plus half the ties.
    """
    s_id, s_ood = _pair(id_scores, ood_scores)
    s_ood = np.sort(s_ood)
    below = np.searchsorted(s_ood, s_id, side="left")  # (N₁,) OOD < s
    below_or_tied = np.searchsorted(s_ood, s_id, side="right")  # (N₁,) OOD ≤ s
    return float((below.sum() + below_or_tied.sum()) / (2.0 * s_id.size * s_ood.size))


def aupr(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """AUPR-In: average precision with ID positive, Σ_t (R_t − R_{t−1}) P_t over distinct
    thresholds (= sklearn ``average_precision_score``)."""
    tps, fps = roc_points(id_scores, ood_scores)
    precision = tps / (tps + fps)
    recall = tps / tps[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def aupr_out(id_scores: ArrayLike, ood_scores: ArrayLike) -> float:
    """AUPR-Out: average precision with OOD positive on the negated scores."""
    s_id, s_ood = _pair(id_scores, ood_scores)
    return aupr(-s_ood, -s_id)


def fpr_at_tpr(
    id_scores: ArrayLike,
    ood_scores: ArrayLike,
    tpr: float = 0.95,
    method: Literal["min", "closest"] = "min",
) -> float:
    """False-positive rate (fraction of OOD scored as ID) at the threshold that keeps ``tpr`` of ID.

    Args:
        id_scores: (N₁,) normality scores of ID samples (positives).
        ood_scores: (N₀,) normality scores of OOD samples.
        tpr: target true-positive rate in (0, 1].
        method: ``"min"``: min FPR over thresholds with TPR ≥ tpr. ``"closest"``: CIDER/KNN+'s
            ``fpr_and_fdr_at_recall``: among the distinct thresholds down to the first one that
            reaches TPR = 1, take the one minimising |TPR − tpr|; on a tie of that distance take
            the lowest threshold (the reference scans from low to high thresholds and keeps the
            first minimum), and return its FPR.
    """
    if not 0.0 < tpr <= 1.0:
        raise ValueError(f"tpr must be in (0, 1], got {tpr}")
    tps, fps = roc_points(id_scores, ood_scores)
    n_id, n_ood = tps[-1], fps[-1]
    rate = tps / n_id  # (T,) TPR at each threshold, non-decreasing
    if method == "min":
        return float(fps[np.argmax(rate >= tpr)] / n_ood)
    if method == "closest":
        full = int(np.argmax(tps == n_id))  # first threshold with TPR = 1
        gap = np.abs(rate[: full + 1] - tpr)
        return float(fps[np.flatnonzero(gap == gap.min())[-1]] / n_ood)
    raise ValueError(f"method must be 'min' or 'closest', got {method!r}")


def ood_summary(id_scores: ArrayLike, ood_scores: ArrayLike) -> dict[str, float]:
    """All detection metrics in **percent**: ``auroc``, ``aupr_in``, ``aupr_out``, ``fpr95``
    (method "min") and ``fpr95_closest`` (CIDER/KNN+ code's definition)."""
    return {
        "auroc": 100.0 * auroc(id_scores, ood_scores),
        "aupr_in": 100.0 * aupr(id_scores, ood_scores),
        "aupr_out": 100.0 * aupr_out(id_scores, ood_scores),
        "fpr95": 100.0 * fpr_at_tpr(id_scores, ood_scores, 0.95, "min"),
        "fpr95_closest": 100.0 * fpr_at_tpr(id_scores, ood_scores, 0.95, "closest"),
    }
