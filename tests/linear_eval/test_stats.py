"""linear_eval.records.stats against explicit-loop re-derivations on the same seeded indices, plus
coverage on synthetic populations whose true accuracy / AUROC is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from linear_eval.records.stats import (
    accuracy_ci,
    auroc_ci,
    auroc_difference_ci,
    bootstrap_ci,
    paired_difference_ci,
    resampled_auroc,
)


def percentile_interval(stats):
    """Percentile interval as SINCERE's ``bootstrap_metric`` takes it (torch.quantile, linear)."""
    q = torch.quantile(
        torch.tensor(stats, dtype=torch.float64), torch.tensor([0.025, 0.975], dtype=torch.float64)
    )
    return q.tolist()


def seeded_indices(seed, sizes, n_resamples):
    """The documented index stream: one ``integers(0, n, (B, n))`` call per resampled set."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n, size=(n_resamples, n)) for n in sizes]


def loop_auroc(s_id, s_ood):
    """P(ID > OOD) + ½ P(tie) by explicit pairwise loops."""
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in s_id for b in s_ood)
    return wins / (len(s_id) * len(s_ood))


def test_bootstrap_ci_equals_a_loop_on_the_same_indices():
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=50), rng.uniform(size=50)

    def weighted_mean(a, b):
        return float(np.sum(a * b) / np.sum(b))

    got = bootstrap_ci(weighted_mean, x, w, n_resamples=300, seed=3)
    (idx,) = seeded_indices(3, [50], 300)
    stats = [weighted_mean(x[row], w[row]) for row in idx]
    low, high = percentile_interval(stats)
    assert got == pytest.approx((weighted_mean(x, w), low, high), abs=1e-12)

    def vectorised(a, b):
        return np.sum(a * b, axis=-1) / np.sum(b, axis=-1)

    fast = bootstrap_ci(vectorised, x, w, n_resamples=300, seed=3, vectorized=True)
    assert fast == pytest.approx(got, abs=1e-12)


def test_unpaired_bootstrap_resamples_each_sample_independently():
    rng = np.random.default_rng(1)
    a, b = rng.normal(1.0, 1.0, 30), torch.from_numpy(rng.normal(0.0, 1.0, 45))

    def mean_gap(u, v):
        return float(np.mean(u) - np.mean(v))

    got = bootstrap_ci(mean_gap, a, b, n_resamples=200, seed=5, paired=False)
    ia, ib = seeded_indices(5, [30, 45], 200)
    stats = [mean_gap(a[i], b.numpy()[j]) for i, j in zip(ia, ib)]
    assert got == pytest.approx((mean_gap(a, b.numpy()), *percentile_interval(stats)), abs=1e-12)


@pytest.mark.parametrize("n", [1, 37, 200])
def test_accuracy_ci_equals_a_loop(n):
    correct = np.random.default_rng(n).uniform(size=n) < 0.7
    got = accuracy_ci(torch.from_numpy(correct), n_resamples=400, seed=n)
    (idx,) = seeded_indices(n, [n], 400)
    stats = [100.0 * sum(correct[i] for i in row) / n for row in idx]
    assert got == pytest.approx((100.0 * correct.mean(), *percentile_interval(stats)), abs=1e-10)
    assert got.low <= got.point <= got.high


def score_sets(seed, n_id, n_ood, ties):
    rng = np.random.default_rng(seed)
    s_id, s_ood = rng.normal(1.0, 1.0, n_id), rng.normal(0.0, 1.0, n_ood)
    if ties:
        s_id, s_ood = s_id.round(0), s_ood.round(0)  # a handful of distinct values
    return s_id, s_ood


@pytest.mark.parametrize("ties", [False, True])
def test_resampled_auroc_equals_sklearn_per_resample(ties):
    s_id, s_ood = score_sets(2, 25, 18, ties)
    id_idx, ood_idx = seeded_indices(9, [25, 18], 60)
    got = resampled_auroc(s_id, s_ood, id_idx, ood_idx)
    for b in range(60):
        a, o = s_id[id_idx[b]], s_ood[ood_idx[b]]
        y = np.r_[np.ones(25), np.zeros(18)]
        assert got[b] == pytest.approx(roc_auc_score(y, np.r_[a, o]), abs=1e-12)
        if b < 5:
            assert got[b] == pytest.approx(loop_auroc(a, o), abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_auroc_ci_equals_a_loop_on_the_same_indices(ties):
    s_id, s_ood = score_sets(4, 40, 30, ties)
    got = auroc_ci(s_id, s_ood, n_resamples=150, seed=11)
    id_idx, ood_idx = seeded_indices(11, [40, 30], 150)
    y = np.r_[np.ones(40), np.zeros(30)]
    stats = [100 * roc_auc_score(y, np.r_[s_id[i], s_ood[j]]) for i, j in zip(id_idx, ood_idx)]
    point = 100 * roc_auc_score(y, np.r_[s_id, s_ood])
    assert got == pytest.approx((point, *percentile_interval(stats)), abs=1e-10)


def test_paired_difference_is_exactly_zero_for_identical_predictions():
    correct = np.random.default_rng(0).uniform(size=500) < 0.8
    got = paired_difference_ci(correct, correct.copy())
    assert (got.point, got.low, got.high, got.excludes_zero) == (0.0, 0.0, 0.0, False)
    s_id, s_ood = score_sets(0, 50, 50, ties=True)
    got = auroc_difference_ci(s_id, s_ood, s_id.copy(), s_ood.copy(), n_resamples=200)
    assert (got.point, got.low, got.high, got.excludes_zero) == (0.0, 0.0, 0.0, False)


def test_paired_difference_equals_a_loop_and_detects_a_real_gap():
    rng = np.random.default_rng(3)
    a = rng.uniform(size=300) < 0.9
    b = a & (rng.uniform(size=300) < 0.85)  # b loses ~15% of a's hits
    got = paired_difference_ci(a, b, n_resamples=300, seed=2)
    (idx,) = seeded_indices(2, [300], 300)
    stats = [100.0 * (a[row].mean() - b[row].mean()) for row in idx]
    point = 100.0 * (a.mean() - b.mean())
    assert got[:3] == pytest.approx((point, *percentile_interval(stats)), abs=1e-10)
    assert got.excludes_zero and got.low > 0
    assert paired_difference_ci(b, a, n_resamples=300, seed=2).high < 0


def test_auroc_difference_equals_a_loop():
    s_id, s_ood = score_sets(5, 30, 25, ties=True)
    noise = np.random.default_rng(6)
    n_id, n_ood = s_id + noise.normal(0, 1, 30), s_ood + noise.normal(0, 1, 25)
    got = auroc_difference_ci(s_id, s_ood, n_id, n_ood, n_resamples=120, seed=8)
    id_idx, ood_idx = seeded_indices(8, [30, 25], 120)
    y = np.r_[np.ones(30), np.zeros(25)]

    def auc(a, o):
        return 100 * roc_auc_score(y, np.r_[a, o])

    stats = [auc(s_id[i], s_ood[j]) - auc(n_id[i], n_ood[j]) for i, j in zip(id_idx, ood_idx)]
    point = auc(s_id, s_ood) - auc(n_id, n_ood)
    assert got[:3] == pytest.approx((point, *percentile_interval(stats)), abs=1e-10)


def test_accuracy_interval_covers_the_true_value_about_95_percent():
    p, n, reps = 0.7, 300, 300
    rng = np.random.default_rng(0)
    hits = 0
    for r in range(reps):  # repetitions of the experiment, not resamples
        ci = accuracy_ci(rng.uniform(size=n) < p, n_resamples=400, seed=r)
        hits += ci.low <= 100 * p <= ci.high
    assert 0.90 <= hits / reps <= 0.985


def test_auroc_interval_covers_the_true_value_about_95_percent():
    true = 100 * 0.5 * (1 + math.erf(1.0 / 2.0))  # P(N(1,1) > N(0,1)) = Φ(1/√2)
    rng = np.random.default_rng(1)
    reps, hits = 200, 0
    for r in range(reps):
        ci = auroc_ci(rng.normal(1.0, 1.0, 80), rng.normal(0.0, 1.0, 60), n_resamples=300, seed=r)
        hits += ci.low <= true <= ci.high
    assert 0.88 <= hits / reps <= 0.99


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="0/1"):
        accuracy_ci(np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="same test set"):
        paired_difference_ci(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="same test images"):
        auroc_difference_ci(np.ones(3), np.ones(3), np.ones(4), np.ones(3))
    with pytest.raises(ValueError, match="equal length"):
        bootstrap_ci(lambda a, b: 0.0, np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="level"):
        accuracy_ci(np.ones(3), level=1.0)
    with pytest.raises(ValueError, match="NaN"):
        auroc_ci(np.array([np.nan]), np.ones(2))
    with pytest.raises(ValueError, match="must return"):
        bootstrap_ci(lambda a: a.mean(), np.ones(3), n_resamples=5, vectorized=True)
