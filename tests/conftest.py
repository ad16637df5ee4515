"""Shared pytest hooks: ``slow`` tests need ``--runslow``; ``cuda`` tests need a CUDA device
(``@pytest.mark.cuda(gpus=2)``: that many); a hang in interpreter teardown cannot eat the session's
verdict (``teardown_guard.py``).

The suite trains on the CPU on any host: ``NEGMINE_DEVICE=cpu`` (``pretrain.dist.device_type``)
is set here, before any test runs, and every process a test starts inherits it, so the DDP tests'
ranks form gloo groups on CPU tensors even where CUDA is visible (several ranks cannot share one
GPU under NCCL). A ``cuda`` test that trains on the GPU asks for it with the ``on_cuda`` fixture
(or ``NEGMINE_DEVICE=cuda`` in its subprocess's environment)."""

from __future__ import annotations

import os

# Inductor compiles in-process with one thread: no compile-worker pool, whose shutdown at exit is a
# known source of hangs (pytorch#162199, #189290) and which a test's subprocesses inherit this way
# too. Set before torch is imported, since inductor reads it when its config is first imported.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
os.environ["NEGMINE_DEVICE"] = "cpu"  # pretrain.dist.DEVICE_ENV: gloo and CPU tensors everywhere

import pytest  # noqa: E402
import torch  # noqa: E402
from teardown_guard import pytest_sessionfinish, pytest_unconfigure  # noqa: F401 (hooks)


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    skip_slow = pytest.mark.skip(reason="needs --runslow")
    run_slow = config.getoption("--runslow")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        marker = item.get_closest_marker("cuda")
        if marker is not None:
            need = marker.kwargs.get("gpus", 1)
            if gpus < need:
                why = "needs a CUDA device" if need == 1 else f"needs {need} CUDA devices"
                item.add_marker(pytest.mark.skip(reason=f"{why} (found {gpus})"))


@pytest.fixture
def on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Train on the GPU in this test (and the processes it starts): ``NEGMINE_DEVICE=cuda``."""
    monkeypatch.setenv("NEGMINE_DEVICE", "cuda")
