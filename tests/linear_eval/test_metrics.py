"""linear_eval.records.metrics against scikit-learn and explicit-loop re-derivations, with and
without ties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from linear_eval.records.metrics import aupr, aupr_out, auroc, fpr_at_tpr, ood_summary


def score_sets(seed: int, ties: bool):
    """ID ~ N(1, 1), OOD ~ N(0, 1); with ``ties`` rounded to one decimal (many repeated scores)."""
    rng = np.random.default_rng(seed)
    s_id, s_ood = rng.normal(1.0, 1.0, 60 + seed), rng.normal(0.0, 1.0, 45 + 2 * seed)
    if ties:
        s_id, s_ood = s_id.round(1), s_ood.round(1)
        s_ood[:5] = s_id[:5]  # exact ID/OOD ties
    return s_id, s_ood


def labelled(s_id, s_ood):
    y = np.r_[np.ones(len(s_id)), np.zeros(len(s_ood))]
    return y, np.r_[s_id, s_ood]


def loop_roc(s_id, s_ood):
    """(threshold, TPR, FPR) for each distinct score, highest threshold first, by counting."""
    points = []
    for t in sorted(set(np.r_[s_id, s_ood].tolist()), reverse=True):
        tpr = sum(1 for s in s_id if s >= t) / len(s_id)
        fpr = sum(1 for s in s_ood if s >= t) / len(s_ood)
        points.append((t, tpr, fpr))
    return points


def loop_fpr_min(s_id, s_ood, target):
    return min(fpr for _, tpr, fpr in loop_roc(s_id, s_ood) if tpr >= target)


def loop_fpr_closest(s_id, s_ood, target):
    """CIDER's rule re-stated: scan thresholds downwards until TPR reaches 1, keep the point with
    the smallest |TPR − target|, the later (lower) threshold on a tie of that distance."""
    best = None
    for _, tpr, fpr in loop_roc(s_id, s_ood):
        gap = abs(tpr - target)
        if best is None or gap <= best[0]:
            best = (gap, fpr)
        if tpr == 1.0:
            break
    return best[1]


CASES = [(seed, ties) for seed in range(4) for ties in (False, True)]


@pytest.mark.parametrize("seed, ties", CASES)
def test_auroc_and_aupr_match_sklearn(seed, ties):
    s_id, s_ood = score_sets(seed, ties)
    y, s = labelled(s_id, s_ood)
    assert auroc(s_id, s_ood) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert aupr(s_id, s_ood) == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert aupr_out(s_id, s_ood) == pytest.approx(average_precision_score(1 - y, -s), abs=1e-12)


@pytest.mark.parametrize("seed, ties", CASES)
@pytest.mark.parametrize("target", [0.95, 0.8, 0.5])
def test_fpr_at_tpr_matches_loops_and_sklearn(seed, ties, target):
    s_id, s_ood = score_sets(seed, ties)
    got_min = fpr_at_tpr(s_id, s_ood, target, "min")
    assert got_min == loop_fpr_min(s_id, s_ood, target)
    fpr, tpr, _ = roc_curve(*labelled(s_id, s_ood), drop_intermediate=False)
    assert got_min == fpr[np.argmax(tpr >= target)]
    got_closest = fpr_at_tpr(s_id, s_ood, target, "closest")
    assert got_closest == loop_fpr_closest(s_id, s_ood, target)


def test_fpr95_definitions_differ_on_the_hand_case():
    """94 ID at 3 and 6 ID tied with one OOD at 1: TPR jumps 0.94 → 1.0 together with FPR 0 → 0.5.
    "min" needs TPR ≥ 0.95 and pays FPR 0.5; "closest" stops at TPR 0.94 with FPR 0."""
    s_id = np.r_[np.full(94, 3.0), np.full(6, 1.0)]
    s_ood = np.array([1.0, -1.0])
    assert fpr_at_tpr(s_id, s_ood, 0.95, "min") == 0.5
    assert fpr_at_tpr(s_id, s_ood, 0.95, "closest") == 0.0
    assert loop_fpr_min(s_id, s_ood, 0.95) == 0.5 and loop_fpr_closest(s_id, s_ood, 0.95) == 0.0


def test_closest_breaks_a_distance_tie_towards_the_lower_threshold():
    """TPR 0.9 is reached at threshold 3 (FPR 0) and again at 2 (FPR 1/2): the reference keeps the
    lower threshold, so FPR = 0.5 (while "min" takes threshold 3)."""
    s_id = np.r_[np.full(9, 3.0), 0.0]
    s_ood = np.array([2.0, -1.0])
    assert fpr_at_tpr(s_id, s_ood, 0.9, "closest") == loop_fpr_closest(s_id, s_ood, 0.9) == 0.5
    assert fpr_at_tpr(s_id, s_ood, 0.9, "min") == 0.0


def test_summary_is_in_percent_and_accepts_tensors():
    s_id, s_ood = score_sets(7, ties=True)
    got = ood_summary(torch.from_numpy(s_id).float(), torch.from_numpy(s_ood).float())
    y, s = labelled(s_id.astype(np.float32), s_ood.astype(np.float32))
    assert got["auroc"] == pytest.approx(100 * roc_auc_score(y, s), abs=1e-10)
    assert got["aupr_in"] == pytest.approx(100 * average_precision_score(y, s), abs=1e-10)
    assert got["aupr_out"] == pytest.approx(100 * average_precision_score(1 - y, -s), abs=1e-10)
    assert got["fpr95"] == pytest.approx(100 * loop_fpr_min(s_id, s_ood, 0.95), abs=1e-10)
    assert got["fpr95_closest"] == pytest.approx(100 * loop_fpr_closest(s_id, s_ood, 0.95))


def test_perfect_and_reversed_separation():
    s_id, s_ood = np.array([2.0, 3.0]), np.array([0.0, 1.0])
    assert auroc(s_id, s_ood) == 1.0 and aupr(s_id, s_ood) == 1.0
    assert fpr_at_tpr(s_id, s_ood) == 0.0 and fpr_at_tpr(s_id, s_ood, method="closest") == 0.0
    assert auroc(s_ood, s_id) == 0.0 and fpr_at_tpr(s_ood, s_id) == 1.0
    assert auroc(np.ones(3), np.ones(4)) == 0.5  # all tied


def test_infinite_scores_rank_like_large_finite_ones():
    s_id, s_ood = score_sets(1, ties=True)
    s_id[:3], s_ood[:2] = np.inf, -np.inf
    big_id, big_ood = np.where(np.isinf(s_id), 1e9, s_id), np.where(np.isinf(s_ood), -1e9, s_ood)
    assert auroc(s_id, s_ood) == auroc(big_id, big_ood)
    assert aupr(s_id, s_ood) == aupr(big_id, big_ood)
    for method in ("min", "closest"):
        assert fpr_at_tpr(s_id, s_ood, method=method) == fpr_at_tpr(big_id, big_ood, method=method)


@pytest.mark.parametrize(
    "s_id, s_ood, match",
    [
        (np.array([]), np.array([1.0]), "id_scores is empty"),
        (np.array([1.0]), np.array([]), "ood_scores is empty"),
        (np.array([1.0, np.nan]), np.array([1.0]), "NaN"),
        (np.ones((2, 2)), np.array([1.0]), "1-D"),
    ],
)
def test_bad_scores_raise(s_id, s_ood, match):
    for fn in (auroc, aupr, aupr_out, fpr_at_tpr, ood_summary):
        with pytest.raises(ValueError, match=match):
            fn(s_id, s_ood)


def test_bad_fpr_arguments_raise():
    with pytest.raises(ValueError, match="tpr must be in"):
        fpr_at_tpr([1.0], [0.0], tpr=0.0)
    with pytest.raises(ValueError, match="method must be"):
        fpr_at_tpr([1.0], [0.0], method="nearest")
