"""The suite's pytest-xdist rules (tests/conftest.py): a plain ``python -m pytest`` runs on
``NEGMINE_TEST_WORKERS`` workers, a run of named files in one process; the tests of a module-scoped
fixture (per parameter) and of an ``exclusive`` name each run on one worker; a worker's torch
runs on its share of the cores; a test marked ``early`` starts first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent

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


@pytest.mark.exclusive("probe")
@pytest.mark.parametrize("i", range(4))
def test_exclusive(i):
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


def run_probe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(PROBE)
    drop = (
        "PYTEST_CURRENT_TEST",
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    )  # a top-level run, not one inside a worker
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]),
               NEGMINE_TEST_WORKERS="2")  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-v", *args],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
    )  # fmt: skip


def test_plain_run_is_parallel_and_groups_what_shares_a_fixture_or_a_name(tmp_path):
    run = run_probe(tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert re.search(r"created: 2/2 workers|2 workers \[", run.stdout), run.stdout[-2000:]
    where = defaultdict(set)
    for worker, name in re.findall(r"\[(gw\d+)\][^\n]*? PASSED (test_probe\.py::\S+)", run.stdout):
        test = name.split("::")[1]
        if test.startswith("test_uses_built"):
            where[f"built {test.split('[')[1][0]}"].add(worker)
        elif test.startswith("test_exclusive"):
            where["exclusive"].add(worker)
        elif test.startswith("test_free"):
            where["free"].add(worker)
    assert {k: len(v) for k, v in where.items() if k != "free"} == {
        "built a": 1, "built b": 1, "exclusive": 1}, (where, run.stdout[-3000:])  # fmt: skip
    assert "22 passed" in run.stdout


def test_a_run_of_named_files_stays_in_one_process(tmp_path):
    run = run_probe(tmp_path, "test_probe.py", "-k", "not threads")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "workers" not in run.stdout and "[gw" not in run.stdout, run.stdout[-2000:]
    assert "21 passed, 1 deselected" in run.stdout
    ran = re.findall(r"^(test_probe\.py::\S+) PASSED", run.stdout, flags=re.M)
    assert ran[0] == "test_probe.py::test_marked_early", ran  # started first
