"""The SGD probes follow their step-decay schedule as written and record what ran: both probes
against an SGD re-derived here (lr x0.1 at the start of each milestone epoch, stepped once per
epoch, momentum 0.9), the default command's JSON holding the milestones and the lr the optimizer
held, and ``--milestones`` with no value refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from linear_eval.__main__ import main
from linear_eval.classify import probe
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.troubleshooting_quotes import assert_documented

N, FEAT, C, BATCH, EPOCHS, LR, MILESTONES = 24, 5, 3, 8, 4, 0.5, (1, 3)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(N, FEAT, generator=g), torch.arange(N) % C


def expected_lr(epoch: int) -> float:
    return LR * 0.1 ** sum(m <= epoch for m in MILESTONES)


def reference(x: torch.Tensor, y: torch.Tensor, orders: list[torch.Tensor], seed: int,
              momentum: float = 0.9) -> tuple:  # fmt: skip
    """Plain SGD with momentum in PyTorch's form (buf = g at the first step, then
    buf = momentum buf + g; p -= lr buf), the lr of :func:`expected_lr` in each epoch, on the
    softmax cross-entropy gradient written out; the probe's N(0, 0.01) weights, zero bias."""
    torch.manual_seed(seed)
    nn.Linear(FEAT, C)  # the probe builds nn.Linear (drawing its default init), then re-draws
    w = torch.empty(C, FEAT).normal_(0.0, 0.01).double()
    b = torch.zeros(C, dtype=torch.float64)
    bw = bb = None
    for epoch, order in enumerate(orders):
        lr = expected_lr(epoch)
        for idx in order.split(BATCH):
            xi = x[idx].double()
            p = torch.softmax(xi @ w.T + b, 1)
            p[torch.arange(len(idx)), y[idx]] -= 1
            gw, gb = p.T @ xi / len(idx), p.mean(0)
            bw = gw if bw is None else momentum * bw + gw
            bb = gb if bb is None else momentum * bb + gb
            w, b = w - lr * bw, b - lr * bb
    return w, b


@pytest.mark.parametrize("momentum", [0.9, 0.5])
def test_features_probe_is_sgd_with_per_epoch_step_decay(momentum, monkeypatch):
    monkeypatch.setattr(probe, "MOMENTUM", momentum)  # what the record reports is what ran
    x, y = data()
    g = torch.Generator().manual_seed(7)
    orders = [torch.randperm(N, generator=g) for _ in range(EPOCHS)]
    log: list[float] = []
    fc = probe.train_on_features(x, y, C, epochs=EPOCHS, lr=LR, milestones=MILESTONES,
                                 batch_size=BATCH, seed=7, lr_log=log)  # fmt: skip
    w, b = reference(x, y, orders, seed=7, momentum=momentum)
    torch.testing.assert_close(fc.weight.detach().double(), w, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(fc.bias.detach().double(), b, atol=1e-5, rtol=1e-4)
    assert log == pytest.approx([expected_lr(e) for e in range(EPOCHS)])
    assert probe.lr_changes(log) == pytest.approx({"0": LR, "1": LR * 0.1, "3": LR * 0.01})


def test_images_probe_is_sgd_with_per_epoch_step_decay():
    x, y = data()
    loader = DataLoader(TensorDataset(x.view(N, 1, FEAT), y), batch_size=BATCH)  # in order
    log: list[float] = []
    fc = probe.train_on_images(nn.Flatten(), loader, C, FEAT, torch.device("cpu"), epochs=EPOCHS,
                               lr=LR, milestones=MILESTONES, seed=2, lr_log=log)  # fmt: skip
    w, b = reference(x, y, [torch.arange(N)] * EPOCHS, seed=2)
    torch.testing.assert_close(fc.weight.detach().double(), w, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(fc.bias.detach().double(), b, atol=1e-5, rtol=1e-4)
    assert log == pytest.approx([expected_lr(e) for e in range(EPOCHS)])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("run"))


@pytest.mark.parametrize("mode", ["features", "images"])
def test_default_command_records_the_schedule_that_ran(ckpt, mode, capsys, monkeypatch):
    monkeypatch.setattr(probe, "MOMENTUM", 0.8)
    code = main(["--ckpt", str(ckpt), "--probe", mode, "--epochs", "3", "--lr", "0.5",
                 "--milestones", "1", "2", "--probe-batch-size", "512", "--no-cache"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    lin = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["linear"]
    assert lin["mode"] == mode and lin["milestones"] == [1, 2] and lin["momentum"] == 0.8
    assert lin["batch_size"] == 512  # --probe-batch-size; --batch-size is the extraction batch
    assert lin["lr_by_epoch"] == pytest.approx({"0": 0.5, "1": 0.05, "2": 0.005})


@pytest.mark.parametrize(
    "bad",
    [[], ["0"], ["3", "2"], ["2", "2"]],
    ids=["no-value", "zero", "unsorted", "repeated"],
)
def test_milestones_that_would_not_run_as_written_are_refused(ckpt, bad, capsys):
    assert main(["--ckpt", str(ckpt), "--milestones", *bad]) == 2
    err = capsys.readouterr().err.strip()
    assert "--milestones" in err
    assert_documented(err.removeprefix("error: "))


def test_lbfgs_records_the_held_out_fraction_it_used():
    from linear_eval.classify import logreg

    x, y = data()
    _, info = logreg.train(x, y, C, val_fraction=0.25, seed=0)
    assert info["val_fraction"] == 0.25 and info["val_size"] == C * int(0.25 * N / C)


def test_recorded_settings_are_the_constants_the_code_runs_with(ckpt, monkeypatch):
    """No literal copies of settings in the records (they would go stale)."""
    from linear_eval.detect import fitted
    from linear_eval.inputs.session import Options, Session
    from linear_eval.records import summary

    monkeypatch.setattr(summary, "N_RESAMPLES", 77)
    monkeypatch.setattr(summary, "LEVEL", 0.9)
    header = Session(ckpt, Options(cache=False)).header("linear")
    assert header["intervals"].startswith("bootstrap 90%, 77 resamples")
    assert f"K={fitted.KNN_K}," in fitted.DESCRIPTIONS["knn"]
    assert f"top-{fitted.S_CON_K} " in fitted.DESCRIPTIONS["s_con"]


def test_lr_by_epoch_holds_epoch_0_when_the_lr_never_changes():
    """V08: without ``e == 0`` the first epoch is compared with the last one (``lr_log[-1]``),
    and a constant lr records no epoch at all."""
    from linear_eval.classify import probe

    assert probe.lr_changes([0.1, 0.1, 0.1]) == {"0": 0.1}
    assert probe.lr_changes([0.1, 0.01, 0.1]) == {"0": 0.1, "1": 0.01, "2": 0.1}
