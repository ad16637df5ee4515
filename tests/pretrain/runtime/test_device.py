"""Which device and process-group backend a process picks (``pretrain.runtime.dist.device_type``):
CUDA and NCCL on a GPU node by default, the CPU and gloo wherever ``NEGMINE_DEVICE=cpu``, which the
test suite sets for itself and every process it starts, so the suite passes on a CUDA host. CUDA is
faked here (``torch.cuda.is_available``): no GPU is needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pretrain.config import ConfigError
from pretrain.engine import checkpoint
from pretrain.runtime import dist
from tests.helpers.ddp import clean_env, free_port
from tests.helpers.paths import HELPERS, ROOT

WORKER = HELPERS / "ddp_worker.py"
# ddp_worker.py --control in a process where torch believes one GPU exists (a CUDA host)
FAKE_CUDA = (
    "import runpy, sys, torch\n"
    "torch.cuda.is_available = lambda: True\n"
    "torch.cuda.device_count = lambda: 1\n"
    "torch.cuda.set_device = lambda device: None\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def fake_cuda(monkeypatch: pytest.MonkeyPatch, available: bool, count: int = 2) -> list[int]:
    """CUDA as torch would report it on a host with ``count`` GPUs; returns set_device's calls."""
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count if available else 0)
    monkeypatch.setattr(torch.cuda, "set_device", calls.append)
    return calls


@pytest.mark.parametrize(
    ("env", "cuda", "device"),
    [
        (None, True, "cuda"),  # a user's run on a GPU node: the GPU by default
        ("", True, "cuda"),
        ("auto", True, "cuda"),
        (None, False, "cpu"),
        ("cpu", True, "cpu"),  # the test suite's setting on a CUDA host
        ("CPU", False, "cpu"),
        ("cuda", True, "cuda"),
    ],
)
def test_device_type_and_backend(monkeypatch, env, cuda, device):
    fake_cuda(monkeypatch, cuda)
    if env is None:
        monkeypatch.delenv(dist.DEVICE_ENV, raising=False)
    else:
        monkeypatch.setenv(dist.DEVICE_ENV, env)
    assert dist.device_type() == device
    assert dist.backend(device) == {"cuda": "nccl", "cpu": "gloo"}[device]


@pytest.mark.parametrize(
    ("env", "cuda", "message"),
    [("gpu", True, "must be one of auto, cpu, cuda"), ("cuda", False, "sees no CUDA device")],
)
def test_a_bad_device_setting_is_a_config_error_naming_the_variable(
    monkeypatch, env, cuda, message
):
    fake_cuda(monkeypatch, cuda)
    monkeypatch.setenv(dist.DEVICE_ENV, env)
    with pytest.raises(ConfigError, match=f"NEGMINE_DEVICE.*{message}"):
        dist.device_type()


@pytest.mark.parametrize(
    ("env", "backend", "device"), [(None, "nccl", "cuda:1"), ("cpu", "gloo", "cpu")]
)
def test_init_from_env_on_a_gpu_node(monkeypatch, env, backend, device):
    """Rank 1 of 2 on a 2-GPU node: NCCL on its own GPU by default, gloo on the CPU when pinned."""
    calls = fake_cuda(monkeypatch, True)
    seen: dict[str, object] = {}
    for k, v in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(k, v)
    if env is None:
        monkeypatch.delenv(dist.DEVICE_ENV, raising=False)
    else:
        monkeypatch.setenv(dist.DEVICE_ENV, env)
    monkeypatch.setattr(dist, "is_on", lambda: False)  # the recorded group is never used
    monkeypatch.setattr(dist.td, "init_process_group", lambda b, **k: seen.update(backend=b))
    assert str(dist.init_from_env()) == device
    assert seen["backend"] == backend
    assert calls == ([1] if backend == "nccl" else [])


def test_the_suite_and_its_launchers_pin_the_cpu():
    """conftest.py's setting reaches this process and the environments the DDP, multi-rank,
    srun-style and CLI tests start their processes with (all built from ``os.environ``)."""
    assert os.environ[dist.DEVICE_ENV] == "cpu"
    assert clean_env()[dist.DEVICE_ENV] == "cpu"
    assert clean_env(RANK="1", WORLD_SIZE="2")[dist.DEVICE_ENV] == "cpu"
    assert dist.device_type() == "cpu"


def control(out: Path, world: int, **extra: str) -> list[dict]:
    """``world`` ranks of ``ddp_worker.py --control`` in processes that believe CUDA exists."""
    port = str(free_port())
    procs = []
    for r in range(world):
        env = clean_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world), **extra)
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [sys.executable, "-c", FAKE_CUDA, str(WORKER), "--control", str(out)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd=ROOT, env=env))  # fmt: skip
    try:
        outs = [p.communicate(timeout=300) for p in procs]  # torch imports on a loaded host
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (o, e) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"rank failed:\n{o}\n{e}"
    return [torch.load(out / f"control{r}.pt") for r in range(world)]


def test_ranks_started_by_the_suite_use_gloo_on_the_cpu_where_cuda_is_visible(tmp_path):
    """Two ranks with CUDA visible (faked) and the suite's environment: a gloo group, CPU
    tensors. Without the setting they would pick NCCL, which two ranks on one GPU cannot share."""
    got = control(tmp_path, 2)
    assert [(g["rank"], g["backend"], g["device"]) for g in got] == [
        (0, "gloo", "cpu"),
        (1, "gloo", "cpu"),
    ]
    assert all(g["any_rank"]["last_only"] for g in got)


def test_a_process_without_the_setting_takes_the_gpu(tmp_path):
    """The same faked CUDA host, ``NEGMINE_DEVICE`` unset (a user's run): the GPU."""
    env = {dist.DEVICE_ENV: "auto"}
    (got,) = control(tmp_path, 1, **env)
    assert got["backend"] is None and got["device"] == "cuda:0"


@pytest.mark.cuda(gpus=2)
def test_nccl_ranks_one_gpu_each(tmp_path, on_cuda):
    """The NCCL path itself, on a host with a GPU per rank: each rank on its own GPU."""
    port = str(free_port())
    procs = []
    for r in range(2):
        env = clean_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2")
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [sys.executable, str(WORKER), "--control", str(tmp_path)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd=ROOT, env=env))  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"rank failed:\n{o}\n{e}"
    for r in range(2):
        got = torch.load(tmp_path / f"control{r}.pt")
        assert (got["backend"], got["device"]) == ("nccl", f"cuda:{r}")
        assert got["any_rank"] == {"none": False, "last_only": True, "first_only": True,
                                   "all": True}  # fmt: skip


@pytest.mark.parametrize(("env", "device"), [("cpu", "cpu"), ("auto", "cuda")])
def test_pinned_batches_and_cuda_rng_follow_the_run_s_device(monkeypatch, tmp_path, env, device):
    """On a CUDA host (faked) a CPU-pinned run neither pins its batches nor touches the CUDA RNG
    (a real CUDA call would fail here); a GPU run pins them for the loop's non-blocking upload
    and saves the CUDA RNG state."""
    from pretrain import build, config

    fake_cuda(monkeypatch, True)
    monkeypatch.setenv(dist.DEVICE_ENV, env)
    state = torch.ones(4, dtype=torch.uint8)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: state)
    cfg = config.load("digits_moco.yaml", [f"out_dir={tmp_path}", "data.num_workers=0"])
    assert build.datasets_for(cfg).train_loader.pin_memory == (device == "cuda")
    assert checkpoint.rng_state()["cuda"] == ([state] if device == "cuda" else [])
