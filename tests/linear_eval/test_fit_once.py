"""Detectors fit once per bank: ID-vs-OOD scores every OOD set with one fit,
and the fitted scorer equals the one-shot score function on every set."""

from __future__ import annotations

import pytest
import torch

from linear_eval.detect import detectors, fitted, protocols, scores
from linear_eval.detect.detectors import DEFAULT_SETTINGS, ViewSet
from linear_eval.inputs.features import Features


def feats(n: int, seed: int, shift: float = 0.0, classes: int = 3) -> ViewSet:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g) + shift
    head = torch.nn.functional.normalize(torch.randn(n, 4, generator=g), dim=1)
    return ViewSet(Features(x, head, torch.arange(n) % classes))


@pytest.mark.parametrize("name", ["maha_tied", "maha_global", "maha_per_class", "ocsvm", "s_con"])
def test_fitted_scorer_equals_the_one_shot_score(name):
    bank, sets = feats(60, 0), [feats(20, s, shift=0.5 * s) for s in range(1, 5)]
    scorer = detectors.fit(name, bank, DEFAULT_SETTINGS)
    for test in sets:
        got = scorer(test)
        if name.startswith("maha"):
            want = scores.mahalanobis(bank.plain.backbone, bank.plain.labels, test.plain.backbone,
                                      name.split("_", 1)[1])  # fmt: skip
        elif name == "ocsvm":
            want = scores.ocsvm_score(bank.plain.backbone, test.plain.backbone, nu=0.1)
        else:
            want = scores.knn_score(bank.plain.backbone, test.plain.backbone, 5)
        torch.testing.assert_close(got, want.double().cpu(), rtol=0, atol=0)


def count_calls(monkeypatch, module, attr):
    calls = []
    real = getattr(module, attr)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, attr, counted)
    return calls


def test_id_vs_ood_fits_each_detector_once_for_four_ood_sets(monkeypatch):
    bank, id_test = feats(60, 0), feats(30, 9)
    ood = {f"ood{s}": feats(20, s, shift=1.0) for s in range(1, 5)}
    pinv = count_calls(monkeypatch, torch.linalg, "pinv")
    svm_fits = count_calls(monkeypatch, scores, "ocsvm_fit")
    out = protocols.id_vs_ood(bank, id_test, ood, ["maha_tied", "ocsvm"])
    assert len(pinv) == 1 and len(svm_fits) == 1  # was 1 + 4 each: a refit per OOD set
    assert set(out["detectors"]["maha_tied"]["per_set"]) == set(ood)


def test_openood_maha_fits_once(monkeypatch):
    bank, labels = torch.randn(40, 5), torch.arange(40) % 4
    pinv = count_calls(monkeypatch, torch.linalg, "pinv")
    scorer = fitted.fit("maha_tied", bank, labels)
    for s in range(4):
        scorer(torch.randn(10, 5, generator=torch.Generator().manual_seed(s)))
    assert len(pinv) == 1
