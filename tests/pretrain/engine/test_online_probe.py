"""The online linear probe (eval.online_probe): no gradient into the encoder, accuracies equal a
numpy re-derivation, in the checkpoint, and a stopped + resumed run replays it exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from negmine_core.step import Batch
from pretrain import config
from pretrain.config import ConfigError
from pretrain.engine import loop
from pretrain.engine.online_probe import OnlineProbe

TINY = [
    "model.width=8",
    "model.bn_splits=2",
    "train.batch_size=32",
    "moco.queue_size=64",
    "train.deterministic=true",
    "train.log_every=5",
    "eval.knn_every=0",
    "data.num_workers=0",
    "train.epochs=2",
]


def test_probe_step_and_accuracies_equal_numpy():
    torch.manual_seed(0)
    probe = OnlineProbe(feature_dim=6, num_classes=3, lr=0.5)
    x = torch.randn(10, 6)
    y = torch.tensor([0, 1, 2, -1, 1, 0, -2, 2, 1, 0])  # negatives: unlabelled / outliers
    w0, b0 = probe.fc.weight.detach().numpy().copy(), probe.fc.bias.detach().numpy().copy()
    probe.train_step(x, y)
    xn, yn = x.numpy().astype(np.float64), y.numpy()
    keep = yn >= 0
    logits = xn @ w0.T + b0
    assert probe.correct.item() == (logits.argmax(1)[keep] == yn[keep]).sum()
    assert probe.seen.item() == keep.sum()
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.eye(3)[np.clip(yn, 0, None)]
    grad_logits = (p - onehot) * keep[:, None] / keep.sum()  # mean CE over labelled rows
    w1 = w0 - 0.5 * grad_logits.T @ xn  # SGD, first step: momentum buffer = gradient
    np.testing.assert_allclose(probe.fc.weight.detach().numpy(), w1, rtol=1e-5, atol=1e-6)
    top = probe.take_train_top1()
    assert top == pytest.approx(100 * (logits.argmax(1)[keep] == yn[keep]).mean())
    assert probe.seen.item() == 0  # reset for the next epoch
    held = torch.randn(7, 6)
    labels = torch.tensor([0, 1, 2, 0, -1, 2, 1])
    pred = held.numpy() @ probe.fc.weight.detach().numpy().T + probe.fc.bias.detach().numpy()
    ok = labels.numpy() >= 0
    expected = 100 * (pred.argmax(1)[ok] == labels.numpy()[ok]).mean()
    assert probe.top1(held, labels) == pytest.approx(expected)


def test_no_gradient_reaches_the_encoder(tmp_path):
    runs = {}
    for flag in ("false", "true"):
        cfg = config.load(
            "digits_moco.yaml", [f"out_dir={tmp_path / flag}", *TINY, f"eval.online_probe={flag}"]
        )
        run = loop.setup(cfg)
        batches = iter(run.data.train_loader)
        for _ in range(3):
            x1, x2, y, _, *rows = next(batches)
            loop.train_step(run, Batch.make(x1, x2, y, rows), 0.5)
        runs[flag] = run
    assert runs["false"].probe is None and runs["true"].probe is not None
    a, b = runs["false"].moco.state_dict(), runs["true"].moco.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert runs["true"].probe.seen.item() == 3 * 32  # every digits image is labelled


def epochs(out):
    rows = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "epoch"]


def test_stopped_and_resumed_run_replays_the_probe_exactly(tmp_path, capsys):
    full, cut = tmp_path / "full", tmp_path / "cut"
    args = [*TINY, "eval.online_probe=true"]
    assert loop.main(config.load("digits_moco.yaml", [f"out_dir={full}", *args])) == 0
    stop = [f"out_dir={cut}", *args, "train.max_steps=60"]  # mid epoch 2 (44 steps per epoch)
    assert loop.main(config.load("digits_moco.yaml", stop)) == 0
    mid = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    assert mid["step_in_epoch"] == 16 and mid["online_probe"]["module"]["seen"].item() == 16 * 32
    with pytest.raises(ConfigError, match="eval.online_probe"):  # the probe cannot be dropped
        loop.main(config.load("digits_moco.yaml", [f"out_dir={cut}", *TINY]))
    assert loop.main(config.load("digits_moco.yaml", [f"out_dir={cut}", *args])) == 0
    a = torch.load(full / "checkpoints" / "last.pt", weights_only=True)["online_probe"]
    b = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)["online_probe"]
    for k in a["module"]:
        assert torch.equal(a["module"][k], b["module"][k]), k
    ma, mb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert all(torch.equal(ma[i]["momentum_buffer"], mb[i]["momentum_buffer"]) for i in ma)
    ea, eb = epochs(full), epochs(cut)
    assert [r["online_train_top1"] for r in ea] == [r["online_train_top1"] for r in eb]
    assert [r["online_test_top1"] for r in ea] == [r["online_test_top1"] for r in eb]
    assert ea[-1]["online_test_top1"] > 30  # it learns (10 classes: chance is 10)
    assert "online_test_top1=" in capsys.readouterr().out
