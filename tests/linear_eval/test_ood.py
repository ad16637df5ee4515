"""linear_eval.detect.scores scores against numpy float64 loop re-derivations and scikit-learn.

Every comparison runs on random features and on features with ties: duplicated bank rows and test
rows that are exact copies of bank rows (cosine 1, distance 0, tied top-k).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from sklearn.covariance import EmpiricalCovariance
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import KernelDensity
from sklearn.svm import OneClassSVM

from linear_eval.detect import scores

F_DIM, C = 6, 3


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def data(seed: int, ties: bool, n: int = 90, m: int = 40):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, (C, F_DIM))
    y = np.arange(n) % C
    bank = centres[y] + rng.normal(size=(n, F_DIM))
    test = centres[rng.integers(0, C, m)] + rng.normal(size=(m, F_DIM))
    if ties:
        bank[-10:], y[-10:] = bank[:10], y[:10]  # duplicated bank rows
        test[:6] = bank[20:26] * 3.0  # test copies of bank rows (same direction)
    return bank, y, test


CASES = [(seed, ties) for seed in range(2) for ties in (False, True)]


def np_s_con(bank, test, k):
    sim = unit(test) @ unit(bank).T
    return np.array([np.sort(row)[::-1][:k].mean() for row in sim])


def np_kth_distance(bank, test, k):
    return np.array([np.sort(np.linalg.norm(bank - x, axis=1))[k - 1] for x in test])


@pytest.mark.parametrize("seed, ties", CASES)
@pytest.mark.parametrize("k", [1, 5, 90])
def test_knn_scores_match_numpy(seed, ties, k):
    bank, _, test = data(seed, ties)
    expected = np_s_con(bank, test, k)
    got = scores.knn_score(bank, test, k)
    assert got.dtype == torch.float64 and got.shape == (len(test),)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)
    got_norm = scores.knn_score_norm(torch.from_numpy(bank), torch.from_numpy(test), k)
    np.testing.assert_allclose(
        got_norm.numpy(), expected * np.linalg.norm(test, axis=1), rtol=1e-12, atol=1e-12
    )
    got_plus = scores.knn_plus(bank, test, k)
    np.testing.assert_allclose(
        got_plus.numpy(), -np_kth_distance(unit(bank), unit(test), k), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("seed, ties", CASES)
def test_chunked_equals_unchunked(seed, ties):
    bank, _, test = data(seed, ties)
    kappa_b, kappa_t = np.linspace(0.1, 3.0, len(bank)), np.linspace(3.0, 0.2, len(test))
    for fn in (scores.knn_score, scores.knn_plus):
        torch.testing.assert_close(
            fn(bank, test, 7, chunk_size=4), fn(bank, test, 7), rtol=0, atol=1e-13
        )
    torch.testing.assert_close(
        scores.kde_score(bank, test, 0.3, chunk_size=5),
        scores.kde_score(bank, test, 0.3),
        rtol=0,
        atol=1e-12,
    )
    torch.testing.assert_close(
        scores.knn_with_kappa(bank, kappa_b, test, kappa_t, 5, chunk_size=3),
        scores.knn_with_kappa(bank, kappa_b, test, kappa_t, 5),
        rtol=0,
        atol=1e-13,
    )


@pytest.mark.parametrize("seed, ties", CASES)
def test_center_score_matches_numpy(seed, ties):
    bank, _, test = data(seed, ties)
    c = unit(bank).mean(0)
    c /= np.linalg.norm(c)
    anomaly = 1.0 - unit(test) @ c  # eq. 7
    np.testing.assert_allclose(
        scores.center_score(bank, test).numpy(), -anomaly, rtol=0, atol=1e-12
    )


def np_maha_tied(bank, y, test):
    """Lee et al.: class means, sklearn EmpiricalCovariance on the class-centred features."""
    classes = np.unique(y)
    means = np.stack([bank[y == c].mean(0) for c in classes])
    cov = EmpiricalCovariance(assume_centered=False).fit(bank - means[np.searchsorted(classes, y)])
    d2 = [[(x - mu) @ cov.precision_ @ (x - mu) for mu in means] for x in test]
    return -np.min(d2, axis=1)


def np_maha_global(bank, y, test):
    """CIDER: normalised features, class means, covariance of all features around the global
    mean."""
    bank, test = unit(bank), unit(test)
    means = [bank[y == c].mean(0) for c in np.unique(y)]
    precision = np.linalg.pinv(np.cov(bank.T))
    return -np.array([min((x - mu) @ precision @ (x - mu) for mu in means) for x in test])


def np_maha_per_class(bank, y, test):
    """SSD+: normalise, standardise with train mean/std, per-class biased covariance, min
    distance."""
    bank, test = unit(bank), unit(test)
    m, s = bank.mean(0), bank.std(0)
    bank, test = (bank - m) / (s + 1e-10), (test - m) / (s + 1e-10)
    d2 = []
    for c in np.unique(y):
        xc = bank[y == c]
        mu, precision = xc.mean(0), np.linalg.pinv(np.cov(xc.T, bias=True))
        d2.append([(x - mu) @ precision @ (x - mu) for x in test])
    return -np.min(d2, axis=0)


@pytest.mark.parametrize("seed, ties", CASES)
@pytest.mark.parametrize(
    "covariance, reference",
    [("tied", np_maha_tied), ("global", np_maha_global), ("per_class", np_maha_per_class)],
)
def test_mahalanobis_matches_numpy(seed, ties, covariance, reference):
    bank, y, test = data(seed, ties)
    y = y + 10  # labels need not be 0..C-1
    got = scores.mahalanobis(bank, torch.from_numpy(y), test, covariance)
    np.testing.assert_allclose(got.numpy(), reference(bank, y, test), rtol=1e-9, atol=1e-9)


def test_mahalanobis_flavours_differ():
    bank, y, test = data(3, ties=False)
    tied, glob, per = (
        scores.mahalanobis(bank, y, test, c) for c in ("tied", "global", "per_class")
    )
    assert not torch.allclose(tied, glob) and not torch.allclose(glob, per)


@pytest.mark.parametrize("seed, ties", CASES)
@pytest.mark.parametrize("bandwidth", [0.25, None, "silverman"])
def test_kde_matches_sklearn(seed, ties, bandwidth):
    bank, _, test = data(seed, ties)
    b, t = unit(bank), unit(test)
    n, d = b.shape
    sigma = np.sqrt(np.var(b, axis=0, ddof=1).mean())
    h = {
        0.25: 0.25,
        None: sigma * n ** (-1 / (d + 4)),
        "silverman": sigma * (n * (d + 2) / 4) ** (-1 / (d + 4)),
    }[bandwidth]
    expected = KernelDensity(kernel="gaussian", bandwidth=h).fit(b).score_samples(t)
    got = scores.kde_score(bank, test, bandwidth, chunk_size=16)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed, ties", CASES)
@pytest.mark.parametrize("nu", [0.1, 0.5])
def test_ocsvm_matches_sklearn(seed, ties, nu):
    bank, _, test = data(seed, ties)
    expected = OneClassSVM(kernel="linear", nu=nu).fit(unit(bank)).decision_function(unit(test))
    got = scores.ocsvm_score(torch.from_numpy(bank), test, nu)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("seed, ties", CASES)
def test_kappa_scores_match_numpy(seed, ties):
    bank, _, test = data(seed, ties)
    rng = np.random.default_rng(seed)
    kb, kt = rng.gamma(2.0, 1.0, len(bank)), rng.gamma(2.0, 1.0, len(test))
    if ties:
        kb[-10:], kt[:6] = kb[:10], kb[20:26]
    np.testing.assert_array_equal(scores.kappa_score(kt[:, None]).numpy(), kt)
    vb, vt = np.c_[unit(bank), kb], np.c_[unit(test), kt]
    got = scores.knn_with_kappa(bank, kb[:, None], test, kt, k=5)
    np.testing.assert_allclose(got.numpy(), -np_kth_distance(vb, vt, 5), rtol=0, atol=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_ensemble_is_the_mean_over_transforms(ties):
    pairs = [data(seed, ties)[::2] for seed in range(4)]  # (bank, test) per "rotation"
    expected = np.mean([np_s_con(b, t, 5) for b, t in pairs], axis=0)
    got = scores.ensemble_knn_score([b for b, _ in pairs], [t for _, t in pairs], 5)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


def clusters(seed: int, spread: float, n: int = 60, m: int = 60):
    """C Gaussian clusters in F_DIM dims; centres ``spread`` apart (0 = identical distributions)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, (C, F_DIM)) * spread + 5.0  # away from the origin
    y, t = np.arange(n * C) % C, np.arange(m * C) % C
    return (
        centres[y] + rng.normal(size=(n * C, F_DIM)),
        y,
        centres[t] + rng.normal(size=(m * C, F_DIM)),
        t,
    )


