"""End-to-end trainer tests: exact resume after SIGTERM, smoke run + evaluation, failure paths."""

from __future__ import annotations

import json
import math
import signal
import time

import pytest
import torch

from pretrain import build, config, losses
from pretrain.engine import loop
from tests.helpers import inproc
from tests.helpers.runs import TINY, lines, pretrain, tensors

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)


# digits turns the photometric ops off; the device path is tested with all of them on.
PHOTOMETRIC = ["data.jitter_strength=0.4", "data.grayscale_prob=0.2", "data.blur_prob=0.5",
               "data.hflip_prob=0.5"]  # fmt: skip


# the per-sample reference path (workers) is slow (70 s) and its replay is the same sampler and
# per-sample generators: run with --runslow; the DDP test covers that path in CI
@pytest.mark.parametrize("augment_on", ["device", pytest.param("workers", marks=pytest.mark.slow)])
def test_sigterm_mid_epoch_then_resume_equals_uninterrupted(tmp_path, augment_on):
    # half of each class (22 steps an epoch): the replay crosses an epoch all the same
    epochs = ["train.epochs=2", f"data.augment_on={augment_on}", "data.subset=0.5", *PHOTOMETRIC]
    full, cut = tmp_path / "full", tmp_path / "cut"
    done = pretrain(full, *epochs)
    assert done.returncode == 0, done.stderr

    proc = pretrain(cut, *epochs, wait=False)
    steps = lines(full, "epoch")[0]["global_step"]  # steps in an epoch
    assert 15 < steps < 1437 // 32, steps
    deadline = time.time() + 240
    while time.time() < deadline:  # SIGTERM once a few steps of epoch 2 are logged
        m = cut / "metrics.jsonl"
        if m.exists() and any(r["global_step"] >= steps + 3 for r in lines(cut, "step")):
            break
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "SIGTERM: checkpoint saved" in out
    mid = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    assert mid["epoch"] == 1 and 0 < mid["step_in_epoch"] < steps, (
        mid["epoch"],
        mid["step_in_epoch"],
    )

    resumed = pretrain(cut, *epochs, process=True)  # a fresh process: all it has is the checkpoint
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming at epoch 2" in resumed.stdout

    a = torch.load(full / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(cut / "checkpoints" / "last.pt", weights_only=True)
    ta = tensors({k: a[k] for k in ("model", "queue", "optimizer", "epoch_stats")})
    tb = tensors({k: b[k] for k in ("model", "queue", "optimizer", "epoch_stats")})
    assert ta.keys() == tb.keys() and len(ta) > 50
    worst = max((ta[k].double() - tb[k].double()).abs().max().item() for k in ta if ta[k].numel())
    assert worst <= 1e-6
    assert torch.equal(a["queue"]["ptr"], b["queue"]["ptr"])
    assert torch.equal(a["queue"]["labels"], b["queue"]["labels"])
    ea, eb = lines(full, "epoch"), lines(cut, "epoch")
    assert [r["epoch"] for r in eb] == [1, 2]  # no duplicate lines after the replay
    for ra, rb in zip(ea, eb):
        assert abs(ra["loss"] - rb["loss"]) <= 1e-6 and abs(ra["knn_top1"] - rb["knn_top1"]) <= 1e-6
    assert [r["global_step"] for r in lines(cut, "step")] == list(range(1, 2 * steps + 1))


def test_smoke_run_writes_run_dir_and_evaluates(tmp_path):
    run = tmp_path / "run"  # python -m pretrain as a user runs it, then its evaluation
    done = pretrain(run, "train.epochs=1", "model.bn_splits=1", process=True)
    assert done.returncode == 0, done.stderr
    for name in ("config.yaml", "derived.yaml", "metrics.jsonl", "checkpoints/last.pt"):
        assert (run / name).exists(), name
    assert any((run / "tensorboard").iterdir())
    saved = config.load(str(run / "config.yaml"))  # the resolved config loads back as a config
    assert saved.model.width == 8 and saved.train.epochs == 1
    derived = (run / "derived.yaml").read_text()
    assert "steps_per_epoch: 44" in derived and "lr: 0.03" in derived  # 0.06 * 32 / 64
    epoch = lines(run, "epoch")[-1]
    assert epoch["epoch"] == 1 and 0 <= epoch["knn_top1"] <= 100
    step = lines(run, "step")[0]
    assert {"loss", "lr", "images_per_s", "step_time_s"} <= step.keys()

    ev = inproc.linear_eval("--ckpt", str(run / "checkpoints/last.pt"), "--epochs", "5",
                            "--milestones", "3", "4")  # fmt: skip
    assert ev.returncode == 0, ev.stderr
    result = json.loads(ev.stdout.strip().splitlines()[-1])
    # the evaluator's kNN is the monitor's computation on the same checkpoint
    assert result["knn_top1"] == pytest.approx(epoch["knn_top1"], abs=1e-9)
    assert 10 < result["linear_top1"] <= 100
    assert (run / "eval" / "linear_eval.json").exists()

    again = pretrain(run, "train.epochs=1", "model.bn_splits=1")  # finished run: nothing to do
    assert again.returncode == 0 and len(lines(run, "epoch")) == 1


def test_resume_with_different_config_is_refused(tmp_path):
    run = tmp_path / "run"
    assert pretrain(run, "train.epochs=1").returncode == 0
    bad = pretrain(run, "train.epochs=1", "moco.temperature=0.5")
    assert bad.returncode == 2
    assert "moco.temperature" in bad.stderr and "different config" in bad.stderr


@pytest.mark.slow  # 37 s: an older checkpoint format (--runslow)
def test_checkpoint_from_before_augment_on_resumes_on_the_per_sample_path(tmp_path):
    """A run saved before data.augment_on existed used the per-sample path: resuming it with the
    new default would change its augmentation, so that is refused and workers is accepted."""
    run = tmp_path / "run"
    assert pretrain(run, "train.epochs=1").returncode == 0
    last = run / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    del state["config"]["data"]["augment_on"]
    torch.save(state, last)
    bad = pretrain(run, "train.epochs=2")
    assert bad.returncode == 2 and "data.augment_on" in bad.stderr, bad.stderr
    good = pretrain(run, "train.epochs=2", "data.augment_on=workers", "eval.knn_every=0")
    assert good.returncode == 0, good.stderr
    assert "resuming at epoch 2" in good.stdout


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"PK\x03\x04 not really a zip")
    bad = pretrain(run, "train.epochs=1")
    assert bad.returncode == 1
    assert "corrupt" in bad.stderr and "Traceback" not in bad.stderr
    ev = inproc.linear_eval("--ckpt", str(run / "checkpoints/last.pt"))
    assert ev.returncode == 1 and "corrupt" in ev.stderr and "Traceback" not in ev.stderr


