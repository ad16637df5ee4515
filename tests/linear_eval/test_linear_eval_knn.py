"""kNN evaluator: SINCERE's majority vote against scikit-learn, the presets, and the records'
accuracies and bootstrap intervals against a numpy re-derivation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier

from linear_eval.classify import knn
from linear_eval.records import summary

C = 4


def data(seed: int, n: int = 60, m: int = 50, f: int = 8):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((C, f)) * 1.2
    y, ty = rng.integers(0, C, n), rng.integers(0, C, m)
    x = centres[y] + rng.standard_normal((n, f))
    tx = centres[ty] + rng.standard_normal((m, f))
    return (torch.from_numpy(a) for a in (x, y, tx, ty))


@pytest.mark.parametrize("k", [1, 5, 9])
def test_majority_vote_matches_sklearn_uniform_cosine_knn(k):
    x, y, tx, _ = data(seed=k)
    votes = knn.majority_votes(x, y, tx, k, C)
    ref = KNeighborsClassifier(n_neighbors=k, metric="cosine", weights="uniform").fit(x, y)
    np.testing.assert_array_equal(votes.argmax(1).numpy(), ref.predict(tx.numpy()))
    assert torch.equal(votes.sum(1), torch.full((len(tx),), float(k)))


def test_majority_tie_goes_to_the_smallest_class():
    bank = torch.tensor([[1.0, 0.1], [1.0, -0.1], [0.9, 0.3], [0.9, -0.3]])
    labels = torch.tensor([3, 1, 3, 1])  # 2 votes each among the 4 nearest
    pred = knn.majority_votes(bank, labels, torch.tensor([[1.0, 0.0]]), 4, 4).argmax(1)
    assert pred.tolist() == [1]


def test_presets():
    assert (knn.PRESETS["cifar"]["k"], knn.PRESETS["cifar"]["temperature"]) == (200, 0.1)
    assert (knn.PRESETS["imagenet"]["k"], knn.PRESETS["imagenet"]["temperature"]) == (20, 0.07)
    assert knn.PRESETS["mioc"]["k"] == 10 and "assumption" in knn.PRESETS["mioc"]["source"]
    with pytest.raises(ValueError, match="unknown kNN preset"):
        knn.evaluate(*data(0), C, presets=["dino"])


def np_weighted_correct(x, y, tx, ty, k, t):
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    tn = tx / np.linalg.norm(tx, axis=1, keepdims=True)
    sim = tn @ xn.T
    out = []
    for i, row in enumerate(sim):
        top = np.argsort(-row)[:k]
        votes = np.zeros(C)
        np.add.at(votes, y[top], np.exp(row[top] / t))
        out.append(votes.argmax() == ty[i])
    return np.array(out)


def test_records_hold_accuracy_and_its_bootstrap_interval():
    x, y, tx, ty = data(seed=11)
    records, correct = knn.evaluate(x, y, tx, ty, C, presets=["imagenet"], majority=[1])
    ref = np_weighted_correct(*(a.numpy() for a in (x, y, tx, ty)), 20, 0.07)
    np.testing.assert_array_equal(correct["imagenet"].numpy(), ref)
    rec = records["imagenet"]
    assert rec["top1"] == pytest.approx(100 * ref.mean())
    # percentile bootstrap with the documented index matrix: rng(0).integers(0, n, (1000, n))
    idx = np.random.default_rng(0).integers(0, len(ref), size=(1000, len(ref)))
    boot = 100 * ref[idx].mean(1)
    np.testing.assert_allclose(rec["top1_ci"], np.quantile(boot, [0.025, 0.975]))
    assert {"top5", "top5_ci"} <= rec.keys() and "top1_ci" in records["majority1"]


def test_accuracy_over_runs_is_the_mean_with_an_interval_of_the_mean():
    rng = np.random.default_rng(2)
    c = rng.random((3, 40)) < 0.7  # 3 runs
    rec = summary.accuracy(torch.from_numpy(c))
    per_run = 100 * c.mean(1)
    assert rec["top1"] == pytest.approx(per_run.mean())
    assert rec["top1_std"] == pytest.approx(per_run.std(ddof=1))
    idx = np.random.default_rng(0).integers(0, 40, size=(1000, 40))
    boot = 100 * c.mean(0)[idx].mean(1)
    np.testing.assert_allclose(rec["top1_ci"], np.quantile(boot, [0.025, 0.975]))
