"""The monitor's feature choice: the MoCo CIFAR colab's kNN reads the projection head's
output, ours the pooled backbone; and the colab's per-epoch lr, read with epochs counted from 1."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from pretrain import config
from pretrain.engine import loop
from pretrain.engine.monitor import Taps
from pretrain.metrics.knn import knn_top1
from pretrain.model.encoders import Encoder
from tests.helpers.knn_reference import np_knn


def encoder() -> Encoder:
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Flatten(1), nn.Linear(12, 7), nn.ReLU())
    return Encoder(backbone, nn.Linear(7, 5))


@pytest.mark.parametrize("names", [("head",), ("backbone",), ("head", "backbone")])
def test_taps_cut_back_into_the_encoders_own_outputs(names):
    enc, x = encoder(), torch.randn(9, 3, 2, 2)
    taps = Taps(enc, names)
    parts = taps.split(taps(x))
    h = enc.backbone(x)
    want = {"backbone": h, "head": enc.head(h)}
    assert list(parts) == list(names)
    for n in names:
        torch.testing.assert_close(parts[n], want[n], rtol=0, atol=0)
    # the head tap is the colab's net(x) before F.normalize: same direction as Encoder.forward
    if "head" in names:
        torch.testing.assert_close(
            torch.nn.functional.normalize(parts["head"], dim=1), enc(x), rtol=1e-6, atol=1e-6
        )


def test_head_knn_equals_a_numpy_knn_on_the_head_outputs():
    enc = encoder()
    gen = torch.Generator().manual_seed(1)
    xb, xt = torch.randn(60, 3, 2, 2, generator=gen), torch.randn(20, 3, 2, 2, generator=gen)
    yb, yt = torch.randint(0, 4, (60,), generator=gen), torch.randint(0, 4, (20,), generator=gen)
    taps = Taps(enc, ("backbone", "head"))
    with torch.no_grad():
        bank, test = taps.split(taps(xb)), taps.split(taps(xt))
        head_b, head_t = enc.head(enc.backbone(xb)), enc.head(enc.backbone(xt))
    got = knn_top1(bank["head"], yb, test["head"], yt, 10, 0.1, 4)
    pred = np_knn(head_b.double().numpy(), yb.numpy(), head_t.double().numpy(), 10, 0.1, 4)
    assert got == pytest.approx(100.0 * float(np.mean(pred == yt.numpy())), abs=1e-4)


def test_taps_refuse_an_unknown_feature():
    with pytest.raises(ValueError, match="backbone.*head"):
        Taps(encoder(), ("pool5",))


def test_knn_features_and_lr_first_epoch_are_checked_by_the_config():
    with pytest.raises(config.ConfigError, match="eval.knn_features.*did you mean 'head'"):
        config.load("digits_moco.yaml", ["eval.knn_features=haed"])
    with pytest.raises(config.ConfigError, match="train.lr_first_epoch"):
        config.load("digits_moco.yaml", ["train.lr_first_epoch=2"])
    with pytest.raises(config.ConfigError, match="train.lr_first_epoch"):
        config.load("digits_moco.yaml", ["train.lr_first_epoch=1", "train.warmup_epochs=1"])


@pytest.mark.parametrize("first", [0, 1])
def test_per_epoch_lr_follows_the_colab_with_epochs_counted_from_one(first):
    """colab: lr = 0.06 * 0.5 * (1 + cos(pi * epoch / 200)) set at the start of epoch 1, 2, ...;
    main_moco.py counts from 0. Its log prints lr 0.059996 in epoch 1 and 0.059631 in epoch 10."""
    cfg = config.load("cifar10_moco.yaml", [f"train.lr_first_epoch={first}"])
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    run = SimpleNamespace(cfg=cfg, derived=SimpleNamespace(lr=0.06), optimizer=opt)
    for epoch in range(12):  # 0-based epoch index as the trainer counts, at a mid-epoch step
        lr = loop.set_lr(run, epoch + 0.37)
        want = 0.06 * 0.5 * (1 + math.cos(math.pi * (epoch + first) / 200))
        assert lr == pytest.approx(want, rel=1e-12) and opt.param_groups[0]["lr"] == lr
    if first == 1:
        assert round(loop.set_lr(run, 0.0), 6) == 0.059996
        assert round(loop.set_lr(run, 9.5), 6) == 0.059631
