"""Shared pytest hooks: ``slow`` tests need ``--runslow``; ``cuda`` tests need a CUDA device; a hang
in interpreter teardown cannot eat the session's verdict (``teardown_guard.py``)."""

from __future__ import annotations

import pytest
import torch
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
