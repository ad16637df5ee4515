"""Limited labels: stratified seeded draws, skipped counts, and the per-draw accuracies against a
numpy nearest-centroid re-derivation (the probe is swapped for that classifier)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from linear_eval.classify import limited, probe
from pretrain.data.loaders import sample_seed


def data(seed: int = 0, per_class: tuple[int, ...] = (30, 25, 12)):
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.full(n, c) for c, n in enumerate(per_class)])
    centres = rng.standard_normal((len(per_class), 5)) * 1.2
    x = centres[y] + rng.standard_normal((len(y), 5))
    ty = np.arange(60) % len(per_class)
    tx = centres[ty] + rng.standard_normal((60, 5))
    return (torch.from_numpy(a) for a in (x, y, tx, ty))


def test_draw_takes_k_distinct_images_of_every_class_reproducibly():
    _, y, _, _ = data()
    idx = limited.draw(y, 10, seed=3)
    assert len(set(idx.tolist())) == 30
    assert np.bincount(y[idx].numpy()).tolist() == [10, 10, 10]
    assert torch.equal(idx, limited.draw(y, 10, seed=3))
    assert not torch.equal(idx, limited.draw(y, 10, seed=4))
    with pytest.raises(ValueError, match="smallest class has 12"):
        limited.draw(y, 13, seed=0)


def nearest_centroid(train_x, train_y, test_x, num_classes, recipe, seed):
    """Stand-in probe: scores = −distance to each class mean."""
    means = torch.stack([train_x[train_y == c].mean(0) for c in range(num_classes)])
    return -torch.cdist(test_x, means), {}


def test_rows_are_the_accuracies_of_each_draw(monkeypatch):
    x, y, tx, ty = data()
    monkeypatch.setattr(probe, "fit_predict", nearest_centroid)
    out = limited.evaluate(x, y, tx, ty, 3, probe.PROTOCOLS["lbfgs"], [5, 10, 25, 50], draws=3)
    assert out["skipped"] == [25, 50] and "smallest training class (12" in out["note"]
    assert [r["labels_per_class"] for r in out["rows"]] == [5, 10]
    xn, yn, txn, tyn = (a.numpy() for a in (x, y, tx, ty))
    for row in out["rows"]:
        n, ref = row["labels_per_class"], []
        for d in range(3):
            idx = limited.draw(y, n, sample_seed(0, n, d, stream=4)).numpy()
            means = np.stack([xn[idx][yn[idx] == c].mean(0) for c in range(3)])
            pred = np.argmin(((txn[:, None] - means[None]) ** 2).sum(-1), 1)
            ref.append(100 * np.mean(pred == tyn))
        np.testing.assert_allclose(row["accuracies"], ref)
        assert row["top1"] == pytest.approx(np.mean(ref))
        assert row["top1_std"] == pytest.approx(np.std(ref, ddof=1))
        low, high = row["top1_ci"]
        assert low <= row["top1"] <= high


def test_lbfgs_probe_with_few_labels_runs_end_to_end():
    x, y, tx, ty = data(seed=1)
    out = limited.evaluate(x, y, tx, ty, 3, probe.PROTOCOLS["lbfgs"], [10], draws=2)
    assert out["rows"][0]["runs"] == 2 and 33 < out["rows"][0]["top1"] <= 100
    assert "note" not in out
