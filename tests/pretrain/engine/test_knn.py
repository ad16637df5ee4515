"""Weighted cosine kNN against a numpy re-derivation and scikit-learn's KNeighborsClassifier."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pretrain.engine.monitor import extract
from pretrain.metrics.knn import knn_predict, knn_top1, knn_votes
from tests.helpers.knn_reference import np_knn, np_votes

C, T = 5, 0.1


def data(seed: int, n: int = 40, m: int = 50, f: int = 16):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((C, f)) * 1.5
    bank_y = rng.integers(0, C, n)
    test_y = rng.integers(0, C, m)
    bank = centres[bank_y] + rng.standard_normal((n, f))
    test = centres[test_y] + rng.standard_normal((m, f))
    return bank, bank_y, test, test_y


@pytest.mark.parametrize("k", [1, 10, 40, 200])
def test_knn_predict_matches_numpy(k):
    bank, bank_y, test, _ = data(seed=k)
    got = knn_predict(
        torch.from_numpy(bank), torch.from_numpy(bank_y), torch.from_numpy(test), k, T, C
    )
    np.testing.assert_array_equal(got.numpy(), np_knn(bank, bank_y, test, k, T, C))


@pytest.mark.parametrize("k, chunk", [(10, 1024), (10, 7), (60, 16)])
def test_knn_votes_match_numpy(k, chunk):
    bank, bank_y, test, _ = data(seed=20 + k)
    got = knn_votes(
        torch.from_numpy(bank),
        torch.from_numpy(bank_y),
        torch.from_numpy(test),
        k,
        T,
        C,
        chunk=chunk,
    )
    assert got.shape == (len(test), C)
    np.testing.assert_allclose(
        got.double().numpy(), np_votes(bank, bank_y, test, k, T, C), rtol=1e-5, atol=1e-30
    )


@pytest.mark.parametrize("k", [1, 7, 40])
def test_knn_predict_matches_sklearn(k):
    bank, bank_y, test, _ = data(seed=100 + k)
    clf = KNeighborsClassifier(
        n_neighbors=k, metric="cosine", weights=lambda dist: np.exp((1.0 - dist) / T)
    )
    clf.fit(bank, bank_y)
    got = knn_predict(
        torch.from_numpy(bank), torch.from_numpy(bank_y), torch.from_numpy(test), k, T, C
    )
    np.testing.assert_array_equal(got.numpy(), clf.predict(test))


def test_k_larger_than_bank_uses_every_bank_row():
    bank, bank_y, test, _ = data(seed=3, n=12)
    got = knn_predict(
        torch.from_numpy(bank), torch.from_numpy(bank_y), torch.from_numpy(test), 500, T, C
    )
    np.testing.assert_array_equal(got.numpy(), np_knn(bank, bank_y, test, 12, T, C))


def test_weighting_beats_majority_by_hand():
    # Two close neighbours of class 1 outweigh three far ones of class 0 at T = 0.1.
    bank = torch.tensor([[1.0, 0.05], [1.0, -0.05], [0.3, 1.0], [0.3, -1.0], [0.2, 1.0]])
    labels = torch.tensor([1, 1, 0, 0, 0])
    test = torch.tensor([[1.0, 0.0]])
    assert knn_predict(bank, labels, test, 5, T, 2).tolist() == [1]
    # With a huge temperature every weight is ~1 and the majority wins.
    assert knn_predict(bank, labels, test, 5, 1e6, 2).tolist() == [0]


def test_knn_top1_is_the_percentage_of_correct_predictions():
    bank, bank_y, test, test_y = data(seed=5)
    ref = 100.0 * np.mean(np_knn(bank, bank_y, test, 10, T, C) == test_y)
    got = knn_top1(
        torch.from_numpy(bank),
        torch.from_numpy(bank_y),
        torch.from_numpy(test),
        torch.from_numpy(test_y),
        10,
        T,
        C,
    )
    assert got == pytest.approx(ref, rel=1e-6)


def test_extract_runs_in_eval_mode_and_restores_training():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    x, y = torch.randn(10, 4), torch.arange(10)
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    net.train()
    feats, labels = extract(net, loader, torch.device("cpu"))
    assert net.training
    lin, bn = net[0], net[1]
    ref = (x @ lin.weight.T + lin.bias - bn.running_mean) / torch.sqrt(
        bn.running_var + bn.eps
    ) * bn.weight + bn.bias
    torch.testing.assert_close(feats, ref.detach(), rtol=1e-6, atol=1e-6)
    assert torch.equal(labels, y)


@pytest.mark.parametrize("k", [1, 4, 9])
def test_tied_inputs_match_numpy(k):
    """Exact duplicates in the bank (same label, so tie order cannot change a vote) and test
    points equal to bank rows (similarity 1, tied three ways)."""
    bank, bank_y, test, _ = data(seed=30 + k, n=12, m=8)
    bank, bank_y = np.concatenate([bank] * 3), np.concatenate([bank_y] * 3)
    test = np.concatenate([test, bank[:5]])
    args = (torch.from_numpy(bank), torch.from_numpy(bank_y), torch.from_numpy(test), k, T, C)
    np.testing.assert_allclose(
        knn_votes(*args).numpy(), np_votes(bank, bank_y, test, k, T, C), rtol=1e-5
    )
    np.testing.assert_array_equal(knn_predict(*args).numpy(), np_knn(bank, bank_y, test, k, T, C))
