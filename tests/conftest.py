"""Shared pytest hooks: ``slow`` tests need ``--runslow``; ``cuda`` tests need a CUDA device
(``@pytest.mark.cuda(gpus=2)``: that many); a hang in interpreter teardown cannot eat the session's
verdict (``teardown_guard.py``).

The suite trains on the CPU on any host: ``NEGMINE_DEVICE=cpu``
(``pretrain.runtime.dist.device_type``) is set here, before any test runs, and every process a test
starts inherits it, so the DDP tests' ranks form gloo groups on CPU tensors even where CUDA is
visible (several ranks cannot share one GPU under NCCL). A ``cuda`` test that trains on the GPU asks
for it with the ``on_cuda`` fixture (or ``NEGMINE_DEVICE=cuda`` in its subprocess's environment).

``python -m pytest -m quick`` is a first check of a few minutes at most (the whole suite takes ~14
on 2 cores): the tests of ``QUICK_FILES``, in-process unit tests of every package (pretrain,
negatives, linear_eval, slurm), are marked ``quick``; under ``-m quick`` a test that starts a
process (``subprocess``, ``multiprocessing``: a CLI run, DDP ranks, loader workers, a SLURM job)
is skipped when it tries, so a slow test added to one of these files leaves the subset by itself
(it still runs in the full suite). ``tests/test_quick_subset.py`` checks the list."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from pathlib import Path

# Inductor compiles in-process with one thread: no compile-worker pool, whose shutdown at exit is a
# known source of hangs (pytorch#162199, #189290) and which a test's subprocesses inherit this way
# too. Set before torch is imported, since inductor reads it when its config is first imported.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
os.environ["NEGMINE_DEVICE"] = "cpu"  # pretrain.runtime.dist.DEVICE_ENV: gloo and CPU tensors
# everywhere

import pytest  # noqa: E402
import torch  # noqa: E402
from teardown_guard import pytest_sessionfinish, pytest_unconfigure  # noqa: F401 (hooks)

TESTS = Path(__file__).resolve().parent

#: The quick subset (``-m quick``), paths under tests/: fast in-process tests of each package.
QUICK_FILES = (
    # pretrain
    "test_config.py",  # the config schema, overrides and validation
    "test_config_docs.py",  # the generated configuration reference
    "test_model.py",
    "test_checkpoint.py",
    "test_schedules.py",
    "test_queue.py",
    "test_knn.py",
    "test_threads.py",
    "test_losses.py",
    "test_multiview_losses.py",
    "test_queue_layout_loss.py",
    "test_reweighted_losses.py",
    "test_ring.py",
    "test_cider_loss.py",
    # negatives
    "test_negatives.py",  # every strategy in a training step
    "test_ocsvm.py",
    "test_mochi.py",
    "test_outliers.py",
    # linear_eval
    "evaluation/test_metrics.py",
    "evaluation/test_stats.py",
    "evaluation/test_table.py",
    "evaluation/test_select.py",
    # slurm: time formats and the checks before submitting
    "test_slurm.py",
)


def quick_run(config: pytest.Config) -> bool:
    """Whether this session selects the quick subset (``-m quick``)."""
    return (config.getoption("markexpr", "") or "").strip() == "quick"


def pytest_itemcollected(item):
    """Mark the tests of QUICK_FILES ``quick`` (before ``-m`` selects)."""
    path = item.path.resolve()
    if path.is_relative_to(TESTS) and path.relative_to(TESTS).as_posix() in QUICK_FILES:
        item.add_marker(pytest.mark.quick)


def _no_process(*args, **kwargs):
    pytest.skip("starts a process: not part of the quick subset (it runs in the full suite)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under ``-m quick``, starting a process skips the test (in its setup, call or teardown:
    module fixtures that start one skip their tests too)."""
    if not quick_run(item.config):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", _no_process)
        patch.setattr(multiprocessing.process.BaseProcess, "start", _no_process)
        yield


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
