"""The CUDA-only and multi-rank faults, each emulated on a CPU in one process:
resume onto a device, channels_last gather, fp16 scaler from a CPU run, process-group timeout,
exit after a finished run, world-size config rules, the stop signal in an epoch's last step."""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys

import pytest
import torch

from pretrain import config
from pretrain.config import ConfigError
from pretrain.engine import checkpoint, loop, monitor, world
from pretrain.runtime import dist
from tests.helpers.paths import ROOT

TINY = [
    "model.width=8",
    "model.bn_splits=2",
    "train.batch_size=32",
    "moco.queue_size=64",
    "train.progress_bar=false",
    "train.log_every=5",
    "eval.knn_every=0",
    "data.num_workers=0",
    "train.epochs=1",
]


def nccl_like_all_gather(outs: list[torch.Tensor], x: torch.Tensor) -> None:
    """All-gather over 2 fake ranks (rank r sends x + r) that copies raw memory as NCCL does:
    the sent buffer's bytes land in each output's storage in storage order, whatever its
    strides."""
    for r, o in enumerate(outs):
        sent = (x + r).contiguous() if x.is_contiguous() else x + r  # raw bytes of what is sent
        raw = sent.as_strided((sent.numel(),), (1,))
        o.as_strided((o.numel(),), (1,)).copy_(raw)


@pytest.mark.parametrize("fn", ["gather", "gather_with_grad"])
def test_gather_of_channels_last_images_keeps_values_and_layout(monkeypatch, fn):
    monkeypatch.setattr(dist, "is_on", lambda: True)
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(dist.td, "all_gather", nccl_like_all_gather)
    x = torch.randn(3, 4, 5, 6).contiguous(memory_format=torch.channels_last)
    full = getattr(dist, fn)(x)
    torch.testing.assert_close(full, torch.cat([x, x + 1]), rtol=0, atol=0)
    assert full.is_contiguous(memory_format=torch.channels_last)  # the input's layout
    flat = torch.randn(4, 3)
    assert getattr(dist, fn)(flat).is_contiguous()


def test_scaler_state_of_a_cpu_run_loads_into_an_enabled_fp16_scaler():
    """A run started on a CPU saves a disabled GradScaler ({}); resumed on CUDA with amp fp16
    the scaler is enabled and must start at its initial scale instead of failing."""
    saved = torch.amp.GradScaler("cpu", enabled=False).state_dict()
    assert saved == {}
    enabled = torch.amp.GradScaler("cpu", enabled=True)
    checkpoint.load_scaler(enabled, saved)
    assert enabled.is_enabled() and enabled.get_scale() == 65536.0
    used = torch.amp.GradScaler("cpu", enabled=True, init_scale=8.0).state_dict()
    checkpoint.load_scaler(enabled, used)  # a real state still loads
    assert enabled.get_scale() == 8.0
    checkpoint.load_scaler(torch.amp.GradScaler("cpu", enabled=False), used)  # GPU -> CPU


def test_process_group_timeout_comes_from_the_config(monkeypatch):
    seen = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_on", lambda: False)  # the fake group is never used
    monkeypatch.setattr(dist.td, "init_process_group", lambda *a, **k: seen.update(k))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    dist.init_from_env(timeout_min=90.0)
    assert seen["timeout"] == datetime.timedelta(minutes=90)
    assert config.Config().train.dist_timeout_min == 60.0  # > NCCL's 10 minutes
    with pytest.raises(ConfigError, match="train.dist_timeout_min"):
        config.load("digits_moco.yaml", ["train.dist_timeout_min=0"])

    def fake_init(timeout_min=None):  # loop.setup passes the config's value
        seen["setup"] = timeout_min
        raise RuntimeError("stop here")

    monkeypatch.setattr(dist, "init_from_env", fake_init)
    cfg = config.load("digits_moco.yaml", ["train.dist_timeout_min=33"])
    with pytest.raises(RuntimeError, match="stop here"):
        loop.setup(cfg)
    assert seen["setup"] == 33.0


