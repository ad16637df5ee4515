"""Detection protocols: one-class and ID-vs-OOD against numpy / scikit-learn re-derivations of
s_con, the multi-view ensembles and AUROC, plus the intervals of means and differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from linear_eval.detect import detectors, protocols
from linear_eval.detect.detectors import Settings, ViewSet
from linear_eval.inputs.features import Features
from linear_eval.records import summary


def feats(x: np.ndarray, y: np.ndarray, kappa: np.ndarray | None = None) -> Features:
    t = torch.from_numpy(x).float()
    k = None if kappa is None else torch.from_numpy(kappa).float()
    return Features(t, torch.nn.functional.normalize(t, dim=1), torch.from_numpy(y), k)


def data(seed: int, n: int = 90, m: int = 60, f: int = 6, c: int = 3):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((c, f)) * 2
    y, ty = np.arange(n) % c, np.arange(m) % c
    return (
        centres[y] + rng.standard_normal((n, f)),
        y,
        centres[ty] + rng.standard_normal((m, f)),
        ty,
    )


def np_s_con(bank: np.ndarray, test: np.ndarray, k: int) -> np.ndarray:
    b = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    t = test / np.linalg.norm(test, axis=1, keepdims=True)
    return np.sort(t @ b.T, axis=1)[:, ::-1][:, :k].mean(1)


def test_one_class_s_con_matches_a_numpy_reference():
    x, y, tx, ty = data(0)
    out = protocols.one_class(
        ViewSet(feats(x, y)), ViewSet(feats(tx, ty)), [[0], [1], [2]], ["s_con"], Settings(k=5)
    )
    rec = out["detectors"]["s_con"]
    refs = []
    for c in range(3):
        s = np_s_con(x[y == c], tx, 5)
        refs.append(100 * roc_auc_score(ty == c, s))
        assert rec["per_set"][str(c)]["auroc"] == pytest.approx(refs[-1])
        low, high = rec["per_set"][str(c)]["auroc_ci"]
        assert low <= refs[-1] <= high
    assert rec["mean"]["auroc"] == pytest.approx(np.mean(refs))
    low, high = rec["mean"]["auroc_ci"]
    assert low <= np.mean(refs) <= high and high - low < 30


def test_a_normal_set_of_several_classes_is_one_id_set():
    x, y, tx, ty = data(1)
    out = protocols.one_class(ViewSet(feats(x, y)), ViewSet(feats(tx, ty)), [[0, 2]], ["s_con"])
    s = np_s_con(x[np.isin(y, [0, 2])], tx, 5)
    ref = 100 * roc_auc_score(np.isin(ty, [0, 2]), s)
    assert out["detectors"]["s_con"]["per_set"]["0,2"]["auroc"] == pytest.approx(ref)


def test_shift_and_ensemble_average_s_con_over_views():
    rng = np.random.default_rng(3)
    x, y, tx, ty = data(2)
    bank_rot = {
        r: feats(x + 0.1 * r / 90 * rng.standard_normal(x.shape), y) for r in (0, 90, 180, 270)
    }
    test_rot = {r: feats(tx + 0.1 * rng.standard_normal(tx.shape), ty) for r in (0, 90, 180, 270)}
    crops = {
        r: [feats(tx + 0.2 * rng.standard_normal(tx.shape), ty) for _ in range(2)] for r in test_rot
    }
    bank = ViewSet(bank_rot[0], bank_rot)
    test = ViewSet(test_rot[0], test_rot, crops)
    shift = detectors.score("s_shift", bank, test, Settings(k=3))
    ref = np.mean(
        [np_s_con(bank_rot[r].backbone.numpy(), test_rot[r].backbone.numpy(), 3) for r in test_rot],
        0,
    )
    np.testing.assert_allclose(shift.numpy(), ref, atol=1e-6)
    ens = detectors.score("s_ens", bank, test, Settings(k=3))
    ref = np.mean(
        [
            np_s_con(bank_rot[r].backbone.numpy(), c.backbone.numpy(), 3)
            for r in crops
            for c in crops[r]
        ],
        0,
    )
    np.testing.assert_allclose(ens.numpy(), ref, atol=1e-6)


def test_unavailable_detectors_are_skipped_with_a_reason():
    x, y, tx, ty = data(4)
    out = protocols.one_class(
        ViewSet(feats(x, y)), ViewSet(feats(tx, ty)), [[0]], ["s_con", "kappa", "s_shift", "s_ens"]
    )
    assert list(out["detectors"]) == ["s_con"]
    assert "kappa head" in out["skipped"]["kappa"] and "rotat" in out["skipped"]["s_shift"]
    with pytest.raises(ValueError, match="unknown detector"):
        detectors.check(["s_con", "odin"])


def test_kappa_detectors_use_kappa_and_head_features():
    x, y, tx, ty = data(5)
    rng = np.random.default_rng(0)
    kb, kt = rng.random(len(y)) + 0.5, rng.random(len(ty)) + 0.5
    bank, test = ViewSet(feats(x, y, kb)), ViewSet(feats(tx, ty, kt))
    np.testing.assert_allclose(detectors.score("kappa", bank, test, Settings()).numpy(), kt, 1e-6)
    got = detectors.score("knn_kappa", bank, test, Settings(kappa_k=2)).numpy()
    vb = np.c_[x / np.linalg.norm(x, axis=1, keepdims=True), kb]
    vt = np.c_[tx / np.linalg.norm(tx, axis=1, keepdims=True), kt]
    d = np.linalg.norm(vt[:, None] - vb[None], axis=2)
    np.testing.assert_allclose(got, -np.sort(d, 1)[:, 1], atol=1e-5)


def test_id_vs_ood_reports_each_set_and_their_mean():
    x, y, tx, ty = data(6)
    rng = np.random.default_rng(1)
    far = {"a": rng.standard_normal((30, 6)) * 3, "b": rng.standard_normal((20, 6)) + 4}
    ood = {n: ViewSet(feats(v, -np.ones(len(v), np.int64))) for n, v in far.items()}
    out = protocols.id_vs_ood(ViewSet(feats(x, y)), ViewSet(feats(tx, ty)), ood, ["s_con"])
    rec = out["detectors"]["s_con"]
    s_id = np_s_con(x, tx, 5)
    refs = []
    for n, v in far.items():
        s_ood = np_s_con(x, v, 5)
        lab = np.r_[np.ones(len(s_id)), np.zeros(len(s_ood))]
        refs.append(100 * roc_auc_score(lab, np.r_[s_id, s_ood]))
        assert rec["per_set"][n]["auroc"] == pytest.approx(refs[-1])
        assert {"aupr_in", "aupr_out", "fpr95", "fpr95_closest", "auroc_ci"} <= rec["per_set"][
            n
        ].keys()
    assert rec["mean"]["auroc"] == pytest.approx(np.mean(refs))


def test_mean_auroc_difference_of_a_scorer_with_itself_is_zero_and_not_significant():
    rng = np.random.default_rng(0)
    pairs = [(torch.from_numpy(rng.random(20) + 0.3), torch.from_numpy(rng.random(30)))]
    same = summary.mean_auroc_difference(pairs, pairs)
    assert same["difference"] == 0 and same["ci"] == [0.0, 0.0] and not same["excludes_zero"]
    worse = [(torch.from_numpy(rng.random(20)), torch.from_numpy(rng.random(30) + 0.3))]
    d = summary.mean_auroc_difference(pairs, worse)
    a, b = (
        100 * roc_auc_score(np.r_[np.ones(20), np.zeros(30)], np.r_[p[0][0], p[0][1]])
        for p in (pairs, worse)
    )
    assert d["difference"] == pytest.approx(a - b) and d["excludes_zero"]