def test_one_class_auroc_separated_and_identical():
    score = functools.partial(scores.knn_score, k=5)
    far = scores.one_class_auroc(*clusters(0, spread=20.0), score)
    assert set(far["per_class"]) == set(range(C)) and far["mean"] > 99.0
    same = scores.one_class_auroc(*clusters(1, spread=0.0, n=100, m=200), score)
    assert abs(same["mean"] - 50.0) < 5.0


def test_one_class_auroc_matches_manual_protocol():
    x, y, z, t = clusters(2, spread=1.0)
    got = scores.one_class_auroc(x, y, z, t, scores.center_score, classes=[2, 0])
    assert list(got["per_class"]) == [2, 0]
    for c, value in got["per_class"].items():
        s = scores.center_score(x[y == c], z).numpy()
        assert value == pytest.approx(100 * roc_auc_score(t == c, s), abs=1e-10)
    assert got["mean"] == pytest.approx(np.mean(list(got["per_class"].values())))


def test_aulc_is_the_normalised_trapezoid():
    rng = np.random.default_rng(0)
    steps = np.cumsum(rng.integers(1, 10, 12)).astype(float)
    values = rng.uniform(50, 100, 12)
    expected = np.trapezoid(values, steps) / (steps[-1] - steps[0])
    assert scores.aulc(torch.from_numpy(steps), values) == pytest.approx(expected, rel=1e-12)
    assert scores.aulc([0, 10], [70.0, 70.0]) == pytest.approx(70.0)


