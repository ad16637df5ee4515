"""Linear probes: the frozen backbone and its BatchNorm statistics stay exactly as in the checkpoint
file after training; the L-BFGS logistic regression against scikit-learn; the seed protocols."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from linear_eval.classify import evaluate as classification
from linear_eval.classify import logreg, probe
from linear_eval.inputs.session import Options, Session
from pretrain.model.encoders import backbone as make_backbone
from tests.helpers.fakeckpt import make_checkpoint


def bn_backbone() -> nn.Module:
    torch.manual_seed(0)
    net = make_backbone("resnet_small", width=8, cifar_stem=True)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return net


def image_loader(n: int = 24) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, 16, 16, generator=g)
    return DataLoader(TensorDataset(x, torch.arange(n) % 3), batch_size=8)


def test_images_probe_leaves_backbone_and_bn_statistics_unchanged():
    net = bn_backbone().train()  # handed over in train mode: the probe must switch to eval
    before = {k: v.clone() for k, v in net.state_dict().items()}
    fc = probe.train_on_images(
        net, image_loader(), 3, net.feature_dim, torch.device("cpu"), epochs=2, lr=0.1, seed=0
    )
    after = net.state_dict()
    assert before.keys() == after.keys()
    assert any(k.endswith("running_var") for k in after)
    for k, v in before.items():
        assert torch.equal(v, after[k]), k  # running_mean/var and num_batches_tracked included
    assert not any(p.requires_grad for p in net.parameters())
    assert fc.weight.abs().sum() > 0


class _SneakyTrain(nn.Module):
    """A backbone that switches itself to training mode: BatchNorm statistics then move."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net, self.feature_dim = net, net.feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.net.train()
        return self.net(x)


def test_images_probe_detects_a_backbone_that_changed():
    net = _SneakyTrain(bn_backbone())
    with pytest.raises(RuntimeError, match="frozen backbone changed"):
        probe.train_on_images(net, image_loader(), 3, net.feature_dim, torch.device("cpu"), 1)


def test_linear_command_on_images_keeps_the_checkpoint_weights(tmp_path, monkeypatch):
    ckpt = make_checkpoint(tmp_path)
    short = probe.Protocol("moco", epochs=1, lr=1.0, milestones=(1,), batch_size=256)
    monkeypatch.setitem(probe.PROTOCOLS, "moco", short)
    sess = Session(ckpt, Options(cache=False))
    record = classification.run_linear(sess, "moco", seeds=[0], mode="images")
    saved = torch.load(ckpt, weights_only=True)["model"]  # the file on disk, read independently
    own = sess.model.encoder.state_dict()
    for k, v in own.items():
        assert torch.equal(v, saved[f"encoder_q.{k}"]), k
    assert "BatchNorm" in record["frozen_check"] and 0 <= record["top1"] <= 100


def blobs(seed: int, n: int = 120, f: int = 6, c: int = 3, spread: float = 1.0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((c, f)) * 2
    y = np.arange(n) % c
    x = centres[y] + spread * rng.standard_normal((n, f)) + rng.uniform(-3, 3, f)  # offset
    return x * rng.uniform(0.5, 4, f), y  # unequal scales: the standardisation matters


@pytest.mark.parametrize("l2", [1e-3, 1e-1])
def test_lbfgs_fit_matches_sklearn_logistic_regression(l2):
    x, y = blobs(seed=int(l2 * 1000), spread=2.0)
    xs = (x - x.mean(0)) / x.std(0)
    w, b = logreg.fit(torch.from_numpy(xs), torch.from_numpy(y), 3, l2, tolerance=1e-10)
    ref = LogisticRegression(C=1.0 / (l2 * len(y)), tol=1e-12, max_iter=10_000).fit(xs, y)
    np.testing.assert_allclose(w.numpy(), ref.coef_, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), ref.intercept_, atol=1e-5)


def test_lbfgs_train_folds_the_standardisation_and_picks_the_best_held_out_l2():
    x, y = blobs(seed=3, spread=2.5)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    fc, info = logreg.train(xt, yt, 3, seed=0)
    # the chosen λ is a best held-out accuracy; ties go to the larger λ
    accs = {float(k): v for k, v in info["val_accuracy"].items()}
    best = max(accs.values())
    assert info["l2"] == max(l2 for l2, a in accs.items() if a == best)
    # refit on everything with that λ, as sklearn does on the standardised features
    mean, std = x.mean(0), x.std(0)
    ref = LogisticRegression(C=1.0 / (info["l2"] * len(y)), tol=1e-12, max_iter=10_000)
    ref.fit((x - mean) / std, y)
    np.testing.assert_allclose(
        fc(xt).numpy(), ref.decision_function((x - mean) / std), atol=2e-3, rtol=1e-3
    )
    # held-out accuracies equal sklearn's on the same split
    keep, held = logreg.stratified_split(yt, logreg.VAL_FRACTION, 0)
    k, h = keep.numpy(), held.numpy()
    m, s = x[k].mean(0), x[k].std(0)
    for l2, acc in accs.items():
        clf = LogisticRegression(C=1.0 / (l2 * k.sum()), tol=1e-12, max_iter=10_000)
        clf.fit((x[k] - m) / s, y[k])
        assert acc == pytest.approx(100 * clf.score((x[h] - m) / s, y[h]), abs=100 / h.sum() + 1e-9)


def test_stratified_split_and_within_class_rank():
    y = torch.tensor([0] * 10 + [1] * 7 + [2] * 1)
    keep, held = logreg.stratified_split(y, 0.2, seed=4)
    assert (keep ^ held).all()
    assert [int(held[y == c].sum()) for c in range(3)] == [2, 1, 0]  # floor(0.2 n_c)
    rank = logreg.within_class_rank(y, torch.Generator().manual_seed(0))
    for c in range(3):
        assert sorted(rank[y == c].tolist()) == list(range(int((y == c).sum())))
    again = logreg.stratified_split(y, 0.2, seed=4)[1]
    assert torch.equal(again, held)


def test_protocol_presets_are_the_published_recipes():
    p = probe.PROTOCOLS
    assert (p["mioc"].epochs, p["mioc"].lr, p["mioc"].milestones) == (60, 10.0, (30, 40, 50))
    assert (p["transfer"].epochs, p["transfer"].lr, p["transfer"].milestones) == (
        100,
        3.0,
        (50, 70, 90),
    )
    assert p["transfer"].batch_size == 128
    assert (p["moco"].epochs, p["moco"].lr, p["moco"].milestones) == (100, 30.0, (60, 80))
    assert p["lbfgs"].solver == "lbfgs"
    with pytest.raises(ValueError, match="unknown linear protocol"):
        probe.protocol("simclr")


def test_sgd_fit_predict_learns_separable_blobs():
    x, y = blobs(seed=5, spread=0.3)
    x = torch.from_numpy((x - x.mean(0)) / x.std(0)).float()
    recipe = probe.Protocol("t", epochs=15, lr=0.5, milestones=(10,), batch_size=32)
    scores, _ = probe.fit_predict(x, torch.from_numpy(y), x, 3, recipe, seed=0)
    assert (scores.argmax(1).numpy() == y).mean() > 0.95
