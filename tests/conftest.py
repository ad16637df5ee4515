"""Shared pytest hooks: ``slow`` tests need ``--runslow``; ``cuda`` tests need a CUDA device; a hang
in interpreter teardown cannot eat the session's verdict (``teardown_guard.py``)."""

from __future__ import annotations

import os

# Inductor compiles in-process with one thread: no compile-worker pool, whose shutdown at exit is a
# known source of hangs (pytorch#162199, #189290) and which a test's subprocesses inherit this way
# too. Set before torch is imported, since inductor reads it when its config is first imported.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from teardown_guard import pytest_sessionfinish, pytest_unconfigure  # noqa: F401 (hooks)


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    skip_slow = pytest.mark.skip(reason="needs --runslow")
    skip_cuda = pytest.mark.skip(reason="needs a CUDA device")
    run_slow = config.getoption("--runslow")
    has_cuda = torch.cuda.is_available()
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        if "cuda" in item.keywords and not has_cuda:
            item.add_marker(skip_cuda)