def test_bad_inputs_raise():
    bank, y, test = data(0, ties=False)
    with pytest.raises(ValueError, match="k must be in"):
        scores.knn_score(bank, test, len(bank) + 1)
    with pytest.raises(ValueError, match="feature dims differ"):
        scores.knn_plus(bank, test[:, :3], 1)
    bad = test.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        scores.center_score(bank, bad)
    with pytest.raises(ValueError, match="covariance must be"):
        scores.mahalanobis(bank, y, test, "diagonal")
    with pytest.raises(ValueError, match="train_labels has"):
        scores.mahalanobis(bank, y[:-1], test)
    with pytest.raises(ValueError, match="one bank per test set"):
        scores.ensemble_knn_score([bank], [test, test], 1)
    with pytest.raises(ValueError, match="strictly increasing"):
        scores.aulc([0, 2, 1], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="chunk_size"):
        scores.knn_score(bank, test, 1, chunk_size=0)


@pytest.mark.cuda
def test_scores_follow_cuda_inputs():
    bank, y, test = data(0, ties=True)
    b, t = torch.from_numpy(bank).cuda(), torch.from_numpy(test).cuda()
    for fn in (
        lambda x, z: scores.knn_score(x, z, 5),
        lambda x, z: scores.knn_plus(x, z, 5),
        lambda x, z: scores.kde_score(x, z),
        lambda x, z: scores.mahalanobis(x, torch.from_numpy(y).cuda(), z, "per_class"),
    ):
        got = fn(b, t)
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), fn(b.cpu(), t.cpu()), rtol=1e-9, atol=1e-9)