class _NaNAfter(losses.InfoNCE):
    """InfoNCE that returns NaN from global step ``bad_step`` on."""

    def __init__(self, temperature: float, bad_step: int) -> None:
        super().__init__(temperature)
        self.bad_step, self.calls = bad_step, 0

    def forward(self, step: losses.Step) -> torch.Tensor:
        self.calls += 1
        loss = super().forward(step)
        return loss * float("nan") if self.calls > self.bad_step else loss


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    steps = 1437 // 32
    monkeypatch.setattr(
        build, "loss_fn", lambda cfg, n=0: _NaNAfter(cfg.moco.temperature, steps + 2)
    )
    cfg = config.load(
        "digits_moco.yaml",
        [f"out_dir={tmp_path}", *TINY, "train.epochs=3", "train.log_every=5", "eval.knn_every=0"],
    )
    assert loop.main(cfg) == 1
    err = capsys.readouterr().err
    assert "non-finite loss" in err and "last good state" in err
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    assert state["epoch"] == 1 and state["step_in_epoch"] == 0  # the end of epoch 1, before NaN
    assert all(torch.isfinite(t).all() for t in tensors(state["model"]).values())


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGUSR2, 0), (signal.SIGINT, 130)])
def test_preemption_signal_and_ctrl_c_save_at_the_current_step(tmp_path, sig, status):
    proc = pretrain(tmp_path, "train.epochs=1", "eval.knn_every=0", wait=False)
    deadline = time.time() + 120
    while time.time() < deadline:
        m = tmp_path / "metrics.jsonl"
        if m.exists() and len(lines(tmp_path, "step")) >= 3:
            break
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert f"{signal.Signals(sig).name}: checkpoint saved" in out
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    assert state["epoch"] == 0 and state["step_in_epoch"] == state["global_step"] >= 3
    assert state["step_in_epoch"] == lines(tmp_path, "step")[-1]["global_step"]


@pytest.mark.cuda
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_cuda_amp_channels_last_split_bn_epoch(tmp_path, amp, on_cuda):
    done = pretrain(
        tmp_path,
        "train.epochs=1",
        f"train.amp={amp}",
        "train.channels_last=true",
        "train.deterministic=false",
    )
    assert done.returncode == 0, done.stderr
    assert "on cuda" in done.stdout
    epoch = lines(tmp_path, "epoch")[-1]
    assert math.isfinite(epoch["loss"]) and epoch["loss"] < math.log(64 + 1) + 1
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    assert bool(state["scaler"]) == (amp == "fp16")  # only fp16 uses (and saves) a GradScaler