def test_finished_multi_rank_process_exits_with_its_status_despite_a_teardown_abort(tmp_path):
    """Emulates the rare gloo abort at interpreter teardown (an atexit handler that aborts):
    ``dist.finish`` destroys the group and leaves with os._exit, so the status is 0."""
    code = (
        "import atexit, os, socket, torch.distributed as td\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
        "td.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=0, "
        "world_size=1)\n"
        "atexit.register(os.abort)  # what a joinable C++ thread at exit amounts to\n"
        "from pretrain.runtime import dist\n"
        "print('done', flush=True)\n"
        "dist.finish(0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"


def test_world_rules_for_batch_and_bn_splits():
    cfg = config.load("digits_moco.yaml", ["train.batch_size=48", "model.bn_splits=16"])
    world.check(cfg, 1)  # 48 / 16 = 3 images per split: fine in one process
    with pytest.raises(ConfigError, match="model.bn_splits.*per-rank batch.*24"):
        world.check(cfg, 2)  # the config alone passes; 24 per rank do not split in 16
    with pytest.raises(ConfigError, match="train.batch_size.*5 ranks"):
        world.check(cfg, 5)
    one = config.load("digits_moco.yaml", ["train.batch_size=48", "model.bn_splits=2"])
    world.check(one, 2)


def with_splits(n: int, *extra: str) -> config.Config:
    return config.load("digits_moco.yaml", ["train.batch_size=48", f"model.bn_splits={n}", *extra])


def test_world_size_change_on_resume_is_allowed_iff_bn_groups_stay():
    assert world.resume_problem(with_splits(1), 4, with_splits(2), 2) == ""
    assert world.resume_problem(with_splits(4), 1, with_splits(1), 4) == ""
    assert world.resume_problem(with_splits(1), 2, with_splits(1), 2) == ""
    assert "4 BatchNorm groups" in world.resume_problem(with_splits(2), 2, with_splits(2), 1)
    assert world.resume_problem(with_splits(1), 2, with_splits(1), 3) != ""
    sync = with_splits(1, "model.sync_bn=true")
    assert world.resume_problem(sync, 4, sync, 2) == world.resume_problem(sync, 2, sync, 1) == ""
    # a checkpoint without a recorded world size keeps the old rule: bn_splits must not change
    assert world.resume_problem(with_splits(1), None, with_splits(1), 2) == ""
    assert world.resume_problem(with_splits(1), None, with_splits(2), 1) != ""


def test_stop_in_the_last_step_saves_before_the_monitor_and_resume_on_a_device(
    tmp_path, monkeypatch
):
    """SIGTERM during an epoch's last step: the checkpoint is on disk before the kNN monitor
    starts; the resume runs the epoch's end. Then a resume onto another device (emulated by
    "meta": its tensors cannot become RNG states, as CUDA tensors cannot) loads to the CPU."""
    cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", *TINY])
    last = tmp_path / "checkpoints" / "last.pt"
    steps = 1437 // 32
    step, knn_monitor = loop.train_step, monitor.evaluate
    seen: list[object] = []

    def train_step(run, *args):
        if run.state.step_in_epoch == steps - 1:
            signal.raise_signal(signal.SIGTERM)  # arrives during the last step
        return step(run, *args)

    def evaluate(run):
        state = torch.load(last, weights_only=True) if last.exists() else None
        seen.append(state and (state["epoch"], state["step_in_epoch"]))
        return knn_monitor(run)

    monkeypatch.setattr(loop, "train_step", train_step)
    monkeypatch.setattr(monitor, "evaluate", evaluate)
    assert loop.run_training(cfg) == 0
    assert seen == []  # the monitor did not run before the save
    state = torch.load(last, weights_only=True)
    assert (state["epoch"], state["step_in_epoch"]) == (0, steps)
    assert state["world_size"] == 1

    monkeypatch.setattr(loop, "train_step", step)
    assert loop.run_training(cfg) == 0  # resume: straight to the epoch's end
    assert seen == [(1, 0)]  # the epoch's checkpoint is written before its monitor
    state = torch.load(last, weights_only=True)
    assert (state["epoch"], state["step_in_epoch"]) == (1, 0)

    setup = loop.setup

    def on_device(cfg):
        run = setup(cfg)
        run.device = torch.device("meta")  # what map_location=run.device would load onto
        return run

    monkeypatch.setattr(loop, "setup", on_device)
    monkeypatch.setattr(
        checkpoint, "set_rng_state", lambda s: seen.append({t.device.type for t in rng(s)})
    )
    assert loop.run_training(cfg) == 0  # finished run: restore, nothing left to train
    assert seen[-1] == {"cpu"}


def rng(state: dict) -> list[torch.Tensor]:
    return [state["torch"], *state["cuda"], state["numpy"][1]]


def test_restore_applies_the_world_size_rule(tmp_path):
    """A checkpoint of 2 ranks x bn_splits=1 resumes in one process with bn_splits=2 (the same
    BatchNorm groups) and is refused with bn_splits=1 (exit 2 via ConfigError)."""
    small = [f"out_dir={tmp_path}", *TINY]
    saved_run = loop.setup(config.load("digits_moco.yaml", [*small, "model.bn_splits=1"]))
    state = checkpoint.state_dict(saved_run)
    state["world_size"] = 2  # as if written by 2 ranks
    two_splits = loop.setup(config.load("digits_moco.yaml", [*small, "model.bn_splits=2"]))
    checkpoint.restore(two_splits, state)
    one_split = loop.setup(config.load("digits_moco.yaml", [*small, "model.bn_splits=1"]))
    with pytest.raises(ConfigError, match=r"2 rank\(s\) x model.bn_splits=1 \(2 BatchNorm"):
        checkpoint.restore(one_split, state)
    del state["world_size"]  # an older checkpoint: bn_splits must stay
    checkpoint.restore(one_split, state)
    with pytest.raises(ConfigError, match="model.bn_splits"):
        checkpoint.restore(two_splits, state)


def test_finish_without_leaving_destroys_the_group_and_returns(monkeypatch):
    calls = []
    monkeypatch.setattr(dist, "is_on", lambda: True)
    monkeypatch.setattr(dist.td, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(dist.td, "destroy_process_group", lambda: calls.append("destroy"))
    monkeypatch.setattr(dist.os, "_exit", lambda s: calls.append(("exit", s)))
    dist.finish(0, leave=False)  # submitit: the task must return its result
    assert calls == ["barrier", "destroy"]
    dist.finish(130)
    assert calls[-1] == ("exit", 130)
