"""teardown_guard: a pytest run whose tests are done but whose process hangs in shutdown leaves
with the tests' verdict and the stacks of the hang, instead of running into the CI limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)


HANG_IN_A_THREAD = """
import threading

def test_passes():
    threading.Thread(target=threading.Event().wait, name="never_ends").start()  # non-daemon
"""

HANG_AND_FAIL = (
    HANG_IN_A_THREAD
    + """
def test_fails():
    assert False
"""
)

HANG_HOLDING_THE_GIL = """
import atexit, re

def hold_the_gil():  # catastrophic backtracking: the regex engine never releases the GIL
    re.match(r"(a+)+$", "a" * 64 + "b")

def test_passes():
    atexit.register(hold_the_gil)
"""

HANG_WITH_A_CHILD_ON_OUR_STDOUT = (
    HANG_IN_A_THREAD
    + """
import subprocess

def test_leaves_a_child():  # inherits stdout/stderr: the caller's pipe stays open while it lives
    subprocess.Popen(["sleep", "600"])
"""
)

CLEAN = """
def test_passes():
    pass
"""


def run(
    tmp_path: Path, source: str, grace: float = 2.0, timeout: float = 120, *flags: str
) -> subprocess.CompletedProcess:
    (tmp_path / "test_case.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NEGMINE_TEARDOWN_GRACE_S": str(grace)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "tests.helpers.teardown_guard",
           "-p", "no:cacheprovider", *flags, "test_case.py"]  # fmt: skip
    return subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_hang_after_passing_tests_exits_0_with_the_stacks(tmp_path):
    proc = run(tmp_path, HANG_IN_A_THREAD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert "non-daemon threads: ['MainThread', 'never_ends']" in proc.stderr, proc.stderr
    assert "in wait" in proc.stderr  # the hanging thread's stack
    assert "leaving with the session's status 0" in proc.stderr


def test_a_hang_after_a_failure_keeps_the_failure(tmp_path):
    proc = run(tmp_path, HANG_AND_FAIL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout
    assert "leaving with the session's status 1" in proc.stderr


def test_a_hang_holding_the_gil_is_dumped_by_faulthandler(tmp_path):
    proc = run(tmp_path, HANG_HOLDING_THE_GIL)
    assert proc.returncode == 1  # faulthandler's exit: the verdict cannot be read without the GIL
    assert "1 passed" in proc.stdout
    assert "hold_the_gil" in proc.stderr, proc.stderr  # the stack names the hanging function


def test_a_child_holding_our_stdout_is_killed(tmp_path):
    # subprocess.run reads the pipes to EOF: were the sleep left alive, this would time out. "-s":
    # pytest's capture would give the child a temporary file instead of our pipe.
    proc = run(tmp_path, HANG_WITH_A_CHILD_ON_OUR_STDOUT, 2.0, 60, "-s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    assert "sleep 600" in proc.stderr and "killed pid" in proc.stderr, proc.stderr


@pytest.mark.parametrize("grace", [60.0, 0.0])
def test_a_clean_exit_is_untouched(tmp_path, grace):
    proc = run(tmp_path, CLEAN, grace)
    assert proc.returncode == 0 and "teardown_guard" not in proc.stderr, proc.stderr
