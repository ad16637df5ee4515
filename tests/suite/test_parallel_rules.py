"""The suite's pytest-xdist rules (tests/conftest.py): a plain ``python -m pytest`` runs on
``NEGMINE_TEST_WORKERS`` workers, a run of named files in one process;
the tests of a file run on one worker (``--dist loadfile``); a worker's torch runs on its share
of the cores; a test marked ``early`` starts first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.helpers.paths import ROOT

PROBE = """
import os

import pytest
import torch


@pytest.fixture(scope="module", params=["a", "b"])
def built(request):
    return request.param


@pytest.mark.parametrize("i", range(4))
def test_uses_built(built, i):
    pass


@pytest.mark.parametrize("i", range(8))
def test_free(i):
    pass


@pytest.mark.early
def test_marked_early():
    pass


def test_threads_are_the_workers_share():
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert os.environ["PYTEST_XDIST_WORKER_COUNT"] == "2"
    assert torch.get_num_threads() == share == int(os.environ["OMP_NUM_THREADS"])
"""

OTHER = """
import pytest


@pytest.mark.parametrize("i", range(6))
def test_other(i):
    pass
"""


def project_addopts() -> str:
    """pyproject.toml's pytest ``addopts``, as written (``-ra -n auto --dist loadfile``)."""
    text = (ROOT / "pyproject.toml").read_text()
    match = re.search(r'^addopts = "(.+)"$', text.split("[tool.pytest.ini_options]")[1], re.M)
    assert match, "pyproject.toml has no [tool.pytest.ini_options] addopts"
    return match.group(1)


def run_probe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest over two probe files with the project's own ``addopts`` (in a pytest.ini)."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "test_other.py").write_text(OTHER)
    (tmp_path / "pytest.ini").write_text(f"[pytest]\naddopts = {project_addopts()}\n")
    drop = (
        "PYTEST_CURRENT_TEST",
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    )  # a top-level run, not one inside a worker
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONPATH=str(ROOT))  # never tests/ itself: tests/pretrain/ would be `pretrain`
    env.update(NEGMINE_TEST_WORKERS="2")
    argv = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-v"]
    return subprocess.run(
        [*argv, *args], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
    )


def test_plain_run_is_parallel_and_keeps_each_file_on_one_worker(tmp_path):
    """Two workers from the project's addopts and our count hook; every test of a file (so every
    user of a module-scoped fixture) on one worker, on any pytest (this also runs in CI's
    environment pinned to the floors)."""
    run = run_probe(tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert re.search(r"created: 2/2 workers|2 workers \[", run.stdout), run.stdout[-2000:]
    assert "LoadFileScheduling" in run.stdout, run.stdout[-2000:]
    where = defaultdict(set)
    for worker, name in re.findall(r"\[(gw\d+)\][^\n]*? PASSED (test_\w+\.py)::", run.stdout):
        where[name].add(worker)
    assert {k: len(v) for k, v in where.items()} == {"test_probe.py": 1, "test_other.py": 1}, (
        where,
        run.stdout[-3000:],
    )
    assert "24 passed" in run.stdout


def test_a_run_of_named_files_stays_in_one_process(tmp_path):
    run = run_probe(tmp_path, "test_probe.py", "-k", "not threads")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "workers" not in run.stdout and "[gw" not in run.stdout, run.stdout[-2000:]
    assert "17 passed, 1 deselected" in run.stdout
    ran = re.findall(r"^(test_probe\.py::\S+) PASSED", run.stdout, flags=re.M)
    assert ran[0] == "test_probe.py::test_marked_early", ran  # started first
