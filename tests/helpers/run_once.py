"""A session-scoped result computed once per test run and shared by every pytest-xdist worker.

pytest-xdist's documented pattern ("Making session-scoped fixtures execute only once"): the first
worker to ask computes the value under a lock in the directory that all workers' temporary folders
share (``tmp_path_factory.getbasetemp().parent``), writes it as JSON, and every later caller (any
worker) reads it. In a run without workers the same code computes it once in the one process.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder shared by this run's workers (the one process's base folder without workers)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(name: str, tmp_path_factory: pytest.TempPathFactory, make: Callable[[Path], object]):
    """``make(folder)``'s JSON-able value, computed by the first caller of this run only."""
    root = shared_dir(tmp_path_factory)
    result = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not result.exists():
            work = root / f"{name}.work"
            work.mkdir(exist_ok=True)
            tmp = result.with_suffix(".tmp")
            tmp.write_text(json.dumps(make(work)))
            tmp.replace(result)
    return json.loads(result.read_text())
